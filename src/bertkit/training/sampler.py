"""SeededSampler: a shuffled, rank-sharded, mid-epoch resumable order of example indices.

This is the sampler protocol :class:`~bertkit.training.Trainer` relies on, and the
default when no sampler is given:

* ``set_epoch(epoch)`` selects epoch ``epoch``'s order and starts it from the beginning;
* ``__iter__`` yields this rank's indices of the current epoch; it continues from the
  position restored by ``load_state_dict`` (once), otherwise it starts at 0;
* the position counts indices *yielded so far* and is advanced before each yield, so
  ``state_dict()`` taken after the k-th index makes a restored sampler continue at k+1;
* ``__len__`` is this rank's number of indices in a full epoch;
* ``state_dict()`` / ``load_state_dict()`` hold only primitives (checkpoints load with
  ``weights_only=True``) and are cheap (the trainer snapshots them every micro-batch).

Rank ``r`` of ``w`` receives the strided share ``order[r::w]`` (the tail that does not
divide evenly is dropped), so the ranks' k-th micro-batches together are exactly the
examples that one process would put into its k-th global batch. Subclasses change only
``epoch_order()`` (the whole epoch's order, for all ranks), so they share that rule:
:class:`LengthGroupedSampler` (batches of similar length) and :class:`MixtureSampler`
(several datasets drawn with weights).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch


class SeededSampler:
    """Indices ``0 .. num_examples-1`` in an order that depends only on ``(seed, epoch)``; see the module doc."""

    def __init__(self, num_examples: int, seed: int = 0, rank: int = 0, world_size: int = 1, *,
                 shuffle: bool = True):
        if num_examples < 1:
            raise ValueError(f"SeededSampler needs num_examples >= 1, got {num_examples}.")
        if not 0 <= rank < world_size:
            raise ValueError(f"SeededSampler needs 0 <= rank < world_size, got rank={rank}, world_size={world_size}.")
        if num_examples < world_size:
            raise ValueError(f"SeededSampler: {num_examples} examples cannot be shared by {world_size} ranks.")
        self.num_examples, self.seed, self.rank, self.world_size = num_examples, seed, rank, world_size
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._resume = False

    def __len__(self) -> int:
        return self.num_examples // self.world_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position, self._resume = epoch, 0, False

    def epoch_order(self) -> torch.Tensor:
        """The current epoch's order for all ranks together, ``[num_examples]`` int64 (subclasses change this)."""
        if not self.shuffle:
            return torch.arange(self.num_examples)
        return torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(self._epoch_seeds()[0]))

    def indices(self) -> torch.Tensor:
        """This rank's full index order for the current epoch, ``[len(self)]`` int64: its share of
        :meth:`epoch_order`."""
        return self.epoch_order()[self.rank: len(self) * self.world_size: self.world_size]

    def _epoch_seeds(self, count: int = 1) -> list[int]:
        """``count`` torch seeds that depend only on ``(seed, epoch)``."""
        seeds = np.random.SeedSequence([self.seed, self.epoch]).generate_state(count, np.uint64) >> 1
        return [int(s) for s in seeds]

    def __iter__(self) -> Iterator[int]:
        start = self.position if self._resume else 0
        self.position, self._resume = start, False
        for index in self.indices()[start:].tolist():
            self.position += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position,
                "num_examples": self.num_examples, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore epoch and position; the next ``__iter__`` continues there. Size mismatches raise."""
        for key in ("num_examples", "world_size", "seed"):
            if state[key] != getattr(self, key):
                raise ValueError(f"SeededSampler state has {key}={state[key]}, this sampler {getattr(self, key)}; "
                                 "resume with the same data, seed and number of ranks.")
        self.epoch, self.position, self._resume = state["epoch"], state["position"], True


class LengthGroupedSampler(SeededSampler):
    """A :class:`SeededSampler` whose batches hold examples of similar length (less padding, faster steps).

    Each epoch's seeded permutation is cut into chunks of ``mega_batches`` groups; each chunk is
    sorted by ``lengths`` (longest first) and cut into groups of ``group_size`` indices (one
    micro-batch of every rank: ``micro_batch_size * world_size``), and the groups of the whole epoch
    are shuffled (seeded) so long and short batches alternate (a short last group stays last). A rank
    takes its strided share, so its consecutive ``micro_batch_size`` indices come from one group. The
    order depends only on ``(seed, epoch)``: resume is as exact as with the plain sampler.

    ``mega_batches=None`` (the default) is HF's rule, ``min(50, num_examples // (4 * group_size))``
    and at least 1, so an epoch has at least four chunks when it can. A chunk as large as the data
    (the former fixed 50 groups: 1,600 examples at batch 32, more than many fine-tuning sets) sorts the
    whole epoch, and its groups are then nearly the same examples every epoch: on 1,000 generated NER
    sentences an epoch-1 batch shared 70 % of its examples with one epoch-0 batch (11 % unsorted, 25 %
    with this rule), and labelled tokens per batch ranged 179 to 1,238 (524 to 749 unsorted), each
    batch's loss being a mean over its own tokens.
    """

    def __init__(self, num_examples: int, seed: int = 0, rank: int = 0, world_size: int = 1, *,
                 lengths: Sequence[int], group_size: int, mega_batches: int | None = None):
        super().__init__(num_examples, seed, rank, world_size)
        if len(lengths) != num_examples:
            raise ValueError(f"LengthGroupedSampler: {len(lengths)} lengths for {num_examples} examples.")
        if mega_batches is None:
            mega_batches = max(1, min(50, num_examples // (4 * group_size))) if group_size >= 1 else 1
        if group_size < 1 or mega_batches < 1:
            raise ValueError(f"LengthGroupedSampler needs group_size >= 1 and mega_batches >= 1, got "
                             f"{group_size} and {mega_batches}.")
        self.lengths = torch.as_tensor(np.asarray(lengths, dtype=np.int64))
        self.group_size, self.mega_batches = group_size, mega_batches

    def epoch_order(self) -> torch.Tensor:
        seeds = self._epoch_seeds(2)
        order = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(seeds[0]))
        chunk = self.group_size * self.mega_batches
        parts = [part[self.lengths[part].argsort(descending=True, stable=True)] for part in order.split(chunk)]
        groups = list(torch.cat(parts).split(self.group_size))
        tail = [groups.pop()] if len(groups[-1]) < self.group_size else []  # stays last: groups keep aligned
        shuffled = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seeds[1]))
        return torch.cat([groups[i] for i in shuffled.tolist()] + tail)


class MixtureSampler(SeededSampler):
    """Draws from several datasets, concatenated in order (global index = the dataset's offset + its local index),
    in the proportions ``weights``; the protocol, sharding and resume are :class:`SeededSampler`'s.

    An epoch keeps the length ``L = sum(sizes)``. Dataset ``d`` contributes ``counts()[d]`` picks: ``L * w_d``
    (weights normalised) rounded by largest remainder, so the counts sum to ``L`` (a tie goes to the earlier
    dataset). Its picks come from an endless stream of its own permutations (cycle ``q`` of dataset ``d`` is a
    permutation seeded by ``(seed, d, q)``) that continues across epochs: epoch ``e`` takes stream positions
    ``[e * c_d, (e + 1) * c_d)``. So a down-weighted dataset shows another part every epoch and repeats no
    instance before all of it was used; an up-weighted one repeats only whole passes. The epoch's picks are
    then shuffled together (seeded by ``(seed, epoch)``) and each rank takes its strided share.

    ``num_examples`` must equal ``sum(sizes)`` (the Trainer passes ``len(dataset)``; bind ``sizes`` and
    ``weights`` with ``functools.partial`` for ``sampler_factory``). Every size must be >= 1 and every weight
    positive and finite (``ValueError`` naming the dataset otherwise).
    """

    def __init__(self, num_examples: int, seed: int = 0, rank: int = 0, world_size: int = 1, *,
                 sizes: Sequence[int], weights: Sequence[float]):
        super().__init__(num_examples, seed, rank, world_size)
        if len(sizes) != len(weights) or not sizes:
            raise ValueError(f"MixtureSampler needs one weight per dataset, got {len(sizes)} sizes and "
                             f"{len(weights)} weights.")
        for d, (size, weight) in enumerate(zip(sizes, weights)):
            if int(size) < 1:
                raise ValueError(f"MixtureSampler: dataset {d} has size {size}; every dataset needs an instance.")
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"MixtureSampler: dataset {d} has weight {weight}; weights must be positive and "
                                 "finite.")
        if sum(sizes) != num_examples:
            raise ValueError(f"MixtureSampler: the sizes {list(sizes)} sum to {sum(sizes)}, but num_examples is "
                             f"{num_examples}; pass the concatenated dataset's length.")
        total = math.fsum(weights)
        self.sizes = [int(size) for size in sizes]
        self.weights = [float(weight) / total for weight in weights]
        self.offsets = np.cumsum([0, *self.sizes[:-1]]).tolist()

    def counts(self) -> list[int]:
        """Picks per dataset in every epoch: largest-remainder shares of ``num_examples`` (they sum to it)."""
        quotas = [self.num_examples * weight for weight in self.weights]
        counts = [math.floor(quota) for quota in quotas]
        by_remainder = sorted(range(len(quotas)), key=lambda d: (counts[d] - quotas[d], d))
        for d in by_remainder[:self.num_examples - sum(counts)]:
            counts[d] += 1
        return counts

    def epoch_order(self) -> torch.Tensor:
        picks = [offset + self.stream(d, self.epoch * count, count)
                 for d, (offset, count) in enumerate(zip(self.offsets, self.counts()))]
        shuffle = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(self._epoch_seeds()[0]))
        return torch.cat(picks)[shuffle]

    def stream(self, d: int, start: int, count: int) -> torch.Tensor:
        """Positions ``[start, start + count)`` of dataset ``d``'s stream of permutations, as local indices."""
        size, parts = self.sizes[d], []
        for cycle in range(start // size, -(-(start + count) // size)):
            lo, hi = max(start - cycle * size, 0), min(start + count - cycle * size, size)
            seed = int(np.random.SeedSequence(self.seed, spawn_key=(d, cycle)).generate_state(1, np.uint64)[0] >> 1)
            parts.append(torch.randperm(size, generator=torch.Generator().manual_seed(seed))[lo:hi])
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "sizes": list(self.sizes), "weights": list(self.weights)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """As :meth:`SeededSampler.load_state_dict`; other dataset sizes or weights raise too."""
        if state.get("sizes") != self.sizes:
            raise ValueError(f"MixtureSampler state has dataset sizes {state.get('sizes')}, this sampler "
                             f"{self.sizes}; resume with the same data directories, in the same order.")
        stored = state["weights"]
        if len(stored) != len(self.weights) or not all(map(math.isclose, stored, self.weights)):
            raise ValueError(f"MixtureSampler state has weights {stored}, this sampler {self.weights}; resume "
                             "with the same weights.")
        super().load_state_dict(state)
