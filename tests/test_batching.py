"""Length-sorted batching (bertkit.inference.batching): every row once, longest first, within the limits."""

from __future__ import annotations

import random

import pytest

from bertkit.inference.batching import chunks, pad, run_sorted, sorted_batches


@pytest.mark.parametrize("max_tokens", [None, 1, 50, 1000])
def test_sorted_batches_keep_their_limits(max_tokens):
    lengths = [random.Random(i).randint(1, 120) for i in range(97)]
    batches = sorted_batches(lengths, 8, max_tokens)
    assert sorted(i for b in batches for i in b) == list(range(97))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for b in batches:
        assert len(b) <= 8
        if max_tokens is not None and len(b) > 1:
            assert len(b) * lengths[b[0]] <= max_tokens  # rows x the longest row
    if max_tokens == 1:
        assert all(len(b) == 1 for b in batches)  # a row over the budget goes alone


def test_run_sorted_restores_input_order_and_pad_pads():
    rows = [{"input_ids": [1] * n, "mask": [1] * n} for n in (3, 9, 1, 5)]
    seen = []

    def run(batch):
        seen.append([len(r["input_ids"]) for r in batch])
        return [len(r["input_ids"]) for r in batch]

    assert run_sorted(rows, [3, 9, 1, 5], 3, run, max_tokens=18) == [3, 9, 1, 5]
    assert seen == [[9, 5], [3, 1]]
    tensors = pad(rows[:2], {"input_ids": 0, "mask": 0})
    assert tensors["input_ids"].shape == (2, 9) and tensors["mask"][0].tolist() == [1, 1, 1] + [0] * 6
    assert list(chunks(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
