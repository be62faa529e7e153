"""Writes the default static-int8 calibration set shipped in the package
(``src/bertkit/resources/calibration/austen.txt``; read by :func:`bertkit.resources.calibration_texts`).

One text per line, UTF-8: :data:`SENTENCES` sentences (40-300 characters) and :data:`PARAGRAPHS` paragraphs (up to
~700 characters, cut at a sentence end), picked evenly through five of the bundled Austen novels (public domain).
*Persuasion* is left out: it is the held-out retrieval book of ``sparse_data.py`` and ``embedding_quality.py``, so
quality measured there is not measured on calibration text. Same novels, same file byte for byte.

    python benchmarks/calibration_set.py            # rewrites the packaged file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from embedding_quality import SENTENCE_END  # noqa: E402  (a sibling script, not a package)
from sparse_data import TRAIN_BOOKS  # noqa: E402

SENTENCES = 224
PARAGRAPHS = 96
PARAGRAPH_CHARS = 700
OUT = HERE.parent / "src" / "bertkit" / "resources" / "calibration" / "austen.txt"


def candidates(text: str) -> tuple[list[str], list[str]]:
    """(sentences of 40-300 characters, paragraphs of 2+ sentences cut to about PARAGRAPH_CHARS) of one novel."""
    sentences, paragraphs = [], []
    for block in text.split("\n\n"):
        block = " ".join(block.split())
        parts = SENTENCE_END.split(block)
        sentences += [s for s in parts if 40 <= len(s) <= 300 and not s.isupper()]
        if len(parts) >= 2 and len(block) >= 250:
            kept = []
            for s in parts:
                if kept and len(" ".join(kept)) + len(s) > PARAGRAPH_CHARS:
                    break
                kept.append(s)
            paragraphs.append(" ".join(kept))
    return sentences, paragraphs


def evenly(items: list[str], n: int) -> list[str]:
    """``n`` items spread evenly through ``items`` (all of them when fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def texts(books=TRAIN_BOOKS) -> list[str]:
    from bertkit.resources import austen_novels

    novels = austen_novels()
    sentences, paragraphs = [], []
    for book in books:
        s, p = candidates(novels[book])
        sentences += s
        paragraphs += p
    picked = evenly(sentences, SENTENCES) + evenly(paragraphs, PARAGRAPHS)
    return list(dict.fromkeys(picked))  # no text twice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", default=str(OUT))
    args = parser.parse_args(argv)
    from bertkit.io import atomic_write_text

    rows = texts()
    atomic_write_text(args.out, "\n".join(rows) + "\n")
    print(f"{len(rows)} texts -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
