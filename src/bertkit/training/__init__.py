"""One training loop for every bertkit task: ``Trainer(model, dataset, config=TrainingConfig(...)).train()``.

The engine works on any ``nn.Module`` with ``training_step(batch) -> (loss, metrics)``
and imports nothing from ``bertkit.tasks`` (design.md §2). Pieces:

* :mod:`.config`: :class:`TrainingConfig`, device / precision resolution;
* :mod:`.optim`: AdamW parameter groups, warmup + linear / polynomial / constant schedules;
* :mod:`.sampler`: :class:`SeededSampler` and the sampler protocol for exact resume (and
  :class:`MixtureSampler`, several datasets drawn with weights);
* :mod:`.checkpoint`: atomic checkpoints, rotation, discovery, RNG capture;
* :mod:`.distributed`: DDP under ``torchrun`` (gloo on CPU, NCCL on CUDA);
* :mod:`.trainer`: :class:`Trainer`;
* :mod:`.metrics`: metrics.jsonl averaging and :func:`plot_metrics`;
* :mod:`.evaluation`: :func:`predict_batches`, the one inference loop task modules decode.
"""

from bertkit.training.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from bertkit.training.config import TrainingConfig, cpu_supports_bf16, resolve_device, resolve_precision
from bertkit.training.distributed import DistributedContext, TrainingStepModule, cleanup, init_distributed
from bertkit.training.evaluation import predict_batches
from bertkit.training.metrics import plot_metrics
from bertkit.training.optim import build_optimizer, build_scheduler, lr_multiplier, parameter_groups
from bertkit.training.sampler import LengthGroupedSampler, MixtureSampler, SeededSampler
from bertkit.training.trainer import EVENTS, NonFiniteLossError, Trainer, TrainState

__all__ = [
    "EVENTS",
    "DistributedContext",
    "LengthGroupedSampler",
    "MixtureSampler",
    "NonFiniteLossError",
    "SeededSampler",
    "TrainState",
    "Trainer",
    "TrainingConfig",
    "TrainingStepModule",
    "build_optimizer",
    "build_scheduler",
    "cleanup",
    "cpu_supports_bf16",
    "init_distributed",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "lr_multiplier",
    "parameter_groups",
    "plot_metrics",
    "predict_batches",
    "resolve_device",
    "resolve_precision",
    "save_checkpoint",
]
