"""Multi-vector (ColBERT) losses: ranking and distillation on the MaxSim scores of token vectors.

Called as ``loss(embed, batch)`` like every bi-encoder loss (:mod:`bertkit.sentence.losses`), except that
``embed(inputs)`` gives one column's token vectors ``[n, L, D]`` and ``inputs["scored"]`` (``[n, L]``, from
:class:`~bertkit.sentence.multi_vector_training.MultiVectorCollator`) says which of them are scored: a query's
tokens and its expansion, a document's tokens but its skiplist, never padding. The first column is the queries,
the others documents. MaxSim of a query and a document: the sum over the query's scored vectors of their largest
dot product with a scored document vector (:func:`maxsim_matrix`, :func:`maxsim_pairs`, differentiable, padded,
float32 sums); a document without a scored vector scores -1e9, below every real one, as in sentence-transformers.

Each loss equals sentence-transformers 6.2's ``multi_vector_encoder.losses`` class of the same role on the same
vectors, value and gradients (tests/test_multi_vector_losses.py): MNRL (its scale default 1: MaxSim is a sum over
query tokens, not a cosine), its cached (GradCache) form, MarginMSE and KL distillation (one temperature, or one
per side). Beyond it, as the dense losses do: a candidate whose text repeats the row's anchor or positive is masked
out of the row's negatives, and under data parallelism every rank's documents are the candidates (gathered with
their gradient, padded to one width first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from bertkit.sentence.batch import Embed, PairBatch
from bertkit.sentence.losses.cached import CachedMultipleNegativesRankingLoss
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss, check_ranking_columns, duplicate_mask
from bertkit.sentence.losses.distillation import distill_kl, margin_mse
from bertkit.sentence.losses.gather import distributed, gather_ids, gather_with_grad
from bertkit.sentence.losses.pairwise import negative_columns

#: the score of a document with no scored vector (sentence-transformers' value): below every real score
EMPTY_DOCUMENT_SCORE = -1e9
#: query-token x document-token products held at once by :func:`maxsim_matrix` (before autograd keeps the maxima)
CHUNK_ELEMENTS = 1 << 25


def scored_mask(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``[n, L]`` bool: the scored tokens of one column (``scored``, else the attended ones)."""
    return (inputs["scored"] if "scored" in inputs else inputs["attention_mask"]).bool()


def maxsim_matrix(queries: torch.Tensor, query_mask: torch.Tensor, documents: torch.Tensor,
                  document_mask: torch.Tensor) -> torch.Tensor:
    """``[Q, N]`` float32 MaxSim of every query ``[Q, m, D]`` with every document ``[N, t, D]`` (masks ``[Q, m]``,
    ``[N, t]``: the scored vectors), a block of documents at a time so at most :data:`CHUNK_ELEMENTS` products
    exist at once."""
    q, m, _ = queries.shape
    block = max(1, CHUNK_ELEMENTS // max(1, q * m * documents.shape[1]))
    parts = [_maxsim(queries[:, None], query_mask[:, None], documents[None, s:s + block],
                     document_mask[None, s:s + block]) for s in range(0, documents.shape[0], block)]
    return torch.cat(parts, dim=1) if parts else queries.new_zeros((q, 0), dtype=torch.float32)


def maxsim_pairs(queries: torch.Tensor, query_mask: torch.Tensor, documents: torch.Tensor,
                 document_mask: torch.Tensor) -> torch.Tensor:
    """``[n]`` float32 MaxSim of query i ``[n, m, D]`` with document i ``[n, t, D]`` (masks as
    :func:`maxsim_matrix`'s)."""
    return _maxsim(queries, query_mask, documents, document_mask)


def _maxsim(queries, query_mask, documents, document_mask) -> torch.Tensor:
    """MaxSim over broadcast leading dimensions: queries ``[..., m, D]``, documents ``[..., t, D]``."""
    products = queries @ documents.transpose(-1, -2)  # [..., m, t]
    # a masked document token must never win the max, even over a negative product: the dtype's minimum
    products = products.masked_fill(~document_mask.bool()[..., None, :], torch.finfo(products.dtype).min)
    best = products.max(dim=-1).values.float()  # [..., m]: summed in float32
    scores = (best * query_mask.to(best.dtype)).sum(dim=-1)
    return scores.masked_fill(~document_mask.bool().any(dim=-1), EMPTY_DOCUMENT_SCORE)


def _pad_width(vectors: torch.Tensor, mask: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    extra = width - vectors.shape[1]
    if extra <= 0:
        return vectors, mask
    return F.pad(vectors, (0, 0, 0, extra)), F.pad(mask, (0, extra), value=False)


def gather_documents(columns: Sequence[torch.Tensor], masks: Sequence[torch.Tensor],
                     gather: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(vectors [C*N, W, D], mask [C*N, W], start)``: the document columns (each ``[n, L_c, D]``) padded to one
    width ``W`` and, when ``gather`` under a process group of more than one rank, every rank's rows of each column
    (rank order, column by column, as :func:`~bertkit.sentence.losses.gather.gather_with_grad` lays them out;
    ``start``: where this rank's rows begin in each column). Without a group: this rank's, ``start`` 0."""
    width = max(column.shape[1] for column in columns)
    if gather and distributed():  # each rank padded to its own longest: agree on one width first
        widest = torch.tensor([width], device=columns[0].device)
        dist.all_reduce(widest, op=dist.ReduceOp.MAX)
        width = int(widest.item())
    vectors, flags, start = [], [], 0
    for column, mask in zip(columns, masks):
        column, mask = _pad_width(column, mask.bool(), width)
        if gather:
            column, start = gather_with_grad(column)
            mask = gather_ids(mask.to(torch.uint8)).bool()
        vectors.append(column)
        flags.append(mask)
    return torch.cat(vectors), torch.cat(flags), start


class MultiVectorMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """InfoNCE over MaxSim: row i's query against every positive and hard negative of the batch (of every rank
    when ``gather_across_ranks``), cross-entropy of ``scale * MaxSim`` with row i's positive as the target.
    Columns ``anchor, positive, negative_1..k``; duplicates masked as the dense loss masks them. ``scale``
    (1 / temperature) defaults to 1, sentence-transformers' and PyLate's."""

    def __init__(self, scale: float = 1.0, gather_across_ranks: bool = True):
        super().__init__(scale=scale, similarity="dot", gather_across_ranks=gather_across_ranks)

    def from_embeddings(self, embeddings: Sequence[torch.Tensor], batch: PairBatch) -> torch.Tensor:
        """The loss on one ``[n, L_c, D]`` token-vector tensor per column of ``batch`` (column order)."""
        check_ranking_columns(batch)
        queries = embeddings[0]
        masks = [scored_mask(inputs) for inputs in batch.inputs]
        documents, document_mask, start = gather_documents(embeddings[1:], masks[1:], self.gather_across_ranks)
        logits = maxsim_matrix(queries, masks[0], documents, document_mask) * self.scale  # [n, C * N]
        n = queries.shape[0]
        candidate_ids = [self._gather_ids(ids) for ids in batch.text_ids[1:]]
        own = [batch.text_ids[0], batch.text_ids[1]]
        logits = logits.masked_fill(duplicate_mask(own, candidate_ids, start), float("-inf"))
        return F.cross_entropy(logits, start + torch.arange(n, device=logits.device))


class CachedMultiVectorMultipleNegativesRankingLoss(CachedMultipleNegativesRankingLoss):
    """:class:`MultiVectorMultipleNegativesRankingLoss` in GradCache form
    (:mod:`bertkit.sentence.losses.cached`): the same loss and gradients with ``mini_batch_size`` rows embedded
    at a time (the Trainer syncs the gradients itself: ``grad_sync="manual"``)."""

    def __init__(self, scale: float = 1.0, gather_across_ranks: bool = True, mini_batch_size: int = 32):
        super().__init__(mini_batch_size=mini_batch_size)
        self.plain = MultiVectorMultipleNegativesRankingLoss(scale, gather_across_ranks)


def candidate_scores(loss: nn.Module, embed: Embed, batch: PairBatch) -> torch.Tensor:
    """``[n, 1 + k]``: MaxSim of each row's query with its positive and its k negatives."""
    negatives = negative_columns(batch)
    roles = ["anchor", "positive", *negatives]
    if not negatives or batch.columns[:len(roles)] != roles:
        raise ValueError(f"{type(loss).__name__} needs the columns ['anchor', 'positive', 'negative_1', ...]; the "
                         f"batch has {batch.columns}")
    inputs = [batch.inputs[batch.columns.index(role)] for role in roles]
    queries, *documents = [embed(column) for column in inputs]
    query_mask = scored_mask(inputs[0])
    return torch.stack([maxsim_pairs(queries, query_mask, document, scored_mask(column))
                        for document, column in zip(documents, inputs[1:])], dim=1)


class MultiVectorMarginMSELoss(nn.Module):
    """The mean squared error between the student's MaxSim margins ``s(q, positive) - s(q, negative_j)`` and the
    teacher's; labels as the dense :class:`~bertkit.sentence.losses.distillation.MarginMSELoss` reads them (the
    margins ``[n, k]``, or the teacher's scores ``[n, 1 + k]``)."""

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return margin_mse(self, candidate_scores(self, embed, batch), batch)


class MultiVectorDistillKLDivLoss(nn.Module):
    """KL(teacher || student) over each row's candidates (positive, negative_1..k): the student's MaxSim scores
    divided by ``student_temperature``, the teacher's scores (labels ``[n, 1 + k]``) by ``teacher_temperature``
    (both default ``temperature``, 1), times ``student_temperature ** 2``."""

    def __init__(self, temperature: float = 1.0, student_temperature: float | None = None,
                 teacher_temperature: float | None = None):
        super().__init__()
        self.temperature = temperature
        self.student_temperature = temperature if student_temperature is None else student_temperature
        self.teacher_temperature = temperature if teacher_temperature is None else teacher_temperature
        for name in ("temperature", "student_temperature", "teacher_temperature"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"--{name.replace('_', '-')} must be a positive finite number, got {value}.")

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return distill_kl(self, candidate_scores(self, embed, batch), batch, self.student_temperature,
                          self.teacher_temperature)
