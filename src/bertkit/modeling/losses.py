"""Loss and accuracy functions shared by every head (one implementation each).

``reduction`` is ``"mean"``, ``"sum"`` or ``None``; with ``None`` the loss keeps the
labels' shape and ignored positions hold 0.
"""

from __future__ import annotations

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
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=ignore_index, reduction="none").view(labels.shape)
    return reduce(flat, reduction, labels != ignore_index)


def accuracy(predictions: torch.Tensor, labels: torch.Tensor, ignore_index: int | None = -100) -> torch.Tensor:
    """Fraction of ``predictions == labels`` over positions whose label is not ``ignore_index``.

    A float scalar tensor; NaN when no position counts.
    """
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {tuple(predictions.shape)} and labels {tuple(labels.shape)} must match.")
    valid = labels != ignore_index if ignore_index is not None else torch.ones_like(labels, dtype=torch.bool)
    hits = ((predictions == labels) & valid).sum()
    n = valid.sum()
    return hits.float() / n if n > 0 else torch.tensor(float("nan"), device=labels.device)
