"""Semantic textual similarity evaluation: how well an encoder's similarities follow human similarity ratings.

For sentence pairs with gold scores, the Pearson and Spearman correlations of the cosine and of the dot product
of the two sentences' vectors with the gold scores, as sentence-transformers' ``EmbeddingSimilarityEvaluator``
reports them (``pearson_cosine``, ``spearman_cosine``, ``pearson_dot``, ``spearman_dot``). Spearman's ties get
average ranks. A file of pairs is CSV, TSV or JSON Lines with ``sentence1``, ``sentence2`` and ``score`` columns.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from bertkit.retrieval.dense import Encode, encode_sorted
from bertkit.retrieval.similarity import rowwise
from bertkit.tasks.metrics import pearson, spearman
from bertkit.tasks.readers import read_rows, where

COLUMNS = ("sentence1", "sentence2", "score")


def evaluate_sts(encode: Encode, pairs: Sequence[tuple[str, str]], scores: Sequence[float], *,
                 batch_size: int = 32) -> dict[str, float]:
    """``{"pairs": n, "pearson_cosine", "spearman_cosine", "pearson_dot", "spearman_dot"}`` of ``encode`` on
    ``pairs`` against the gold ``scores`` (one per pair, at least 2). Each distinct sentence is encoded once, in
    length-sorted batches (:func:`~bertkit.retrieval.dense.encode_sorted`). A correlation is NaN when the
    similarities or the gold scores are all equal."""
    if len(pairs) != len(scores):
        raise ValueError(f"evaluate_sts: {len(pairs)} pairs but {len(scores)} scores; give one gold score per pair.")
    if len(pairs) < 2:
        raise ValueError(f"evaluate_sts: a correlation needs at least 2 pairs, got {len(pairs)}.")
    texts = list(dict.fromkeys(sentence for pair in pairs for sentence in pair))
    row = {text: i for i, text in enumerate(texts)}
    vectors = encode_sorted(encode, texts, batch_size, "the sentences")
    first, second = vectors[[row[a] for a, _ in pairs]], vectors[[row[b] for _, b in pairs]]
    results: dict[str, float] = {"pairs": len(pairs)}
    for function in ("cosine", "dot"):
        similarities = rowwise(first, second, function).double().numpy()
        results[f"pearson_{function}"] = pearson(similarities, scores)
        results[f"spearman_{function}"] = spearman(similarities, scores)
    return results


def read_sts(path: str | os.PathLike) -> tuple[list[tuple[str, str]], list[float]]:
    """``(pairs, scores)`` of a CSV / TSV / JSON Lines file with ``sentence1``, ``sentence2`` and ``score``
    columns; a missing column, a sentence that is not text, or a score that is not a finite number raises
    ``ValueError`` naming the file and line."""
    rows = read_rows(path)
    if not rows:
        raise ValueError(f"{path}: no pairs; write one row per pair with columns {', '.join(COLUMNS)}.")
    pairs, scores = [], []
    for row in rows:
        missing = [c for c in COLUMNS if c not in row.values]
        if missing:
            raise ValueError(f"{where(path, row.line)}: no {', '.join(missing)} (the row has {sorted(row.values)}); "
                             f"an STS file needs columns {', '.join(COLUMNS)}.")
        a, b, score = (row.values[c] for c in COLUMNS)
        if not isinstance(a, str) or not isinstance(b, str):
            raise ValueError(f"{where(path, row.line)}: sentence1 and sentence2 must be text, got "
                             f"{type(a).__name__} and {type(b).__name__}.")
        try:
            value = float(score) if not isinstance(score, bool) else math.nan
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"{where(path, row.line)}: the score {score!r} is not a finite number.")
        pairs.append((a, b))
        scores.append(value)
    return pairs, scores
