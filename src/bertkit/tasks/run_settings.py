"""What a task's run records in ``run.json`` once its Trainer starts: the training config and the numerics.

Both pretraining and fine-tuning register :func:`record_run_settings` (``on_train_begin``) and
:func:`record_numerics` (``on_save``, so the measured thread choice lands too) on their Trainer; fine-tuning
and the embedding trainers register both with the run directory's commit through :func:`follow_run`.
"""

from __future__ import annotations

import functools
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
    """``run.json``'s ``"training"`` (the config the Trainer accepted: fresh, or checked on resume; its
    ``output_dir`` the run's own name, never the hidden folder an ``--overwrite`` run is built in) and
    ``"numerics"`` (:func:`record_numerics`)."""
    run.record("training", trainer.config.to_dict() | {"output_dir": os.fspath(run.final)})
    record_numerics(run, trainer)


def warn_if_run_differs(model_dir: str | os.PathLike, device: Any, computes: str, what: str) -> list[str]:
    """Warn when the run that wrote ``model_dir`` (its ``run.json``, in the directory or its parent: a run's
    ``model/``) computed with other numerics than ``device`` / ``computes`` here (the number format the model
    runs in: fp32, bf16, fp16, int8); returns the differences (none for a directory no bertkit run wrote).
    ``what`` names the computation (``"this evaluation"``)."""
    from bertkit.training.rundir import RUN_FILE, read_run_info

    path = Path(model_dir)
    for run_dir in (path, path.parent):
        if (run_dir / RUN_FILE).is_file():
            stored = read_run_info(run_dir).get("numerics")
            current = numerics.describe(torch.device(device), computes)
            return numerics.warn_if_different(stored, current, what)
    return []


def follow_run(trainer: Any, run: Any, moved: Any = None) -> None:
    """Register a run directory's callbacks on ``trainer``: its settings when training begins; at every save the
    directory's commit (an ``--overwrite`` run replaces the old directory at its first checkpoint, and the
    Trainer follows it there; ``moved(old_path)`` then moves anything else that lived inside) and the numerics."""

    def commit(trainer: Any) -> None:
        staging = run.path
        run.commit()
        if run.path != staging:
            trainer.relocate(run.path)
            if moved is not None:
                moved(staging)

    trainer.add_callback("on_train_begin", functools.partial(record_run_settings, run))
    trainer.add_callback("on_save", commit)
    trainer.add_callback("on_save", functools.partial(record_numerics, run))
