"""TrainingConfig: every knob of the training loop, validated on construction.

Invalid values raise ``ValueError`` naming the field and what is allowed, as
:class:`bertkit.config.BERTConfig` does. Where the loop runs (device, precision) is
settled at run time by :func:`resolve_device` and :func:`resolve_precision`, since
``"auto"`` and bf16 support depend on the machine; :func:`describe_precision` is the line a run says
about it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, fields
from typing import Any

import torch

from bertkit.checks import check_int
from bertkit.devices import bf16_reason, cpu_bf16, gpu, native_bf16

SCHEDULES = ("linear", "polynomial", "constant")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "gpu")


@dataclass
class TrainingConfig:
    """Optimisation, schedule, precision, bookkeeping and runtime options of :class:`~bertkit.training.Trainer`.

    ``batch_size`` is the *global* batch: examples per optimizer step, summed over the
    ``gradient_accumulation_steps`` micro-batches and over all DDP ranks; it must divide
    evenly (micro-batch = batch_size / (accumulation × world size)). ``max_steps`` counts
    optimizer steps, skipped (non-finite) ones included. Learning rate: linear warmup
    over ``warmup_steps`` (or ``ceil(warmup_ratio * max_steps)``; none in a one-step run), then ``schedule``
    decays to ``end_learning_rate`` at ``max_steps`` (``"polynomial"`` with ``power``;
    ``"linear"`` is power 1; ``"constant"`` stays). ``eval_every`` / ``save_every`` of
    ``None`` mean "only at the end"; ``keep_last=None`` keeps every checkpoint.
    ``max_grad_norm=None`` disables clipping. ``epochs``, ``keep_best`` and ``patience`` are the run's
    (:func:`~bertkit.training.run.run_recipe`): how long a recipe trains, which evaluation's model it keeps
    and when it stops early; the Trainer itself needs ``max_steps``. ``device="gpu"`` means CUDA (or MPS).
    ``threads``: CPU threads, ``"auto"`` (measured on the run's first steps: all or one, the faster; see
    :mod:`bertkit.training.threads`), a number, or None (leave torch's count as it is); it changes the
    speed, never the numbers, and may change on resume. ``report_to``: the experiment trackers the run also
    reports to, a tuple of ``"tensorboard"``, ``"mlflow"``, ``"trackio"`` (given as a name, a comma list or a
    sequence; ``"none"`` or empty: none; see :mod:`bertkit.training.reporting`); it may change on resume.
    """

    #: Optimizer steps to train for; None: ``epochs`` passes over the data (a recipe run resolves it).
    max_steps: int | None = None
    #: Peak learning rate, reached after the warmup.
    learning_rate: float = 1e-4
    #: AdamW weight decay; not applied to biases and LayerNorm weights.
    weight_decay: float = 0.01
    #: AdamW's beta1.
    adam_beta1: float = 0.9
    #: AdamW's beta2.
    adam_beta2: float = 0.999
    #: AdamW's epsilon.
    adam_epsilon: float = 1e-6
    warmup_steps: int = 0
    #: Warmup as a share of ``max_steps`` (``ceil(warmup_ratio * max_steps)`` steps), instead of ``warmup_steps``.
    warmup_ratio: float | None = None
    schedule: str = "linear"
    power: float = 1.0
    end_learning_rate: float = 0.0
    batch_size: int = 32
    gradient_accumulation_steps: int = 1
    #: Examples per evaluation batch; None: the training micro-batch size.
    eval_batch_size: int | None = None
    #: Clip the gradients' global norm to this; None: no clipping.
    max_grad_norm: float | None = 1.0
    #: auto (bf16 where the device computes it natively, else fp32), fp32, bf16 or fp16 (CUDA, with loss scaling).
    precision: str = "auto"
    eval_every: int | None = None
    #: Write a training record to metrics.jsonl every this many steps.
    log_every: int = 10
    save_every: int | None = None
    #: Checkpoints kept in the run directory (older ones are deleted); None: all.
    keep_last: int | None = 3
    #: The run directory: checkpoints, metrics.jsonl, run.json and the final model.
    output_dir: str = "output"
    #: Seed of the initialisation, the data order and dropout.
    seed: int = 42
    #: Consecutive steps with a non-finite loss (skipped) before the run stops with NonFiniteLossError.
    max_nonfinite_steps: int = 10
    #: Recompute activations in the backward pass: less memory, more time.
    gradient_checkpointing: bool = False
    #: DataLoader worker processes (0: load in the training process).
    num_workers: int = 0
    #: auto (CUDA when present, else CPU), cpu, cuda or gpu.
    device: str = "auto"
    #: Show a progress bar on stderr (the main process only).
    progress_bar: bool = True
    #: DDP's flag of the same name, for models with parameters a step may not use.
    find_unused_parameters: bool = False
    threads: int | str | None = None
    report_to: tuple[str, ...] = ()
    #: Passes over the training data (may be fractional), for a recipe that knows its steps per epoch
    #: (:func:`bertkit.training.run.run_recipe`); ``max_steps``, when given, wins.
    epochs: float | None = None
    #: The metric whose best evaluation's model a run keeps (lower is better for names ending in "loss");
    #: None: the recipe's default (a fine-tuning task's own metric, else the last model).
    keep_best: str | None = None
    #: Evaluations in a row without a better ``keep_best`` metric after which a run stops; None: never.
    patience: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.output_dir, os.PathLike):
            self.output_dir = os.fspath(self.output_dir)
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field."""
        for name in ("batch_size", "gradient_accumulation_steps", "log_every", "max_nonfinite_steps"):
            _check_int(name, getattr(self, name), minimum=1)
        if self.max_steps is None and self.epochs is None:
            raise ValueError("TrainingConfig needs max_steps (optimizer steps) or epochs (passes over the data).")
        if self.epochs is not None:
            _check_float("epochs", self.epochs, positive=True)
        if self.keep_best is not None and (not isinstance(self.keep_best, str) or not self.keep_best):
            raise ValueError(f"TrainingConfig.keep_best must be a metric name (e.g. 'accuracy', 'loss') or None, "
                             f"got {self.keep_best!r}.")
        for name in ("max_steps", "eval_batch_size", "eval_every", "save_every", "keep_last", "patience"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=1)
        for name in ("warmup_steps", "num_workers", "seed"):
            _check_int(name, getattr(self, name), minimum=0)
        for name in ("learning_rate", "adam_epsilon"):
            _check_float(name, getattr(self, name), positive=True)
        for name in ("weight_decay", "end_learning_rate"):
            _check_float(name, getattr(self, name))
        if not self.end_learning_rate <= self.learning_rate:
            raise ValueError(f"TrainingConfig.end_learning_rate ({self.end_learning_rate}) must not exceed "
                             f"learning_rate ({self.learning_rate}).")
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 <= value < 1.0:
                raise ValueError(f"TrainingConfig.{name} must lie in [0, 1), got {value!r}.")
        if self.warmup_ratio is not None:
            if not isinstance(self.warmup_ratio, int | float) or not 0.0 <= self.warmup_ratio <= 1.0:
                raise ValueError(f"TrainingConfig.warmup_ratio must lie in [0, 1], got {self.warmup_ratio!r}.")
            if self.warmup_steps:
                raise ValueError("TrainingConfig.warmup_steps and warmup_ratio are alternatives; set only one "
                                 f"(got warmup_steps={self.warmup_steps}, warmup_ratio={self.warmup_ratio}).")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainingConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}.")
        _check_float("power", self.power, positive=True)
        if self.max_grad_norm is not None:
            _check_float("max_grad_norm", self.max_grad_norm, positive=True)
        if self.precision not in PRECISIONS:
            raise ValueError(f"TrainingConfig.precision must be one of {PRECISIONS}, got {self.precision!r}.")
        if self.device not in DEVICES:
            raise ValueError(f"TrainingConfig.device must be one of {DEVICES}, got {self.device!r}.")
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError("TrainingConfig.precision='fp16' needs CUDA (it trains with a GradScaler); "
                             "on CPU use 'bf16' or 'fp32'.")
        if self.batch_size % self.gradient_accumulation_steps:
            raise ValueError(f"TrainingConfig.batch_size ({self.batch_size}) must be divisible by "
                             f"gradient_accumulation_steps ({self.gradient_accumulation_steps}).")
        for name in ("gradient_checkpointing", "progress_bar", "find_unused_parameters"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TrainingConfig.{name} must be True or False, got {getattr(self, name)!r}.")
        from bertkit.training.threads import parse_threads

        self.threads = parse_threads(self.threads, "TrainingConfig.threads")
        from bertkit.training.reporting import parse_report_to

        self.report_to = parse_report_to(self.report_to)
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise ValueError(f"TrainingConfig.output_dir must be a non-empty path, got {self.output_dir!r}.")

    # ------------------------------------------------------------------ derived
    @property
    def num_warmup_steps(self) -> int:
        """``warmup_steps``, or ``ceil(warmup_ratio * max_steps)`` when a ratio is given; 0 for a one-step run.

        The warm-up's first step has rate 0 (as HF's and Google's schedules, which the fine-tuning benchmarks
        match step for step), so a one-step run that warmed up would train nothing: it trains at the peak rate."""
        if self.max_steps == 1:
            return 0
        if self.warmup_ratio is not None:
            return math.ceil(self.warmup_ratio * self.max_steps)
        return self.warmup_steps

    def micro_batch_size(self, world_size: int = 1) -> int:
        """Examples per forward pass on one rank; ``ValueError`` if the global batch does not split evenly."""
        parts = self.gradient_accumulation_steps * world_size
        if self.batch_size % parts:
            raise ValueError(f"TrainingConfig.batch_size ({self.batch_size}) must be divisible by "
                             f"gradient_accumulation_steps × world size ({parts}).")
        return self.batch_size // parts

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainingConfig:
        """Build from a dict (e.g. JSON); unknown keys raise ``ValueError``."""
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"Unknown TrainingConfig field(s) {sorted(unknown)}; valid fields: "
                             f"{[f.name for f in fields(cls)]}.")
        return cls(**values)

    def replace(self, **changes: Any) -> TrainingConfig:
        """A validated copy with ``changes`` applied."""
        return self.from_dict({**self.to_dict(), **changes})


def _check_int(name: str, value: Any, minimum: int) -> None:
    check_int(f"TrainingConfig.{name}", value, minimum)


def _check_float(name: str, value: Any, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise ValueError(f"TrainingConfig.{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}.")


# ---------------------------------------------------------------------- runtime resolution
def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``"auto"`` → CUDA if available else CPU; ``"gpu"`` → CUDA or MPS; raises if the device is absent."""
    if name not in DEVICES:
        raise ValueError(f"TrainingConfig.device must be one of {DEVICES}, got {name!r}.")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "gpu":
        found = gpu("TrainingConfig.device='gpu'")
        if found.type != "cuda":
            return found
        name = "cuda"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("TrainingConfig.device='cuda' but CUDA is not available; use 'cpu' or 'auto'.")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision the loop will actually use on ``device``.

    ``auto`` (the default) is bf16 autocast where ``device`` has native bf16 (AVX512-BF16/AMX CPUs,
    Ampere+ GPUs), fp32 elsewhere.
    fp16 needs CUDA (``ValueError`` elsewhere). bf16 on CPU needs hardware support
    (AVX512-BF16, AMX or Arm BF16); without it this warns and returns ``"fp32"``.
    """
    if precision == "auto":  # bf16 autocast where the hardware computes it natively, else fp32
        return "bf16" if native_bf16(device) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"TrainingConfig.precision='fp16' needs CUDA (device is {device}); use 'bf16' or 'fp32'.")
    if precision == "bf16" and device.type == "cpu" and not cpu_supports_bf16():
        warnings.warn("precision='bf16' requested but this CPU has no native bf16 support "
                      f"(capability {torch.backends.cpu.get_cpu_capability()}); training in fp32.", stacklevel=2)
        return "fp32"
    return precision


def describe_precision(requested: str, used: str, device: torch.device, resumed: bool = False) -> str:
    """The one line a run says at its start about its precision: ``requested`` (the config's), ``used`` (what it
    computes in) and why, e.g. ``"precision auto -> bf16 autocast, fp32 weights (this CPU has avx512_bf16)"``.
    ``resumed``: ``used`` is the resumed run's own precision rather than this machine's choice."""
    shown = {"bf16": "bf16 autocast, fp32 weights", "fp16": "fp16 autocast, fp32 weights, loss scaling"}.get(used, used)
    why = ["the resumed run's"] if resumed else ["as requested"] if requested == used else []
    if requested in ("auto", "bf16") or used == "bf16":
        why.append(bf16_reason(device))
    head = f"precision {requested} -> {shown}" if requested != used else f"precision {shown}"
    return head + (f" ({'; '.join(why)})" if why else "")


#: True when the CPU has native bf16 arithmetic and a bf16 autocast matmul runs (:func:`bertkit.devices.cpu_bf16`)
cpu_supports_bf16 = cpu_bf16
