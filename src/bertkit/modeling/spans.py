"""The one extractive-QA span decoder: the best answer spans of an example over its windows' logits.

:func:`nbest_spans` serves every answer bertkit gives: fine-tuning's evaluation and ``evaluate`` / ``predict``
(:mod:`bertkit.tasks.question_answering`), the question-answering pipeline and the server, and
:meth:`BERTForQuestionAnswering.answer` (:func:`bertkit.modeling.text.answer`). Its search is exact: Google and HF
only pair the ``n_best_size`` best starts with the ``n_best_size`` best ends, which can miss the best valid span.
(:func:`bertkit.modeling.heads.best_spans` is the head's batched argmax over token positions for its training
metric and ``predict``; it knows no characters, windows or n-best lists.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Span:
    """A candidate answer: characters ``[start, end)`` of the context and its two logits."""

    start: int
    end: int
    start_logit: float
    end_logit: float

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


def nbest_spans(start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                offsets: Sequence[Sequence[tuple[int, int] | None]],
                max_context: Sequence[Sequence[bool]] | None = None, *, n_best_size: int = 20,
                max_answer_length: int = 30) -> list[Span]:
    """The ``n_best_size`` best answer spans of one example over its windows, best first.

    Per window ``k``: ``start_logits[k]`` and ``end_logits[k]`` (``[L_k]``), ``offsets[k]`` the
    ``(start, end)`` characters in the context of each token (None outside the context), and
    ``max_context[k]`` whether the window is the token's max-context one (None: every token is).
    A span is tokens ``s..e`` of one window, both in the context, with ``s <= e < s +
    max_answer_length`` and ``s`` in its max-context window; its score is ``start_logits[k][s] +
    end_logits[k][e]`` and its text characters ``offsets[k][s][0]`` to ``offsets[k][e][1]``. The
    search is exact; spans with the same characters count once, with their best score; ties go to
    the earlier window, start and end.
    """
    scores, where = [], []
    for k, (start, end, offs) in enumerate(zip(start_logits, end_logits, offsets)):
        start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
        if not len(start) == len(end) == len(offs):
            raise ValueError(f"window {k}: {len(start)} start logits, {len(end)} end logits and {len(offs)} offsets; "
                             "they must have one per token.")
        in_context = np.array([o is not None for o in offs], dtype=bool)
        can_start = in_context & (np.asarray(max_context[k], dtype=bool) if max_context is not None else True)
        band = _band(start, end, can_start, in_context, max_answer_length)  # [L, max_answer_length]
        s, d = np.nonzero(np.isfinite(band))
        scores.append(band[s, d])
        where.append(np.stack([np.full_like(s, k), s, s + d], axis=1))
    if not scores:
        return []
    all_scores, all_where = np.concatenate(scores), np.concatenate(where)
    return _distinct_best(all_scores, all_where, start_logits, end_logits, offsets, n_best_size)


def _band(start: np.ndarray, end: np.ndarray, can_start: np.ndarray, can_end: np.ndarray, width: int) -> np.ndarray:
    """``[L, width]``: ``start[s] + end[s + d]`` for valid pairs, -inf elsewhere."""
    length = len(start)
    padded_end = np.concatenate([np.where(can_end, end, -np.inf), np.full(width, -np.inf)])
    ends = np.lib.stride_tricks.sliding_window_view(padded_end, width)[:length]  # [L, width]: end[s + d]
    return np.where(can_start[:, None], start[:, None] + ends, -np.inf)


def _distinct_best(scores: np.ndarray, where: np.ndarray, start_logits, end_logits, offsets,
                   n_best_size: int) -> list[Span]:
    """The ``n_best_size`` best candidates with distinct character spans (``where`` rows: window, start, end)."""
    take = n_best_size
    while True:
        if take < len(scores):  # every candidate scoring at least the take-th best (ties included)
            chosen = np.flatnonzero(scores >= np.partition(scores, len(scores) - take)[len(scores) - take])
        else:
            chosen = np.arange(len(scores))
        chosen = chosen[np.argsort(-scores[chosen], kind="stable")]  # best first; ties in (window, start, end) order
        spans: dict[tuple[int, int], Span] = {}
        for k, s, e in where[chosen].tolist():
            chars = (offsets[k][s][0], offsets[k][e][1])
            if chars not in spans:
                spans[chars] = Span(*chars, float(start_logits[k][s]), float(end_logits[k][e]))
                if len(spans) == n_best_size:
                    return list(spans.values())
        if len(chosen) == len(scores):
            return list(spans.values())
        take *= 4  # duplicates of a character span took places: look further down
