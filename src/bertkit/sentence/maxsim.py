"""MaxSim (ColBERT's late interaction), exact and in bounded memory.

The score of a query (vectors ``q_1..q_m``) and a document (vectors ``d_1..d_n``) is ``sum_i max_j q_i . d_j``;
``length_normalize`` divides it by ``m`` (MeanMaxSim). Documents are never padded: their vectors are
concatenated a group at a time, the products of a block of queries with a slice of those vectors are computed,
and each document's running maximum is kept, so at most ``chunk_elements`` products exist at once however long
a document or however many candidates. Float32 throughout, whatever the inputs' dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: products computed at once (256 MiB in float32): a full-rate matrix product, a bounded footprint
CHUNK_ELEMENTS = 1 << 26


def maxsim_scores(queries: Any, documents: Any, *, chunk_elements: int | None = None,
                  length_normalize: bool = False) -> torch.Tensor:
    """``[len(queries), len(documents)]`` float32 MaxSim scores of two lists of ``[n_i, D]`` token vectors
    (tensors or arrays; a ``[N, n, D]`` tensor counts as N of them). A query without vectors scores 0; a document
    without vectors (only skiplist tokens) is a ValueError naming it."""
    qs, ds = _vector_list(queries, "queries"), _vector_list(documents, "documents")
    _check_dims(qs, ds)
    budget = chunk_elements or CHUNK_ELEMENTS
    if budget < 1:
        raise ValueError(f"chunk_elements must be a positive integer, got {chunk_elements}.")
    empty = next((j for j, d in enumerate(ds) if len(d) == 0), None)
    if empty is not None:
        raise ValueError(f"documents[{empty}] has no token vectors (a text of only skiplist tokens?); drop it or "
                         "give it text to score.")
    out = torch.zeros(len(qs), len(ds))
    if not qs or not ds:
        return out
    padded, mask = _pad(qs)  # [Q, M, D], [Q, M]: queries are short, their padding is cheap
    width = padded.shape[1]
    for start, stop in _groups([len(d) for d in ds], budget):
        flat = torch.cat(ds[start:stop])  # [T, D]
        owner = torch.repeat_interleave(torch.arange(stop - start), torch.tensor([len(d) for d in ds[start:stop]]))
        step = max(1, min(len(flat), budget // max(1, width)))
        block = max(1, budget // (width * max(step, stop - start)))  # queries per block: products and maxima
        for q0 in range(0, len(qs), block):
            rows = padded[q0:q0 + block].reshape(-1, padded.shape[-1])  # [b M, D]
            best = torch.full((len(rows), stop - start), float("-inf"))
            for t0 in range(0, len(flat), step):
                products = rows @ flat[t0:t0 + step].T  # [b M, s]
                index = owner[t0:t0 + step].expand(len(rows), -1)
                best.scatter_reduce_(1, index, products, "amax")
            best = best.view(-1, width, stop - start).masked_fill(~mask[q0:q0 + block, :, None], 0)
            out[q0:q0 + block, start:stop] = best.sum(1)
    if length_normalize:
        out = out / torch.tensor([max(len(q), 1) for q in qs], dtype=out.dtype)[:, None]
    return out


def maxsim_rank(query: Any, documents: Any, *, top_k: int | None = None, texts: Sequence[str] | None = None,
                chunk_elements: int | None = None, length_normalize: bool = False) -> list[dict]:
    """``documents`` (token vectors) ranked for one ``query`` (``[m, D]``): ``{"corpus_id", "score"}`` dicts
    (with ``"text"`` from ``texts``), best first, at most ``top_k``; ties keep the corpus order."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer (or None for every document), got {top_k!r}.")
    scores = maxsim_scores([query], documents, chunk_elements=chunk_elements, length_normalize=length_normalize)[0]
    order = torch.sort(scores, descending=True, stable=True).indices[:top_k].tolist()
    return [{"corpus_id": i, "score": float(scores[i]), **({"text": texts[i]} if texts is not None else {})}
            for i in order]


def _vector_list(items: Any, name: str) -> list[torch.Tensor]:
    if isinstance(items, (torch.Tensor, np.ndarray)) and items.ndim == 2:
        raise ValueError(f"{name} is one [n, D] matrix; pass a list of them (one per text), e.g. [{name}].")
    rows = [torch.as_tensor(item).float().cpu() for item in items]
    bad = next((i for i, row in enumerate(rows) if row.ndim != 2), None)
    if bad is not None:
        raise ValueError(f"{name}[{bad}] has shape {tuple(rows[bad].shape)}; each item is one text's [n, D] token "
                         "vectors, as encode_query / encode_document give them.")
    return rows


def _check_dims(qs: list[torch.Tensor], ds: list[torch.Tensor]) -> None:
    sizes = {row.shape[1] for row in qs + ds if len(row)}
    if len(sizes) > 1:
        raise ValueError(f"queries and documents have token vectors of different sizes {sorted(sizes)}; encode both "
                         "with the same model.")


def _pad(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(row) for row in rows))
    size = next((row.shape[1] for row in rows if len(row)), 1)
    padded, mask = torch.zeros(len(rows), width, size), torch.zeros(len(rows), width, dtype=torch.bool)
    for i, row in enumerate(rows):
        padded[i, :len(row)], mask[i, :len(row)] = row, True
    return padded, mask


def _groups(lengths: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` document groups of at most ``budget`` vectors in all (one document at least),
    so the concatenated vectors and the per-document maxima stay bounded."""
    groups, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and total + n > budget:
            groups.append((start, i))
            start, total = i, 0
        total += n
    groups.append((start, len(lengths)))
    return groups
