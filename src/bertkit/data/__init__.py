"""Pretraining data: corpus reading, Google's NSP instances, static or dynamic masking, shards on disk.

The one library call is :func:`create_pretraining_data` (partitions of the corpus, on any number of
worker processes or a Dask cluster); training reads its output with :class:`PretrainingDataset` and
:class:`PretrainingCollator` (the order of examples is the training engine's
:class:`~bertkit.training.SeededSampler`). Several directories train together as a
:class:`MixedPretrainingDataset` (:mod:`.mixture`: ``--data wiki:0.7 books:0.3``).
Names load lazily: a data-creation worker never imports torch unless it masks statically.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_NAMES = {
    "read_documents": "corpus", "split_sentences": "corpus",
    "InstanceBatch": "instances", "InstanceSpans": "instances", "TokenizedCorpus": "instances",
    "assemble": "instances", "create_instance_spans": "instances", "mask_statically": "instances",
    "tokenize_documents": "instances", "truncate_seq_pair": "instances", "truncation_amounts": "instances",
    "Documents": "partitions", "create_pretraining_data": "create", "write_shard": "writing",
    "PretrainingCollator": "shards", "PretrainingDataset": "shards",
    "MixedPretrainingDataset": "mixture", "open_pretraining_data": "mixture", "parse_data_specs": "mixture",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'bertkit.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bertkit.data.{_NAMES[name]}"), name)


def __dir__() -> list[str]:
    return __all__
