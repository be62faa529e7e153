"""Checkpoints: the registry of released weights (lucid's ``lucid.weights``), formats, conversion.

``BERT_Weights`` and the per-task enums describe Google's releases; ``from_pretrained(weights=...)``
downloads (once, into ``$BERTKIT_HOME`` or ``~/.cache/bertkit``) and loads them.

:func:`load_pretrained` / :func:`save_pretrained` implement the model classes'
``from_pretrained`` / ``save_pretrained``; the package root installs them in
:mod:`bertkit.hooks`, since ``modeling`` does not import ``weights``.
"""

from __future__ import annotations

import os
from typing import Any

from bertkit.weights.adapt import LoadReport, LoadWarning
from bertkit.weights.registry import (
    BERT_ForQuestionAnswering_Weights,
    BERT_ForSequenceClassification_Weights,
    BERT_Weights,
    BERTForQuestionAnswering_Weights,
    BERTForSequenceClassification_Weights,
    WeightsEntry,
    lookup,
)


def load_pretrained(model_or_cls: Any, source: str | os.PathLike | Any | None, weights: Any,
                    config_overrides: dict[str, Any]) -> Any:
    """``BERTPreTrainedModel.from_pretrained``: fetch ``source`` / ``weights`` if registered, then load it.

    See that method for the contract; :func:`bertkit.weights.download.resolve_source` picks the
    directory and :func:`bertkit.weights.hf.load_pretrained` builds or fills the model.
    """
    from bertkit.weights.download import resolve_source
    from bertkit.weights.hf import load_pretrained as load_directory

    return load_directory(model_or_cls, resolve_source(source, weights), config_overrides)


def save_pretrained(model: Any, directory: str | os.PathLike, dtype: str | None = None) -> None:
    """``BERTPreTrainedModel.save_pretrained``: :func:`bertkit.weights.hf.save_pretrained`."""
    from bertkit.weights.hf import save_pretrained as save_directory

    save_directory(model, directory, dtype=dtype)


__all__ = [
    "BERTForQuestionAnswering_Weights", "BERTForSequenceClassification_Weights",
    "BERT_ForQuestionAnswering_Weights", "BERT_ForSequenceClassification_Weights", "BERT_Weights",
    "LoadReport", "LoadWarning", "WeightsEntry", "load_pretrained", "lookup", "save_pretrained",
]
