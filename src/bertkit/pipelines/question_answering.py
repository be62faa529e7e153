"""``question-answering``: spans of a context that answer a question, for contexts of any length.

Input: ``{"question": ..., "context": ...}`` (answer bare), a list of them (a list back) or any iterable
(answers streamed back in order); ``pipe(question=..., context=...)`` works too, with two strings or two
lists of the same length. An empty question or context (no tokens) is a ValueError naming it.

Windows. The question is cut to ``max_question_len`` tokens; the context is cut into windows
``[CLS] question [SEP] context tokens [SEP]`` of at most ``max_seq_len`` tokens (capped to the model's
positions) that overlap by ``doc_stride`` context tokens (the tokenizer's ``stride`` with
``truncation="only_second"``: :meth:`bertkit.tasks.question_answering.QuestionAnswering.featurize` builds
them). ``doc_stride`` must be smaller than a window's context room, ``max_seq_len - 3 - question tokens``;
by default it is 128, or half that room when the room is smaller (a model with few positions).

Scoring, bertkit's definition. In each window, ``p_start`` and ``p_end`` are softmaxes of the start and end
logits over the window's context tokens plus ``[CLS]`` (question tokens, separators and padding excluded).
A span is a pair ``(s, e)`` of context tokens of one window with ``s <= e`` and ``e - s + 1 <=
max_answer_len``; its score is ``p_start[s] * p_end[e]`` and its answer the context's characters from the
start of token ``s`` to the end of token ``e`` (the tokenizer's offsets). The spans of all windows compete;
a character span found in several windows counts once, with its best score; ties go to the earlier window,
start and end. With ``handle_impossible_answer`` a "no answer" candidate competes too: its score is the
lowest ``p_start[CLS] * p_end[CLS]`` over the windows, it loses ties with spans, and it is answered as
``{"score", "start": 0, "end": 0, "answer": ""}``. The search is exact and vectorised
(:func:`bertkit.tasks.question_answering.nbest_spans` on log-probabilities, whose sum is the log of the
product).

Output, as HF's pipeline: ``top_k=1`` gives ``{"score": float, "start": int, "end": int, "answer": str}``
with ``answer == context[start:end]``; a larger ``top_k`` a list of such dicts best first (fewer when the
context has fewer spans).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.checks import check_int
from bertkit.modeling.heads import BERTForQuestionAnswering
from bertkit.pipelines.base import Pipeline
from bertkit.tasks.question_answering import QuestionAnswering, nbest_spans
from bertkit.tasks.squad import QAExample

#: the default overlap of two windows, in context tokens
DEFAULT_STRIDE = 128


class QuestionAnsweringPipeline(Pipeline):
    task = "question-answering"
    model_class = BERTForQuestionAnswering
    input_description = "a {\"question\", \"context\"} dict"
    defaults: ClassVar[dict[str, Any]] = {"top_k": 1, "doc_stride": None, "max_answer_len": 15, "max_seq_len": 384,
                                          "max_question_len": 64, "handle_impossible_answer": False}
    token_level = True

    def __call__(self, inputs: Any = None, *, question: str | list[str] | None = None,
                 context: str | list[str] | None = None, **params: Any) -> Any:
        """Answers for ``inputs`` (see the module docstring), or for ``question=`` and ``context=``."""
        if question is not None or context is not None:
            if inputs is not None:
                raise ValueError("pass the inputs or question= and context=, not both.")
            inputs = _from_keywords(question, context)
        if inputs is None:
            raise ValueError('question-answering needs {"question": ..., "context": ...} inputs (one, a list or an '
                             "iterable), or question=... and context=....")
        return super().__call__(inputs, **params)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        """Each parameter on its own; ``doc_stride`` against a window's room is checked per question
        (the room depends on the question's length and on the model's positions)."""
        params = super().check(params)
        for name in ("top_k", "max_answer_len", "max_seq_len", "max_question_len"):
            check_int(name, params[name])
        if params["doc_stride"] is not None:
            check_int("doc_stride", params["doc_stride"], 0)
        if not isinstance(params["handle_impossible_answer"], bool):
            raise ValueError(f"handle_impossible_answer must be True or False, got "
                             f"{params['handle_impossible_answer']!r}.")
        return params

    def is_single(self, inputs: Any) -> bool:
        return isinstance(inputs, Mapping)

    def preprocess(self, item: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """One feature per window: the model inputs and ``offsets`` (each token's characters in the context,
        None for ``[CLS]``, the question and the separators)."""
        question, context = _fields(item)
        asked = len(self.tokenizer(question, add_special_tokens=False)["input_ids"])
        if asked == 0:
            raise ValueError(f"the question is empty (it has no tokens): {question!r}.")
        max_seq_len = min(params["max_seq_len"], self.max_length)
        question_tokens = min(asked, params["max_question_len"])
        if params["doc_stride"] is None:  # the default: 128, or half a window's context room if that is less
            stride = min(DEFAULT_STRIDE, (max_seq_len - self.tokenizer.pair_layout().specials - question_tokens) // 2)
        else:
            self._check_room(params, max_seq_len, question_tokens)
            stride = params["doc_stride"]
        task = QuestionAnswering(doc_stride=max(stride, 0), max_query_length=params["max_question_len"])
        windows = task.featurize([QAExample("", question, context, None)], self.tokenizer, max_seq_len)
        if all(offset is None for offset in windows[0]["offsets"]):
            raise ValueError(f"the context is empty (it has no tokens): {context[:80]!r}.")
        return [{"input_ids": w["input_ids"], "token_type_ids": w["token_type_ids"],
                 "attention_mask": [1] * len(w["input_ids"]), "offsets": w["offsets"]} for w in windows]

    def _check_room(self, params: dict[str, Any], max_seq_len: int, question_tokens: int) -> None:
        """ValueError unless a window of ``max_seq_len`` tokens holds more than ``doc_stride`` context tokens."""
        specials = self.tokenizer.pair_layout().specials
        room = max_seq_len - specials - question_tokens
        if room > params["doc_stride"]:
            return
        capped = f" (capped to the model's {self.max_length} positions)" if max_seq_len < params["max_seq_len"] else ""
        raise ValueError(f"doc_stride={params['doc_stride']} must be smaller than the context tokens of a window: "
                         f"max_seq_len={max_seq_len}{capped} - {specials} special tokens - {question_tokens} "
                         f"question tokens (at most max_question_len={params['max_question_len']}) = {room}. Use a "
                         "smaller doc_stride, a smaller max_question_len or a larger max_seq_len.")

    def outputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def postprocess(self, item: Mapping[str, str], features: list[dict], outputs: list[tuple[np.ndarray, np.ndarray]],
                    params: dict) -> dict[str, Any] | list[dict[str, Any]]:
        offsets = [f["offsets"] for f in features]
        scored = [np.array([i == 0 or o is not None for i, o in enumerate(offs)]) for offs in offsets]  # CLS, context
        starts = [log_softmax_at(start, keep) for (start, _), keep in zip(outputs, scored)]
        ends = [log_softmax_at(end, keep) for (_, end), keep in zip(outputs, scored)]
        # a band wider than the longest window adds nothing but memory
        width = min(params["max_answer_len"], max(map(len, offsets)))
        spans = nbest_spans(starts, ends, offsets, n_best_size=params["top_k"], max_answer_length=width)
        context = item["context"]
        answers = [_answer(context, math.exp(s.score), s.start, s.end) for s in spans]
        if params["handle_impossible_answer"]:
            null = math.exp(min(start[0] + end[0] for start, end in zip(starts, ends)))
            answers = sorted([*answers, _answer(context, null, 0, 0)], key=lambda a: -a["score"])[:params["top_k"]]
        return answers[0] if params["top_k"] == 1 else answers


def log_softmax_at(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``[L]`` float64 log-softmax of ``logits`` (``[L]``) over the positions where ``keep`` (bool ``[L]``,
    at least one) is true; -inf at the others."""
    z = np.where(keep, logits.astype(np.float64), -np.inf)
    top = z.max()
    return z - (top + np.log(np.exp(z - top).sum()))


def _answer(context: str, score: float, start: int, end: int) -> dict[str, Any]:
    return {"score": float(score), "start": int(start), "end": int(end), "answer": context[start:end]}


def _fields(item: Any) -> tuple[str, str]:
    """``(question, context)`` of one input; ValueError for anything but a dict of those two strings."""
    if not isinstance(item, Mapping) or set(item) != {"question", "context"}:
        keys = sorted(item) if isinstance(item, Mapping) else type(item).__name__
        raise ValueError('question-answering takes {"question": ..., "context": ...} dicts, got ' f"{keys}.")
    for name in ("question", "context"):
        if not isinstance(item[name], str):
            raise ValueError(f"the {name} must be a string, got {type(item[name]).__name__}.")
    return item["question"], item["context"]


def _from_keywords(question: Any, context: Any) -> dict[str, str] | list[dict[str, str]]:
    """The inputs of ``pipe(question=..., context=...)``: one dict for two strings, a list for two lists."""
    if isinstance(question, str) and isinstance(context, str):
        return {"question": question, "context": context}
    if isinstance(question, list | tuple) and isinstance(context, list | tuple) and len(question) == len(context):
        return [{"question": q, "context": c} for q, c in zip(question, context)]
    raise ValueError("question= and context= must be two strings or two lists of the same length; got "
                     f"{type(question).__name__} and {type(context).__name__}.")

