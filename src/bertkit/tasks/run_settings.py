"""What a run recorded in ``run.json``, read back: :func:`warn_if_run_differs` before scoring a run's model.

What a run records as it goes (:func:`follow_run`, :func:`record_run_settings`, :func:`record_numerics`) is the
one run's, :mod:`bertkit.training.run`; they are importable from here too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from bertkit.modeling import numerics
from bertkit.training.run import follow_run as follow_run
from bertkit.training.run import record_numerics as record_numerics
from bertkit.training.run import record_run_settings as record_run_settings


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
