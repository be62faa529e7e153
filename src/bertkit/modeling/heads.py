"""Task models: each a thin head over the :class:`~bertkit.BERT` backbone ``self.bert``.

The language-model heads (pretraining, masked LM, causal LM) are in :mod:`bertkit.modeling.lm_heads`.

Forwards take no labels and return one tensor (or the pair QA and pretraining need):

============================  =====================================================
model                         ``forward`` returns
============================  =====================================================
BERTForPreTraining            ``(prediction_scores [B, L, V], seq_relationship [B, 2])``
BERTForMaskedLM               ``prediction_scores [B, L, V]``
BERTForCausalLM               ``logits [B, L, V]``
BERTForNextSentencePrediction ``[B, 2]`` (0 = B follows A, 1 = random B)
BERTForSequenceClassification ``[B, num_labels]``
BERTForMultipleChoice         ``[B, C]`` from inputs ``[B, C, L]``
BERTForTokenClassification    ``[B, L, num_labels]``
BERTForQuestionAnswering      ``(start_logits [B, L], end_logits [B, L])``
============================  =====================================================

Losses, predictions and accuracies come from helpers (``get_loss``, ``predict``,
``get_accuracy``), which take the labels first and then the same inputs as ``forward``.
Ignore index is -100. MLM heads accept ``pred_positions`` (``[B, P]`` indices, or a
boolean ``[B, L]`` mask) to project only those positions onto the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling import text as text_helpers
from bertkit.modeling.backbone import BERT
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.modeling.fast import Dropout, Linear
from bertkit.modeling.layers import ACT_FNS, BERTOnlyNSPHead, BERTPredictionHeadTransform
from bertkit.modeling.losses import accuracy, check_labels, cross_entropy, reduce

#: the batch keys :meth:`TaskModel.training_step` passes to ``forward``
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds")


class TaskModel(BERTPreTrainedModel):
    """A head over ``self.bert``. Subclasses build ``self`` heads and define ``forward``.

    The generic helpers run ``forward`` and then :meth:`loss_from_logits` /
    :meth:`predictions_from_logits`; heads override those two, not the helpers.
    """

    add_pooling_layer = False
    #: batch keys that hold the labels, in ``get_loss``'s order (QA: start and end positions)
    label_keys: tuple[str, ...] = ("labels",)

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        if num_labels is not None:
            config = config.replace(num_labels=num_labels)
        super().__init__(config)
        self.bert = BERT(config, add_pooling_layer=self.uses_pooler(config))

    @classmethod
    def uses_pooler(cls, config: BERTConfig) -> bool:
        """Whether this head's backbone has a pooler (``add_pooling_layer``; a family may read the first token
        itself instead, or pool through its shared ``head``: ModernBERT)."""
        return cls.add_pooling_layer and not config.family_spec.shared_head

    def loss_from_logits(self, logits: torch.Tensor, labels: torch.Tensor, *, reduction: str | None = "mean",
                         ignore_index: int = -100) -> torch.Tensor:
        check_labels("labels", labels, logits.shape[-1], ignore_index)
        return cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)

    def predictions_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)

    def _pooled(self, *inputs, first_real_token: bool = False, **kw_inputs) -> torch.Tensor:
        """The sentence representation ``[B, H]``: the pooled [CLS] output, the last layer computed at [CLS] alone
        (heads that read nothing else); in a ``shared_head`` family (ModernBERT) ``head`` on the sequence pooled as
        :func:`pool_sequence` says (``first_real_token``: multiple choice's first token, see there)."""
        if not self.config.family_spec.shared_head:
            if self.config.classifier_pooling == "mean":  # the pooler on the mean of the sequence (EuroBERT's)
                return self.bert.pooler.transform(pool_sequence(self.bert, "mean", *inputs, **kw_inputs))
            return self.bert.encode(*inputs, **kw_inputs, first_token_only=True).pooled_output
        return self.head(pool_sequence(self.bert, self.config.classifier_pooling, *inputs,
                                       first_real_token=first_real_token, **kw_inputs))

    def _build_shared_head(self) -> None:
        """``self.head``: the family's transform before a classifier (``Family.shared_head``: ModernBERT's ``head``,
        the MLM head's transform), else None; with it the head's keys are ``head.*`` too."""
        self.head = BERTPredictionHeadTransform(self.config) if self.config.family_spec.shared_head else None
        if self.head is not None:
            self.head_prefixes = (*type(self).head_prefixes, "head.")

    def _head(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``hidden_states`` through :meth:`_build_shared_head`'s ``head`` where the family has one."""
        return hidden_states if self.head is None else self.head(hidden_states)

    def training_step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training engine's entry point: ``(loss, metrics)`` for one batch dict.

        ``batch`` holds ``forward``'s inputs by name (:data:`INPUT_KEYS`; others are ignored)
        and the labels under :attr:`label_keys`. The loss is exactly ``get_loss`` on the same
        batch (in the same train/eval mode); ``metrics`` has ``loss`` and :meth:`step_metrics`,
        detached scalars (NaN where nothing counts).
        """
        missing = [key for key in self.label_keys if key not in batch]
        if missing:
            raise ValueError(f"{type(self).__name__}.training_step needs the labels under {list(self.label_keys)}; "
                             f"the batch lacks {missing} (it has {sorted(batch)}).")
        logits = self(**{key: batch[key] for key in INPUT_KEYS if key in batch})
        labels = batch[self.label_keys[0]] if len(self.label_keys) == 1 else tuple(batch[k] for k in self.label_keys)
        loss = self.loss_from_logits(logits, labels)
        with torch.no_grad():
            metrics = {name: value.detach() for name, value in self.step_metrics(logits, labels, batch).items()}
        return loss, {**metrics, "loss": loss.detach()}

    def step_metrics(self, logits, labels, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-batch metrics for :meth:`training_step`: accuracy of the predictions where labelled."""
        predictions = self.predictions_from_logits(logits)
        return {"accuracy": accuracy(predictions, labels.reshape(predictions.shape))}

    def get_loss(self, labels: torch.Tensor, *inputs, reduction: str | None = "mean", ignore_index: int = -100,
                 **kw_inputs) -> torch.Tensor:
        """Loss of ``forward(*inputs, **kw_inputs)`` against ``labels`` (``ignore_index`` skipped)."""
        return self.loss_from_logits(self(*inputs, **kw_inputs), labels, reduction=reduction,
                                     ignore_index=ignore_index)

    @torch.no_grad()
    def predict(self, *inputs, **kw_inputs) -> torch.Tensor:
        """The predicted labels (argmax of the logits)."""
        return self.predictions_from_logits(self(*inputs, **kw_inputs))

    @torch.no_grad()
    def get_accuracy(self, labels: torch.Tensor, *inputs, ignore_index: int = -100, **kw_inputs) -> torch.Tensor:
        """Fraction of correct predictions at positions whose label is not ``ignore_index`` (NaN if none)."""
        return accuracy(self.predict(*inputs, **kw_inputs), labels, ignore_index)


class BERTForNextSentencePrediction(TaskModel):
    """NSP head (``cls.seq_relationship``) on the pooled output; label 0 = B follows A, 1 = random."""

    hf_architecture = "BertForNextSentencePrediction"
    head_prefixes = ("cls.",)
    add_pooling_layer = True

    def __init__(self, config: BERTConfig):
        require_next_sentence(config, type(self).__name__)
        super().__init__(config)
        self.cls = BERTOnlyNSPHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        return self.cls(self._pooled(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds))


class _ClassifierHead(TaskModel):
    """dropout + ``classifier`` Linear; dropout is ``classifier_dropout`` or ``hidden_dropout_prob`` (on the pooled
    output: ``pooler_dropout`` first, where the family sets one)."""

    head_prefixes = ("classifier.",)

    def _build_classifier(self, out_features: int, pooled: bool = False) -> None:
        p = self.config.classifier_dropout
        if pooled and self.config.pooler_dropout is not None:
            p = self.config.pooler_dropout
        self._build_shared_head()
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        self.classifier = Linear(self.config.hidden_size, out_features)
        self.post_init()


class FirstTokenClassifier(nn.Module):
    """RoBERTa's sentence classifier (HF's ``RobertaClassificationHead``): dropout -> ``dense`` -> activation ->
    dropout -> ``out_proj`` on the first token's hidden state ``[B, H] -> [B, num_labels]``.

    It is BERT's pooler and classifier under one module, with a dropout before the dense layer too. The
    activation is the family's ``head_activation``: tanh (RoBERTa), gelu (ELECTRA's ``ElectraClassificationHead``).
    """

    def __init__(self, config: BERTConfig, out_features: int):
        super().__init__()
        p = config.classifier_dropout
        self.dropout = Dropout(config.hidden_dropout_prob if p is None else p)
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT_FNS[config.family_spec.head_activation]
        self.out_proj = Linear(config.hidden_size, out_features)

    def forward(self, first_token: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(self.activation(self.dense(self.dropout(first_token)))))


#: ``Family.sequence_head`` -> the module (``classifier``) that maps the first token's hidden state
#: ``[B, H]`` to ``[B, num_labels]``, built as ``head(config, num_labels)``. ``"pooler"`` is not here: BERT's
#: head is the backbone's pooler, then dropout and ``classifier``.
SEQUENCE_HEADS: dict[str, Callable[[BERTConfig, int], nn.Module]] = {"first_token": FirstTokenClassifier}


class BERTForSequenceClassification(_ClassifierHead):
    """Classifier on the pooled output: single-label, multi-label or regression.

    The head follows ``config.family_spec.sequence_head``: BERT's dropout + ``classifier`` on the
    pooled output (DistilBERT's too: its ``pre_classifier`` is the pooler, with relu, and the dropout
    ``pooler_dropout``), or (``"first_token"``, RoBERTa, ELECTRA) a :class:`FirstTokenClassifier` named
    ``classifier`` (``classifier.dense``, ``classifier.out_proj``) on the first token, without a pooler. In a
    ``shared_head`` family (ModernBERT) the pooled output is ``head`` on the pooled sequence
    (:meth:`TaskModel._pooled`), without a pooler. ``classifier_pooling`` ``"mean"`` pools the mean of the real
    tokens instead of the first token; ``"late"`` (EuroBERT's) runs the pooler's dense layer and activation, the
    dropout and ``classifier`` at every token and averages the logits over the real tokens.

    The loss follows ``config.problem_type``; when unset it is inferred as HF does:
    regression for ``num_labels == 1``, single-label for integer labels, multi-label otherwise.
    """

    hf_architecture = "BertForSequenceClassification"
    add_pooling_layer = True

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        super().__init__(config, num_labels)
        if self.config.family_spec.sequence_head in SEQUENCE_HEADS:
            self.classifier = SEQUENCE_HEADS[self.config.family_spec.sequence_head](self.config,
                                                                                   self.config.num_labels)
            self.post_init()
        else:
            self._build_classifier(self.config.num_labels, pooled=True)

    @classmethod
    def uses_pooler(cls, config: BERTConfig) -> bool:
        return config.family_spec.sequence_head == "pooler" and not config.family_spec.shared_head

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        if self.config.family_spec.sequence_head in SEQUENCE_HEADS:  # the last layer at the first token: [B, 1, H]
            first = self.bert.encode(*inputs, first_token_only=True).last_hidden_state[:, 0]
            return self.classifier(first)
        if self.config.classifier_pooling == "late" and self.bert.pooler is not None:
            mask = _padding_mask(self.bert, "late", *inputs)
            seq = self.bert.encode(*inputs).last_hidden_state
            return masked_mean(self.classifier(self.dropout(self.bert.pooler.transform(seq))), mask)  # [B, C]
        return self.classifier(self.dropout(self._pooled(*inputs)))

    def problem_type(self, labels: torch.Tensor | None = None) -> str:
        if self.config.problem_type is not None:
            return self.config.problem_type
        if self.config.num_labels == 1:
            return "regression"
        if labels is None or not labels.is_floating_point():
            return "single_label_classification"
        return "multi_label_classification"

    def loss_from_logits(self, logits, labels, *, reduction="mean", ignore_index=-100):
        kind = self.problem_type(labels)
        labels = labels.to(logits.device)
        if kind == "single_label_classification":
            return super().loss_from_logits(logits, labels.view(-1), reduction=reduction, ignore_index=ignore_index)
        if kind == "regression":
            if self.config.num_labels == 1:
                logits, labels = logits.view(-1), labels.view(-1)
            return reduce(F.mse_loss(logits.float(), labels.float(), reduction="none"), reduction)
        return reduce(F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none"),
                      reduction)

    def predictions_from_logits(self, logits):
        kind = self.problem_type()
        if kind == "regression":
            return logits.squeeze(-1) if self.config.num_labels == 1 else logits
        if kind == "multi_label_classification":
            return (logits > 0).long()
        return logits.argmax(-1)

    def step_metrics(self, logits, labels, batch):
        kind = self.problem_type(labels)
        if kind == "regression":
            return {}  # the loss is the mean squared error
        predictions = self.predictions_from_logits(logits)
        if kind == "multi_label_classification":  # every label of the example right
            return {"accuracy": (predictions == labels.long()).all(-1).float().mean()}
        return {"accuracy": accuracy(predictions, labels.view(-1))}

    def classify_text(self, tokenizer, text: str | list[str], text_pair: str | list[str] | None = None) -> list[dict]:
        """``[{"label": ..., "score": ...}]`` per text: the most probable class and its probability."""
        return text_helpers.classify_text(self, tokenizer, text, text_pair)

    @torch.no_grad()
    def get_accuracy(self, labels, *inputs, ignore_index=-100, **kw_inputs):
        """The fraction of right labels (``ignore_index`` left out); multi-label (``problem_type``, or float
        ``[B, C]`` labels): of every label of every example."""
        kind = self.problem_type(labels)
        if kind == "regression":
            raise ValueError("accuracy is undefined for regression; use get_loss (mean squared error).")
        if kind == "multi_label_classification":  # float labels say so even when the config does not
            return accuracy((self(*inputs, **kw_inputs) > 0).long(), labels.long(), ignore_index)
        return super().get_accuracy(labels.long(), *inputs, ignore_index=ignore_index, **kw_inputs)


class BERTForMultipleChoice(_ClassifierHead):
    """Scores each of C choices from its pooled output; inputs are ``[B, C, L]``, logits ``[B, C]``.

    Examples with fewer choices than others in a batch are padded with absent choices: rows whose
    ``attention_mask`` holds no token. An absent choice's logit is the dtype's lowest value, so the softmax,
    the argmax and the loss leave it out (present choices score as they would alone).

    Every family's head is this one: DistilBERT's ``pre_classifier`` and ELECTRA's ``sequence_summary`` are the
    pooler (with the family's ``head_activation``), their dropout ``pooler_dropout``."""

    hf_architecture = "BertForMultipleChoice"
    add_pooling_layer = True

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self._build_classifier(1, pooled=True)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        inputs = self.bert.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                                           batch_dims=2)  # checked as [B, C, L]: errors speak of choices
        pooled = self._pooled(**inputs.merged_batch(), first_real_token=True)  # [B, C, L, ...] -> [B*C, L, ...]
        logits = self.classifier(self.dropout(pooled)).view(inputs.batch_shape)
        mask = inputs.attention_mask
        if mask is None or mask.dim() != logits.dim() + 1:  # no mask, or one per token only ([L])
            return logits
        return logits.masked_fill(~mask.any(-1), torch.finfo(logits.dtype).min)  # absent choices


class BERTForTokenClassification(_ClassifierHead):
    """Per-token classifier (tagging, NER) over a backbone without pooler; logits ``[B, L, num_labels]``."""

    hf_architecture = "BertForTokenClassification"

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        super().__init__(config, num_labels)
        self._build_classifier(self.config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.classifier(self.dropout(self._head(seq)))


class BERTForQuestionAnswering(TaskModel):
    """Extractive QA: ``qa_outputs`` gives start and end logits ``[B, L]`` per token (after a dropout of
    ``config.qa_dropout`` where the family has one: DistilBERT)."""

    hf_architecture = "BertForQuestionAnswering"
    head_prefixes = ("qa_outputs.",)
    label_keys = ("start_positions", "end_positions")

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.qa_outputs = Linear(config.hidden_size, 2)
        self._build_shared_head()  # and a dropout after it (ModernBERT: head -> dropout -> qa_outputs)
        p = config.qa_dropout  # DistilBERT's; None: none, or after ModernBERT's head the classifier's dropout
        if p is None and self.head is not None:
            p = config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout
        self.dropout = Dropout(p or 0.0)
        # HF's span loss normalises over every position, padding included, so the padding positions'
        # logits count: this head keeps the padded path (unpadded execution would change them).
        self.bert.drops_padding = False
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> tuple[torch.Tensor, torch.Tensor]:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        start, end = self.qa_outputs(self.dropout(self._head(seq))).unbind(dim=-1)  # [B, L, 2] -> 2 x [B, L]
        return start, end

    def get_loss(self, start_positions: torch.Tensor, end_positions: torch.Tensor, *inputs,
                 reduction: str | None = "mean", **kw_inputs) -> torch.Tensor:
        """Mean of start and end cross-entropies; positions outside the sequence are ignored.

        ``reduction=None`` gives ``[B]`` (0 for ignored examples).
        """
        return self.loss_from_logits(self(*inputs, **kw_inputs), (start_positions, end_positions),
                                     reduction=reduction)

    def loss_from_logits(self, logits, labels, *, reduction="mean", ignore_index=-100):
        """``logits`` = ``(start [B, L], end [B, L])``, ``labels`` = ``(start_positions, end_positions)``;
        positions outside ``[0, L)`` are ignored (``ignore_index`` does not apply)."""
        (start_logits, end_logits), (start_positions, end_positions) = logits, labels
        length = start_logits.shape[1]
        losses = [cross_entropy(scores, positions.view(-1).clamp(0, length), ignore_index=length,
                                reduction=reduction)
                  for scores, positions in ((start_logits, start_positions), (end_logits, end_positions))]
        return (losses[0] + losses[1]) / 2

    def step_metrics(self, logits, labels, batch):
        """Exact match of the best span (within the attention mask, at most 30 tokens) with the gold one."""
        start, end = best_spans(*logits, 30, batch.get("attention_mask"))
        return {"exact_match": ((start == labels[0].view(-1)) & (end == labels[1].view(-1))).float().mean()}

    @torch.no_grad()
    def predict(self, *inputs, max_answer_length: int = 30, answer_mask: torch.Tensor | None = None,
                **kw_inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Best span ``(start [B], end [B])`` maximising ``start_logit + end_logit``.

        Spans satisfy ``start <= end < start + max_answer_length`` and lie where
        ``answer_mask [B, L]`` is true (default: the attention mask, if given).
        """
        if max_answer_length < 1:
            raise ValueError(f"max_answer_length must be >= 1, got {max_answer_length}.")
        start_logits, end_logits = self(*inputs, **kw_inputs)
        if answer_mask is None:
            answer_mask = kw_inputs.get("attention_mask", inputs[1] if len(inputs) > 1 else None)
        return best_spans(start_logits, end_logits, max_answer_length, answer_mask)

    predict_spans = predict

    def answer(self, tokenizer, question: str, context: str, *, max_answer_length: int = 30, max_length: int = 384,
               stride: int = 128, max_question_length: int = 64) -> dict:
        """The span of ``context`` that best answers ``question`` (windows of ``max_length`` tokens
        overlapping by ``stride``; a question is cut to its first ``max_question_length`` tokens):
        ``{"answer", "start", "end", "score"}`` with character offsets."""
        return text_helpers.answer(self, tokenizer, question, context, max_answer_length=max_answer_length,
                                   max_length=max_length, stride=stride, max_question_length=max_question_length)

    @torch.no_grad()
    def get_accuracy(self, start_positions: torch.Tensor, end_positions: torch.Tensor, *inputs,
                     max_answer_length: int = 30, **kw_inputs) -> torch.Tensor:
        """Exact-match rate of the predicted spans against the gold ``(start, end)``."""
        start, end = self.predict(*inputs, max_answer_length=max_answer_length, **kw_inputs)
        start_positions, end_positions = start_positions.to(start.device), end_positions.to(end.device)
        return ((start == start_positions.view(-1)) & (end == end_positions.view(-1))).float().mean()


# ---------------------------------------------------------------------------- helpers

def require_next_sentence(config: BERTConfig, model_name: str) -> None:
    """``ValueError`` unless ``config``'s family pretrains with next-sentence prediction (RoBERTa does not)."""
    if not config.family_spec.next_sentence:
        raise ValueError(f"{model_name} needs a next-sentence head, which family {config.family!r} does not have "
                         "(it is pretrained with masked LM alone); use BERTForMaskedLM.")


def pool_sequence(bert: BERT, pooling: str, *inputs, first_real_token: bool = False, **kw_inputs) -> torch.Tensor:
    """The encoder's output pooled to ``[B, H]`` as ``config.classifier_pooling`` says (HF's ModernBERT rules).

    ``"cls"``: the first token (the last layer computed there alone), or with ``first_real_token`` the first
    token the padding mask keeps (HF's ModernBERT multiple choice; its sequence classifier reads position 0
    even in a left-padded row). ``"mean"``: the mean over the tokens the padding mask keeps (all without one; an
    absent choice's row, with none, pools to 0). Per-query masks (``[B, L, S]``...) are refused: the pooling
    reads a padding mask ``[B, L]``.
    """
    if pooling == "cls" and not first_real_token:
        return bert.encode(*inputs, **kw_inputs, first_token_only=True).last_hidden_state[:, 0]
    mask = _padding_mask(bert, pooling, *inputs, **kw_inputs)
    seq = bert.encode(*inputs, **kw_inputs).last_hidden_state  # [B, L, H]
    if pooling == "cls":
        first = mask.int().argmax(dim=-1) if mask is not None else torch.zeros_like(seq[:, 0, 0], dtype=torch.long)
        return seq[torch.arange(seq.shape[0], device=seq.device), first]
    return masked_mean(seq, mask)


def _padding_mask(bert: BERT, pooling: str, *inputs, **kw_inputs) -> torch.Tensor | None:
    """The checked padding mask ``[B, L]`` (or None) of the inputs; a per-query mask is refused (pooling reads
    which tokens are real)."""
    mask = bert.validate_inputs(*inputs, **kw_inputs).attention_mask
    if mask is not None and mask.dim() != 2:
        raise ValueError(f"classifier_pooling={pooling!r} reads a padding mask attention_mask [batch, seq]; got "
                         f"one of shape {tuple(mask.shape)} (per query).")
    return mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``x [B, L, ...]`` averaged over the positions ``mask [B, L]`` keeps (all without a mask; a row with none
    gives 0)."""
    if mask is None:
        return x.mean(dim=1)
    weights = mask.to(x.dtype)[..., None]  # [B, L, 1]
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def gather_positions(sequence_output: torch.Tensor, pred_positions: torch.Tensor | None) -> torch.Tensor:
    """Hidden states at ``pred_positions``.

    None -> all ``[B, L, H]``; indices ``[B, P]`` -> ``[B, P, H]`` (d2l's ``pred_positions``);
    a boolean mask ``[B, L]`` -> ``[N, H]`` for its N true positions (row-major order).
    """
    if pred_positions is None:
        return sequence_output
    if pred_positions.dtype == torch.bool:
        if pred_positions.shape != sequence_output.shape[:2]:
            raise ValueError(f"a boolean pred_positions must be [batch, seq] = {tuple(sequence_output.shape[:2])}, "
                             f"got {tuple(pred_positions.shape)}.")
        return sequence_output[pred_positions]
    if pred_positions.dim() != 2 or pred_positions.shape[0] != sequence_output.shape[0]:
        raise ValueError(f"pred_positions must be [batch, num_predictions] indices, got {tuple(pred_positions.shape)}.")
    check_labels("pred_positions", pred_positions, sequence_output.shape[1], None)
    index = pred_positions.unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])  # [B, P] -> [B, P, H]
    return sequence_output.gather(1, index)


def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, max_answer_length: int,
               answer_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax over valid spans of ``start_logits[i] + end_logits[j]``; returns ``(start [B], end [B])``."""
    length = start_logits.shape[1]
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # [B, L(start), L(end)]
    i = torch.arange(length, device=scores.device)
    valid = (i[None, :] >= i[:, None]) & (i[None, :] < i[:, None] + max_answer_length)  # [L, L]
    valid = valid[None]
    if answer_mask is not None:
        ok = answer_mask.to(scores.device).bool()
        valid = valid & ok[:, :, None] & ok[:, None, :]
    best = scores.masked_fill(~valid, float("-inf")).flatten(1).argmax(-1)
    return best // length, best % length

