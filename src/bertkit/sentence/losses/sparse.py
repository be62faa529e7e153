"""Learned-sparse (SPLADE) losses: a bi-encoder loss on the sparse vectors plus regularisers that keep them sparse.

:class:`SpladeLoss` is called as ``loss(embed, batch)`` like every bi-encoder loss (:mod:`bertkit.sentence.losses`):
it embeds each column once (``[n, V]`` vocabulary-sized vectors), hands them to its base loss (any loss of the
table's ``sparse`` rows: the dense MNRL, MarginMSE, KL distillation and CoSENT, whose maths is the same on sparse
vectors) and adds the regularisers: one on the queries (the first column), one on the documents (the others),
each FLOPS (``sum_j mean_i(w_ij)^2``, which punishes the terms many rows use) or L1 (``mean_i sum_j |w_ij|``), each
with its own weight. The weights warm up from 0 over the first steps (:class:`RegulariserWarmup`; the run tells
the loss its ``step`` and ``total_steps``), as sentence-transformers' SpladeRegularizerWeightSchedulerCallback does.

Under data parallelism the regularisers read every rank's rows (gathered with their gradient), so a W-process run
trains as one process with the combined batch would, as the base losses' gathered negatives do.
:class:`CachedSpladeLoss` is the same loss in GradCache form (:func:`~bertkit.sentence.losses.cached.gradcache`):
a large batch's negatives in the memory of ``mini_batch_size`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from bertkit.sentence.batch import Embed, PairBatch
from bertkit.sentence.losses.cached import gradcache
from bertkit.sentence.losses.gather import gather_with_grad


def flops(embeddings: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser of ``[n, V]`` vectors: the sum over the vocabulary of the squared mean weight."""
    return embeddings.mean(dim=0).pow(2).sum()


def l1(embeddings: torch.Tensor) -> torch.Tensor:
    """L1 regulariser of ``[n, V]`` vectors: the mean over rows of the sum of absolute weights."""
    return embeddings.abs().sum(dim=1).mean()


#: the regularisers by ``--query-regulariser`` / ``--document-regulariser`` name
REGULARISERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"flops": flops, "l1": l1}
#: the warm-up shapes of the regulariser weights
WARMUP_SHAPES = ("quadratic", "linear")


@dataclass(frozen=True)
class RegulariserWarmup:
    """The regulariser weights grow from 0 to their value over the first ``int(ratio * total_steps)`` steps (at
    least 1): at step ``s`` (optimizer steps taken) they are multiplied by ``(s / warm) ** 2`` (``quadratic``) or
    ``s / warm`` (``linear``); ``ratio`` 0: no warm-up."""

    ratio: float = 1 / 3
    shape: str = "quadratic"

    def __post_init__(self):
        if not 0 <= self.ratio <= 1:
            raise ValueError(f"--regulariser-warmup must be between 0 and 1 (a fraction of the steps), got "
                             f"{self.ratio}.")
        if self.shape not in WARMUP_SHAPES:
            raise ValueError(f"--regulariser-warmup-shape must be one of {', '.join(WARMUP_SHAPES)}, got "
                             f"{self.shape!r}.")

    def factor(self, step: int, total_steps: int | None) -> float:
        """The multiplier of the weights at ``step`` of ``total_steps`` (None: unknown, no warm-up)."""
        if self.ratio == 0 or total_steps is None:
            return 1.0
        warm = max(1, int(total_steps * self.ratio))
        if step >= warm:
            return 1.0
        return (step / warm) ** (2 if self.shape == "quadratic" else 1)


def _regulariser(name: str, flag: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in REGULARISERS:
        raise ValueError(f"{flag} {name!r} is not a regulariser; choose one of {', '.join(REGULARISERS)}.")
    return REGULARISERS[name]


def _check_weight(value: float | None, flag: str) -> float | None:
    if value is not None and not 0 <= value < float("inf"):
        raise ValueError(f"{flag} must be a non-negative number (0: no regulariser), got {value}.")
    return value


def looked_up(batch: PairBatch, embeddings: Sequence[torch.Tensor]) -> Embed:
    """An ``embed`` that returns the given embedding of each of ``batch``'s columns (found by the identity of its
    inputs), so that a loss which embeds its columns itself reads vectors computed once."""
    by_inputs = {id(inputs): embedding for inputs, embedding in zip(batch.inputs, embeddings)}

    def embed(inputs) -> torch.Tensor:
        return by_inputs[id(inputs)]

    return embed


class SpladeLoss(nn.Module):
    """``base`` on the sparse vectors plus the weighted query and document regularisers (module docstring).

    ``document_weight`` / ``query_weight`` (None or 0: none on that side, e.g. an inference-free model's static
    query side); ``document_regulariser`` / ``query_regulariser``: ``"flops"`` or ``"l1"``; ``*_threshold``: only
    rows with more than that many non-zero weights are regularised (the others count as zeros), as ST's FlopsLoss
    threshold; ``document_only``: every column is a document (one regulariser over all rows, no query side).
    After a call, :attr:`parts` holds the base loss and each weighted regulariser (floats, for the logs).
    """

    def __init__(self, base: nn.Module, document_weight: float = 3e-5, query_weight: float | None = 5e-5, *,
                 document_regulariser: str = "flops", query_regulariser: str = "flops",
                 document_threshold: int | None = None, query_threshold: int | None = None,
                 document_only: bool = False, warmup: RegulariserWarmup | None = None,
                 gather_across_ranks: bool = True):
        super().__init__()
        self.base = base
        self.document_weight = _check_weight(document_weight, "--document-weight")
        self.query_weight = None if document_only else _check_weight(query_weight, "--query-weight")
        self.document_regulariser = _regulariser(document_regulariser, "--document-regulariser")
        self.query_regulariser = _regulariser(query_regulariser, "--query-regulariser")
        self.names = {"document": document_regulariser, "query": query_regulariser}
        self.document_threshold, self.query_threshold = document_threshold, query_threshold
        self.document_only, self.gather_across_ranks = document_only, gather_across_ranks
        self.warmup = warmup if warmup is not None else RegulariserWarmup(0.0)
        #: the optimizer steps taken, and the run's total (set by the run before each step: the warm-up reads them)
        self.step, self.total_steps = 0, None
        self.parts: dict[str, float] = {}

    def weights(self) -> tuple[float | None, float]:
        """The query and document regulariser weights at :attr:`step` (warm-up applied)."""
        factor = self.warmup.factor(self.step, self.total_steps)
        query = None if self.query_weight is None else self.query_weight * factor
        return query, self.document_weight * factor

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return self.from_embeddings([embed(inputs) for inputs in batch.inputs], batch)

    def from_embeddings(self, embeddings: Sequence[torch.Tensor], batch: PairBatch) -> torch.Tensor:
        """The loss on one ``[n, V]`` tensor per column of ``batch`` (column order)."""
        widths = [embedding.shape[-1] for embedding in embeddings]
        if len(set(widths)) > 1:
            raise ValueError(f"the query vectors have {widths[0]} dimensions and the document vectors {widths[1:]}: "
                             "the base loss and the regularisers compare them term by term over one vocabulary; "
                             "give the query and document sides one tokenizer (the --model's).")
        base = self.base(looked_up(batch, embeddings), batch)
        query_weight, document_weight = self.weights()
        documents = torch.cat(list(embeddings) if self.document_only else list(embeddings[1:]))
        document = self._regularise(documents, self.document_regulariser, self.document_threshold) * document_weight
        total, parts = base + document, {"base_loss": base, "document_regulariser": document}
        if query_weight:
            query = self._regularise(embeddings[0], self.query_regulariser, self.query_threshold) * query_weight
            total, parts["query_regulariser"] = total + query, query
        self.parts = {name: float(value.detach()) for name, value in parts.items()}
        return total

    def _regularise(self, rows: torch.Tensor, regulariser, threshold: int | None) -> torch.Tensor:
        if self.gather_across_ranks:
            rows, _ = gather_with_grad(rows)
        if threshold is not None:  # rows at or under the threshold are sparse enough: left alone
            rows = rows * ((rows != 0).sum(dim=1) > threshold).to(rows.dtype)[:, None]
        return regulariser(rows.float())


class CachedSpladeLoss(SpladeLoss):
    """:class:`SpladeLoss` in GradCache form (:mod:`bertkit.sentence.losses.cached`): the same loss and gradients
    with ``mini_batch_size`` rows embedded at a time. ``on_replayed`` as
    :class:`~bertkit.sentence.losses.cached.CachedMultipleNegativesRankingLoss`'s (the Trainer syncs the gradients
    itself: ``grad_sync="manual"``)."""

    def __init__(self, base: nn.Module, document_weight: float = 3e-5, query_weight: float | None = 5e-5, *,
                 mini_batch_size: int = 32, **options):
        super().__init__(base, document_weight, query_weight, **options)
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size < 1:
            raise ValueError(f"--mini-batch-size must be a positive integer, got {mini_batch_size!r}")
        self.mini_batch_size = mini_batch_size
        self.on_replayed: Callable[[], None] | None = None

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return gradcache(embed, batch, self.from_embeddings, self.mini_batch_size, self.on_replayed)
