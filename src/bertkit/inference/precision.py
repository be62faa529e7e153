"""The number format an inference model runs in: ``dtype="auto"`` made concrete, once, at load.

``dtype`` is one of :data:`DTYPES` (or a torch dtype; None keeps the model's own). ``"auto"`` resolves, in
this order, from facts that never change during a process (flags and files, never a timing):

1. a model saved as int8 runs int8 (on CPU: its float weights would only be the dequantized int8 values);
2. ``BERTKIT_DTYPE`` in the environment (``fp32``, ``bf16``, ``fp16``, ``int8``): what ``auto`` means for the
   whole process (a service pinning its numbers, a test suite comparing against float32 references);
3. bf16 where the device computes it natively (:func:`bertkit.devices.native_bf16`: a CPU whose flags have
   AVX512-BF16, AMX-BF16 or Arm BF16; a CUDA GPU with bf16) **and** the task's row of the measured quality
   table (``resources/precision_quality.json``, written by ``benchmarks/precision_quality.py``) keeps bf16
   within :data:`BOUNDS` of float32 (:func:`passes`);
4. fp32 otherwise: the exact numbers of every earlier bertkit release.

A :class:`DtypeChoice` carries the answer and why, in one line (:meth:`DtypeChoice.describe`), which the
command-line tools print, the server returns in ``/info`` and the Python API logs (logger ``bertkit``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch

from bertkit import devices
from bertkit.dtypes import ALIASES, DTYPES

#: the float formats' torch dtypes (one table for this module, ``optimize_for_inference`` and ``running_dtype``)
FLOATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: torch dtype -> its short name
FLOAT_NAMES = {value: name for name, value in FLOATS.items()}
TORCH = {**FLOATS, "int8": torch.float32}
ENV = "BERTKIT_DTYPE"
QUALITY_FILE = "precision_quality.json"

#: the quality table row that decides each pipeline task (tasks without a row stay fp32 under ``auto``)
TASK_ROW = {"embeddings": "embeddings", "sparse-embeddings": "embeddings", "feature-extraction": "embeddings",
            "text-classification": "text-classification", "rerank": "text-classification",
            "token-classification": "token-classification", "question-answering": "question-answering",
            "fill-mask": "fill-mask", "multi-vector": "embeddings"}  # MultiVectorEncoder is checked as embeddings

#: per table row: (metric, bound, kind) where kind "min" means other[metric] >= bound and "drop" means
#: fp32[metric] - other[metric] <= bound (the issue's bounds: cosine >= 0.999, agreement >= 99.5 %, F1 within 0.005)
BOUNDS = {"embeddings": ("min_cosine", 0.999, "min"),
          "text-classification": ("label_agreement", 0.995, "min"),
          "fill-mask": ("top1_agreement", 0.995, "min"),
          "token-classification": ("f1", 0.005, "drop"),
          "question-answering": ("f1", 0.005, "drop")}

logger = logging.getLogger("bertkit")


@dataclass(frozen=True)
class DtypeChoice:
    """What a model runs in (``name``: fp32, bf16, fp16 or int8), what was asked, and why."""

    name: str
    requested: str
    reason: str

    @property
    def torch_dtype(self) -> torch.dtype:
        """The parameters' dtype (float32 for int8: dense layers quantize their float weights)."""
        return TORCH[self.name]

    @property
    def quantize(self) -> str | None:
        return "int8" if self.name == "int8" else None

    @property
    def torch_name(self) -> str:
        """``float32``, ``bfloat16``, ``float16`` or ``int8`` (TEI's ``model_dtype`` spelling)."""
        return "int8" if self.name == "int8" else str(self.torch_dtype).removeprefix("torch.")

    def describe(self) -> str:
        """One line: ``dtype auto -> bf16 (this CPU computes bf16 natively (avx512_bf16); ...)``, ``dtype fp32
        (asked for)``, or ``dtype int8 (asked for; embeddings quality measured against fp32: ...)``."""
        arrow = f"{self.requested} -> {self.name}" if self.requested != self.name else self.name
        return f"dtype {arrow} ({self.reason})"

    def as_dict(self) -> dict[str, str]:
        return {"requested": self.requested, "dtype": self.name, "reason": self.reason}


def normalize(dtype: Any, argument: str = "dtype") -> str | None:
    """``dtype`` as one of :data:`DTYPES` (None stays None); ValueError naming ``argument`` otherwise."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if dtype in FLOAT_NAMES:
            return FLOAT_NAMES[dtype]
        raise ValueError(f"{argument}={dtype} is not an inference dtype; use one of {DTYPES}.")
    name = ALIASES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"{argument}={dtype!r} is not one of {DTYPES} (or a torch dtype); 'auto' picks bf16 where "
                         "the hardware computes it and the task's quality allows, fp32 elsewhere.")
    return name


@functools.cache
def quality_table() -> dict[str, Any]:
    """The measured quality table bundled with bertkit (``{}`` if it is missing: ``auto`` then stays fp32)."""
    try:
        text = resources.files("bertkit.resources").joinpath(QUALITY_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return {}
    return json.loads(text)


def passes(task: str, fp32: dict[str, float], other: dict[str, float]) -> tuple[bool, str]:
    """Whether ``other``'s metrics stay within :data:`BOUNDS` of ``fp32``'s for table row ``task``, and the
    one-clause reason (``"min_cosine 0.99991 >= 0.999"``)."""
    if task not in BOUNDS:
        return False, f"no quality bound is defined for {task!r}"
    metric, bound, kind = BOUNDS[task]
    if metric not in other or (kind == "drop" and metric not in fp32):
        return False, f"the quality table has no {metric} for {task}"
    if kind == "min":
        value = float(other[metric])
        return value >= bound, f"{metric} {value:.5f} {'>=' if value >= bound else '<'} {bound}"
    drop = float(fp32[metric]) - float(other[metric])
    return drop <= bound, f"{metric} {float(other[metric]):.4f} vs fp32 {float(fp32[metric]):.4f} " \
                          f"({'within' if drop <= bound else 'more than'} {bound})"


def table_allows(task: str | None, name: str = "bf16") -> tuple[bool, str]:
    """Whether the quality table lets ``auto`` pick ``name`` for pipeline task ``task``, and why."""
    row = TASK_ROW.get(task or "")
    if row is None:
        return False, f"no quality-table row for task {task!r}"
    measured = quality_table().get("tasks", {}).get(row)
    if not measured or name not in measured or "fp32" not in measured:
        return False, f"{row} has no measured {name} row in the quality table"
    ok, why = passes(row, measured["fp32"], measured[name])
    return ok, f"{row} quality: {why}"


def quality_note(task: str | None, name: str) -> str:
    """``"; embeddings quality measured against fp32: min_cosine 0.98026 < 0.999, below the bound auto keeps"``:
    what the quality table measured for ``name`` on ``task``'s row, for a format chosen without it (asked for,
    set by the environment, saved in the checkpoint); ``""`` for fp32 and where the table has no such row."""
    row = TASK_ROW.get(task or "")
    measured = quality_table().get("tasks", {}).get(row) or {}
    if name == "fp32" or name not in measured or "fp32" not in measured:
        return ""
    ok, why = passes(row, measured["fp32"], measured[name])
    return f"; {row} quality measured against fp32: {why}{'' if ok else ', below the bound auto keeps'}"


def resolve(dtype: Any = "auto", device: torch.device | str = "cpu", task: str | None = None, *,
            saved: str | None = None, current: str | torch.dtype | None = None) -> DtypeChoice:
    """The :class:`DtypeChoice` for running a ``task`` model on ``device`` (see the module docstring).

    ``saved``: the checkpoint's own number format (``"int8"`` for an int8 checkpoint, else None);
    ``current``: how the model computes now (``"int8"`` or its parameters' dtype), which ``dtype=None`` keeps.
    A :class:`DtypeChoice` is taken as it stands: a caller that decided for the user says why in its reason.
    """
    if isinstance(dtype, DtypeChoice):
        return _check(DtypeChoice(normalize(dtype.name), dtype.requested, dtype.reason), torch.device(device))
    name = normalize(dtype)
    device = torch.device(device)
    if name is None:
        kept = normalize(current or torch.float32)
        return DtypeChoice(kept, "keep", "dtype=None keeps the model's own")
    if name != "auto":
        return _check(DtypeChoice(name, name, "asked for" + quality_note(task, name)), device)
    if saved == "int8" and device.type == "cpu":  # its float weights would only be the dequantized int8 ones
        return DtypeChoice("int8", "auto", "the checkpoint is saved in int8" + quality_note(task, "int8"))
    env = os.environ.get(ENV, "").strip()
    if env and env != "auto":
        chosen = normalize(env, ENV)
        return _check(DtypeChoice(chosen, "auto", f"{ENV}={env}" + quality_note(task, chosen)), device)
    hardware = devices.bf16_reason(device)
    if not devices.native_bf16(device):
        return DtypeChoice("fp32", "auto", hardware)
    allowed, why = table_allows(task)
    if allowed:
        return DtypeChoice("bf16", "auto", f"{hardware}; {why}")
    return DtypeChoice("fp32", "auto", f"{hardware}, but {why}")


def _check(choice: DtypeChoice, device: torch.device) -> DtypeChoice:
    if choice.name == "int8" and device.type != "cpu":
        raise ValueError(f"dtype int8 runs on CPU (dynamic quantization); the model is on {device}. "
                         "Use bf16 or fp16 on a GPU, or --device cpu.")
    return choice


def announce(choice: DtypeChoice) -> DtypeChoice:
    """Log the choice once (logger ``bertkit``, INFO); returns it."""
    logger.info(choice.describe())
    return choice


def prepare(model: torch.nn.Module, dtype: Any, task: str | None) -> DtypeChoice:
    """Resolve ``dtype`` for ``model`` answering ``task`` (on the model's device) and put the model on the fast
    inference path in that number format, in place; returns (and logs) the choice. One function for the
    pipelines, :class:`bertkit.SentenceTransformer` and :class:`bertkit.CrossEncoder`."""
    from bertkit.inference.quantized import checkpoint_dtype, running_dtype

    first = next(model.parameters())
    choice = announce(resolve(dtype, first.device, task, saved=checkpoint_dtype(model), current=running_dtype(model)))
    if hasattr(model, "optimize_for_inference"):
        model.optimize_for_inference(dtype=choice.torch_dtype, quantize=choice.quantize)
    else:
        model.to(choice.torch_dtype).eval()
    return choice

