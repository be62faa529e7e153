"""The pytorch_pretrained_bert 0.6.2 API on bertkit's engine: swap the import, keep the code.

``from bertkit.compat.pytorch_pretrained_bert import BertModel, BertTokenizer, BertAdam``
gives 0.6.2's classes with 0.6.2's signatures, return conventions and parameter names
(a ppb ``state_dict`` loads strictly; ours loads in ppb). Layers, losses, tokenization and
checkpoint reading are bertkit's. ``python -m bertkit.compat.pytorch_pretrained_bert
convert_tf_checkpoint_to_pytorch TF_CHECKPOINT TF_CONFIG PYTORCH_DUMP_OUTPUT`` is 0.6.2's command.
"""

from bertkit.compat.pytorch_pretrained_bert.modeling import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertPreTrainedModel,
    convert_tf_checkpoint_to_pytorch,
    load_tf_weights_in_bert,
)
from bertkit.compat.pytorch_pretrained_bert.optimization import BertAdam
from bertkit.compat.pytorch_pretrained_bert.tokenization import BasicTokenizer, BertTokenizer, WordpieceTokenizer

__all__ = [
    "CONFIG_NAME", "WEIGHTS_NAME", "BasicTokenizer", "BertAdam", "BertConfig", "BertForMaskedLM",
    "BertForMultipleChoice", "BertForNextSentencePrediction", "BertForPreTraining", "BertForQuestionAnswering",
    "BertForSequenceClassification", "BertForTokenClassification", "BertModel", "BertPreTrainedModel",
    "BertTokenizer", "WordpieceTokenizer", "convert_tf_checkpoint_to_pytorch", "load_tf_weights_in_bert",
]
