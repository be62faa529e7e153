"""Near-duplicate rows of an embedding store, by cosine similarity, exactly and in bounded memory.

The rule is SemDeDup's (Abbas et al. 2023) without its clustering: a row is a duplicate when its cosine with
some *earlier* row of the store (in store order) is at least ``threshold``; the first row of every group of
near-duplicates is kept. (Earlier rows count whether they are kept or not, as SemDeDup's upper-triangular
maximum counts them, so the result does not depend on a chain of decisions.) Each duplicate is reported with
its most similar earlier row.

The search compares every row with every earlier one: ``block_rows`` rows at a time against the store's rows
up to them, streamed shard by shard. Memory: two blocks of vectors and a ``[block_rows, block_rows]`` score
matrix, whatever the store's size; time grows with the square of the rows (the store is read once per block).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.embed_job.store import EmbeddingStore

#: the store kinds with one vector a row, whose cosine is defined
DEDUPLICABLE = ("dense", "static")


@dataclass(frozen=True)
class Verdict:
    """One row of the store: its ``id``; ``duplicate_of``, the id of its most similar earlier row when that is
    at least the threshold (None: kept); ``similarity``, their cosine (None for the first row)."""

    id: Any
    duplicate_of: Any
    similarity: float | None


def near_duplicates(store: EmbeddingStore, threshold: float, block_rows: int = 4096) -> Iterator[Verdict]:
    """A :class:`Verdict` for every row of ``store``, in store order (module docstring), as they are found;
    ``ValueError`` at once for a threshold outside (-1, 1], a block size below 1 or a store without one vector a
    row."""
    if not -1.0 < threshold <= 1.0:
        raise ValueError(f"--threshold {threshold}: a cosine similarity, above -1 and at most 1 (e.g. 0.95).")
    if block_rows < 1:
        raise ValueError(f"--chunk-size must be at least 1, got {block_rows}.")
    if store.kind not in DEDUPLICABLE:
        raise ValueError(f"{store.path} holds a {store.kind} model's embeddings; deduplication compares one vector "
                         "a row: embed the corpus with a dense or static model.")
    return _verdicts(store, threshold, block_rows)


def _verdicts(store: EmbeddingStore, threshold: float, block_rows: int) -> Iterator[Verdict]:
    for start, ids, block in _blocks(store, block_rows):
        best = torch.full((len(block),), -torch.inf)
        best_id = np.full(len(block), None, dtype=object)
        for earlier, earlier_ids, chunk in _blocks(store, block_rows):
            if earlier >= start + len(block):
                break
            scores = block @ chunk.T
            # only strictly earlier rows count: row i of the block is store row start + i
            columns, rows = torch.arange(earlier, earlier + len(chunk)), torch.arange(start, start + len(block))
            scores.masked_fill_(columns[None, :] >= rows[:, None], -torch.inf)
            top, at = scores.max(dim=1)
            better = top > best
            best = torch.where(better, top, best)
            best_id[better.numpy()] = earlier_ids[at.numpy()][better.numpy()]
        for row_id, score, other in zip(ids.tolist(), best.tolist(), best_id):
            found = score != -float("inf")
            yield Verdict(row_id, other if found and score >= threshold else None, score if found else None)


def _blocks(store: EmbeddingStore, rows: int) -> Iterator[tuple[int, np.ndarray, torch.Tensor]]:
    """``(first row, ids, unit vectors)`` of the store ``rows`` rows at a time (never across a shard)."""
    start = 0
    for ids, vectors in store.iter_batches():
        vectors = F.normalize(torch.tensor(vectors, dtype=torch.float32), dim=-1)
        ids = np.asarray(ids, dtype=object)
        for offset in range(0, len(vectors), rows):
            block = vectors[offset:offset + rows]
            yield start, ids[offset:offset + rows], block
            start += len(block)
