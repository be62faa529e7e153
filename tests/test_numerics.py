"""The same inputs give the same bits at any load: the float32 GEMM backend is chosen from the hardware, never by
timing; a CPU training step gives the same gradients whatever the thread count (LayerNorm's parameter gradients
and the gradient-norm clipping were the thread-dependent parts); a seeded ``bertkit pretrain`` run with 1 thread,
with 2, and with 'auto' beside two busy processes writes the same weights; run.json, ``bertkit info`` and the
server's ``/info`` say which numerics a result came from; a resume or an evaluation on other numerics warns."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from bertkit import BERTConfig, BERTForMaskedLM
from bertkit.modeling import fast, numerics
from bertkit.modeling.norm import LayerNorm
from bertkit.resources import austen_novels
from bertkit.training.gradnorm import clip_grad_norm
from bertkit.training.threads import WARMUP, WINDOW, ThreadChoice, parse_threads
from conftest import run_guarded

THREADS = (1, 2, 3)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _gradients(threads: int, autocast: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], float]:
    """Scores, every parameter's gradient and the clipped norm of one MLM step of a seeded model on ``threads``."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = BERTConfig(vocab_size=3001, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=515, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BERTForMaskedLM(config)
    ids = torch.randint(5, 3001, (24, 96))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        scores = model(ids)
    scores.float().logsumexp(-1).mean().backward()
    norm = clip_grad_norm(model.parameters(), 0.05).item()
    return scores.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, norm


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_a_training_step_gives_the_same_bits_on_any_thread_count(autocast, restore_threads):
    """Before: the LayerNorms' weight and bias gradients differed in the last bits between 1 and 2 threads."""
    if autocast and not fast.onednn_available():
        pytest.skip("no oneDNN")
    reference = _gradients(1, autocast)
    for threads in THREADS[1:]:
        scores, grads, norm = _gradients(threads, autocast)
        assert torch.equal(scores, reference[0])
        differing = [name for name in grads if not torch.equal(grads[name], reference[1][name])]
        assert differing == [], f"{threads} threads: gradients differ from 1 thread's in {differing}"
        assert norm == reference[2]


@pytest.mark.parametrize("shape,bias", [((4096, 128), True), ((3, 700, 36), False), ((5, 8), True)])
def test_layer_norm_equals_torchs_and_its_gradients_do_not_depend_on_threads(shape, bias, restore_threads):
    torch.manual_seed(1)
    x = torch.randn(shape) * 3 + 1
    g = torch.randn(shape)
    weight, shift = torch.rand(shape[-1]) + 0.5, torch.rand(shape[-1]) - 0.5
    results = {}
    for threads in THREADS:
        torch.set_num_threads(threads)
        ours = LayerNorm(shape[-1], eps=1e-12, bias=bias)
        with torch.no_grad():
            ours.weight.copy_(weight)
            if bias:
                ours.bias.copy_(shift)
        theirs = torch.nn.LayerNorm(shape[-1], eps=1e-12, bias=bias)
        theirs.load_state_dict(ours.state_dict())
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ours(xa), theirs(xb)
        ya.backward(g)
        yb.backward(g)
        torch.testing.assert_close(ya, yb, rtol=0, atol=0)  # the forward is torch's own kernel
        torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=0)  # so is the input's gradient
        exact = torch.nn.LayerNorm(shape[-1], eps=1e-12, bias=bias).double()
        exact.load_state_dict(ours.state_dict())
        exact(x.double()).backward(g.double())
        for p, q, r in zip(ours.parameters(), theirs.parameters(), exact.parameters(), strict=True):
            # as close to the float64 gradient as torch's own float32 kernel is (both sum thousands of rows)
            ours_error, torchs_error = (p.grad - r.grad).abs().max(), (q.grad - r.grad).abs().max()
            assert ours_error <= 2 * torchs_error + 1e-6 * r.grad.abs().max()
        results[threads] = [xa.grad, *(p.grad for p in ours.parameters())]
    for threads in THREADS[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[1], results[threads], strict=True))


def test_layer_norm_is_torchs_where_the_invariant_backward_does_not_apply():
    norm = LayerNorm(16)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert torch.equal(norm(x), torch.nn.functional.layer_norm(x, (16,), norm.weight, norm.bias, norm.eps))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(x.bfloat16()).dtype == torch.float32  # as autocast runs layer_norm
    with fast.fast_path(False):
        assert not __import__("bertkit.modeling.norm", fromlist=["applies"]).applies(x, norm.weight)


@pytest.mark.parametrize("max_norm", [0.01, 1e6])
def test_clip_grad_norm_equals_torchs(max_norm, restore_threads):
    torch.manual_seed(2)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((300, 257), (8193,), (3,), (70_000,))]
    grads = [torch.randn(p.shape) for p in params]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    norms = []
    for threads in THREADS:
        torch.set_num_threads(threads)
        for p, c, g in zip(params, copies, grads, strict=True):
            p.grad, c.grad = g.clone(), g.clone()
        norms.append(clip_grad_norm(params, max_norm))
        expected = torch.nn.utils.clip_grad_norm_(copies, max_norm)
        torch.testing.assert_close(norms[-1], expected, rtol=1e-6, atol=0)
        for p, c in zip(params, copies, strict=True):
            torch.testing.assert_close(p.grad, c.grad, rtol=1e-6, atol=1e-9)
    assert all(torch.equal(n, norms[0]) for n in norms)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([1.0, float("nan"), 2.0])
    assert clip_grad_norm([p], 1.0).isnan() and p.grad.isnan().all()  # as torch's: the step is then skipped
    assert clip_grad_norm([torch.nn.Parameter(torch.ones(2))], 1.0).item() == 0.0  # no gradients


def test_the_gemm_backend_is_the_hardwares_choice_and_never_timed(monkeypatch):
    """Before: ``auto`` timed both backends at the first product of a process, and under load the two (13 %
    apart on this CPU) could swap, changing a seeded run's weights."""
    monkeypatch.setattr(fast, "measure_gemm", lambda *a, **k: pytest.fail("auto must not time the backends"))
    with fast.fast_path(gemm="auto"):
        backend, reason = fast.hardware_gemm()
        assert fast.gemm_backend() == backend and fast.gemm_reason() == reason
        x, w = torch.randn(8, 16), torch.randn(4, 16)
        torch.testing.assert_close(fast.linear(x, w, None), torch.nn.functional.linear(x, w))
    fast.hardware_gemm.cache_clear()
    try:
        monkeypatch.setattr("platform.machine", lambda: "aarch64")
        assert fast.hardware_gemm()[0] == "plain"
        fast.hardware_gemm.cache_clear()
        monkeypatch.setattr("platform.machine", lambda: "x86_64")
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
        assert fast.hardware_gemm()[0] == ("onednn" if fast.onednn_available() else "plain")
    finally:
        fast.hardware_gemm.cache_clear()
    with fast.fast_path(gemm="plain"):
        assert fast.gemm_backend() == "plain" and "set to plain" in fast.gemm_reason()


def test_a_resumed_run_on_another_backend_warns():
    state = fast.GemmChoice().state_dict()
    other = {"onednn": "plain", "plain": "onednn"}[state["gemm"]]
    with fast.fast_path(gemm=other), pytest.warns(UserWarning, match="will not equal an uninterrupted one"):
        fast.GemmChoice().load_state_dict(state)
    with fast.fast_path(gemm="auto"), warnings.catch_warnings():
        warnings.simplefilter("error")
        fast.GemmChoice().load_state_dict(state)  # auto takes the run's own backend, silently
        assert fast.gemm_backend() == state["gemm"]


def test_numerics_name_what_decides_the_bits():
    here = numerics.describe("cpu", "fp32")
    assert here["gemm"] == fast.gemm_backend() and here["threads"] == torch.get_num_threads()
    assert numerics.differences(here, {**here, "threads": 99}) == []  # threads change the speed, not the bits
    assert numerics.differences(here, {**here, "gemm": "x", "precision": "bf16"}) == [
        "precision: fp32 -> bf16", f"gemm: {here['gemm']} -> x"]
    with pytest.warns(UserWarning, match=r"this evaluation computes with other numerics .*gemm"):
        numerics.warn_if_different({**here, "gemm": "x"}, here, "this evaluation")


def test_threads_are_given_or_measured_on_the_first_steps(restore_threads):
    torch.set_num_threads(2)
    choice = ThreadChoice("auto")
    busy = {2: 0.5, 1: 0.1}  # a busy machine: one thread is faster
    for _ in range(WARMUP + 2 * WINDOW + 3):
        choice.step_done(busy[torch.get_num_threads()])
    assert torch.get_num_threads() == 1
    assert choice.report() == {"threads": 1, "available": 2, "chosen": "measured",
                               "seconds_per_step": {"2": 0.5, "1": 0.1}}
    torch.set_num_threads(2)
    choice = ThreadChoice("auto")
    for _ in range(WARMUP + 2 * WINDOW):
        choice.step_done({2: 0.1, 1: 0.18}[torch.get_num_threads()])
    assert torch.get_num_threads() == 2 and choice.report()["chosen"] == "measured"
    assert ThreadChoice(1).report()["threads"] == 1 == torch.get_num_threads()
    assert ThreadChoice(None).report()["chosen"] == "the process's"
    for bad in ("two", 0, -1, 1.5, True):
        with pytest.raises(ValueError, match="--threads must be 'auto' or a positive number"):
            parse_threads(bad, "--threads")


# ------------------------------------------------------------------------------------------------ the command
def _bertkit(*args, env=None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "BERTKIT_DEBUG"}, **(env or {})}
    result = run_guarded([sys.executable, "-m", "bertkit.cli", *map(str, args)], capture_output=True, text=True,
                         env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


BUSY = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory):
    """The issue's command (smaller): one run with 1 thread, one with 2 on a quiet machine, one with 'auto'
    while two other processes keep both cores busy."""
    root = tmp_path_factory.mktemp("numerics")
    text = root / "one_per_line.txt"
    text.write_text(austen_novels()["persuasion"][:60_000], encoding="utf-8")

    def pretrain(out: Path, threads: str) -> Path:
        _bertkit("pretrain", "--text", text, "--seed", 3, "--max-steps", 12, "--model", "tiny", "--vocab-size", 800,
                 "--max-seq-length", 64, "--batch-size", 16, "--precision", "fp32", "--threads", threads,
                 "-o", out)
        return out

    runs = {"1 thread": pretrain(root / "one", "1"), "2 threads": pretrain(root / "two", "2")}
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        runs["auto, busy"] = pretrain(root / "busy", "auto")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return runs


def test_a_seeded_run_writes_the_same_weights_at_any_thread_count_and_load(seeded_runs):
    """Before: the 1-thread and 2-thread runs' weights differed (LayerNorm gradients), and a busy machine could
    flip the timed GEMM backend."""
    weights = {name: (out / "model" / "model.safetensors").read_bytes() for name, out in seeded_runs.items()}
    assert weights["2 threads"] == weights["1 thread"]
    assert weights["auto, busy"] == weights["1 thread"]


def test_run_json_and_info_record_the_numerics(seeded_runs):
    stored = {name: json.loads((out / "run.json").read_text())["numerics"] for name, out in seeded_runs.items()}
    for record in stored.values():
        assert record["gemm"] == fast.gemm_backend() and record["precision"] == "fp32"
        assert record["device"] == "cpu" and record["torch"] == torch.__version__ and record["gemm_reason"]
    assert stored["1 thread"]["threads"]["threads"] == 1 and stored["1 thread"]["threads"]["chosen"] == "given"
    assert stored["2 threads"]["threads"]["threads"] == 2
    busy = stored["auto, busy"]["threads"]
    if busy["available"] > 1:
        assert busy["chosen"] == "measured" and set(busy["seconds_per_step"]) == {"1", str(busy["available"])}
    info = _bertkit("info", seeded_runs["1 thread"] / "model").stdout
    assert f"numerics here: float32 GEMM {fast.gemm_backend()}" in info
    assert "the run (" in info and "in fp32, float32 GEMM" in info and ", 1 threads," in info
