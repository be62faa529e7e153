"""Reading a retrieval benchmark in the BEIR layout: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{split}.tsv``.

``corpus.jsonl`` holds one ``{"_id", "title", "text"}`` object per line, ``queries.jsonl`` one ``{"_id", "text"}``,
and ``qrels/test.tsv`` (or ``dev.tsv``, ``train.tsv``: the split) the judgements, ``query-id corpus-id score``
after a header row. A document's text is BEIR's: ``(title + " " + text).strip()``, the text alone without a title.
Every error is one line naming the file (and line) and what to fix.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.sniff import format_error, sniff_format
from bertkit.tasks.readers import open_text, where

#: how many unknown ids an error names before giving only their count
NAMED = 3


@dataclass
class BeirData:
    """A BEIR split: ``corpus`` (doc id -> text, title joined), ``queries`` (query id -> text: only the queries
    the split judges, as BEIR keeps them) and ``qrels`` (query id -> {doc id: relevance})."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(directory: str | os.PathLike, split: str = "test") -> BeirData:
    """The ``split`` of the BEIR directory ``directory``; ``ValueError`` for a missing file, a line that is not
    a JSON object with ``_id`` and ``text``, a repeated id, an empty corpus, a qrels row that is malformed or
    names an unknown query or document id, and a split without judgements; a warning when judged queries have no
    relevant document (every metric of theirs is 0)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"--beir {directory}: not a directory; a BEIR directory holds corpus.jsonl, queries.jsonl "
                         "and qrels/test.tsv.")
    paths = [directory / "corpus.jsonl", directory / "queries.jsonl", directory / "qrels" / f"{split}.tsv"]
    for path in paths:
        if not path.is_file():
            raise ValueError(f"{path}: no such file; a BEIR directory holds corpus.jsonl, queries.jsonl and "
                             f"qrels/{split}.tsv (split {split!r}).")
    corpus = {doc: _document_text(path, line, record) for path, line, doc, record in _records(paths[0])}
    if not corpus:
        raise ValueError(f"{paths[0]}: no documents; the corpus needs at least one line.")
    queries = {query: record["text"] for _, _, query, record in _records(paths[1])}
    qrels = read_qrels(paths[2])
    _check_known(paths[2], qrels, queries, corpus)
    _warn_if_nothing_relevant(paths[2], qrels)
    return BeirData(corpus=corpus, queries={q: queries[q] for q in qrels}, qrels=qrels)


def _records(path: Path) -> Iterator[tuple[Path, int, str, dict]]:
    """``(path, line, id, object)`` per non-blank line of a BEIR .jsonl file, each checked."""
    found = sniff_format(path)
    if found != "jsonl":
        raise format_error(path, found, f"BEIR's {path.name} holds JSON lines",
                           'write one {"_id": ..., "text": ...} object per line')
    seen: dict[str, int] = {}
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where(path, number)}: not valid JSON ({error.msg}); each line holds one JSON "
                                 "object.") from None
            if not isinstance(record, dict) or not isinstance(record.get("_id"), (str, int)):
                raise ValueError(f"{where(path, number)}: expected a JSON object with an \"_id\" (and \"text\"), got "
                                 f"{line.strip()[:80]!r}.")
            if not isinstance(record.get("text"), str):
                raise ValueError(f"{where(path, number)}: \"text\" must be a string, got {record.get('text')!r:.80}.")
            key = str(record["_id"])
            if key in seen:
                raise ValueError(f"{where(path, number)}: _id {key!r} again (first on line {seen[key]}); ids must be "
                                 "unique.")
            seen[key] = number
            yield path, number, key, record


def _document_text(path: Path, number: int, record: dict) -> str:
    title = record.get("title") or ""
    if not isinstance(title, str):
        raise ValueError(f"{where(path, number)}: \"title\" must be a string, got {title!r:.80}.")
    return (title + " " + record["text"]).strip()


def read_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``{query id: {doc id: relevance}}`` of a BEIR qrels .tsv (``query-id corpus-id score``, tab-separated, or
    comma-separated where the content is; the first row is skipped when it is a header). A row without three
    fields or with a score that is not an integer raises."""
    found = sniff_format(path)
    if found not in ("tsv", "csv", "text"):
        raise format_error(path, found, "qrels are a table of query-id, corpus-id and score",
                           "write one 'query-id<TAB>corpus-id<TAB>score' row per judged document")
    delimiter, said = (",", "comma") if found == "csv" else ("\t", "tab")
    qrels: dict[str, dict[str, int]] = {}
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split(delimiter)
            if len(fields) != 3:
                raise ValueError(f"{where(path, number)}: expected 3 {said}-separated fields (query-id corpus-id "
                                 f"score), got {len(fields)}: {line.strip()[:80]!r}.")
            try:
                score = int(fields[2])
            except ValueError:
                if number == 1:  # the header row
                    continue
                raise ValueError(f"{where(path, number)}: the score {fields[2]!r} is not an integer (a graded "
                                 "relevance: 0 non-relevant, 1, 2, ...).") from None
            qrels.setdefault(fields[0], {})[fields[1]] = score
    if not qrels:
        raise ValueError(f"{path}: no judgements; write one 'query-id<TAB>corpus-id<TAB>score' row per judged "
                         "document after the header.")
    return qrels


def _warn_if_nothing_relevant(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    """A warning when judged queries have no relevant document (every score <= 0): each of them scores 0 on every
    metric, so qrels that mark nothing relevant give all-zero metrics, however good the ranking."""
    empty = [q for q, judged in qrels.items() if not any(score > 0 for score in judged.values())]
    if len(empty) == len(qrels):
        warnings.warn(f"{path}: no judgement marks a document relevant (every score is 0 or less), so every metric "
                      "will be 0 whatever the ranking; relevant documents need a score of 1 or more.", stacklevel=3)
    elif empty:
        named = ", ".join(repr(q) for q in empty[:NAMED]) + (", ..." if len(empty) > NAMED else "")
        warnings.warn(f"{path}: {len(empty)} of {len(qrels)} judged queries have no relevant document (every score "
                      f"0 or less: {named}); they score 0 on every metric and pull the means down.", stacklevel=3)


def _check_known(path: Path, qrels: dict[str, dict[str, int]], queries: dict, corpus: dict) -> None:
    unknown_queries = [q for q in qrels if q not in queries]
    unknown_docs = list(dict.fromkeys(d for judged in qrels.values() for d in judged if d not in corpus))
    for ids, what, file in ((unknown_queries, "query ids", "queries.jsonl"), (unknown_docs, "corpus ids",
                                                                               "corpus.jsonl")):
        if ids:
            named = ", ".join(repr(i) for i in ids[:NAMED]) + (", ..." if len(ids) > NAMED else "")
            raise ValueError(f"{path}: {len(ids)} {what} not in {file} ({named}); the qrels must judge ids the "
                             f"directory holds.")
