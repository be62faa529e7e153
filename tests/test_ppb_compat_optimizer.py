"""``bertkit.compat.pytorch_pretrained_bert``'s BertAdam and OpenAIAdam against pytorch-pretrained-bert 0.6.2's.

Trajectories of both optimizers on the same parameters and gradients (every schedule, weight
decay and gradient clipping, on the CPU and on a GPU when there is one), the warnings and
errors both give, and ten fine-tuning steps of the tiny classifier of
``test_ppb_compat_models.py``. Nothing is downloaded.
"""

from __future__ import annotations

import logging

import pytest
import pytorch_pretrained_bert as ppb
import torch
from torch import nn

import bertkit.compat.pytorch_pretrained_bert as P
from ppb_compat_helpers import IGNORE_PPB_ADD_WARNING, batch_args, build_pair
from ppb_reference import make_batch

pytestmark = IGNORE_PPB_ADD_WARNING


SHAPES = [(36, 37), (37,), (99, 36), (5,), (3, 4, 5)]


def _param_lists(seed: int = 0) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    g = torch.Generator().manual_seed(seed)
    values = [torch.randn(s, generator=g) for s in SHAPES]
    return [nn.Parameter(v.clone()) for v in values], [nn.Parameter(v.clone()) for v in values]


def _set_grads(step: int, ours, reference) -> None:
    """Gradients of varied size (some clipped at max_grad_norm=1, some not); parameter 3 has none at step 2."""
    g = torch.Generator().manual_seed(100 + step)
    for i, (a, b) in enumerate(zip(ours, reference)):
        grad = torch.randn(a.shape, generator=g) * (0.01 if i % 2 else 0.5 * (step + 1))
        if i == 3 and step == 2:
            a.grad = b.grad = None
        else:
            a.grad, b.grad = grad.to(a.device, copy=True), grad.to(b.device, copy=True)


def _groups(params, weight_decay):
    return [{"params": params[:3]}, {"params": params[3:], "weight_decay": 0.0, "lr": 0.05}] if weight_decay \
        else params


@pytest.mark.parametrize("weight_decay,max_grad_norm", [(0.01, 1.0), (0.0, -1)], ids=["decay_clip", "plain"])
@pytest.mark.parametrize("schedule,warmup,t_total", [
    ("warmup_linear", 0.2, 8), ("warmup_cosine", 0.3, 8), ("warmup_constant", 0.25, 8), ("warmup_linear", -1, -1),
    ("none", -1, 8), (None, 0.1, 8),
])
def test_bert_adam_trajectory_matches_ppb(schedule, warmup, t_total, weight_decay, max_grad_norm, caplog):
    ours_params, ppb_params = _param_lists()
    args = dict(lr=0.01, warmup=warmup, t_total=t_total, schedule=schedule, weight_decay=weight_decay,
                max_grad_norm=max_grad_norm)
    with caplog.at_level(logging.WARNING):
        ours = P.BertAdam(_groups(ours_params, weight_decay), **args)
        reference = ppb.BertAdam(_groups(ppb_params, weight_decay), **args)
        assert ours.get_lr() == reference.get_lr() == [0]
        initial = [p.detach().clone() for p in ours_params]
        for step in range(10):
            _set_grads(step, ours_params, ppb_params)
            ours.step()
            reference.step()
            for a, b in zip(ours_params, ppb_params):
                torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
                if b.grad is not None:  # clipping happened in place, as clip_grad_norm_ does it
                    torch.testing.assert_close(a.grad, b.grad, atol=0, rtol=0)
            assert ours.get_lr() == reference.get_lr()
            if step == 0 and warmup > 0 and t_total > 0 and schedule not in (None, "none"):  # lr 0 at step 0
                assert all(torch.equal(a, b) for a, b in zip(ours_params, initial))
    for a, b in zip(ours_params, ppb_params):
        state, ref_state = ours.state[a], reference.state[b]
        assert state.keys() == ref_state.keys() == {"step", "next_m", "next_v"}
        assert state["step"] == ref_state["step"] == (9 if a is ours_params[3] else 10)
    assert all(not torch.equal(a, b) for a, b in zip(ours_params, initial))
    # the same warnings, in the same order (t_total < 0 at construction; training beyond t_total)
    messages = [(r.name.split(".")[0], r.getMessage()) for r in caplog.records]
    ours_messages = [m for lib, m in messages if lib == "bertkit"]
    assert ours_messages == [m for lib, m in messages if lib == "pytorch_pretrained_bert"]
    assert bool(ours_messages) == (t_total < 0 or schedule in ("warmup_linear", "warmup_cosine"))


@pytest.mark.parametrize("weight_decay,vector_l2,max_grad_norm", [(0.01, False, 1.0), (0.02, True, -1), (0, False, -1)],
                         ids=["decay_clip", "decay_vectors", "plain"])
@pytest.mark.parametrize("schedule,warmup,t_total", [
    ("warmup_linear", 0.2, 8), ("warmup_cosine", 0.3, 8), ("warmup_constant", 0.25, 8), ("warmup_linear", -1, -1),
    ("none", -1, 8),
])
def test_openai_adam_trajectory_matches_ppb(schedule, warmup, t_total, weight_decay, vector_l2, max_grad_norm,
                                            caplog):
    """0.6.2's OpenAIAdam: bias-corrected Adam, the schedule read after the step count advanced, decay after."""
    ours_params, ppb_params = _param_lists(seed=1)
    args = dict(lr=0.01, warmup=warmup, t_total=t_total, schedule=schedule, weight_decay=weight_decay,
                vector_l2=vector_l2, max_grad_norm=max_grad_norm)
    with caplog.at_level(logging.WARNING):
        ours = P.OpenAIAdam(_groups(ours_params, weight_decay), **args)
        reference = ppb.OpenAIAdam(_groups(ppb_params, weight_decay), **args)
        for step in range(10):
            _set_grads(step, ours_params, ppb_params)
            ours.step()
            reference.step()
            for a, b in zip(ours_params, ppb_params):
                torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
            assert ours.get_lr() == reference.get_lr()
    for a, b in zip(ours_params, ppb_params):
        state, ref_state = ours.state[a], reference.state[b]
        assert state.keys() == ref_state.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert state["step"] == ref_state["step"]
        torch.testing.assert_close(state["exp_avg_sq"], ref_state["exp_avg_sq"], atol=1e-9, rtol=1e-6)
    messages = [(r.name.split(".")[0], r.getMessage()) for r in caplog.records]
    ours_messages = [m for lib, m in messages if lib == "bertkit"]
    assert ours_messages == [m for lib, m in messages if lib == "pytorch_pretrained_bert"]
    assert ours.param_groups[0].keys() == reference.param_groups[0].keys()


def test_openai_adam_defaults_and_validation():
    ours = P.OpenAIAdam([nn.Parameter(torch.ones(2))], lr=0.1)
    reference = ppb.OpenAIAdam([nn.Parameter(torch.ones(2))], lr=0.1)
    assert {k: v for k, v in ours.defaults.items() if k != "schedule"} == \
        {k: v for k, v in reference.defaults.items() if k != "schedule"}
    for bad in (dict(lr=-1), dict(lr=0.1, schedule="cyclic"), dict(lr=0.1, b1=1.0), dict(lr=0.1, e=-1)):
        with pytest.raises(ValueError) as ours_error:
            P.OpenAIAdam([nn.Parameter(torch.ones(2))], **bad)
        with pytest.raises(ValueError) as ppb_error:
            ppb.OpenAIAdam([nn.Parameter(torch.ones(2))], **bad)
        assert str(ours_error.value) == str(ppb_error.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bert_adam_trajectory_matches_ppb_on_cuda():
    """The fused foreach kernels on the GPU against ppb's per-parameter ops there."""
    ours_params, ppb_params = _param_lists()
    ours_params = [nn.Parameter(p.detach().cuda()) for p in ours_params]
    ppb_params = [nn.Parameter(p.detach().cuda()) for p in ppb_params]
    args = dict(lr=0.01, warmup=0.2, t_total=8, weight_decay=0.01, max_grad_norm=1.0)
    ours, reference = P.BertAdam(_groups(ours_params, 0.01), **args), ppb.BertAdam(_groups(ppb_params, 0.01), **args)
    for step in range(10):
        _set_grads(step, ours_params, ppb_params)
        ours.step()
        reference.step()
        for a, b in zip(ours_params, ppb_params):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_bert_adam_schedule_object_and_validation(caplog):
    from pytorch_pretrained_bert.optimization import WarmupLinearSchedule as PpbWarmupLinear

    from bertkit.compat.pytorch_pretrained_bert.optimization import WarmupLinearSchedule

    with caplog.at_level(logging.WARNING):
        P.BertAdam([nn.Parameter(torch.ones(2))], lr=0.1, warmup=0.1, schedule=WarmupLinearSchedule(0.1, 10))
        ppb.BertAdam([nn.Parameter(torch.ones(2))], lr=0.1, warmup=0.1, schedule=PpbWarmupLinear(0.1, 10))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and messages[0] == messages[1] and "ineffective" in messages[0]
    for bad in (dict(lr=-1), dict(lr=0.1, schedule="cyclic"), dict(lr=0.1, b1=1.0), dict(lr=0.1, b2=-0.1),
                dict(lr=0.1, e=-1), dict(lr=0.1, warmup=1.5, t_total=10)):
        with pytest.raises(ValueError) as ours_error:
            P.BertAdam([nn.Parameter(torch.ones(2))], **bad)
        with pytest.raises(ValueError) as ppb_error:
            ppb.BertAdam([nn.Parameter(torch.ones(2))], **bad)
        assert str(ours_error.value) == str(ppb_error.value)
    schedule, reference = WarmupLinearSchedule(0.2, 10), PpbWarmupLinear(0.2, 10)
    assert [schedule.get_lr(s) for s in range(13)] == [reference.get_lr(s) for s in range(13)]


def test_bert_adam_fine_tuning_matches_ppb():
    """Ten real fine-tuning steps of the tiny classifier: losses and weights stay together."""
    ours, reference = build_pair("sequence_classification")
    ours.train(), reference.train()  # dropout is 0 in the tiny config
    batch = make_batch()
    labels = torch.tensor([3, 0, 1])

    def groups(model):
        no_decay = ("bias", "LayerNorm.weight")
        named = list(model.named_parameters())
        return [{"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": 0.01},
                {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0}]

    opt = P.BertAdam(groups(ours), lr=1e-3, warmup=0.1, t_total=10)
    ref_opt = ppb.BertAdam(groups(reference), lr=1e-3, warmup=0.1, t_total=10)
    for _ in range(10):
        for model, optimizer in ((ours, opt), (reference, ref_opt)):
            optimizer.zero_grad()
            loss = model(*batch_args(batch), labels=labels)
            loss.backward()
            optimizer.step()
            model.last_loss = loss.item()
        assert ours.last_loss == pytest.approx(reference.last_loss, abs=1e-4)
    want = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p, want[name], atol=1e-4, rtol=0, msg=name)
