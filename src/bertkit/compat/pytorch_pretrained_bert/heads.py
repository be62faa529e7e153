"""pytorch_pretrained_bert 0.6.2's task models: the backbone of :mod:`.modeling` plus one head each.

Every class keeps 0.6.2's constructor, ``forward`` signature and return convention, and
its parameter names (``bert.*``, ``cls.*``, ``classifier``, ``qa_outputs``): a ppb
``state_dict`` loads with ``load_state_dict(strict=True)`` and ours loads in ppb. The LM
heads are 0.6.2's classes of :mod:`.layers` (the engine's layers, tied to the word
embeddings at construction as in 0.6.2); losses use :func:`bertkit.modeling.losses.cross_entropy`
and :func:`bertkit.modeling.losses.masked_lm_loss` (which projects only the labelled
positions onto the vocabulary). The classes are re-exported by :mod:`.modeling`, where
0.6.2 defined them.

The models are composed here rather than subclassed from bertkit's task models because
ppb's ``model.bert`` is itself a :class:`BertModel` called positionally as
``bert(input_ids, token_type_ids, attention_mask)``, while bertkit's backbone takes
``(input_ids, attention_mask, token_type_ids)``: one object cannot honour both orders.

Conventions (as 0.6.2): ignore index -1 for PreTraining / MaskedLM / NSP labels, -100 for
the classifiers; token classification counts only ``attention_mask == 1`` positions; QA
clamps positions to ``[0, L]`` and ignores ``L``; PreTraining returns a loss only when both
label tensors are given (their sum). A mean over no counted label is NaN, as 0.6.2's
``CrossEntropyLoss`` gives it, with zero gradients: for MaskedLM / NSP / the classifiers
when every label is ignored, for PreTraining when either part has none, for QA when every
start (or every end) position is out of range. One deliberate difference: QA does not
clamp the caller's position tensors in place.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertkit.compat.pytorch_pretrained_bert.layers import BertOnlyMLMHead, BertOnlyNSPHead, BertPreTrainingHeads
from bertkit.compat.pytorch_pretrained_bert.modeling import (
    PPB_IGNORE_INDEX,
    BertConfig,
    BertModel,
    BertPreTrainedModel,
)
from bertkit.modeling.fast import Linear
from bertkit.modeling.losses import check_labels, cross_entropy, masked_lm_loss


def _nan_if_none_counted(mean: Tensor, counted: Tensor) -> Tensor:
    """The engine's mean (0 over no counted label) as 0.6.2's: NaN when no label counts, gradients then 0."""
    return torch.where(counted.any(), mean, torch.full_like(mean, float("nan")))


def _nsp_loss(scores: Tensor, labels: Tensor) -> Tensor:
    labels = labels.view(-1)
    check_labels("next_sentence_label", labels, 2, PPB_IGNORE_INDEX)
    loss = cross_entropy(scores.view(-1, 2), labels, ignore_index=PPB_IGNORE_INDEX)
    return _nan_if_none_counted(loss, labels != PPB_IGNORE_INDEX)


def _classification_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """CrossEntropyLoss with its default ignore index (-100), as 0.6.2's classifiers use it."""
    logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    check_labels("labels", labels, logits.shape[-1], -100)
    return _nan_if_none_counted(cross_entropy(logits, labels), labels != -100)


class _MaskedLMModel(BertPreTrainedModel):
    """The backbone and a ``cls`` head (``_cls_head``, built 0.6.2's way from the config and the word embeddings)
    with MLM ``predictions``; the engine's MLM loss."""

    head_prefixes = ("cls.",)
    _cls_head: type[nn.Module]

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(self.config)
        embeddings = self.bert.embeddings.word_embeddings.weight
        if not self.config.tie_word_embedding:  # only a bertkit config converted to 0.6.2's can say so
            embeddings = nn.Parameter(embeddings.detach().clone())
        self.cls = self._cls_head(self.config, embeddings)
        self.post_init()

    def _masked_lm_loss(self, sequence_output: Tensor, labels: Tensor) -> Tensor:
        labels = labels.view(sequence_output.shape[:-1])
        loss = masked_lm_loss(self.cls.predictions, sequence_output, labels, vocab_size=self.config.vocab_size,
                              ignore_index=PPB_IGNORE_INDEX)
        return _nan_if_none_counted(loss, labels != PPB_IGNORE_INDEX)


class BertForPreTraining(_MaskedLMModel):
    """MLM + NSP heads. Returns the summed loss when both label tensors are given, else
    ``(prediction_scores [B, L, V], seq_relationship_score [B, 2])``; labels -1 are ignored."""

    hf_architecture = "BertForPreTraining"
    _cls_head = BertPreTrainingHeads

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                masked_lm_labels: Tensor | None = None,
                next_sentence_label: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask,
                                                   output_all_encoded_layers=False)
        if masked_lm_labels is not None and next_sentence_label is not None:
            return (self._masked_lm_loss(sequence_output, masked_lm_labels)
                    + _nsp_loss(self.cls.seq_relationship(pooled_output), next_sentence_label))
        return self.cls(sequence_output, pooled_output)


class BertForMaskedLM(_MaskedLMModel):
    """MLM head. Returns the loss when ``masked_lm_labels`` (-1 = ignored) are given, else scores ``[B, L, V]``."""

    hf_architecture = "BertForMaskedLM"
    _cls_head = BertOnlyMLMHead

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                masked_lm_labels: Tensor | None = None) -> Tensor:
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        if masked_lm_labels is not None:
            return self._masked_lm_loss(sequence_output, masked_lm_labels)
        return self.cls(sequence_output)


class BertForNextSentencePrediction(BertPreTrainedModel):
    """NSP head. Returns the loss when ``next_sentence_label`` (0 = B follows A, 1 = random, -1 =
    ignored) is given, else scores ``[B, 2]``."""

    hf_architecture = "BertForNextSentencePrediction"
    head_prefixes = ("cls.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(self.config)
        self.cls = BertOnlyNSPHead(self.config)
        self.post_init()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                next_sentence_label: Tensor | None = None) -> Tensor:
        _, pooled_output = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        seq_relationship_score = self.cls(pooled_output)
        if next_sentence_label is not None:
            return _nsp_loss(seq_relationship_score, next_sentence_label)
        return seq_relationship_score


class _ClassifierModel(BertPreTrainedModel):
    """dropout(hidden_dropout_prob) + ``classifier`` Linear, as 0.6.2 builds its classifiers."""

    head_prefixes = ("classifier.",)

    def _build_classifier(self, out_features: int) -> None:
        self.bert = BertModel(self.config)
        self.dropout = nn.Dropout(self.config.hidden_dropout_prob)
        self.classifier = Linear(self.config.hidden_size, out_features)
        self.post_init()


class _LabelClassifier(_ClassifierModel):
    """A classifier over ``num_labels`` classes (0.6.2's second constructor argument), saved as bertkit's
    ``num_labels``."""

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__(config)
        self.num_labels = num_labels
        self._build_classifier(num_labels)

    def _engine_overrides(self) -> dict[str, Any]:
        return {"num_labels": self.num_labels}


class BertForSequenceClassification(_LabelClassifier):
    """Classifier on the pooled output: logits ``[B, num_labels]``, or the cross-entropy loss given ``labels``."""

    hf_architecture = "BertForSequenceClassification"

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None) -> Tensor:
        _, pooled_output = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        logits = self.classifier(self.dropout(pooled_output))
        if labels is not None:
            return _classification_loss(logits.view(-1, self.num_labels), labels)
        return logits


class BertForMultipleChoice(_ClassifierModel):
    """Scores ``num_choices`` candidates from inputs ``[B, num_choices, L]``: logits ``[B, num_choices]``
    or the cross-entropy loss given ``labels [B]``."""

    hf_architecture = "BertForMultipleChoice"

    def __init__(self, config: BertConfig, num_choices: int = 2):
        super().__init__(config)
        self.num_choices = num_choices
        self._build_classifier(1)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None) -> Tensor:
        def flat(t):  # [B, C, L] -> [B*C, L]
            return None if t is None else t.view(-1, t.size(-1))

        _, pooled_output = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                                     output_all_encoded_layers=False)
        reshaped_logits = self.classifier(self.dropout(pooled_output)).view(-1, self.num_choices)
        if labels is not None:
            return _classification_loss(reshaped_logits, labels)
        return reshaped_logits


class BertForTokenClassification(_LabelClassifier):
    """Per-token classifier: logits ``[B, L, num_labels]``, or the loss given ``labels [B, L]``, counted
    only where ``attention_mask == 1`` (when a mask is given) and the label is not -100."""

    hf_architecture = "BertForTokenClassification"

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None) -> Tensor:
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        logits = self.classifier(self.dropout(sequence_output))
        if labels is not None:
            if attention_mask is not None:
                labels = labels.masked_fill(attention_mask.reshape(labels.shape) != 1, -100)
            return _classification_loss(logits, labels)
        return logits


class BertForQuestionAnswering(BertPreTrainedModel):
    """Span extraction: ``(start_logits [B, L], end_logits [B, L])``, or, given both position tensors,
    the mean of the start and end cross-entropies (positions clamped to ``[0, L]``, ``L`` ignored)."""

    hf_architecture = "BertForQuestionAnswering"
    head_prefixes = ("qa_outputs.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(self.config)
        self.qa_outputs = Linear(self.config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                start_positions: Tensor | None = None,
                end_positions: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        start_logits, end_logits = self.qa_outputs(sequence_output).unbind(dim=-1)  # [B, L, 2] -> 2 x [B, L]
        if start_positions is None or end_positions is None:
            return start_logits, end_logits
        ignored_index = start_logits.size(1)
        losses = []
        for logits, positions in ((start_logits, start_positions), (end_logits, end_positions)):
            positions = positions.reshape(-1).clamp(0, ignored_index)
            loss = cross_entropy(logits, positions, ignore_index=ignored_index)
            losses.append(_nan_if_none_counted(loss, positions != ignored_index))
        return (losses[0] + losses[1]) / 2


__all__ = [
    "BertForMaskedLM", "BertForMultipleChoice", "BertForNextSentencePrediction", "BertForPreTraining",
    "BertForQuestionAnswering", "BertForSequenceClassification", "BertForTokenClassification",
]
