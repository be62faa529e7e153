"""Similarity, search and quantization of sentence embeddings, as sentence-transformers defines them.

:func:`similarity` scores every pair of two embedding sets (``cosine``, ``dot``, ``euclidean`` and
``manhattan`` — the last two negated distances, so larger is closer); :func:`semantic_search` returns each
query's ``top_k`` corpus entries (``{"corpus_id", "score"}``, best first), in chunks so a large corpus
never makes a full score matrix; :func:`quantize_embeddings` turns float vectors into ``int8`` / ``uint8``
(per-dimension ranges from calibration embeddings, or the embeddings themselves) or packed sign bits
(``binary`` / ``ubinary``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

#: ``encode(precision=...)``: how the output embeddings are quantized after the model ran (sentence-transformers'
#: name), not the number format the model computes in (``dtype``: :mod:`bertkit.dtypes`)
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def as_tensor(x: Any) -> torch.Tensor:
    """A float 2-D tensor from a tensor, an array or a list of vectors (a single vector becomes one row)."""
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    t = t if t.is_floating_point() else t.float()
    return t[None] if t.dim() == 1 else t


def cos_sim(a: Any, b: Any) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` ``[n, d]`` with every row of ``b`` ``[m, d]``: a float tensor
    ``[n, m]``. Tensors, arrays or lists of vectors; a single vector counts as one row."""
    a, b = as_tensor(a), as_tensor(b)
    return F.normalize(a, p=2, dim=1) @ F.normalize(b, p=2, dim=1).T


def dot_score(a: Any, b: Any) -> torch.Tensor:
    """Dot product of every row of ``a`` ``[n, d]`` with every row of ``b`` ``[m, d]``: a float tensor ``[n, m]``
    (equal to :func:`cos_sim` on normalized embeddings). Inputs as for :func:`cos_sim`."""
    a, b = as_tensor(a), as_tensor(b)
    return a @ b.T


def euclidean_sim(a: Any, b: Any) -> torch.Tensor:
    return -torch.cdist(as_tensor(a), as_tensor(b), p=2.0)


def manhattan_sim(a: Any, b: Any) -> torch.Tensor:
    return -torch.cdist(as_tensor(a), as_tensor(b), p=1.0)


SIMILARITIES: dict[str, Callable[[Any, Any], torch.Tensor]] = {
    "cosine": cos_sim, "dot": dot_score, "euclidean": euclidean_sim, "manhattan": manhattan_sim}


def similarity(a: Any, b: Any, name: str = "cosine") -> torch.Tensor:
    """``[len(a), len(b)]`` scores of every pair under the similarity ``name`` (see :data:`SIMILARITIES`)."""
    if name not in SIMILARITIES:
        raise ValueError(f"similarity {name!r} is not one of {sorted(SIMILARITIES)}.")
    return SIMILARITIES[name](a, b)


def semantic_search(query_embeddings: Any, corpus_embeddings: Any, query_chunk_size: int = 100,
                    corpus_chunk_size: int = 500_000, top_k: int = 10,
                    score_function: Callable[[Any, Any], torch.Tensor] = cos_sim) -> list[list[dict[str, Any]]]:
    """For each query, its ``top_k`` corpus entries as ``{"corpus_id": int, "score": float}``, best first.

    Scores are computed ``query_chunk_size`` x ``corpus_chunk_size`` at a time and merged, so memory stays
    bounded whatever the corpus size; ties keep the lower corpus id first.
    """
    queries, corpus = as_tensor(query_embeddings), as_tensor(corpus_embeddings)
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}.")
    results: list[list[dict[str, Any]]] = []
    for q0 in range(0, len(queries), query_chunk_size):
        best_scores = best_ids = None
        for c0 in range(0, len(corpus), corpus_chunk_size):
            scores = score_function(queries[q0:q0 + query_chunk_size], corpus[c0:c0 + corpus_chunk_size])
            top = scores.topk(min(top_k, scores.shape[1]), dim=1, sorted=True)
            ids = top.indices + c0
            if best_scores is None:
                best_scores, best_ids = top.values, ids
            else:
                merged_scores, merged_ids = torch.cat([best_scores, top.values], 1), torch.cat([best_ids, ids], 1)
                keep = merged_scores.topk(min(top_k, merged_scores.shape[1]), dim=1, sorted=True).indices
                best_scores, best_ids = merged_scores.gather(1, keep), merged_ids.gather(1, keep)
        for row_scores, row_ids in zip(best_scores.tolist(), best_ids.tolist()):
            ranked = sorted(zip(row_ids, row_scores), key=lambda pair: (-pair[1], pair[0]))
            results.append([{"corpus_id": int(i), "score": float(s)} for i, s in ranked])
    return results


def quantize_embeddings(embeddings: Any, precision: str, ranges: np.ndarray | None = None,
                        calibration_embeddings: np.ndarray | None = None) -> np.ndarray:
    """``embeddings [N, D]`` at ``precision`` (see the module doc); ``ranges`` ``[2, D]`` (min, max per
    dimension) for the integer precisions, else taken from ``calibration_embeddings`` or the embeddings."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    x = embeddings.detach().float().cpu().numpy() if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)
    if x.dtype in (np.int8, np.uint8):
        raise ValueError("embeddings to quantize must be float, not already int8/uint8.")
    if precision == "float32":
        return x.astype(np.float32)
    if precision in ("binary", "ubinary"):
        bits = np.packbits(x > 0, axis=-1)
        return bits if precision == "ubinary" else (bits.astype(np.int16) - 128).astype(np.int8)
    if ranges is None:
        reference = x if calibration_embeddings is None else np.asarray(calibration_embeddings)
        if reference.ndim == 1 or reference.shape[0] < 2:
            raise ValueError(f"{precision} quantization needs ranges from more than one embedding: pass ranges= "
                             "or calibration_embeddings= computed on a representative set.")
        ranges = np.vstack([reference.min(0), reference.max(0)])
    ranges = np.asarray(ranges, dtype=np.float32)
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps == 0, 1, steps)
    levels = np.clip(np.floor((x - ranges[0]) / steps), 0, 255)
    return levels.astype(np.uint8) if precision == "uint8" else (levels - 128).astype(np.int8)
