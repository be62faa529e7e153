"""Static int8: the plan that says how each dense layer runs, :func:`calibrate` that makes it, :func:`apply`.

Static int8 = the weights int8 per output channel (:mod:`bertkit.modeling.quantization`, as dynamic int8) + per
dense layer a FIXED activation quantization measured once on a calibration set: ``q = clamp(round(x / scale) +
zero_point, 0, 255)`` (uint8, asymmetric), optionally after dividing the input channels by a SmoothQuant vector
``smooth`` that the weight's input columns are multiplied by (``(x / s) (W s)ᵀ = x Wᵀ``), + a per-layer fallback:
a layer whose int8 error hurts retrieval stays float.

An :class:`Int8Plan` holds one :class:`LayerPlan` per dense layer (by its name in the model), where the
calibration came from (:class:`CalibrationSource`), the method version (:data:`METHOD_VERSION`) and the quality
measured on the calibration set's held-out split. It is plain data: :meth:`Int8Plan.to_state` gives a JSON-able
dict and a dict of tensors (the smooth vectors), :meth:`Int8Plan.from_state` reads them back (an int8 checkpoint
stores both: :mod:`bertkit.weights.int8`). :func:`calibrate` measures a model on texts and returns a plan;
:func:`apply` attaches the static kernels (:class:`bertkit.inference.optimize.StaticInt8Kernel`) it describes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from bertkit.inference.optimize import attach_static_int8

__all__ = ["METHOD_VERSION", "CalibrationSource", "Int8Plan", "LayerPlan", "Targets", "apply", "calibrate"]

#: the version of the calibration method and of the plan's layout; a plan of another version is not read
METHOD_VERSION = 1
METHOD = "bertkit-static-int8"
#: what a layer's ``mode`` may be
MODES = ("int8", "float")
#: the activation grid: uint8
QMIN, QMAX = 0, 255
#: the tensors' key in :meth:`Int8Plan.to_state`: ``f"{layer}{SMOOTH_SUFFIX}"``
SMOOTH_SUFFIX = ".smooth"


@dataclass
class LayerPlan:
    """How one dense layer runs. ``mode``: ``"int8"`` (static kernel) or ``"float"`` (fallback); ``reason``: why,
    in words; ``scale`` / ``zero_point``: the input's fixed quantization (uint8, ``x ≈ (q - zero_point) * scale``);
    ``smooth``: float32 ``[in_features]`` SmoothQuant factors or None; ``impact``: the retrieval metric's loss
    (1 - top-10 neighbours shared) measured with this layer alone in int8, or None when not measured."""

    mode: str
    scale: float
    zero_point: int
    reason: str = ""
    smooth: torch.Tensor | None = None
    impact: float | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"a layer plan's mode must be one of {MODES}, got {self.mode!r}.")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"a layer plan's activation scale must be finite and positive, got {self.scale!r}.")
        if not QMIN <= int(self.zero_point) <= QMAX:
            raise ValueError(f"a layer plan's zero_point must be in [{QMIN}, {QMAX}], got {self.zero_point!r}.")
        self.zero_point = int(self.zero_point)
        if self.smooth is not None:
            self.smooth = self.smooth.detach().float().contiguous()
            if self.smooth.dim() != 1 or not bool((self.smooth > 0).all() and torch.isfinite(self.smooth).all()):
                raise ValueError("a layer plan's smooth vector must be 1-D, finite and positive.")


@dataclass
class CalibrationSource:
    """Where a plan's activation ranges come from: ``source`` (a file name or ``"bertkit:austen"``, the default
    set), the ``sha256`` of its texts (joined by newlines, UTF-8), how many ``texts`` calibrated and how many were
    ``held_out`` to choose the fallbacks."""

    source: str
    sha256: str
    texts: int
    held_out: int


@dataclass
class Int8Plan:
    """Per dense layer a :class:`LayerPlan`; the calibration's provenance, the method and its settings
    (``observer``, ``smooth_alpha``), and ``quality``: metric -> value measured on the held-out split
    (``top10``: share of fp32's top-10 neighbours kept; ``ndcg10``: NDCG@10 against fp32's ranking;
    ``min_cosine`` / ``mean_cosine`` to fp32's embeddings)."""

    layers: dict[str, LayerPlan]
    calibration: CalibrationSource
    observer: str = "mse"
    smooth_alpha: float | None = None
    quality: dict[str, float] = field(default_factory=dict)
    method_version: int = METHOD_VERSION

    @property
    def int8_layers(self) -> list[str]:
        return [name for name, p in self.layers.items() if p.mode == "int8"]

    @property
    def fallbacks(self) -> dict[str, str]:
        """Layer name -> reason, for the layers that stay float."""
        return {name: p.reason for name, p in self.layers.items() if p.mode == "float"}

    def to_state(self) -> tuple[dict, dict[str, torch.Tensor]]:
        """``(meta, tensors)``: a JSON-able dict and the smooth vectors by ``f"{layer}{SMOOTH_SUFFIX}"``."""
        layers = {name: {k: v for k, v in asdict(p).items() if k != "smooth"} | {"smooth": p.smooth is not None}
                  for name, p in self.layers.items()}
        meta = {"method": METHOD, "method_version": self.method_version, "observer": self.observer,
                "smooth_alpha": self.smooth_alpha, "calibration": asdict(self.calibration),
                "quality": dict(self.quality), "layers": layers}
        tensors = {f"{name}{SMOOTH_SUFFIX}": p.smooth for name, p in self.layers.items() if p.smooth is not None}
        return meta, tensors

    @classmethod
    def from_state(cls, meta: dict, tensors: dict[str, torch.Tensor]) -> Int8Plan:
        """The plan :meth:`to_state` wrote; ValueError (one line) for another method version or a missing part."""
        version = meta.get("method_version")
        if meta.get("method") != METHOD or version != METHOD_VERSION:
            raise ValueError(f"static int8 plan of method {meta.get('method')!r} version {version!r}; this bertkit "
                             f"reads {METHOD!r} version {METHOD_VERSION}: convert the float model again "
                             "(bertkit convert SRC -o OUT --dtype int8) or upgrade bertkit.")
        layers = {}
        for name, entry in meta["layers"].items():
            entry = dict(entry)
            smooth = None
            if entry.pop("smooth"):
                key = f"{name}{SMOOTH_SUFFIX}"
                if key not in tensors:
                    raise ValueError(f"static int8 plan: layer {name} has a smooth vector but the tensor {key} is "
                                     "missing; the checkpoint is damaged: convert it again.")
                smooth = tensors[key]
            layers[name] = LayerPlan(smooth=smooth, **entry)
        return cls(layers=layers, calibration=CalibrationSource(**meta["calibration"]), observer=meta["observer"],
                   smooth_alpha=meta["smooth_alpha"], quality=dict(meta["quality"]), method_version=version)


@dataclass(frozen=True)
class Targets:
    """What :func:`calibrate`'s fallback search aims at on the held-out split: ``top10`` (share of fp32's top-10
    neighbours kept) and ``ndcg10`` (NDCG@10 relative to fp32's ranking); ``max_fallbacks`` bounds how many
    layers may stay float (a share of the dense layers)."""

    top10: float = 0.97
    ndcg10: float = 0.995
    max_fallback_share: float = 0.5


def calibrate(model: nn.Module, texts: Sequence[str] | None = None, *,
              embed: Callable[[list[str]], torch.Tensor] | None = None, source: str | None = None,
              observer: str = "mse", smooth_alpha: float | None = None, held_out: float = 0.3,
              targets: Targets = Targets()) -> Int8Plan:
    """Measure ``model``'s dense layers on ``texts`` (None: the default set shipped in the package) and return
    the :class:`Int8Plan` for it; the model is left as it was (float, no kernels attached).

    ``embed(texts) -> [n, d]`` float embeddings runs the model (default: ``model.encode(texts,
    convert_to_tensor=True)``); ``observer``: how an activation range becomes a scale (``"minmax"``,
    ``"percentile"``, ``"mse"``: :mod:`bertkit.inference.calibration`); ``smooth_alpha``: SmoothQuant's migration
    strength (None: none); ``held_out``: the share of texts kept out of the ranges to measure retrieval on
    (each held-out text a query against the others), which chooses the fallbacks until ``targets`` hold.
    """
    from bertkit.inference.calibration import run_calibration  # here: calibration imports this module's types

    return run_calibration(model, texts, embed=embed, source=source, observer=observer,
                           smooth_alpha=smooth_alpha, held_out=held_out, targets=targets)


def apply(model: nn.Module, plan: Int8Plan) -> nn.Module:
    """Attach the static int8 kernels ``plan`` describes to ``model``'s dense layers (in place, eval mode; CPU,
    float32): an ``"int8"`` layer gets :class:`~bertkit.inference.optimize.StaticInt8Kernel`, a ``"float"``
    one the float kernel :func:`~bertkit.inference.optimize_for_inference` gives float32. ValueError (one line)
    when a plan's layer is not a dense layer of the model or its smooth vector does not fit it. Returns
    ``model``."""
    return attach_static_int8(model, plan)
