"""What a task's run records in ``run.json`` once its Trainer starts: the training config and the numerics.

Both pretraining and fine-tuning register :func:`record_run_settings` (``on_train_begin``) and
:func:`record_numerics` (``on_save``, so the measured thread choice lands too) on their Trainer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from bertkit.modeling import numerics


def record_numerics(run: Any, trainer: Any) -> None:
    """Store the trainer's numerics (:func:`bertkit.modeling.numerics.describe`) and thread choice as
    ``run.json``'s ``"numerics"`` (``run``: a ``RunDirectory``), warning first when a resumed run's stored
    ones differ in what decides the numbers; writes run.json."""
    current = numerics.describe(trainer.device, trainer.precision) | {"threads": trainer.threads.report()}
    if run.resumed:
        numerics.warn_if_different(run.info.get("numerics"), current, "the resumed run")
    run.record("numerics", current)
    run.save()


def record_run_settings(run: Any, trainer: Any) -> None:
    """``run.json``'s ``"training"`` (the config the Trainer accepted: fresh, or checked on resume) and
    ``"numerics"`` (:func:`record_numerics`)."""
    run.record("training", trainer.config.to_dict())
    record_numerics(run, trainer)


def warn_if_run_differs(model_dir: str | os.PathLike, device: Any, precision: str, what: str) -> list[str]:
    """Warn when the run that wrote ``model_dir`` (its ``run.json``, in the directory or its parent: a run's
    ``model/``) computed with other numerics than ``device`` / ``precision`` here; returns the differences
    (none for a directory no bertkit run wrote). ``what`` names the computation (``"this evaluation"``)."""
    from bertkit.training.config import resolve_precision
    from bertkit.training.rundir import RUN_FILE, read_run_info

    path = Path(model_dir)
    for run_dir in (path, path.parent):
        if (run_dir / RUN_FILE).is_file():
            stored = read_run_info(run_dir).get("numerics")
            current = numerics.describe(device, resolve_precision(precision, torch.device(device)))
            return numerics.warn_if_different(stored, current, what)
    return []
