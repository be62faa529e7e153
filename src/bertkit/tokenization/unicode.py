"""Google's BasicTokenizer character rules, as regular-expression classes for the Rust pipeline.

Google's reference (``bert/tokenization.py``) decides with Python's ``unicodedata``:

* removed: U+0000, U+FFFD and control characters (categories Cc and Cf, except \\t \\n \\r);
* whitespace, turned into a space: " ", \\t, \\n, \\r and category Zs (and Python's
  ``str.split`` also splits on U+2028 / U+2029, which survive cleaning);
* punctuation, split off as tokens: ASCII 33-47, 58-64, 91-96, 123-126 and categories P*;
* CJK ideographs, isolated: eight fixed code-point blocks;
* accents, stripped after NFD: category Mn.

The classes are built here from the running Python's ``unicodedata`` (not from the Rust
library's own, older Unicode tables), so the Rust pipeline makes exactly the decisions the
Python reference makes on this interpreter. They are computed once per process (~0.3 s of CPU).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

#: Google's CJK blocks (``_is_chinese_char``), inclusive ranges.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

_ASCII_PUNCTUATION = frozenset(chr(cp) for a, b in ((33, 47), (58, 64), (91, 96), (123, 126))
                               for cp in range(a, b + 1))


def is_removed(ch: str, cat: str | None = None) -> bool:
    """Dropped by Google's ``_clean_text``: NUL, U+FFFD and Cc/Cf controls other than \\t \\n \\r."""
    cat = cat or unicodedata.category(ch)
    return ch in "\x00\ufffd" or (cat in ("Cc", "Cf") and ch not in "\t\n\r")


def is_whitespace(ch: str, cat: str | None = None) -> bool:
    """Turned into a space by ``_clean_text``."""
    return ch in " \t\n\r" or (cat or unicodedata.category(ch)) == "Zs"


def is_punctuation(ch: str, cat: str | None = None) -> bool:
    """Split off by ``_run_split_on_punc``: ASCII non-alphanumerics and categories P*."""
    return ch in _ASCII_PUNCTUATION or (cat or unicodedata.category(ch))[0] == "P"


def is_cjk(ch: str, cat: str | None = None) -> bool:
    cp = ord(ch)
    return any(a <= cp <= b for a, b in CJK_RANGES)


def is_nonspacing_mark(ch: str, cat: str | None = None) -> bool:
    return (cat or unicodedata.category(ch)) == "Mn"


def _ranges(code_points: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted inclusive ranges covering ``code_points``."""
    out: list[tuple[int, int]] = []
    for cp in sorted(code_points):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def regex_class(ranges: Iterable[tuple[int, int]]) -> str:
    """An Oniguruma (``tokenizers.Regex``) character class matching exactly ``ranges``."""
    parts = [f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


@functools.cache
def char_classes() -> dict[str, str]:
    """``{"remove", "whitespace", "separator", "punctuation", "cjk", "nonspacing_mark"}`` -> regex class.

    The same decisions as :func:`is_removed`, :func:`is_whitespace`, :func:`is_punctuation`,
    :func:`is_cjk` and :func:`is_nonspacing_mark`, tabulated over every code point.
    ``separator`` is what Python's ``str.split()`` splits on (``str.isspace``), which the
    reference applies to the cleaned text.
    """
    # one pass over the code points, keeping only the categories a class reads: this runs in every process that
    # builds a tokenizer (each CLI command), where a scan per category cost ~0.8 s of CPU
    wanted = {"Cc", "Cf", "Zs", "Mn", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps"}  # surrogates ("Cs"): in no class
    by_category: dict[str, list[int]] = {cat: [] for cat in wanted}
    for cp, cat in enumerate(map(unicodedata.category, map(chr, range(0x110000)))):
        if cat in wanted:
            by_category[cat].append(cp)

    def where(*categories: str) -> set[int]:
        return {cp for cat in categories for cp in by_category[cat]}

    punctuation = where("Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps") | {ord(c) for c in _ASCII_PUNCTUATION}
    return {
        "remove": regex_class(_ranges({0, 0xFFFD} | where("Cc", "Cf") - {9, 10, 13})),
        "whitespace": regex_class(_ranges({9, 10, 13, 32} | where("Zs"))),
        "separator": regex_class(_ranges(cp for cp in range(0x110000) if chr(cp).isspace())),
        "punctuation": regex_class(_ranges(punctuation)),
        "cjk": regex_class(sorted(CJK_RANGES)),
        "nonspacing_mark": regex_class(_ranges(where("Mn"))),
    }


def final_sigma_positions(text: str) -> list[int]:
    """Indices of capital sigmas (U+03A3) that Python's ``str.lower`` turns into final ``ς``.

    Google lower-cases each whitespace token (after cleaning and CJK spacing) with
    ``str.lower``, whose Final_Sigma rule depends on the neighbouring letters; the Rust
    pipeline lowers character by character. Reproducing Python's choice here lets the
    caller substitute ``ς`` one-for-one before the Rust pipeline (offsets unchanged).
    """
    tokens: list[list[tuple[int, str]]] = [[]]  # the reference's whitespace tokens, with original indices
    for i, ch in enumerate(text):
        if is_removed(ch):
            continue
        if is_whitespace(ch) or ch.isspace() or is_cjk(ch):
            tokens.append([])  # a CJK character is a token of its own, and holds no sigma
        else:
            tokens[-1].append((i, ch))
    found = []
    for token in tokens:
        chars = "".join(ch for _, ch in token)
        if "\u03a3" not in chars:
            continue
        lowered = chars.lower()
        for j, (i, ch) in enumerate(token):
            if ch == "\u03a3" and lowered[len(chars[:j].lower())] == "\u03c2":
                found.append(i)
    return found
