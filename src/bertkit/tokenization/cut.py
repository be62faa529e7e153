"""Texts cut, before tokenizing, to the part that truncation keeps: cost bounded by the token limit, not the text.

Truncating to ``max_length`` tokens keeps a text's first (side ``"right"``) or last (``"left"``) tokens, but the
tokenizer builds every token of the whole text first: one 50 MB line costs gigabytes for a model that reads 32
tokens. :func:`cut_texts` gives each long text a window of its characters at the kept end instead, whose
tokens there are exactly the whole text's: a window is accepted once the ``max_length`` tokens nearest its kept
end all come from words it holds whole (the tokenizer's own words, its ``word_ids``). That is exact because a
tokenizer splits a text into words (whitespace, punctuation; a CJK character is a word of its own), normalises
and tokenizes each word on its own, so a window's whole words are the text's words and give the same tokens;
only the word the window cuts through can differ, and none of its tokens is counted.

A window starts at :data:`FIRST_CHARS_PER_TOKEN` characters per token of ``max_length`` (ordinary text needs 3 to
6) and grows 4x while it holds too few whole-word tokens, up to :data:`CHARS_PER_TOKEN` (text-embeddings-
inference's bound). A text whose kept tokens span even more characters (runs of whitespace or control
characters, which give no tokens; words past the tokenizer's 100 characters, which give one) is cut there, and
then its tokens may differ from the whole text's.

A pair (:func:`cut_pairs`) truncated longest-first also depends on which whole text is longer; see there. Not for
overflow windows (``stride``, question answering): those need the whole text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: the largest window, in characters per token of the limit (text-embeddings-inference's bound)
CHARS_PER_TOKEN = 250
#: the first window tried, in characters per token of the limit; a text no longer than this is never cut
FIRST_CHARS_PER_TOKEN = 8
#: how much a window grows when it holds too few whole-word tokens
GROWTH = 4


def cut_texts(tokenizer: Any, texts: Sequence[str], max_length: int, side: str = "right", *, prefix: str = "",
              lower: bool = False) -> list[str]:
    """Each of ``texts``, or a window of it (its start for ``side="right"``, its end for ``"left"``) such that
    tokenizing ``prefix + window`` (lower-cased with ``lower``) truncated to ``max_length`` tokens at ``side`` gives
    the tokens ``prefix + text`` would (see the module doc for the one exception). Tokenizes only the windows, in
    one batch per size tried; ``tokenizer`` is a bertkit (or HF fast) tokenizer. Pairs: :func:`cut_pairs`."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}.")
    return _fit(tokenizer, list(texts), [max_length] * len(texts), max_length, side, prefix, lower)


def cut_pairs(tokenizer: Any, firsts: Sequence[str], seconds: Sequence[str], max_length: int, side: str = "right",
              truncation: bool | str = "longest_first", *, prefix: str = "") -> tuple[list[str], list[str]]:
    """``(firsts, seconds)`` cut as :func:`cut_texts` cuts each text (``prefix`` goes before each first text), so
    that the pairs truncated to ``max_length`` with ``truncation`` keep the whole pairs' tokens.

    ``longest_first`` also needs to know which whole text is longer (when both are cut down to halves of the room,
    the odd token goes to the longer): a cut text keeps more whole-word tokens than its uncut partner has, and when
    both are cut, both windows grow until one holds its whole text, or both reach the bound (where the odd token
    may then go to the other text)."""
    a = cut_texts(tokenizer, firsts, max_length, side, prefix=prefix)
    b = cut_texts(tokenizer, seconds, max_length, side)
    if truncation not in (True, "longest_first"):
        return a, b
    both = [i for i in range(len(a)) if len(a[i]) < len(firsts[i]) and len(b[i]) < len(seconds[i])]
    if both:
        grown_a = _fit(tokenizer, [firsts[i] for i in both], [math.inf] * len(both), max_length, side, prefix, False)
        grown_b = _fit(tokenizer, [seconds[i] for i in both], [math.inf] * len(both), max_length, side, "", False)
        for i, x, y in zip(both, grown_a, grown_b):
            a[i], b[i] = x, y
    for cut, whole, head, other, other_whole, other_head in ((a, firsts, prefix, b, seconds, ""),
                                                           (b, seconds, "", a, firsts, prefix)):
        rows = [i for i in range(len(a)) if len(cut[i]) < len(whole[i]) and len(other[i]) == len(other_whole[i])]
        if rows:  # the cut text must stay the longer one: more whole-word tokens than its partner has
            counts = tokenizer([other_head + other[i] for i in rows], add_special_tokens=False)["input_ids"]
            needs = [max(max_length, len(ids) + 1) for ids in counts]
            for i, text in zip(rows, _fit(tokenizer, [whole[i] for i in rows], needs, max_length, side, head, False)):
                cut[i] = text
    return a, b


def _fit(tokenizer: Any, texts: list[str], needs: Sequence[float], max_length: int, side: str, prefix: str,
         lower: bool) -> list[str]:
    """``texts[i]``, or its shortest window tried holding ``needs[i]`` whole-word tokens at the kept end (the
    window of the bound when none does)."""
    out = list(texts)
    chars, cap = FIRST_CHARS_PER_TOKEN * max_length, CHARS_PER_TOKEN * max_length
    head = prefix.lower() if lower else prefix
    pending = [i for i, text in enumerate(out) if len(text) > chars]
    while pending:
        windows = [_window(out[i], chars, side) for i in pending]
        prepared = [(prefix + w).lower() if lower else prefix + w for w in windows]
        encoded = tokenizer(prepared, add_special_tokens=False, return_offsets_mapping=True)
        still = []
        for row, (i, window) in enumerate(zip(pending, windows)):
            whole = _whole_word_tokens(encoded.word_ids(row), encoded["offset_mapping"][row], side, len(head))
            if whole >= needs[i] or chars >= cap:
                out[i] = window
            else:
                still.append(i)
        chars = min(chars * GROWTH, cap)
        pending = [i for i in still if len(out[i]) > chars]
    return out


def _window(text: str, chars: int, side: str) -> str:
    return text[:chars] if side == "right" else text[-chars:]


def _whole_word_tokens(word_ids: list[int | None], offsets: list[tuple[int, int]], side: str, start: int) -> int:
    """The tokens at the kept end of a window (tokenized after a prefix of ``start`` characters) that come from
    words it holds whole: every token before its last word (``right``), or after its first (``left``: the word
    of the first token reaching past the prefix)."""
    if not word_ids:
        return 0
    if side == "right":
        return sum(1 for w in word_ids if w is not None and w < word_ids[-1])
    cut = next((w for w, (_, end) in zip(word_ids, offsets) if end > start), None)
    return 0 if cut is None else sum(1 for w in word_ids if w is not None and w > cut)
