"""ELECTRA's replaced-token detection: the discriminator's head (HF's ``ElectraForPreTraining``).

An ELECTRA model is a :class:`~bertkit.BERT` backbone of a ``family="electra"`` config (embeddings of width
``embedding_size`` projected to ``hidden_size``; :func:`bertkit.presets.ELECTRAConfig`); the generator is
:class:`~bertkit.BERTForMaskedLM` of such a config (its MLM head projects to ``embedding_size``, HF's
``generator_predictions`` / ``generator_lm_head``) and the fine-tuning heads are the ``BERTFor*`` classes. Only
the discriminator's head is ELECTRA's own: :class:`ELECTRAForPreTraining`, one logit per token, 1 = replaced.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.fast import Linear
from bertkit.modeling.heads import TaskModel
from bertkit.modeling.layers import activation
from bertkit.modeling.losses import accuracy, check_labels, reduce


class ELECTRADiscriminatorHead(nn.Module):
    """``dense`` (H -> H) -> ``hidden_act`` -> ``dense_prediction`` (H -> 1): ``[..., H] -> [...]`` logits (HF's
    ``ElectraDiscriminatorPredictions``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config)
        self.dense_prediction = Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)


def replaced_token_loss(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                        ignore_index: int = -100, reduction: str | None = "mean") -> torch.Tensor:
    """Binary cross-entropy of the discriminator's ``logits [B, L]`` against ``labels [B, L]`` (1 = replaced,
    0 = original), over the real tokens (``attention_mask``, when given) whose label is not ``ignore_index``:
    HF's ``ElectraForPreTraining`` loss (which has no ignore index). ``"mean"`` over the counted tokens (0 when
    there are none), ``"sum"``, or None: ``[B, L]`` with 0 where not counted."""
    check_labels("labels", labels, 2, ignore_index)
    labels = labels.to(logits.device)
    valid = labels != ignore_index
    if attention_mask is not None:
        valid = valid & attention_mask.to(logits.device).reshape(labels.shape).bool()
    losses = F.binary_cross_entropy_with_logits(logits.float(), labels.clamp(min=0).float(), reduction="none")
    return reduce(losses, reduction, valid)


class ELECTRAForPreTraining(TaskModel):
    """ELECTRA's discriminator: which tokens a generator replaced. ``forward`` returns one logit per token
    ``[B, L]`` (> 0: replaced); ``get_loss`` is HF's binary cross-entropy over the real tokens.

    Its head is ``discriminator_predictions`` (:class:`ELECTRADiscriminatorHead`); checkpoints are HF's
    ``ElectraForPreTraining`` (``google/electra-*-discriminator``). Built from a family with the head
    (``Family.discriminator``: ELECTRA); ``ValueError`` otherwise.
    """

    hf_architecture = "ElectraForPreTraining"
    head_prefixes = ("discriminator_predictions.",)

    def __init__(self, config: BERTConfig):
        if not config.family_spec.discriminator:
            raise ValueError(f"ELECTRAForPreTraining needs ELECTRA's discriminator head, which family "
                             f"{config.family!r} does not have; build it from bertkit.ELECTRAConfig(...) "
                             "(family='electra').")
        super().__init__(config)
        self.discriminator_predictions = ELECTRADiscriminatorHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None) -> torch.Tensor:
        seq, _ = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self.discriminator_predictions(seq)

    def get_loss(self, labels: torch.Tensor, input_ids=None, attention_mask=None, token_type_ids=None,
                 position_ids=None, inputs_embeds=None, *, ignore_index: int = -100,
                 reduction: str | None = "mean") -> torch.Tensor:
        """:func:`replaced_token_loss` of ``forward``'s logits (``labels [B, L]``: 1 = replaced)."""
        logits = self(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return replaced_token_loss(logits, labels, attention_mask, ignore_index=ignore_index, reduction=reduction)

    def loss_from_logits(self, logits, labels, *, reduction="mean", ignore_index=-100):
        """Over every token whose label is not ``ignore_index`` (:meth:`get_loss` leaves padding out too)."""
        return replaced_token_loss(logits, labels, ignore_index=ignore_index, reduction=reduction)

    def predictions_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return (logits > 0).long()

    def training_step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, metrics)``: :meth:`get_loss` of the batch's ``labels`` (padding left out), its accuracy."""
        labels, mask = batch["labels"], batch.get("attention_mask")
        logits = self(batch["input_ids"], mask, batch.get("token_type_ids"))
        loss = replaced_token_loss(logits, labels, mask)
        counted = labels.masked_fill(mask == 0, -100) if mask is not None else labels
        with torch.no_grad():
            acc = accuracy(self.predictions_from_logits(logits), counted.to(logits.device))
        return loss, {"accuracy": acc.detach(), "loss": loss.detach()}
