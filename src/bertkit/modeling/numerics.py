"""What decides a run's numbers, recorded in ``run.json`` and compared when a run resumes or is evaluated.

:func:`describe` names the device, the precision, the float32 GEMM backend and why it was chosen
(:func:`bertkit.modeling.fast.hardware_gemm`: from the hardware, never from timing), torch's CPU kernel
level and version, and the thread count (which, on a CPU, changes the speed but not the bits). A run stores
it as ``run.json``'s ``"numerics"``; :func:`differences` lists what differs between a stored and a current
description among the fields that change results (:data:`DECIDING`), which a resume or an evaluation warns
about (the GEMM backend itself is pinned on resume: :class:`bertkit.modeling.fast.GemmChoice`). A run
records it through :func:`bertkit.tasks.run_settings.record_numerics`.
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from bertkit.modeling import fast

#: the fields whose change changes a float32 run's bits (the thread count does not)
DECIDING = ("device", "precision", "gemm", "cpu_kernels", "torch")


def describe(device: torch.device | str = "cpu", precision: str = "fp32") -> dict[str, Any]:
    """The numerics of computing on ``device`` in ``precision`` in this process (see the module docstring)."""
    device = torch.device(device)
    out: dict[str, Any] = {"device": device.type, "precision": precision}
    if device.type == "cuda":
        out |= {"gemm": "cublas", "gemm_reason": "CUDA", "gpu": torch.cuda.get_device_name(device)}
    else:
        out |= {"gemm": fast.gemm_backend(), "gemm_reason": fast.gemm_reason(),
                "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine()}
    return out | {"threads": torch.get_num_threads(), "torch": torch.__version__}


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"field: stored -> current"`` for each field of :data:`DECIDING` both name and that differs."""
    return [f"{k}: {stored[k]} -> {current[k]}" for k in DECIDING
            if k in stored and k in current and stored[k] != current[k]]


def warn_if_different(stored: Mapping[str, Any] | None, current: Mapping[str, Any], what: str) -> list[str]:
    """Warn (one line) when ``current`` numerics differ from the run's ``stored`` ones; returns the differences.
    ``what`` says what would run on them (``"the resumed run"``, ``"this evaluation"``)."""
    found = differences(stored or {}, current)
    if found:
        warnings.warn(f"{what} computes with other numerics than the run did ({'; '.join(found)}): its numbers "
                      "will differ in the last digits from the run's own. Set BERTKIT_GEMM to the run's backend, "
                      "or use the run's precision and device, to reproduce them.", stacklevel=2)
    return found

