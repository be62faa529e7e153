"""Fusion of ranked lists (say dense and sparse retrieval's for one query) into one ranking.

A ranked list is :func:`~bertkit.retrieval.dense.retrieve`'s answer for one query: ``[(doc id, score), ...]``,
best first. Both fusions return one in the same form; a tie goes to the greater doc id, as trec_eval breaks
ties (and as ``retrieve`` orders its lists).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

Ranked = Sequence[tuple[Hashable, float]]

#: the normalisations :func:`weighted_sum_fusion` puts each list's scores through before summing
NORMALIZATIONS = ("minmax", "none")
#: the fusions :func:`fuse_runs` applies, by name
FUSIONS = ("rrf", "weighted-sum")


def reciprocal_rank_fusion(rankings: Sequence[Ranked], *, k: int = 60, weights: Sequence[float] | None = None,
                           depth: int | None = None) -> list[tuple[Hashable, float]]:
    """Reciprocal-rank fusion (Cormack et al., 2009): each document scores ``sum_i weights[i] / (k + rank_i)``
    over the lists that hold it, ``rank_i`` its 1-based position in list ``i``; scores within a list are not
    used, only their order. The best ``depth`` (all without it)."""
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}.")
    weights = _weights(weights, len(rankings))
    fused: dict[Hashable, float] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, (doc, _) in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + weight / (k + rank)
    return _ranked(fused, depth)


def weighted_sum_fusion(rankings: Sequence[Ranked], *, weights: Sequence[float] | None = None,
                        normalize: str = "minmax", depth: int | None = None) -> list[tuple[Hashable, float]]:
    """Each document scores ``sum_i weights[i] * s_i`` over the lists that hold it (a list that lacks it adds
    nothing), ``s_i`` its score in list ``i`` after ``normalize``: ``"minmax"`` maps a list's lowest score to 0 and
    its highest to 1 (all to 1 when they are equal), so that scales as different as cosine and a sparse dot
    product can be summed; ``"none"`` keeps the scores. The best ``depth`` (all without it)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}.")
    weights = _weights(weights, len(rankings))
    fused: dict[Hashable, float] = {}
    for ranking, weight in zip(rankings, weights):
        scores = [score for _, score in ranking]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        for doc, score in ranking:
            if normalize == "minmax":
                score = (score - low) / (high - low) if high > low else 1.0
            fused[doc] = fused.get(doc, 0.0) + weight * score
    return _ranked(fused, depth)


def _weights(weights: Sequence[float] | None, n: int) -> Sequence[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise ValueError(f"weights must give one weight per ranked list: {len(weights)} weights for {n} lists.")
    return weights


def _ranked(fused: dict[Hashable, float], depth: int | None) -> list[tuple[Hashable, float]]:
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}.")
    ranked = sorted(fused.items(), key=lambda item: item[0], reverse=True)  # greater id first among ties ...
    ranked.sort(key=lambda item: item[1], reverse=True)  # ... kept by the stable sort on score
    return ranked[:depth]


def fuse_runs(runs: Sequence[Mapping[str, Ranked]], method: str = "rrf", *, depth: int | None = None,
              **options) -> dict[str, list[tuple[Hashable, float]]]:
    """``{query id: fused ranked list}`` of ``runs``, each ``{query id: ranked list}`` (say ``retrieve``'s and
    ``retrieve_sparse``'s answers), for every query id of any run (a run without it adds an empty list):
    ``method`` ``"rrf"`` is :func:`reciprocal_rank_fusion`, ``"weighted-sum"`` :func:`weighted_sum_fusion`, each
    given ``options`` (``k``, ``weights``, ``normalize``)."""
    if method not in FUSIONS:
        raise ValueError(f"method must be one of {FUSIONS}, got {method!r}.")
    fuse = reciprocal_rank_fusion if method == "rrf" else weighted_sum_fusion
    queries = list(dict.fromkeys(query for run in runs for query in run))  # first seen first
    return {query: fuse([run.get(query, []) for run in runs], depth=depth, **options) for query in queries}
