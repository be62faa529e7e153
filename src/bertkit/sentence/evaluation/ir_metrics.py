"""Retrieval metrics of a run against graded relevance judgements, as ``trec_eval`` (and ``pytrec_eval``) computes them.

A *run* maps a query id to ``{doc id: score}``; *qrels* map a query id to ``{doc id: relevance}`` (an int; a
relevance <= 0 is non-relevant). Each query's documents are ranked as trec_eval ranks them: by score, highest
first, a tie going to the greater doc id (string order). At each cut-off k:

- ``ndcg@k``: DCG of the top k over the ideal DCG of the best k judged documents; the gain is the relevance
  itself (trec_eval's, not ``2^rel - 1``), discounted by ``log2(rank + 1)``;
- ``mrr@k``: 1 / the rank of the first relevant document in the top k (0 when none is);
- ``map@k``: the precision at each relevant document in the top k, summed, over the number of relevant documents;
- ``recall@k``: relevant documents in the top k over all relevant ones; ``precision@k``: over k (even when fewer
  than k were retrieved); ``accuracy@k``: 1 when any relevant document is in the top k (trec_eval's success).

Every query of the qrels is evaluated (a query the run lacks ranks nothing and scores 0; a query without a
relevant document scores 0, as pytrec_eval counts it); queries of the run without qrels are left out. The mean
is over the evaluated queries.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

DEFAULT_K = (1, 3, 5, 10, 100)
METRICS = ("ndcg", "mrr", "map", "recall", "precision", "accuracy")


def check_k_values(k_values: Iterable[int], name: str = "k_values") -> tuple[int, ...]:
    """``k_values`` as a sorted tuple of distinct positive ints; ``ValueError`` naming ``name`` otherwise."""
    values = tuple(k_values)
    if not values or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in values):
        raise ValueError(f"{name} must be positive whole numbers (e.g. 1,3,5,10,100), got {list(values)}.")
    return tuple(sorted(set(values)))


def rank(scores: Mapping[str, float], depth: int | None = None) -> list[str]:
    """The doc ids of ``scores`` best first (score descending, a tie to the greater doc id), at most ``depth``."""
    key = lambda item: (item[1], item[0])  # noqa: E731 - trec_eval's order, reversed
    items = scores.items()
    best = heapq.nlargest(depth, items, key=key) if depth is not None else sorted(items, key=key, reverse=True)
    return [doc for doc, _ in best]


def query_metrics(ranking: Sequence[str], relevance: Mapping[str, int], k_values: Sequence[int]) -> dict[str, float]:
    """``{"ndcg@k": ..., "mrr@k": ..., ...}`` of one query's ``ranking`` (doc ids, best first) for each k."""
    gains = [max(relevance.get(doc, 0), 0) for doc in ranking]
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)
    relevant = len(ideal)
    first_hit = next((i + 1 for i, g in enumerate(gains) if g > 0), None)
    values: dict[str, float] = {}
    for k in k_values:
        top = gains[:k]
        hits, precision_sum = 0, 0.0
        for position, gain in enumerate(top, 1):
            if gain > 0:
                hits += 1
                precision_sum += hits / position
        idcg = _dcg(ideal[:k])
        values[f"ndcg@{k}"] = _dcg(top) / idcg if idcg > 0 else 0.0
        values[f"mrr@{k}"] = 1.0 / first_hit if first_hit is not None and first_hit <= k else 0.0
        values[f"map@{k}"] = precision_sum / relevant if relevant else 0.0
        values[f"recall@{k}"] = hits / relevant if relevant else 0.0
        values[f"precision@{k}"] = hits / k
        values[f"accuracy@{k}"] = 1.0 if hits else 0.0
    return values


def _dcg(gains: Sequence[int]) -> float:
    return sum(gain / math.log2(position + 1) for position, gain in enumerate(gains, 1) if gain > 0)


def metric_names(k_values: Sequence[int]) -> list[str]:
    """The metric keys :func:`query_metrics` returns, metric by metric, each for every k."""
    return [f"{metric}@{k}" for metric in METRICS for k in k_values]


def evaluate_rankings(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
                      k_values: Iterable[int] = DEFAULT_K) -> dict:
    """``{"queries": n, "metrics": {name: mean}, "per_query": {query id: {name: value}}}`` of ranked doc ids
    (best first, already cut) for every query of ``qrels``; see the module docstring."""
    k_values = check_k_values(k_values)
    per_query = {query: query_metrics(rankings.get(query, ()), relevance, k_values)
                 for query, relevance in qrels.items()}
    count = len(per_query)
    means = {name: (sum(v[name] for v in per_query.values()) / count if count else 0.0)
             for name in metric_names(k_values)}
    return {"queries": count, "metrics": means, "per_query": per_query}


def evaluate_run(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                 k_values: Iterable[int] = DEFAULT_K) -> dict:
    """:func:`evaluate_rankings` of a run of scores, each query ranked by :func:`rank` to the largest k."""
    k_values = check_k_values(k_values)
    depth = k_values[-1]
    return evaluate_rankings({query: rank(run[query], depth) for query in qrels if query in run}, qrels, k_values)
