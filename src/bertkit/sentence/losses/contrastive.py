"""Multiple-negatives ranking (InfoNCE with in-batch negatives), plain and symmetric, across ranks.

Every loss here is called as ``loss(embed, batch)`` (see :mod:`bertkit.sentence.losses`) and also offers
``from_embeddings(embeddings, batch)``, the same loss on one ``[n, d]`` tensor per column, which is what the
cached (GradCache) form and the Matryoshka wrapper evaluate.

Duplicates: a candidate whose text is identical (equal ``batch.text_ids``) to the row's own positive or to
its anchor is masked out of that row's negatives (its logit set to ``-inf``), never the row's own positive.
Masking is by text identity, not by comparing embeddings, so it holds under dropout. Across ranks the
candidates' text ids are gathered with their embeddings (:func:`~bertkit.sentence.losses.gather.gather_ids`); the
ids must then be comparable across ranks, as :class:`~bertkit.sentence.data.PairCollator` makes them (numbered
over the global batch), so a duplicate held by another rank is masked too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.retrieval.similarity import SIMILARITIES, pairwise
from bertkit.sentence.batch import Embed, PairBatch, same_text
from bertkit.sentence.losses.gather import gather_ids, gather_with_grad


def embed_columns(embed: Embed, batch: PairBatch) -> list[torch.Tensor]:
    """One ``[n, d]`` embedding tensor per column of ``batch``, in column order."""
    return [embed(inputs) for inputs in batch.inputs]


def check_ranking_columns(batch: PairBatch) -> None:
    """A ranking batch is ``anchor, positive, negative_1, ..., negative_k`` in this order (ValueError if not)."""
    expected = ["anchor", "positive"] + [f"negative_{i}" for i in range(1, len(batch.columns) - 1)]
    if batch.columns != expected:
        raise ValueError(f"multiple-negatives ranking needs the columns anchor, positive, then optional "
                         f"negative_1..k, in this order; the batch has {batch.columns}")


def duplicate_mask(own: Sequence[torch.Tensor], candidates: Sequence[torch.Tensor], start: int,
                   target_column: int = 0) -> torch.Tensor:
    """Bool ``[n, len(candidates) * total]``: True where a candidate must leave row i's negatives.

    ``own``: the text ids ``[n]`` a row's negatives must not repeat (its anchor and its positive).
    ``candidates``: the text ids ``[total]`` of each candidate column, every rank's (gathered in rank order),
    laid out column by column as ``torch.cat`` of the gathered columns lays them; this rank's rows are
    ``start .. start + n`` of each. Row i's own target, candidate ``target_column * total + start + i``, is
    never masked.
    """
    n, total = own[0].shape[0], candidates[0].shape[0]
    rows = torch.arange(n, device=own[0].device)
    mask = same_text(own, torch.cat(list(candidates)))  # [n, C * total]
    mask[rows, target_column * total + start + rows] = False
    return mask


class MultipleNegativesRankingLoss(nn.Module):
    """InfoNCE over in-batch and hard negatives: ``loss(embed, batch)`` -> scalar.

    Columns: ``anchor``, ``positive``, optional ``negative_1..k`` (hard negatives). Row i's candidates are every
    positive and every hard negative of the batch (of every rank, when ``gather_across_ranks`` and a process
    group of more than one rank is initialised); the loss is the mean over this rank's rows of the
    cross-entropy of ``scale * similarity(anchor_i, candidates)`` with row i's positive as the target (its
    global index ``start + i``, see :func:`~bertkit.sentence.losses.gather.gather_with_grad`). Duplicates are masked
    (module docstring). ``symmetric``: the mean of that and the positive -> anchor direction, where positive i's
    candidates are every anchor of the batch (the anchors only, no hard negatives), as sentence-transformers'
    MultipleNegativesSymmetricRankingLoss.

    Under DDP each rank's loss covers its own rows; DDP's averaging of the gradients then gives the gradient
    of the combined batch's loss (when every rank holds the same number of rows).
    """

    def __init__(self, scale: float = 20.0, similarity: str = "cosine", symmetric: bool = False,
                 gather_across_ranks: bool = True):
        super().__init__()
        if not scale > 0:
            raise ValueError(f"scale must be positive (1 / temperature, e.g. 20), got {scale}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        self.scale, self.similarity = float(scale), similarity
        self.symmetric, self.gather_across_ranks = symmetric, gather_across_ranks

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return self.from_embeddings(embed_columns(embed, batch), batch)

    def _gather(self, tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
        return gather_with_grad(tensor) if self.gather_across_ranks else (tensor, 0)

    def _gather_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return gather_ids(ids) if self.gather_across_ranks else ids

    def from_embeddings(self, embeddings: Sequence[torch.Tensor], batch: PairBatch) -> torch.Tensor:
        """The loss on one embedding tensor ``[n, d]`` per column of ``batch`` (column order)."""
        check_ranking_columns(batch)
        anchors, positives = embeddings[0], embeddings[1]
        n = anchors.shape[0]
        gathered = [self._gather(column) for column in embeddings[1:]]  # each column on its own: no interleaving
        start = gathered[0][1]
        candidates = torch.cat([column for column, _ in gathered])  # [C * N, d] by column; N: all ranks' rows
        targets = start + torch.arange(n, device=anchors.device)
        own = [batch.text_ids[0], batch.text_ids[1]]

        logits = pairwise(anchors, candidates, self.similarity) * self.scale  # [n, C * N]
        candidate_ids = [self._gather_ids(ids) for ids in batch.text_ids[1:]]
        logits = logits.masked_fill(duplicate_mask(own, candidate_ids, start), float("-inf"))
        loss = F.cross_entropy(logits, targets)
        if not self.symmetric:
            return loss
        all_anchors, _ = self._gather(anchors)  # [N, d]
        backward = pairwise(positives, all_anchors, self.similarity) * self.scale  # [n, N]
        backward = backward.masked_fill(duplicate_mask(own, [self._gather_ids(batch.text_ids[0])], start),
                                        float("-inf"))
        return (loss + F.cross_entropy(backward, targets)) / 2
