"""Data shipped inside the package: the bert-base-uncased vocabulary and Jane Austen's novels.

The novels are public domain (Project Gutenberg texts), stored xz-compressed. ``calibration/austen.txt``: the
default static-int8 calibration set, 320 sentences and paragraphs of five of the novels (written by
``benchmarks/calibration_set.py``; *Persuasion*, the benchmarks' held-out retrieval book, is left out).
"""

from __future__ import annotations

import lzma
from pathlib import Path

RESOURCES = Path(__file__).parent

#: The 30,522-token WordPiece vocabulary of Google's bert-base-uncased.
BERT_BASE_UNCASED_VOCAB = RESOURCES / "bert-base-uncased-vocab.txt"
#: The default calibration set of static int8: one text per line, UTF-8.
CALIBRATION_TEXTS = RESOURCES / "calibration" / "austen.txt"


def austen_files() -> list[Path]:
    """The six novels' files (``.txt.xz``; bertkit's corpus reader decompresses them as it reads)."""
    return sorted((RESOURCES / "austen").glob("*.txt.xz"))


def austen_novels() -> dict[str, str]:
    """``{name: text}`` for the six novels, decompressed (about 4 MB of text)."""
    return {p.name.removesuffix(".txt.xz"): lzma.decompress(p.read_bytes()).decode("utf-8")
            for p in austen_files()}


def calibration_texts() -> list[str]:
    """The default calibration set's texts (:data:`CALIBRATION_TEXTS`), in file order."""
    return [line for line in CALIBRATION_TEXTS.read_text(encoding="utf-8").splitlines() if line.strip()]
