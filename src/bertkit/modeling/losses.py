"""Loss and accuracy functions shared by every head (one implementation each).

``reduction`` is ``"mean"``, ``"sum"`` or ``None``; with ``None`` the loss keeps the
labels' shape and ignored positions hold 0. :func:`check_labels` is the label validation
every loss runs first; :func:`masked_lm_losses` is the one place the masked-LM loss is
computed (the lucid heads, their training step and the pytorch_pretrained_bert compat call it).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F

REDUCTIONS = ("mean", "sum", None)


def check_reduction(reduction: str | None) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}.")


def reduce(loss: torch.Tensor, reduction: str | None, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce an unreduced ``loss``; ``valid`` marks positions that count (mean over them)."""
    check_reduction(reduction)
    if valid is not None:
        loss = loss * valid
    if reduction is None:
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.mean() if valid is None else loss.sum() / valid.sum().clamp(min=1)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100,
                  reduction: str | None = "mean") -> torch.Tensor:
    """Cross-entropy of ``logits [..., C]`` against ``labels [...]``; ``ignore_index`` positions do not count.

    ``"mean"`` averages over the counted positions (0 when there are none, never NaN).
    """
    check_reduction(reduction)
    labels = labels.to(logits.device)  # labels given on the CPU to a GPU model (its inputs move there too)
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=ignore_index, reduction="none").view(labels.shape)
    return reduce(flat, reduction, labels != ignore_index)


def accuracy(predictions: torch.Tensor, labels: torch.Tensor, ignore_index: int | None = -100) -> torch.Tensor:
    """Fraction of ``predictions == labels`` over positions whose label is not ``ignore_index``.

    A float scalar tensor; NaN when no position counts.
    """
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {tuple(predictions.shape)} and labels {tuple(labels.shape)} must match.")
    labels = labels.to(predictions.device)
    valid = labels != ignore_index if ignore_index is not None else torch.ones_like(labels, dtype=torch.bool)
    hits = ((predictions == labels) & valid).sum()
    n = valid.sum()
    return hits.float() / n if n > 0 else torch.tensor(float("nan"), device=labels.device)


def check_labels(name: str, labels: torch.Tensor, num_classes: int, ignore_index: int | None) -> None:
    """Raise a ValueError naming ``name`` when a label is outside ``[0, num_classes)`` (``ignore_index`` allowed).

    Float labels (regression, multi-label targets) and empty tensors are not checked.
    """
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


class MaskedLMLosses(NamedTuple):
    """What :func:`masked_lm_losses` returns."""

    #: ``[B, L]`` float32 cross-entropy per position, 0 where the label is the ignore index.
    losses: torch.Tensor
    #: ``[B, L]`` bool, True at the labelled positions.
    valid: torch.Tensor
    #: ``[N]`` the argmax token id at the N labelled positions, in row-major order.
    predictions: torch.Tensor


class VocabularyHead(Protocol):
    """An MLM head: ``losses(hidden [N, H], targets [N]) -> (losses [N], predictions [N])``."""

    def losses(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def masked_lm_losses(head: VocabularyHead, sequence_output: torch.Tensor, labels: torch.Tensor, *,
                     vocab_size: int, ignore_index: int = -100) -> MaskedLMLosses:
    """The masked-LM cross-entropy, projecting only the labelled positions onto the vocabulary.

    ``head`` is an MLM head (``cls.predictions``), whose ``losses`` scores hidden states ``[N, H]``
    against their targets (fused: :func:`bertkit.modeling.vocab_loss.linear_cross_entropy`);
    ``sequence_output`` is ``[B, L, H]`` and ``labels`` ``[B, L]`` holds token ids in
    ``[0, vocab_size)`` or ``ignore_index`` (anything else is a ``ValueError``). Losses are float32
    whatever the model's dtype. With no labelled position the losses are all 0 and still part of the
    autograd graph.
    """
    check_labels("mlm_labels", labels, vocab_size, ignore_index)
    labels = labels.to(sequence_output.device)
    valid = labels != ignore_index
    per_target, predictions = head.losses(sequence_output[valid], labels[valid])  # [N, H] -> [N]
    losses = sequence_output.new_zeros(labels.shape, dtype=torch.float32)
    return MaskedLMLosses(losses.masked_scatter(valid, per_target.float()), valid, predictions)


def masked_lm_loss(head: VocabularyHead, sequence_output: torch.Tensor,
                   labels: torch.Tensor, *, vocab_size: int, ignore_index: int = -100,
                   reduction: str | None = "mean") -> torch.Tensor:
    """:func:`masked_lm_losses` reduced: ``"mean"`` over the labelled positions (0 when there are none),
    ``"sum"``, or ``None`` for ``[B, L]`` with 0 where ignored."""
    out = masked_lm_losses(head, sequence_output, labels, vocab_size=vocab_size, ignore_index=ignore_index)
    return reduce(out.losses, reduction, out.valid)
