"""Length-sorted batching: what makes a loop over thousands of texts fast (pipelines, sentence models, the server).

A naive loop pads every batch to its longest text in input order; sorting by token count first makes
rows of a batch about equally long, so little of each forward pass is padding (and what is left, the
unpadded fast path drops). :func:`sorted_batches` groups indices, :func:`pad` builds the tensors of one
batch (:func:`pad_lists` one key's, the tasks' collate too), :func:`run_sorted` runs a function batch by
batch and hands results back in input order, and :func:`chunks` cuts any iterable into lists so a stream
is processed in bounded memory, one sorted chunk at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import torch

from bertkit.checks import check_int
from bertkit.progress import progress_bar

T = TypeVar("T")

#: How many batches' worth of inputs a stream reads ahead to sort: long enough that sorting pays off.
CHUNK_BATCHES = 32


def check_batch_size(batch_size: int, name: str = "batch_size") -> int:
    return check_int(name, batch_size, 1)


def sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices into ``lengths`` in batches, longest rows first; each index once. A batch holds at most
    ``batch_size`` rows and, with ``max_tokens``, at most that many padded tokens (rows x its longest row;
    a row longer than that goes alone). On CPU a forward pass of ~1,000 padded tokens is as efficient as
    any larger one, so a token budget keeps long rows from making huge padded batches."""
    check_batch_size(batch_size)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        if batches and len(batches[-1]) < batch_size and (
                max_tokens is None or (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens):
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def pad(rows: Sequence[Mapping[str, Sequence[int]]], pad_values: Mapping[str, int],
        device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """``[B, L]`` int64 tensors of the keys in ``pad_values``, each row right-padded with its key's value to
    the longest row (dynamic padding)."""
    return {key: pad_lists([row[key] for row in rows], value).to(device) for key, value in pad_values.items()}


def pad_lists(rows: Sequence[Sequence[int]], value: int, *, with_lengths: bool = False):
    """Stack lists (``[L]`` rows, or ``[C, L]`` nested rows) into one tensor, right-padded with ``value``;
    with ``with_lengths`` also each row's length (``[N]`` or ``[N, C]``)."""
    nested = bool(rows) and bool(rows[0]) and isinstance(rows[0][0], list)
    flat = [row for item in rows for row in item] if nested else list(rows)
    sizes = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
    array = np.full((len(flat), int(sizes.max())), value, dtype=np.int64)
    for i, row in enumerate(flat):
        array[i, :len(row)] = row
    tensor, lengths = torch.from_numpy(array), torch.from_numpy(sizes)
    if nested:
        tensor, lengths = tensor.view(len(rows), -1, tensor.shape[-1]), lengths.view(len(rows), -1)
    return (tensor, lengths) if with_lengths else tensor


def run_sorted(rows: Sequence[T], lengths: Sequence[int], batch_size: int,
               run: Callable[[list[T]], Sequence[Any]], *, max_tokens: int | None = None, progress: bool = False,
               description: str = "batches") -> list[Any]:
    """``run`` over length-sorted batches of ``rows`` (:func:`sorted_batches`); its per-row results come back
    in ``rows``' order."""
    results: list[Any] = [None] * len(rows)
    for batch in progress_bar(sorted_batches(lengths, batch_size, max_tokens), desc=description, disable=not progress):
        for index, result in zip(batch, run([rows[i] for i in batch]), strict=True):
            results[index] = result
    return results


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter) from any iterable, read lazily."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
