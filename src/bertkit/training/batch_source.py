"""The batch source protocol: a stateful, resumable stream of whole micro-batches for the Trainer.

A dataset with a sampler (:mod:`.sampler`) suits examples that are read one at a time by index. Some data comes as
whole batches that cannot be cut from an index: the embedding and reranking trainers read batches of one file's
rows, files mixed per batch, and a batch is the unit of their in-batch negatives. Such data is a *batch source*,
passed as ``Trainer(model, batch_source=source, collate_fn=...)`` instead of ``(train_dataset, sampler)``:

* ``__iter__`` yields this rank's items of the current epoch, one per micro-batch, from the position restored by
  ``load_state_dict`` (else from the epoch's start); ``collate_fn(item)`` turns an item into the batch dict
  ``training_step`` takes. The per-rank share is the source's and its collate function's business (the embedding
  source yields the *global* batch, every rank reading the same stream, and the collate function keeps the rank's
  rows, numbering texts over the whole batch);
* ``__len__`` is the number of items (micro-batches) per epoch on every rank;
* ``set_epoch(epoch)`` selects epoch ``epoch`` and starts it from the beginning;
* ``state_dict()`` taken after the k-th item makes a restored source continue at item k+1 (primitives only: the
  checkpoints load with ``weights_only=True``; the Trainer snapshots it after every item it hands out).

The items are produced in the training process, in order; with ``TrainingConfig.num_workers > 0`` each item is
handed (pickled) to a DataLoader worker, which runs ``collate_fn`` on it: what is costly, tokenization, runs in
the workers, and the order and the resume stay exact. ``Trainer`` reads the micro-batch count from the source and
counts ``examples_seen`` from the rows of the batches it trains on (the leading dimension, as for a dataset).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

#: what a batch source has (see the module docstring)
BATCH_SOURCE_METHODS = ("set_epoch", "state_dict", "load_state_dict", "__iter__", "__len__")
#: ... and a sampler (see :mod:`.sampler`): the same methods, over indices
SAMPLER_METHODS = BATCH_SOURCE_METHODS


def check_protocol(obj: Any, kind: str, methods: tuple[str, ...], module: str) -> None:
    """``TypeError`` naming what ``obj`` (a ``kind``: "sampler", "batch source") lacks of the protocol of
    ``module``."""
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(f"The {kind} lacks {missing}; see {module} for the protocol.")


class MicroBatches:
    """The DataLoader's batch sampler over the data order: ``size`` consecutive indices of a sampler per
    micro-batch (a trailing partial batch is dropped), or, with ``size`` None, one item of a batch source per
    micro-batch (as a one-element list, which the DataLoader passes to :class:`Items` and the collate function).
    It records the order's state after each micro-batch it yields, so the state of the last *consumed* one is
    known even when workers prefetch ahead."""

    def __init__(self, order, size: int | None):
        self.order, self.size = order, size
        self.snapshots: collections.deque = collections.deque()

    def __iter__(self) -> Iterator[list]:
        batch = []
        for element in self.order:
            batch.append(element)
            if len(batch) == (self.size or 1):
                self.snapshots.append(self.order.state_dict())
                yield batch
                batch = []

    def __len__(self) -> int:
        return len(self.order) // (self.size or 1)


class Items:
    """The "dataset" of a batch source's micro-batches: each "index" the batch sampler yields is the item itself."""

    def __getitem__(self, item: Any) -> Any:
        return item


class CollateItem:
    """``collate_fn`` of a batch source, called by the DataLoader with the micro-batch's one item in a list."""

    def __init__(self, collate_fn: Callable[[Any], Any] | None):
        self.collate_fn = collate_fn

    def __call__(self, items: list) -> Any:
        (item,) = items
        return item if self.collate_fn is None else self.collate_fn(item)
