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

That is format version 1, dynamic int8 (activations quantized per batch as the model runs). Format version 2 is
static int8 (a calibrated model: ``bertkit convert SRC -o OUT --dtype int8 [--calibration FILE]``)::

    "quantization": {..., "format_version": 2, "activations": "static", "modules": [the layers that run int8],
                     "plan": {"method": "bertkit-static-int8", "method_version": 1, "calibration": {"source": ...,
                              "sha256": ..., "texts": ..., "held_out": ...}, "quality": {"top10": ...,
                              "ndcg10": ...}, "layers": {name: {"mode": "int8" | "float", "scale": ...,
                              "zero_point": ..., "reason": ..., "smooth": bool, ...}}, ...}}

``"plan"`` is :meth:`bertkit.inference.int8_plan.Int8Plan.to_state`'s JSON with the layers under the
checkpoint's (HF) names; its tensors (a SmoothQuant vector per smoothed layer) are stored in
``model.safetensors`` as ``int8_plan.<layer>.smooth``. The int8 weights are version 1's (of the float weight; the
static kernel of a smoothed layer smooths their round trip as it prepares). A layer the plan keeps float
(``"mode": "float"``) is not in ``modules``: its weight stays float32. A version-1 block has no
``format_version``.

Reading (:func:`dequantize_state`) checks every listed tensor and its scale (present, dtype, shape, finite
positive scales at most :data:`MAX_SCALE` that the quantizer makes) and gives the float32 weights; a damaged
file is a ``ValueError`` naming the tensor (and a bad scale's channel); a block of a format version this bertkit
does not know is one naming the file and the fix. HF transformers does not read this format: ``bertkit convert
DIR OUT --dtype fp32`` writes the dequantized float checkpoint.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
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
#: the block's fixed fields (``modules`` is added per checkpoint), format version 1 (dynamic int8)
FIELDS: dict[str, Any] = {"method": METHOD, "bits": 8, "granularity": "per-output-channel", "symmetric": True,
                          "scale_dtype": "float32", "scale_suffix": SCALE_SUFFIX, "activations": "dynamic"}
#: format version 2 (static int8): version 1's fields, static activations, a ``"plan"``
STATIC_FIELDS: dict[str, Any] = {**FIELDS, "format_version": 2, "activations": "static"}
#: format version -> its fixed fields (version 1's block has no ``format_version``)
VERSIONS: dict[int, dict[str, Any]] = {1: FIELDS, 2: STATIC_FIELDS}
#: the plan's quality measures a conversion reports (key -> how it is named)
SHOWN_QUALITY = {"top10": "top-10 neighbours", "ndcg10": "NDCG@10", "min_cosine": "min cosine"}
#: the safetensors prefix of a static plan's tensors
PLAN_PREFIX = "int8_plan."


@dataclass
class PlanState:
    """A static int8 plan as an int8 checkpoint stores it: ``meta`` (JSON) and ``tensors`` (by name), layers
    under bertkit's module names. :mod:`bertkit.inference.int8_plan` makes its ``Int8Plan`` of it
    (``Int8Plan.from_state(*state.to_state())``); saving takes either (both have ``to_state``)."""

    meta: dict
    tensors: dict[str, torch.Tensor]

    def to_state(self) -> tuple[dict, dict[str, torch.Tensor]]:
        return self.meta, self.tensors


def check_dtype(dtype: str | None) -> str | None:
    """``dtype`` for saving: None, ``"fp32"`` (``"float32"``) or ``"int8"``; ValueError otherwise."""
    dtype = {"float32": "fp32"}.get(dtype, dtype)
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} (or None: as the model was loaded), got {dtype!r}.")
    return dtype


def quantize_state(state: dict[str, torch.Tensor], modules: list[str], plan: PlanState | None = None
                   ) -> tuple[dict[str, torch.Tensor], dict]:
    """``(state, block)``: ``state`` with each ``modules`` entry's ``.weight`` replaced by its int8 values and its
    float32 scales added as ``.weight_scale``; ``block`` the config.json entry describing it. With a static
    ``plan`` (layers under the same names as ``modules``): format version 2, only the layers the plan runs in
    int8 quantized, the plan's JSON in the block and its tensors in the state under :data:`PLAN_PREFIX`."""
    fields = FIELDS
    if plan is not None:  # a plan's layer without a weight here (an LM decoder tied to the embeddings) runs int8
        layers = plan.meta["layers"]  # from the float table it shares, as in memory
        modules = [m for m in modules if m in layers and layers[m]["mode"] == "int8"]
        fields = {**STATIC_FIELDS, "plan": plan.meta}
    out = dict(state)
    for module in modules:  # a smoothed layer's kernel smooths these int8 weights' round trip (W s) as it prepares
        q, scale = quantize_weight(state[f"{module}.weight"])
        out[f"{module}.weight"], out[f"{module}.weight{SCALE_SUFFIX}"] = q.contiguous(), scale.contiguous()
    if plan is not None:
        out.update({f"{PLAN_PREFIX}{name}": t.detach().float().contiguous().cpu() for name, t in plan.tensors.items()})
    return out, {**fields, "modules": sorted(modules)}


def renamed_plan(plan: PlanState, rename: dict[str, str]) -> PlanState:
    """``plan`` with its layers renamed by ``rename`` (old -> new; a layer not in it keeps its name), its tensors
    too (a tensor is named after its layer: ``<layer><suffix>``)."""
    layers = plan.meta["layers"]
    meta = {**plan.meta, "layers": {rename.get(name, name): entry for name, entry in layers.items()}}
    tensors = {}
    for key, tensor in plan.tensors.items():
        layer = max((name for name in layers if key.startswith(f"{name}.")), key=len, default=None)
        tensors[key if layer is None else rename.get(layer, layer) + key[len(layer):]] = tensor  # "<layer>.smooth"
    return PlanState(meta, tensors)


def fitted_plan(plan: PlanState, model: torch.nn.Module) -> PlanState:
    """``plan`` with its layers named as ``model``'s dense layers: a checkpoint saved from a task model
    (``bert.encoder...``) loads into a bare encoder (``encoder...``) and the other way round; layers the model
    lacks (a head it was built without) are left out, as their weights are."""
    dense = {name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    rename = {}
    for name in plan.meta["layers"]:
        for candidate in (name, f"bert.{name}", name.removeprefix("bert.")):
            if candidate in dense:
                rename[name] = candidate
                break
    fitted = renamed_plan(plan, rename)
    kept = set(rename.values())
    layers = {name: entry for name, entry in fitted.meta["layers"].items() if name in kept}
    tensors = {k: t for k, t in fitted.tensors.items() if any(k.startswith(f"{name}.") for name in layers)}
    return PlanState({**fitted.meta, "layers": layers}, tensors)


def take_plan(state: dict[str, torch.Tensor], block: dict, source: Any
              ) -> tuple[dict[str, torch.Tensor], PlanState | None]:
    """``(state without the plan's tensors, the plan)`` of a format-2 checkpoint (``(state, None)`` for format
    1); a ValueError naming ``source`` when a smoothed layer's tensor is missing or a tensor belongs to no layer."""
    if block.get("format_version", 1) < 2:
        return state, None
    tensors = {k.removeprefix(PLAN_PREFIX): t for k, t in state.items() if k.startswith(PLAN_PREFIX)}
    rest = {k: t for k, t in state.items() if not k.startswith(PLAN_PREFIX)}
    layers = block["plan"]["layers"]
    for name, entry in layers.items():
        if entry.get("smooth") and not any(k.startswith(f"{name}.") for k in tensors):
            raise ValueError(f"{source}: the static int8 plan smooths {name!r} but model.safetensors lacks its "
                             f"tensor {PLAN_PREFIX}{name}.*; the weights file is truncated or from another "
                             "checkpoint. Convert it again (bertkit convert SRC -o OUT --dtype int8).")
    stray = sorted(k for k in tensors if not any(k.startswith(f"{name}.") for name in layers))
    if stray:
        raise ValueError(f"{source}: model.safetensors holds {PLAN_PREFIX}{stray[0]}, which belongs to no layer of "
                         "config.json's static int8 plan; the config and the weights file disagree.")
    return rest, PlanState(block["plan"], tensors)


def read_block(raw_config: dict, source: Any) -> dict | None:
    """The ``"quantization"`` block of a ``config.json`` (None when absent), checked: a block bertkit cannot
    read is a ValueError naming ``source``'s config and the field."""
    block = raw_config.get(KEY)
    if block is None:
        return None
    where = f"{source}: config.json's {KEY!r}"
    if not isinstance(block, dict):
        raise ValueError(f"{where} must be an object, got {type(block).__name__}; the config is damaged.")
    version = block.get("format_version", 1)
    if version not in VERSIONS:
        raise ValueError(f"{where} is int8 format version {version!r}; this bertkit reads versions "
                         f"{sorted(VERSIONS)}: upgrade bertkit, or convert the float model again with this one "
                         "(bertkit convert SRC -o OUT --dtype int8).")
    for name, value in VERSIONS[version].items():
        if block.get(name) != value:
            raise ValueError(f"{where} has {name}={block.get(name)!r}; bertkit reads {name}={value!r} "
                             f"(its own int8 format). The checkpoint was written by another tool or is damaged.")
    modules = block.get("modules")
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(f"{where} has no 'modules' list of module names; the config is damaged.")
    plan = block.get("plan")
    if version >= 2 and not (isinstance(plan, dict) and isinstance(plan.get("layers"), dict)):
        raise ValueError(f"{where} is static int8 (format version 2) without a 'plan' object holding 'layers'; "
                         "the config is damaged. Convert the float model again (bertkit convert SRC -o OUT "
                         "--dtype int8).")
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



def describe_block(directory: Any) -> str:
    """``"; static int8: ..."``: what the static int8 checkpoint in ``directory`` records, in one phrase (its
    int8 and float layers, the calibration set, the quality measured on its held-out texts); ``""`` for any
    other checkpoint."""
    config = Path(directory) / "config.json"
    block = json.loads(config.read_text(encoding="utf-8")).get(KEY) if config.is_file() else None
    if not isinstance(block, dict) or block.get("activations") != "static":
        return ""
    plan = block["plan"]
    floats = sorted(name for name, entry in plan["layers"].items() if entry["mode"] != "int8")
    calibration, quality = plan.get("calibration", {}), plan.get("quality", {})
    measured = ", ".join(f"{label} {quality[key]:.4f}" for key, label in SHOWN_QUALITY.items() if key in quality)
    kept = f" ({', '.join(floats[:3])}{', ...' if len(floats) > 3 else ''})" if floats else ""
    return (f"; static int8: {len(plan['layers']) - len(floats)} dense layers int8, {len(floats)} float{kept}; "
            f"calibrated on {calibration.get('source')} ({calibration.get('texts')} texts + "
            f"{calibration.get('held_out')} held out); held-out quality against fp32: {measured or 'not measured'}")
