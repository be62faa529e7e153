"""Checkpoints: the registry of released weights (lucid's ``lucid.weights``), formats, conversion.

``BERT_Weights`` and the per-task enums describe Google's releases; ``from_pretrained(weights=...)``
downloads (once, into ``$BERTKIT_HOME`` or ``~/.cache/bertkit``) and loads them.
"""

from bertkit.weights.adapt import LoadReport
from bertkit.weights.registry import (
    BERT_ForQuestionAnswering_Weights,
    BERT_ForSequenceClassification_Weights,
    BERT_Weights,
    BERTForQuestionAnswering_Weights,
    BERTForSequenceClassification_Weights,
    WeightsEntry,
    lookup,
)

__all__ = [
    "BERTForQuestionAnswering_Weights", "BERTForSequenceClassification_Weights",
    "BERT_ForQuestionAnswering_Weights", "BERT_ForSequenceClassification_Weights", "BERT_Weights",
    "LoadReport", "WeightsEntry", "lookup",
]
