"""Calibration of static int8 (:mod:`bertkit.inference.int8_plan`): activation ranges per dense layer, the
SmoothQuant vectors, and the per-layer fallback chosen by a retrieval metric.

The texts are split (a fixed permutation) into a calibration part, whose activations give each layer's range,
and a held-out part, on which the int8 model's embeddings are ranked against fp32's (each held-out text a query,
the others the corpus): :func:`neighbour_agreement`. Two passes over the calibration part record, per dense
layer's input, each channel's min and max (which give SmoothQuant's vectors and the range), then a histogram of
the (smoothed) values over that range, from which an observer picks the clip range:

* ``"minmax"``: the whole range (no clipping; one outlier widens every step);
* ``"percentile"``: the :data:`TAIL` quantiles at each end;
* ``"mse"``: the clip range among candidate ranges with the least expected squared error (rounding inside,
  clipping outside), from the histogram.

The fallback: each layer's impact (1 - top-10 agreement with that layer alone in int8) is measured, then while
the all-int8 model misses the :class:`~bertkit.inference.int8_plan.Targets`, the layer of largest impact falls
back to float and the model is measured again.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.inference.int8_plan import QMAX, QMIN, CalibrationSource, Int8Plan, LayerPlan, Targets
from bertkit.inference.optimize import attach_static_int8
from bertkit.modeling.fast import Linear

OBSERVERS = ("minmax", "percentile", "mse")
#: the share of values the percentile observer clips at each end
TAIL = 1e-4
#: histogram bins per layer
BINS = 2048
#: the fewest texts calibrate takes: ~2/3 for the ranges, the rest held out for a top-10 check of 10+ neighbours
MIN_TEXTS = 48
#: neighbours compared on the held-out split
K = 10
DEFAULT_SOURCE = "bertkit:austen"
#: SmoothQuant's vectors stay within [1 / LIMIT, LIMIT]: a channel never seen nonzero is left alone
SMOOTH_LIMIT = 1e3


def texts_sha256(texts: Sequence[str]) -> str:
    """The sha256 of ``texts`` joined by newlines (UTF-8): a plan's record of what calibrated it."""
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def check_texts(texts: Sequence[str], source: str) -> list[str]:
    """``texts`` as a list, or ValueError (one line) when empty or too short to calibrate."""
    if isinstance(texts, str):
        raise ValueError(f"calibration texts ({source}) must be a list of texts, got one string; split it into "
                         "lines.")
    rows = [t for t in texts if t and t.strip()]
    if not rows:
        raise ValueError(f"calibration texts ({source}) are empty; give at least {MIN_TEXTS} texts, one per line, "
                         "or none for the default set.")
    if len(rows) < MIN_TEXTS:
        raise ValueError(f"calibration texts ({source}): {len(rows)} texts, too few to calibrate; give at least "
                         f"{MIN_TEXTS} (a few hundred is better), or none for the default set.")
    return rows


def split(texts: list[str], held_out: float) -> tuple[list[str], list[str]]:
    """(calibration part, held-out part): a fixed permutation, the held-out part ``held_out`` of it (11+ texts)."""
    if not 0 < held_out < 1:
        raise ValueError(f"held_out must be a share strictly between 0 and 1, got {held_out!r}.")
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    n = max(K + 1, round(len(texts) * held_out))
    return [texts[i] for i in order[n:]], [texts[i] for i in order[:n]]


# ------------------------------------------------------------------------------------------------ observation
@contextlib.contextmanager
def watching(layers: dict[str, Linear], see: Callable[[str, torch.Tensor], None]) -> Iterator[None]:
    """Call ``see(name, x)`` with every float input ``x`` (as ``[tokens, in_features]``) a layer gets."""
    def hook(name):
        def pre(module, args):
            x = args[0].detach()
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"calibration: the input of {name} is non-finite (NaN or infinity); the float "
                                 "model overflows on these texts: calibrate a float32 model.")
            see(name, x.reshape(-1, x.shape[-1]).float())
        return pre

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in layers.items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def channel_ranges(layers: dict[str, Linear], run: Callable[[], object]) -> dict[str, tuple[torch.Tensor, ...]]:
    """Per layer ``(min, max)`` of each input channel over everything ``run()`` feeds it."""
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def see(name, x):
        lo, hi = x.amin(0), x.amax(0)
        if name in seen:
            lo, hi = torch.minimum(seen[name][0], lo), torch.maximum(seen[name][1], hi)
        seen[name] = lo, hi

    with watching(layers, see), torch.no_grad():
        run()
    return seen


def histograms(layers: dict[str, Linear], run: Callable[[], object], bounds: dict[str, tuple[float, float]],
               inverse: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Per layer a :data:`BINS`-bin histogram over ``bounds[name]`` of its inputs times ``inverse[name]``."""
    counts = {name: torch.zeros(BINS, dtype=torch.float64) for name in layers}

    def see(name, x):
        if inverse[name] is not None:
            x = x * inverse[name]
        lo, hi = bounds[name]
        counts[name] += torch.histc(x, BINS, min=lo, max=hi).double()

    with watching(layers, see), torch.no_grad():
        run()
    return counts


def clip_range(hist: torch.Tensor, lo: float, hi: float, observer: str) -> tuple[float, float]:
    """The range ``[a, b]`` (``a <= 0 <= b``) the grid covers, from a histogram over ``[lo, hi]``."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if observer == "minmax" or hi - lo <= 0:
        return lo, hi
    width = (hi - lo) / BINS
    edges = lo + width * torch.arange(BINS + 1, dtype=torch.float64)
    if observer == "percentile":
        cdf = torch.cumsum(hist, 0) / hist.sum()
        a = float(edges[int(torch.searchsorted(cdf, torch.tensor(TAIL, dtype=torch.float64)))])
        b = float(edges[min(BINS, int(torch.searchsorted(cdf, torch.tensor(1 - TAIL, dtype=torch.float64))) + 1)])
        return min(a, 0.0), max(b, 0.0)
    centers = (edges[:-1] + edges[1:]) / 2
    shares = torch.linspace(0.02, 1.0, 50, dtype=torch.float64)
    a, b = (lo * shares)[:, None, None], (hi * shares)[None, :, None]  # every pair of clip points
    step = (b - a) / (QMAX - QMIN)
    inside = (centers >= a) & (centers <= b)
    err = torch.where(inside, step ** 2 / 12, (centers - centers.clamp(a, b)) ** 2) * hist
    i, j = divmod(int(err.sum(-1).argmin()), len(shares))
    return lo * float(shares[i]), hi * float(shares[j])


def grid(a: float, b: float) -> tuple[float, int]:
    """``(scale, zero_point)`` of the uint8 grid over ``[a, b]`` (``a <= 0 <= b``; 0 exactly representable)."""
    scale = max((b - a) / (QMAX - QMIN), 1e-8)
    return scale, int(min(QMAX, max(QMIN, round(QMIN - a / scale))))


def smooth_vector(lo: torch.Tensor, hi: torch.Tensor, weight: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factors ``max|x_j|^alpha / max|W_:j|^(1-alpha)`` (within [1/LIMIT, LIMIT];
    1 where a channel or its weights are all zero)."""
    x = torch.maximum(lo.abs(), hi.abs())
    w = weight.detach().float().abs().amax(0)
    s = x.clamp(min=1e-8) ** alpha / w.clamp(min=1e-8) ** (1 - alpha)
    s = torch.where((x > 0) & (w > 0), s, torch.ones_like(s))
    return s.clamp(1 / SMOOTH_LIMIT, SMOOTH_LIMIT).float()


# ------------------------------------------------------------------------------------------------ measuring
def neighbour_agreement(reference: torch.Tensor, candidate: torch.Tensor, k: int = K) -> dict[str, float]:
    """How well ``candidate`` embeddings ``[n, d]`` keep ``reference``'s retrieval: each row a query against
    the other rows. ``top10``: the mean share of the reference's top-``k`` neighbours in the candidate's;
    ``ndcg10``: NDCG@k of the candidate's ranking with the reference's top-``k`` as graded relevance
    (``k - rank``); ``min_cosine`` / ``mean_cosine`` of each row to its reference."""
    n = reference.shape[0]
    if n <= k:
        raise ValueError(f"neighbour_agreement needs more than k={k} rows, got {n}.")
    ref, cand = F.normalize(reference.float(), dim=-1), F.normalize(candidate.float(), dim=-1)
    eye = torch.eye(n, dtype=torch.bool)
    ref_top = (ref @ ref.T).masked_fill(eye, -2).topk(k, dim=1).indices
    cand_top = (cand @ cand.T).masked_fill(eye, -2).topk(k, dim=1).indices
    gains = torch.zeros(n, n)
    gains.scatter_(1, ref_top, torch.arange(k, 0, -1, dtype=torch.float32).expand(n, k))
    discount = 1 / torch.log2(torch.arange(2, k + 2, dtype=torch.float32))
    ndcg = (gains.gather(1, cand_top) * discount).sum(1) / (gains.gather(1, ref_top) * discount).sum(1)
    shared = (ref_top[:, :, None] == cand_top[:, None, :]).any(-1).float().mean(1)
    cosine = (ref * cand).sum(-1)
    return {"top10": float(shared.mean()), "ndcg10": float(ndcg.mean()), "min_cosine": float(cosine.min()),
            "mean_cosine": float(cosine.mean())}


def meets(quality: dict[str, float], targets: Targets) -> bool:
    return quality["top10"] >= targets.top10 and quality["ndcg10"] >= targets.ndcg10


@contextlib.contextmanager
def kernels_kept(model: nn.Module) -> Iterator[None]:
    """Put every dense layer's kernel (and every self-attention's fused one) back as it was afterwards."""
    saved = [(m, "packed", m.packed) for m in model.modules() if isinstance(m, Linear)]
    saved += [(m, "fused_packed", m.fused_packed) for m in model.modules() if hasattr(m, "fused_packed")]
    try:
        yield
    finally:
        for m, attr, value in saved:
            setattr(m, attr, value)


def default_embed(model: nn.Module) -> Callable[[list[str]], torch.Tensor]:
    """A sentence-embedding model's own ``encode`` (one with ``get_sentence_embedding_dimension``, such as
    :class:`bertkit.SentenceTransformer`), as texts -> float embeddings."""
    if not hasattr(model, "get_sentence_embedding_dimension"):
        raise ValueError(f"calibrate: a {type(model).__name__} is no sentence-embedding model; pass embed=, a "
                         "function from a list of texts to their float embeddings [n, d] that runs this model.")
    return lambda texts: torch.as_tensor(model.encode(texts, convert_to_tensor=True)).float()


# ------------------------------------------------------------------------------------------------ the run
def measure_layers(model: nn.Module, embed, texts: list[str], observer: str,
                   smooth_alpha: float | None) -> dict[str, LayerPlan]:
    """Every dense layer's int8 :class:`LayerPlan` from the activations ``texts`` give (two passes)."""
    if observer not in OBSERVERS:
        raise ValueError(f"observer must be one of {OBSERVERS}, got {observer!r}.")
    if smooth_alpha is not None and not 0 < smooth_alpha < 1:
        raise ValueError(f"smooth_alpha must be None or strictly between 0 and 1, got {smooth_alpha!r}.")
    layers = {name: m for name, m in model.named_modules() if isinstance(m, Linear)}
    ranges = channel_ranges(layers, lambda: embed(texts))
    layers = {name: m for name, m in layers.items() if name in ranges}  # the layers embedding runs
    smooth = {name: None if smooth_alpha is None else smooth_vector(*ranges[name], m.weight, smooth_alpha)
              for name, m in layers.items()}
    inverse = {name: None if s is None else 1 / s for name, s in smooth.items()}
    bounds = {}
    for name, (lo, hi) in ranges.items():
        if inverse[name] is not None:  # x / s with s > 0: each channel's range scales
            lo, hi = lo * inverse[name], hi * inverse[name]
        bounds[name] = float(lo.min()), float(hi.max())
    counts = histograms(layers, lambda: embed(texts), bounds, inverse)
    plans = {}
    for name in layers:
        scale, zero_point = grid(*clip_range(counts[name], *bounds[name], observer))
        plans[name] = LayerPlan("int8", scale, zero_point, reason="calibrated", smooth=smooth[name])
    return plans


def quality_of(model: nn.Module, embed, texts: list[str], reference: torch.Tensor,
               layers: dict[str, LayerPlan], calibration: CalibrationSource) -> dict[str, float]:
    """:func:`neighbour_agreement` of ``model`` with ``layers`` applied against the fp32 ``reference``."""
    attach_static_int8(model, Int8Plan(layers, calibration))
    with torch.no_grad():
        return neighbour_agreement(reference, embed(texts))


def measure_impacts(model: nn.Module, embed, held: list[str], reference: torch.Tensor,
                    plans: dict[str, LayerPlan], source: CalibrationSource) -> None:
    """Set each plan's ``impact``: 1 - top-10 agreement with that layer alone in int8 (one embedding each)."""
    for name, plan in plans.items():
        plan.impact = 1 - quality_of(model, embed, held, reference, {name: plan}, source)["top10"]


def with_fallbacks(plans: dict[str, LayerPlan], worst: list[str], n: int) -> dict[str, LayerPlan]:
    """``plans`` with the ``n`` first layers of ``worst`` in float (copies; ``plans`` unchanged)."""
    out = {}
    for name, plan in plans.items():
        if name in worst[:n]:
            plan = LayerPlan("float", plan.scale, plan.zero_point, impact=plan.impact,
                             reason=f"fallback: alone in int8 it loses {plan.impact:.2%} of top-10 neighbours "
                                    f"(rank {worst.index(name) + 1} of {len(worst)})")
        out[name] = plan
    return out


def choose_fallbacks(model: nn.Module, embed, held: list[str], reference: torch.Tensor,
                     plans: dict[str, LayerPlan], source: CalibrationSource, targets: Targets) -> dict[str, float]:
    """When the all-int8 model misses ``targets``: measure each layer's impact, then find the fewest layers of
    largest impact whose fallback to float meets the targets (a bisection over their count, the metric taken as
    monotone in it; at most :attr:`Targets.max_fallback_share` of the layers: the most when even that misses).
    Updates ``plans``; returns the final quality (and the all-int8 one as ``all_int8_*``)."""
    quality = quality_of(model, embed, held, reference, plans, source)
    first = {"all_int8_top10": quality["top10"], "all_int8_ndcg10": quality["ndcg10"]}
    budget = math.floor(targets.max_fallback_share * len(plans))
    n = 0
    if not meets(quality, targets) and budget:
        measure_impacts(model, embed, held, reference, plans, source)
        worst = sorted(plans, key=lambda name: -plans[name].impact)
        measured = {0: quality}
        lo, hi = 0, budget  # lo misses; hi meets, or is the budget
        measured[hi] = quality_of(model, embed, held, reference, with_fallbacks(plans, worst, hi), source)
        while hi - lo > 1 and meets(measured[hi], targets):
            mid = (lo + hi) // 2
            measured[mid] = quality_of(model, embed, held, reference, with_fallbacks(plans, worst, mid), source)
            lo, hi = (lo, mid) if meets(measured[mid], targets) else (mid, hi)
        n, quality = hi, measured[hi]
        plans.update(with_fallbacks(plans, worst, n))
    return quality | first | {"fallbacks": float(n)}


def run_calibration(model: nn.Module, texts: Sequence[str] | None, *, embed=None, source: str | None = None,
                    observer: str = "mse", smooth_alpha: float | None = None, held_out: float = 0.3,
                    targets: Targets | None = None) -> Int8Plan:
    """:func:`bertkit.inference.int8_plan.calibrate` (see there); the model's kernels are put back afterwards."""
    targets = targets or Targets()
    if texts is None:
        from bertkit.resources import calibration_texts

        texts, source = calibration_texts(), source or DEFAULT_SOURCE
    source = source or "texts"
    rows = check_texts(texts, source)
    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError(f"calibrate takes a float32 model on the CPU; this one is {weight.dtype} on "
                         f"{weight.device}: load it with dtype='fp32'.")
    embed = embed or default_embed(model)
    calib, held = split(rows, held_out)
    provenance = CalibrationSource(source, texts_sha256(rows), len(calib), len(held))
    model.eval()
    with kernels_kept(model):
        attach_static_int8(model, Int8Plan({}, provenance))  # float32 kernels everywhere: the reference
        with torch.no_grad():
            reference = embed(held)
        plans = measure_layers(model, embed, calib, observer, smooth_alpha)
        quality = choose_fallbacks(model, embed, held, reference, plans, provenance, targets)
    return Int8Plan(plans, provenance, observer=observer, smooth_alpha=smooth_alpha, quality=quality)
