"""SQuAD files: the examples of extractive QA and reading them (v1.1 / v2.0 JSON, HF's JSON Lines layout).

Gold answers are located in their context (:func:`locate_answer` repairs SQuAD's few misplaced
``answer_start`` values and whitespace differences, with one warning per file); a question with
``is_impossible`` (or, in JSON Lines, an empty ``answers``) is unanswerable, one with no answers at
all is unlabelled (a test set). Answers that contradict an explicit ``is_impossible`` (none but
``false``, some but ``true``) are read as unanswerable with one
:class:`~bertkit.tasks.readers.DataWarning` per file listing the question ids (an error under
:func:`~bertkit.tasks.readers.strict_data`); a file whose every question is ``false`` without answers
is unlabelled. :mod:`bertkit.tasks.question_answering` turns them into windows
and answers.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.tasks.readers import DataWarning, open_text, read_rows, table_format


# ---------------------------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class Answer:
    """A gold answer: its text as given (what scoring compares with) and where it is in the context.

    ``start`` / ``end`` are character offsets of the answer in the context (``end`` exclusive),
    None when the text could not be found there (then it is not used as a training label).
    """

    text: str
    start: int | None
    end: int | None


@dataclass
class QAExample:
    """One question about one context.

    ``answers``: the gold answers; ``[]`` for an unanswerable question (SQuAD v2), None when the
    data has no answers (a test set).
    """

    id: str
    question: str
    context: str
    answers: list[Answer] | None
    title: str = ""

    @property
    def is_impossible(self) -> bool:
        return self.answers is not None and not self.answers

    @property
    def label(self) -> list[str] | None:
        """The gold answer texts (``[]``: unanswerable), under the name :meth:`Task.has_labels` looks for."""
        return None if self.answers is None else [a.text for a in self.answers]


def read_squad(path: str | os.PathLike, encoding: str = "utf-8") -> list[QAExample]:
    """The questions of a SQuAD JSON or squad-layout JSON Lines file (text in ``encoding``), in file order (see
    the module docstring).

    ValueError, naming the file and the question, for invalid JSON, a missing key, a value of the
    wrong type, a duplicate id or a file without questions. Answers whose ``answer_start`` is off
    are repaired by :func:`locate_answer`; one warning per file counts them. Answers contradicting
    ``is_impossible`` give one :class:`~bertkit.tasks.readers.DataWarning` (see the module docstring).
    """
    with open_text(path, encoding) as f:
        text = f.read()
    squad = _squad_json(path, text)
    if squad is not None:
        records = _squad_records(path, squad)
    elif table_format(path) == "jsonl":
        records = ((f"{path}, line {row.line}", row.values) for row in read_rows(path, encoding=encoding))
    else:
        raise ValueError(f"{path} is neither SQuAD JSON (an object with 'data') nor JSON Lines; name a JSON Lines "
                         "file .jsonl.")
    repairs: dict[str, list[str]] = {"moved": [], "missing": [], "unmarked": [], "answered": []}
    examples = [_example(where, record, repairs, jsonl=squad is None) for where, record in records]
    if not examples:
        raise ValueError(f"{path} holds no questions.")
    _check_unique_ids(path, examples)
    _check_impossible(path, examples, repairs["unmarked"], repairs["answered"])
    if repairs["moved"] or repairs["missing"]:
        moved, missing = repairs["moved"], repairs["missing"]
        warnings.warn(f"{path}: {len(moved)} answers were not at their answer_start and were taken from the nearest "
                      f"match in the context (questions {moved[:5]}...); {len(missing)} answers are not in their "
                      f"context at all (questions {missing[:5]}...) and are not used as training labels (scoring "
                      "still counts them as gold).", stacklevel=2)
    return examples


def locate_answer(context: str, text: str, start: int) -> tuple[int, int] | None:
    """The character span ``(start, end)`` of answer ``text`` in ``context``, given its ``answer_start``.

    Surrounding whitespace of ``text`` is not part of the span. The text is taken at ``start``
    when it is there, else at its occurrence nearest to ``start``, else at the nearest stretch that
    differs from it only in whitespace (SQuAD has a few of each). None if it is not in the context.
    """
    core = text.strip()
    if not core:
        return None
    start += len(text) - len(text.lstrip())
    if context.startswith(core, start):
        return start, start + len(core)
    for pattern in (re.escape(core), r"\s+".join(map(re.escape, core.split()))):
        matches = [m.span() for m in re.finditer(pattern, context)]
        if matches:
            return min(matches, key=lambda span: abs(span[0] - start))
    return None


def _squad_json(path, text: str) -> Mapping | None:
    """The parsed file if it is SQuAD's nested layout, else None (JSON Lines)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":  # a second object: JSON Lines
            return None
        raise ValueError(f"{path}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
                         ) from None
    if not isinstance(data, Mapping) or "data" not in data:
        return None
    if not isinstance(data["data"], list):
        raise ValueError(f"{path}: 'data' must be a list of articles, got {type(data['data']).__name__}.")
    return data


def _squad_records(path, squad: Mapping) -> Iterator[tuple[str, Any]]:
    """``(where, flat record)`` per question of SQuAD's nested layout, the context copied into each record."""
    for a, article in enumerate(squad["data"]):
        place = f"{path}: article {a}"
        paragraphs = _field(place, article, "paragraphs", list)
        for p, paragraph in enumerate(paragraphs):
            context = _field(f"{place}, paragraph {p}", paragraph, "context", str)
            for q, qa in enumerate(_field(f"{place}, paragraph {p}", paragraph, "qas", list)):
                if not isinstance(qa, Mapping) or "id" not in qa:
                    yield f"{place}, paragraph {p}, question {q}", qa
                else:
                    yield f"{path}: question id {qa['id']!r}", {**qa, "context": context,
                                                                 "title": article.get("title") or ""}


def _example(where: str, record: Any, repairs: dict[str, list[str]], *, jsonl: bool) -> QAExample:
    """One question from a flat record; ``repairs`` collects the ids of answers moved or not found."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected a JSON object for a question, got {type(record).__name__}.")
    qid = str(_field(where, record, "id", (str, int)))
    if jsonl:
        where = f"{where} (question id {qid!r})"
    question, context = _field(where, record, "question", str), _field(where, record, "context", str)
    impossible = record.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise ValueError(f"{where}: 'is_impossible' must be true or false, got {impossible!r}.")
    pairs = _answer_pairs(where, record.get("answers"))
    unmarked = pairs == [] and record.get("is_impossible") is False
    if unmarked or (impossible and pairs):
        repairs["unmarked" if unmarked else "answered"].append(qid)
    if impossible or unmarked or (jsonl and pairs == []):
        answers = []  # SQuAD v2 marks it; HF's squad_v2 layout gives empty answer lists
    elif not pairs:
        answers = None  # no gold: a test set
    else:
        answers = []
        for text, start in pairs:
            span = locate_answer(context, text, start)
            given = start + len(text) - len(text.lstrip())
            if span is None:
                repairs["missing"].append(qid)
            elif span != (given, given + len(text.strip())):
                repairs["moved"].append(qid)
            answers.append(Answer(text, *(span or (None, None))))
    return QAExample(qid, question, context, answers, str(record.get("title") or ""))


def _check_impossible(path, examples: Sequence[QAExample], unmarked: list[str], answered: list[str]) -> None:
    """One DataWarning for the questions whose answers contradict ``is_impossible`` (read as unanswerable):
    ``unmarked`` have none but ``false``, ``answered`` some but ``true``. A file whose every question is
    ``unmarked`` is a test set written with empty answers: its questions become unlabelled, unwarned."""
    if len(unmarked) == len(examples):
        for example in examples:
            example.answers = None
        return
    problems = []
    if unmarked:
        problems.append(f"{len(unmarked)} question(s) have no answers but \"is_impossible\": false (ids "
                        f"{_some(unmarked)}): give their answers, or mark them true")
    if answered:
        problems.append(f"{len(answered)} question(s) have answers but \"is_impossible\": true (ids "
                        f"{_some(answered)}): set it false, or move the answers to \"plausible_answers\" as SQuAD "
                        "v2 does")
    if problems:
        warnings.warn(f"{path}: {'; '.join(problems)}. They are read as unanswerable.", DataWarning, stacklevel=3)


def _some(ids: Sequence[str], shown: int = 10) -> str:
    """The first ``shown`` ids, and how many more."""
    return ", ".join(map(repr, ids[:shown])) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _answer_pairs(where: str, answers: Any) -> list[tuple[str, int]] | None:
    """``[(text, answer_start), ...]`` from SQuAD's list of objects or HF's object of lists; None if absent."""
    if answers is None:
        return None
    if isinstance(answers, Mapping):  # HF: {"text": [...], "answer_start": [...]}
        texts, starts = _field(where, answers, "text", list), _field(where, answers, "answer_start", list)
        if len(texts) != len(starts):
            raise ValueError(f"{where}: 'answers' has {len(texts)} texts but {len(starts)} answer_start values.")
        pairs = list(zip(texts, starts))
    elif isinstance(answers, list):
        pairs = [(_field(where, a, "text", str), _field(where, a, "answer_start", int)) for a in answers]
    else:
        raise ValueError(f"{where}: 'answers' must be a list of {{'text', 'answer_start'}} objects or "
                         f"{{'text': [...], 'answer_start': [...]}}, got {type(answers).__name__}.")
    for text, start in pairs:
        if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"{where}: an answer needs a text (a string) and an answer_start (an int >= 0), got "
                             f"text={text!r:.60}, answer_start={start!r}.")
    return pairs


def _field(where: str, record: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    """``record[key]``, checked to be a ``kind``; ValueError naming ``where`` otherwise."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected a JSON object with {key!r}, got {type(record).__name__}.")
    if key not in record:
        raise ValueError(f"{where}: missing key {key!r} (it has {sorted(record)}).")
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"{where}: {key!r} must be {names}, got {type(value).__name__} {value!r:.60}.")
    return value


def _check_unique_ids(path, examples: Sequence[QAExample]) -> None:
    seen: set[str] = set()
    for example in examples:
        if example.id in seen:
            raise ValueError(f"{path}: question id {example.id!r} appears more than once; ids must be unique "
                             "(predictions are keyed by id).")
        seen.add(example.id)
