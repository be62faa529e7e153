"""Training in bf16 autocast: losses track fp32's, master weights and AdamW state stay fp32, ``precision="auto"``
follows the CPU's flags (never a timing), the run says its choice in one line, a resumed run keeps it, and
``benchmarks/precision_training.py`` runs (quick mode).

The CPU's bf16 support is what ``/proc/cpuinfo`` says (:func:`bertkit.devices._cpu_flags`); the tests set it
either way, so they run alike on machines with and without bf16 (autocast then emulates bf16, same numbers).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit import devices
from bertkit.training import Trainer, resolve_precision
from bertkit.training.config import describe_precision
from test_training import examples, make_config, read_metrics

ROOT = Path(__file__).resolve().parent.parent
#: odd sizes (head dim 12, inner 37) under the sequences of test_training's examples (ids 5..24, length 16)
ODD = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37,
           max_position_embeddings=40, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def cpu_flags(monkeypatch):
    """``cpu_flags(flags)`` makes the CPU report ``flags`` (``devices.cpu_bf16``'s cache cleared around it)."""

    def set_flags(flags: set[str]) -> None:
        monkeypatch.setattr(devices, "_cpu_flags", lambda: set(flags))
        devices.cpu_bf16.cache_clear()

    yield set_flags
    devices.cpu_bf16.cache_clear()


def odd_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return bertkit.bert_for_pre_training_tiny(**ODD)


def train(tmp_path, precision: str, steps: int = 8, **overrides) -> Trainer:
    trainer = Trainer(odd_model(), examples(32), config=make_config(tmp_path, max_steps=steps, precision=precision,
                                                                     **overrides))
    trainer.train()
    return trainer


def interrupted(out: Path, precision: str) -> Path:
    """A 4-step run in ``out`` taken back to its checkpoint at step 2 (as if killed there)."""
    train(out, precision, steps=4, save_every=2, keep_last=None)
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    return out


def test_auto_follows_the_cpu_flags(cpu_flags):
    cpu_flags({"avx2", "avx512f", "avx512_bf16"})
    assert resolve_precision("auto", CPU) == "bf16" and devices.bf16_reason(CPU) == "this CPU has avx512_bf16"
    assert describe_precision("auto", "bf16", CPU) == \
        "precision auto -> bf16 autocast, fp32 weights (this CPU has avx512_bf16)"
    cpu_flags({"avx2", "amx_bf16", "amx_tile"})
    assert resolve_precision("auto", CPU) == "bf16" and devices.bf16_reason(CPU) == "this CPU has amx_bf16"
    cpu_flags({"avx2", "avx512f", "avx512_vnni"})
    assert resolve_precision("auto", CPU) == "fp32"
    assert describe_precision("auto", "fp32", CPU) == \
        "precision auto -> fp32 (this CPU has no amx_bf16, avx512_bf16 or Arm bf16)"
    assert describe_precision("fp32", "fp32", CPU) == "precision fp32 (as requested)"
    with pytest.warns(UserWarning, match="no native bf16"):
        assert resolve_precision("bf16", CPU) == "fp32"


def test_bf16_autocast_losses_track_fp32(tmp_path, cpu_flags):
    cpu_flags({"avx512_bf16"})
    losses = {}
    for precision in ("fp32", "bf16"):
        trainer = train(tmp_path / precision, precision)
        assert trainer.precision == precision
        losses[precision] = torch.tensor([r["loss"] for r in read_metrics(tmp_path / precision)])
    assert len(losses["fp32"]) == 8 and losses["fp32"][-1] < losses["fp32"][0]  # it learns
    # observed on this model: at most 0.0003 apart, the losses falling from 5.31 to 4.81; bound 0.005 (16x)
    torch.testing.assert_close(losses["bf16"], losses["fp32"], atol=0.005, rtol=0)
    assert not torch.equal(losses["bf16"], losses["fp32"])  # bf16 did compute


def test_bf16_keeps_fp32_master_weights_and_adamw_state(tmp_path, cpu_flags):
    cpu_flags({"avx512_bf16"})
    model = odd_model()
    seen = {"grads": set()}
    linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))

    def record_output(module, inputs, output) -> None:
        seen.setdefault("output", output.dtype)

    linear.register_forward_hook(record_output)

    for parameter in model.parameters():  # the gradients as the optimizer gets them
        parameter.register_post_accumulate_grad_hook(lambda p: seen["grads"].add(p.grad.dtype))
    trainer = Trainer(model, examples(32), config=make_config(tmp_path, max_steps=3, precision="auto"))
    trainer.train()
    assert trainer.precision == "bf16" and seen["output"] == torch.bfloat16  # the products ran in bf16
    assert seen["grads"] == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    states = list(trainer.optimizer.state.values())
    assert len(states) == len(list(model.parameters()))
    assert {t.dtype for s in states for k, t in s.items() if k != "step"} == {torch.float32}


def test_a_resumed_run_keeps_its_precision(tmp_path, cpu_flags, caplog):
    cpu_flags({"avx2"})  # the run starts where auto is fp32
    interrupted(tmp_path / "run", "auto")
    cpu_flags({"avx512_bf16"})  # and resumes where auto would be bf16
    trainer = Trainer(odd_model(), examples(32), config=make_config(tmp_path / "run", max_steps=4, precision="auto"))
    with caplog.at_level("INFO", logger="bertkit.training"):
        trainer.train(resume_from="latest")
    assert trainer.precision == "fp32"
    assert "precision auto -> fp32 (the resumed run's; this CPU has avx512_bf16)" in caplog.messages

    # an explicit fp32 run resumed with the default auto keeps fp32, and is no hyperparameter change
    interrupted(tmp_path / "explicit", "fp32")
    trainer = Trainer(odd_model(), examples(32), config=make_config(tmp_path / "explicit", max_steps=4,
                                                                    precision="auto"))
    trainer.train(resume_from="latest")
    assert trainer.precision == "fp32" and trainer.config.precision == "fp32"

    # a bf16 run resumed on a CPU without bf16 continues in fp32, and says so
    interrupted(tmp_path / "bf16", "auto")
    cpu_flags({"avx2"})
    trainer = Trainer(odd_model(), examples(32), config=make_config(tmp_path / "bf16", max_steps=4, precision="auto"))
    with pytest.warns(UserWarning, match="trained in bf16, which cpu does not compute natively; it continues in fp32"):
        trainer.train(resume_from="latest")
    assert trainer.precision == "fp32"


@pytest.mark.parametrize("flags, line", [
    ({"avx512_bf16"}, "bertkit: precision auto -> bf16 autocast, fp32 weights (this CPU has avx512_bf16)"),
    ({"avx2"}, "bertkit: precision auto -> fp32 (this CPU has no amx_bf16, avx512_bf16 or Arm bf16)")])
def test_the_cli_says_its_precision_in_one_line(tmp_path, cpu_flags, capsys, flags, line):
    from bertkit.cli import main
    from bertkit.resources import austen_novels

    cpu_flags(flags)
    book = tmp_path / "book.txt"
    book.write_text(austen_novels()["persuasion"][:20_000], encoding="utf-8")
    config = tmp_path / "odd.json"
    config.write_text(json.dumps(ODD), encoding="utf-8")
    assert main(["pretrain", "--text", str(book), "--model", str(config), "-o", str(tmp_path / "run"),
                 "--vocab-size", "200", "--max-seq-length", "32", "--batch-size", "4", "--max-steps", "2",
                 "--threads", "1"]) == 0
    said = [text for text in capsys.readouterr().err.splitlines() if text.startswith("bertkit: precision")]
    assert said == [line]
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["training"]["precision"] == "auto" and info["numerics"]["precision"] == line.split()[4]


def test_the_benchmark_runs_in_quick_mode(tmp_path):
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "precision_training.py"), "--quick",
                           "--tasks", "pretrain", "--seeds", "1", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert sorted((r["precision"], r["seed"]) for r in runs) == [("bf16", 1), ("bf16", 2), ("fp32", 1), ("fp32", 2)]
    assert all(len(r["losses"]) == 6 and r["peak_rss_mb"] > 0 for r in runs)
    (summary,) = [json.loads(line) for line in (out / "summary.jsonl").read_text().splitlines()]
    assert summary["task"] == "pretrain" and len(summary["mean"]["bf16"]) == summary["steps"] == 6
    assert "| pretrain | bf16 (ran " in done.stdout
