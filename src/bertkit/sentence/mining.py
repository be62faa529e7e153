"""Hard-negative mining: for each (query, positive) pair, the corpus texts most similar to the query that are not
its positive, as ``anchor, positive, negative_1..negative_n`` training rows.

The selection is sentence-transformers' ``mine_hard_negatives`` (6.2) with ``output_format="n-tuple"``, step by
step, so that the same embeddings give the same rows:

1. The candidate pool is the corpus given plus every positive, deduplicated by text (so a text identical to a
   positive *is* that positive). Queries are deduplicated too: a query that appears with several positives is
   one query, and every one of its positives is kept out of its negatives.
2. Each query retrieves its ``range_max + P`` most similar pool texts (``P``: the most positives any query has,
   so that positives do not take places in the window), exactly: a running top-k over corpus chunks of
   ``chunk_size`` for at most ``min(chunk_size, 1024)`` queries at a time, never the whole
   ``[queries x corpus]`` matrix; or a flat (exact) inner-product FAISS index with ``use_faiss=True``.
   Ties rank the earlier pool text first.
3. ``rescore`` (a cross-encoder: ``(query, passage)`` pairs -> scores), when given, replaces the scores of these
   candidates and of the positives. (sentence-transformers rescores only when a margin or score filter is set;
   here it rescores whenever it is given.)
4. The query's positives are removed; then the filters, against the query's *lowest* positive score ``p``:
   ``absolute_margin`` drops a candidate with ``score + margin > p``; ``relative_margin`` one with
   ``score > p - |p| * margin`` (equal to ``p * (1 - margin)`` for a positive ``p``; sentence-transformers 6.2's
   form, right for negative scores too); ``max_score`` one above it, ``min_score`` one below it.
5. The survivors, best first, skip the first ``range_min`` (of the first ``range_max``); ``sampling="top"`` keeps
   the next ``num_negatives``, ``"random"`` draws ``num_negatives`` of the rest (seeded), kept best first.
6. One row per (query, positive) pair in the order of first appearance; a pair whose query found fewer than
   ``num_negatives`` negatives is dropped, as sentence-transformers' n-tuple output drops it (every row has the
   same columns, so the trainers read the file as it is). The summary counts them.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.inference.finite import check_rows
from bertkit.retrieval.similarity import SIMILARITIES, pairwise, rowwise

Encoder = Callable[[list[str]], Any]
Rescorer = Callable[[list[tuple[str, str]]], Any]
SAMPLING = ("top", "random")
#: the most queries scored against one corpus chunk at a time
QUERY_BLOCK = 1024
FILTERS = ("absolute_margin", "relative_margin", "max_score", "min_score")


@dataclass
class Mined:
    """What :func:`mine_hard_negatives` found: the training rows and a summary of the run."""

    rows: list[dict[str, str]]
    summary: dict[str, Any] = field(default_factory=dict)


def mine_hard_negatives(queries: Sequence[str], positives: Sequence[str], corpus: Sequence[str], encode: Encoder, *,
                        range_min: int = 0, range_max: int = 100, num_negatives: int = 3,
                        absolute_margin: float | None = None, relative_margin: float | None = None,
                        max_score: float | None = None, min_score: float | None = None,
                        similarity: str = "cosine", sampling: str = "top", batch_size: int = 64,
                        chunk_size: int = 8192, rescore: Rescorer | None = None, use_faiss: bool = False,
                        encode_queries: Encoder | None = None, seed: int = 0) -> Mined:
    """Hard negatives for the pairs ``(queries[i], positives[i])`` from ``corpus`` plus the positives (see the
    module docstring for the selection).

    ``encode`` maps a list of texts to float embeddings ``[n, d]`` (array or tensor); it is called once for the
    pool and once for the unique queries (``encode_queries`` instead, for a model with a query prompt).
    ``similarity`` is one of :data:`~bertkit.retrieval.similarity.SIMILARITIES` (distances negated);
    ``use_faiss`` takes cosine or dot only. ``rescore`` is called with at most ``batch_size`` pairs at a time
    and returns one score per pair. Returns :class:`Mined`; bad arguments raise ``ValueError`` naming them.
    """
    check_arguments(queries, positives, range_min, range_max, num_negatives, similarity, sampling, batch_size,
                    chunk_size, use_faiss)
    for i, text in enumerate(corpus):
        if not isinstance(text, str):
            raise ValueError(f"corpus[{i}] is {type(text).__name__} {text!r}; the corpus is a list of texts.")
    unique = list(dict.fromkeys(queries))
    query_of = {text: i for i, text in enumerate(unique)}
    pool = list(dict.fromkeys([*corpus, *positives]))
    pool_index = {text: i for i, text in enumerate(pool)}
    positives_of: list[list[int]] = [[] for _ in unique]
    for query, positive in zip(queries, positives):
        mine = positives_of[query_of[query]]
        if pool_index[positive] not in mine:
            mine.append(pool_index[positive])
    most_positives = max(len(p) for p in positives_of)
    depth = min(range_max + most_positives, len(pool))

    pool_vectors = encoded_rows(encode, pool, "encode", "the corpus")
    query_vectors = encoded_rows(encode_queries or encode, unique, "encode_queries" if encode_queries else "encode",
                                "the queries")
    if query_vectors.shape[1] != pool_vectors.shape[1]:
        raise ValueError(f"the query embeddings have {query_vectors.shape[1]} dimensions but the corpus "
                         f"embeddings {pool_vectors.shape[1]}; encode both with the same model.")
    if similarity == "cosine":  # normalised once: cosine is then the dot product
        query_vectors, pool_vectors = F.normalize(query_vectors, dim=-1), F.normalize(pool_vectors, dim=-1)
        similarity = "dot"
    index = _faiss_index(pool_vectors) if use_faiss else None

    rng = random.Random(seed)
    negatives_of: list[list[int]] = []
    skipped = dict.fromkeys(FILTERS, 0)
    block = min(chunk_size, QUERY_BLOCK)
    for start in range(0, len(unique), block):
        rows = range(start, min(start + block, len(unique)))
        vectors = query_vectors[start:rows.stop]
        if index is not None:
            scores, indices = _faiss_top_k(index, vectors, depth)
        else:
            scores, indices = top_k(vectors, pool_vectors, depth, similarity, chunk_size)
        own = [positives_of[q] for q in rows]
        if rescore is None:
            positive_scores = [rowwise(query_vectors[[q] * len(p)], pool_vectors[p], similarity)
                               for q, p in zip(rows, own)]
        else:
            scores, positive_scores = rescored(rescore, batch_size, [unique[q] for q in rows], pool, indices, own)
        for row_scores, row_indices, mine, mine_scores in zip(scores, indices, own, positive_scores):
            negatives_of.append(select_negatives(
                row_scores, row_indices, mine, mine_scores.min().item(), skipped, rng, range_min=range_min,
                range_max=range_max, num_negatives=num_negatives, sampling=sampling, absolute_margin=absolute_margin,
                relative_margin=relative_margin, max_score=max_score, min_score=min_score))

    return mined_rows(unique, [[pool[p] for p in mine] for mine in positives_of],
                      [[pool[n] for n in negs] for negs in negatives_of], num_negatives, skipped, len(pool))


def mined_rows(queries: Sequence[str], positives: Sequence[list[str]], negatives: Sequence[list[str]],
               num_negatives: int, skipped: dict[str, int], corpus: int) -> Mined:
    """One ``anchor, positive, negative_1..n`` row per (query, positive) whose query found ``num_negatives``
    negatives (step 6), and the summary of the run (``corpus``: the candidate pool's size)."""
    rows = [{"anchor": query, "positive": positive, **{f"negative_{k}": n for k, n in enumerate(negs, 1)}}
            for query, mine, negs in zip(queries, positives, negatives)
            for positive in mine if len(negs) == num_negatives]
    found = [len(n) for n in negatives]
    summary = {"queries": len(queries), "pairs": sum(len(p) for p in positives), "corpus": corpus,
               "rows": len(rows), "negatives_per_row": num_negatives,
               "mean_negatives_found": float(np.mean(found)),
               "queries_without_negatives": sum(1 for n in found if n == 0),
               "queries_with_too_few": sum(1 for n in found if n < num_negatives),
               "skipped": {name: count for name, count in skipped.items() if count}}
    return Mined(rows, summary)


def top_k(queries: torch.Tensor, corpus: torch.Tensor, k: int, similarity: str = "dot",
          chunk_size: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most similar rows of ``corpus [m, d]`` for each row of ``queries [n, d]``: scores ``[n, k]``
    (descending) and corpus indices ``[n, k]`` (int64), ties broken by the lower index, exactly as sorting the
    full ``[n, m]`` matrix would; only ``[n, chunk_size]`` scores are held at a time. ``k`` must be <= ``m``."""
    best = no_candidates(len(queries))
    for start in range(0, len(corpus), chunk_size):
        best = merge_top_k(best, pairwise(queries, corpus[start:start + chunk_size], similarity), start, k)
    return best


def no_candidates(queries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty running top-k of ``queries`` queries, for :func:`merge_top_k`."""
    return torch.empty(queries, 0), torch.empty(queries, 0, dtype=torch.long)


def merge_top_k(best: tuple[torch.Tensor, torch.Tensor], scores: torch.Tensor, start: int,
                k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The running top-k ``best`` (scores, indices) merged with the ``scores [n, c]`` of the corpus rows
    ``start .. start + c``, which must follow every row already seen: ties keep the lower index."""
    chunk_scores, columns = _best_columns(scores, k)
    # the kept candidates precede the chunk's and have lower indices, and the chunk's are in index order:
    # a stable sort leaves every tie in index order
    merged = torch.cat([best[0].to(chunk_scores.dtype), chunk_scores], dim=1)
    order = torch.sort(merged, dim=1, descending=True, stable=True).indices[:, :k]
    return merged.gather(1, order), torch.cat([best[1], columns + start], dim=1).gather(1, order)


def _best_columns(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``min(k, c)`` best columns of each row of ``scores [b, c]`` (ties: the lower columns), in column
    order, and their scores. ``topk`` finds the threshold; it alone may pick any of the tied columns."""
    k = min(k, scores.shape[1])
    threshold = scores.topk(k, dim=1).values[:, -1:]  # [b, 1]: each row's k-th best score
    keep = scores >= threshold
    if (keep.sum(1) > k).any():  # ties at the threshold: the lowest columns of them
        above = scores > threshold
        tied = keep & ~above
        keep = above | (tied & (tied.cumsum(1) <= k - above.sum(1, keepdim=True)))
    columns = keep.nonzero()[:, 1].view(-1, k)  # row-major: each row's k columns in ascending order
    return scores.gather(1, columns), columns


def write_rows(rows: Sequence[dict[str, str]], path: str | os.PathLike) -> None:
    """``rows`` as JSON lines at ``path``, moved into place only when complete."""
    from bertkit.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def check_arguments(queries, positives, range_min, range_max, num_negatives, similarity, sampling, batch_size,
                    chunk_size, use_faiss) -> None:
    """``ValueError`` naming the first argument of :func:`mine_hard_negatives` that is out of its range."""
    if len(queries) != len(positives):
        raise ValueError(f"queries ({len(queries)}) and positives ({len(positives)}) must pair up one to one.")
    if not queries:
        raise ValueError("no (query, positive) pairs to mine negatives for.")
    for name, texts in (("queries", queries), ("positives", positives)):
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{name}[{i}] is {text!r}: every query and positive must be a non-empty text.")
    if num_negatives < 1:
        raise ValueError(f"num_negatives must be at least 1, got {num_negatives}.")
    if range_min < 0 or range_max <= range_min:
        raise ValueError(f"the rank window needs 0 <= range_min < range_max, got range_min={range_min} and "
                         f"range_max={range_max}.")
    if num_negatives > range_max - range_min:
        raise ValueError(f"num_negatives={num_negatives} do not fit in the window of {range_max - range_min} ranks "
                         f"[range_min={range_min}, range_max={range_max}); lower num_negatives or widen the window.")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}.")
    if use_faiss and similarity not in ("cosine", "dot"):
        raise ValueError(f"use_faiss searches by inner product: similarity must be cosine or dot, got {similarity!r}.")
    if sampling not in SAMPLING:
        raise ValueError(f"sampling must be one of {SAMPLING}, got {sampling!r}.")
    for name, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}.")


def encoded_rows(encode: Encoder, texts: list[str], name: str, what: str) -> torch.Tensor:
    """``encode(texts)`` as a float32 ``[n, d]`` CPU tensor; a wrong shape raises ``ValueError``, a non-finite
    row :class:`~bertkit.inference.finite.NonFiniteOutput` naming its text."""
    out = encode(texts)
    if torch.is_tensor(out):
        vectors = out.detach().to("cpu", torch.float32)
    else:
        vectors = torch.from_numpy(np.asarray(out, dtype=np.float32))
    if vectors.ndim != 2 or len(vectors) != len(texts):
        raise ValueError(f"{name} returned shape {tuple(vectors.shape)} for the {len(texts)} texts of {what}; it "
                         "must return one row per text, [n, d].")
    return check_rows(vectors, lambda i: f"{what}, text {i} ({texts[i]!r:.60})")


def rescored(rescore: Rescorer, batch_size: int, queries: list[str], pool, indices: torch.Tensor,
             positives: list[list[int]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``rescore``'s scores of the retrieved candidates ``[b, k]`` and of each query's positives; ``pool`` maps a
    candidate's index to its text (a list, or a mapping holding at least these candidates)."""
    pairs = [(query, pool[i]) for query, row in zip(queries, indices.tolist()) for i in row]
    pairs += [(query, pool[p]) for query, mine in zip(queries, positives) for p in mine]
    values = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start:start + batch_size]
        out = rescore(batch)
        out = out.detach().cpu() if torch.is_tensor(out) else np.asarray(out)
        scores = torch.as_tensor(out, dtype=torch.float32).flatten()
        if len(scores) != len(batch):
            raise ValueError(f"rescore returned {len(scores)} scores for {len(batch)} (query, passage) pairs; it "
                             "must return one score per pair.")
        values.append(scores)
    values = check_rows(torch.cat(values), lambda i: f"the rescored pair ({pairs[i][0]!r:.40}, {pairs[i][1]!r:.40})")
    count = indices.numel()
    return values[:count].view(indices.shape), list(values[count:].split([len(p) for p in positives]))


def _faiss_index(vectors: torch.Tensor):
    """A flat (exact) inner-product FAISS index of ``vectors``; FAISS imported only here."""
    try:
        import faiss
    except ImportError:
        raise ImportError("use_faiss=True (--faiss) needs FAISS, which is not installed: pip install faiss-cpu") \
            from None
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors.numpy(), dtype=np.float32))
    return index


def _faiss_top_k(index, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    scores, indices = index.search(np.ascontiguousarray(queries.numpy(), dtype=np.float32), k)
    return torch.from_numpy(scores), torch.from_numpy(indices).long()


def select_negatives(scores: torch.Tensor, indices: torch.Tensor, positives: list[int], positive_score: float,
                     skipped: dict[str, int], rng: random.Random, *, range_min: int, range_max: int,
                     num_negatives: int, sampling: str, absolute_margin, relative_margin, max_score,
                     min_score) -> list[int]:
    """One query's negatives (pool indices, best first) from its retrieved ``scores``/``indices`` (step 4-5 of
    the module docstring); ``skipped`` counts what each filter removed."""
    keep = ~torch.isin(indices, torch.tensor(positives))
    rules = {"absolute_margin": lambda s: s + absolute_margin > positive_score,
             "relative_margin": lambda s: s > positive_score - abs(positive_score) * relative_margin,
             "max_score": lambda s: s > max_score, "min_score": lambda s: s < min_score}
    for name, value in zip(FILTERS, (absolute_margin, relative_margin, max_score, min_score)):
        if value is not None:
            removed = keep & rules[name](scores)
            skipped[name] += int(removed.sum())
            keep &= ~removed
    survivors = torch.nonzero(keep).flatten()
    order = torch.sort(scores[survivors], descending=True, stable=True).indices
    window = indices[survivors[order]][:range_max][range_min:].tolist()
    if sampling == "top" or len(window) <= num_negatives:
        return window[:num_negatives]
    return [window[i] for i in sorted(rng.sample(range(len(window)), num_negatives))]
