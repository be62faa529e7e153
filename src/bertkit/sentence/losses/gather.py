"""Gathering in-batch candidates from every rank, keeping the gradient of the local slice.

Under DDP each rank embeds its own rows; an in-batch-negatives loss wants every rank's rows as candidates.
:func:`gather_with_grad` concatenates one column's embeddings from all ranks in rank order (rank 0's rows,
then rank 1's, ...). Gather each column on its own and concatenate the results column by column, so that
positives and negatives never come back interleaved.

Gradients: rank r's loss depends on every rank's rows, so the gradient of rank r's local rows is the sum,
over all ranks, of each rank's loss gradient with respect to them. The backward all-reduces the gradient of
the gathered tensor (a sum) and keeps the local slice. After DDP averages the parameter gradients over the
ranks, the result is the gradient of the mean of the ranks' losses, which is the single-process loss of
the combined batch when every rank holds the same number of rows.

:func:`gather_ids` gathers a column's text ids the same way (a plain all-gather, no gradient), so that a loss
can mask a candidate from another rank that repeats a row's text (the ids are numbered over the global batch,
see :class:`~bertkit.sentence.data.PairCollator`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def distributed() -> bool:
    """Whether a process group with more than one rank is initialised (a gather then has work to do)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _row_counts(n: int, device: torch.device) -> list[int]:
    """Every rank's row count, in rank order (ranks may hold different counts, e.g. a last short batch)."""
    local = torch.tensor([n], dtype=torch.int64, device=device)
    counts = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, local)
    return [int(c.item()) for c in counts]


def _gather(tensor: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """``[sum(counts), ...]``: every rank's ``tensor``, padded to the largest count for the collective and
    trimmed back, in rank order."""
    most = max(counts)
    padded = tensor.new_zeros((most, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:count] for part, count in zip(parts, counts)])


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, counts: list[int], start: int) -> torch.Tensor:
        ctx.start, ctx.n = start, tensor.shape[0]
        return _gather(tensor.detach(), counts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # every rank's loss reads this rank's rows: their gradient is the sum of all ranks' contributions
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start: ctx.start + ctx.n], None, None


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(gathered, start)``: ``tensor [n, d]`` from every rank concatenated in rank order ``[N, d]``, and
    where this rank's rows start in it (this rank's row i is row ``start + i``). Differentiable: the
    gradient reaching ``tensor`` is the sum over all ranks of their gradients for these rows (see the
    module docstring). Without a process group of more than one rank: ``(tensor, 0)``.

    A collective: every rank must call it, the same number of times, in the same order.
    """
    if not distributed():
        return tensor, 0
    counts = _row_counts(tensor.shape[0], tensor.device)
    start = sum(counts[: dist.get_rank()])
    return _GatherWithGrad.apply(tensor, counts, start), start



def gather_ids(ids: torch.Tensor) -> torch.Tensor:
    """``[N]``: every rank's ``ids [n]`` (e.g. one column's text ids) concatenated in rank order, laid out as
    :func:`gather_with_grad` lays out that column's embeddings; no gradient. Without a process group of more
    than one rank: ``ids``. A collective, like :func:`gather_with_grad`."""
    if not distributed():
        return ids
    return _gather(ids, _row_counts(ids.shape[0], ids.device))
