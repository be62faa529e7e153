"""Language-model heads: pretraining (MLM + NSP), masked LM and causal LM, sharing one MLM scorer.

MLM heads accept ``pred_positions`` (``[B, P]`` indices or a boolean ``[B, L]`` mask) to
project only those positions onto the vocabulary, and their losses project only the
labelled positions: every MLM loss here (``get_loss``, ``get_mlm_loss``, ``training_step``)
is :func:`bertkit.modeling.losses.masked_lm_losses`, reduced. Masking for pretraining is
:func:`bertkit.masking.mask_tokens`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.config import BERTConfig
from bertkit.masking import mask_tokens
from bertkit.modeling import text as text_helpers
from bertkit.modeling.cache import KVCache
from bertkit.modeling.heads import TaskModel, gather_positions, require_next_sentence
from bertkit.modeling.layers import BERTOnlyMLMHead, BERTPreTrainingHeads
from bertkit.modeling.losses import (
    MaskedLMLosses,
    accuracy,
    check_labels,
    check_reduction,
    cross_entropy,
    masked_lm_loss,
    masked_lm_losses,
    reduce,
)


class _SpecDefault(int):
    """An int default that can be told apart from the same value passed explicitly."""


_MASK_ID_DEFAULT = _SpecDefault(103)


class _MaskedLMMixin:
    """Vocabulary scoring through ``self.cls.predictions``, dense or at chosen positions only."""

    def _mlm_scores(self, sequence_output: torch.Tensor, pred_positions: torch.Tensor | None) -> torch.Tensor:
        return self.cls.predictions(gather_positions(sequence_output, pred_positions))

    def _mlm_losses(self, sequence_output: torch.Tensor, labels: torch.Tensor,
                    ignore_index: int = -100) -> MaskedLMLosses:
        return masked_lm_losses(self.cls.predictions, sequence_output, labels, vocab_size=self.config.vocab_size,
                                ignore_index=ignore_index)

    def _mlm_step(self, sequence_output: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Mean MLM loss over labelled positions (0, graph kept, when there are none) and its metrics."""
        out = self._mlm_losses(sequence_output, labels)
        loss = reduce(out.losses, "mean", out.valid)
        targets = labels[out.valid]
        if targets.numel() == 0:
            accuracy_ = torch.tensor(float("nan"), device=labels.device)
        else:
            accuracy_ = (out.predictions == targets).float().mean()
        return loss, {"mlm_loss": loss.detach(), "mlm_accuracy": accuracy_.detach(), "mlm_tokens": out.valid.sum()}

    def training_step(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training engine's entry point: ``(loss, metrics)`` for one batch dict.

        ``batch``: ``input_ids``, ``attention_mask``, ``token_type_ids`` and ``mlm_labels``
        (-100 where nothing is predicted; ``labels`` is accepted too), plus ``nsp_labels`` for
        models with an NSP head. Metrics are detached scalars (``loss``, ``mlm_loss``,
        ``mlm_accuracy``, ``mlm_tokens``, and ``nsp_loss`` / ``nsp_accuracy`` with NSP).
        """
        seq, pooled = self.bert(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        labels = batch["mlm_labels"] if "mlm_labels" in batch else batch["labels"]
        loss, metrics = self._mlm_step(seq, labels)
        if "nsp_labels" in batch and pooled is not None:
            nsp_scores = self.cls.seq_relationship(pooled).float()
            nsp_labels = batch["nsp_labels"].view(-1)
            nsp_loss = F.cross_entropy(nsp_scores, nsp_labels)
            loss = loss + nsp_loss
            metrics.update(nsp_loss=nsp_loss.detach(),
                           nsp_accuracy=(nsp_scores.argmax(-1) == nsp_labels).float().mean())
        metrics["loss"] = loss.detach()
        return loss, metrics

    def _mlm_loss(self, sequence_output, labels, ignore_index, reduction):
        return masked_lm_loss(self.cls.predictions, sequence_output, labels, vocab_size=self.config.vocab_size,
                              ignore_index=ignore_index, reduction=reduction)

    def _mlm_accuracy(self, sequence_output, labels, ignore_index) -> torch.Tensor:
        labels = labels.to(sequence_output.device)
        valid = labels != ignore_index
        predictions = self.cls.predictions(sequence_output[valid]).argmax(-1)
        return accuracy(predictions, labels[valid], ignore_index=None) if valid.any() \
            else torch.tensor(float("nan"), device=labels.device)

    def fill_mask(self, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each mask token in ``text``, the ``top_k`` likeliest ``(token, probability)`` pairs."""
        return text_helpers.fill_mask(self, tokenizer, text, top_k)

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
        require_next_sentence(config, type(self).__name__)
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
        check_labels("nsp_labels", nsp_labels, 2, ignore_index)
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
            out = self._mlm_losses(seq, mlm_labels, ignore_index)
            mlm = out.losses.sum(dim=1) / out.valid.sum(dim=1).clamp(min=1)
        else:
            mlm = self._mlm_loss(seq, mlm_labels, ignore_index, reduction)
        return mlm_weight * mlm + nsp_weight * nsp

    def get_loss_from_text(self, tokenizer, text_a: str, text_b: str | None = None, *, nsp_label: int = 0,
                           device: str = "cpu", mask_token_id: int | None = None, mlm_probability: float = 0.15,
                           mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, ignore_index: int = -100,
                           reduction: str | None = "mean", mlm_weight: float = 1.0,
                           nsp_weight: float = 1.0) -> torch.Tensor:
        """Pretraining loss straight from text: tokenize the pair, mask it (80/10/10), run :meth:`get_loss`.

        ``device`` is where the inputs go ("cpu", "gpu" = CUDA or MPS, or a torch device); the
        model must already be there. ``mask_token_id`` defaults to the tokenizer's mask token.
        """
        return text_helpers.loss_from_text(
            self, tokenizer, text_a, text_b, nsp_label=nsp_label, device=device, mask_token_id=mask_token_id,
            mlm_probability=mlm_probability, mask_replace_prob=mask_replace_prob,
            random_replace_prob=random_replace_prob, ignore_index=ignore_index, reduction=reduction,
            mlm_weight=mlm_weight, nsp_weight=nsp_weight)

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
    """MLM head (``cls.predictions``) over a backbone without pooler (HF's ``BertForMaskedLM``, or
    ``RobertaForMaskedLM`` with its ``lm_head`` for a ``"roberta"`` family config)."""

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

    def step_metrics(self, logits, labels, batch):
        """Next-token accuracy where labelled (the loss is the log-perplexity)."""
        return {"accuracy": accuracy(logits[:, :-1].argmax(-1), labels[:, 1:])}

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
            if tokens.shape[1] >= self.config.max_tokens:
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
