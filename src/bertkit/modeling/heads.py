"""Task models: each a thin head over the :class:`~bertkit.BERT` backbone ``self.bert``.

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

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.backbone import BERT
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.modeling.cache import KVCache
from bertkit.modeling.layers import BERTOnlyMLMHead, BERTOnlyNSPHead, BERTPreTrainingHeads
from bertkit.modeling.losses import accuracy, check_reduction, cross_entropy, reduce
from bertkit.modeling.masking import mask_tokens


class _SpecDefault(int):
    """An int default that can be told apart from the same value passed explicitly."""


_MASK_ID_DEFAULT = _SpecDefault(103)


class TaskModel(BERTPreTrainedModel):
    """A head over ``self.bert``. Subclasses build ``self`` heads and define ``forward``.

    The generic helpers run ``forward`` and then :meth:`loss_from_logits` /
    :meth:`predictions_from_logits`; heads override those two, not the helpers.
    """

    add_pooling_layer = False

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        if num_labels is not None:
            config = config.replace(num_labels=num_labels)
        super().__init__(config)
        self.bert = BERT(config, add_pooling_layer=self.add_pooling_layer)

    def loss_from_logits(self, logits: torch.Tensor, labels: torch.Tensor, *, reduction: str | None = "mean",
                         ignore_index: int = -100) -> torch.Tensor:
        _check_labels("labels", labels, logits.shape[-1], ignore_index)
        return cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)

    def predictions_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)

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


class _MaskedLMMixin:
    """Vocabulary scoring through ``self.cls.predictions``, dense or at chosen positions only."""

    def _mlm_scores(self, sequence_output: torch.Tensor, pred_positions: torch.Tensor | None) -> torch.Tensor:
        return self.cls.predictions(gather_positions(sequence_output, pred_positions))

    def _mlm_token_losses(self, sequence_output: torch.Tensor, labels: torch.Tensor,
                          ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position MLM loss ``[B, L]`` (0 where ignored) and the validity mask; projects only labelled tokens."""
        _check_labels("mlm_labels", labels, self.config.vocab_size, ignore_index)
        valid = labels != ignore_index
        scores = self.cls.predictions(sequence_output[valid])  # [N, V]
        losses = sequence_output.new_zeros(labels.shape, dtype=torch.float32)
        losses = losses.masked_scatter(valid, F.cross_entropy(scores.float(), labels[valid], reduction="none"))
        return losses, valid

    def _mlm_loss(self, sequence_output, labels, ignore_index, reduction):
        losses, valid = self._mlm_token_losses(sequence_output, labels, ignore_index)
        return reduce(losses, reduction, valid)

    def _mlm_accuracy(self, sequence_output, labels, ignore_index) -> torch.Tensor:
        valid = labels != ignore_index
        predictions = self.cls.predictions(sequence_output[valid]).argmax(-1)
        return accuracy(predictions, labels[valid], ignore_index=None) if valid.any() \
            else torch.tensor(float("nan"), device=labels.device)

    def create_masked_lm_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                                special_tokens_mask: torch.Tensor | None = None, *,
                                mask_token_id: int = _MASK_ID_DEFAULT, mlm_probability: float = 0.15,
                                mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                                ignore_index: int = -100,
                                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """BERT's 80/10/10 corruption; returns ``(masked_input_ids, mlm_labels)``.

        ``mask_token_id`` left at its default uses ``config.mask_token_id`` (103 for the
        bert-base-uncased vocabulary; a model trained on its own vocabulary stores its own);
        an explicitly passed id always wins. Padding, positions flagged in
        ``special_tokens_mask`` and (without that mask) the config's special ids are never
        selected; random replacements are drawn from non-special ids. Seed with ``generator``.
        """
        if isinstance(mask_token_id, _SpecDefault):
            mask_token_id = self.config.mask_token_id
            if mask_token_id is None:
                raise ValueError("config.mask_token_id is unset (the vocabulary is smaller than "
                                 "bert-base-uncased's); pass mask_token_id= explicitly.")
        return mask_tokens(input_ids, vocab_size=self.config.vocab_size, mask_token_id=mask_token_id,
                           attention_mask=attention_mask, special_tokens_mask=special_tokens_mask,
                           special_token_ids=self.config.special_token_ids, mlm_probability=mlm_probability,
                           mask_replace_prob=mask_replace_prob, random_replace_prob=random_replace_prob,
                           ignore_index=ignore_index, generator=generator)


class BERTForPreTraining(_MaskedLMMixin, TaskModel):
    """MLM + NSP heads (``cls.predictions``, ``cls.seq_relationship``) over a pooled backbone."""

    hf_architecture = "BertForPreTraining"
    head_prefixes = ("cls.",)
    add_pooling_layer = True

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.cls = BERTPreTrainingHeads(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, *, pred_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(prediction_scores [B, L, V] (or at pred_positions), seq_relationship_scores [B, 2])``."""
        seq, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_scores(seq, pred_positions), self.cls.seq_relationship(pooled)

    def get_mlm_loss(self, mlm_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                     position_ids=None, inputs_embeds=None, *, ignore_index: int = -100,
                     reduction: str | None = "mean") -> torch.Tensor:
        """MLM cross-entropy over labelled positions; ``reduction=None`` gives ``[B, L]`` (0 where ignored)."""
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_loss(seq, mlm_labels, ignore_index, reduction)

    def get_nsp_loss(self, nsp_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                     position_ids=None, inputs_embeds=None, *, reduction: str | None = "mean") -> torch.Tensor:
        """NSP cross-entropy; ``reduction=None`` gives ``[B]``."""
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._nsp_loss(pooled, nsp_labels, reduction)

    def _nsp_loss(self, pooled, nsp_labels, reduction, ignore_index: int = -100):
        logits = self.cls.seq_relationship(pooled)
        _check_labels("nsp_labels", nsp_labels, 2, ignore_index)
        return cross_entropy(logits, nsp_labels.view(-1), ignore_index=ignore_index, reduction=reduction)

    def get_loss(self, mlm_labels, nsp_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                 position_ids=None, inputs_embeds=None, *, mlm_weight: float = 1.0, nsp_weight: float = 1.0,
                 ignore_index: int = -100, reduction: str | None = "mean") -> torch.Tensor:
        """``mlm_weight * MLM + nsp_weight * NSP`` from one backbone pass.

        ``reduction=None`` gives ``[B]``: each example's mean over its labelled tokens (0
        if none) weighted, plus its weighted NSP loss. ``ignore_index`` marks unlabelled
        tokens and NSP examples alike (0 where ignored).
        """
        check_reduction(reduction)
        seq, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        nsp = self._nsp_loss(pooled, nsp_labels, reduction, ignore_index)
        if reduction is None:
            losses, valid = self._mlm_token_losses(seq, mlm_labels, ignore_index)
            mlm = losses.sum(dim=1) / valid.sum(dim=1).clamp(min=1)
        else:
            mlm = self._mlm_loss(seq, mlm_labels, ignore_index, reduction)
        return mlm_weight * mlm + nsp_weight * nsp

    @torch.no_grad()
    def predict_mlm_token_ids(self, input_ids=None, attention_mask=None, token_type_ids=None,
                              position_ids=None, inputs_embeds=None) -> torch.Tensor:
        """Argmax token id at every position ``[B, L]``."""
        return self(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)[0].argmax(-1)

    @torch.no_grad()
    def predict_nsp_labels(self, input_ids=None, attention_mask=None, token_type_ids=None,
                           position_ids=None, inputs_embeds=None) -> torch.Tensor:
        """Predicted NSP label ``[B]`` (0 = B follows A, 1 = random)."""
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.cls.seq_relationship(pooled).argmax(-1)

    @torch.no_grad()
    def get_mlm_accuracy(self, mlm_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                         position_ids=None, inputs_embeds=None, *, ignore_index: int = -100) -> torch.Tensor:
        """Accuracy at labelled positions (NaN when there are none)."""
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_accuracy(seq, mlm_labels, ignore_index)

    @torch.no_grad()
    def get_nsp_accuracy(self, nsp_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                         position_ids=None, inputs_embeds=None) -> torch.Tensor:
        """NSP accuracy over examples whose label is not -100."""
        predictions = self.predict_nsp_labels(input_ids, attention_mask, token_type_ids, position_ids,
                                              inputs_embeds)
        return accuracy(predictions, nsp_labels.view(-1))

    @torch.no_grad()
    def get_accuracy(self, mlm_labels, nsp_labels, input_ids=None, attention_mask=None, token_type_ids=None,
                     position_ids=None, inputs_embeds=None, *, ignore_index: int = -100,
                     mlm_weight: float = 1.0, nsp_weight: float = 1.0) -> tuple[torch.Tensor, ...]:
        """``(mlm_acc, nsp_acc, weighted)``; weighted falls back to ``nsp_acc`` when ``mlm_acc`` is NaN."""
        seq, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        mlm_acc = self._mlm_accuracy(seq, mlm_labels, ignore_index)
        nsp_acc = accuracy(self.cls.seq_relationship(pooled).argmax(-1), nsp_labels.view(-1), ignore_index)
        if torch.isnan(mlm_acc):
            return mlm_acc, nsp_acc, nsp_acc
        return mlm_acc, nsp_acc, (mlm_weight * mlm_acc + nsp_weight * nsp_acc) / (mlm_weight + nsp_weight)


class BERTForMaskedLM(_MaskedLMMixin, TaskModel):
    """MLM head (``cls.predictions``) over a backbone without pooler."""

    hf_architecture = "BertForMaskedLM"
    head_prefixes = ("cls.",)

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.cls = BERTOnlyMLMHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, *, pred_positions: torch.Tensor | None = None) -> torch.Tensor:
        """``prediction_scores [B, L, V]``, or only at ``pred_positions``."""
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_scores(seq, pred_positions)

    def get_loss(self, labels, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                 inputs_embeds=None, *, ignore_index: int = -100, reduction: str | None = "mean") -> torch.Tensor:
        """MLM loss, projecting only labelled positions onto the vocabulary."""
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_loss(seq, labels, ignore_index, reduction)

    @torch.no_grad()
    def get_accuracy(self, labels, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                     inputs_embeds=None, *, ignore_index: int = -100) -> torch.Tensor:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._mlm_accuracy(seq, labels, ignore_index)

    predict_token_ids = TaskModel.predict


class BERTForCausalLM(TaskModel):
    """Left-to-right LM head over a decoder backbone (``is_decoder=True``), with KV caching.

    ``forward`` takes the backbone's full signature (cross-attention, cache) and returns
    ``logits [B, L, V]``. ``get_loss`` shifts: position t predicts token t+1.
    """

    hf_architecture = "BertLMHeadModel"
    head_prefixes = ("cls.",)

    def __init__(self, config: BERTConfig):
        if not config.is_decoder:
            raise ValueError("BERTForCausalLM needs a decoder: build it with BERTConfig(is_decoder=True) "
                             "(the bert_for_causal_lm_* factories set it).")
        super().__init__(config)
        self.cls = BERTOnlyMLMHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, encoder_hidden_states=None, encoder_attention_mask=None,
                past_key_values=None, use_cache: bool | None = None, cache_position=None) -> torch.Tensor:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                           encoder_hidden_states, encoder_attention_mask, past_key_values, use_cache,
                           cache_position)
        return self.cls.predictions(seq)

    def loss_from_logits(self, logits, labels, *, reduction="mean", ignore_index=-100):
        """Next-token loss: ``logits[:, :-1]`` against ``labels[:, 1:]``; ``None`` gives ``[B, L-1]``."""
        return super().loss_from_logits(logits[:, :-1], labels[:, 1:], reduction=reduction,
                                        ignore_index=ignore_index)

    @torch.no_grad()
    def get_perplexity(self, labels: torch.Tensor, *inputs, ignore_index: int = -100, **kw_inputs) -> torch.Tensor:
        """``exp`` of the mean next-token loss."""
        return self.get_loss(labels, *inputs, ignore_index=ignore_index, **kw_inputs).exp()

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 20, *, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, eos_token_id: int | None = None,
                 encoder_hidden_states: torch.Tensor | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Extend ``input_ids [B, L]`` by up to ``max_new_tokens``, greedy or sampled, with its own cache.

        Sequences that emit ``eos_token_id`` keep emitting it; returns ``[B, L + n]``.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        cache = KVCache()
        tokens, step_ids = input_ids, input_ids
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for _ in range(max_new_tokens):
            if tokens.shape[1] >= self.config.max_position_embeddings:
                break
            logits = self(step_ids, encoder_hidden_states=encoder_hidden_states, past_key_values=cache,
                          use_cache=True)[:, -1].float()
            if do_sample:
                logits = logits / temperature
                if top_k is not None:
                    kth = logits.topk(min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                next_ids = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
            else:
                next_ids = logits.argmax(-1)
            if eos_token_id is not None:
                next_ids = next_ids.masked_fill(done, eos_token_id)
                done |= next_ids == eos_token_id
            step_ids = next_ids[:, None]
            tokens = torch.cat([tokens, step_ids], dim=1)
            if eos_token_id is not None and bool(done.all()):
                break
        return tokens


class BERTForNextSentencePrediction(TaskModel):
    """NSP head (``cls.seq_relationship``) on the pooled output; label 0 = B follows A, 1 = random."""

    hf_architecture = "BertForNextSentencePrediction"
    head_prefixes = ("cls.",)
    add_pooling_layer = True

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.cls = BERTOnlyNSPHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.cls(pooled)


class _ClassifierHead(TaskModel):
    """dropout + ``classifier`` Linear; dropout is ``classifier_dropout`` or ``hidden_dropout_prob``."""

    head_prefixes = ("classifier.",)

    def _build_classifier(self, out_features: int) -> None:
        p = self.config.classifier_dropout
        self.dropout = nn.Dropout(self.config.hidden_dropout_prob if p is None else p)
        self.classifier = nn.Linear(self.config.hidden_size, out_features)
        self.post_init()


class BERTForSequenceClassification(_ClassifierHead):
    """Classifier on the pooled output: single-label, multi-label or regression.

    The loss follows ``config.problem_type``; when unset it is inferred as HF does:
    regression for ``num_labels == 1``, single-label for integer labels, multi-label otherwise.
    """

    hf_architecture = "BertForSequenceClassification"
    add_pooling_layer = True

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        super().__init__(config, num_labels)
        self._build_classifier(self.config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.classifier(self.dropout(pooled))

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

    def get_accuracy(self, labels, *inputs, ignore_index=-100, **kw_inputs):
        if self.problem_type(labels) == "regression":
            raise ValueError("accuracy is undefined for regression; use get_loss (mean squared error).")
        return super().get_accuracy(labels.long(), *inputs, ignore_index=ignore_index, **kw_inputs)


class BERTForMultipleChoice(_ClassifierHead):
    """Scores each of C choices from its pooled output; inputs are ``[B, C, L]``, logits ``[B, C]``."""

    hf_architecture = "BertForMultipleChoice"
    add_pooling_layer = True

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self._build_classifier(1)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        ref = input_ids if input_ids is not None else inputs_embeds
        if ref is None or ref.dim() < 3:
            raise ValueError("BERTForMultipleChoice takes input_ids [batch, choices, seq] "
                             "(or inputs_embeds [batch, choices, seq, hidden]).")
        batch, choices = ref.shape[:2]

        def flat(t):  # [B, C, L, ...] -> [B*C, L, ...]
            return None if t is None else t.reshape(batch * choices, *t.shape[2:])

        _, pooled = self.bert(flat(input_ids), flat(attention_mask), flat(token_type_ids), flat(position_ids),
                              flat(inputs_embeds))
        return self.classifier(self.dropout(pooled)).view(batch, choices)


class BERTForTokenClassification(_ClassifierHead):
    """Per-token classifier (tagging, NER) over a backbone without pooler; logits ``[B, L, num_labels]``."""

    hf_architecture = "BertForTokenClassification"

    def __init__(self, config: BERTConfig, num_labels: int | None = None):
        super().__init__(config, num_labels)
        self._build_classifier(self.config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.classifier(self.dropout(seq))


class BERTForQuestionAnswering(TaskModel):
    """Extractive QA: ``qa_outputs`` gives start and end logits ``[B, L]`` per token."""

    hf_architecture = "BertForQuestionAnswering"
    head_prefixes = ("qa_outputs.",)

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> tuple[torch.Tensor, torch.Tensor]:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        start, end = self.qa_outputs(seq).unbind(dim=-1)  # [B, L, 2] -> 2 x [B, L]
        return start, end

    def get_loss(self, start_positions: torch.Tensor, end_positions: torch.Tensor, *inputs,
                 reduction: str | None = "mean", **kw_inputs) -> torch.Tensor:
        """Mean of start and end cross-entropies; positions outside the sequence are ignored.

        ``reduction=None`` gives ``[B]`` (0 for ignored examples).
        """
        start_logits, end_logits = self(*inputs, **kw_inputs)
        length = start_logits.shape[1]
        losses = [cross_entropy(logits, positions.view(-1).clamp(0, length), ignore_index=length,
                                reduction=reduction)
                  for logits, positions in ((start_logits, start_positions), (end_logits, end_positions))]
        return (losses[0] + losses[1]) / 2

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

    @torch.no_grad()
    def get_accuracy(self, start_positions: torch.Tensor, end_positions: torch.Tensor, *inputs,
                     max_answer_length: int = 30, **kw_inputs) -> torch.Tensor:
        """Exact-match rate of the predicted spans against the gold ``(start, end)``."""
        start, end = self.predict(*inputs, max_answer_length=max_answer_length, **kw_inputs)
        return ((start == start_positions.view(-1)) & (end == end_positions.view(-1))).float().mean()


# ---------------------------------------------------------------------------- helpers

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
    _check_labels("pred_positions", pred_positions, sequence_output.shape[1], None)
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
        ok = answer_mask.bool()
        valid = valid & ok[:, :, None] & ok[:, None, :]
    best = scores.masked_fill(~valid, float("-inf")).flatten(1).argmax(-1)
    return best // length, best % length


def _check_labels(name: str, labels: torch.Tensor, num_classes: int, ignore_index: int | None) -> None:
    """Raise a ValueError naming ``name`` when a label is outside ``[0, num_classes)`` (ignore_index allowed)."""
    if labels.is_floating_point() or labels.numel() == 0:
        return
    bad = (labels < 0) | (labels >= num_classes)
    if ignore_index is not None:
        bad &= labels != ignore_index
    if bool(bad.any()):
        value = int(labels[bad][0])
        raise ValueError(f"{name} holds {value}, outside [0, {num_classes})"
                         + (f" and not the ignore index {ignore_index}" if ignore_index is not None else "")
                         + "; check the labels match this model's head.")
