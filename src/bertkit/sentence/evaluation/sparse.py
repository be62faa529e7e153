"""Retrieval metrics of a sparse encoder (SPLADE, inference-free, CSR), scored through an inverted index.

What sentence-transformers' ``SparseInformationRetrievalEvaluator`` reports, on bertkit's engine: the corpus is
encoded once, with the model's document side, into a :class:`~bertkit.retrieval.sparse.SparseIndex`
(:func:`~bertkit.retrieval.sparse_retrieve.retrieve_sparse`: exact top k, memory bounded by a chunk of texts
and the index writer's postings), the judged queries with its query side; the rankings are scored by the dense
evaluation's :func:`~bertkit.sentence.evaluation.ir_metrics.evaluate_rankings` (same metric names), and the
sparsity figures (active dimensions of a query and of a document, their sparsity ratios, ``avg_flops``) are
added to the metrics.

A document that shares no term with a query scores 0 and is not retrieved (sentence-transformers ranks the
whole corpus, so its zero-scored documents can fill a short list); the metrics differ only where a relevant
document scores 0, which no useful model does. ``map@k`` is trec_eval's, as the dense evaluation's: the summed
precisions over all relevant documents (sentence-transformers divides by ``min(k, relevant documents)``; the two
agree where k is at least a query's number of relevant documents).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from bertkit.retrieval.sparse_retrieve import retrieve_sparse
from bertkit.sentence.evaluation.evaluate import judged_queries
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings

#: the similarities an inverted index scores: a dot product, or a dot product of L2-normalised vectors
SPARSE_SIMILARITIES = ("dot", "cosine")
#: the names of the sparsity figures added to the metrics (those of sentence-transformers' evaluator)
SPARSITY_FIGURES = ("query_active_dims", "query_sparsity_ratio", "corpus_active_dims", "corpus_sparsity_ratio",
                    "avg_flops")


def evaluate_sparse_retrieval(model, queries: Mapping[str, str], corpus: Mapping[str, str],
                              relevant_docs: Mapping[str, Any], *, k_values: Iterable[int] = DEFAULT_K,
                              batch_size: int = 32, chunk_size: int = 4096, max_active_dims: int | None = None,
                              query_prompt_name: str | None = None, corpus_prompt_name: str | None = None,
                              max_postings: int = 10_000_000, index_directory: str | os.PathLike | None = None,
                              model_name: str = "sparse-encoder", ignore_identical_ids: bool = False) -> dict:
    """``{"queries", "metrics", "per_query"}`` of ``model`` (a :class:`bertkit.SparseEncoder`) retrieving from
    ``corpus`` (doc id -> text) for the judged queries of ``relevant_docs``: ``{query id: {doc id: relevance}}``
    (graded) or sentence-transformers' ``{query id: set of relevant doc ids}``. ``metrics`` holds the means of
    ``ndcg@k``, ``mrr@k``, ``map@k``, ``recall@k``, ``precision@k``, ``accuracy@k`` for each of ``k_values`` and
    :data:`SPARSITY_FIGURES`.

    Queries are encoded with ``encode_query`` and documents with ``encode_document`` (each with its prompt name,
    default: the model's), keeping at most ``max_active_dims`` weights (default: the model's). ``index_directory``
    keeps the index (a new or empty directory, its manifest naming ``model_name``); see
    :func:`~bertkit.retrieval.sparse_retrieve.retrieve_sparse` for the rest. ``ValueError`` for a judged query
    without text, an empty corpus, or a model whose similarity an index does not score."""
    k_values = check_k_values(k_values)
    qrels = as_qrels(relevant_docs)
    judged = judged_queries(queries, qrels)
    similarity = getattr(model, "similarity_fn_name", "dot")
    if similarity not in SPARSE_SIMILARITIES:
        raise ValueError(f"the model's similarity_fn_name is {similarity!r}; a sparse index scores "
                         f"{' or '.join(SPARSE_SIMILARITIES)}: set it in config_sentence_transformers.json.")
    options = {"batch_size": batch_size, "max_active_dims": max_active_dims, "show_progress_bar": False}

    def encode_queries(texts: list[str]) -> torch.Tensor:
        return _scaled(model.encode_query(texts, prompt_name=query_prompt_name, **options), similarity)

    def encode_documents(texts: list[str]) -> torch.Tensor:
        return _scaled(model.encode_document(texts, prompt_name=corpus_prompt_name, **options), similarity)

    hits, figures = retrieve_sparse(encode_queries, encode_documents, corpus, judged, depth=k_values[-1],
                                    vocab_size=model.get_sentence_embedding_dimension(), model=model_name,
                                    batch_size=batch_size, chunk_size=chunk_size, max_postings=max_postings,
                                    index_directory=index_directory, ignore_identical_ids=ignore_identical_ids)
    result = evaluate_rankings({q: [doc for doc, _ in ranked] for q, ranked in hits.items()}, qrels, k_values)
    result["metrics"].update(figures)
    return result


def as_qrels(relevant_docs: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{query id: {doc id: relevance}}`` of graded judgements (kept) or of sets / lists of relevant doc ids
    (each relevance 1), as sentence-transformers' evaluators take them."""
    qrels = {}
    for query, judged in relevant_docs.items():
        qrels[str(query)] = ({str(doc): int(rel) for doc, rel in judged.items()} if isinstance(judged, Mapping)
                             else {str(doc): 1 for doc in judged})
    return qrels


def _scaled(vectors: torch.Tensor, similarity: str) -> torch.Tensor:
    """``vectors`` (sparse ``[n, V]``) as the index scores them: each row L2-normalised for ``cosine``."""
    if similarity == "dot":
        return vectors
    coo = vectors.coalesce()
    rows, values = coo.indices()[0], coo.values()
    norms = torch.zeros(coo.shape[0], dtype=values.dtype).index_add_(0, rows, values * values).sqrt()
    return torch.sparse_coo_tensor(coo.indices(), values / norms[rows].clamp_min(1e-12), coo.shape).coalesce()
