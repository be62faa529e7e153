"""An embedding model's evaluation: retrieval metrics of an encoder, and the reports of ``bertkit evaluate``
(retrieval on a BEIR directory, correlation on an STS file).

What ``bertkit evaluate MODEL --beir DIR`` / ``--sts FILE`` call. MODEL is any directory
:class:`bertkit.sentence.SentenceTransformer` loads (a sentence-transformers directory, or a BERT with mean
pooling). Queries are encoded with the model's ``query`` prompt and documents with its ``document`` (else
``passage``, ``corpus``) prompt where it has them, as sentence-transformers' ``encode_query`` /
``encode_document`` do; otherwise with its default prompt, if any.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from bertkit.retrieval.dense import Encode, retrieve
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings
from bertkit.sentence.sides import side_prompts


def evaluate_retrieval(encode_queries: Encode, encode_corpus: Encode, corpus: Mapping[str, str],
                       queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], *,
                       k_values: Iterable[int] = DEFAULT_K, batch_size: int = 32, chunk_size: int = 50_000,
                       query_chunk_size: int = 256, similarity: str = "cosine",
                       ignore_identical_ids: bool = False) -> dict:
    """Retrieval metrics of an encoder on ``corpus`` for the queries of ``qrels``:
    :func:`~bertkit.retrieval.dense.retrieve` to the largest k, scored by
    :func:`~bertkit.sentence.evaluation.ir_metrics.evaluate_rankings` (``{"queries", "metrics", "per_query"}``: the
    mean over the judged queries, and each one's). A judged query missing from ``queries`` raises ``ValueError``."""
    k_values = check_k_values(k_values)
    hits = retrieve(encode_queries, encode_corpus, corpus, judged_queries(queries, qrels), depth=k_values[-1],
                    batch_size=batch_size, chunk_size=chunk_size, query_chunk_size=query_chunk_size,
                    similarity=similarity, ignore_identical_ids=ignore_identical_ids)
    return evaluate_rankings({q: [doc for doc, _ in ranked] for q, ranked in hits.items()}, qrels, k_values)


def judged_queries(queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    """``{query id: text}`` of the queries ``qrels`` judges, in its order; ``ValueError`` if one has no text."""
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise ValueError(f"{len(missing)} judged queries have no text ({', '.join(map(repr, missing[:3]))}"
                         f"{', ...' if len(missing) > 3 else ''}); pass every query of qrels in queries.")
    return {q: queries[q] for q in qrels}


def load_encoder(model_dir: str | os.PathLike, *, dtype: str = "auto", max_seq_length: int | None = None,
                 device: str | None = None) -> tuple[Any, str]:
    """``(model, dtype used)``: the :class:`~bertkit.sentence.SentenceTransformer` of ``model_dir`` on ``device``
    (default: the CPU) in ``dtype``, prepared as serve and ``bertkit embed`` prepare it: ``auto`` picks as the
    inference commands do (:func:`bertkit.inference.precision.resolve`: an int8 checkpoint runs int8, else bf16
    where the device computes it natively and the measured embedding quality allows, else fp32) and logs what it
    chose and why; ``fp32`` / ``bf16`` / ``fp16`` / ``int8`` are taken as given. Its sequences are cut at
    ``max_seq_length`` if given."""
    from bertkit.sentence import SentenceTransformer

    model = SentenceTransformer(model_dir, device, dtype=dtype)
    used = model.dtype_choice.name
    if max_seq_length is not None:
        if max_seq_length < 1:
            raise ValueError(f"--max-seq-length must be at least 1, got {max_seq_length}.")
        model.max_seq_length = min(max_seq_length, model.bert.config.max_tokens)
    return model, used


def retrieval_encoders(model, batch_size: int) -> tuple[Any, Any, dict[str, str | None]]:
    """``(encode queries, encode documents, {"query": prompt, "document": prompt})`` of a loaded
    SentenceTransformer, each prompt chosen as the module docstring says (None: the model's default)."""
    prompts = side_prompts(model.prompts)
    return (_encoder(model, prompts["query"], batch_size), _encoder(model, prompts["document"], batch_size), prompts)


def _encoder(model, prompt_name: str | None, batch_size: int):
    def encode(texts: list[str]) -> Any:
        return model.encode(texts, prompt_name=prompt_name, batch_size=batch_size, show_progress_bar=False)

    return encode


def beir_report(model, directory: str | os.PathLike, *, split: str = "test", k_values: Iterable[int] = DEFAULT_K,
                batch_size: int = 64, chunk_size: int = 50_000, similarity: str | None = None,
                ignore_identical_ids: bool = False) -> dict[str, Any]:
    """Retrieval metrics of ``model`` (a loaded SentenceTransformer) on the ``split`` of the BEIR ``directory``:
    ``{"beir", "split", "similarity", "ignore_identical_ids", "prompts", "documents", "queries", "k", "metrics",
    "per_query"}``; ``similarity`` defaults to the model's own (see
    :func:`~bertkit.retrieval.dense.retrieve` for ``ignore_identical_ids``)."""
    from bertkit.sentence.evaluation.beir import load_beir

    k_values = check_k_values(k_values, "--k")
    data = load_beir(directory, split)
    encode_queries, encode_documents, prompts = retrieval_encoders(model, batch_size)
    similarity = similarity or model.similarity_fn_name
    result = evaluate_retrieval(encode_queries, encode_documents, data.corpus, data.queries, data.qrels,
                                k_values=k_values, batch_size=batch_size,
                                chunk_size=chunk_size, similarity=similarity,
                                ignore_identical_ids=ignore_identical_ids)
    return {"beir": os.fspath(directory), "split": split, "similarity": similarity,
            "ignore_identical_ids": ignore_identical_ids,
            "prompts": prompts, "documents": len(data.corpus),
            "queries": result["queries"], "k": list(k_values), "metrics": result["metrics"],
            "per_query": result["per_query"]}


def sts_report(model, path: str | os.PathLike, *, batch_size: int = 64) -> dict[str, Any]:
    """``{"sts", "pairs", "metrics"}``: Pearson and Spearman of cosine and dot of ``model`` on the STS file."""
    from bertkit.sentence.evaluation.sts import evaluate_sts, read_sts

    pairs, scores = read_sts(path)
    metrics = evaluate_sts(_encoder(model, None, batch_size), pairs, scores, batch_size=batch_size)
    return {"sts": os.fspath(path), "pairs": metrics.pop("pairs"), "metrics": metrics}
