"""Reading raw text into documents: a document is a list of sentences.

Two layouts are understood, chosen per file (``format="auto"``) or forced:

- ``"google"``: the input of Google's ``create_pretraining_data.py``: one sentence per
  line, a blank line between documents.
- ``"prose"``: ordinary books (e.g. the bundled Austen novels): paragraphs separated by
  blank lines, sentences wrapped across lines. A file is split into documents at chapter
  headings ("CHAPTER IV", "Chapter 12"), paragraphs are unwrapped, and each paragraph is
  split into sentences by :func:`split_sentences`.

Reading streams line by line, so a file never has to fit in memory; the output depends
only on the input (nothing random here).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

FORMATS = ("auto", "google", "prose")

#: words that end in "." without ending a sentence (compared lower-cased, without the dot)
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "st", "sr", "jr", "prof", "rev", "hon", "capt", "col",
    "gen", "lt", "sgt", "maj", "adm", "esq", "mt", "ft", "vs", "viz", "cf", "ca", "approx", "dept", "fig",
})

_OPENERS = "\"'“‘([_"
_CLOSERS = "\"'”’)]_"
# a run of terminal punctuation, closing quotes/brackets, white space, then (looking ahead) opening
# quotes/brackets and the first word character of what follows
_CANDIDATE = re.compile(rf"([.?!…]+)([{re.escape(_CLOSERS)}]*)\s+(?=[{re.escape(_OPENERS)}]*(\w))")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]|[A-HJ-Z]")  # "U.S", "e.g", or one capital other than "I"
_CHAPTER = re.compile(r"(?:CHAPTER|Chapter)\s+(?:[IVXLCDM]+|\d+|[A-Z][a-z]+(?:[- ][A-Za-z]+)*)\.?")
_SECTION = re.compile(r"(?:VOLUME|Volume|BOOK|Book|PART|Part)\s+(?:[IVXLCDM]+|\d+|[A-Z][a-z]+)\.?")
_LAST_WORD = re.compile(r"[\w.]*\Z")
_ENDS_SENTENCE = re.compile(rf"[.?!…][{re.escape(_CLOSERS)}]*$")


def read_documents(sources: str | os.PathLike | Iterable[str | os.PathLike],
                   format: str = "auto") -> Iterator[list[str]]:
    """Yield the documents of ``sources``, each a list of sentences (empty documents are skipped).

    ``sources``: files, or texts in memory. A ``Path`` (any ``os.PathLike``) is a file; a
    ``str`` is a file if one exists at that path, and a text if it contains a line break;
    anything else is a ValueError. A document never spans two sources.
    ``format``: ``"auto"`` (decided per source by :func:`detect_format`), ``"google"`` or ``"prose"``.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    for source in sources:
        lines = _lines_of(source)
        chosen = format
        if chosen == "auto":
            head = list(itertools.islice(lines, 2000))
            chosen = detect_format(head)
            lines = itertools.chain(head, lines)
        yield from (_google_documents(lines) if chosen == "google" else _prose_documents(lines))


def detect_format(lines: Iterable[str]) -> str:
    """``"google"`` when the non-blank lines look like one sentence each, else ``"prose"``.

    One sentence per line means most lines end with terminal punctuation and hardly any
    line holds two sentences. Wrapped prose ends most lines mid-sentence; a paragraph per
    line holds several sentences per line.
    """
    sample = [line.strip() for line in lines if line.strip()]
    if not sample:
        return "google"
    ending = sum(bool(_ENDS_SENTENCE.search(line)) for line in sample) / len(sample)
    several = sum(len(split_sentences(line)) > 1 for line in sample) / len(sample)
    return "google" if ending >= 0.6 and several <= 0.25 else "prose"


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with a careful rule-based splitter.

    A sentence ends at ``.``, ``?``, ``!`` (plus any closing quotes or brackets) followed by
    white space and a capital letter, optionally behind an opening quote. Kept together:
    abbreviations such as "Mr.", "Mrs.", "Dr.", "St." (:data:`ABBREVIATIONS`), initials
    ("J. Smith", "U.S. Navy") and ellipses ("...", "…", ". . ."). White space is normalised.
    """
    text = " ".join(text.split())
    sentences, start = [], 0
    for m in _CANDIDATE.finditer(text):
        if m.group(3).isupper() and _ends_sentence(text[start:m.start()], m.group(1)):
            sentences.append(text[start:m.end(2)])
            start = m.end()
    if start < len(text):
        sentences.append(text[start:])
    return sentences


def is_heading(paragraph: str) -> bool:
    """A chapter heading ("CHAPTER XII", "Chapter 3", "Chapter the First")."""
    return _CHAPTER.fullmatch(paragraph) is not None


def _ends_sentence(before: str, punctuation: str) -> bool:
    if punctuation != ".":
        return "…" not in punctuation and ".." not in punctuation  # "?", "!", "?!"; not an ellipsis
    word = _LAST_WORD.search(before).group()  # "cheerful--Mr" -> "Mr", "(Mrs" -> "Mrs"
    if not word or set(word) == {"."}:  # ". . ." spaced ellipsis
        return False
    return word.lower() not in ABBREVIATIONS and _INITIALS.fullmatch(word) is None


def _lines_of(source: str | os.PathLike) -> Iterator[str]:
    if isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.isfile(source)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"no such file: {path}")
        return _file_lines(path)
    if not isinstance(source, str):
        raise ValueError(f"a source must be a file path or a text, got {type(source).__name__}.")
    if "\n" not in source and "\r" not in source:
        raise ValueError(f"{source[:80]!r} is not an existing file, and a text in memory must contain a line "
                         "break (a Path always means a file).")
    return iter(source.splitlines())


def _file_lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8-sig") as f:
        yield from f


def _google_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    document: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _prose_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    document: list[str] = []
    for paragraph in _paragraphs(lines):
        if is_heading(paragraph):
            if document:
                yield document
            document = []
        elif not _SECTION.fullmatch(paragraph):  # "VOLUME II" belongs to no chapter
            document.extend(split_sentences(paragraph))
    if document:
        yield document


def _paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line separated blocks, their lines joined with single spaces."""
    block: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            block.append(line)
        elif block:
            yield " ".join(block)
            block = []
    if block:
        yield " ".join(block)
