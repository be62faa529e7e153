"""The int8 checkpoint format: dense weights as int8 + a float32 scale per output channel, in safetensors.

An int8 checkpoint is an HF-format directory (``config.json`` + ``model.safetensors``) where every dense layer
``M`` listed in ``config.json``'s ``"quantization"`` block stores

* ``M.weight``: int8 ``[out, in]``, and
* ``M.weight_scale``: float32 ``[out]``, with ``weight = M.weight * M.weight_scale[:, None]``

(:mod:`bertkit.modeling.quantization`: symmetric, per output channel, the int8 kernel's own quantization).
Everything else (embeddings, LayerNorms, biases, tied weights) stays float32. The block::

    "quantization": {"method": "bertkit-int8", "bits": 8, "granularity": "per-output-channel",
                     "symmetric": true, "scale_dtype": "float32", "scale_suffix": "_scale",
                     "activations": "dynamic", "modules": ["bert.encoder.layer.0.attention.self.query", ...]}

Reading (:func:`dequantize_state`) checks every listed tensor and its scale (present, dtype, shape, finite
positive scales at most :data:`MAX_SCALE` that the quantizer makes) and gives the float32 weights; a damaged
file is a ``ValueError`` naming the tensor (and a bad scale's channel). HF transformers does not read this
format: ``bertkit convert DIR OUT --dtype fp32`` writes the dequantized float checkpoint.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bertkit.modeling.quantization import QMAX, dequantize_weight, quantize_weight

KEY = "quantization"
METHOD = "bertkit-int8"
SCALE_SUFFIX = "_scale"
DTYPES = ("fp32", "int8")
#: the largest scale read: a weight ``127 * scale`` above sqrt(float32 max) ~ 1.8e19 overflows float32 as soon as
#: it multiplies another such number (an attention score, a LayerNorm's variance), so no working model has one
MAX_SCALE = math.sqrt(torch.finfo(torch.float32).max) / QMAX
#: the block's fixed fields (``modules`` is added per checkpoint)
FIELDS: dict[str, Any] = {"method": METHOD, "bits": 8, "granularity": "per-output-channel", "symmetric": True,
                          "scale_dtype": "float32", "scale_suffix": SCALE_SUFFIX, "activations": "dynamic"}


def check_dtype(dtype: str | None) -> str | None:
    """``dtype`` for saving: None, ``"fp32"`` (``"float32"``) or ``"int8"``; ValueError otherwise."""
    dtype = {"float32": "fp32"}.get(dtype, dtype)
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} (or None: as the model was loaded), got {dtype!r}.")
    return dtype


def quantize_state(state: dict[str, torch.Tensor], modules: list[str]) -> tuple[dict[str, torch.Tensor], dict]:
    """``(state, block)``: ``state`` with each ``modules`` entry's ``.weight`` replaced by its int8 values and its
    float32 scales added as ``.weight_scale``; ``block`` the config.json entry describing it."""
    out = dict(state)
    for module in modules:
        q, scale = quantize_weight(state[f"{module}.weight"])
        out[f"{module}.weight"], out[f"{module}.weight{SCALE_SUFFIX}"] = q.contiguous(), scale.contiguous()
    return out, {**FIELDS, "modules": sorted(modules)}


def read_block(raw_config: dict, source: Any) -> dict | None:
    """The ``"quantization"`` block of a ``config.json`` (None when absent), checked: a block bertkit cannot
    read is a ValueError naming ``source``'s config and the field."""
    block = raw_config.get(KEY)
    if block is None:
        return None
    where = f"{source}: config.json's {KEY!r}"
    if not isinstance(block, dict):
        raise ValueError(f"{where} must be an object, got {type(block).__name__}; the config is damaged.")
    for name, value in FIELDS.items():
        if block.get(name) != value:
            raise ValueError(f"{where} has {name}={block.get(name)!r}; bertkit reads {name}={value!r} "
                             f"(its own int8 format). The checkpoint was written by another tool or is damaged.")
    modules = block.get("modules")
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(f"{where} has no 'modules' list of module names; the config is damaged.")
    return block


def _check_scale_values(scale: torch.Tensor, scale_name: str, source: Any) -> None:
    """ValueError naming ``scale_name`` and its first bad channel unless every scale is finite, positive and at
    most :data:`MAX_SCALE`."""
    bad = ~torch.isfinite(scale) | (scale <= 0) | (scale > MAX_SCALE)
    if not bad.any():
        return
    channel = int(bad.nonzero()[0, 0])
    value = float(scale[channel])
    why = (f"its weights reach {QMAX * value:.3g}, whose products overflow float32 (a weight of an int8 checkpoint "
           f"is at most {QMAX * MAX_SCALE:.3g})" if math.isfinite(value) and value > 0 else
           "a scale must be a finite positive number")
    raise ValueError(f"{source}: {scale_name!r} is {value:.6g} at channel {channel} ({int(bad.sum())} bad of "
                     f"{scale.numel()}): {why}. The weights file is damaged; write it again (bertkit convert SRC "
                     "OUT --dtype int8).")


def dequantize_state(state: dict[str, torch.Tensor], block: dict, source: Any) -> dict[str, torch.Tensor]:
    """``state`` (an int8 checkpoint's tensors) with every listed weight dequantized to float32 and the scales
    removed. Raises ValueError naming the tensor when one is missing, of the wrong dtype or shape, when a scale
    is not finite and positive (or above :data:`MAX_SCALE`) or not one bertkit's quantizer makes, or when an
    int8 or scale tensor is not listed in the block."""
    listed = set(block["modules"])
    out = dict(state)
    for module in sorted(listed):
        name, scale_name = f"{module}.weight", f"{module}.weight{SCALE_SUFFIX}"
        q, scale = state.get(name), state.get(scale_name)
        for tensor_name, tensor in ((name, q), (scale_name, scale)):
            if tensor is None:
                raise ValueError(f"{source}: the int8 checkpoint lacks the tensor {tensor_name!r} (config.json "
                                 f"lists {module!r} as quantized); the weights file is truncated or from another "
                                 "checkpoint. Write it again (bertkit convert SRC OUT --dtype int8).")
        if q.dtype != torch.int8 or q.dim() != 2:
            raise ValueError(f"{source}: {name!r} is {q.dtype} {list(q.shape)}; an int8 checkpoint stores it as a "
                             "2-D int8 tensor. The weights file is damaged or not bertkit's int8 format.")
        if scale.dtype != torch.float32 or list(scale.shape) != [q.shape[0]]:
            raise ValueError(f"{source}: {scale_name!r} is {scale.dtype} {list(scale.shape)}; expected float32 "
                             f"[{q.shape[0]}] (one scale per output channel of {name!r}). The weights file is "
                             "damaged or not bertkit's int8 format.")
        _check_scale_values(scale, scale_name, source)
        weight = dequantize_weight(q, scale)
        again_q, again_scale = quantize_weight(weight)
        if not torch.equal(again_scale, scale) or not torch.equal(again_q, q):
            raise ValueError(f"{source}: {scale_name!r} holds scales bertkit's int8 quantizer does not make (not "
                             "the row's largest |weight| / 127), so the stored int8 values of "
                             f"{name!r} would not be the ones that run. The weights file is damaged.")
        out[name] = weight
        del out[scale_name]
    stray = sorted(n for n, t in out.items() if t.dtype == torch.int8 or n.endswith(f".weight{SCALE_SUFFIX}"))
    if stray:
        raise ValueError(f"{source}: {stray[0]!r} is an int8 tensor or scale that config.json's {KEY!r} block does "
                         f"not list ({len(stray)} such tensors); the config and the weights file disagree.")
    return out

