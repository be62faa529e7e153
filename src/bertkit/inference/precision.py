"""The number format an inference model runs in: ``dtype="auto"`` made concrete, once, at load.

``dtype`` is one of :data:`DTYPES` (or a torch dtype; None keeps the model's own). ``"auto"`` resolves, in
this order, from facts that never change during a process (flags and files, never a timing):

1. a model saved as int8 runs int8 (on CPU: its float weights would only be the dequantized int8 values); the
   quality the checkpoint recorded when it was made is said beside it;
2. ``BERTKIT_DTYPE`` in the environment (``fp32``, ``bf16``, ``fp16``, ``int8``): what ``auto`` means for the
   whole process (a service pinning its numbers, a test suite comparing against float32 references);
3. bf16 where the device computes it natively (:func:`bertkit.devices.native_bf16`: a CPU whose flags have
   AVX512-BF16, AMX-BF16 or Arm BF16; a CUDA GPU with bf16) **and** the task's row of the measured quality
   table (``resources/precision_quality.json``, written by ``benchmarks/precision_quality.py``) keeps bf16
   within :data:`BOUNDS` of float32 (:func:`passes`);
4. int8 on a CPU without native bf16 (or with ``BERTKIT_BF16=0``) where the table's int8 row measured with bf16
   turned off (``"bf16-off"``) keeps int8 within :data:`BOUNDS` of float32 for the task;
5. fp32 otherwise: the exact numbers of every earlier bertkit release.

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
            "fill-mask": "fill-mask", "multi-vector": "embeddings",
            "zero-shot-classification": "text-classification"}  # MultiVectorEncoder is checked as embeddings

#: per table row: the (metric, bound, kind) that must all hold, where kind "min" means other[metric] >= bound,
#: "drop" means fp32[metric] - other[metric] <= bound and "relative drop" means that drop <= bound * fp32[metric].
#: The issue's bounds: retrieval NDCG@10 within 0.5 % of fp32 and >= 97 % of each query's top-10 documents shared
#: (retrieval, not cosine: a format is judged by what users get from the vectors), agreement >= 99.5 %, F1 within
#: 0.005
BOUNDS = {"embeddings": (("top10_overlap", 0.97, "min"), ("ndcg@10", 0.005, "relative drop")),
          "text-classification": (("label_agreement", 0.995, "min"),),
          "fill-mask": (("top1_agreement", 0.995, "min"),),
          "token-classification": (("f1", 0.005, "drop"),),
          "question-answering": (("f1", 0.005, "drop"),)}
#: the table's block of rows measured with native bf16 turned off (``BERTKIT_BF16=0``): what a CPU without bf16
#: runs, and what ``auto`` reads there
BF16_OFF = "bf16-off"

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
    """Whether ``other``'s metrics stay within every one of :data:`BOUNDS` of ``fp32``'s for table row ``task``, and
    the reason, one clause per bound (``"top10_overlap 0.98875 >= 0.97, ndcg@10 0.1447 vs fp32 0.1446 (within
    0.5 %)"``)."""
    if task not in BOUNDS:
        return False, f"no quality bound is defined for {task!r}"
    verdicts = [_within(task, metric, bound, kind, fp32, other) for metric, bound, kind in BOUNDS[task]]
    return all(ok for ok, _ in verdicts), ", ".join(why for _, why in verdicts)


def _within(task: str, metric: str, bound: float, kind: str, fp32: dict, other: dict) -> tuple[bool, str]:
    if metric not in other or (kind != "min" and metric not in fp32):
        return False, f"the quality table has no {metric} for {task}"
    value = float(other[metric])
    if kind == "min":
        return value >= bound, f"{metric} {value:.5f} {'>=' if value >= bound else '<'} {bound}"
    reference = float(fp32[metric])
    drop = reference - value - 1e-12  # a drop of exactly the bound passes, whatever the float rounding
    if kind == "relative drop":
        ok = drop <= bound * reference
        return ok, f"{metric} {value:.4f} vs fp32 {reference:.4f} ({'within' if ok else 'more than'} {bound:.1%})"
    ok = drop <= bound
    return ok, f"{metric} {value:.4f} vs fp32 {reference:.4f} ({'within' if ok else 'more than'} {bound})"


def measured(task: str | None, name: str, bf16_off: bool = False) -> tuple[str | None, dict, dict | None]:
    """``(table row, its fp32 metrics, name's metrics or None)`` for pipeline task ``task`` in the bundled table;
    ``bf16_off``: ``name``'s row measured with native bf16 turned off (:data:`BF16_OFF`)."""
    row = TASK_ROW.get(task or "")
    rows = quality_table().get("tasks", {}).get(row) or {}
    other = (rows.get(BF16_OFF) or {}) if bf16_off else rows
    return row, rows.get("fp32") or {}, other.get(name) if name != "fp32" else None


def table_allows(task: str | None, name: str = "bf16", bf16_off: bool = False) -> tuple[bool, str]:
    """Whether the quality table lets ``auto`` pick ``name`` for pipeline task ``task``, and why; ``bf16_off``: by
    ``name``'s row measured with native bf16 turned off (what a machine without bf16 runs)."""
    row, fp32, other = measured(task, name, bf16_off)
    if row is None:
        return False, f"no quality-table row for task {task!r}"
    if not other or not fp32:
        what = f"{name} row measured with {devices.BF16_ENV}=0" if bf16_off else f"measured {name} row"
        return False, f"{row} has no {what} in the quality table"
    ok, why = passes(row, fp32, other)
    return ok, f"{row} quality: {why}"


def quality_note(task: str | None, name: str, recorded: dict | None = None) -> str:
    """``"; embeddings quality measured against fp32: top10_overlap 0.85117 < 0.97, ..., below the bound auto
    keeps"``: what was measured for ``name`` on ``task``'s row, for a format chosen without the table (asked for,
    set by the environment, saved in the checkpoint); ``""`` for fp32 and where nothing was measured.
    ``recorded``: the quality a static int8 checkpoint measured when it was calibrated (``{"task": row, "fp32":
    {...}, "int8": {...}}``, :func:`recorded_quality`), said instead of the table's for its own task."""
    row, fp32, other = measured(task, name)
    source = "measured against fp32"
    if recorded is not None and name == "int8" and recorded.get("task") == row:
        fp32, other, source = recorded.get("fp32") or {}, recorded.get("int8"), "recorded in the checkpoint"
    if name == "fp32" or not other or not fp32:
        return ""
    ok, why = passes(row, fp32, other)
    return f"; {row} quality {source}: {why}{'' if ok else ', below the bound auto keeps'}"


#: a static int8 plan's held-out quality (``Int8Plan.quality``: retrieval against fp32's own ranking, where fp32
#: scores 1) -> the embeddings row's metric it measures
PLAN_METRICS = {"top10": "top10_overlap", "ndcg10": "ndcg@10", "min_cosine": "min_cosine", "mean_cosine": "mean_cosine"}


def recorded_quality(model: torch.nn.Module) -> dict | None:
    """The quality a static int8 checkpoint's model recorded when it was calibrated (its plan's ``quality``,
    ``model.int8_plan``: :mod:`bertkit.inference.int8_plan`), as a table row: ``{"task": "embeddings", "fp32":
    {"ndcg@10": 1.0}, "int8": {"top10_overlap": ..., "ndcg@10": ..., ...}}`` (NDCG@10 against fp32's ranking, so
    fp32's is 1 and the relative bound reads the same); None without a plan or a measured quality."""
    for module in model.modules():
        plan = getattr(module, "int8_plan", None)
        if plan is None:
            continue
        quality = plan.quality if hasattr(plan, "quality") else plan.to_state()[0].get("quality") or {}
        measured = {PLAN_METRICS[k]: float(v) for k, v in quality.items() if k in PLAN_METRICS}
        if measured:
            return {"task": "embeddings", "fp32": {"ndcg@10": 1.0}, "int8": measured}
    return None


def resolve(dtype: Any = "auto", device: torch.device | str = "cpu", task: str | None = None, *,
            saved: str | None = None, current: str | torch.dtype | None = None,
            recorded: dict | None = None) -> DtypeChoice:
    """The :class:`DtypeChoice` for running a ``task`` model on ``device`` (see the module docstring).

    ``saved``: the checkpoint's own number format (``"int8"`` for an int8 checkpoint, else None); ``recorded``:
    the quality such a checkpoint recorded (:func:`recorded_quality`);
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
        return _check(DtypeChoice(name, name, "asked for" + quality_note(task, name, recorded)), device)
    if saved == "int8" and device.type == "cpu":  # its float weights would only be the dequantized int8 ones
        return DtypeChoice("int8", "auto", "the checkpoint is saved in int8" + quality_note(task, "int8", recorded))
    env = os.environ.get(ENV, "").strip()
    if env and env != "auto":
        chosen = normalize(env, ENV)
        return _check(DtypeChoice(chosen, "auto", f"{ENV}={env}" + quality_note(task, chosen)), device)
    hardware = devices.bf16_reason(device)
    if not devices.native_bf16(device):
        if device.type != "cpu":  # the int8 kernels are CPU ones
            return DtypeChoice("fp32", "auto", hardware)
        allowed, why = table_allows(task, "int8", bf16_off=True)
        return DtypeChoice("int8" if allowed else "fp32", "auto", f"{hardware}; {why}")
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
    choice = announce(resolve(dtype, first.device, task, saved=checkpoint_dtype(model), current=running_dtype(model),
                              recorded=recorded_quality(model)))
    if hasattr(model, "optimize_for_inference"):
        model.optimize_for_inference(dtype=choice.torch_dtype, quantize=choice.quantize)
    else:
        model.to(choice.torch_dtype).eval()
    return choice

