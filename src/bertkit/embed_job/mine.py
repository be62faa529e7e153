"""Hard negatives mined from an embedding store: the corpus side read shard by shard, never encoded again.

:func:`mine_from_store` makes the same selection as :func:`bertkit.sentence.mining.mine_hard_negatives` (its
module docstring, steps 1-6) with the candidate pool in an :class:`~bertkit.embed_job.store.EmbeddingStore`
(a dense or static model's) instead of in memory:

- The pool is the store's rows in their order, then each positive whose text no corpus row holds (encoded
  with ``encode``). The store's rows are not deduplicated by text (a corpus of millions is not held in memory):
  a row whose text equals one of a query's positives is that positive, never its negative; other repeated
  texts stay candidates (``bertkit embed dedup`` finds them first). On a corpus without repeats the rows equal
  the in-memory mining's on the same embeddings.
- ``corpus`` gives the ``(id, text)`` rows the store was embedded from, in its order; their ids must equal the
  store's (checked as it streams), so a store is never paired with another corpus. It is read at most three
  times: for the rows equal to a positive, for the texts of the retrieved candidates (only with ``rescore``),
  and for the texts of the chosen negatives; only those texts are kept.
- The search is exact: one pass over the shards, ``chunk_size`` rows scored at a time against every query
  (in blocks of at most 1024), a running top-k per query. Memory: the queries' vectors and top-k, one shard,
  and ``[1024, chunk_size]`` scores, whatever the corpus size.
"""

from __future__ import annotations

import bisect
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.embed_job.plan import ReadOptions, identity, plan_shards, shard_rows
from bertkit.embed_job.store import INDEX, EmbeddingStore, model_fingerprint
from bertkit.retrieval.similarity import pairwise, rowwise
from bertkit.sentence.mining import (
    FILTERS,
    QUERY_BLOCK,
    Encoder,
    Mined,
    Rescorer,
    check_arguments,
    encoded_rows,
    merge_top_k,
    mined_rows,
    no_candidates,
    rescored,
    select_negatives,
)

#: the store kinds with one vector a row, which a dense search ranks
SEARCHABLE = ("dense", "static")
Corpus = Callable[[], Iterable[tuple[Any, str]]]
_END = object()


def mine_from_store(queries: Sequence[str], positives: Sequence[str], store: EmbeddingStore, corpus: Corpus,
                    encode: Encoder | None = None, *, query_vectors: Any = None, encode_queries: Encoder | None = None,
                    range_min: int = 0, range_max: int = 100, num_negatives: int = 3,
                    absolute_margin: float | None = None, relative_margin: float | None = None,
                    max_score: float | None = None, min_score: float | None = None, similarity: str = "cosine",
                    sampling: str = "top", batch_size: int = 64, chunk_size: int = 8192,
                    rescore: Rescorer | None = None, seed: int = 0) -> Mined:
    """Hard negatives for the pairs ``(queries[i], positives[i])`` from ``store`` (module docstring).

    ``corpus()`` yields the store's ``(id, text)`` rows in order. The query vectors are ``query_vectors`` (one
    row per pair, ``[len(queries), d]``: e.g. a store of the pairs' queries) or ``encode_queries`` / ``encode``
    of the unique queries; ``encode`` also embeds the positives the corpus lacks. The other arguments are
    :func:`~bertkit.sentence.mining.mine_hard_negatives`'s; ``ValueError`` names a bad one.
    """
    check_arguments(queries, positives, range_min, range_max, num_negatives, similarity, sampling, batch_size,
                    chunk_size, False)
    if store.kind not in SEARCHABLE:
        raise ValueError(f"{store.path} holds a {store.kind} model's embeddings; mining searches one vector a row: "
                         "embed the corpus with a dense or static model.")
    unique = list(dict.fromkeys(queries))
    texts_of = _positive_texts(queries, positives, unique)
    rows_of = _rows_holding(corpus, store, {text for mine in texts_of for text in mine})
    missing = list(dict.fromkeys(t for mine in texts_of for t in mine if t not in rows_of))
    if missing and encode is None:
        raise ValueError(f"the positive {missing[0]!r:.80} is in no row of {store.path}'s corpus; give the model "
                         "(MODEL) to embed the positives the corpus lacks.")
    for offset, text in enumerate(missing):
        rows_of[text] = [len(store) + offset]
    own = [[row for text in mine for row in rows_of[text]] for mine in texts_of]
    query_matrix = _query_matrix(queries, unique, query_vectors, encode_queries or encode)
    extra = encoded_rows(encode, missing, "encode", "the positives outside the corpus") if missing else None

    if query_matrix.shape[1] != store.dim:
        raise ValueError(f"the query embeddings have {query_matrix.shape[1]} dimensions but {store.path}'s "
                         f"{store.dim}; embed both with the same model.")
    if similarity == "cosine":  # normalised once: cosine is then the dot product
        query_matrix, similarity = F.normalize(query_matrix, dim=-1), "dot"
        extra = F.normalize(extra, dim=-1) if extra is not None else None
        normalize = True
    else:
        normalize = False
    depth = min(range_max + max(len(rows) for rows in own), len(store) + len(missing))
    wanted = {row for rows in own for row in rows}
    best, kept = _search(store, query_matrix, extra, depth, similarity, chunk_size, wanted, normalize)

    rng = random.Random(seed)
    skipped = dict.fromkeys(FILTERS, 0)
    missing_text = dict(zip(range(len(store), len(store) + len(missing)), missing))
    pool = ({**_texts(corpus, store, {i for row in best[1].tolist() for i in row} | wanted), **missing_text}
            if rescore is not None else None)
    negatives = []
    for start in range(0, len(unique), QUERY_BLOCK):
        block = range(start, min(start + QUERY_BLOCK, len(unique)))
        scores, indices = best[0][start:block.stop], best[1][start:block.stop]
        if rescore is None:
            positive_scores = [rowwise(query_matrix[[q] * len(own[q])], torch.stack([kept[r] for r in own[q]]),
                                       similarity) for q in block]
        else:
            scores, positive_scores = rescored(rescore, batch_size, [unique[q] for q in block], pool, indices,
                                               [own[q] for q in block])
        for q, row_scores, row_indices, mine_scores in zip(block, scores, indices, positive_scores):
            negatives.append(select_negatives(
                row_scores, row_indices, own[q], mine_scores.min().item(), skipped, rng, range_min=range_min,
                range_max=range_max, num_negatives=num_negatives, sampling=sampling, absolute_margin=absolute_margin,
                relative_margin=relative_margin, max_score=max_score, min_score=min_score))
    chosen = {row for negs in negatives for row in negs}
    text = pool if pool is not None else {**_texts(corpus, store, chosen - set(missing_text)), **missing_text}
    return mined_rows(unique, texts_of, [[text[row] for row in negs] for negs in negatives], num_negatives,
                      skipped, len(store) + len(missing))


def _positive_texts(queries: Sequence[str], positives: Sequence[str], unique: list[str]) -> list[list[str]]:
    """Each unique query's distinct positive texts, in order of first appearance."""
    index = {query: i for i, query in enumerate(unique)}
    found: list[dict[str, None]] = [{} for _ in unique]
    for query, positive in zip(queries, positives):
        found[index[query]][positive] = None
    return [list(mine) for mine in found]


def _rows(corpus: Corpus, store: EmbeddingStore) -> Iterator[tuple[int, str]]:
    """``(row, text)`` of the corpus, each id checked against the store's: a store meets only its own corpus."""
    stored_ids = store.ids()
    row = -1
    for row, (ident, text) in enumerate(corpus()):
        stored = next(stored_ids, _END)
        if stored is _END or ident != stored:
            there = "ends before it" if stored is _END else f"has id {stored!r} there"
            raise ValueError(f"row {row} of the corpus has id {ident!r} but the store {store.path} {there}: the store "
                             "was not embedded from this corpus (or not with its --id-column); pass the corpus it "
                             "was embedded from.")
        yield row, text
    if row + 1 != len(store):
        raise ValueError(f"the corpus has {row + 1} rows but the store {store.path} {len(store)}: the store was not "
                         "embedded from this corpus; pass the corpus it was embedded from.")


def _rows_holding(corpus: Corpus, store: EmbeddingStore, texts: set[str]) -> dict[str, list[int]]:
    """The rows of the corpus whose text is one of ``texts``."""
    found: dict[str, list[int]] = {}
    for row, text in _rows(corpus, store):
        if text in texts:
            found.setdefault(text, []).append(row)
    return found


def _texts(corpus: Corpus, store: EmbeddingStore, rows: set[int]) -> dict[int, str]:
    """The texts of the corpus rows ``rows``."""
    return {row: text for row, text in _rows(corpus, store) if row in rows}


def _query_matrix(queries: Sequence[str], unique: list[str], given: Any, encode: Encoder | None) -> torch.Tensor:
    """The unique queries' vectors: the first row of each in ``given`` (one row per pair), else encoded."""
    if given is None:
        if encode is None:
            raise ValueError("no query vectors: give the model (MODEL) or the queries' embeddings "
                             "(--query-embeddings).")
        return encoded_rows(encode, unique, "encode_queries", "the queries")
    vectors = torch.as_tensor(np.asarray(given, dtype=np.float32))
    if vectors.ndim != 2 or len(vectors) != len(queries):
        raise ValueError(f"the query embeddings hold {tuple(vectors.shape)}; they need one row per (query, "
                         f"positive) pair, {len(queries)}, in the pairs' order.")
    first = {}
    for i, query in enumerate(queries):
        first.setdefault(query, i)
    return vectors[[first[query] for query in unique]]


def _search(store: EmbeddingStore, queries: torch.Tensor, extra: torch.Tensor | None, depth: int, similarity: str,
            chunk_size: int, wanted: set[int], normalize: bool) -> tuple[tuple, dict[int, torch.Tensor]]:
    """The ``depth`` best rows of the store (then ``extra``'s rows) for every query, exactly, in one pass over
    the shards; and the vectors of the ``wanted`` rows (the positives)."""
    blocks = [no_candidates(len(queries[s:s + QUERY_BLOCK])) for s in range(0, len(queries), QUERY_BLOCK)]
    kept: dict[int, torch.Tensor] = {}
    rows = sorted(wanted)
    start = 0
    for chunk in _chunks(store, extra, chunk_size, normalize):
        for row in rows[bisect.bisect_left(rows, start):bisect.bisect_left(rows, start + len(chunk))]:
            kept[row] = chunk[row - start].clone()  # not a view that would keep the whole chunk alive
        for b, best in enumerate(blocks):
            scores = pairwise(queries[b * QUERY_BLOCK:(b + 1) * QUERY_BLOCK], chunk, similarity)
            blocks[b] = merge_top_k(best, scores, start, depth)
        start += len(chunk)
    return (torch.cat([b[0] for b in blocks]), torch.cat([b[1] for b in blocks])), kept


def _chunks(store: EmbeddingStore, extra: torch.Tensor | None, chunk_size: int, normalize: bool):
    """The store's vectors ``chunk_size`` rows at a time (shard by shard), then ``extra``."""
    for _, vectors in store.iter_batches():
        vectors = torch.tensor(vectors, dtype=torch.float32)  # a copy: a read shard's arrays may be read-only
        for start in range(0, len(vectors), chunk_size):
            chunk = vectors[start:start + chunk_size]
            yield F.normalize(chunk, dim=-1) if normalize else chunk
    if extra is not None:
        yield extra


def store_corpus(store: EmbeddingStore) -> Corpus:
    """The ``(id, text)`` rows ``store`` was embedded from, read as its job read them (the files, columns,
    encoding and shard rows its ``index.json`` records); a corpus file gone or changed since is a ``ValueError``
    naming it (its row ids would no longer be the store's)."""
    source = store.meta.get("input") or {}
    files = source.get("files") or []
    if not files or "shard_rows" not in source:
        raise ValueError(f"{store.path / INDEX} names no corpus files: the store was not written by `bertkit embed "
                         "MODEL --input CORPUS -o OUT`, and its texts cannot be found; embed the corpus with it.")
    for file in files:
        try:
            now = identity(file["path"])
        except OSError:
            now = None
        if now != file:
            raise ValueError(f"{file['path']}, the corpus of {store.path}, is {'gone' if now is None else 'changed'} "
                             "since it was embedded: its rows may no longer be the store's; restore it, or embed "
                             "the corpus again.")
    read = ReadOptions(source.get("text_column", "text"), source.get("id_column"), source.get("encoding", "utf-8"))
    shards = list(plan_shards([file["path"] for file in files], source["shard_rows"], read))
    return lambda: (row for shard in shards for row in shard_rows(shard, read))


def check_model(store: EmbeddingStore, model: str, flag: str) -> None:
    """``ValueError`` unless ``model`` is the model ``store`` was embedded with (by fingerprint): vectors of two
    models are not comparable."""
    recorded = store.meta.get("model", {})
    if model_fingerprint(model) != recorded.get("fingerprint"):
        raise ValueError(f"{flag} {store.path} was embedded by {recorded.get('path')}, not by MODEL {model} (their "
                         "fingerprints differ); mine with the model that embedded it.")


def pair_vectors(store: EmbeddingStore, pairs: str, column: str, count: int) -> np.ndarray:
    """The vectors of a store embedded from the ``column`` of the pairs file ``pairs`` (one row a pair, in order),
    for :func:`mine_from_store`'s ``query_vectors``; ``ValueError`` for a store of anything else."""
    source = store.meta.get("input") or {}
    paths = [file.get("path") for file in source.get("files") or []]
    if store.kind not in SEARCHABLE or paths != [os.path.abspath(pairs)] or source.get("text_column") != column \
            or len(store) != count:
        raise ValueError(f"--query-embeddings {store.path} is not the {column!r} column of --data {pairs} embedded "
                         f"by one model ({len(store)} rows of {paths or 'no files'}, column "
                         f"{source.get('text_column')!r}, for {count} pairs); make it with `bertkit embed MODEL "
                         f"--input {pairs} --text-column {column} -o DIR`.")
    return np.concatenate([np.asarray(vectors, dtype=np.float32) for _, vectors in store.iter_batches()])
