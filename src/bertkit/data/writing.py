"""Writing pretraining shards: the on-disk layout that :class:`~bertkit.data.PretrainingDataset` reads.

A shard ``NAME`` is one ``.npy`` file per field, ``NAME.<field>.npy``: ``tokens`` (uint16 when the
vocabulary has at most 65,535 ids, else int32; instances concatenated), ``offsets`` (``[n + 1]``
int64), ``segment_starts`` (where B starts), ``nsp_labels`` (uint8: 0 = B follows A, 1 = random
B), and with static masking ``masked_positions``, ``masked_labels`` and ``masked_offsets``.

Every file is written atomically (a temp file renamed into place), so a killed run never leaves a
half-written field under its final name. :func:`write_instances` assembles and writes a shard in
chunks, so its memory is that of a chunk, not of the shard. Nothing here imports torch: data
creation workers run without it (static masking imports it when used).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.instances import InstanceBatch, InstanceSpans, TokenizedCorpus, assemble
from bertkit.io import atomic_path

INDEX_NAME = "index.json"
TOKENIZER_DIR = "tokenizer"
FORMAT = "bertkit-pretraining-data"
FIELDS = ("tokens", "offsets", "segment_starts", "nsp_labels")
MASK_FIELDS = ("masked_positions", "masked_labels", "masked_offsets")
#: instances assembled (and masked) at once while writing a shard: its int64 temporaries, ~60 bytes per token,
#: are most of a worker's peak (8,192 made a worker peak at 186 MB on 8 MB partitions, 2,048 at 138 MB)
CHUNK_INSTANCES = 2048


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= 65535 else np.int32


def position_dtype(max_seq_length: int) -> type:
    return np.uint16 if max_seq_length <= 65535 else np.int32


def write_shard(out_dir: str | os.PathLike, name: str, batch: InstanceBatch, max_seq_length: int) -> dict[str, Any]:
    """Write ``batch`` as shard ``name`` (one atomic ``.npy`` per field); returns its index entry."""
    positions = position_dtype(max_seq_length)
    arrays = {"tokens": batch.tokens, "offsets": batch.offsets.astype(np.int64),
              "segment_starts": batch.segment_starts.astype(positions),
              "nsp_labels": batch.nsp_labels.astype(np.uint8)}
    if batch.masked_positions is not None:
        arrays.update(masked_positions=batch.masked_positions.astype(positions),
                      masked_labels=batch.masked_labels.astype(batch.tokens.dtype),
                      masked_offsets=batch.masked_offsets.astype(np.int64))
    for field, array in arrays.items():
        _save(Path(out_dir) / f"{name}.{field}.npy", array)
    return {"name": name, "num_instances": len(batch), "num_tokens": len(batch.tokens)}


def write_instances(out_dir: str | os.PathLike, name: str, corpus: TokenizedCorpus, spans: InstanceSpans, *,
                    cls_token_id: int, sep_token_id: int, vocab_size: int, max_seq_length: int,
                    mask: Callable[[InstanceBatch], InstanceBatch] | None = None) -> dict[str, Any]:
    """Assemble ``spans`` of ``corpus`` into shard ``name``, :data:`CHUNK_INSTANCES` at a time (``mask``, static
    masking, applied per chunk); the tokens stream into a memory-mapped temp file. Returns the index entry."""
    tokens_dtype, positions = token_dtype(vocab_size), position_dtype(max_seq_length)
    sizes = (spans.a_end - spans.a_start) + (spans.b_end - spans.b_start) + 3
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    segment_starts, nsp, masked = [], [], {f: [] for f in MASK_FIELDS}
    masked_total = 0
    with atomic_path(Path(out_dir) / f"{name}.tokens.npy") as tmp:
        tokens = np.lib.format.open_memmap(tmp, mode="w+", dtype=tokens_dtype, shape=(int(offsets[-1]),))
        for lo in range(0, len(spans), CHUNK_INSTANCES):
            batch = assemble(corpus, spans.take(slice(lo, lo + CHUNK_INSTANCES)), cls_token_id=cls_token_id,
                             sep_token_id=sep_token_id, dtype=tokens_dtype)
            if mask is not None:
                batch = mask(batch)
                masked["masked_positions"].append(batch.masked_positions.astype(positions))
                masked["masked_labels"].append(batch.masked_labels.astype(tokens_dtype))
                masked["masked_offsets"].append(batch.masked_offsets[1:] + masked_total)
                masked_total += int(batch.masked_offsets[-1])
            tokens[offsets[lo]:offsets[lo] + len(batch.tokens)] = batch.tokens
            segment_starts.append(batch.segment_starts.astype(positions))
            nsp.append(batch.nsp_labels.astype(np.uint8))
        tokens.flush()
        del tokens
    arrays = {"offsets": offsets, "segment_starts": _concat(segment_starts, positions),
              "nsp_labels": _concat(nsp, np.uint8)}
    if mask is not None:
        arrays.update(masked_positions=_concat(masked["masked_positions"], positions),
                      masked_labels=_concat(masked["masked_labels"], tokens_dtype),
                      masked_offsets=np.concatenate([[0], *masked["masked_offsets"]]).astype(np.int64))
    for field, array in arrays.items():
        _save(Path(out_dir) / f"{name}.{field}.npy", array)
    return {"name": name, "num_instances": len(spans), "num_tokens": int(offsets[-1])}


def _concat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
