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
from pathlib import Path
from typing import Any

import torch

from bertkit.retrieval.sparse_retrieve import retrieve_sparse
from bertkit.sentence.evaluation.evaluate import judged_queries
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings
from bertkit.sentence.modules import is_sentence_transformer, read_layout
from bertkit.sentence.sides import side_prompts

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
    hits, figures = sparse_run(model, corpus, judged, depth=k_values[-1], batch_size=batch_size,
                               chunk_size=chunk_size, max_active_dims=max_active_dims,
                               query_prompt_name=query_prompt_name, corpus_prompt_name=corpus_prompt_name,
                               max_postings=max_postings, index_directory=index_directory, model_name=model_name,
                               ignore_identical_ids=ignore_identical_ids)
    result = evaluate_rankings({q: [doc for doc, _ in ranked] for q, ranked in hits.items()}, qrels, k_values)
    result["metrics"].update(figures)
    return result


def sparse_run(model, corpus: Mapping[str, str], queries: Mapping[str, str], *, depth: int, batch_size: int = 32,
               chunk_size: int = 4096, max_active_dims: int | None = None, query_prompt_name: str | None = None,
               corpus_prompt_name: str | None = None, max_postings: int = 10_000_000,
               index_directory: str | os.PathLike | None = None, model_name: str = "sparse-encoder",
               ignore_identical_ids: bool = False) -> tuple[dict[str, list[tuple[str, float]]], dict[str, float]]:
    """``({query id: [(doc id, score), ...]}, sparsity figures)``: the best ``depth`` documents of ``corpus`` for
    each of ``queries`` by ``model`` (a :class:`bertkit.SparseEncoder`), through
    :func:`~bertkit.retrieval.sparse_retrieve.retrieve_sparse`; the arguments as
    :func:`evaluate_sparse_retrieval`'s."""
    similarity = getattr(model, "similarity_fn_name", "dot")
    if similarity not in SPARSE_SIMILARITIES:
        raise ValueError(f"the model's similarity_fn_name is {similarity!r}; a sparse index scores "
                         f"{' or '.join(SPARSE_SIMILARITIES)}: set it in config_sentence_transformers.json.")
    options = {"batch_size": batch_size, "max_active_dims": max_active_dims, "show_progress_bar": False}

    def encode_queries(texts: list[str]) -> torch.Tensor:
        return _scaled(model.encode_query(texts, prompt_name=query_prompt_name, **options), similarity)

    def encode_documents(texts: list[str]) -> torch.Tensor:
        return _scaled(model.encode_document(texts, prompt_name=corpus_prompt_name, **options), similarity)

    return retrieve_sparse(encode_queries, encode_documents, corpus, queries, depth=depth,
                           vocab_size=model.get_sentence_embedding_dimension(), model=model_name,
                           batch_size=batch_size, chunk_size=chunk_size, max_postings=max_postings,
                           index_directory=index_directory, ignore_identical_ids=ignore_identical_ids)


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


def is_sparse_encoder(model_dir: str | os.PathLike) -> bool:
    """Whether ``model_dir`` is a sentence-transformers sparse encoder directory (a masked-LM with SpladePooling,
    a Router with a static side, or a SparseAutoEncoder: what :class:`bertkit.SparseEncoder` loads)."""
    path = Path(model_dir)
    if not is_sentence_transformer(path):
        return False
    layout = read_layout(path)
    return bool(layout.masked_lm or layout.routes or layout.static or layout.autoencoder is not None)


def load_sparse_encoder(model_dir: str | os.PathLike, *, dtype: str = "auto", max_seq_length: int | None = None,
                        device: str | None = None, flag: str = "MODEL_DIR") -> tuple[Any, str]:
    """``(model, dtype used)``: the :class:`bertkit.SparseEncoder` of ``model_dir``, as
    :func:`~bertkit.sentence.evaluation.evaluate.load_encoder` loads a dense model; ``ValueError`` naming ``flag``
    when ``model_dir`` holds a dense model."""
    from bertkit.sentence.sparse import SparseEncoder

    if not Path(model_dir).is_dir():
        raise ValueError(f"{flag} {model_dir}: no such directory; pass a sparse encoder directory (SPLADE, "
                         "inference-free or CSR, as sentence-transformers saves them).")
    if not is_sparse_encoder(model_dir):
        raise ValueError(f"{flag} {model_dir} is not a sparse encoder (no masked-LM with SpladePooling, Router or "
                         "SparseAutoEncoder in its modules.json); pass a SPLADE, inference-free or CSR directory.")
    if max_seq_length is not None and max_seq_length < 1:
        raise ValueError(f"--max-seq-length must be at least 1, got {max_seq_length}.")
    model = SparseEncoder(model_dir, device, dtype=dtype)
    for route in model.routes.values():  # a CSR route cuts its texts in its dense model
        target = getattr(route, "dense", route)
        if max_seq_length is not None and hasattr(target, "max_seq_length"):
            target.max_seq_length = min(max_seq_length, target.max_seq_length)
    return model, model.dtype_choice.name if model.dtype_choice is not None else "fp32"


def sparse_beir_report(model, directory: str | os.PathLike, *, split: str = "test",
                       k_values: Iterable[int] = DEFAULT_K, batch_size: int = 64, chunk_size: int = 4096,
                       max_active_dims: int | None = None, max_postings: int = 10_000_000,
                       ignore_identical_ids: bool = False, model_name: str = "sparse-encoder") -> dict[str, Any]:
    """:func:`~bertkit.sentence.evaluation.evaluate.beir_report`'s record for a sparse encoder: ``{"kind":
    "sparse", "beir", "split", "similarity", "ignore_identical_ids", "prompts", "max_active_dims", "documents",
    "queries", "k", "metrics", "per_query"}``, the metrics with the sparsity figures
    (:func:`evaluate_sparse_retrieval`)."""
    from bertkit.sentence.evaluation.beir import load_beir

    k_values = check_k_values(k_values, "--k")
    data = load_beir(directory, split)
    result = evaluate_sparse_retrieval(model, data.queries, data.corpus, data.qrels, k_values=k_values,
                                       batch_size=batch_size, chunk_size=chunk_size, max_active_dims=max_active_dims,
                                       max_postings=max_postings, model_name=model_name,
                                       ignore_identical_ids=ignore_identical_ids)
    return {"kind": "sparse", "beir": os.fspath(directory), "split": split, "similarity": model.similarity_fn_name,
            "ignore_identical_ids": ignore_identical_ids, "prompts": side_prompts(model.prompts),
            "max_active_dims": max_active_dims or model.max_active_dims, "documents": len(data.corpus),
            "queries": result["queries"], "k": list(k_values), "metrics": result["metrics"],
            "per_query": result["per_query"]}
