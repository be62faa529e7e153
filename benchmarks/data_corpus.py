"""A pretraining corpus of any size made from the bundled Austen novels, for ``benchmarks/data.py``.

Each document is a seeded random number of paragraphs (``min_paragraphs`` to ``max_paragraphs``, 5 to 40
by default) drawn without replacement from all the novels' paragraphs, in random order. Paragraphs are
unwrapped (one line each); chapter headings, "VOLUME I" and the title lines are left out. Documents are
drawn until the file holds ``size_mb`` MB (10^6 bytes; the last document is cut at a paragraph, so the
file ends within one paragraph of the size).

Two layouts of the same documents:

* ``jsonl``: a JSON object ``{"text": ...}`` per line, the paragraphs joined by ``"\\n"`` (as C4 and
  FineWeb are written);
* ``text``: one paragraph per line, a blank line between documents.

The output depends only on (size, seed, paragraph range, layout). Files are written atomically (a
temporary file renamed into place) with a side file ``NAME.meta.json`` recording those settings and the
byte count; :func:`write_corpus` returns at once when both are there and agree.

The novels hold ~10k paragraphs (~4 MB), so a large corpus repeats each paragraph many times, in
different documents and company: its vocabulary is the novels', far smaller than a web corpus's.
"""

from __future__ import annotations

import json
import lzma
import os
import random
import re
from functools import lru_cache
from pathlib import Path

from bertkit.data.corpus import is_heading
from bertkit.resources import austen_files

#: bump when the generator's output changes, so cached corpora are rewritten
VERSION = 1
LAYOUTS = ("jsonl", "text")


@lru_cache(maxsize=1)
def austen_paragraphs() -> tuple[str, ...]:
    """Every paragraph of the six novels, unwrapped, in reading order (headings and title lines left out)."""
    paragraphs = []
    for path in austen_files():
        text = lzma.decompress(path.read_bytes()).decode("utf-8")
        for block in re.split(r"\n[ \t]*\n", text):
            paragraph = " ".join(line.strip() for line in block.splitlines() if line.strip())
            # no lower-case letter: "CHAPTER IV", "VOLUME II", "EMMA", "FINIS"
            if paragraph and not is_heading(paragraph) and paragraph.upper() != paragraph \
                    and paragraph != "By Jane Austen":
                paragraphs.append(paragraph)
    return tuple(paragraphs)


def _meta(size_mb: float, seed: int, layout: str, min_paragraphs: int, max_paragraphs: int) -> dict:
    return {"version": VERSION, "size_mb": size_mb, "seed": seed, "layout": layout,
            "min_paragraphs": min_paragraphs, "max_paragraphs": max_paragraphs}


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def is_cached(path: Path, meta: dict) -> bool:
    """Whether ``path`` holds the corpus of ``meta``: its side file records the same settings and its size."""
    try:
        recorded = json.loads(meta_path(path).read_text())
        return {k: recorded.get(k) for k in meta} == meta and path.stat().st_size == recorded["bytes"]
    except (OSError, ValueError, KeyError):
        return False


def documents(seed: int = 0, min_paragraphs: int = 5, max_paragraphs: int = 40):
    """An endless, seeded stream of documents, each a list of paragraphs."""
    pool = austen_paragraphs()
    rng = random.Random(seed)
    while True:
        yield rng.sample(pool, rng.randint(min_paragraphs, max_paragraphs))  # distinct, in random order


def write_corpus(path: str | os.PathLike, size_mb: float, seed: int = 0, layout: str | None = None,
                 min_paragraphs: int = 5, max_paragraphs: int = 40) -> Path:
    """Write (or find cached) the corpus of ``size_mb`` MB at ``path``; returns the path.

    ``layout``: ``"jsonl"`` or ``"text"``; by default ``jsonl`` for a ``.jsonl`` name, ``text`` otherwise.
    """
    path = Path(path)
    layout = layout or ("jsonl" if path.suffix == ".jsonl" else "text")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not 1 <= min_paragraphs <= max_paragraphs:
        raise ValueError(f"need 1 <= min_paragraphs <= max_paragraphs, got {min_paragraphs}, {max_paragraphs}")
    meta = _meta(size_mb, seed, layout, min_paragraphs, max_paragraphs)
    if is_cached(path, meta):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    target, written = int(size_mb * 1e6), 0
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            for document in documents(seed, min_paragraphs, max_paragraphs):
                kept, size, full = [], 0, False
                for paragraph in document:  # the last document stops where the size is reached
                    kept.append(paragraph)
                    size += len(paragraph.encode("utf-8")) + 1
                    if written + size >= target:
                        full = True
                        break
                if layout == "jsonl":
                    data = (json.dumps({"text": "\n".join(kept)}, ensure_ascii=False) + "\n").encode("utf-8")
                else:
                    data = ("\n" if written else "").encode() + "".join(p + "\n" for p in kept).encode("utf-8")
                f.write(data)
                written += len(data)
                if full:
                    break
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    meta_tmp = meta_path(path).with_name(meta_path(path).name + ".tmp")
    meta_tmp.write_text(json.dumps({**meta, "bytes": path.stat().st_size}))
    os.replace(meta_tmp, meta_path(path))
    return path
