"""The training engine on a tiny BERT and a toy regression model: learning, accumulation, exact resume,
checkpoints, non-finite steps, DDP (2 gloo processes via torchrun), metrics, optimizer groups, schedules.

Run as a script (``torchrun ... tests/test_training.py OUT``) it is the DDP worker of ``test_ddp_*``.
"""

from __future__ import annotations

import ast
import copy
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import default_collate

import bertkit
from bertkit.training import (
    NonFiniteLossError,
    SeededSampler,
    Trainer,
    TrainingConfig,
    build_optimizer,
    build_scheduler,
    cpu_supports_bf16,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    lr_multiplier,
    parameter_groups,
    plot_metrics,
)
from bertkit.training import checkpoint as ckpt
from conftest import run_torchrun

TINY = dict(vocab_size=97, hidden_size=32, num_attention_heads=2, intermediate_size=37, num_hidden_layers=2,
            max_position_embeddings=64)
L, MASK_ID, MASKED_PER_ROW = 16, 4, 3


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models are fastest on one thread, and immune to OpenMP spin contention on busy 2-core machines."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(seed)
    return bertkit.bert_for_pre_training_tiny(**TINY, hidden_dropout_prob=dropout,
                                              attention_probs_dropout_prob=dropout)


def unmasked_examples(n: int, seed: int = 0) -> list[dict]:
    """Learnable sequences: ``5 + (start + i) % 20`` (each token follows from its neighbours), the
    last 4 positions padded in every third row, NSP label = parity of the start."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for row, start in enumerate(torch.randint(0, 20, (n,), generator=g).tolist()):
        ids = 5 + (start + torch.arange(L)) % 20
        mask = torch.ones(L, dtype=torch.long)
        if row % 3 == 0:
            mask[-4:] = 0
            ids[-4:] = 0
        out.append(dict(input_ids=ids, token_type_ids=(torch.arange(L) >= L // 2).long(), attention_mask=mask,
                        nsp_labels=torch.tensor(start % 2)))
    return out


def mask_rows(batch: dict, generator: torch.Generator) -> dict:
    """Exactly MASKED_PER_ROW real, non-first positions per row become [MASK] with labels (so every
    micro-batch carries the same number of MLM targets per example)."""
    ids, labels = batch["input_ids"].clone(), torch.full_like(batch["input_ids"], -100)
    for row in range(ids.shape[0]):
        real = int(batch["attention_mask"][row].sum())
        pos = torch.randperm(real - 1, generator=generator)[:MASKED_PER_ROW] + 1
        labels[row, pos] = ids[row, pos]
        ids[row, pos] = MASK_ID
    return {**batch, "input_ids": ids, "mlm_labels": labels}


def examples(n: int, seed: int = 0) -> list[dict]:
    """Pre-masked examples (masking fixed per example), for the default collate."""
    g = torch.Generator().manual_seed(seed + 1000)
    return [{k: v[0] for k, v in mask_rows({k: v[None] for k, v in e.items()}, g).items()}
            for e in unmasked_examples(n, seed)]


class MaskingCollator:
    """Masks at collate time with its own generator, and checkpoints it (the data-position contract)."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, items: list[dict]) -> dict:
        return mask_rows(default_collate(items), self.generator)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def make_config(out, **overrides) -> TrainingConfig:
    base = dict(max_steps=10, learning_rate=3e-3, warmup_steps=2, batch_size=8, log_every=1, output_dir=str(out),
                device="cpu", progress_bar=False, seed=0, precision="fp32")
    return TrainingConfig(**{**base, **overrides})


def read_metrics(out) -> list[dict]:
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def assert_same_weights(a: nn.Module, b: nn.Module, exact: bool = True, **tol) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        if exact:
            assert torch.equal(sa[name], sb[name]), name
        else:
            torch.testing.assert_close(sa[name], sb[name], **tol, msg=name)


class Toy(nn.Module):
    """Linear regression with a training_step: the engine needs nothing BERT-specific."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 1)

    def training_step(self, batch):
        loss = ((self.linear(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()
        return loss, {"mean_y": batch["y"].mean()}


def toy_data(n: int, poison=()) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    x[list(poison)] = float("nan")
    return [{"x": x[i], "y": x[i].sum() if i not in poison else torch.tensor(1.0)} for i in range(n)]


# ---------------------------------------------------------------------- learning, metrics, eval
def test_loss_falls_and_metrics_lines_parse(tmp_path):
    model = tiny_model()
    config = make_config(tmp_path, max_steps=50, warmup_steps=5, eval_every=25)
    state = Trainer(model, examples(64), config=config, eval_dataset=examples(16, seed=1)).train()
    assert state.step == 50 and state.epoch == 6 and state.examples_seen == 400
    records = read_metrics(tmp_path)
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 51))
    for key in ("lr", "loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "grad_norm", "tokens_per_s",
                "examples_per_s", "elapsed_s", "epoch"):
        assert key in train[0], key
    first, last = (sum(r["loss"] for r in part) / 5 for part in (train[:5], train[-5:]))
    assert last < 0.7 * first, (first, last)
    assert [r["lr"] for r in train[:6]] == pytest.approx([0.0, 6e-4, 1.2e-3, 1.8e-3, 2.4e-3, 3e-3])  # warmup 5
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [25, 50] and evals[0]["examples"] == 16
    assert evals[1]["loss"] < evals[0]["loss"]


def test_tokens_per_second_counts_real_tokens(tmp_path):
    data = examples(6)  # rows 0 and 3 have 4 padded positions: 6 * 16 - 8 = 88 real tokens
    Trainer(tiny_model(), data, config=make_config(tmp_path, max_steps=1, batch_size=6)).train()
    record = read_metrics(tmp_path)[0]
    assert record["tokens_per_s"] / record["examples_per_s"] == pytest.approx(88 / 6, rel=1e-3)


def test_evaluations_with_a_stateful_eval_collator_repeat_exactly(tmp_path):
    model = tiny_model()
    trainer = Trainer(model, unmasked_examples(16), config=make_config(tmp_path), collate_fn=MaskingCollator(1),
                      eval_dataset=unmasked_examples(16, seed=2), eval_collate_fn=MaskingCollator(2))
    assert trainer.evaluate() == trainer.evaluate()  # same masks each time, though the collator draws them


def test_evaluate_weights_metrics_by_examples(tmp_path):
    data = toy_data(10)  # eval batches of 4, 4, 2: an unweighted mean of batch means would differ
    trainer = Trainer(Toy(), toy_data(8), config=make_config(tmp_path, batch_size=4, eval_batch_size=4),
                      eval_dataset=data)
    result = trainer.evaluate()
    expected = torch.stack([d["y"] for d in data]).mean().item()
    assert result["mean_y"] == pytest.approx(expected, rel=1e-6)
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["split"] == "eval"


# ---------------------------------------------------------------------- equivalences
def test_gradient_accumulation_matches_full_batch(tmp_path):
    full, accumulated = tiny_model(), tiny_model()
    Trainer(full, examples(32), config=make_config(tmp_path / "a", max_steps=6)).train()
    Trainer(accumulated, examples(32),
            config=make_config(tmp_path / "b", max_steps=6, gradient_accumulation_steps=2)).train()
    assert_same_weights(full, accumulated, exact=False, rtol=1e-5, atol=1e-6)
    assert not torch.equal(full.cls.predictions.bias, tiny_model().cls.predictions.bias)  # it did train
    # Adam and clipping hide a gradient's scale from the weights; the logged (pre-clip) norm does not
    norms = [[r["grad_norm"] for r in read_metrics(tmp_path / run)] for run in ("a", "b")]
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)


def test_resume_after_interrupt_is_bit_identical(tmp_path):
    """Dropout on, masks drawn by a stateful collator, 40 examples = 5 steps per epoch: the run is killed at
    step 7, resumes from the checkpoint at step 5 (an epoch boundary) and must end where an unbroken run ends."""
    def run(out, model, collator_seed, **kw):
        config = make_config(out, max_steps=12, save_every=5, **kw)
        return Trainer(model, unmasked_examples(40), config=config, collate_fn=MaskingCollator(collator_seed))

    reference = tiny_model(dropout=0.1)
    run(tmp_path / "ref", reference, collator_seed=1).train()

    class Crash(Exception):
        pass

    def crash_at_7(trainer):
        if trainer.state.step == 7:
            raise Crash

    interrupted = run(tmp_path / "run", tiny_model(dropout=0.1), collator_seed=1)
    interrupted.add_callback("on_step_end", crash_at_7)
    with pytest.raises(Crash):
        interrupted.train()
    assert ckpt.step_of(latest_checkpoint(tmp_path / "run")) == 5

    resumed_model = tiny_model(seed=123, dropout=0.1)  # other init and collator seed: both must be restored
    resumed = run(tmp_path / "run", resumed_model, collator_seed=99)
    state = resumed.train(resume_from="latest")
    assert state.step == 12 and state.epoch == 2
    assert_same_weights(reference, resumed_model, exact=True)
    ref_lines, run_lines = read_metrics(tmp_path / "ref"), read_metrics(tmp_path / "run")
    assert [r["step"] for r in run_lines] == list(range(1, 13))  # the lines of steps 6-7 were rewritten
    assert [r["loss"] for r in run_lines] == [r["loss"] for r in ref_lines]


def test_stop_from_callback_saves_and_resumes(tmp_path):
    model = tiny_model()
    config = make_config(tmp_path, max_steps=6, save_every=None, keep_last=None)
    trainer = Trainer(model, examples(32), config=config,
                      callbacks={"on_step_end": lambda t: setattr(t, "should_stop", t.state.step == 3)})
    assert trainer.train().step == 3
    assert [ckpt.step_of(p) for p in list_checkpoints(tmp_path)] == [3]
    reference = tiny_model()
    Trainer(reference, examples(32), config=make_config(tmp_path / "ref", max_steps=6)).train()
    resumed_model = tiny_model(seed=5)
    Trainer(resumed_model, examples(32), config=config).train(resume_from=list_checkpoints(tmp_path)[0])
    assert_same_weights(reference, resumed_model, exact=True)


def test_resume_with_prefetching_workers_keeps_the_data_position(tmp_path):
    """Workers fetch batches ahead of the loop; the checkpoint must hold the position of the last *consumed* one."""
    config = make_config(tmp_path, max_steps=7, save_every=3, num_workers=2)
    reference = tiny_model()
    Trainer(reference, examples(40), config=config.replace(output_dir=str(tmp_path / "ref"))).train()
    stop_at_3 = {"on_step_end": lambda t: setattr(t, "should_stop", t.state.step == 3)}
    Trainer(tiny_model(), examples(40), config=config, callbacks=stop_at_3).train()
    assert load_checkpoint(latest_checkpoint(tmp_path))["ranks"][0]["data"]["sampler"]["position"] == 24
    resumed = tiny_model(seed=4)
    Trainer(resumed, examples(40), config=config).train(resume_from="latest")
    assert_same_weights(reference, resumed, exact=True)


# ---------------------------------------------------------------------- checkpoints
def test_keep_last_rotation_and_latest(tmp_path):
    config = make_config(tmp_path, max_steps=7, save_every=2, keep_last=2)
    Trainer(tiny_model(), examples(16), config=config).train()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000006", "step-00000007"]
    assert latest_checkpoint(tmp_path).name == "step-00000007"
    assert latest_checkpoint(tmp_path / "nowhere") is None
    with pytest.raises(ValueError, match="already holds checkpoints"):  # a fresh run must not mix with old ones
        Trainer(tiny_model(), examples(16), config=config).train()
    with pytest.raises(FileNotFoundError):
        Trainer(tiny_model(), examples(16), config=config).train(resume_from=tmp_path / "missing")


def test_checkpoint_files_are_atomic_and_load_weights_only(tmp_path, monkeypatch):
    model = tiny_model()
    Trainer(model, examples(16), config=make_config(tmp_path, max_steps=2)).train()
    path = latest_checkpoint(tmp_path)
    state = torch.load(path / ckpt.STATE_FILE, weights_only=True)  # no pickled objects inside
    assert state["trainer"]["step"] == 2 and state["ranks"][0]["data"]["sampler"]["position"] == 16
    assert set(state) >= {"optimizer", "scheduler", "config", "metrics", "ranks"}
    assert "cls.predictions.bias" in load_file(path / ckpt.MODEL_FILE)
    clone = tiny_model(seed=7)
    load_checkpoint(path, clone)
    assert_same_weights(model, clone)

    def torn_save(obj, f, *args, **kwargs):  # writes half a file, then the disk "fills up"
        Path(f).write_bytes(b"\x80\x02partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="No space"):
        ckpt.save_checkpoint(tmp_path, 3, model, {"step": 3})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [path.name]  # no step-3, no temp left
    assert load_checkpoint(path)["trainer"]["step"] == 2


# ---------------------------------------------------------------------- non-finite steps
def test_nonfinite_loss_is_skipped(tmp_path, caplog):
    model = Toy()
    data = toy_data(32, poison=[5])  # in order, batches of 4: only step 2 is bad
    state = Trainer(model, data, config=make_config(tmp_path, max_steps=8, batch_size=4),
                    sampler=SeededSampler(32, shuffle=False)).train()
    assert state.nonfinite_steps == 1 and state.consecutive_nonfinite == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert "non-finite" in caplog.text
    records = read_metrics(tmp_path)
    assert [r["nonfinite_steps"] for r in records[:3]] == [0, 1, 1] and records[1]["loss"] is None
    assert all(r["loss"] is None or r["loss"] >= 0 for r in records)  # the NaN step's loss is left out


def test_persistent_nan_stops_with_clear_error(tmp_path):
    model = Toy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = make_config(tmp_path, max_steps=20, batch_size=4, max_nonfinite_steps=3)
    with pytest.raises(NonFiniteLossError, match=r"NaN/inf in 3 consecutive steps.*max_nonfinite_steps=3"):
        Trainer(model, toy_data(8, poison=range(8)), config=config).train()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no update was applied


# ---------------------------------------------------------------------- DDP
DDP_STEPS = 6


def _ddp_config(out, **kw) -> TrainingConfig:
    return make_config(out, max_steps=DDP_STEPS, save_every=3, **kw)


def test_ddp_two_processes_match_single_process(tmp_path):
    out = tmp_path / "ddp"
    result = run_torchrun(__file__, str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    single = tiny_model()  # one process, the same global batch of 8 in one micro-batch
    Trainer(single, examples(32), config=_ddp_config(tmp_path / "single")).train()
    distributed = tiny_model(seed=3)
    load_checkpoint(latest_checkpoint(out), distributed)
    assert_same_weights(single, distributed, exact=False, rtol=0, atol=1e-6)
    saved = load_checkpoint(latest_checkpoint(out))
    assert saved["world_size"] == 2 and len(saved["ranks"]) == 2
    assert [r["step"] for r in read_metrics(out) if r["split"] == "train"] == list(range(1, DDP_STEPS + 1))


def _ddp_worker(out: str) -> None:
    """Each of 2 ranks: micro-batch 2 × 2 accumulation = 4 examples; 8 per step over both ranks. Resumes once."""
    from bertkit.training.distributed import cleanup

    torch.set_num_threads(1)
    config = _ddp_config(out, gradient_accumulation_steps=2)
    stop_at_3 = {"on_step_end": lambda t: setattr(t, "should_stop", t.state.step == 3)}
    Trainer(tiny_model(), examples(32), config=config, callbacks=stop_at_3).train()
    Trainer(tiny_model(seed=9), examples(32), config=config).train(resume_from="latest")
    cleanup()


# ---------------------------------------------------------------------- pieces
def test_parameter_groups_exclude_biases_and_layernorm():
    model = tiny_model()
    decay, no_decay = parameter_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert not decayed & skipped and decayed | skipped == set(names.values())
    assert all(n.endswith("bias") or "LayerNorm" in n for n in skipped)
    assert {"cls.predictions.bias", "bert.embeddings.LayerNorm.weight",
            "bert.encoder.layer.0.attention.output.LayerNorm.weight"} <= skipped
    assert {"bert.embeddings.word_embeddings.weight", "bert.encoder.layer.1.attention.self.query.weight",
            "cls.seq_relationship.weight"} <= decayed
    optimizer = build_optimizer(model, TrainingConfig(max_steps=1, weight_decay=0.05))
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert optimizer.defaults["fused"] or optimizer.defaults["foreach"]


def test_a_model_scored_between_steps_sees_its_current_weights():
    # the fused AdamW kernel writes parameters without bumping their versions, the prepared inference kernels'
    # cue to rebuild: build_optimizer bumps them after each step (a reranker evaluated during training needs it)
    model = bertkit.BERT(bertkit.BERTConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    bertkit.optimize_for_inference(model)  # attaches prepared kernels; the model still trains
    model.train()
    reference = copy.deepcopy(model)  # its own kernels, prepared anew
    optimizer = build_optimizer(model, TrainingConfig(max_steps=1, learning_rate=0.1))
    ids = torch.randint(5, TINY["vocab_size"], (2, 7))
    with torch.no_grad():
        model(ids)  # the kernels are prepared from the weights before the step
    model(ids)[0].square().mean().backward()
    optimizer.step()
    with torch.no_grad():
        after = model(ids)[0]
        for p, q in zip(model.parameters(), reference.parameters()):
            q.copy_(p)
        expected = reference(ids)[0]
    torch.testing.assert_close(after, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("schedule", "power", "end", "expected"), [
    ("linear", 1.0, 0.0, {0: 0.0, 5: 0.5, 10: 1.0, 55: 0.5, 100: 0.0, 150: 0.0}),
    ("polynomial", 2.0, 0.0, {5: 0.5, 10: 1.0, 55: 0.25, 100: 0.0}),
    ("polynomial", 1.0, 0.1, {10: 1.0, 55: 0.55, 100: 0.1, 200: 0.1}),
    ("constant", 1.0, 0.0, {0: 0.0, 5: 0.5, 10: 1.0, 99: 1.0, 500: 1.0}),
])
def test_schedule_values(schedule, power, end, expected):
    for step, value in expected.items():
        got = lr_multiplier(step, warmup_steps=10, max_steps=100, schedule=schedule, power=power, end_ratio=end)
        assert got == pytest.approx(value), step


def test_scheduler_follows_config():
    config = TrainingConfig(max_steps=100, warmup_ratio=0.1, learning_rate=2e-3, schedule="linear")
    assert config.num_warmup_steps == 10
    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(2, 2))], lr=config.learning_rate)
    scheduler = build_scheduler(optimizer, config)
    seen = {}
    for step in range(101):
        seen[step] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
    assert seen[0] == 0.0 and seen[5] == pytest.approx(1e-3) and seen[10] == pytest.approx(2e-3)
    assert seen[55] == pytest.approx(1e-3) and seen[100] == 0.0
    assert scheduler.state_dict()["lr_lambdas"] == [None]  # the schedule comes from the config, not the file


@pytest.mark.parametrize(("field", "value"), [
    ("max_steps", 0), ("learning_rate", -1.0), ("weight_decay", float("nan")), ("adam_beta2", 1.0),
    ("schedule", "cosine"), ("precision", "fp8"), ("device", "tpu"), ("gradient_accumulation_steps", 0),
    ("warmup_ratio", 1.5), ("keep_last", 0), ("max_grad_norm", 0.0), ("num_workers", -1), ("log_every", 0),
])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"TrainingConfig.{field}"):
        TrainingConfig(**{"max_steps": 10, "batch_size": 32, field: value})


def test_config_cross_field_rules():
    with pytest.raises(ValueError, match="precision='fp16' needs CUDA"):
        TrainingConfig(max_steps=1, precision="fp16", device="cpu")
    with pytest.raises(ValueError, match="warmup_steps and warmup_ratio"):
        TrainingConfig(max_steps=1, warmup_steps=5, warmup_ratio=0.1)
    with pytest.raises(ValueError, match="Unknown TrainingConfig field"):
        TrainingConfig.from_dict({"max_steps": 1, "lr": 1.0})
    config = TrainingConfig(max_steps=1, batch_size=8, gradient_accumulation_steps=2)
    assert config.micro_batch_size(2) == 2 and config.replace(max_steps=5).max_steps == 5
    with pytest.raises(ValueError, match="world size"):
        config.micro_batch_size(3)
    assert TrainingConfig.from_dict(config.to_dict()) == config


def test_sampler_is_seeded_sharded_and_resumable():
    sampler = SeededSampler(10, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(10)) and list(sampler) == first  # same epoch, same order
    assert list(SeededSampler(10, seed=4)) != first
    sampler.set_epoch(1)
    assert list(sampler) != first
    order = list(SeededSampler(11, seed=3))  # 11 over 2 ranks: 5 each, strided, the 11th dropped
    assert [list(SeededSampler(11, seed=3, rank=r, world_size=2)) for r in range(2)] == [order[0:10:2],
                                                                                        order[1:10:2]]
    sampler.set_epoch(2)
    it = iter(sampler)
    head = [next(it) for _ in range(4)]
    restored = SeededSampler(10, seed=3)
    restored.load_state_dict(sampler.state_dict())
    full = SeededSampler(10, seed=3)
    full.set_epoch(2)
    assert head + list(restored) == list(full)
    assert list(restored) == list(full)  # the restored position applies to one iteration only
    with pytest.raises(ValueError, match="num_examples"):
        SeededSampler(12, seed=3).load_state_dict(sampler.state_dict())


def test_bf16_on_cpu_trains_or_falls_back(tmp_path):
    config = make_config(tmp_path, max_steps=3, precision="bf16")
    if cpu_supports_bf16():
        trainer = Trainer(tiny_model(), examples(24), config=config)
        assert trainer.precision == "bf16"
    else:
        with pytest.warns(UserWarning, match="no native bf16"):
            trainer = Trainer(tiny_model(), examples(24), config=config)
        assert trainer.precision == "fp32"
    trainer.train()
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in trainer.model.parameters())
    assert read_metrics(tmp_path)[-1]["loss"] > 0


def test_gradient_checkpointing_option(tmp_path):
    model = tiny_model()
    Trainer(model, examples(8), config=make_config(tmp_path, max_steps=1, gradient_checkpointing=True)).train()
    assert model.is_gradient_checkpointing
    with pytest.raises(ValueError, match="gradient_checkpointing_enable"):
        Trainer(Toy(), toy_data(8), config=make_config(tmp_path / "toy", gradient_checkpointing=True, batch_size=4))


def test_plot_metrics_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    Trainer(tiny_model(), examples(16), config=make_config(tmp_path, max_steps=3),
            eval_dataset=examples(8, seed=1)).train()
    png = plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "plots" / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_names_what_each_accuracy_is_measured_on(tmp_path, monkeypatch):
    """The demo's plot: a pretraining run's training-batch and held-out MLM accuracy are two numbers, neither the
    evaluation's accuracy at [MASK] positions: each curve says where it is measured and on what."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    records = [{"split": "train", "step": 10, "loss": 7.0, "mlm_accuracy": 0.05},
               {"split": "train", "step": 20, "loss": 6.5, "mlm_accuracy": 0.07},
               {"split": "eval", "step": 20, "loss": 6.3, "mlm_accuracy": 0.06}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **kwargs: drawn.append(figure))
    plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "metrics.png")
    legends = [[text.get_text() for text in axes.get_legend().get_texts()] for axes in drawn[0].axes]
    assert legends == [["loss, training batches", "loss, held-out"],
                       ["mlm_accuracy at all selected positions, training batches",
                        "mlm_accuracy at all selected positions, held-out"]]


def test_plot_metrics_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"split": "train", "step": 1, "loss": 1.0}\n')
    for name in [m for m in sys.modules if m.startswith("matplotlib.")] + ["matplotlib", "matplotlib.figure",
                                                                          "matplotlib.backends.backend_agg"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    assert plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "curves.png") is None
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not (tmp_path / "curves.png").exists()


#: the modeling modules the one run imports: what decides a run's numbers
RUN_NUMERICS = ("bertkit.modeling.numerics", "bertkit.modeling.fast")


def test_training_imports_no_task_code():
    """design.md §2: training works on any nn.Module; at module level it imports only itself, the utilities
    (bertkit.io, bertkit.checks, bertkit.devices, bertkit.progress) and, for the one run (training/run.py), what
    decides the numbers: the numerics it records and the float32 GEMM backend a resumed run keeps."""
    package = Path(bertkit.__file__).parent / "training"
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith("bertkit.tasks"), (path.name, name)
                if node in tree.body and name.startswith("bertkit.") and name not in RUN_NUMERICS:
                    assert name.split(".")[1] in {"training", "io", "checks", "devices", "progress"}, (path.name, name)


if __name__ == "__main__":  # the DDP worker, launched by torchrun from test_ddp_two_processes_match_single_process
    _ddp_worker(sys.argv[1])
