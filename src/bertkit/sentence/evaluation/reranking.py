"""Reranking evaluation of a cross-encoder: over a first stage's top k on a BEIR directory, or on rows of
(query, positives, negatives or ranked documents) as sentence-transformers' ``CrossEncoderRerankingEvaluator``.

**BEIR + first stage** (:class:`BeirRerankEvaluator`, :func:`rerank_report`). The first stage gives each judged
query its ``top_k`` documents: an embedding model (a directory or a loaded SentenceTransformer; the corpus
encoded once, in length-sorted batches, ranked in chunks by :func:`~bertkit.retrieval.dense.retrieve`) or a
run file (TREC ``qid Q0 docid rank score tag`` lines, or JSON ``{qid: {docid: score}}``; each query's
documents ranked by score as trec_eval ranks them, the ``rank`` column ignored, as trec_eval ignores it). The
cross-encoder then scores every (query, document) pair of those lists and the documents are re-ordered by its
score. As BEIR's ``Rerank`` and sentence-transformers' ``CrossEncoderNanoBEIREvaluator`` do, only the top k is
reranked and nothing below it is kept: both lists hold ``top_k`` documents, so a metric at a cut-off above
``top_k`` sees the same documents in both, and recall@k cannot rise above the first stage's recall@top_k.
A relevant document the first stage missed counts as a miss for both. ``always_rerank_positives`` (as
sentence-transformers' option of that name) instead adds every relevant document the first stage missed to
the reranked candidates: that measures the reranker alone (an upper bound), not the two stages together.

**Rows** (:class:`RowsRerankEvaluator`, :func:`rows_report`): a file the trainers read (JSON lines, CSV/TSV,
Parquet, ``save_to_disk``), one query per row: a query column (``query``/``anchor``/...), a ``positive``
column (a text or a list of texts) and either negatives (``negative_1..n`` columns or a ``negatives`` list)
or a ``documents`` list ranked by a first stage (best first, positives among them). The candidates are the
positives then the negatives; with ``documents``, the positives then the documents that are not positives
(``always_rerank_positives=True``, the default) or the documents alone, relevant where they are a positive
(``False``), and the documents' own order is reported as ``base_*``, as sentence-transformers reports it.
Metrics per row, averaged: ``mrr@k``, ``ndcg@k`` and ``map`` (average precision over the whole list).

Every metric is :mod:`bertkit.sentence.evaluation.ir_metrics`'s (trec_eval's, ties to the greater document id); a flat
``{name: value}`` is what calling an evaluator with a cross-encoder returns, for a trainer's ``--eval``
callback: ``functools.partial(evaluator, cross_encoder)`` is an ``evaluate() -> dict[str, float]``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.inference.finite import check_rows
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K, check_k_values, evaluate_rankings, query_metrics, rank

#: pairs scored by one ``predict`` call (a block of whole queries): bounds the tokenized pairs held at once
PAIR_CHUNK = 16_384


# ---------------------------------------------------------------------------------------------- scoring

@contextmanager
def _evaluating(cross_encoder):
    """The cross-encoder in eval mode (no dropout) for the block, its training mode restored after."""
    model = cross_encoder.model
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def score_lists(cross_encoder, lists: Sequence[tuple[str, Sequence[str]]], batch_size: int = 32) -> list[list[float]]:
    """The cross-encoder's score of each ``(query, [document, ...])`` pair, list by list, from ``predict`` calls
    over blocks of whole lists of at most :data:`PAIR_CHUNK` pairs (``predict`` sorts each block by length). A
    late-interaction model (:class:`bertkit.MultiVectorEncoder`) scores the lists itself, by MaxSim."""
    if hasattr(cross_encoder, "score_lists"):
        scores = cross_encoder.score_lists(lists, batch_size)
        return check_rows(scores, lambda i: f"the query {lists[i][0]!r:.80} (one of its documents)")
    if cross_encoder.num_labels != 1:
        raise ValueError(f"reranking needs a one-label cross-encoder (one relevance score per pair); this one has "
                         f"{cross_encoder.num_labels} labels.")
    scores: list[list[float]] = []
    start = 0
    with _evaluating(cross_encoder):
        while start < len(lists):
            end, pairs = start, 0
            while end < len(lists) and (end == start or pairs + len(lists[end][1]) <= PAIR_CHUNK):
                pairs += len(lists[end][1])
                end += 1
            block = [(query, document) for query, documents in lists[start:end] for document in documents]
            flat = cross_encoder.predict(block, batch_size=batch_size).tolist() if block else []
            offset = 0
            for _, documents in lists[start:end]:
                scores.append(flat[offset:offset + len(documents)])
                offset += len(documents)
            start = end
    return check_rows(scores, lambda i: f"the query {lists[i][0]!r:.80} (one of its documents)")


# ------------------------------------------------------------------------------------ BEIR + first stage

def read_run(path: str | os.PathLike, queries: Iterable[str], corpus: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``{query id: {doc id: score}}`` of a run file: JSON (``{qid: {docid: score}}``) or TREC lines (``qid Q0
    docid rank score tag``), told by its content whatever its name. A malformed line, a score that is not a
    finite number, a repeated (query, document), or a query or document id that ``queries`` / ``corpus`` lack
    is a one-line ``ValueError`` naming the file and line (or query)."""
    from bertkit.data.sniff import format_error, sniff_format
    from bertkit.tasks.readers import open_text, where

    known = set(queries)
    run: dict[str, dict[str, float]] = {}

    def add(place: str, query: Any, doc: Any, score: Any) -> None:
        query, doc = str(query), str(doc)
        if query not in known:
            raise ValueError(f"{place}: query id {query!r} is not in the BEIR directory's queries.jsonl; the run "
                             "must rank the directory's queries.")
        if doc not in corpus:
            raise ValueError(f"{place}: doc id {doc!r} is not in the BEIR directory's corpus.jsonl; the run must "
                             "rank the directory's documents.")
        try:
            value = float(score)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(score, bool) or not math.isfinite(value):
            raise ValueError(f"{place}: the score {score!r} of {doc!r} is not a finite number.")
        if doc in run.setdefault(query, {}):
            raise ValueError(f"{place}: query {query!r} ranks {doc!r} twice; each document once per query.")
        run[query][doc] = value

    path = Path(path)
    found = sniff_format(path)
    if found in ("parquet", "arrow"):
        raise format_error(path, found, "a run file holds TREC lines or JSON",
                           "write one 'qid Q0 docid rank score tag' line per retrieved document (or JSON {qid: "
                           "{docid: score}})")
    if found in ("json", "jsonl"):  # one JSON object, on one line or several
        from bertkit.io import read_json_object

        for query, scores in read_json_object(path, "a run: {query id: {doc id: score}}").items():
            if not isinstance(scores, dict):
                raise ValueError(f"{path}, query {query!r}: expected an object {{doc id: score}}, got "
                                 f"{type(scores).__name__}.")
            for doc, score in scores.items():
                add(f"{path}, query {query!r}", query, doc, score)
    else:
        with open_text(path) as f:
            for number, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 6:
                    raise ValueError(f"{where(path, number)}: expected 6 fields (qid Q0 docid rank score tag), got "
                                     f"{len(fields)}: {line.strip()[:80]!r}.")
                add(where(path, number), fields[0], fields[2], fields[4])
    if not run:
        raise ValueError(f"{path}: the run ranks no documents; write one 'qid Q0 docid rank score tag' line per "
                         "retrieved document (or JSON {qid: {docid: score}}).")
    return run


def first_stage_hits(first_stage: Any, data, top_k: int, *, directory: str | os.PathLike, batch_size: int = 64,
                     chunk_size: int = 50_000, ignore_identical_ids: bool = False, precision: str = "auto",
                     flag: str = "--first-stage") -> tuple[dict[str, list[str]], dict[str, Any]]:
    """``({query id: [doc id, ...]}, what the first stage was)``: the best ``top_k`` documents of each judged
    query of ``data`` (a :class:`~bertkit.sentence.evaluation.beir.BeirData`), best first, from ``first_stage`` (a run
    file, an embedding model directory, or a loaded SentenceTransformer; see the module docstring). ``flag``: the
    command's option that gave it, named in errors."""
    if isinstance(first_stage, str | os.PathLike) and Path(first_stage).is_file():
        from bertkit.sentence.evaluation.beir import _records

        query_ids = [query for _, _, query, _ in _records(Path(directory) / "queries.jsonl")]
        run = read_run(first_stage, query_ids, data.corpus)
        if not any(query in run for query in data.qrels):
            raise ValueError(f"{flag} {first_stage}: the run ranks none of the {len(data.qrels)} judged "
                             "queries of the split; rank those queries.")
        if ignore_identical_ids:
            run = {query: {doc: s for doc, s in scores.items() if doc != query} for query, scores in run.items()}
        hits = {query: rank(run[query], top_k) for query in data.qrels if query in run}
        return hits, {"run": os.fspath(first_stage)}
    model, precision_used = first_stage, None
    if isinstance(first_stage, str | os.PathLike):
        from bertkit.sentence.evaluation.evaluate import load_encoder

        if not Path(first_stage).is_dir():
            raise ValueError(f"{flag} {first_stage}: no such file or directory; give an embedding model "
                             "directory or a run file (TREC lines or JSON {qid: {docid: score}}).")
        model, precision_used = load_encoder(first_stage, dtype=precision)
    from bertkit.retrieval.dense import retrieve
    from bertkit.sentence.evaluation.evaluate import retrieval_encoders

    encode_queries, encode_documents, prompts = retrieval_encoders(model, batch_size)
    similarity = model.similarity_fn_name
    found = retrieve(encode_queries, encode_documents, data.corpus, data.queries, depth=top_k, batch_size=batch_size,
                     chunk_size=chunk_size, similarity=similarity, ignore_identical_ids=ignore_identical_ids)
    described = {"model": os.fspath(first_stage) if isinstance(first_stage, str | os.PathLike) else
                 type(first_stage).__name__, "similarity": similarity, "prompts": prompts}
    if precision_used is not None:
        described["precision"] = precision_used
    return {query: [doc for doc, _ in ranked] for query, ranked in found.items()}, described


class BeirRerankEvaluator:
    """Reranking a first stage's ``top_k`` on the ``split`` of the BEIR ``directory`` (see the module docstring).

    The first stage runs once, here; :meth:`report` (the whole report) and calling the evaluator with a
    :class:`~bertkit.sentence.cross_encoder.CrossEncoder` (its reranked means, flat) score the candidates with
    that cross-encoder, as often as asked (every N steps of training). ``first_stage_flag``: the command's option
    that gave ``first_stage``, named in its errors."""

    def __init__(self, directory: str | os.PathLike, first_stage: Any, *, split: str = "test", top_k: int = 100,
                 k_values: Iterable[int] = DEFAULT_K, batch_size: int = 64, chunk_size: int = 50_000,
                 always_rerank_positives: bool = False, ignore_identical_ids: bool = False,
                 precision: str = "auto", first_stage_flag: str = "--first-stage"):
        from bertkit.sentence.evaluation.beir import load_beir

        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"--top-k must be a whole number of at least 1 (the first stage's documents reranked "
                             f"per query), got {top_k!r}.")
        self.k_values = check_k_values(k_values, "--k")
        self.directory, self.split, self.top_k, self.batch_size = os.fspath(directory), split, top_k, batch_size
        self.always_rerank_positives = always_rerank_positives
        self.data = load_beir(directory, split)
        self.hits, self.first_stage = first_stage_hits(
            first_stage, self.data, top_k, directory=directory, batch_size=batch_size, chunk_size=chunk_size,
            ignore_identical_ids=ignore_identical_ids, precision=precision, flag=first_stage_flag)
        self.candidates = {query: self._candidates(query, ranked) for query, ranked in self.hits.items()}
        self.first_stage_result = evaluate_rankings(self.hits, self.data.qrels, self.k_values)

    def _candidates(self, query: str, ranked: list[str]) -> list[str]:
        if not self.always_rerank_positives:
            return ranked
        missed = [doc for doc, relevance in self.data.qrels[query].items() if relevance > 0 and doc not in ranked]
        return ranked + sorted(missed)

    def rerank(self, cross_encoder, batch_size: int | None = None) -> dict[str, dict[str, float]]:
        """The reranked run, ``{query id: {doc id: cross-encoder score}}`` (each query's candidates)."""
        queries = list(self.candidates)
        lists = [(self.data.queries[q], [self.data.corpus[d] for d in self.candidates[q]]) for q in queries]
        scores = score_lists(cross_encoder, lists, batch_size or self.batch_size)
        return {q: dict(zip(self.candidates[q], row)) for q, row in zip(queries, scores)}

    def report(self, cross_encoder, batch_size: int | None = None) -> dict[str, Any]:
        """``{"beir", "split", "first_stage_source", "top_k", "always_rerank_positives", "documents", "queries",
        "pairs", "k", "first_stage": {metric: mean}, "reranked": {metric: mean}, "per_query": {"first_stage":
        ..., "reranked": ...}}``."""
        run = self.rerank(cross_encoder, batch_size)
        reranked = evaluate_rankings({q: rank(scores) for q, scores in run.items()}, self.data.qrels, self.k_values)
        return {"beir": self.directory, "split": self.split, "first_stage_source": self.first_stage,
                "top_k": self.top_k, "always_rerank_positives": self.always_rerank_positives,
                "documents": len(self.data.corpus), "queries": reranked["queries"],
                "pairs": sum(len(c) for c in self.candidates.values()), "k": list(self.k_values),
                "first_stage": self.first_stage_result["metrics"], "reranked": reranked["metrics"],
                "per_query": {"first_stage": self.first_stage_result["per_query"],
                              "reranked": reranked["per_query"]}}

    def __call__(self, cross_encoder) -> dict[str, float]:
        """The reranked means, ``{"ndcg@10": ..., ...}``."""
        return self.report(cross_encoder)["reranked"]


def rerank_report(cross_encoder, directory: str | os.PathLike, first_stage: Any, *, top_k: int = 100,
                  **options: Any) -> dict[str, Any]:
    """:meth:`BeirRerankEvaluator.report` of ``cross_encoder`` (``options``: the evaluator's)."""
    return BeirRerankEvaluator(directory, first_stage, top_k=top_k, **options).report(cross_encoder)


# ------------------------------------------------------------------------------------------------ rows

@dataclass
class RerankRow:
    """One query's candidates: ``documents`` (the texts to score, in order), ``relevant`` (their indices that
    are positives), ``base`` (rows of ranked documents: the first stage's order, texts best first, and the
    indices in it that are positives; None for rows of negatives), ``where`` (the file and row)."""

    query: str
    documents: list[str]
    relevant: set[int]
    base: tuple[list[str], set[int]] | None
    where: str


def rerank_rows(path: str | os.PathLike, always_rerank_positives: bool = True, flag: str = "--rerank"
                ) -> list[RerankRow]:
    """The rows of the reranking file ``path`` (see the module docstring), each a :class:`RerankRow`; a file
    without rows, a row without a positive or candidates, or a layout that cannot be told is a one-line
    ``ValueError`` naming ``flag`` (the command's option that gave the file), the file (and row)."""
    import itertools

    from bertkit.sentence.data import SAMPLE_ROWS, table_records
    from bertkit.sentence.data_layout import resolve_columns

    if not os.path.exists(path):
        raise ValueError(f"{flag} {os.fspath(path)}: no such file; give a file of (query, positive, negatives) "
                         "rows (JSON lines, CSV/TSV, Parquet or a save_to_disk directory).")
    sample = [values for _, values in itertools.islice(table_records(path), SAMPLE_ROWS)]
    if not sample:
        raise ValueError(f"{flag} {os.fspath(path)}: the file holds no rows; write one (query, positive, "
                         "negatives) row per query.")
    names = list(dict.fromkeys(name for values in sample for name in values))
    documents = next((name for name in names if name.strip().lower() == "documents"), None)
    layout = resolve_columns([n for n in names if n != documents], sample, path=os.fspath(path))
    if "label" in layout.roles:
        raise ValueError(f"{flag} {os.fspath(path)}: the column {layout.roles['label']!r} is a label; reranking "
                         "rows are (query, positive(s), negatives or documents) without labels.")
    negatives = [column for role, column in layout.roles.items() if role.startswith("negative")]
    if (documents is not None) == bool(negatives):
        why = f"both a 'documents' column and negatives {negatives}" if negatives else "no negatives or documents"
        raise ValueError(f"{flag} {os.fspath(path)}: {why}; give each row either negatives (negative_1.. or a "
                         "negatives list) or the ranked 'documents' beside its query and positive(s).")
    rows = []
    for place, values in table_records(path):
        sample = {"query": values.get(layout.roles["anchor"]), "positive": values.get(layout.roles["positive"])}
        if documents is not None:
            sample["documents"] = values.get(documents)
        else:
            sample["negative"] = [text for column in negatives for text in
                                  _texts(values.get(column), f"{column!r} (a negative)", place, allow_text=True)]
        rows.append(sample_row(sample, always_rerank_positives, place))
    return rows


def sample_row(sample: Mapping[str, Any], always_rerank_positives: bool = True, place: str = "sample") -> RerankRow:
    """The :class:`RerankRow` of one sentence-transformers reranking sample: ``{"query", "positive"`` (a text or
    a list), and ``"negative"`` (a list) or ``"documents"`` (a ranked list)``}``; ``place`` names it in errors."""
    if not isinstance(sample, Mapping) or ("negative" in sample) == ("documents" in sample):
        raise ValueError(f"{place}: a reranking sample is {{'query', 'positive', and 'negative' or 'documents'}}, "
                         f"exactly one of the last two; got {sample!r:.80}.")
    query = sample.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"{place}: the query holds {query!r:.80}, not a non-blank text; fill it in or drop the row.")
    positives = _texts(sample.get("positive"), "the positive", place, allow_text=True)
    if "documents" in sample:
        return _documents_row(query, positives, _texts(sample["documents"], "'documents'", place),
                              always_rerank_positives, place)
    negatives = _texts(sample["negative"], "'negative'", place)
    return RerankRow(query, positives + negatives, set(range(len(positives))), None, place)


def _texts(value: Any, what: str, place: str, allow_text: bool = False) -> list[str]:
    """``value`` as a non-empty list of non-blank texts (a single text where ``allow_text``)."""
    items = [value] if allow_text and isinstance(value, str) else value
    ok = isinstance(items, list | tuple) and len(items) > 0
    if not ok or not all(isinstance(t, str) and t.strip() for t in items):
        kind = "a text or a list of texts" if allow_text else "a non-empty list of texts"
        raise ValueError(f"{place}: {what} holds {value!r:.80}, not {kind} (non-blank); fill it in or drop the row.")
    return list(items)


def _documents_row(query: str, positives: list[str], ranked: list[str], always_rerank_positives: bool,
                   place: str) -> RerankRow:
    """A row of ranked ``documents``, as sentence-transformers' evaluator reads one: the base order is the
    documents with the positives they lack appended (none when they hold no positive at all)."""
    found = [i for i, text in enumerate(ranked) if text in positives]
    base_order = ranked + ([p for p in positives if p not in ranked] if found else [])
    base = (base_order, {i for i, text in enumerate(base_order) if text in positives})
    if always_rerank_positives:
        candidates = positives + [text for text in ranked if text not in positives]
        return RerankRow(query, candidates, set(range(len(positives))), base, place)
    return RerankRow(query, ranked, set(found), base, place)


class RowsRerankEvaluator:
    """Reranking the candidates of each row (a path, read by :func:`rerank_rows`, or sentence-transformers'
    samples, read by :func:`sample_row`):
    ``mrr@k`` and ``ndcg@k`` for each of ``k_values`` and ``map``, as sentence-transformers'
    ``CrossEncoderRerankingEvaluator`` (``at_k``) computes them, with ``base_*`` for rows of ranked documents.
    Call it with a cross-encoder for the flat means; :meth:`report` for the report. ``flag``: the command's option
    that gave the file, named in its errors."""

    def __init__(self, rows: str | os.PathLike | Sequence[Mapping[str, Any]], *, k_values: Iterable[int] = (10,),
                 always_rerank_positives: bool = True, batch_size: int = 64, flag: str = "--rerank"):
        self.source = os.fspath(rows) if isinstance(rows, str | os.PathLike) else None
        self.rows = rerank_rows(rows, always_rerank_positives, flag) if self.source is not None else [
            sample_row(sample, always_rerank_positives, f"sample {i}") for i, sample in enumerate(rows)]
        if not self.rows:
            raise ValueError("reranking evaluation needs at least one row.")
        self.k_values = check_k_values(k_values, "--k")
        self.always_rerank_positives, self.batch_size = always_rerank_positives, batch_size

    def _means(self, rankings: Sequence[tuple[Sequence[int], set[int]] | None], prefix: str = "") -> dict[str, float]:
        """Mean mrr@k, ndcg@k and map of ``(candidate indices best first, relevant indices)`` per row."""
        full = max(len(row.documents) for row in self.rows)
        if any(row.base is not None for row in self.rows):
            full = max(full, max(len(row.base[0]) for row in self.rows if row.base is not None))
        k_values = check_k_values((*self.k_values, full))
        totals: dict[str, float] = {}
        for ranking in rankings:
            order, relevant = ranking or ((), set())
            values = query_metrics([_id(i) for i in order], {_id(i): 1 for i in relevant}, k_values)
            named = {**{f"{m}@{k}": values[f"{m}@{k}"] for m in ("mrr", "ndcg") for k in self.k_values},
                     "map": values[f"map@{full}"]}
            for name, value in named.items():
                totals[prefix + name] = totals.get(prefix + name, 0.0) + value
        return {name: total / len(self.rows) for name, total in sorted(totals.items())}

    def report(self, cross_encoder, batch_size: int | None = None) -> dict[str, Any]:
        """``{"rerank", "rows", "k", "always_rerank_positives", "pairs", "metrics": {name: mean}}``."""
        scoring = [i for i, row in enumerate(self.rows) if row.relevant]  # rows without a positive score 0
        scores = score_lists(cross_encoder, [(self.rows[i].query, self.rows[i].documents) for i in scoring],
                             batch_size or self.batch_size)
        rankings: list[tuple[list[int], set[int]] | None] = [None] * len(self.rows)
        for i, row_scores in zip(scoring, scores):
            order = rank({_id(j): s for j, s in enumerate(row_scores)})
            rankings[i] = ([int(doc) for doc in order], self.rows[i].relevant)
        metrics = self._means(rankings)
        if any(row.base is not None for row in self.rows):
            metrics.update(self._means([(range(len(row.base[0])), row.base[1]) if row.base and row.base[1] else None
                                        for row in self.rows], prefix="base_"))
        return {"rerank": self.source, "rows": len(self.rows), "k": list(self.k_values),
                "always_rerank_positives": self.always_rerank_positives,
                "pairs": sum(len(self.rows[i].documents) for i in scoring), "metrics": metrics}

    def __call__(self, cross_encoder) -> dict[str, float]:
        """The means, ``{"map": ..., "mrr@10": ..., "ndcg@10": ...}`` (and ``base_*``)."""
        return self.report(cross_encoder)["metrics"]


def _id(index: int) -> str:
    """A candidate's id: its index, zero-padded so that string order (trec_eval's tie order) is index order."""
    return f"{index:09d}"


def rows_report(cross_encoder, path: str | os.PathLike, **options: Any) -> dict[str, Any]:
    """:meth:`RowsRerankEvaluator.report` of ``cross_encoder`` on the rows file ``path``."""
    return RowsRerankEvaluator(path, **options).report(cross_encoder)
