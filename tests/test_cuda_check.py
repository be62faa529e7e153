"""benchmarks/cuda_check.py's smoke run (``--device cpu``): every section that can run on the CPU runs its real
code at tiny sizes, so a typo is found here and not in the rare minutes of a lent GPU.

The numbers are the script's to print; what is asserted is that it ran: exit 0, every section's tables written to
``--out DIR/cuda_check.md``, no section failed, and what needs CUDA named as skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

from bertkit.devices import native_bf16
from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "cuda_check.py"
#: each section's tables, by the start of their titles
TABLES = {"parity": ["### Parity: last hidden state"],
          "sdpa": ["### SDPA implementation dispatched by default", "### bertkit (sdpa) with one SDPA backend forced"],
          "inference": ["### Inference, small encoder forward"],
          "training": ["### Training: BERTForPreTraining"],
          "ddp": ["### DDP and resume"],
          "finetune": ["### Fine-tuning SPLADE-tiny on VADER Amazon"],
          "families": ["### Families: bertkit.BERT vs HF's AutoModel", "### Families: BERTForMaskedLM loss",
                       "### ModernBERT (small) forward"],
          "pretrain_objectives": ["### bertkit pretrain on cpu"],
          "determinism": ["### The same seeded bertkit pretrain run twice on cpu"]}


def smoke(tmp_path: Path, *only: str) -> str:
    """Run the smoke mode (``--only`` each of ``only``; all sections if none) into ``tmp_path``: its report."""
    pytest.importorskip("transformers")
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(tmp_path)]
    for name in only:
        command += ["--only", name]
    run = run_guarded(command, heartbeat=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    report = (tmp_path / "cuda_check.md").read_text()
    assert "sections failed: none" in report
    assert "FAILED" not in report, report[-3000:]
    for name in only or TABLES:
        assert f"\n## {name}\n" in report, name
        for title in TABLES.get(name, []):
            assert title in report, title
    return report


def test_the_sections_are_the_modules_and_the_docstrings(monkeypatch):
    """Importing the entry point imports every section's module; each section is named in the script's docstring."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts benchmarks/ first: not for the later tests
    spec = importlib.util.spec_from_file_location("cuda_check_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert list(script.SECTIONS) == list(TABLES)
    for name, function in script.SECTIONS.items():
        assert f"* ``{name}``" in script.__doc__, name
        assert function.__module__.startswith("cuda_checks."), name
    args = script.parse_args(["--device", "cpu"])
    assert (args.smoke, args.quick, args.rounds, args.iters) == (True, True, 1, 1)


def test_the_cuda_only_names_exist_in_torch():
    """What the smoke run cannot reach (CUDA's branches) still names real functions: every ``torch.cuda.X``,
    ``torch.backends.cuda.X`` and ``torch.backends.cudnn.X`` the script's files mention resolves (on the CPU build)."""
    files = [SCRIPT, *sorted((SCRIPT.parent / "cuda_checks").glob("*.py"))]
    pattern = r"\btorch\.(?:cuda|backends\.cuda|backends\.cudnn)(?:\.\w+)+"
    names = {name for f in files for name in re.findall(pattern, f.read_text())}
    assert "torch.cuda.synchronize" in names and "torch.cuda.nccl.version" in names
    for name in names:
        functools.reduce(getattr, name.split(".")[1:], torch)  # AttributeError names the typo


def test_smoke_run_of_the_cheapest_section(tmp_path):
    report = smoke(tmp_path, "training")
    assert "skipped: fp16 (every section)" in report
    resolved = "bf16" if native_bf16() else "fp32"  # the trainer's own rule: bf16 only where the CPU has it
    assert "| fp32 | fp32 | 20 |" in report and f"| bf16 | {resolved} | 20 |" in report  # both rows trained


@pytest.mark.slow
def test_smoke_run_of_every_section(tmp_path):
    """The whole smoke run (a few minutes on 2 cores): every CPU section ends, what needs CUDA is named."""
    report = smoke(tmp_path)
    skipped = report[report.index("skipped (not run on this device):"):]
    for what in ("section sdpa's CUDA kernels", "fp16", "NCCL", "cuDNN"):
        assert what in skipped, what
    assert "| fp32 | 8 x 128 full rows | flash | flash |" in report  # the CPU's flash kernel, seen by the probe
    assert "| DDP (gloo, world 1, forced distributed path) vs plain run |" in report


def test_an_out_path_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    report = tmp_path / "notes.md"
    report.write_text("mine\n")
    run = run_guarded([sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(report)],
                      capture_output=True, text=True)
    assert run.returncode == 2 and "--out" in run.stderr and "is a file" in run.stderr, run.stderr
    assert report.read_text() == "mine\n"
