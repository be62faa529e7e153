"""The data of a run that pretrains from text (``pretrain --text``): a held-out part, a vocabulary, two data
directories.

A corpus up to :data:`IN_MEMORY_BYTES` is split as a whole (:func:`bertkit.data.split.split_heldout`:
every ``heldout_every``-th document, or blocks of sentences when there are too few documents) and its two
parts are written in Google's layout beside the data, then the vocabulary is learnt from the training part.
A larger corpus is never held whole: every k-th document of the corpus (by ordinal) is held out (k is
``heldout_every``, or larger so that about :data:`HELDOUT_BYTES` of text is held out), the vocabulary is
learnt from a sample of ``tokenizer_sample_bytes`` spread over the training documents, and both data
directories are written by the partition pipeline (:func:`bertkit.data.create.create_pretraining_data`)
on ``workers`` processes. Either way the result depends only on the text and the settings.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from bertkit.data.create import PARTITION_BYTES, create_pretraining_data
from bertkit.data.partitions import ReadSettings, plan_partitions
from bertkit.data.reading import partition_documents, sample_texts
from bertkit.data.split import split_heldout
from bertkit.io import atomic_write_text
from bertkit.tokenization import BERTTokenizerFast

logger = logging.getLogger("bertkit.pretraining")

#: a corpus up to this size is split whole, as documents in memory
IN_MEMORY_BYTES = 64 << 20
#: a larger one holds out about this much text (evaluation reads all of it)
HELDOUT_BYTES = 4 << 20
#: default sample a vocabulary is learnt from (bytes of text)
TOKENIZER_SAMPLE_BYTES = 256 << 20


@dataclass(frozen=True)
class TextOptions:
    """How :func:`~bertkit.tasks.pretraining.pretrain_from_text` turns text into its data: the vocabulary learnt
    from it (``vocab_size``, default 8000; ``do_lower_case``, default True; both left None with a checkpoint's own
    tokenizer), ``max_seq_length`` tokens per sequence, every ``heldout_every``-th document held out,
    ``dupe_factor`` passes with other masks, ``whole_word`` masking, ``masked_lm_prob`` (training data; held-out
    data is masked at BERT's 15%), the files' ``encoding``, ``format`` and ``text_field`` (of JSON lines, Parquet,
    Arrow), and for a corpus over 64 MB the vocabulary's sample of ``tokenizer_sample_bytes`` and ``workers``
    processes."""

    vocab_size: int | None = None
    do_lower_case: bool | None = None
    max_seq_length: int = 128
    heldout_every: int = 20
    dupe_factor: int = 1
    whole_word: bool = False
    masked_lm_prob: float = 0.15
    encoding: str = "utf-8"
    format: str = "auto"
    text_field: str = "text"
    tokenizer_sample_bytes: int = TOKENIZER_SAMPLE_BYTES
    workers: int = 1

    def with_options(self, options: dict[str, Any], function: str) -> TextOptions:
        """These options with those of ``options`` that name a field applied (popped); any other is a TypeError
        naming ``function``, as Python's own for an unexpected keyword argument."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"{function}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; its "
                            f"text options are {', '.join(sorted(names))}.")
        return replace(self, **{name: options.pop(name) for name in list(options)})


def build_text_data(files: list[str], data_root: Path, settings: dict[str, Any], progress: bool,
                    tokenizer: BERTTokenizerFast | None = None, workers: int = 1) -> None:
    """Write ``data_root/train`` and (when anything is held out) ``data_root/heldout``, learning the tokenizer
    unless one is given. ``settings``: the run's text settings (``heldout_every``, ``format``, ``encoding``,
    ``text_field``, ``tokenizer_sample_bytes``, ``vocab_size``, ``do_lower_case``, ``seed``, ``short_seq_prob``
    (Google's 0.1 when absent), ...)."""
    read = ReadSettings(settings["format"], settings["encoding"], settings.get("text_field", "text"))
    total = sum(os.path.getsize(f) for f in files)
    # without NSP the pairs are contiguous text: a random B would only be noise in the MLM context
    common = dict(max_seq_length=settings["max_seq_length"], whole_word=settings["whole_word"], progress=progress,
                  random_next_prob=0.5 if settings["next_sentence_prediction"] else 0.0,
                  short_seq_prob=settings.get("short_seq_prob", 0.1))
    train = dict(seed=settings["seed"], dupe_factor=settings["dupe_factor"], masked_lm_prob=settings["masked_lm_prob"])
    heldout = dict(seed=settings["seed"] + 1)
    if total <= IN_MEMORY_BYTES:
        has_heldout = _split_in_memory(files, data_root, settings, read)
        if tokenizer is None:
            tokenizer = _learn([data_root / "train.txt"], settings, progress)
        sources = {"train": [data_root / "train.txt"], "heldout": [data_root / "heldout.txt"]}
        common["format"] = "google"
    else:
        every = max(settings["heldout_every"], -(-total // HELDOUT_BYTES))
        logger.warning("held-out split: the corpus is %.0f MB, read in partitions: held out every %dth document of "
                       "the corpus (by ordinal)", total / 1e6, every)
        if tokenizer is None:
            sample = settings.get("tokenizer_sample_bytes", TOKENIZER_SAMPLE_BYTES)
            tokenizer = _learn(iter(sample_texts(files, sample, read, PARTITION_BYTES, heldout_every=every)),
                               settings, progress)
        has_heldout, sources = True, {"train": files, "heldout": files}
        common.update(format=read.format, encoding=read.encoding, text_field=read.text_field, workers=workers,
                      heldout_every=every)
        train["heldout"], heldout["heldout"] = False, True
    create_pretraining_data(sources["train"], tokenizer, data_root / "train", **common, **train)
    if has_heldout:
        create_pretraining_data(sources["heldout"], tokenizer, data_root / "heldout", **common, **heldout)


def _learn(texts, settings: dict[str, Any], progress: bool) -> BERTTokenizerFast:
    return BERTTokenizerFast.train(texts, vocab_size=settings["vocab_size"], do_lower_case=settings["do_lower_case"],
                                   show_progress=progress)


def _split_in_memory(files: list[str], data_root: Path, settings: dict[str, Any], read: ReadSettings) -> bool:
    """Split the whole corpus, write ``train.txt`` / ``heldout.txt`` (Google's layout); whether any is held out."""
    documents = [d for p in plan_partitions(files, 1 << 62, read) for d in partition_documents(p, read)]
    split = split_heldout(documents, settings["heldout_every"])
    logger.warning("held-out split: %s", split.description)
    if not split.train:
        raise ValueError(f"{', '.join(map(str, files))} hold no text: nothing to pretrain on.")
    for name, docs in (("train.txt", split.train), ("heldout.txt", split.heldout)):
        atomic_write_text(data_root / name, "\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return bool(split.heldout)
