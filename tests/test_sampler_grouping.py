"""LengthGroupedSampler: batches grouped by length must still be new batches every epoch.

The tagging gap against HF's plain loop (issue 21) came from sorting the whole epoch as one chunk
(50 groups of 32 = 1,600 examples, more than a small fine-tuning set): the groups were then nearly
the same examples every epoch. These tests need no model and run in well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.training import LengthGroupedSampler, SeededSampler


def _groups(sampler, epoch: int, size: int) -> list[set[int]]:
    sampler.set_epoch(epoch)
    order = list(sampler)
    return [set(order[i:i + size]) for i in range(0, len(order) - size + 1, size)]


def _repeat_share(sampler, size: int) -> float:
    """Mean over epoch 1's groups of the largest share of one group that an epoch-0 group also held."""
    before, after = _groups(sampler, 0, size), _groups(sampler, 1, size)
    return float(np.mean([max(len(group & old) for old in before) / size for group in after]))


@pytest.mark.parametrize("num_examples", [1000, 3000])
def test_length_groups_change_between_epochs(num_examples):
    lengths = np.random.default_rng(0).integers(6, 60, num_examples).tolist()  # sentence lengths in pieces
    grouped = LengthGroupedSampler(num_examples, seed=7, lengths=lengths, group_size=32)
    plain = SeededSampler(num_examples, seed=7)
    # a whole-epoch sort repeats ~0.7 of every group at 1,000 examples; unsorted shuffling ~0.1
    assert _repeat_share(grouped, 32) < 0.4
    assert _repeat_share(plain, 32) < 0.25


def test_default_chunks_are_a_quarter_of_the_epoch_at_most():
    lengths = list(range(1000))
    sampler = LengthGroupedSampler(1000, seed=1, lengths=lengths, group_size=32)
    assert sampler.mega_batches == 7  # HF's rule: min(50, 1000 // (4 * 32))
    assert LengthGroupedSampler(100, seed=1, lengths=lengths[:100], group_size=32).mega_batches == 1
    assert LengthGroupedSampler(10**5, seed=1, lengths=[5] * 10**5, group_size=32).mega_batches == 50
    # still grouped: within a group lengths are close (a chunk of 224 spans the range, a group 1/7 of it)
    order = list(sampler)
    spans = [np.ptp([lengths[i] for i in order[k:k + 32]]) for k in range(0, 992, 32)]
    assert np.median(spans) < 400


def test_an_explicit_mega_batch_count_is_kept():
    sampler = LengthGroupedSampler(1000, seed=1, lengths=[3] * 1000, group_size=32, mega_batches=50)
    assert sampler.mega_batches == 50
    with pytest.raises(ValueError, match="mega_batches >= 1"):
        LengthGroupedSampler(1000, seed=1, lengths=[3] * 1000, group_size=32, mega_batches=0)
