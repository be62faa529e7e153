"""int8 weights: symmetric, one float32 scale per output channel; one definition for the kernels and the checkpoints.

``weight = q * scale[:, None]`` with ``q`` int8 in [-127, 127] and ``scale`` float32 ``[out_features]``.
The int8 inference kernel (:class:`bertkit.inference.Int8Kernel`) quantizes a layer's float weight with
:func:`quantize_weight`; an int8 checkpoint stores exactly that ``(q, scale)`` and loading dequantizes it
(:func:`dequantize_weight`). The scales are chosen so that this round trip is exact: quantizing the
dequantized weight gives the same ``q`` and ``scale`` back, bit for bit, so a model loaded from an int8
checkpoint runs the same kernels as the in-memory int8 model it was saved from.

Why it is exact: a scale is a fixed point of ``s -> fl(fl(127 s) / 127)`` (float32 arithmetic; the map is
idempotent, checked over every float32 scale from 2⁻¹²⁶ to 2¹²⁰). A dequantized row's largest magnitude is
``fl(127 s)`` (its ``q`` reaches ±127), so its scale comes back as ``s``; and ``fl(q s) / s`` is within a few
ulps of the integer ``q``, so rounding gives ``q`` back.
"""

from __future__ import annotations

import torch

QMAX = 127
#: the scale of an all-zero row (any positive number would do; zero would divide by zero)
MIN_SCALE = 1e-12


def _through_grid(scale: torch.Tensor) -> torch.Tensor:
    """``fl(fl(127 s) / 127)`` in float32 (tensor operands: true IEEE products and quotients)."""
    qmax = torch.full_like(scale, QMAX)
    return torch.div(torch.mul(scale, qmax), qmax)


def weight_scales(weight: torch.Tensor) -> torch.Tensor:
    """Per output channel (row of ``weight [out, in]``): ``max |w| / 127`` in float32, moved to the nearest
    fixed point of the round trip (at most one ulp away). float32 ``[out]``."""
    amax = weight.detach().float().abs().amax(dim=1)
    scale = torch.div(amax, torch.full_like(amax, QMAX)).clamp_(min=MIN_SCALE)
    return _through_grid(scale)


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``q`` int8 ``[out, in]`` = round(w / scale) (half to even), ``scale`` float32 ``[out]``."""
    w = weight.detach().float()
    scale = weight_scales(w)
    q = torch.round(torch.div(w, scale[:, None])).clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale


def seven_bit(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q7, scale7)``: the weights on a 7-bit grid, ``q7 = round(q * 64 / 127)`` in [-64, 64] and
    ``scale7 = scale * 127 / 64`` (the row's largest |weight| / 64: ONNX Runtime's ``reduce_range`` grid), for
    CPUs whose int8 products saturate 16-bit pair sums (:func:`bertkit.devices.int8_saturates`):
    255 x 64 x 2 = 32,640 stays below 32,767. Derived from ``q`` alone, so an int8 checkpoint's model gets the
    same 7-bit weights as the in-memory model it was saved from."""
    q7 = torch.round(torch.mul(q.float(), 64 / QMAX)).to(torch.int8)
    return q7, torch.mul(scale, QMAX / 64)


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 weight ``q * scale[:, None]``; :func:`quantize_weight` of it gives ``(q, scale)`` back when the
    scale is one :func:`weight_scales` makes."""
    return torch.mul(q.float(), scale.float()[:, None])


def dequantized_message(source: object) -> str:
    """The one-line warning when an int8 checkpoint's model runs in float: its weights are the dequantized ones."""
    return (f"{source}: an int8 checkpoint running in float: its dense weights are the int8 values times their "
            "scales (dequantized), not the original float weights; load with dtype='int8' (the default) for int8.")
