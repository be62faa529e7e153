"""Refusals, before a run starts, of settings and data that leave a ranking loss nothing to rank.

A ranking loss compares a row's positive with other candidates: in-batch negatives (the other rows' texts), hard
negatives (the row's own), or a row's passages among themselves. Where a training file and the settings leave
every row without a candidate, the loss is the same constant (0) at every step, its gradient is exactly zero, and
a run would "succeed" with the model it started from. These checks read the training files (the opened
:class:`~bertkit.sentence.data.EmbeddingDataset`'s, stopping as soon as a file is shown to have something to
rank) and raise one ``ValueError`` naming the flag or file, why nothing is ranked, and what to change.
:func:`check_bi_encoder_data` serves ``finetune embed``, :func:`check_reranker_data` ``finetune rerank``; the
Trainer's zero-gradient warning covers what only shows while training.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn

from bertkit.sentence.data import EmbeddingDataset, training_rows
from bertkit.sentence.losses import rerank as rerank_losses
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss
from bertkit.sentence.losses.distillation import GISTEmbedLoss
from bertkit.sentence.losses.pairwise import CoSENTLoss

#: how a user gets hard negatives for rows that have none
_MINE = "add hard negatives (bertkit embed mine MODEL --data FILE -o MINED)"


def check_bi_encoder_data(dataset: EmbeddingDataset, loss: nn.Module, loss_name: str) -> None:
    """Refuse ``loss`` (a bi-encoder loss, Matryoshka-wrapped or not) on ``dataset`` when some training file would
    give it a constant loss: an in-batch loss (MNRL, cached MNRL, GIST) with one row per batch and no hard
    negatives, or rows whose every in-batch candidate is a copy of the row's own anchor or positive (masked as a
    duplicate); CoSENT / AnglE with one row per batch or one score for every row. ``dataset.batch_size`` is the
    global batch, which the in-batch losses rank over (CoSENT orders each rank's rows: the same check at one
    process)."""
    from bertkit.sentence.training import innermost_loss  # training imports this module

    inner = innermost_loss(loss)
    for index, path in enumerate(dataset.files):
        rows = min(dataset.batch_size, dataset.sizes[index])  # a file's batches hold at most its rows
        if isinstance(inner, MultipleNegativesRankingLoss | GISTEmbedLoss):
            if any(_negatives(row) for row in _rows(dataset, index)):
                continue
            if rows == 1:
                raise ValueError(f"--loss {loss_name} ranks each row's positive against the other rows of its batch, "
                                 f"but {_one_row(dataset, index)} and its rows have no hard negatives: the loss is 0 "
                                 f"at every step; use --batch-size 2 or more (32 or more trains well), or {_MINE}.")
            both = isinstance(inner, GISTEmbedLoss) or getattr(inner, "symmetric", False)
            if _only_own_texts(_rows(dataset, index), ("anchor", "positive") if both else ("positive",)):
                raise ValueError(f"{path}: every row's in-batch negatives are copies of its own anchor or positive "
                                 f"(masked as duplicates), so --loss {loss_name} has nothing to rank and its loss is "
                                 f"0 at every step; give rows with different positives, or {_MINE}.")
        elif isinstance(inner, CoSENTLoss):
            if any(_negatives(row) for row in _rows(dataset, index)):
                continue
            if rows == 1:
                raise ValueError(f"--loss {loss_name} orders the pairs of a batch by their scores, but "
                                 f"{_one_row(dataset, index)}: the loss is 0 at every step; use --batch-size 2 or "
                                 "more.")
            if _distinct(row.get("label") for row in _rows(dataset, index)) == 1:
                raise ValueError(f"{path}: every row has the same score, so --loss {loss_name} has no pair to order "
                                 "and its loss is constant; give pairs with different scores, or use --loss mnrl "
                                 "for (anchor, positive) rows.")


def check_reranker_data(dataset: EmbeddingDataset, loss: nn.Module, loss_name: str, world_size: int = 1) -> None:
    """Refuse the reranking ``loss`` on ``dataset`` when some training file would give it a constant loss: ListNet
    or LambdaLoss on rows of one passage each (LambdaLoss also on rows whose passages share one label), and MNRL on
    rows without hard negatives when ``--num-negatives 0``, one row per rank's batch, or one positive for every
    row (in-batch copies of a row's positive are masked). BCE always has something to learn."""

    for index, path in enumerate(dataset.files):
        if isinstance(loss, rerank_losses.ListNetLoss | rerank_losses.LambdaLoss):
            lists = (_passage_labels(row) for row in _rows(dataset, index))
            if isinstance(loss, rerank_losses.LambdaLoss):
                if not any(len(set(labels)) > 1 for labels in lists):
                    raise ValueError(f"{path}: no row has two passages with different labels, so --loss lambda has "
                                     "no pair to order and its loss is 0 at every step; use --loss bce for "
                                     f"(query, passage, label) rows, or give rows with negatives ({_MINE}).")
            elif not any(len(labels) > 1 for labels in lists):
                raise ValueError(f"{path}: every row holds one passage, so --loss listnet has nothing to rank and its "
                                 "loss is 0 at every step; use --loss bce for (query, passage, label) rows, or give "
                                 f"rows with negatives ({_MINE}).")
        elif isinstance(loss, rerank_losses.CrossEncoderMultipleNegativesRankingLoss):
            if any(_negatives(row) for row in _rows(dataset, index)):
                continue
            if loss.num_negatives == 0:
                raise ValueError(f"--loss mnrl --num-negatives 0 on {path}, whose rows have no hard negatives: each "
                                 "row's positive is its only candidate and the loss is 0 at every step; drop "
                                 f"--num-negatives 0 (in-batch negatives), or {_MINE}.")
            if min(dataset.batch_size // world_size, dataset.sizes[index]) == 1:
                raise ValueError(f"--loss mnrl ranks each row's positive against the other rows' passages, but "
                                 f"{_one_row(dataset, index)} and its rows have no hard negatives: the loss is 0 at "
                                 f"every step; use --batch-size 2 or more, or {_MINE}.")
            if _only_own_texts(_rows(dataset, index), ("positive",), own=("positive",)):
                raise ValueError(f"{path}: every row has the same positive and no hard negatives, so --loss mnrl's "
                                 "in-batch negatives are all copies of the positive (masked) and its loss is 0 at "
                                 f"every step; give rows with different positives, or {_MINE}.")


# ---------------------------------------------------------------------- reading rows
def _rows(dataset: EmbeddingDataset, index: int) -> Iterator[dict[str, Any]]:
    """The checked rows of the dataset's file ``index``, in file order (read again: nothing holds a file)."""
    for _, row in training_rows(dataset.files[index], dataset.layouts[index], dataset.encoding):
        yield row


def _one_row(dataset: EmbeddingDataset, index: int) -> str:
    """Why the batches of file ``index`` hold one row: the batch size, or the file's one row."""
    if dataset.sizes[index] == 1:
        return f"{dataset.files[index]} holds one row, so each of its batches is that row"
    return "--batch-size 1 puts one row in each batch"


def _negatives(row: dict[str, Any]) -> list[str]:
    """A row's hard negatives (a ``negatives`` list or ``negative_i`` columns)."""
    return [*(row.get("negatives") or []), *(v for k, v in row.items() if k.startswith("negative_"))]


def _passage_labels(row: dict[str, Any]) -> list[float]:
    """A reranking row's label per passage (positive first): its own, else 1 for the positive, 0 per negative."""
    count = 1 + len(_negatives(row))
    label = row.get("label")
    if label is None:
        return [1.0] + [0.0] * (count - 1)
    return [float(v) for v in label] if isinstance(label, list) else [float(label)] * count


def _distinct(values: Iterable[Any], enough: int = 2) -> int:
    """How many distinct values, counting no further than ``enough``."""
    seen = set()
    for value in values:
        seen.add(repr(value))
        if len(seen) >= enough:
            break
    return len(seen)


def _only_own_texts(rows: Iterable[dict[str, Any]], candidates: tuple[str, ...],
                    own: tuple[str, ...] = ("anchor", "positive")) -> bool:
    """Whether every row's in-batch candidates (the ``candidates`` texts of every row) are among the row's ``own``
    texts, which the losses mask as duplicates: the candidate texts are at most two and every row holds them all.
    Stops reading at the first text or row that shows otherwise."""
    texts: set[str] = set()
    common: set[str] | None = None  # the texts every row read so far holds
    for row in rows:
        texts.update(row[role] for role in candidates)
        mine = {row[role] for role in own}
        common = mine if common is None else common & mine
        if not texts <= common:
            return False
    return common is not None
