"""The pytorch_pretrained_bert 0.6.2 API on bertkit's engine: swap the import, keep the code.

``from bertkit.compat.pytorch_pretrained_bert import BertModel, BertTokenizer, BertAdam``
gives 0.6.2's classes with 0.6.2's signatures, return conventions and parameter names
(a ppb ``state_dict`` loads strictly; ours loads in ppb). Layers, losses, tokenization and
checkpoint reading are bertkit's. The submodules are 0.6.2's: :mod:`.modeling` (models,
layer classes, ``BertConfig``), :mod:`.tokenization`, :mod:`.optimization` (``BertAdam``,
``OpenAIAdam``, the schedules) and :mod:`.file_utils` (``cached_path``); 0.6.2's OpenAI GPT,
GPT-2 and Transformer-XL parts are not included. ``python -m bertkit.compat.pytorch_pretrained_bert
convert_tf_checkpoint_to_pytorch TF_CHECKPOINT TF_CONFIG PYTORCH_DUMP_OUTPUT`` is 0.6.2's command.
"""

from bertkit.compat.pytorch_pretrained_bert import file_utils, modeling, optimization, tokenization
from bertkit.compat.pytorch_pretrained_bert.file_utils import (
    CONFIG_NAME,
    PYTORCH_PRETRAINED_BERT_CACHE,
    WEIGHTS_NAME,
    cached_path,
)
from bertkit.compat.pytorch_pretrained_bert.modeling import (
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
from bertkit.compat.pytorch_pretrained_bert.optimization import BertAdam, OpenAIAdam
from bertkit.compat.pytorch_pretrained_bert.tokenization import BasicTokenizer, BertTokenizer, WordpieceTokenizer

__all__ = [
    "CONFIG_NAME", "PYTORCH_PRETRAINED_BERT_CACHE", "WEIGHTS_NAME", "BasicTokenizer", "BertAdam", "BertConfig",
    "BertForMaskedLM", "BertForMultipleChoice", "BertForNextSentencePrediction", "BertForPreTraining",
    "BertForQuestionAnswering", "BertForSequenceClassification", "BertForTokenClassification", "BertModel",
    "BertPreTrainedModel", "BertTokenizer", "OpenAIAdam", "WordpieceTokenizer", "cached_path",
    "convert_tf_checkpoint_to_pytorch", "file_utils", "load_tf_weights_in_bert", "modeling", "optimization",
    "tokenization",
]
