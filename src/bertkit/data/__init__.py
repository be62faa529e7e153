"""Pretraining data: corpus reading, Google's NSP instances, static or dynamic masking, shards on disk.

The one library call is :func:`create_pretraining_data`; training reads its output with
:class:`PretrainingDataset` and :class:`PretrainingCollator` (the order of examples is the
training engine's :class:`~bertkit.training.SeededSampler`). Several directories train together as a
:class:`MixedPretrainingDataset` (:mod:`.mixture`: ``--data wiki:0.7 books:0.3``).
"""

from bertkit.data.corpus import read_documents, split_sentences
from bertkit.data.instances import (
    InstanceBatch,
    InstanceSpans,
    TokenizedCorpus,
    assemble,
    create_instance_spans,
    mask_statically,
    tokenize_documents,
    truncate_seq_pair,
    truncation_amounts,
)
from bertkit.data.mixture import MixedPretrainingDataset, open_pretraining_data, parse_data_specs
from bertkit.data.shards import (
    PretrainingCollator,
    PretrainingDataset,
    create_pretraining_data,
    write_shard,
)

__all__ = [
    "InstanceBatch", "InstanceSpans", "MixedPretrainingDataset", "PretrainingCollator", "PretrainingDataset",
    "TokenizedCorpus", "assemble", "create_instance_spans", "create_pretraining_data", "mask_statically",
    "open_pretraining_data", "parse_data_specs", "read_documents", "split_sentences", "tokenize_documents",
    "truncate_seq_pair", "truncation_amounts", "write_shard",
]
