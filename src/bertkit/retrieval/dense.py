"""Dense retrieval: encode a corpus once, rank it for every query in bounded memory.

The corpus and the queries are encoded in batches of texts sorted by length (longest first, so padding inside
an encoder's batch is small), the vectors put back in input order. Scores are computed a block of queries
against a chunk of the corpus at a time, ``[query_chunk_size, chunk_size]`` at most, and merged into a running
top ``depth`` per query, so memory is bounded by one chunk however large the corpus. Ties are broken as
trec_eval breaks them, toward the greater doc id, so the ranking is the same for any chunk
size and equals a ranking of the full score matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bertkit.inference.finite import check_rows
from bertkit.retrieval.similarity import SIMILARITIES, pairwise

#: an encoder: a list of texts -> their float32 vectors ``[n, d]`` (a numpy array or a torch tensor)
Encode = Callable[[list[str]], Any]


def encode_sorted(encode: Encode, texts: Sequence[str], batch_size: int, what: str = "texts",
                  ids: Sequence[str] | None = None) -> torch.Tensor:
    """``[len(texts), d]`` float32 vectors of ``texts`` in input order, ``encode`` called on batches of at most
    ``batch_size`` texts sorted by length, longest first. ``ValueError`` naming ``what`` if ``encode`` returns
    something other than one row per text of one width; :class:`~bertkit.inference.finite.NonFiniteOutput`
    naming the text (by its id in ``ids``, else its position) if a row holds NaN or infinity."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors: torch.Tensor | None = None
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = torch.as_tensor(encode([texts[i] for i in rows]), dtype=torch.float32).detach().cpu()
        if batch.ndim != 2 or batch.shape[0] != len(rows) or (vectors is not None and batch.shape[1] !=
                                                                vectors.shape[1]):
            width = "" if vectors is None else f" x {vectors.shape[1]}"
            raise ValueError(f"encoding {what}: the encoder returned shape {tuple(batch.shape)} for {len(rows)} texts; "
                             f"it must return one vector per text, [{len(rows)}{width}].")
        if vectors is None:
            vectors = torch.empty(len(texts), batch.shape[1])
        vectors[rows] = batch
    if vectors is None:
        return torch.empty(0, 0)

    def name(index: int) -> str:
        return f"{what}, {'id ' + repr(ids[index]) if ids else f'text {index}'} ({texts[index]!r:.60})"

    return check_rows(vectors, name)


@torch.no_grad()
def search(queries: torch.Tensor, corpus: torch.Tensor, depth: int, *, chunk_size: int = 50_000,
           query_chunk_size: int = 256, similarity: str = "cosine") -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``min(depth, N)`` rows of ``corpus [N, d]`` for each row of ``queries [Q, d]``: ``(scores,
    indices)``, both ``[Q, min(depth, N)]``, best first, a tie to the lower corpus index. Scores are
    :func:`~bertkit.retrieval.similarity.pairwise`'s, computed ``[query_chunk_size, chunk_size]`` at a time."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}.")
    if depth < 1 or chunk_size < 1 or query_chunk_size < 1:
        raise ValueError(f"depth, chunk_size and query_chunk_size must be at least 1, got {depth}, {chunk_size}, "
                         f"{query_chunk_size}.")
    if similarity == "cosine":  # normalise once; each chunk is then a dot product
        queries, corpus, similarity = F.normalize(queries, dim=-1), F.normalize(corpus, dim=-1), "dot"
    depth = min(depth, corpus.shape[0])
    all_scores, all_indices = [], []
    for q in range(0, queries.shape[0], query_chunk_size):
        block = queries[q:q + query_chunk_size]
        scores = torch.empty(block.shape[0], 0)
        indices = torch.empty(block.shape[0], 0, dtype=torch.long)
        for c in range(0, corpus.shape[0], chunk_size):
            chunk_scores, positions = _top(pairwise(block, corpus[c:c + chunk_size], similarity), depth)
            scores, indices = _by_index(torch.cat([scores, chunk_scores], 1), torch.cat([indices, positions + c], 1))
            scores, positions = _top(scores, depth)
            indices = indices.gather(1, positions)
        scores, indices = _by_index(scores, indices)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # stable: ties by lower index
        all_scores.append(scores.gather(1, order))
        all_indices.append(indices.gather(1, order))
    if not all_scores:
        return torch.empty(0, depth), torch.empty(0, depth, dtype=torch.long)
    return torch.cat(all_scores), torch.cat(all_indices)


def _top(scores: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``min(depth, C)`` greatest of each row of ``scores [Q, C]``, ties at the cut-off going to the lower
    column: ``(values, columns)``, in no particular order within a row."""
    depth = min(depth, scores.shape[1])
    values, columns = scores.topk(depth, dim=1)
    threshold = values[:, -1:]  # [Q, 1]: the depth-th greatest score
    # topk picks among scores tied at the cut-off as it likes: redo the rows where it left one of them out
    unsure = ((scores == threshold).sum(1) > (values == threshold).sum(1)).nonzero()[:, 0]
    if len(unsure):
        values[unsure], columns[unsure] = _top_lowest_columns(scores[unsure], depth)
    return values, columns


def _top_lowest_columns(scores: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_top` by masks: the scores above the cut-off, then as many tied at it as fit, lowest column first."""
    threshold = scores.topk(depth, dim=1).values[:, -1:]
    above, tied = scores > threshold, scores == threshold
    room = depth - above.sum(1, keepdim=True)  # how many of the tied scores fit
    keep = above | (tied & (tied.cumsum(1) <= room))  # exactly depth per row
    columns = keep.nonzero()[:, 1].view(-1, depth)  # row-major: ascending columns in each row
    return scores.gather(1, columns), columns


def _by_index(scores: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's candidates reordered by ascending corpus index (so :func:`_top`'s column order is index order)."""
    order = indices.argsort(dim=1)
    return scores.gather(1, order), indices.gather(1, order)


def retrieve(encode_queries: Encode, encode_corpus: Encode, corpus: Mapping[str, str], queries: Mapping[str, str], *,
             depth: int, batch_size: int = 32, chunk_size: int = 50_000, query_chunk_size: int = 256,
             similarity: str = "cosine", ignore_identical_ids: bool = False) -> dict[str, list[tuple[str, float]]]:
    """``{query id: [(doc id, score), ...]}``: the best ``depth`` documents of ``corpus`` (doc id -> text) for each
    of ``queries`` (query id -> text), best first, a tie to the greater doc id (trec_eval's order). The corpus is
    encoded once, with ``encode_corpus``; see :func:`encode_sorted` and :func:`search`. With
    ``ignore_identical_ids`` a document whose id is the query's is never returned (BEIR's option, for sets
    such as ArguAna and Quora whose queries are also documents)."""
    if not corpus:
        raise ValueError("the corpus is empty: retrieval needs at least one document.")
    doc_ids = sorted(corpus, reverse=True)  # the lower index is the greater id: search's ties become trec_eval's
    query_ids = list(queries)
    corpus_vectors = encode_sorted(encode_corpus, [corpus[d] for d in doc_ids], batch_size, "the corpus", doc_ids)
    query_vectors = encode_sorted(encode_queries, [queries[q] for q in query_ids], batch_size, "the queries",
                                  query_ids)
    if query_ids and query_vectors.shape[1] != corpus_vectors.shape[1]:
        raise ValueError(f"the queries are encoded to {query_vectors.shape[1]} dimensions but the corpus to "
                         f"{corpus_vectors.shape[1]}; encode both with the same model.")
    scores, indices = search(query_vectors, corpus_vectors, depth + ignore_identical_ids, chunk_size=chunk_size,
                             query_chunk_size=query_chunk_size, similarity=similarity)
    hits = {}
    for query, row_scores, row_indices in zip(query_ids, scores.tolist(), indices.tolist()):
        ranked = [(doc_ids[i], s) for i, s in zip(row_indices, row_scores)]
        if ignore_identical_ids:  # one more was retrieved: the query itself may be among them
            ranked = [(doc, s) for doc, s in ranked if doc != query]
        hits[query] = ranked[:depth]
    return hits
