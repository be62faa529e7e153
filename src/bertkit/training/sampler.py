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
examples that one process would put into its k-th global batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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

    def indices(self) -> torch.Tensor:
        """This rank's full index order for the current epoch, ``[len(self)]`` int64."""
        if self.shuffle:
            seed = int(np.random.SeedSequence([self.seed, self.epoch]).generate_state(1, np.uint64)[0] >> 1)
            order = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(seed))
        else:
            order = torch.arange(self.num_examples)
        return order[self.rank: len(self) * self.world_size: self.world_size]

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

    def indices(self) -> torch.Tensor:
        seeds = np.random.SeedSequence([self.seed, self.epoch]).generate_state(2, np.uint64) >> 1
        order = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(int(seeds[0])))
        chunk = self.group_size * self.mega_batches
        parts = [part[self.lengths[part].argsort(descending=True, stable=True)] for part in order.split(chunk)]
        groups = list(torch.cat(parts).split(self.group_size))
        tail = [groups.pop()] if len(groups[-1]) < self.group_size else []  # stays last: groups keep aligned
        shuffled = torch.randperm(len(groups), generator=torch.Generator().manual_seed(int(seeds[1])))
        order = torch.cat([groups[i] for i in shuffled.tolist()] + tail)
        return order[self.rank: len(self) * self.world_size: self.world_size]
