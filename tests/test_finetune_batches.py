"""Fine-tuning shuffles its batches unless asked to group them by length (issue 28, section 4).

Batches of similar length weigh a token by its batch's size (each step's loss is a mean over the
batch's tokens): on a held-out NER set from a novel, grouped batches learned far worse than shuffled
ones (``benchmarks/ner_reference.py``). So ``finetune`` and ``bertkit finetune`` shuffle by default, as
HF's Trainer does; ``--group-by-length`` opts in, ``--no-group-by-length`` is still accepted; the run
records the choice and a resume with the other one is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bertkit.tasks.finetuning as finetuning
import bertkit.training.run as run
from bertkit.cli import main as cli
from bertkit.training import SeededSampler
from bertkit.training.rundir import RunDirectoryError
from task_helpers import model_dir


def _conll(path: Path) -> Path:
    """Sixteen sentences of 2 to 17 words, a name in every other one."""
    sentences = [[("Emma", "B-PER")] * (i % 2) + [("and", "O")] * (1 + i) for i in range(16)]
    path.write_text("\n".join("".join(f"{t} {g}\n" for t, g in s) for s in sentences), encoding="utf-8")
    return path


@pytest.fixture
def samplers(monkeypatch) -> list[type]:
    """The type of the sampler each fine-tuning run's Trainer draws its batches from."""
    seen: list[type] = []

    class Spy(run.Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(type(self.sampler))

    monkeypatch.setattr(run, "Trainer", Spy)  # the one run builds every recipe's Trainer
    return seen


def test_the_cli_shuffles_batches_by_default(tmp_path, samplers):
    out = tmp_path / "run"
    assert cli(["finetune", "tag", "--model", str(model_dir()), "--train", str(_conll(tmp_path / "train.conll")),
                "-o", str(out), "--epochs", "1", "--batch-size", "8", "--max-seq-length", "32"]) == 0
    assert samplers == [SeededSampler]
    assert json.loads((out / "run.json").read_text())["batches"] == {"group_by_length": False}


@pytest.mark.parametrize(("flags", "grouped"), [([], False), (["--no-group-by-length"], False),
                                                 (["--group-by-length"], True)])
def test_group_by_length_is_an_opt_in_flag(tmp_path, monkeypatch, flags, grouped):
    calls = []

    def record(*args, **kwargs) -> finetuning.FinetuneResult:  # what the command asks for; nothing is trained
        calls.append(kwargs)
        return finetuning.FinetuneResult(tmp_path, tmp_path, {}, tmp_path / "metrics.jsonl")

    monkeypatch.setattr(finetuning, "finetune", record)
    assert cli(["finetune", "tag", "--model", "m", "--train", "t.conll", "-o", str(tmp_path / "run"), *flags]) == 0
    assert [call["group_by_length"] for call in calls] == [grouped]


def test_the_api_shuffles_by_default_and_a_resume_keeps_the_runs_choice(tmp_path, samplers):
    train, out = _conll(tmp_path / "train.conll"), tmp_path / "run"
    options = dict(output_dir=out, epochs=1, batch_size=8, max_seq_length=32, progress=False)
    finetuning.finetune("tag", model_dir(), train, **options)
    assert samplers == [SeededSampler]
    with pytest.raises(RunDirectoryError, match=r"batches differs.*group_by_length"):
        finetuning.finetune("tag", model_dir(), train, resume=True, group_by_length=True, **options)
