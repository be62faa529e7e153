"""Sparse retrieval by ids: a corpus encoded once into a :class:`~bertkit.retrieval.sparse.SparseIndex`, searched
for every query; with the sparsity figures sentence-transformers' sparse retrieval evaluator reports.

The sparse counterpart of :func:`~bertkit.retrieval.dense.retrieve`, in the same answer form and tie order. The
corpus is taken in doc-id order, greatest first (so the index's tie to the lower position is trec_eval's tie to
the greater id), a chunk of texts at a time; within a chunk the encoder is called on batches sorted by length,
longest first, so padding is small. Memory is bounded by one chunk and the index writer's ``max_postings``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter, SparseRows, as_triples

#: a sparse encoder: a list of texts -> their sparse vectors (:data:`~bertkit.retrieval.sparse.SparseRows`)
EncodeSparse = Callable[[list[str]], SparseRows]


def encode_sparse_sorted(encode: EncodeSparse, texts: Sequence[str], batch_size: int, vocab_size: int,
                         what: str = "texts") -> torch.Tensor:
    """``[len(texts), vocab_size]`` sparse COO float32 vectors of ``texts`` in input order, ``encode`` called on
    batches of at most ``batch_size`` texts sorted by length, longest first. ``ValueError`` naming ``what`` if
    ``encode`` returns other than one vector of width ``vocab_size`` per text, or a NaN or infinite weight."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    rows, terms, weights = [], [], []
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        row, term, weight, n = as_triples(encode([texts[i] for i in batch]), vocab_size, what)
        if n != len(batch):
            raise ValueError(f"encoding {what}: the encoder returned {n} vectors for {len(batch)} texts; it must "
                             f"return one vector per text.")
        rows.append(np.asarray(batch, dtype=np.int64)[row])
        terms.append(term)
        weights.append(weight)
    indices = torch.from_numpy(np.stack([np.concatenate(rows or [np.empty(0, np.int64)]),
                                         np.concatenate(terms or [np.empty(0, np.int64)])]))
    values = torch.from_numpy(np.concatenate(weights or [np.empty(0, np.float32)]))
    return torch.sparse_coo_tensor(indices, values, (len(texts), vocab_size), check_invariants=True).coalesce()


def retrieve_sparse(encode_queries: EncodeSparse, encode_corpus: EncodeSparse, corpus: Mapping[str, str],
                    queries: Mapping[str, str], *, depth: int, vocab_size: int, model: str, batch_size: int = 32,
                    chunk_size: int = 4096, max_postings: int = 10_000_000,
                    index_directory: str | os.PathLike | None = None,
                    ignore_identical_ids: bool = False) -> tuple[dict[str, list[tuple[str, float]]], dict[str, float]]:
    """``({query id: [(doc id, score), ...]}, sparsity)``: the best ``depth`` documents of ``corpus`` (doc id ->
    text) for each of ``queries`` (query id -> text) by dot product of their sparse vectors (width
    ``vocab_size``, made by ``model``), best first, a tie to the greater doc id; only documents that share a term
    with the query are listed. The corpus is encoded once, ``chunk_size`` texts at a time, into an index in
    ``index_directory`` (kept; a temporary directory, removed, without it). ``sparsity`` holds
    :func:`sparsity_figures`'s figures. With ``ignore_identical_ids`` a document whose id is the query's is never
    returned (BEIR's option)."""
    if not corpus:
        raise ValueError("the corpus is empty: retrieval needs at least one document.")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}.")
    doc_ids = sorted(corpus, reverse=True)
    query_ids = list(queries)
    with tempfile.TemporaryDirectory(prefix="bertkit-sparse-") as scratch:
        writer = SparseIndexWriter(index_directory or os.path.join(scratch, "index"), vocab_size, model,
                                   max_postings=max_postings)
        for start in range(0, len(doc_ids), chunk_size):
            chunk = [corpus[d] for d in doc_ids[start:start + chunk_size]]
            writer.add(encode_sparse_sorted(encode_corpus, chunk, batch_size, vocab_size, "the corpus"))
        index = writer.finish()
        query_vectors = encode_sparse_sorted(encode_queries, [queries[q] for q in query_ids], batch_size, vocab_size,
                                             "the queries")
        results = index.search(query_vectors, depth + ignore_identical_ids)
        figures = sparsity_figures(query_vectors, index)
        del index  # its memory maps, before the scratch directory goes
    hits = {}
    for query, (scores, positions) in zip(query_ids, results):
        ranked = [(doc_ids[p], s) for p, s in zip(positions.tolist(), scores.tolist())]
        if ignore_identical_ids:  # one more was retrieved: the query itself may be among them
            ranked = [(doc, s) for doc, s in ranked if doc != query]
        hits[query] = ranked[:depth]
    return hits, figures


def sparsity_figures(query_vectors: torch.Tensor, index: SparseIndex) -> dict[str, float]:
    """sentence-transformers' sparsity figures for sparse ``query_vectors [Q, V]`` against ``index``: the mean
    active (nonzero) dimensions of a query and of a document, each with its sparsity ratio (``1 - active / V``),
    and ``avg_flops``: the expected number of multiplications of a query-document dot product, the dot product of
    the fraction of queries and the fraction of documents that hold each term."""
    V = index.vocab_size
    query_terms = query_vectors.coalesce()
    present = query_terms.values() != 0
    query_counts = np.bincount(query_terms.indices()[1][present].numpy(), minlength=V)
    n_queries = query_vectors.shape[0]
    query_active = float(present.sum()) / n_queries if n_queries else 0.0
    corpus_counts = np.diff(index.offsets)  # the documents that hold each term: its posting list's length
    corpus_active = float(index.manifest["postings"]) / index.documents
    flops = float(np.dot(query_counts / max(n_queries, 1), corpus_counts / index.documents))
    return {"query_active_dims": query_active, "query_sparsity_ratio": 1.0 - query_active / V,
            "corpus_active_dims": corpus_active, "corpus_sparsity_ratio": 1.0 - corpus_active / V,
            "avg_flops": flops}
