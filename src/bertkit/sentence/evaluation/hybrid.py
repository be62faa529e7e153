"""Hybrid retrieval's evaluation: a dense and a sparse encoder on one BEIR split, each alone and their fusion.

What ``bertkit evaluate DENSE_DIR --beir DIR --sparse-model SPARSE_DIR --fusion rrf|weighted-sum`` calls. The
corpus is encoded once by each model: the dense run is :func:`~bertkit.retrieval.dense.retrieve`'s (as
:func:`~bertkit.sentence.evaluation.evaluate.beir_report` ranks), the sparse run goes through an inverted index
(:func:`~bertkit.sentence.evaluation.sparse.sparse_run`), each to ``candidates`` documents per query; the two are
fused by :func:`~bertkit.retrieval.fusion.fuse_runs` and the three runs scored alike
(:func:`~bertkit.sentence.evaluation.ir_metrics.evaluate_rankings`), so the report sets them side by side.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from bertkit.retrieval.dense import retrieve
from bertkit.retrieval.fusion import fuse_runs
from bertkit.retrieval.hybrid import RUNS, fusion_options
from bertkit.sentence.evaluation.beir import load_beir
from bertkit.sentence.evaluation.evaluate import retrieval_encoders
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings
from bertkit.sentence.evaluation.sparse import sparse_run
from bertkit.sentence.sides import side_prompts


def hybrid_beir_report(dense_model, sparse_model, directory: str | os.PathLike, *, fusion: str = "rrf",
                       weights: Sequence[float] | None = None, rrf_k: int = 60, normalize: str = "minmax",
                       candidates: int = 100, split: str = "test", k_values: Iterable[int] = DEFAULT_K,
                       batch_size: int = 64, chunk_size: int = 50_000, sparse_chunk_size: int = 4096,
                       similarity: str | None = None, max_active_dims: int | None = None,
                       ignore_identical_ids: bool = False, sparse_model_name: str = "sparse-encoder") -> dict[str, Any]:
    """``{"kind": "hybrid", "beir", "split", "fusion", "ignore_identical_ids", "documents", "queries", "k", "dense",
    "sparse", "metrics", "per_query"}`` of ``dense_model`` (a loaded SentenceTransformer, scored by ``similarity``,
    default its own) and ``sparse_model`` (a loaded SparseEncoder, at most ``max_active_dims`` weights) on the
    ``split`` of the BEIR ``directory``: ``metrics`` and ``per_query`` hold ``"dense"``, ``"sparse"`` (with the
    sparsity figures) and ``"fused"``; ``fusion`` its method and options (:func:`fusion_options`), each run
    retrieving ``max(candidates, largest k)`` documents per query before fusing."""
    options = fusion_options(fusion, weights=weights, rrf_k=rrf_k, normalize=normalize, flag="--fusion")
    k_values = check_k_values(k_values, "--k")
    if candidates < 1:
        raise ValueError(f"--top-k must be at least 1 (the documents each run gives the fusion), got {candidates}.")
    data = load_beir(directory, split)
    depth = max(candidates, k_values[-1])
    encode_queries, encode_documents, prompts = retrieval_encoders(dense_model, batch_size)
    similarity = similarity or dense_model.similarity_fn_name
    dense_hits = retrieve(encode_queries, encode_documents, data.corpus, data.queries, depth=depth,
                          batch_size=batch_size, chunk_size=chunk_size, similarity=similarity,
                          ignore_identical_ids=ignore_identical_ids)
    sparse_hits, figures = sparse_run(sparse_model, data.corpus, data.queries, depth=depth, batch_size=batch_size,
                                      chunk_size=sparse_chunk_size, max_active_dims=max_active_dims,
                                      model_name=sparse_model_name, ignore_identical_ids=ignore_identical_ids)
    runs = {"dense": dense_hits, "sparse": sparse_hits,
            "fused": fuse_runs([dense_hits, sparse_hits], fusion, depth=k_values[-1], **options)}
    results = {name: evaluate_rankings({q: [doc for doc, _ in ranked] for q, ranked in runs[name].items()},
                                       data.qrels, k_values) for name in RUNS}
    results["sparse"]["metrics"].update(figures)
    return {"kind": "hybrid", "beir": os.fspath(directory), "split": split,
            "fusion": {"method": fusion, **options, "candidates": depth},
            "ignore_identical_ids": ignore_identical_ids, "documents": len(data.corpus),
            "queries": results["fused"]["queries"], "k": list(k_values),
            "dense": {"similarity": similarity, "prompts": prompts},
            "sparse": {"similarity": sparse_model.similarity_fn_name, "prompts": side_prompts(sparse_model.prompts),
                       "max_active_dims": max_active_dims or sparse_model.max_active_dims},
            "metrics": {name: results[name]["metrics"] for name in RUNS},
            "per_query": {name: results[name]["per_query"] for name in RUNS}}


def side_by_side(report: dict[str, Any]) -> str:
    """The retrieval metrics of a hybrid report's runs as a table: a row per metric, a column per run."""
    metrics = report["metrics"]
    names = list(metrics["fused"])
    width = max(len(name) for name in names)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{run:>8}" for run in RUNS)]
    lines += [f"{name:<{width}}  " + "  ".join(f"{metrics[run][name]:8.4f}" for run in RUNS) for name in names]
    return "\n".join(lines)
