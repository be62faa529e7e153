"""The BERT engine: layers, backbone, task heads, caches and factories."""

from bertkit.modeling.backbone import BERT, BERTEncoding
from bertkit.modeling.cache import EncoderDecoderCache, KVCache, StaticKVCache
from bertkit.modeling.electra import ELECTRAForPreTraining, ELECTRAForPretrainingRTD
from bertkit.modeling.factories import FACTORIES, TASKS, build
from bertkit.modeling.heads import (
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from bertkit.modeling.lm_heads import BERTForCausalLM, BERTForMaskedLM, BERTForPreTraining

globals().update(FACTORIES)

__all__ = [
    "BERT", "BERTEncoding", "BERTForCausalLM", "BERTForMaskedLM", "BERTForMultipleChoice",
    "BERTForNextSentencePrediction", "BERTForPreTraining", "BERTForQuestionAnswering",
    "BERTForSequenceClassification", "BERTForTokenClassification", "ELECTRAForPreTraining",
    "ELECTRAForPretrainingRTD", "EncoderDecoderCache", "KVCache", "StaticKVCache", "TASKS", "build", *FACTORIES,
]
