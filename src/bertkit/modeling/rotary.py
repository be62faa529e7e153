"""Rotary position embeddings (RoPE), the one implementation every rotary family uses.

* :func:`rope_inverse_frequencies`: the per-pair frequencies of one rope configuration (HF's ``rope_parameters``:
  ``rope_theta``, ``rope_type`` and the type's keys, :data:`bertkit.families.ROPE_TYPES`) and the factor by
  which cos/sin are scaled (yarn's attention factor; 1 otherwise). ``partial_rotary_factor`` rotates only the
  first ``int(head_dim * factor)`` features of a head.
* :func:`rotary_tables`: cos/sin at a batch's position ids; :func:`rotate`: RoPE applied to queries or keys.

The types follow HF transformers' ``ROPE_INIT_FUNCTIONS`` (the reference the tests compare with):
``default``; ``linear`` (positions divided by ``factor``); ``dynamic`` (NTK: the base grows once the sequence is
longer than ``max_position_embeddings``; computed from the batch's length, stateless, where HF keeps the largest
length it has seen until a batch fits the original length again); ``yarn`` (interpolation blended with
extrapolation between ``beta_fast`` / ``beta_slow`` rotations, cos/sin scaled by the attention factor);
``llama3`` (long wavelengths divided by ``factor``, smoothed between ``low_freq_factor`` / ``high_freq_factor``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from bertkit.config import ROPE_TYPES  # the rope types and their keys (data of bertkit.families)


def rope_inverse_frequencies(rope_parameters: Mapping[str, Any], head_dim: int, max_position_embeddings: int, *,
                             seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """``(inv_freq [rotary_dim // 2] float32, attention_scaling)`` of HF-style ``rope_parameters`` (``rope_theta``,
    ``rope_type`` (absent: ``"default"``; HF's older ``type`` is read too) and its keys) for heads of ``head_dim``.

    ``seq_len``: the longest position + 1 of the batch, read by ``dynamic`` only (None: no growth). Raises
    ``ValueError`` naming a rope type bertkit does not implement or a key the type needs.
    """
    params = dict(rope_parameters)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type={rope_type!r} is not supported; bertkit implements {', '.join(ROPE_TYPES)}.")
    missing = [key for key in ROPE_TYPES[rope_type] if params.get(key) is None]
    if missing:
        raise ValueError(f"rope_type={rope_type!r} needs rope_parameters key {missing[0]!r}; add it to the config.")
    theta = float(params["rope_theta"])
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    original = params.get("original_max_position_embeddings") or max_position_embeddings
    if rope_type == "default":
        return 1.0 / theta ** exponents, 1.0
    factor = params["factor"]
    if rope_type == "linear":
        return 1.0 / theta ** exponents / factor, 1.0
    if rope_type == "dynamic":
        length = max(seq_len or 0, max_position_embeddings)
        theta *= (factor * length / max_position_embeddings - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / theta ** exponents, 1.0
    if rope_type == "yarn":
        return _yarn(params, theta, dim, exponents, original)
    return _llama3(params, 1.0 / theta ** exponents, original), 1.0


def _yarn(params: dict, theta: float, dim: int, exponents: torch.Tensor,
          original: int) -> tuple[torch.Tensor, float]:
    """YaRN: per frequency, extrapolation (the plain frequency) above ``beta_fast`` rotations over the original
    length, interpolation (divided by ``factor``) below ``beta_slow``, a linear ramp between."""
    factor = params["factor"]

    def mscale(scale: float, coefficient: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * coefficient * math.log(scale) + 1.0

    attention = params.get("attention_factor")
    if attention is None:
        if params.get("mscale") and params.get("mscale_all_dim"):
            attention = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
        else:
            attention = mscale(factor)

    def dimension_of(rotations: float) -> float:  # the feature index that turns `rotations` times over `original`
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension_of(params.get("beta_fast") or 32), dimension_of(params.get("beta_slow") or 1)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)).clamp(0, 1)
    base = theta ** exponents
    extrapolated = 1 - ramp  # the weight of the unscaled frequency
    return (1.0 / (factor * base)) * ramp + (1.0 / base) * extrapolated, float(attention)


def _llama3(params: dict, inv_freq: torch.Tensor, original: int) -> torch.Tensor:
    """Llama 3.1: wavelengths longer than ``original / low_freq_factor`` divided by ``factor``, shorter than
    ``original / high_freq_factor`` kept, a smooth blend between."""
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= original / high) & (wavelength <= original / low)
    return torch.where(medium, blended, scaled)


def rotary_tables(position_ids: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` ``[1|B, L, 2 * len(inv_freq)]`` at ``position_ids [1|B, L]``, computed in float32 and scaled
    by ``attention_scaling`` (the frequencies repeat over both halves, as :func:`rotate` expects)."""
    angles = position_ids[..., None].float() * inv_freq.to(position_ids.device, torch.float32)  # [1|B, L, d / 2]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos(), angles.sin()
    if attention_scaling != 1.0:
        cos, sin = cos * attention_scaling, sin * attention_scaling
    return cos.to(dtype), sin.to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x [B, nh, L, hd]`` with ``cos, sin [1|B, L, d]``, in float32 like HF's, returned in x's dtype:
    ``x * cos + rotate_half(x) * sin`` with ``rotate_half([x1, x2]) = [-x2, x1]`` over the halves of the first
    ``d`` features; features beyond ``d`` (a partial rotary dimension) pass unchanged."""
    d = cos.shape[-1]
    x32 = x.float()
    part, rest = (x32, None) if d == x.shape[-1] else (x32[..., :d], x32[..., d:])
    x1, x2 = part.chunk(2, dim=-1)
    rotated = part * cos[:, None] + torch.cat((-x2, x1), dim=-1) * sin[:, None]
    return (rotated if rest is None else torch.cat((rotated, rest), dim=-1)).to(x.dtype)
