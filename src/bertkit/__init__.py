"""bertkit: the BERT model family for PyTorch.

Start with :class:`BERTConfig` and :class:`BERT`, a task model such as
:class:`BERTForSequenceClassification`, or a factory like ``bert_for_masked_lm_base()``.

Names are resolved lazily, so ``import bertkit`` (and ``bertkit --help``) does not import
torch until a model is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: top-level name -> module that defines it (everything else comes from bertkit.modeling)
_LAZY = {
    "BERTConfig": "bertkit.config",
    "SIZES": "bertkit.presets",
    "preset_config": "bertkit.presets",
    "BERTTokenizerFast": "bertkit.tokenization",
    "BERTTokenizer": "bertkit.tokenization",
    "BatchEncoding": "bertkit.tokenization",
    "BERT_Weights": "bertkit.weights",
    "BERT_ForQuestionAnswering_Weights": "bertkit.weights",
    "BERT_ForSequenceClassification_Weights": "bertkit.weights",
}

if TYPE_CHECKING:  # for IDEs and type checkers
    from bertkit.config import BERTConfig as BERTConfig
    from bertkit.modeling import *  # noqa: F403
    from bertkit.presets import SIZES as SIZES
    from bertkit.presets import preset_config as preset_config
    from bertkit.tokenization import BatchEncoding as BatchEncoding
    from bertkit.tokenization import BERTTokenizer as BERTTokenizer
    from bertkit.tokenization import BERTTokenizerFast as BERTTokenizerFast
    from bertkit.weights import BERT_ForQuestionAnswering_Weights as BERT_ForQuestionAnswering_Weights
    from bertkit.weights import BERT_ForSequenceClassification_Weights as BERT_ForSequenceClassification_Weights
    from bertkit.weights import BERT_Weights as BERT_Weights


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("models", "weights"):
        return importlib.import_module(f"bertkit.{name}")
    modeling = importlib.import_module("bertkit.modeling")
    if name == "__all__":
        return [*_LAZY, "models", "weights", *modeling.__all__]
    try:
        return getattr(modeling, name)
    except AttributeError:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}") from None
