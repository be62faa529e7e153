"""ELECTRA's replaced-token detection: the discriminator's head (HF's ``ElectraForPreTraining``) and the pretraining
objective that trains it with a generator (:class:`ELECTRAForPretrainingRTD`).

An ELECTRA model is a :class:`~bertkit.BERT` backbone of a ``family="electra"`` config (embeddings of width
``embedding_size`` projected to ``hidden_size``; :func:`bertkit.presets.ELECTRAConfig`); the generator is
:class:`~bertkit.BERTForMaskedLM` of such a config (its MLM head projects to ``embedding_size``, HF's
``generator_predictions`` / ``generator_lm_head``) and the fine-tuning heads are the ``BERTFor*`` classes. Only
the discriminator's head is ELECTRA's own: :class:`ELECTRAForPreTraining`, one logit per token, 1 = replaced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.fast import Linear
from bertkit.modeling.heads import TaskModel
from bertkit.modeling.layers import activation
from bertkit.modeling.lm_heads import BERTForMaskedLM
from bertkit.modeling.losses import accuracy, check_labels, cross_entropy, reduce


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


# ---------------------------------------------------------------------------- the pretraining objective

def generator_config(discriminator: BERTConfig, hidden_ratio: float = 0.25) -> BERTConfig:
    """The config of a generator for ``discriminator``, sized as ELECTRA's paper and code do: ``hidden_size`` times
    ``hidden_ratio`` (1/4 for ELECTRA-Small and -Large, 1/3 for -Base), a feed-forward block 4x as wide, one head per
    64 dimensions (at least one, dividing the width); the embedding tables (``embedding_size``: the discriminator's
    width), vocabulary, positions and dropouts are the discriminator's, so the two can share embeddings."""
    if not 0 < hidden_ratio <= 1:
        raise ValueError(f"hidden_ratio must lie in (0, 1], got {hidden_ratio!r}.")
    hidden = max(1, round(discriminator.hidden_size * hidden_ratio))
    heads = max(d for d in range(1, max(1, hidden // 64) + 1) if hidden % d == 0)
    return discriminator.replace(hidden_size=hidden, intermediate_size=4 * hidden, num_attention_heads=heads,
                                 embedding_size=discriminator.embedding_width)


def sample_tokens(logits: torch.Tensor, temperature: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of ``logits [N, V]``, drawn from ``softmax(logits / temperature)``: ``[N]``. Not
    differentiable (ELECTRA passes no gradient through the generator's samples)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}.")
    if logits.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=logits.device)
    probabilities = (logits.detach().float() / temperature).softmax(-1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)


@dataclass
class ReplacedTokenDetectionOutput:
    """What :meth:`ELECTRAForPretrainingRTD.forward` computed for one batch ``[B, L]`` with N masked tokens."""

    #: ``mlm_loss + discriminator_weight * discriminator_loss``
    loss: torch.Tensor
    #: the generator's cross-entropy at the masked tokens (mean; 0 when none is masked)
    mlm_loss: torch.Tensor
    #: the discriminator's binary cross-entropy over the real tokens of ``corrupted_ids`` (mean)
    discriminator_loss: torch.Tensor
    #: ``[B, L]`` the discriminator's logits (> 0: replaced)
    discriminator_logits: torch.Tensor
    #: ``[B, L]`` the generator's input: ``input_ids`` masked (or as given with ``mlm_labels``)
    masked_ids: torch.Tensor
    #: ``[B, L]`` original ids, -100 where nothing was masked
    mlm_labels: torch.Tensor
    #: ``[B, L]`` the discriminator's input: ``masked_ids`` with the generator's samples at the masked tokens
    corrupted_ids: torch.Tensor
    #: ``[B, L]`` 1 where ``corrupted_ids`` differs from the original token (a sample equal to it counts as original)
    replaced: torch.Tensor
    #: ``[N]`` the generator's most likely token at each masked position (row-major order)
    mlm_predictions: torch.Tensor


class ELECTRAForPretrainingRTD(nn.Module):
    """ELECTRA's pretraining (Clark et al., 2020): a small generator (:class:`~bertkit.BERTForMaskedLM`) fills the
    masked tokens with samples of its MLM distribution, and the discriminator (:class:`ELECTRAForPreTraining`)
    tells every token of the result original or replaced. Both train jointly on
    ``mlm_loss + discriminator_weight * discriminator_loss`` (the paper's lambda = 50); no gradient flows from
    the discriminator into the generator through the samples.

    With ``share_embeddings`` (the paper's setting) the generator's embeddings (word, position, token-type tables
    and their LayerNorm, all ``embedding_size`` wide) are the discriminator's module, so the generator's output
    layer, tied to its word embeddings, is the shared table too; each model keeps its own ``embeddings_project``.

    Args:
        discriminator: an :class:`ELECTRAForPreTraining`, or the ``family="electra"`` config to build one.
        generator: a :class:`~bertkit.BERTForMaskedLM`, its config, or None: :func:`generator_config` of the
            discriminator's (a quarter of its width). Its vocabulary, embedding width, positions, token types,
            padding id and family must be the discriminator's (``ValueError`` naming the field otherwise).
        discriminator_weight: lambda, the discriminator loss's weight.
        temperature: of the generator's sampling distribution.
        share_embeddings: share the embedding module (built models must then hold equal embeddings:
            ``ValueError`` otherwise; the generator's are dropped for the discriminator's).
        mlm_probability: the share of tokens masked when :meth:`forward` masks them itself (ELECTRA: 15%, of
            which 85% become the mask token and 15% stay as they are).

    After training, ``discriminator`` is the model to fine-tune; :meth:`save_pretrained` writes both as HF
    checkpoints (``ElectraForPreTraining``, ``ElectraForMaskedLM``).
    """

    #: ELECTRA's split of the masked tokens: 85% the mask token, none random, the rest unchanged
    MASK_REPLACE_PROB = 0.85

    def __init__(self, discriminator: ELECTRAForPreTraining | BERTConfig,
                 generator: BERTForMaskedLM | BERTConfig | None = None, *, discriminator_weight: float = 50.0,
                 temperature: float = 1.0, share_embeddings: bool = True, mlm_probability: float = 0.15):
        super().__init__()
        if isinstance(discriminator, BERTConfig):
            discriminator = ELECTRAForPreTraining(discriminator)
        if not isinstance(discriminator, ELECTRAForPreTraining):
            raise TypeError(f"discriminator must be an ELECTRAForPreTraining or its BERTConfig, got "
                            f"{type(discriminator).__name__}.")
        if generator is None:
            generator = generator_config(discriminator.config)
        built_here = isinstance(generator, BERTConfig)  # its embeddings are new: the discriminator's replace them
        if built_here:
            generator = BERTForMaskedLM(generator)
        if not isinstance(generator, BERTForMaskedLM):
            raise TypeError(f"generator must be a BERTForMaskedLM, its BERTConfig or None, got "
                            f"{type(generator).__name__}.")
        _check_pair(discriminator.config, generator.config)
        if not discriminator_weight >= 0:
            raise ValueError(f"discriminator_weight must be >= 0, got {discriminator_weight!r}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}.")
        if not 0 < mlm_probability <= 1:
            raise ValueError(f"mlm_probability must lie in (0, 1], got {mlm_probability!r}.")
        self.discriminator, self.generator = discriminator, generator
        self.discriminator_weight, self.temperature, self.mlm_probability = \
            discriminator_weight, temperature, mlm_probability
        if share_embeddings:
            ours, theirs = discriminator.bert.embeddings, generator.bert.embeddings
            different = [n for (n, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True)
                         if not torch.equal(a, b)]
            if different and not built_here:
                raise ValueError(f"share_embeddings=True, but the generator's embeddings differ from the "
                                 f"discriminator's ({', '.join(different)}); pass share_embeddings=False to keep "
                                 "both tables.")
            generator.bert.embeddings = ours
            generator.tie_weights()  # its output layer onto the shared word embeddings

    @property
    def shares_embeddings(self) -> bool:
        return self.generator.bert.embeddings is self.discriminator.bert.embeddings

    def mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
             special_tokens_mask: torch.Tensor | None = None, *,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ELECTRA's masking of ``input_ids``: ``(masked_ids, mlm_labels)`` (see :attr:`MASK_REPLACE_PROB`); the
        mask token is the config's ``mask_token_id`` (``ValueError`` when unset)."""
        return self.generator.create_masked_lm_inputs(
            input_ids, attention_mask, special_tokens_mask, mlm_probability=self.mlm_probability,
            mask_replace_prob=self.MASK_REPLACE_PROB, random_replace_prob=0.0, generator=generator)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None, *,
                special_tokens_mask: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> ReplacedTokenDetectionOutput:
        """One step of the objective on ``input_ids [B, L]``.

        Without ``mlm_labels`` the original ``input_ids`` are masked here (:meth:`mask`); with them (ids at the
        masked tokens, -100 elsewhere: bertkit's pretraining batches) ``input_ids`` are taken as already masked.
        ``generator`` seeds the masking and the sampling.
        """
        if mlm_labels is None:
            masked_ids, mlm_labels = self.mask(input_ids, attention_mask, special_tokens_mask, generator=generator)
        else:
            masked_ids = input_ids
            if mlm_labels.shape != input_ids.shape:
                raise ValueError(f"mlm_labels must be shaped like input_ids {tuple(input_ids.shape)}, got "
                                 f"{tuple(mlm_labels.shape)}.")
        check_labels("mlm_labels", mlm_labels, self.generator.config.vocab_size, -100)
        mlm_labels = mlm_labels.to(masked_ids.device)
        masked = mlm_labels != -100
        originals = torch.where(masked, mlm_labels, masked_ids)
        scores = self.generator(masked_ids, attention_mask, token_type_ids, pred_positions=masked)  # [N, V]
        targets = mlm_labels[masked]
        mlm_loss = cross_entropy(scores, targets)
        sampled = sample_tokens(scores, self.temperature, generator)
        corrupted = masked_ids.masked_scatter(masked, sampled)
        replaced = (corrupted != originals).long()
        logits = self.discriminator(corrupted, attention_mask, token_type_ids)
        discriminator_loss = replaced_token_loss(logits, replaced, attention_mask)
        return ReplacedTokenDetectionOutput(
            loss=mlm_loss + self.discriminator_weight * discriminator_loss, mlm_loss=mlm_loss,
            discriminator_loss=discriminator_loss, discriminator_logits=logits, masked_ids=masked_ids,
            mlm_labels=mlm_labels, corrupted_ids=corrupted, replaced=replaced,
            mlm_predictions=scores.detach().argmax(-1))

    def training_step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, metrics)`` for a batch dict: ``input_ids``, ``attention_mask``, ``token_type_ids`` and, when
        the batch is masked already, ``mlm_labels`` (or ``labels``); ``special_tokens_mask`` is used when this
        step masks. Metrics (detached scalars): ``loss``, ``mlm_loss``, ``mlm_accuracy`` (NaN when nothing is
        masked), ``discriminator_loss``, ``discriminator_accuracy`` (over real tokens), ``replaced_share`` (of the
        masked tokens, those the generator's sample changed)."""
        labels = batch.get("mlm_labels", batch.get("labels"))
        out = self(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"), labels,
                   special_tokens_mask=batch.get("special_tokens_mask"))
        with torch.no_grad():
            masked = out.mlm_labels != -100
            real = masked.new_ones(masked.shape) if batch.get("attention_mask") is None \
                else batch["attention_mask"].to(masked.device).bool()
            metrics = {
                "loss": out.loss, "mlm_loss": out.mlm_loss, "discriminator_loss": out.discriminator_loss,
                "mlm_accuracy": accuracy(out.mlm_predictions, out.mlm_labels[masked]),
                "discriminator_accuracy": accuracy((out.discriminator_logits > 0).long(),
                                                   out.replaced.masked_fill(~real, -100)),
                "replaced_share": out.replaced[masked].float().mean() if masked.any()
                else torch.tensor(float("nan"), device=masked.device),
            }
        return out.loss, {name: value.detach() for name, value in metrics.items()}

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Both models as HF checkpoints: ``directory/discriminator`` (``ElectraForPreTraining``, the one to
        fine-tune) and ``directory/generator`` (``ElectraForMaskedLM``), as Google released ELECTRA."""
        self.discriminator.save_pretrained(Path(directory) / "discriminator")
        self.generator.save_pretrained(Path(directory) / "generator")

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, *, share_embeddings: bool | None = None,
                        **options) -> ELECTRAForPretrainingRTD:
        """Read what :meth:`save_pretrained` wrote (or Google's discriminator and generator checkpoints placed
        there). ``share_embeddings`` None: shared when the two embedding modules are equal. ``options`` are the
        constructor's (``discriminator_weight``, ``temperature``, ``mlm_probability``). In eval mode, as every
        ``from_pretrained``: call ``.train()`` to go on pretraining."""
        discriminator = ELECTRAForPreTraining.from_pretrained(Path(directory) / "discriminator")
        generator = BERTForMaskedLM.from_pretrained(Path(directory) / "generator")
        if share_embeddings is None:
            pairs = zip(discriminator.bert.embeddings.state_dict().values(),
                        generator.bert.embeddings.state_dict().values(), strict=True)
            share_embeddings = all(a.shape == b.shape and torch.equal(a, b) for a, b in pairs)
        return cls(discriminator, generator, share_embeddings=share_embeddings, **options).eval()


#: fields a generator must share with its discriminator (the embedding tables and what reads them)
_PAIRED_FIELDS = ("family", "vocab_size", "embedding_width", "max_position_embeddings", "type_vocab_size",
                  "pad_token_id", "embedding_layer_norm", "sinusoidal_pos_embds")


def _check_pair(discriminator: BERTConfig, generator: BERTConfig) -> None:
    for name in _PAIRED_FIELDS:
        if getattr(discriminator, name) != getattr(generator, name):
            raise ValueError(f"the generator's {name} ({getattr(generator, name)!r}) differs from the "
                             f"discriminator's ({getattr(discriminator, name)!r}); they share the embedding "
                             "tables, so build the generator from generator_config(discriminator_config).")
