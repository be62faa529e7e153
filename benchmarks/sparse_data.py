"""Held-out retrieval data for the learned-sparse comparison (``sparse_quality.py``), built from the bundled novels.

Inverse cloze, split by book (the recipe of ``embedding_quality.py``'s :func:`cloze_pairs`): every paragraph of
400+ characters with 3+ sentences gives a query (its first sentence) and its positive document (the rest of the
paragraph, the query removed). A first sentence seen before is skipped, so every query has one relevant document.

* ``train.jsonl``: ``{"anchor", "positive"}`` rows from ``--train-books`` (default: the five novels other than
  *Persuasion*), shuffled with ``random.Random(0)``;
* ``beir/``: the held-out book(s) (default *Persuasion*) in the BEIR layout: ``corpus.jsonl`` (every pair's
  document), ``queries.jsonl`` (every pair's query) and ``qrels/test.tsv`` (query ``qN`` judges ``dN`` relevant).

The same books give the same files byte for byte (no clock, no randomness but the fixed shuffle). The novels
are bertkit's own resources (``bertkit.resources.austen_novels``), so nothing is copied into the repository.

    python benchmarks/sparse_data.py -o runs/sparse-data
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from embedding_quality import BOOKS, cloze_pairs  # noqa: E402  (a sibling script, not a package)

TRAIN_BOOKS = ("emma", "mansfieldpark", "northangerabbey", "prideprejudice", "sensesensibility")
EVAL_BOOKS = ("persuasion",)


def book_pairs(books: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """The (query, document) pairs of ``books`` in order, one per query across them."""
    from bertkit.resources import austen_novels

    texts = austen_novels()
    first: dict[str, tuple[str, str]] = {}
    for book in books:
        for query, document in cloze_pairs(texts[book]):
            first.setdefault(query, (query, document))
    return list(first.values())


def write_data(out: str | Path, train_books=TRAIN_BOOKS, eval_books=EVAL_BOOKS) -> dict[str, int]:
    """Write ``out/train.jsonl`` and ``out/beir/`` (see the module); returns the counts. Each file is written
    atomically. A book in both lists is refused."""
    from bertkit.io import atomic_write_text

    overlap = set(train_books) & set(eval_books)
    if overlap:
        raise ValueError(f"--train-books and --eval-books share {sorted(overlap)}; a held-out book must not be "
                         "trained on.")
    out = Path(out)
    train = book_pairs(train_books)
    random.Random(0).shuffle(train)
    held_out = book_pairs(eval_books)
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)

    def lines(rows) -> str:
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    atomic_write_text(out / "train.jsonl", lines({"anchor": q, "positive": d} for q, d in train))
    atomic_write_text(out / "beir" / "corpus.jsonl",
                      lines({"_id": f"d{i}", "title": "", "text": d} for i, (_, d) in enumerate(held_out)))
    atomic_write_text(out / "beir" / "queries.jsonl",
                      lines({"_id": f"q{i}", "text": q} for i, (q, _) in enumerate(held_out)))
    atomic_write_text(out / "beir" / "qrels" / "test.tsv",
                      "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(len(held_out))))
    return {"train_pairs": len(train), "queries": len(held_out), "documents": len(held_out)}


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--train-books", nargs="+", default=list(TRAIN_BOOKS), choices=BOOKS)
    parser.add_argument("--eval-books", nargs="+", default=list(EVAL_BOOKS), choices=BOOKS)
    args = parser.parse_args(argv)
    counts = write_data(args.output, args.train_books, args.eval_books)
    print(f"{args.output}: {counts['train_pairs']} training pairs ({', '.join(args.train_books)}); "
          f"{counts['queries']} held-out queries over {counts['documents']} documents ({', '.join(args.eval_books)})")
    return counts


if __name__ == "__main__":
    main()
