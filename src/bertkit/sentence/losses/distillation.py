"""Losses that learn from a teacher: its scores (MarginMSE, KL distillation) or its embeddings (GIST's guide).

Called as ``loss(embed, batch)`` like the losses of :mod:`bertkit.sentence.losses.pairwise` (same column, label and
error conventions); each equals sentence-transformers 6.2.0's loss of the same name on the same embeddings.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.retrieval.similarity import SIMILARITIES, pairwise, rowwise
from bertkit.sentence.batch import Embed, PairBatch, same_text
from bertkit.sentence.losses.pairwise import checked_labels, embed_columns, negative_columns


def check_similarity(loss: nn.Module, similarity: str) -> str:
    if similarity not in SIMILARITIES:
        raise ValueError(f"{type(loss).__name__}: similarity must be one of {SIMILARITIES}, got {similarity!r}")
    return similarity


def candidate_scores(loss: nn.Module, embed: Embed, batch: PairBatch, similarity: str) -> torch.Tensor:
    """``[n, 1 + k]``: the student's similarity of each row's anchor to its positive and its k negatives."""
    negatives = negative_columns(batch)
    if not negatives:
        raise ValueError(f"{type(loss).__name__} needs the columns ['anchor', 'positive', 'negative_1', ...]; "
                         f"the batch has {batch.columns} (no negative column)")
    anchor, *candidates = embed_columns(loss, embed, batch, ["anchor", "positive", *negatives])
    return torch.stack([rowwise(anchor, candidate, similarity) for candidate in candidates], dim=1)


def margin_mse(loss: nn.Module, scores: torch.Tensor, batch: PairBatch) -> torch.Tensor:
    """MarginMSE of the student's ``scores [n, 1 + k]`` (positive, then each negative) against the batch's labels:
    the teacher's margins ``[n, k]`` (``[n]`` too when k is 1) or its scores ``[n, 1 + k]`` (margins taken here)."""
    k = scores.shape[1] - 1
    needs = f"the teacher's margin per negative [{batch.rows}, {k}], or its scores [{batch.rows}, {k + 1}]"
    labels = checked_labels(loss, batch, needs).to(scores)
    if labels.dim() == 1 and k == 1:
        labels = labels[:, None]
    if labels.dim() == 2 and labels.shape[1] == k + 1:
        labels = labels[:, :1] - labels[:, 1:]
    if labels.dim() != 2 or labels.shape[1] != k:
        raise ValueError(f"{type(loss).__name__} needs {needs} for {k} negative column(s); the batch's labels "
                         f"have shape {list(batch.labels.shape)}")
    return F.mse_loss(scores[:, :1] - scores[:, 1:], labels)


def distill_kl(loss: nn.Module, scores: torch.Tensor, batch: PairBatch, student_temperature: float,
               teacher_temperature: float) -> torch.Tensor:
    """KL(teacher || student) of the student's ``scores [n, 1 + k]`` against the teacher's (the batch's labels,
    ``-inf`` rules a candidate out), each side divided by its temperature, summed over candidates, averaged over
    rows, times ``student_temperature ** 2``."""
    needs = f"the teacher's scores of the positive and each negative, [{batch.rows}, {scores.shape[1]}]"
    labels = checked_labels(loss, batch, needs, allow_minus_inf=True)
    if labels.shape != scores.shape or (labels == float("-inf")).all(1).any():
        raise ValueError(f"{type(loss).__name__} needs {needs}, not all -inf; the batch's labels have shape "
                         f"{list(labels.shape)}")
    student = torch.log_softmax(scores / student_temperature, dim=1)
    teacher = torch.softmax(labels.to(scores) / teacher_temperature, dim=1)
    return F.kl_div(student, teacher, reduction="batchmean") * student_temperature**2


class MarginMSELoss(nn.Module):
    """The mean squared error between the student's margins ``sim(anchor, positive) - sim(anchor, negative_j)``
    and the teacher's, on (anchor, positive, negative_1, ..., negative_k) rows.

    Labels, as ST 6.2 reads them: ``[n, k]`` the teacher's margins, one per negative (``[n]`` too when k is 1),
    or ``[n, 1 + k]`` the teacher's scores of the positive then each negative (margins taken here).
    """

    def __init__(self, similarity: str = "dot"):
        super().__init__()
        self.similarity = check_similarity(self, similarity)

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return margin_mse(self, candidate_scores(self, embed, batch, self.similarity), batch)


class DistillKLDivLoss(nn.Module):
    """KL(teacher || student) over each row's candidates (positive, negative_1, ..., negative_k), k >= 1.

    Labels ``[n, 1 + k]``: the teacher's scores of those candidates (``-inf`` rules one out). Both the teacher's
    and the student's scores are divided by ``temperature`` before the softmax; the KL divergence is summed
    over candidates, averaged over rows and multiplied by ``temperature ** 2`` (so the gradient's scale does
    not shrink with the temperature), as ST's DistillKLDivLoss does.
    """

    def __init__(self, temperature: float = 1.0, similarity: str = "dot"):
        super().__init__()
        if not 0 < temperature < float("inf"):
            raise ValueError(f"{type(self).__name__}: temperature must be a positive finite number, got {temperature}")
        self.temperature, self.similarity = temperature, check_similarity(self, similarity)

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        scores = candidate_scores(self, embed, batch, self.similarity)  # [n, 1 + k]
        return distill_kl(self, scores, batch, self.temperature, self.temperature)


class GISTEmbedLoss(nn.Module):
    """Multiple-negatives ranking (cross-entropy over in-batch candidates, cosine / ``temperature``) where the
    ``guide_embed`` model (called without gradients, on the same tokenized inputs) filters false negatives.

    Rows (anchor, positive[, negative_1, ...]). Each row's candidates: every positive, every anchor
    (``contrast_anchors``), every positive again scored from the row's positive (``contrast_positives``) and
    every negative. A candidate is dropped when the guide scores it above its score of the row's positive,
    minus ``margin`` (absolute) or minus ``margin * |score|`` (relative), and, whatever the guide says, when
    its text is the row's anchor or positive text. Any number of negative columns, a block each (ST's GIST
    takes at most one). The guide is the caller's to keep in eval mode (its dropout would blur the filter).
    """

    def __init__(self, guide_embed: Embed, temperature: float = 0.01, margin_strategy: str = "absolute",
                 margin: float = 0.0, contrast_anchors: bool = True, contrast_positives: bool = True):
        super().__init__()
        if not 0 < temperature < float("inf"):
            raise ValueError(f"{type(self).__name__}: temperature must be a positive finite number, got {temperature}")
        if margin_strategy not in ("absolute", "relative"):
            raise ValueError(f"{type(self).__name__}: margin_strategy must be 'absolute' or 'relative', "
                             f"got {margin_strategy!r}")
        self.guide_embed, self.temperature = guide_embed, temperature
        self.margin_strategy, self.margin = margin_strategy, margin
        self.contrast_anchors, self.contrast_positives = contrast_anchors, contrast_positives

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        roles = ["anchor", "positive", *negative_columns(batch)]
        anchor, positive, *negatives = embed_columns(self, embed, batch, roles)
        with torch.no_grad():
            guide_anchor, guide_positive, *guide_negatives = embed_columns(self, self.guide_embed, batch, roles)
        anchor_ids, positive_ids, *negative_ids = [batch.text_ids[batch.columns.index(role)] for role in roles]
        guide_target = pairwise(guide_anchor, guide_positive).diagonal()[:, None]  # [n, 1]
        if self.margin_strategy == "absolute":
            threshold = guide_target - self.margin
        else:
            threshold = guide_target - guide_target.abs() * self.margin

        # (row side, its guide, candidates, their guide, their text ids), one [n, n] block each
        blocks = [(anchor, guide_anchor, positive, guide_positive, positive_ids)]
        if self.contrast_anchors:
            blocks.append((anchor, guide_anchor, anchor, guide_anchor, anchor_ids))
        if self.contrast_positives:
            blocks.append((positive, guide_positive, positive, guide_positive, positive_ids))
        blocks += [(anchor, guide_anchor, n, g, ids) for n, g, ids in zip(negatives, guide_negatives, negative_ids)]
        scores = []
        for index, (rows, guide_rows, candidates, guide_candidates, candidate_ids) in enumerate(blocks):
            dropped = pairwise(guide_rows, guide_candidates) > threshold
            dropped |= same_text((anchor_ids, positive_ids), candidate_ids).to(dropped.device)
            if index == 0:
                dropped.fill_diagonal_(False)  # row i's own positive: its target
            scores.append(pairwise(rows, candidates).masked_fill(dropped, float("-inf")))
        target = torch.arange(batch.rows, device=anchor.device)
        return F.cross_entropy(torch.cat(scores, dim=1) / self.temperature, target)
