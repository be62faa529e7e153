"""What an int8 checkpoint made of a model: :func:`checkpoint_dtype` (where it came from) and
:func:`running_dtype` (what its dense layers run now).

A model loaded from an int8 checkpoint (``save_pretrained(dir, dtype="int8")``, ``bertkit convert SRC OUT
--dtype int8``; format in :mod:`bertkit.weights.int8`) keeps the checkpoint's ``"quantization"`` block in
``model.quantization`` and runs int8 kernels; ``optimize_for_inference(model)`` without a dtype keeps them.
A static int8 checkpoint's model also carries its calibration plan in ``model.int8_plan``
(:func:`static_plan`), whose kernels int8 then runs.
"""

from __future__ import annotations

from torch import nn

from bertkit.inference.precision import FLOAT_NAMES
from bertkit.modeling.fast import Linear


def checkpoint_dtype(model: nn.Module) -> str | None:
    """``"int8"`` when ``model`` (a bertkit model, or any module holding one: a SentenceTransformer, a
    CrossEncoder) was loaded from an int8 checkpoint, else None. It says where the weights came from, not how
    they run now (:func:`running_dtype`): a ``dtype="auto"`` should resolve to int8 for such a model."""
    quantized = any(getattr(m, "quantization", None) is not None for m in model.modules())
    return "int8" if quantized else None


def static_plan(model: nn.Module):
    """The static int8 plan ``model`` carries (``model.int8_plan``: set by the loaders for a static int8
    checkpoint, :mod:`bertkit.weights.int8`, or by hand), as an :class:`~bertkit.inference.int8_plan.Int8Plan`;
    None for none. Its layers are named as ``model``'s own. A plan of another method version is a ValueError
    (one line: what to do)."""
    from bertkit.inference.int8_plan import Int8Plan

    plan = getattr(model, "int8_plan", None)
    if plan is None or isinstance(plan, Int8Plan):
        return plan
    return Int8Plan.from_state(*plan.to_state())


def running_dtype(model: nn.Module) -> str:
    """How ``model``'s dense layers compute now: ``"int8"`` when any has an int8 kernel
    (``optimize_for_inference(quantize="int8")`` or an int8 checkpoint), else its parameters' dtype
    (``"fp32"``, ``"bf16"``, ``"fp16"``)."""
    from bertkit.inference.optimize import Int8Kernel

    if any(isinstance(m, Linear) and isinstance(m.packed, Int8Kernel) for m in model.modules()):
        return "int8"
    dtype = next(model.parameters()).dtype
    return FLOAT_NAMES.get(dtype, str(dtype).removeprefix("torch."))
