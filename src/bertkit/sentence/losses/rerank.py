"""Losses that train a cross-encoder (reranker), equal to sentence-transformers 6.2's ``cross_encoder.losses``.

Each is called as ``loss(score, batch)``: ``score(inputs) -> logits [m] or [m, 1]`` is the model on tokenized
(query, passage) pairs (:meth:`bertkit.CrossEncoder.score`), ``batch`` a :class:`RerankBatch`.

Why not :class:`~bertkit.sentence.batch.PairBatch`: its columns are single texts, each tokenized alone, which is
what a bi-encoder embeds. A cross-encoder reads a query and a passage as one input, ``[CLS] q [SEP] p [SEP]``, cut
as a pair past the length limit, so its inputs are the pairs; and the multiple-negatives loss pairs each query with
other rows' passages, pairs that exist in no column and are only known inside the loss. So a :class:`RerankBatch`
holds the texts (a query and its list of passages per row) and the ``tokenize`` that turns any pairs into inputs,
and the loss tokenizes the pairs it scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checks import check_int

#: ``score(inputs) -> [m]`` or ``[m, 1]``: the cross-encoder's logits for tokenized pairs, with gradients
Score = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
#: ``tokenize(pairs) -> inputs``: (query, passage) pairs tokenized together, padded (``[m, L]`` tensors)
Tokenize = Callable[[Sequence[tuple[str, str]]], Mapping[str, torch.Tensor]]


@dataclass
class RerankBatch:
    """``n`` rows, each a query and its passages.

    ``queries``: ``[n]`` strings. ``documents[i]``: row ``i``'s passages, at least one (ragged lists are padded
    inside the losses): a (query, passage, label) row has one; a (query, positive, negatives...) row lists the
    positive first. ``labels``: one number per passage (nested lists, or float ``[n, k]`` with ``k`` the longest
    list and anything in the padding), or None where a loss needs none (multiple negatives).
    ``tokenize``: see :data:`Tokenize` (:meth:`bertkit.CrossEncoder.tokenize`).
    """

    queries: list[str]
    documents: list[list[str]]
    tokenize: Tokenize
    labels: torch.Tensor | Sequence[Sequence[float]] | None = None
    #: the real (unpadded) tokens of every pair :meth:`encode` tokenized so far (the Trainer's tokens per second)
    num_tokens: int | torch.Tensor = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self):
        if len(self.documents) != len(self.queries) or not self.queries:
            raise ValueError(f"a RerankBatch needs one list of documents per query and at least one query: "
                             f"{len(self.queries)} queries, {len(self.documents)} document lists")
        for i, docs in enumerate(self.documents):
            if isinstance(docs, str) or not docs:
                raise ValueError(f"row {i} of the batch needs a list of at least one document, got {docs!r}")
        if self.labels is not None and not isinstance(self.labels, torch.Tensor):
            self.labels = self._padded_labels(self.labels)
        if self.labels is not None and tuple(self.labels.shape) != (self.rows, self.width):
            raise ValueError(f"labels must be [rows, longest document list] = [{self.rows}, {self.width}], "
                             f"got {list(self.labels.shape)}")

    def _padded_labels(self, labels: Sequence[Sequence[float]]) -> torch.Tensor:
        padded = torch.zeros(self.rows, self.width)
        if len(labels) != self.rows:
            raise ValueError(f"labels has {len(labels)} rows; the batch has {self.rows}")
        for i, (row, docs) in enumerate(zip(labels, self.documents)):
            values = torch.as_tensor(row, dtype=torch.float32).reshape(-1)
            if values.numel() != len(docs):
                raise ValueError(f"row {i} has {len(docs)} documents and {values.numel()} labels; give one label "
                                 "per document")
            padded[i, :len(docs)] = values
        return padded

    def encode(self, pairs: Sequence[tuple[str, str]]) -> Mapping[str, torch.Tensor]:
        """``tokenize(pairs)``, counting their real tokens into :attr:`num_tokens` (on the inputs' device)."""
        inputs = self.tokenize(pairs)
        if isinstance(inputs.get("attention_mask"), torch.Tensor):
            self.num_tokens = self.num_tokens + inputs["attention_mask"].sum()
        return inputs

    @property
    def rows(self) -> int:
        return len(self.queries)

    @property
    def width(self) -> int:
        """The longest document list."""
        return max(map(len, self.documents))

    def mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """bool ``[n, k]``: True where row ``i`` has a ``j``-th document."""
        counts = torch.tensor([len(d) for d in self.documents], device=device)
        return torch.arange(self.width, device=device)[None, :] < counts[:, None]

    def needs_labels(self, loss: str) -> torch.Tensor:
        if self.labels is None:
            raise ValueError(f"{loss} needs a label per document; this batch has none")
        return self.labels


def score_pairs(score: Score, tokenize: Tokenize, pairs: Sequence[tuple[str, str]],
                mini_batch_size: int | None = None) -> torch.Tensor:
    """float32 ``[m]`` logits of ``pairs``, scored ``mini_batch_size`` pairs at a time (all at once for None).
    ValueError unless the model has one output per pair."""
    size = mini_batch_size or max(len(pairs), 1)
    parts = []
    for start in range(0, len(pairs), size):
        logits = score(tokenize(pairs[start:start + size]))
        if tuple(logits.shape[1:]) not in ((), (1,)):
            raise ValueError(f"a reranking loss needs a model with one output (num_labels=1); its logits are "
                             f"{list(logits.shape)}")
        parts.append(logits.reshape(-1))
    return torch.cat(parts).float()


def listed_scores(score: Score, batch: RerankBatch, mini_batch_size: int | None = None) -> torch.Tensor:
    """float32 ``[n, k]``: the logit of every (query, listed document) pair, 0 in the padding."""
    pairs = [(q, d) for q, docs in zip(batch.queries, batch.documents) for d in docs]
    logits = score_pairs(score, batch.encode, pairs, mini_batch_size)
    mask = batch.mask(logits.device)
    return torch.zeros(mask.shape, dtype=logits.dtype, device=logits.device).masked_scatter(mask, logits)


class BinaryCrossEntropyLoss(nn.Module):
    """Binary cross-entropy of each (query, passage) logit against its label (0/1, or a score in [0, 1]), the mean
    over the listed pairs; ``pos_weight`` weighs the positive term (torch's ``BCEWithLogitsLoss``)."""

    def __init__(self, pos_weight: float | torch.Tensor | None = None, mini_batch_size: int | None = None):
        super().__init__()
        self.pos_weight = None if pos_weight is None else torch.as_tensor(pos_weight, dtype=torch.float32)
        self.mini_batch_size = check_int("mini_batch_size", mini_batch_size, 1, none_means="every pair at once")

    def forward(self, score: Score, batch: RerankBatch) -> torch.Tensor:
        labels = batch.needs_labels("BinaryCrossEntropyLoss")
        mask = batch.mask()
        targets = labels[mask]
        if not bool(((targets >= 0) & (targets <= 1)).all()):
            bad = int(torch.nonzero(~((labels >= 0) & (labels <= 1)) & mask)[0, 0])
            raise ValueError(f"BinaryCrossEntropyLoss needs labels in [0, 1]; row {bad} has "
                             f"{labels[bad][mask[bad]].tolist()}")
        logits = listed_scores(score, batch, self.mini_batch_size)
        weight = None if self.pos_weight is None else self.pos_weight.to(logits.device)
        return F.binary_cross_entropy_with_logits(logits[mask.to(logits.device)], targets.to(logits.device),
                                                  pos_weight=weight)


class ListNetLoss(nn.Module):
    """ListNet: per row, the cross-entropy between the softmax of the labels and the softmax of the logits over
    the row's documents (padding left out), the mean over rows."""

    def __init__(self, mini_batch_size: int | None = None):
        super().__init__()
        self.mini_batch_size = check_int("mini_batch_size", mini_batch_size, 1, none_means="every pair at once")

    def forward(self, score: Score, batch: RerankBatch) -> torch.Tensor:
        labels = batch.needs_labels("ListNetLoss")
        logits = listed_scores(score, batch, self.mini_batch_size)
        mask = batch.mask(logits.device)
        labels = labels.to(logits.device).masked_fill(~mask, float("-inf"))
        log_p = logits.masked_fill(~mask, float("-inf")).log_softmax(dim=1)
        return -(labels.softmax(dim=1) * log_p).masked_fill(~mask, 0.0).sum(dim=1).mean()


#: LambdaLoss's weighting schemes (Wang et al. 2018), sentence-transformers' names in brackets
WEIGHTINGS = ("ndcg_loss2++", "ndcg_loss2", "lambdarank", "ndcg_loss1", "none")


class LambdaLoss(nn.Module):
    """LambdaLoss (Wang et al., 2018): over each row's documents ordered by the model's logits, a weighted pairwise
    logistic loss on every pair whose labels differ (``log2`` by default, ``reduction_log="natural"`` for ln), the
    mean over those pairs in the batch.

    ``weighting``: ``"ndcg_loss2++"`` (the default, ``mu`` x NDCG-Loss2 + LambdaRank: sentence-transformers'
    ``NDCGLoss2PPScheme``), ``"ndcg_loss2"``, ``"lambdarank"``, ``"ndcg_loss1"`` (every pair, gain over discount),
    ``"none"``. Gains are ``2^label - 1`` (negative labels count as 0) over the row's ideal DCG (at least ``eps``);
    ``k``: only pairs with a document in the top ``k`` (all for None); ``sigma`` scales the logit differences.
    """

    def __init__(self, weighting: str = "ndcg_loss2++", mu: float = 10.0, k: int | None = None, sigma: float = 1.0,
                 eps: float = 1e-10, reduction_log: str = "binary", mini_batch_size: int | None = None):
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if reduction_log not in ("binary", "natural"):
            raise ValueError(f"reduction_log must be 'binary' or 'natural', got {reduction_log!r}")
        self.weighting, self.mu, self.sigma, self.eps, self.reduction_log = weighting, mu, sigma, eps, reduction_log
        self.k = check_int("k", k, 1, none_means="every document")
        self.mini_batch_size = check_int("mini_batch_size", mini_batch_size, 1, none_means="every pair at once")

    def forward(self, score: Score, batch: RerankBatch) -> torch.Tensor:
        labels = batch.needs_labels("LambdaLoss")
        logits = listed_scores(score, batch, self.mini_batch_size)
        mask = batch.mask(logits.device)
        width = mask.shape[1]
        # documents in the model's order, best first (padding last), and their labels in that order
        order = logits.masked_fill(~mask, float("-inf")).argsort(dim=1, descending=True, stable=True)
        ranked = logits.gather(1, order)  # [n, k]
        ranked_mask = mask.gather(1, order)
        ranked_labels = labels.to(logits.device).gather(1, order)

        pair_mask = ranked_mask[:, :, None] & ranked_mask[:, None, :]  # [n, k, k]
        if self.weighting != "ndcg_loss1":
            pair_mask &= ranked_labels[:, :, None] > ranked_labels[:, None, :]
        top = min(self.k or width, width)
        in_top = torch.arange(width, device=logits.device) < top
        pair_mask &= in_top[:, None] | in_top[None, :]

        gains = (2.0 ** ranked_labels.clamp(min=0) - 1).masked_fill(~ranked_mask, 0.0)
        ideal = (2.0 ** labels.to(logits.device).clamp(min=0) - 1).masked_fill(~mask, 0.0)
        ideal = ideal.sort(dim=1, descending=True).values
        discount = torch.log2(torch.arange(width, device=logits.device, dtype=torch.float32) + 2.0)  # [k]
        max_dcg = (ideal / discount)[:, :top].sum(dim=1).clamp(min=self.eps)
        gain = gains / max_dcg[:, None]

        weights = self._weights(gain, discount)
        diffs = (ranked[:, :, None] - ranked[:, None, :]).clamp(min=-1e8, max=1e8)
        losses = weights * F.logsigmoid(self.sigma * diffs)
        if self.reduction_log == "binary":
            losses = losses / math.log(2)
        chosen = losses[pair_mask]
        return -chosen.sum() / max(chosen.numel(), 1)

    def _weights(self, gain: torch.Tensor, discount: torch.Tensor) -> torch.Tensor | float:
        """``[n, k, k]`` (or a broadcastable shape) weight of each ordered pair of ranks (i, j)."""
        if self.weighting == "none":
            return 1.0
        if self.weighting == "ndcg_loss1":
            return (gain / discount)[:, :, None]
        gain_gap = (gain[:, :, None] - gain[:, None, :]).abs()
        lambdarank = (1 / discount[:, None] - 1 / discount[None, :]).abs() * gain_gap
        if self.weighting == "lambdarank":
            return lambdarank
        # NDCG-Loss2: delta_|i-j| = |1/D(|i-j|) - 1/D(|i-j|+1)|, with D(r) = log2(1 + r) the discount at rank r
        gap = (torch.arange(len(discount), device=gain.device)[:, None]
               - torch.arange(len(discount), device=gain.device)[None, :]).abs()
        at = gap.clamp(min=1).float()
        delta = (1 / torch.log2(1 + at) - 1 / torch.log2(2 + at)).abs().masked_fill(gap == 0, 0.0)
        ndcg2 = delta[None] * gain_gap
        return ndcg2 if self.weighting == "ndcg_loss2" else self.mu * ndcg2 + lambdarank


class CrossEncoderMultipleNegativesRankingLoss(nn.Module):
    """sentence-transformers' ``cross_encoder.losses.MultipleNegativesRankingLoss``, named apart from the bi-encoder
    loss :class:`~bertkit.sentence.losses.contrastive.MultipleNegativesRankingLoss`. Cross-entropy of each row's
    positive (its first document) against its negatives: ``num_negatives`` documents of other rows drawn at random
    (every one for None; 0: none) and the row's own hard negatives (the rest of its list), on
    ``scale x activation(logit)`` (sigmoid by default; None for the raw logits).

    Other rows' documents identical to a row's positive are not its negatives (duplicates masked by text, so a
    repeated passage is no false negative); with ``mask_duplicates=False`` they are, as in sentence-transformers.
    Every row needs the same number of documents. The draw uses torch's global generator exactly as
    sentence-transformers draws, so a seeded run picks the same negatives.
    """

    def __init__(self, num_negatives: int | None = 4, scale: float = 10.0,
                 activation: str | nn.Module | None = "sigmoid", mask_duplicates: bool = True,
                 mini_batch_size: int | None = None):
        super().__init__()
        from bertkit.sentence.cross_encoder import resolve_activation

        self.num_negatives = check_int("num_negatives", num_negatives, 0, none_means="every other row's document")
        self.scale = scale
        self.activation = None if activation is None else resolve_activation(activation)
        self.mask_duplicates = mask_duplicates
        self.mini_batch_size = check_int("mini_batch_size", mini_batch_size, 1, none_means="every pair at once")

    def forward(self, score: Score, batch: RerankBatch) -> torch.Tensor:
        columns = len(batch.documents[0])
        if any(len(docs) != columns for docs in batch.documents):
            raise ValueError(f"MultipleNegativesRankingLoss needs the same number of documents in every row (a "
                             f"positive and its hard negatives); got {[len(d) for d in batch.documents]}")
        n = batch.rows
        # other rows' documents, column by column (every positive, then every first hard negative, ...)
        pool = [batch.documents[row][column] for column in range(columns) for row in range(n)]
        negatives, present = self._in_batch(batch, pool)  # [n, s] indices into pool
        pairs = [(q, d) for q, docs in zip(batch.queries, batch.documents) for d in docs[:1]]
        pairs += [(batch.queries[i], pool[j]) for i in range(n) for j in negatives[i].tolist()]
        pairs += [(q, d) for q, docs in zip(batch.queries, batch.documents) for d in docs[1:]]
        logits = score_pairs(score, batch.encode, pairs, self.mini_batch_size)
        s = negatives.shape[1]
        positive, in_batch, hard = logits.split([n, n * s, n * (columns - 1)])
        table = torch.cat([positive[:, None], in_batch.view(n, s), hard.view(n, columns - 1)], dim=1)
        if self.activation is not None:
            table = self.activation(table)
        if self.scale:
            table = table * self.scale
        valid = torch.cat([torch.ones(n, 1, dtype=torch.bool), present, torch.ones(n, columns - 1, dtype=torch.bool)],
                          dim=1).to(table.device)
        table = table.masked_fill(~valid, float("-inf"))
        return F.cross_entropy(table, torch.zeros(n, dtype=torch.long, device=table.device))

    def _in_batch(self, batch: RerankBatch, pool: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(indices [n, s], present [n, s])``: row ``i``'s in-batch negatives as indices into ``pool`` (a row
        with fewer candidates than another is padded, ``present`` False there)."""
        n = batch.rows
        owner = torch.arange(len(pool)) % n
        allowed = owner[None, :] != torch.arange(n)[:, None]  # [n, pool]
        if self.mask_duplicates:
            ids = {text: i for i, text in enumerate(dict.fromkeys(pool))}
            pool_ids = torch.tensor([ids[t] for t in pool])
            allowed &= pool_ids[None, :] != pool_ids[:n, None]  # pool[:n] are the positives
        counts = allowed.sum(dim=1)
        wanted = self.num_negatives
        if wanted == 0:
            return torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, 0, dtype=torch.bool)
        if wanted is not None and wanted < len(pool) - len(batch.documents[0]):  # a draw, as ST draws
            drawn = counts >= wanted
            indices = torch.zeros(n, wanted, dtype=torch.long)
            present = torch.zeros(n, wanted, dtype=torch.bool)
            if bool(drawn.any()):
                indices[drawn] = torch.multinomial(allowed[drawn].float(), wanted)
                present[drawn] = True
            short, everyone = ~drawn, self._every(allowed[~drawn], wanted)
            indices[short], present[short] = everyone
            return indices, present
        return self._every(allowed, int(counts.max()) if n else 0)

    @staticmethod
    def _every(allowed: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every allowed index of each row, in pool order, padded to ``width``."""
        order = torch.sort((~allowed).to(torch.int8), dim=1, stable=True).indices[:, :width]
        return order, allowed.gather(1, order)


#: The reranker's multiple-negatives loss by the name it had before issue 39, which the bi-encoder loss
#: :class:`~bertkit.sentence.losses.contrastive.MultipleNegativesRankingLoss` also has: an alias of
#: :class:`CrossEncoderMultipleNegativesRankingLoss`, kept so that code importing it from here still works.
MultipleNegativesRankingLoss = CrossEncoderMultipleNegativesRankingLoss

__all__ = ["BinaryCrossEntropyLoss", "CrossEncoderMultipleNegativesRankingLoss", "LambdaLoss", "ListNetLoss",
           "RerankBatch", "listed_scores", "score_pairs"]
