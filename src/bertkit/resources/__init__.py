"""Data shipped inside the package: the bert-base-uncased vocabulary and Jane Austen's novels.

The novels are public domain (Project Gutenberg texts), stored xz-compressed.
"""

from __future__ import annotations

import lzma
from pathlib import Path

RESOURCES = Path(__file__).parent

#: The 30,522-token WordPiece vocabulary of Google's bert-base-uncased.
BERT_BASE_UNCASED_VOCAB = RESOURCES / "bert-base-uncased-vocab.txt"


def austen_files() -> list[Path]:
    """The six novels' files (``.txt.xz``; bertkit's corpus reader decompresses them as it reads)."""
    return sorted((RESOURCES / "austen").glob("*.txt.xz"))


def austen_novels() -> dict[str, str]:
    """``{name: text}`` for the six novels, decompressed (about 4 MB of text)."""
    return {p.name.removesuffix(".txt.xz"): lzma.decompress(p.read_bytes()).decode("utf-8")
            for p in austen_files()}
