"""``bertkit.AutoModel`` / ``bertkit.AutoConfig``: load a checkpoint of any family as the model it holds.

Every bertkit class loads any family's checkpoint (``BERTForSequenceClassification.from_pretrained`` of a RoBERTa
or ModernBERT directory builds that family's model: the family is in the config). These two entry points spare
the caller naming the class: the head is the one ``config.json``'s ``architectures`` names (``XLMRobertaForMaskedLM``
-> :class:`~bertkit.BERTForMaskedLM` of family ``"roberta"``), else the one the weights' names show.
"""

from __future__ import annotations

import os
from typing import Any

from bertkit.config import BERTConfig


class AutoModel:
    """``AutoModel.from_pretrained(source)``: the model ``source`` holds (anything bertkit loads), of the class its
    architecture names, with its weights, in eval mode. Unlike HF's ``AutoModel`` (the bare backbone), the head
    comes too; take ``model.bert`` for the backbone. ``task``: the task adapter of a Jina embeddings v3 checkpoint
    in its original layout, merged into the weights (:mod:`bertkit.weights.task_adapters`; None: the base
    weights); a ValueError naming the tasks for one it lacks, or for a checkpoint without adapters."""

    def __init__(self) -> None:
        raise TypeError("AutoModel is not instantiated; use AutoModel.from_pretrained(source).")

    @staticmethod
    def from_pretrained(source: str | os.PathLike, *, warn: bool = True, task: str | None = None) -> Any:
        from bertkit.weights.convert import model_for_checkpoint
        from bertkit.weights.download import resolve_source
        from bertkit.weights.formats import read_checkpoint

        resolved = resolve_source(source)
        return model_for_checkpoint(read_checkpoint(resolved, task=task), source=resolved, warn=warn)


class AutoConfig:
    """``AutoConfig.from_pretrained(source)``: the :class:`~bertkit.BERTConfig` of a checkpoint of any family,
    without reading its weights where they sit beside it."""

    def __init__(self) -> None:
        raise TypeError("AutoConfig is not instantiated; use AutoConfig.from_pretrained(source).")

    @staticmethod
    def from_pretrained(source: str | os.PathLike) -> BERTConfig:
        from bertkit.weights.formats import read_source_config

        return read_source_config(source)
