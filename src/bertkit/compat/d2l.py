"""The d2l (Dive into Deep Learning, 1.0.3) BERT API on bertkit.

``get_tokens_and_segments`` builds d2l's ``<cls> A <sep> B <sep>`` token lists; its
real-BERT counterpart is :meth:`bertkit.BERTTokenizerFast.__call__` with a text pair.
"""

from __future__ import annotations


def get_tokens_and_segments(tokens_a: list[str], tokens_b: list[str] | None = None) -> tuple[list[str], list[int]]:
    """``(['<cls>', *a, '<sep>', *b, '<sep>'], segment ids 0 for <cls> A <sep>, 1 for B <sep>)``."""
    tokens = ["<cls>", *tokens_a, "<sep>"]
    segments = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "<sep>"]
        segments += [1] * (len(tokens_b) + 1)
    return tokens, segments
