"""Score and pair losses for bi-encoders: CoSENT, AnglE, cosine MSE, triplet, contrastive and online contrastive.

Every loss is an ``nn.Module`` called as ``loss(embed, batch)`` on a :class:`~bertkit.sentence.batch.PairBatch`
and returns a scalar. Columns are read by role name (``anchor``, ``positive``, ``negative_1``...), never by
position. On the same embeddings each loss equals sentence-transformers 6.2.0's loss of the same name, value
and gradients (tests/test_embedding_pairwise.py); where ours differs (it refuses what ST would silently
ignore or misuse) the class docstring says so. A batch without a column or the labels a loss needs, or with a
label that is not a finite number or not of the expected shape, is refused with a one-line ``ValueError``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.retrieval.similarity import SIMILARITIES, rowwise
from bertkit.sentence.batch import Embed, PairBatch

DISTANCES = ("euclidean", "cosine", "manhattan")


def negative_columns(batch: PairBatch) -> list[str]:
    """The batch's negative columns, in order (``negative_1``, ``negative_2``, ...)."""
    return [name for name in batch.columns if name.startswith("negative")]


def embed_columns(loss: nn.Module, embed: Embed, batch: PairBatch, roles: list[str]) -> list[torch.Tensor]:
    """``[n, d]`` embeddings of the columns named ``roles``, one ``embed`` call each; a missing role is refused
    naming the loss, the columns it needs and those the batch has."""
    missing = [role for role in roles if role not in batch.columns]
    if missing:
        raise ValueError(f"{type(loss).__name__} needs the columns {roles}; the batch has {batch.columns} "
                         f"(missing {missing})")
    return [embed(batch.inputs[batch.columns.index(role)]) for role in roles]


def checked_labels(loss: nn.Module, batch: PairBatch, needs: str, allow_minus_inf: bool = False) -> torch.Tensor:
    """The batch's labels as float32, refused (one line naming the loss and ``needs``) when absent or when a
    value is NaN or infinite (``-inf`` allowed where ``allow_minus_inf``: a candidate the teacher ruled out)."""
    name = type(loss).__name__
    if batch.labels is None:
        raise ValueError(f"{name} needs labels ({needs}); the batch has none")
    labels = batch.labels.detach().float()
    bad = labels.isnan() | (labels == float("inf"))
    if not allow_minus_inf:
        bad |= labels == float("-inf")
    if bad.any():
        row = int(bad.reshape(labels.shape[0], -1).any(1).nonzero()[0])
        raise ValueError(f"{name} needs finite labels ({needs}); row {row} of the batch has "
                         f"{batch.labels[row].tolist()}")
    return labels


def row_labels(loss: nn.Module, batch: PairBatch, needs: str) -> torch.Tensor:
    """``[n]``: one finite label per row, given as ``[n]`` or ``[n, 1]`` (other shapes refused)."""
    labels = checked_labels(loss, batch, needs)
    if labels.dim() > 2 or labels.numel() != batch.rows:
        raise ValueError(f"{type(loss).__name__} needs one label per row ({needs}), shape [{batch.rows}] or "
                         f"[{batch.rows}, 1]; the batch's labels have shape {list(labels.shape)}")
    return labels.reshape(-1)


def binary_labels(loss: nn.Module, batch: PairBatch) -> torch.Tensor:
    """``[n]`` labels that are each 0 or 1 (1: a similar pair), refused otherwise."""
    labels = row_labels(loss, batch, "1 for a similar pair, 0 for a dissimilar one")
    bad = (labels != 0) & (labels != 1)
    if bad.any():
        row = int(bad.nonzero()[0])
        raise ValueError(f"{type(loss).__name__} needs labels 0 or 1; row {row} of the batch has {labels[row].item()}")
    return labels


def distance(a: torch.Tensor, b: torch.Tensor, function: str) -> torch.Tensor:
    """``[n]``: the distance between row i of ``a`` and row i of ``b``; cosine distance is 1 - cosine."""
    if function not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {function!r}")
    return 1 - rowwise(a, b, "cosine") if function == "cosine" else -rowwise(a, b, function)


def angle_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[n]``: AnglE's similarity of row i of ``a`` and ``b``: each unit vector read as complex numbers (the
    first half of the dimensions real, the second imaginary; an odd width padded with a zero), the absolute
    value of the real plus the imaginary part of the sum of ``a * conj(b)``."""
    if a.shape[-1] % 2:
        a, b = F.pad(a, (0, 1)), F.pad(b, (0, 1))
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    a_re, a_im = a.chunk(2, dim=-1)
    b_re, b_im = b.chunk(2, dim=-1)
    return ((a * b).sum(-1) + (a_im * b_re - a_re * b_im).sum(-1)).abs()


def cosent(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log(1 + sum exp(s_i - s_j))`` over every pair of rows with ``labels[j] > labels[i]``, in O(m log m):
    after sorting by label, the rows labelled above row i are a suffix, whose ``logsumexp(-s)`` is cumulative."""
    labels, order = labels.sort()
    scores = scores[order]
    first_above = torch.searchsorted(labels, labels, right=True)  # [m]: start of the suffix labelled higher
    suffix = torch.logcumsumexp(-scores.flip(0), dim=0).flip(0)  # [m]: log sum_{j >= k} exp(-s_j)
    suffix = torch.cat([suffix, scores.new_full((1,), float("-inf"))])  # an empty suffix adds nothing
    return torch.logsumexp(torch.cat([scores.new_zeros(1), scores + suffix[first_above]]), dim=0)


class CoSENTLoss(nn.Module):
    """CoSENT: every pair of rows whose labels order them should have their similarities ordered the same way.

    Reads (anchor, positive) rows with a score label ``[n]``. Rows with negatives (anchor, positive,
    negative_1, ...) are read as AnglE reads them in ST: the (anchor, positive) pair scored by the label (1
    without labels), each (anchor, negative) pair by 1 - label (ST's CoSENTLoss ignores a third column).
    ``similarity``: one of cosine, dot, euclidean, manhattan (the distances negated), multiplied by ``scale``.
    """

    needs = "a score per (anchor, positive) row"

    def __init__(self, scale: float = 20.0, similarity: str = "cosine"):
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f"{type(self).__name__}: similarity must be one of {SIMILARITIES}, got {similarity!r}")
        self.scale, self.similarity = scale, similarity

    def pair_similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return rowwise(a, b, self.similarity)

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        negatives = negative_columns(batch)
        anchor, *others = embed_columns(self, embed, batch, ["anchor", "positive", *negatives])
        if not negatives:
            labels = row_labels(self, batch, self.needs)
        elif batch.labels is None:
            labels = anchor.new_ones(batch.rows)
        else:
            labels = row_labels(self, batch, "a score per (anchor, positive) pair; 1 - score per negative")
        labels = torch.cat([labels, (1 - labels).repeat(len(negatives))])  # [(1 + k) n], column by column
        scores = self.pair_similarity(anchor.repeat(len(others), 1), torch.cat(others))
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # half precision sums too coarsely
        return cosent(scores * self.scale, labels.to(scores.device))


class AnglELoss(CoSENTLoss):
    """AnglE: :class:`CoSENTLoss` on :func:`angle_similarity` (the angle difference in complex space)."""

    def __init__(self, scale: float = 20.0):
        super().__init__(scale, "cosine")

    def pair_similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return angle_similarity(a, b)


class CosineSimilarityLoss(nn.Module):
    """The mean squared error between cosine(anchor, positive) and the row's score label ``[n]``."""

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        anchor, positive = embed_columns(self, embed, batch, ["anchor", "positive"])
        labels = row_labels(self, batch, "a cosine score per (anchor, positive) row")
        return F.mse_loss(rowwise(anchor, positive, "cosine"), labels.to(anchor))


class TripletLoss(nn.Module):
    """``mean(relu(d(anchor, positive) - d(anchor, negative) + margin))`` on (anchor, positive, negative_1)
    rows; with several negative columns, the mean over every (row, negative) triplet (ST takes exactly one).
    ``distance``: euclidean, cosine (1 - cosine) or manhattan."""

    def __init__(self, margin: float = 5.0, distance: str = "euclidean"):
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"{type(self).__name__}: distance must be one of {DISTANCES}, got {distance!r}")
        self.margin, self.distance = margin, distance

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        negatives = negative_columns(batch) or ["negative_1"]
        anchor, positive, *others = embed_columns(self, embed, batch, ["anchor", "positive", *negatives])
        to_positive = distance(anchor, positive, self.distance)
        to_negatives = torch.stack([distance(anchor, other, self.distance) for other in others], dim=1)  # [n, k]
        return F.relu(to_positive[:, None] - to_negatives + self.margin).mean()


class ContrastiveLoss(nn.Module):
    """Hadsell et al.'s contrastive loss on (anchor, positive) rows labelled 1 (similar) or 0 (dissimilar):
    ``0.5 * (y d^2 + (1 - y) relu(margin - d)^2)``, the mean over rows (the sum without ``size_average``).
    Labels other than 0 and 1 are refused (ST warns and uses them as weights)."""

    def __init__(self, margin: float = 0.5, distance: str = "cosine", size_average: bool = True):
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"{type(self).__name__}: distance must be one of {DISTANCES}, got {distance!r}")
        self.margin, self.distance, self.size_average = margin, distance, size_average

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        anchor, positive = embed_columns(self, embed, batch, ["anchor", "positive"])
        labels = binary_labels(self, batch).to(anchor)
        d = distance(anchor, positive, self.distance)
        losses = 0.5 * (labels * d.pow(2) + (1 - labels) * F.relu(self.margin - d).pow(2))
        return losses.mean() if self.size_average else losses.sum()


class OnlineContrastiveLoss(ContrastiveLoss):
    """:class:`ContrastiveLoss` on the batch's hard pairs only, summed: the similar pairs farther apart than the
    nearest dissimilar pair, and the dissimilar pairs nearer than the farthest similar pair (when the batch
    has only one kind, the pairs of that kind on the wrong side of its mean distance)."""

    def __init__(self, margin: float = 0.5, distance: str = "cosine"):
        super().__init__(margin, distance, size_average=False)

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        anchor, positive = embed_columns(self, embed, batch, ["anchor", "positive"])
        labels = binary_labels(self, batch).to(anchor.device)
        d = distance(anchor, positive, self.distance)
        similar, dissimilar = d[labels == 1], d[labels == 0]
        hard_dissimilar = dissimilar[dissimilar < (similar.max() if len(similar) else dissimilar.mean())]
        hard_similar = similar[similar > (dissimilar.min() if len(dissimilar) else similar.mean())]
        return hard_similar.pow(2).sum() + F.relu(self.margin - hard_dissimilar).pow(2).sum()
