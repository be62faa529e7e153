"""Inference on the fast path: :func:`optimize_for_inference`, one call.

``optimize_for_inference(model)`` puts a bertkit model in eval mode and gives every dense layer a
kernel prepared once: oneDNN's inner product on a weight reordered once (float32 where oneDNN is the
faster backend of this machine, bfloat16 always), or int8 dynamic quantization. Static (calibrated) int8:
:mod:`bertkit.inference.int8_plan` (``calibrate(model, texts) -> plan``, ``apply(model, plan)``). Parameter names,
``state_dict`` and ``save_pretrained`` stay HF's: the prepared weights live beside the parameters,
are rebuilt if a parameter changes, and are never saved (``save_pretrained(dir, dtype="int8")`` writes an int8
checkpoint, which loads with the same int8 kernels: :mod:`bertkit.inference.quantized`).
"""

from bertkit.devices import native_bf16
from bertkit.inference import int8_plan
from bertkit.inference.optimize import Int8Kernel, PackedKernel, StaticInt8Kernel, optimize_for_inference
from bertkit.inference.quantized import checkpoint_dtype, running_dtype

__all__ = ["Int8Kernel", "PackedKernel", "StaticInt8Kernel", "checkpoint_dtype", "int8_plan", "native_bf16",
           "optimize_for_inference", "running_dtype"]
