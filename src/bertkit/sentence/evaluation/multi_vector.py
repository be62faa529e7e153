"""Retrieval metrics of a multi-vector (late-interaction, ColBERT) model: exact MaxSim over the whole corpus, or
through a kept exact or PLAID index.

What sentence-transformers' ``MultiVectorInformationRetrievalEvaluator`` reports, on bertkit's engine: the judged
queries are encoded with the model's query side (``encode_query``: markers, query expansion), and every query is
ranked against the corpus. Without ``index`` the corpus is encoded once with the document side (``encode_document``:
markers, skiplist) into a :class:`~bertkit.retrieval.multivector.MultiVectorIndex`, a chunk of texts at a time, and
searched exactly (MaxSim on the stored float32 vectors, memory bounded by ``max_scores`` token-pair scores and the
writer's ``max_tokens``); ``index_directory`` keeps that index for later runs. With ``index`` (a loaded
:class:`~bertkit.retrieval.multivector.MultiVectorIndex` or :class:`~bertkit.retrieval.plaid.PlaidIndex`, or a
directory holding one, built with the corpus's ids by this model) nothing is encoded but the queries: an exact
index answers as above; a PLAID index answers by its candidate generation (``nprobe`` centroids per query token,
``candidates`` documents kept) and MaxSim on its decompressed vectors, or on ``exact``'s stored ones.

The rankings are scored by the dense evaluation's :func:`~bertkit.sentence.evaluation.ir_metrics.evaluate_rankings`
(same metric names; ties to the greater doc id, as trec_eval). ``map@k`` is trec_eval's (sentence-transformers
divides by ``min(k, relevant documents)``; the two agree where k is at least a query's number of relevant
documents).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.retrieval.multivector import MultiVectorIndex, MultiVectorIndexWriter
from bertkit.retrieval.plaid import FORMAT as PLAID_FORMAT
from bertkit.retrieval.plaid import PlaidIndex
from bertkit.sentence.evaluation.evaluate import judged_queries
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings
from bertkit.sentence.evaluation.sparse import as_qrels
from bertkit.sentence.sides import side_prompts

#: token-pair scores an exact search holds at once (128 MiB of float32)
MAX_SCORES = 1 << 25
#: a PLAID index's search settings when none are given: centroids probed per query token, documents kept for MaxSim
NPROBE, CANDIDATES = 4, 256

Index = MultiVectorIndex | PlaidIndex
#: an index to search: loaded, or its directory; None: encode the corpus and search it exactly
IndexSource = Index | str | os.PathLike | None


def evaluate_multivector_retrieval(model, queries: Mapping[str, str], corpus: Mapping[str, str],
                                   relevant_docs: Mapping[str, Any], *, k_values: Iterable[int] = DEFAULT_K,
                                   batch_size: int = 32, chunk_size: int = 4096, query_prompt_name: str | None = None,
                                   corpus_prompt_name: str | None = None, index: IndexSource = None,
                                   exact: MultiVectorIndex | None = None, nprobe: int = NPROBE,
                                   candidates: int = CANDIDATES, index_directory: str | os.PathLike | None = None,
                                   model_name: str = "multi-vector-encoder", max_scores: int = MAX_SCORES,
                                   max_tokens: int = 1_000_000, ignore_identical_ids: bool = False) -> dict:
    """``{"queries", "metrics", "per_query"}`` of ``model`` (a :class:`bertkit.MultiVectorEncoder`) retrieving from
    ``corpus`` (doc id -> text) for the judged queries of ``relevant_docs``: ``{query id: {doc id: relevance}}``
    (graded) or sentence-transformers' ``{query id: set of relevant doc ids}``. ``metrics`` holds the means of
    ``ndcg@k``, ``mrr@k``, ``map@k``, ``recall@k``, ``precision@k``, ``accuracy@k`` for each of ``k_values``.

    Exact MaxSim over the corpus, or through ``index``; see the module docstring for ``index``, ``exact``,
    ``nprobe``, ``candidates`` and ``index_directory`` (a new or empty directory; its manifest names
    ``model_name``). Prompt names default to the model's own, as ``encode_query`` / ``encode_document`` pick them.
    The model is evaluated in eval mode and left in the mode it was in. ``ValueError`` for a judged query without
    text, an empty corpus, a document with no token vectors (only skiplist tokens), or an index of another width
    or of other documents."""
    k_values = check_k_values(k_values)
    qrels = as_qrels(relevant_docs)
    judged = judged_queries(queries, qrels)
    hits = multivector_run(model, corpus, judged, depth=k_values[-1], batch_size=batch_size, chunk_size=chunk_size,
                           query_prompt_name=query_prompt_name, corpus_prompt_name=corpus_prompt_name, index=index,
                           exact=exact, nprobe=nprobe, candidates=candidates, index_directory=index_directory,
                           model_name=model_name, max_scores=max_scores, max_tokens=max_tokens,
                           ignore_identical_ids=ignore_identical_ids)
    return evaluate_rankings({q: [doc for doc, _ in ranked] for q, ranked in hits.items()}, qrels, k_values)


def multivector_run(model, corpus: Mapping[str, str], queries: Mapping[str, str], *, depth: int,
                    batch_size: int = 32, chunk_size: int = 4096, query_prompt_name: str | None = None,
                    corpus_prompt_name: str | None = None, index: IndexSource = None,
                    exact: MultiVectorIndex | None = None, nprobe: int = NPROBE,
                    candidates: int = CANDIDATES, index_directory: str | os.PathLike | None = None,
                    model_name: str = "multi-vector-encoder", max_scores: int = MAX_SCORES,
                    max_tokens: int = 1_000_000,
                    ignore_identical_ids: bool = False) -> dict[str, list[tuple[str, float]]]:
    """``{query id: [(doc id, score), ...]}``: the best ``depth`` documents of ``corpus`` for each of ``queries``
    by ``model``'s MaxSim, best first, a tie to the greater doc id; the arguments as
    :func:`evaluate_multivector_retrieval`'s."""
    if not corpus:
        raise ValueError("the corpus is empty: retrieval needs at least one document.")
    if chunk_size < 1 or max_scores < 1:
        raise ValueError(f"chunk_size and max_scores must be at least 1, got {chunk_size} and {max_scores}.")
    if index is not None and index_directory is not None:
        raise ValueError("index_directory keeps the index an evaluation builds; with index= nothing is built: "
                         "give one or the other.")
    query_ids = list(queries)
    extra = int(ignore_identical_ids)  # one more is retrieved: the query itself may be among them
    with evaluating(model):
        # a judged query longer than the query length is cut (with a warning), as sentence-transformers' evaluator
        vectors = model.encode_query([queries[q] for q in query_ids], prompt_name=query_prompt_name,
                                     batch_size=batch_size, show_progress_bar=False, truncate=True)
        if index is None:
            with tempfile.TemporaryDirectory(prefix="bertkit-multivector-") as scratch:
                built = encode_corpus(model, corpus, index_directory or os.path.join(scratch, "index"),
                                      batch_size=batch_size, chunk_size=chunk_size, prompt_name=corpus_prompt_name,
                                      model_name=model_name, max_tokens=max_tokens)
                found = search_index(built, vectors, depth + extra, max_scores=max_scores)
                del built  # its memory maps, before the scratch directory goes
        else:
            index = open_index(index)
            check_index(index, corpus, model.get_sentence_embedding_dimension())
            found = search_index(index, vectors, depth + extra, exact=exact, nprobe=nprobe,
                                 candidates=max(candidates, depth + extra), max_scores=max_scores)
    divide = getattr(model, "similarity_fn_name", "maxsim") == "meanmaxsim"
    hits = {}
    for query, vector, ranked in zip(query_ids, vectors, found):
        scale = 1.0 / max(len(vector), 1) if divide else 1.0
        ranked = sorted(((doc, score * scale) for doc, score in ranked), key=lambda h: (h[1], h[0]), reverse=True)
        if ignore_identical_ids:
            ranked = [(doc, score) for doc, score in ranked if doc != query]
        hits[query] = ranked[:depth]
    return hits


@contextmanager
def evaluating(model):
    """``model`` (an ``nn.Module``) in eval mode for the block (no dropout), its training mode restored after."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def encode_corpus(model, corpus: Mapping[str, str], directory: str | os.PathLike, *, batch_size: int = 32,
                  chunk_size: int = 4096, prompt_name: str | None = None, model_name: str = "multi-vector-encoder",
                  max_tokens: int = 1_000_000) -> MultiVectorIndex:
    """The exact float32 :class:`~bertkit.retrieval.multivector.MultiVectorIndex` in ``directory`` (new or empty) of
    ``corpus`` encoded by ``model.encode_document``, ``chunk_size`` texts at a time, stored with their ids in doc-id
    order, greatest first (the index's tie to the lower position is trec_eval's tie to the greater id).
    ``ValueError`` naming the document if one has no token vectors."""
    doc_ids = sorted(corpus, reverse=True)
    writer = MultiVectorIndexWriter(directory, model.get_sentence_embedding_dimension(), model_name, dtype="float32",
                                    max_tokens=max_tokens)
    for start in range(0, len(doc_ids), chunk_size):
        ids = doc_ids[start:start + chunk_size]
        vectors = model.encode_document([corpus[d] for d in ids], prompt_name=prompt_name, batch_size=batch_size,
                                        show_progress_bar=False)
        empty = next((d for d, v in zip(ids, vectors) if len(v) == 0), None)
        if empty is not None:
            raise ValueError(f"corpus document {empty!r} has no token vectors (its text {corpus[empty]!r:.60} is only "
                             "skiplist tokens or empty); drop it from the corpus or give it words.")
        writer.add(vectors, ids)
    return writer.finish()


def open_index(index: Index | str | os.PathLike, *, model: str | None = None, dim: int | None = None) -> Index:
    """``index`` loaded (checked against its manifest, and with ``model`` / ``dim`` against what built it) when it
    is a directory: exact or PLAID, as its manifest says."""
    if isinstance(index, MultiVectorIndex | PlaidIndex):
        return index
    path = Path(index)
    try:
        kind = json.loads((path / "manifest.json").read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        kind = None  # no readable manifest: the exact index's loader says what is wrong, in one line
    return (PlaidIndex if kind == PLAID_FORMAT else MultiVectorIndex).load(path, model=model, dim=dim)


def check_index(index: Index, corpus: Mapping[str, str], dim: int) -> None:
    """``ValueError`` unless ``index`` holds vectors of width ``dim`` for exactly the documents of ``corpus``, by
    id."""
    where = str(index.directory)
    if index.dim != dim:
        raise ValueError(f"the index in {where!r} holds {index.dim}-dimensional vectors and the model makes {dim}; "
                         f"evaluate it with the model that built it ({index.model!r}) or build another.")
    if index.manifest.get("ids") is not True:
        raise ValueError(f"the index in {where!r} was built without document ids, so its results cannot be judged; "
                         "build it with the corpus's ids.")
    ids = set(index.ids(np.arange(index.documents)))
    missing = [doc for doc in corpus if doc not in ids]
    if missing or len(ids) != len(corpus):
        named = f" ({len(missing)} corpus ids missing, e.g. {missing[0]!r})" if missing else ""
        raise ValueError(f"the index in {where!r} holds {index.documents} documents and the corpus {len(corpus)}"
                         f"{named}; build the index from this corpus.")


def search_index(index: Index, queries: Sequence[Any], depth: int, *, exact: MultiVectorIndex | None = None,
                 nprobe: int = NPROBE, candidates: int = CANDIDATES,
                 max_scores: int = MAX_SCORES) -> list[list[tuple[str, float]]]:
    """Each query's best ``depth`` ``(doc id, score)`` from ``index``: exact MaxSim (a
    :class:`~bertkit.retrieval.multivector.MultiVectorIndex`) or a PLAID search (``exact``: its short list scored
    on that index's stored vectors)."""
    if not len(queries):
        return []
    if isinstance(index, PlaidIndex):
        found = index.search(queries, depth, nprobe=nprobe, candidates=candidates, rerank=exact)
    else:
        found = index.search(queries, depth, max_scores=max_scores)
    return [list(zip(index.ids(positions), scores.tolist())) for scores, positions in found]




def multivector_beir_report(model, directory: str | os.PathLike, *, split: str = "test",
                            k_values: Iterable[int] = DEFAULT_K, batch_size: int = 64, chunk_size: int = 4096,
                            index: IndexSource = None, exact: MultiVectorIndex | None = None, nprobe: int = NPROBE,
                            candidates: int = CANDIDATES, index_directory: str | os.PathLike | None = None,
                            model_name: str = "multi-vector-encoder",
                            ignore_identical_ids: bool = False) -> dict[str, Any]:
    """:func:`~bertkit.sentence.evaluation.evaluate.beir_report`'s record for a multi-vector model: ``{"kind":
    "multi-vector", "beir", "split", "similarity", "ignore_identical_ids", "prompts", "search", "documents",
    "queries", "k", "metrics", "per_query"}``; ``search`` says how the corpus was searched (``"exact"``, an
    ``"exact index"`` or ``"plaid"`` with its settings) and ``seconds`` how long encoding and search took."""
    import time

    from bertkit.sentence.evaluation.beir import load_beir

    k_values = check_k_values(k_values, "--k")
    data = load_beir(directory, split)
    index = open_index(index) if index is not None else None
    search: dict[str, Any] = {"method": "exact", "index": None if index_directory is None else
                              os.fspath(index_directory)}
    if isinstance(index, PlaidIndex):
        search = {"method": "plaid", "index": str(index.directory), "nbits": index.nbits, "nprobe": nprobe,
                  "candidates": max(candidates, k_values[-1]), "scored_on": "decompressed" if exact is None else
                  f"exact index {str(exact.directory)!r}"}
    elif index is not None:
        search = {"method": "exact index", "index": str(index.directory)}
    started = time.perf_counter()
    result = evaluate_multivector_retrieval(model, data.queries, data.corpus, data.qrels, k_values=k_values,
                                            batch_size=batch_size, chunk_size=chunk_size, index=index, exact=exact,
                                            nprobe=nprobe, candidates=candidates, index_directory=index_directory,
                                            model_name=model_name, ignore_identical_ids=ignore_identical_ids)
    search["seconds"] = round(time.perf_counter() - started, 3)
    return {"kind": "multi-vector", "beir": os.fspath(directory), "split": split,
            "similarity": getattr(model, "similarity_fn_name", "maxsim"), "ignore_identical_ids": ignore_identical_ids,
            "prompts": side_prompts(model.prompts), "search": search, "documents": len(data.corpus),
            "queries": result["queries"], "k": list(k_values), "metrics": result["metrics"],
            "per_query": result["per_query"]}
