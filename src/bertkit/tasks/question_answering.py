"""Extractive question answering (``bertkit finetune qa``): SQuAD v1.1 and v2.0.

Data: SQuAD's JSON (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``) or
HF datasets' squad layout as JSON Lines (``{"id", "question", "context", "answers": {"text":
[...], "answer_start": [...]}}`` per line), read by :mod:`bertkit.tasks.squad`.

Features are Google's / HF's windows: ``[CLS] question [SEP] context window [SEP]`` with the
question cut to ``max_query_length`` tokens and the context in windows of ``max_seq_length``
tokens that overlap by ``doc_stride`` tokens (HF's meaning of the stride). A token seen in
several windows belongs, for answer starts, to the window where it has the most context on
both sides (Google's ``_check_is_max_context``). Training labels are the token positions of the
first gold answer in the windows that hold all of it, and ``[CLS]`` (0) elsewhere and for
unanswerable questions.

One span decoder (:func:`~bertkit.modeling.spans.nbest_spans`, which lives in modeling so the head's own
``answer()`` uses it too; :func:`decode_example`) serves fine-tuning, ``evaluate`` / ``predict``, the QA
pipeline and the server: it finds the exact ``n_best_size`` best valid spans (Google and HF only pair the
``n_best_size`` best starts with the ``n_best_size`` best ends, which can miss
the best valid span). With unanswerable questions (v2) an example's null score is the lowest
``start[0] + end[0]`` over its windows, and the answer is ``""`` when ``null_score - best span
score`` exceeds ``null_score_diff_threshold``; :meth:`QuestionAnswering.calibrate` picks that
threshold on validation data, and :meth:`QuestionAnswering.apply_threshold` re-decides saved
predictions without the model.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.checks import check_int
from bertkit.io import atomic_write_text
from bertkit.modeling.heads import BERTForQuestionAnswering
from bertkit.modeling.spans import Span, nbest_spans  # noqa: F401 (Span's public place before it moved)
from bertkit.tasks import metrics
from bertkit.tasks.base import IGNORE_INDEX, Task, softmax
from bertkit.tasks.squad import QAExample, read_squad

#: command-line flags of the options, for error messages
#: ``null_score_diff`` when the context offers no span: the largest float (``inf`` has no JSON spelling)
NO_SPAN = sys.float_info.max
FLAGS = {"doc_stride": "--doc-stride", "max_query_length": "--max-query-length", "n_best_size": "--n-best-size",
         "max_answer_length": "--max-answer-length", "max_seq_length": "--max-seq-length"}


# ---------------------------------------------------------------------------------------------- windows
def window_spans(n_tokens: int, room: int, stride: int) -> list[tuple[int, int]]:
    """``[(first, end), ...]`` token ranges of a context of ``n_tokens`` tokens cut into windows of ``room``
    tokens overlapping by ``stride`` (< ``room``); one empty window for an empty context."""
    spans, first = [], 0
    while True:
        end = min(first + room, n_tokens)
        spans.append((first, end))
        if end == n_tokens:
            return spans
        first += room - stride


def max_context_window(spans: Sequence[tuple[int, int]], n_tokens: int) -> np.ndarray:
    """``[n_tokens]``: the window in which each context token has the most context (Google's rule:
    ``min(tokens left, tokens right) + 0.01 * window length``, the first window on ties)."""
    best = np.full(n_tokens, -1.0)
    owner = np.zeros(n_tokens, dtype=np.int64)
    for k, (first, end) in enumerate(spans):
        position = np.arange(first, end)
        score = np.minimum(position - first, end - 1 - position) + 0.01 * (end - first)
        better = score > best[first:end]
        best[first:end] = np.where(better, score, best[first:end])
        owner[first:end] = np.where(better, k, owner[first:end])
    return owner


def answer_token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """The first and last (inclusive) of the tokens (character ``offsets``, in order) that overlap
    characters ``[start, end)``; None when no token does (e.g. only removed characters)."""
    first = next((i for i, (_, token_end) in enumerate(offsets) if token_end > start), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end), None)
    if first is None or last is None or first > last:
        return None
    return first, last


# ---------------------------------------------------------------------------------------------- decoding
def decode_example(context: str, start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                   offsets: Sequence[Sequence[tuple[int, int] | None]],
                   max_context: Sequence[Sequence[bool]] | None = None, *, n_best_size: int = 20,
                   max_answer_length: int = 30, version_2_with_negative: bool = False,
                   null_score_diff_threshold: float = 0.0) -> dict[str, Any]:
    """One example's prediction from its windows' logits (arguments as :func:`nbest_spans`).

    Returns ``{"label", "answer", "start", "end", "score", ["null_score_diff",] "nbest"}``:
    ``answer`` (= ``label``) is the text of the best span, or ``""``; ``start`` / ``end`` its
    characters in ``context`` (None for ``""``); ``score`` its start + end logit (for ``""`` in
    v2 the null score, with no span at all in v1 None). ``nbest`` lists the best spans as
    ``{"text", "probability", "start_logit", "end_logit", "start", "end"}``, best first, with a
    softmax over their scores; in v2 it also holds the null answer (text ``""``, start/end None,
    the logits at ``[CLS]`` of the window with the lowest null score), and ``null_score_diff`` is
    ``null score - best span score`` (:data:`NO_SPAN`, the largest float, when the context offers no span:
    above any threshold, and valid JSON where ``inf`` is not): the answer is ``""`` when it exceeds
    ``null_score_diff_threshold``.
    """
    spans = nbest_spans(start_logits, end_logits, offsets, max_context, n_best_size=n_best_size,
                        max_answer_length=max_answer_length)
    entries = [{"text": context[s.start:s.end], "start_logit": s.start_logit, "end_logit": s.end_logit,
                "start": s.start, "end": s.end} for s in spans]
    prediction: dict[str, Any] = {}
    if version_2_with_negative:
        k = min(range(len(start_logits)), key=lambda i: float(start_logits[i][0]) + float(end_logits[i][0]))
        null = {"text": "", "start_logit": float(start_logits[k][0]), "end_logit": float(end_logits[k][0]),
                "start": None, "end": None}
        prediction["null_score_diff"] = _score(null) - spans[0].score if spans else NO_SPAN
        entries = sorted([*entries, null], key=_score, reverse=True)
    if entries:
        probabilities = softmax(np.array([_score(e) for e in entries]))
        entries = [{"text": e["text"], "probability": float(p), **{k: v for k, v in e.items() if k != "text"}}
                   for e, p in zip(entries, probabilities)]
    prediction["nbest"] = entries
    return decide(prediction, null_score_diff_threshold)


def decide(prediction: Mapping[str, Any], null_score_diff_threshold: float = 0.0) -> dict[str, Any]:
    """``prediction`` with ``label`` / ``answer`` / ``start`` / ``end`` / ``score`` chosen from its ``nbest``:
    ``""`` when it has a ``null_score_diff`` above ``null_score_diff_threshold`` (or no span at
    all), else the best span. Needs no model: it re-decides saved predictions for a new threshold."""
    nbest = prediction["nbest"]
    spans = [e for e in nbest if e["start"] is not None]
    null = next((e for e in nbest if e["start"] is None), None)
    diff = prediction.get("null_score_diff")
    if spans and (diff is None or diff <= null_score_diff_threshold):
        best = spans[0]
        chosen = {"label": best["text"], "answer": best["text"], "start": best["start"], "end": best["end"],
                  "score": _score(best)}
    else:
        chosen = {"label": "", "answer": "", "start": None, "end": None,
                  "score": _score(null) if null is not None else None}
    head = {"id": prediction["id"]} if "id" in prediction else {}
    return {**head, **chosen, **{k: v for k, v in prediction.items() if k not in chosen and k != "id"}}


def best_span_text(prediction: Mapping[str, Any]) -> str:
    """The text of the best span of a prediction, whatever the null threshold says ("" if it has none)."""
    return next((e["text"] for e in prediction["nbest"] if e["start"] is not None), "")


def _score(entry: Mapping[str, Any]) -> float:
    return entry["start_logit"] + entry["end_logit"]


# ---------------------------------------------------------------------------------------------- the task
class QuestionAnswering(Task):
    """Extractive QA (``bertkit finetune qa``); see the module docstring.

    Options: ``doc_stride`` (tokens consecutive context windows share), ``max_query_length``
    (question tokens kept), ``n_best_size`` (spans in each prediction's n-best list),
    ``max_answer_length`` (tokens), ``null_score_diff_threshold`` (v2: answer ``""`` above it; None:
    tuned on the validation set),
    ``version_2_with_negative`` (None: v2 when the training data has an unanswerable question),
    ``encoding`` (of the data files). Each is checked here; a bad value is a ValueError naming the option and its flag.
    """

    name = "qa"
    model_class = BERTForQuestionAnswering
    primary_metric = "f1"
    sequence_outputs = True

    def __init__(self, *, doc_stride: int = 128, max_query_length: int = 64, n_best_size: int = 20,
                 max_answer_length: int = 30, null_score_diff_threshold: float | None = None,
                 version_2_with_negative: bool | None = None, encoding: str = "utf-8"):
        super().__init__()
        self.encoding = encoding  # of the data files
        self.doc_stride = _check_int("doc_stride", doc_stride, 0)
        self.max_query_length = _check_int("max_query_length", max_query_length, 1)
        self.n_best_size = _check_int("n_best_size", n_best_size, 1)
        self.max_answer_length = _check_int("max_answer_length", max_answer_length, 1)
        #: None: tuned on the validation set by :meth:`calibrate` (0.0 until then); a number: kept as given
        self.tune_null_threshold = null_score_diff_threshold is None
        threshold = 0.0 if null_score_diff_threshold is None else null_score_diff_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
            raise ValueError(f"null_score_diff_threshold must be a finite number, got {threshold!r}.")
        self.null_score_diff_threshold = float(threshold)
        if version_2_with_negative not in (None, True, False):
            raise ValueError("version_2_with_negative must be true, false or null (inferred from the data), got "
                             f"{version_2_with_negative!r}.")
        self.version_2_with_negative = version_2_with_negative

    def options(self) -> dict[str, Any]:
        return {"doc_stride": self.doc_stride, "max_query_length": self.max_query_length,
                "n_best_size": self.n_best_size, "max_answer_length": self.max_answer_length,
                "null_score_diff_threshold": self.null_score_diff_threshold,
                "version_2_with_negative": self.version_2_with_negative,
                **({"encoding": self.encoding} if self.encoding != "utf-8" else {})}  # older runs still resume

    label_hint = "\"answers\", or \"is_impossible\": true"

    @staticmethod
    def locate(path: Any, example: QAExample) -> str:
        return f"{path}: question id {example.id!r}"

    def read(self, path: str | os.PathLike) -> list[QAExample]:
        return read_squad(path, self.encoding)

    def fit(self, examples: Sequence[QAExample]) -> None:
        """Settle ``version_2_with_negative`` (when None) from the training data: any unanswerable question."""
        if self.version_2_with_negative is None:
            self.version_2_with_negative = any(e.is_impossible for e in examples)

    def is_version_2(self, examples: Sequence[QAExample]) -> bool:
        """``version_2_with_negative``, or (not settled yet) whether ``examples`` have an unanswerable question."""
        if self.version_2_with_negative is not None:
            return self.version_2_with_negative
        return any(e.is_impossible for e in examples)

    # ------------------------------------------------------------------ features
    def featurize(self, examples: Sequence[QAExample], tokenizer: Any, max_seq_length: int) -> list[dict[str, Any]]:
        """One feature per context window (see the module docstring); beyond :class:`Task`'s keys each has
        ``offsets`` (the context characters of each token, None for question and special tokens)
        and ``token_is_max_context`` (per token), and, for examples with gold,
        ``start_positions`` / ``end_positions`` (0 where the window lacks the answer, -100 when the
        answer was not found in the context).

        ValueError when ``max_seq_length`` leaves no more than ``doc_stride`` context tokens per
        window after the special tokens and the longest question (cut to ``max_query_length`` tokens).
        """
        self.prepare(tokenizer)
        specials = tokenizer.pair_layout().specials  # BERT: [CLS] q [SEP] c [SEP]; RoBERTa: <s> q </s></s> c </s>
        _check_int("max_seq_length", max_seq_length, specials + 1)
        if not examples:
            return []
        questions = [q[:self.max_query_length] for q in
                     tokenizer([e.question for e in examples], add_special_tokens=False)["input_ids"]]
        self._check_room(max_seq_length, max(map(len, questions)), specials)
        contexts = list(dict.fromkeys(e.context for e in examples))  # SQuAD asks several questions per context
        encoded = tokenizer(contexts, add_special_tokens=False, return_offsets_mapping=True)
        tokens = dict(zip(contexts, zip(encoded["input_ids"], encoded["offset_mapping"])))
        features = []
        for i, (example, question) in enumerate(zip(examples, questions)):
            ids, offsets = tokens[example.context]
            features += self._windows(i, example, question, ids, offsets,
                                      max_seq_length - specials - len(question), tokenizer)
        return features

    def _check_room(self, max_seq_length: int, longest_question: int, specials: int) -> None:
        """ValueError when the longest (cut) question leaves windows no more than ``doc_stride`` context tokens."""
        room = max_seq_length - specials - longest_question
        if room <= self.doc_stride:
            raise ValueError(f"max_seq_length={max_seq_length} (--max-seq-length) - {specials} special tokens - "
                             f"{longest_question} tokens of the longest question (at most max_query_length="
                             f"{self.max_query_length}, --max-query-length) leaves {room} context tokens per window, "
                             f"which must be more than doc_stride={self.doc_stride} (--doc-stride), the tokens "
                             "consecutive windows share. Use a larger --max-seq-length, a smaller --doc-stride or a "
                             "smaller --max-query-length.")

    def _windows(self, index: int, example: QAExample, question: list[int], ids: list[int],
                 offsets: list[tuple[int, int]], room: int, tokenizer: Any) -> list[dict[str, Any]]:
        spans = window_spans(len(ids), room, self.doc_stride)
        owner = max_context_window(spans, len(ids))
        layout = tokenizer.pair_layout()
        prefix, suffix = len(layout.before) + len(question) + len(layout.between), len(layout.after)
        answer = self._answer_tokens(example, offsets)
        features = []
        for k, (first, end) in enumerate(spans):
            input_ids, token_type_ids = layout.join(question, ids[first:end])
            feature = {
                "example": index,
                "input_ids": input_ids,
                "token_type_ids": token_type_ids,
                "offsets": [None] * prefix + list(offsets[first:end]) + [None] * suffix,
                "token_is_max_context": [False] * prefix + (owner[first:end] == k).tolist() + [False] * suffix,
            }
            if example.answers is not None:
                if answer is None:
                    position = (IGNORE_INDEX, IGNORE_INDEX)
                elif answer == "impossible" or not first <= answer[0] <= answer[1] < end:
                    position = (0, 0)  # the first token ([CLS], <s>)
                else:
                    position = (prefix + answer[0] - first, prefix + answer[1] - first)
                feature["start_positions"], feature["end_positions"] = position
            features.append(feature)
        return features

    @staticmethod
    def _answer_tokens(example: QAExample, offsets: list[tuple[int, int]]) -> tuple[int, int] | str | None:
        """The context tokens of the first locatable gold answer, "impossible", or None (no usable answer)."""
        if example.is_impossible:
            return "impossible"
        for answer in example.answers or []:
            if answer.start is not None:
                tokens = answer_token_span(offsets, answer.start, answer.end)
                if tokens is not None:
                    return tokens
        return None

    # ------------------------------------------------------------------ predictions
    def decode(self, examples: Sequence[QAExample], features: Sequence[dict[str, Any]],
               outputs: Sequence[Any]) -> list[dict[str, Any]]:
        """One prediction per example: ``{"id", **decode_example(...)}`` (see :func:`decode_example`)."""
        if len(features) != len(outputs):
            raise ValueError(f"{len(features)} features but {len(outputs)} outputs; pass one output per feature.")
        windows: dict[int, list[int]] = {}
        for j, feature in enumerate(features):
            windows.setdefault(feature["example"], []).append(j)
        version_2 = self.is_version_2(examples)
        predictions = []
        for i, example in enumerate(examples):
            rows = windows.get(i)
            if not rows:
                raise ValueError(f"question {example.id!r} (example {i}) has no features; decode the features "
                                 "featurize made for these examples.")
            prediction = decode_example(
                example.context, [outputs[j][0] for j in rows], [outputs[j][1] for j in rows],
                [features[j]["offsets"] for j in rows], [features[j]["token_is_max_context"] for j in rows],
                n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
                version_2_with_negative=version_2, null_score_diff_threshold=self.null_score_diff_threshold)
            predictions.append({"id": example.id, **prediction})
        return predictions

    def apply_threshold(self, predictions: Sequence[Mapping[str, Any]],
                        null_score_diff_threshold: float | None = None) -> list[dict[str, Any]]:
        """The predictions decided again for ``null_score_diff_threshold`` (default: the task's), without the model."""
        threshold = self.null_score_diff_threshold if null_score_diff_threshold is None else null_score_diff_threshold
        return [decide(p, threshold) for p in predictions]

    def calibrate(self, examples: Sequence[QAExample], predictions: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """v2: set ``null_score_diff_threshold`` to the one that maximises F1 on these labelled examples
        (the official ``find_best_thresh``) and return ``{"null_score_diff_threshold", "best_f1"}``.
        v1, examples without gold, or a threshold the user fixed: ``{}`` and nothing changes."""
        if not self.tune_null_threshold or not self.is_version_2(examples) or not self.has_labels(examples):
            return {}
        _check_ids(examples, predictions)
        threshold, best = metrics.best_null_threshold(
            {p["id"]: p["null_score_diff"] for p in predictions}, {p["id"]: best_span_text(p) for p in predictions},
            {e.id: e.label for e in examples}, metric="f1")
        self.null_score_diff_threshold = float(threshold)
        return {"null_score_diff_threshold": float(threshold), "best_f1": float(best)}

    def score(self, examples: Sequence[QAExample], predictions: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """SQuAD's exact match and F1 (percent) of the predicted answers, over the examples with gold."""
        _check_ids(examples, predictions)
        labelled = [(e, p) for e, p in zip(examples, predictions) if e.label is not None]
        return metrics.squad_scores({p["id"]: p["answer"] for _, p in labelled}, {e.id: e.label for e, _ in labelled})

    def write_extra(self, split: str, examples: Sequence[QAExample], predictions: Sequence[Mapping[str, Any]],
                    directory: str | os.PathLike) -> list[Path]:
        """The official files: ``predictions_<split>.json`` (id -> answer), ``nbest_predictions_<split>.json``
        (id -> n-best list) and, in v2, ``null_odds_<split>.json`` (id -> null_score_diff)."""
        files = {f"predictions_{split}.json": {p["id"]: p["answer"] for p in predictions},
                 f"nbest_predictions_{split}.json": {p["id"]: p["nbest"] for p in predictions}}
        if any("null_score_diff" in p for p in predictions):
            files[f"null_odds_{split}.json"] = {p["id"]: p["null_score_diff"] for p in predictions}
        paths = []
        for name, content in files.items():
            paths.append(Path(directory) / name)
            atomic_write_text(paths[-1], json.dumps(content, ensure_ascii=False, indent=2) + "\n")
        return paths


def _check_ids(examples: Sequence[QAExample], predictions: Sequence[Mapping[str, Any]]) -> None:
    if len(examples) != len(predictions) or any(e.id != p["id"] for e, p in zip(examples, predictions)):
        raise ValueError(f"{len(predictions)} predictions for {len(examples)} questions, not one per question in "
                         "order; pass the predictions decode made for these examples.")


def _check_int(name: str, value: Any, minimum: int) -> int:
    return check_int(f"{name} ({FLAGS[name]})" if name in FLAGS else name, value, minimum)
