"""Data-parallel training with torch.distributed, when the process was launched by ``torchrun``.

``torchrun --nproc-per-node N train.py`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``
(and ``MASTER_ADDR`` / ``MASTER_PORT``); :func:`init_distributed` then joins the process
group (gloo on CPU, NCCL on CUDA). Without those variables everything here degrades to
a single process and costs nothing. The processes must all arrive within ``BERTKIT_JOIN_TIMEOUT``
seconds (default 120): variables left in a shell by an earlier job would otherwise make a plain run
wait, silently, for processes that never come.

DDP only all-reduces gradients when its own ``forward`` runs (a model whose backward runs its forward again
trains without it: the Trainer's ``grad_sync="manual"``, :func:`broadcast_from_main` and
:func:`average_gradients`), but the engine calls a
task model's ``training_step(batch)``: :class:`TrainingStepModule` is the adapter whose
``forward(batch)`` is the inner model's ``training_step``, and it is what DDP wraps.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

logger = logging.getLogger("bertkit.training")

#: seconds the processes of a job have to find each other (the environment variable overrides the default)
JOIN_TIMEOUT_ENV = "BERTKIT_JOIN_TIMEOUT"
DEFAULT_JOIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the job; ``world_size == 1`` when not distributed."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that logs and writes files."""
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init_distributed(device_type: str, timeout_s: float = 600.0) -> DistributedContext:
    """Join (or reuse) the process group described by the torchrun environment.

    Backend: NCCL for ``device_type == "cuda"``, gloo otherwise. A process group that is
    already initialised is reused as it is. Returns the single-process context when the
    environment describes no multi-process job. ``timeout_s`` bounds each collective; the
    processes must find each other within :func:`join_timeout` seconds, else ``ValueError``
    names the variables that described the job and how to run without them.
    """
    if dist.is_available() and dist.is_initialized():
        return DistributedContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    if not launched_by_torchrun():
        return DistributedContext()
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed.")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    join = join_timeout()
    job = f"WORLD_SIZE={world_size} and RANK={rank} are set in the environment"
    fix = ("Left over from an earlier job? Run without them (unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR "
           f"MASTER_PORT), or launch every process with torchrun --nproc-per-node {world_size}")
    unset = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if unset:
        raise ValueError(f"{job}, describing a job of {world_size} processes, but {' and '.join(unset)} "
                         f"{'is' if len(unset) == 1 else 'are'} not, so no process can find the others. {fix}.")
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    logger.info("joining a job of WORLD_SIZE=%d processes as RANK=%d (from the environment) at %s; waiting up to "
                "%g s for the others", world_size, rank, where, join)
    try:
        # env:// as init_process_group reads it, with the join's own timeout (rank 0 waits for every process)
        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world_size,
                                           timeout=datetime.timedelta(seconds=join)))
    except (RuntimeError, ValueError) as error:  # torch's DistStoreError / DistNetworkError, a bad MASTER_PORT
        raise ValueError(f"{job}, so this process joined a job of {world_size} processes at MASTER_ADDR:MASTER_PORT="
                         f"{where}, and the others did not come within {join:g} s ({' '.join(str(error).split())}). "
                         f"{fix}, or wait longer with {JOIN_TIMEOUT_ENV}=SECONDS.") from None
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    store = dist.PrefixStore("default_pg", store)  # the keys init_process_group's own rendezvous would use
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return DistributedContext(rank, world_size, local_rank)


def join_timeout() -> float:
    """Seconds the processes of a job have to find each other: ``BERTKIT_JOIN_TIMEOUT``, else
    :data:`DEFAULT_JOIN_TIMEOUT_S`; a value that is not a positive number is a ``ValueError`` naming it."""
    text = os.environ.get(JOIN_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_JOIN_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{JOIN_TIMEOUT_ENV}={text!r} is not a number of seconds; set it to e.g. 300, or unset it "
                         f"for the default {DEFAULT_JOIN_TIMEOUT_S:g}.")
    return seconds


def cleanup() -> None:
    """Leave the process group (if any); call once at the end of a torchrun script."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class TrainingStepModule(nn.Module):
    """``forward(batch)`` → ``model.training_step(batch)``: what DDP wraps so its gradient hooks fire."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.model.training_step(batch)


def wrap_ddp(model: nn.Module, ctx: DistributedContext, device: torch.device,
             find_unused_parameters: bool = False) -> DistributedDataParallel:
    """DDP around :class:`TrainingStepModule` ``(model)``; rank 0's weights are broadcast to all ranks."""
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(TrainingStepModule(model), device_ids=device_ids,
                                   find_unused_parameters=find_unused_parameters)


def broadcast_from_main(model: nn.Module) -> None:
    """Give every rank rank 0's parameters and buffers (what DDP does when it wraps a model), for a model trained
    without DDP (``grad_sync="manual"``)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


def average_gradients(parameters: list[torch.Tensor]) -> None:
    """Replace each gradient by its mean over the ranks (what DDP does), in one all-reduce: the Trainer's
    ``grad_sync="manual"``. Every rank must hold gradients for the same parameters (the same model and loss do); a
    parameter without one is left alone."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for grad, mean in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(mean.view_as(grad))


def all_reduce_(tensor: torch.Tensor, ctx: DistributedContext, op: str = "sum") -> torch.Tensor:
    """In-place sum (or ``"max"``) over ranks; a no-op in a single process."""
    if ctx.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor


def gather_to_main(obj: object, ctx: DistributedContext) -> list[object] | None:
    """Every rank's ``obj`` as a list on rank 0 (None on the others); ``[obj]`` in a single process."""
    if not ctx.enabled:
        return [obj]
    out = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def gather_to_all(obj: object, ctx: DistributedContext) -> list[object]:
    """Every rank's ``obj`` as a list in rank order, on every rank; ``[obj]`` in a single process."""
    if not ctx.enabled:
        return [obj]
    out: list[object] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(ctx: DistributedContext) -> None:
    if ctx.enabled:
        dist.barrier()
