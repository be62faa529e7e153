"""Data-parallel training with torch.distributed, when the process was launched by ``torchrun``.

``torchrun --nproc-per-node N train.py`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``
(and ``MASTER_ADDR`` / ``MASTER_PORT``); :func:`init_distributed` then joins the process
group (gloo on CPU, NCCL on CUDA). Without those variables everything here degrades to
a single process and costs nothing.

DDP only all-reduces gradients when its own ``forward`` runs, but the engine calls a
task model's ``training_step(batch)``: :class:`TrainingStepModule` is the adapter whose
``forward(batch)`` is the inner model's ``training_step``, and it is what DDP wraps.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


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
    environment describes no multi-process job.
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
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return DistributedContext(rank, world_size, local_rank)


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
