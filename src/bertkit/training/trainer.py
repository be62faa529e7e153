"""Trainer: one training loop for any ``nn.Module`` with ``training_step(batch) -> (loss, metrics)``.

The engine calls nothing else on the model (plus ``train()`` / ``eval()``), so the same
loop pretrains (``BERTForPreTraining``) and fine-tunes (a task model with a head):

* a step = ``gradient_accumulation_steps`` micro-batches; each micro-batch's loss is
  scaled by ``1 / gradient_accumulation_steps`` (DDP then averages over ranks). The
  update is thus the mean of the micro-batch means: exactly the full-batch gradient when
  every micro-batch carries as many loss units (examples for NSP / classification,
  labelled tokens for MLM), and the usual close approximation otherwise. We chose this
  over token weighting because one generic loop cannot split a model's summed MLM + NSP
  loss into per-token and per-example parts;
* global gradient-norm clipping, autocast per :func:`~bertkit.training.config.resolve_precision`
  (fp16 with a GradScaler on CUDA), AdamW and a LambdaLR schedule. Under autocast the parameters, their
  gradients and the optimizer state stay float32 (the master weights): only the products inside the
  ``autocast`` context compute in bf16 / fp16. The run says its precision in one line when training starts
  (:func:`~bertkit.training.config.describe_precision`, an INFO record of ``bertkit.training``), and a
  checkpoint records it: a resumed run with ``precision="auto"`` keeps the precision the run used (chosen
  on the machine where it started), wherever it resumes;
* a step whose loss (or, without fp16, gradient norm) is non-finite on any rank applies
  no update: gradients are zeroed, the step is counted and logged, and
  ``max_nonfinite_steps`` such steps in a row raise :class:`NonFiniteLossError`. Skipped
  steps still advance ``step`` and the schedule (they consumed their batches);
* a step that cannot change what the model computes (learning rate 0, a gradient of exactly zero, or
  skipped) is counted: :data:`ZERO_GRADIENT_STEPS` steps in a row with an exactly zero gradient (a loss
  that does not depend on the weights: nothing to rank, a frozen model) give one warning, in the log and as
  the ``"warning"`` of the next train record of metrics.jsonl; a run whose every step was such a step ends
  with a warning that it trained nothing. Both are kept in ``trainer.warnings`` for the task's results;
* every ``log_every`` steps one JSON line goes to ``output_dir/metrics.jsonl`` (rank 0;
  format in :mod:`.metrics`), and from there to the experiment trackers of ``config.report_to``
  (:mod:`.reporting`); every ``eval_every`` steps (and at ``max_steps``) the eval
  set is scored; every ``save_every`` steps (and at the end) a checkpoint is written
  (:mod:`.checkpoint`);
* on glibc, malloc's free pages are given back to the system every :data:`~.allocator.TRIM_EVERY`
  steps (:mod:`.allocator`), which, with the engine's rounded row counts, keeps the resident set flat over
  the steps (see there).

Data comes from a dataset read in the order of a sampler (:mod:`.sampler`) or from a *batch source*, a
stateful stream of whole micro-batches (:mod:`.batch_source`: the embedding and reranking trainers' batches of
one file's rows). ``TrainingConfig.batch_size`` is the examples (rows) per optimizer step over every process and
accumulated micro-batch; a run says at its start how that splits (one INFO line: the per-process share and the
accumulation), and ``TrainState.examples_seen`` counts the rows trained on.

Gradient synchronisation over data-parallel ranks (``grad_sync``): ``"ddp"`` wraps the model in DDP, which
all-reduces the gradients in the backward of each step's last micro-batch; ``"manual"`` runs the model unwrapped
and averages the gradients over the ranks once the step's micro-batches are back-propagated (one all-reduce:
:func:`~bertkit.training.distributed.average_gradients`), for a model whose backward runs its forward again
(the cached, GradCache loss replays its mini-batches inside ``backward()``, which DDP's reducer refuses). A
model declares what it needs as its ``grad_sync`` attribute; the Trainer's argument overrides it.

Exact resume: the data order depends only on the sampler's ``(seed, epoch, position)`` (or the batch source's
state), the trainer snapshots that state after
every micro-batch it consumes, and a checkpoint holds that snapshot, the ``state_dict()``
of the collate function and of any ``stateful`` objects, the RNG states of every rank,
the optimizer, scheduler and step. On CPU in fp32 with ``num_workers=0`` a run that is
interrupted and resumed ends with bit-identical weights to an uninterrupted one. With
workers the data order stays exact, but a collator drawing random numbers runs in the
workers, so its masks are only reproducible if it derives them from the example indices.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from bertkit.progress import progress_bar
from bertkit.training import allocator, reporting
from bertkit.training import checkpoint as ckpt
from bertkit.training.batch_source import (
    BATCH_SOURCE_METHODS,
    SAMPLER_METHODS,
    CollateItem,
    Items,
    MicroBatches,
    check_protocol,
)
from bertkit.training.config import TrainingConfig, describe_precision, resolve_device, resolve_precision
from bertkit.training.distributed import (
    all_reduce_,
    average_gradients,
    barrier,
    broadcast_from_main,
    gather_to_main,
    init_distributed,
    wrap_ddp,
)
from bertkit.training.evaluation import autocast, to_device
from bertkit.training.gradnorm import clip_grad_norm
from bertkit.training.metrics import MetricWindow, truncate_metrics
from bertkit.training.optim import build_optimizer, build_scheduler
from bertkit.training.sampler import SeededSampler
from bertkit.training.threads import ThreadChoice

logger = logging.getLogger("bertkit.training")

#: TrainingConfig fields a resume must keep: the position in the data depends on them
FIXED_ON_RESUME = ("batch_size", "gradient_accumulation_steps", "seed")
#: fields that change where and how a run reports or runs, not what it learns: free to change on resume
BOOKKEEPING = frozenset({"output_dir", "progress_bar", "num_workers", "device", "log_every", "eval_every",
                         "save_every", "keep_last", "eval_batch_size", "gradient_checkpointing",
                         "find_unused_parameters", "threads", "report_to"})


def hyperparameter_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"name: old -> new"`` for each hyperparameter (not bookkeeping, not fixed) that differs."""
    return [f"{name}: {old[name]!r} -> {new[name]!r}" for name in sorted(new)
            if name in old and name not in BOOKKEEPING and name not in FIXED_ON_RESUME and old[name] != new[name]]


#: steps in a row with an exactly zero gradient after which the run warns (once) that it is not learning
ZERO_GRADIENT_STEPS = 3

#: The Trainer's callback events, in the order a run meets them (``callbacks`` maps each to functions of the
#: trainer; ``on_metrics`` follows every line written to metrics.jsonl).
EVENTS = ("on_train_begin", "on_step_end", "on_log", "on_evaluate", "on_metrics", "on_save", "on_train_end")
#: how gradients meet over data-parallel ranks (module docstring)
GRAD_SYNCS = ("ddp", "manual")
METRICS_FILE = "metrics.jsonl"


class NonFiniteLossError(RuntimeError):
    """Raised after ``max_nonfinite_steps`` consecutive steps with a NaN / inf loss or gradient."""


@dataclass
class TrainState:
    """Where the run is; saved in every checkpoint. ``batch_in_epoch`` counts this rank's micro-batches."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    examples_seen: int = 0
    nonfinite_steps: int = 0
    consecutive_nonfinite: int = 0
    elapsed_s: float = 0.0
    #: steps that could not change the model: learning rate 0, an exactly zero gradient, or skipped (non-finite)
    idle_steps: int = 0
    zero_lr_steps: int = 0
    zero_gradient_steps: int = 0
    consecutive_zero_gradient: int = 0


class Trainer:
    """Train ``model`` on ``train_dataset`` as ``config`` says; see the module docstring for the loop.

    ``collate_fn`` turns a list of examples into the batch dict ``training_step`` takes.
    The order of examples comes from ``sampler`` (an object following the
    :mod:`.sampler` protocol, already sharded for this rank) or is built by
    ``sampler_factory(len(train_dataset), seed=, rank=, world_size=)`` (default
    :class:`SeededSampler`). Instead of ``train_dataset``, ``batch_source`` (:mod:`.batch_source`) yields the
    micro-batches' items, each turned into a batch by ``collate_fn(item)``. ``grad_sync``: ``"ddp"`` or
    ``"manual"`` (module docstring; None: the model's ``grad_sync`` attribute, else ``"ddp"``). ``stateful``
    names further objects (with ``state_dict``/``load_state_dict``, or ``torch.Generator``) to checkpoint per rank.
    ``callbacks`` maps an event of :data:`EVENTS` to functions called with the trainer; a
    callback may set ``trainer.should_stop = True`` (identically on every rank) to end the
    run after the current step, with a checkpoint. ``on_metrics`` follows every line written to
    metrics.jsonl (rank 0; the record is ``trainer.last_record``): through it the trackers of
    ``config.report_to`` (:mod:`.reporting`, attached here; ``trainer.reporting``) get the same numbers.
    ``config.threads`` sets the CPU thread count
    (:class:`~bertkit.training.threads.ThreadChoice`, reported as ``trainer.threads.report()``).
    """

    def __init__(self, model: nn.Module, train_dataset=None, *, config: TrainingConfig,
                 collate_fn: Callable | None = None, sampler: Any = None, sampler_factory: Callable | None = None,
                 batch_source: Any = None, grad_sync: str | None = None,
                 eval_dataset=None, eval_collate_fn: Callable | None = None,
                 callbacks: Mapping[str, Callable | Iterable[Callable]] | None = None,
                 stateful: Mapping[str, Any] | None = None, apply_changes: bool = False):
        if not callable(getattr(model, "training_step", None)):
            raise TypeError(f"{type(model).__name__} has no training_step(batch) -> (loss, metrics); "
                            "the Trainer calls only that.")
        if sampler is not None and sampler_factory is not None:
            raise ValueError("Pass either sampler or sampler_factory, not both.")
        if (batch_source is None) == (train_dataset is None) or (batch_source is not None and (
                sampler is not None or sampler_factory is not None)):
            raise ValueError("Pass either train_dataset (with a sampler or sampler_factory) or batch_source.")
        self.grad_sync = grad_sync or getattr(model, "grad_sync", "ddp")
        if self.grad_sync not in GRAD_SYNCS:
            raise ValueError(f"grad_sync must be one of {GRAD_SYNCS}, got {self.grad_sync!r}.")
        if config.max_steps is None:
            raise ValueError("TrainingConfig.max_steps is None: the Trainer trains a number of steps; give "
                             "max_steps, or run a recipe (bertkit.training.run.run_recipe) to turn epochs into steps.")
        self.config = config
        # LOCAL_RANK picks the GPU before the process group exists
        self.device = resolve_device(config.device, int(os.environ.get("LOCAL_RANK", 0)))
        self.ctx = init_distributed(self.device.type)
        self.precision = resolve_precision(config.precision, self.device)
        self.threads = ThreadChoice(config.threads, self.device)
        if config.gradient_checkpointing:
            if not callable(getattr(model, "gradient_checkpointing_enable", None)):
                raise ValueError(f"TrainingConfig.gradient_checkpointing=True but {type(model).__name__} has no "
                                 "gradient_checkpointing_enable().")
            model.gradient_checkpointing_enable()
        self.model = model.to(self.device)
        self.micro_batch_size = config.micro_batch_size(self.ctx.world_size)

        pin = self.device.type == "cuda"
        self.collate_fn = collate_fn
        self.train_loader = self._train_loader(train_dataset, sampler, sampler_factory, batch_source)
        self.eval_loader = None
        # a separate eval collator is rewound before every evaluation: each one scores the same masks
        separate = eval_collate_fn is not None and eval_collate_fn is not collate_fn
        self._eval_collate, self._eval_collate_state = eval_collate_fn, \
            ckpt.object_state(eval_collate_fn) if separate else None
        if eval_dataset is not None:
            shard = range(self.ctx.rank, len(eval_dataset), self.ctx.world_size)
            self.eval_loader = DataLoader(eval_dataset, batch_size=config.eval_batch_size or self.micro_batch_size,
                                          sampler=list(shard), collate_fn=eval_collate_fn or collate_fn,
                                          num_workers=config.num_workers, pin_memory=pin,
                                          generator=torch.Generator().manual_seed(config.seed))

        self.optimizer = build_optimizer(self.model, config)
        self.scheduler = build_scheduler(self.optimizer, config)
        self.scaler = _grad_scaler() if self.precision == "fp16" else None
        self._params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.ddp = wrap_ddp(self.model, self.ctx, self.device, config.find_unused_parameters) \
            if self.ctx.enabled and self.grad_sync == "ddp" else None
        if self.ctx.enabled and self.grad_sync == "manual":
            broadcast_from_main(self.model)  # the ranks start from rank 0's weights, as DDP's would

        self.stateful = dict(stateful or {})
        self.callbacks: dict[str, list[Callable]] = {event: [] for event in EVENTS}
        for event, fns in (callbacks or {}).items():
            for fn in [fns] if callable(fns) else fns:
                self.add_callback(event, fn)
        self.output_dir = Path(config.output_dir)
        self.metrics_path = self.output_dir / METRICS_FILE
        self.state = TrainState()
        self.should_stop = False
        self.last_log: dict[str, Any] = {}
        self.last_eval: dict[str, Any] = {}
        self.last_record: dict[str, Any] = {}
        self.reporting = reporting.attach(self)
        self._sampler_snapshot: Any = None
        self._saved_step = -1
        self._started = False
        self._last_lr = config.learning_rate
        self._precision_resumed = False
        self.apply_changes = apply_changes
        #: what the run warned about that a task's results should carry (zero gradients, a run that trained nothing)
        self.warnings: list[str] = []
        self._pending_warning: str | None = None  # for the next train record of metrics.jsonl

    # ------------------------------------------------------------------ public API
    def add_callback(self, event: str, fn: Callable[[Trainer], None]) -> None:
        if event not in EVENTS:
            raise ValueError(f"Unknown callback event {event!r}; choose one of {EVENTS}.")
        self.callbacks[event].append(fn)

    def train(self, resume_from: str | Path | None = None) -> TrainState:
        """Run until ``config.max_steps`` (or ``should_stop``); returns the final :class:`TrainState`.

        ``resume_from``: ``"latest"`` (the newest checkpoint in ``output_dir``, or a fresh
        start when there is none) or a checkpoint directory. A fresh start refuses an
        ``output_dir`` that already holds checkpoints.
        """
        cfg = self.config
        checkpoint = ckpt.resolve_checkpoint(resume_from, self.output_dir)
        if checkpoint is not None:
            self._restore(checkpoint)
        elif not self._started:
            self._start_fresh()
        if self.ctx.is_main and not self._started:
            logger.info("%s", describe_precision(self.config.precision, self.precision, self.device,
                                                 resumed=self._precision_resumed))
            logger.info("%s", describe_batch(self.config, self.ctx.world_size))
        self._started, self.should_stop = True, False
        self.model.train()
        t0 = time.perf_counter() - self.state.elapsed_s
        batches, window = self._micro_batches(), MetricWindow()
        bar = progress_bar(total=cfg.max_steps, initial=self.state.step, desc="train", unit="step", dynamic_ncols=True,
                           disable=not (self.ctx.is_main and cfg.progress_bar))
        self._trigger("on_train_begin")
        try:
            while self.state.step < cfg.max_steps and not self.should_stop:
                self._train_step(batches, window)
                self.state.elapsed_s = time.perf_counter() - t0
                bar.update(1)
                step, end = self.state.step, self.state.step == cfg.max_steps
                if step % cfg.log_every == 0 or end:
                    self._log(window, bar)
                if self.eval_loader is not None and (end or (cfg.eval_every and step % cfg.eval_every == 0)):
                    self.evaluate()
                self._trigger("on_step_end")  # before the checkpoint, so it holds what the callbacks measured
                if end or (cfg.save_every and step % cfg.save_every == 0):
                    self.save_checkpoint()
                if step % allocator.TRIM_EVERY == 0:
                    allocator.trim_malloc()
            if window.steps:
                self._log(window, bar)
            if self._saved_step != self.state.step:
                self.save_checkpoint()
        finally:
            bar.close()
        self._warn_if_idle()
        self._trigger("on_train_end")
        return self.state

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Mean of ``training_step``'s loss and metrics over the eval set (eval mode, no grad), weighted by
        examples and reduced over ranks; NaN metric values (e.g. accuracy with nothing to score) are skipped.

        A stateful ``eval_collate_fn`` (other than ``collate_fn``) is restored to its state at
        construction first, so every evaluation, resumed runs included, sees the same batches.
        """
        if self.eval_loader is None:
            raise ValueError("Trainer.evaluate() needs an eval_dataset.")
        ckpt.load_object_state(self._eval_collate, self._eval_collate_state)
        window = MetricWindow()
        was_training = self.model.training
        self.model.eval()
        try:
            for batch in self.eval_loader:
                batch = to_device(batch, self.device)
                with self._autocast():
                    loss, metrics = self.model.training_step(batch)
                examples = _num_examples(batch)
                window.add({**metrics, "loss": loss}, weight=examples)
                window.count(examples, _num_tokens(batch))
        finally:
            self.model.train(was_training)
        values, examples, _ = window.reduce(self.ctx)
        self.last_eval = values
        self.write_metrics({"split": "eval", "step": self.state.step, "epoch": self.state.epoch, **values,
                     "examples": examples, "elapsed_s": round(self.state.elapsed_s, 3)})
        self._trigger("on_evaluate")
        return values

    def save_checkpoint(self) -> Path | None:
        """Write the full state as checkpoint ``step`` (rank 0) and rotate; returns its path on rank 0."""
        local = {"rng": ckpt.rng_state(), "data": self._data_state()}
        gathered = gather_to_main(local, self.ctx)
        path = None
        if self.ctx.is_main:
            state = {"format": 1, "world_size": self.ctx.world_size, "trainer": asdict(self.state),
                     "config": self.config.to_dict(), "precision": self.precision,
                     "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(),
                     "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                     "metrics": {"last_log": self.last_log, "last_eval": self.last_eval}, "ranks": gathered}
            path = ckpt.save_checkpoint(self.output_dir, self.state.step, self.model, state)
            ckpt.rotate_checkpoints(self.output_dir, self.config.keep_last)
        barrier(self.ctx)
        self._saved_step = self.state.step
        self._trigger("on_save")
        return path

    # ------------------------------------------------------------------ one step
    def _train_step(self, batches: Iterator[dict], window: MetricWindow) -> None:
        cfg, accum = self.config, self.config.gradient_accumulation_steps
        started = time.perf_counter()
        nonfinite = torch.zeros((), dtype=torch.bool, device=self.device)
        rows = 0
        for micro in range(accum):
            batch = to_device(next(batches), self.device)
            sync = self.ddp is None or micro == accum - 1  # DDP all-reduces on the last micro-batch only
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                with self._autocast():
                    loss, metrics = self.ddp(batch) if self.ddp is not None else self.model.training_step(batch)
                scaled = loss / accum
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss = loss.detach()
            nonfinite |= ~torch.isfinite(loss)
            examples = _num_examples(batch)
            rows += examples
            window.add({**metrics, "loss": loss}, weight=examples)
            window.count(examples, _num_tokens(batch))
        if self.grad_sync == "manual" and self.ctx.enabled:
            average_gradients(self._params)

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = None
        if cfg.max_grad_norm is not None:
            grad_norm = clip_grad_norm(self._params, cfg.max_grad_norm).to(self.device)
            window.add({"grad_norm": grad_norm}, weight=1)
        norm = grad_norm.float() if grad_norm is not None else torch.zeros((), device=self.device)
        # the largest gradient entry (after DDP's all-reduce: the same on every rank) tells an exactly zero gradient
        largest = norm if grad_norm is not None else _largest_gradient(self._params, self.device)
        any_bad_loss, norm, largest = torch.stack(
            [all_reduce_(nonfinite.float(), self.ctx, op="max"), norm, largest]).tolist()
        # with fp16 an overflowing gradient is the GradScaler's business (it skips and backs off)
        bad_grad = self.scaler is None and not math.isfinite(norm)
        self._last_lr = self.optimizer.param_groups[0]["lr"]
        skipped = bool(any_bad_loss or bad_grad)
        self._count_idle(skipped, zero_gradient=largest == 0.0)
        if skipped:
            self._skip_step()
        else:
            self.state.consecutive_nonfinite = 0
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
            else:
                self.optimizer.step()
        if self.scaler is not None:
            self.scaler.update()
        with warnings.catch_warnings():  # a skipped first step makes torch warn about the call order
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)`")
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.examples_seen += rows * self.ctx.world_size  # every rank trains on as many rows
        window.steps += 1
        seconds = time.perf_counter() - started
        window.seconds += seconds
        self.threads.step_done(seconds)

    def _count_idle(self, skipped: bool, zero_gradient: bool) -> None:
        """Count a step that cannot change the model (rate 0, exactly zero gradient, skipped); warn once when
        :data:`ZERO_GRADIENT_STEPS` steps in a row had an exactly zero gradient."""
        state = self.state
        zero_gradient = zero_gradient and not skipped
        state.zero_lr_steps += self._last_lr == 0.0
        state.zero_gradient_steps += zero_gradient
        state.idle_steps += skipped or zero_gradient or self._last_lr == 0.0
        state.consecutive_zero_gradient = state.consecutive_zero_gradient + 1 if zero_gradient else 0
        if state.consecutive_zero_gradient == ZERO_GRADIENT_STEPS and not any(
                w.startswith("zero gradient") for w in self.warnings):
            first = state.step + 2 - ZERO_GRADIENT_STEPS
            self._warn(f"zero gradient: steps {first}-{state.step + 1} gave an exactly zero gradient, so they "
                       "changed nothing; the loss does not depend on the weights (does every row have "
                       "candidates to rank: a batch of more than one row, hard negatives, different texts or "
                       "labels? is the model frozen?).", pending=True)

    def _warn_if_idle(self) -> None:
        """Warn, once per run, when every step of the run could not change the model."""
        state = self.state
        if not state.step or state.idle_steps < state.step or any(w.startswith("trained nothing")
                                                                 for w in self.warnings):
            return
        counts = {"with learning rate 0": state.zero_lr_steps, "with an exactly zero gradient":
                  state.zero_gradient_steps, "skipped as non-finite": state.nonfinite_steps}
        reasons = [f"{n} {why}" for why, n in counts.items() if n]
        hint = (" A step at learning rate 0 is the warm-up's first: train more steps, or warm up less."
                if state.zero_lr_steps else "")
        self._warn(f"trained nothing: none of the run's {state.step} step(s) changed what the model computes "
                   f"({', '.join(reasons)}); the saved weights are the ones it started from (up to weight "
                   f"decay).{hint}")

    def _warn(self, message: str, pending: bool = False) -> None:
        """Log ``message`` (rank 0) and keep it in :attr:`warnings`; ``pending``: also the next train record's."""
        self.warnings.append(message)
        if self.ctx.is_main:
            logger.warning("%s", message)
        if pending:
            self._pending_warning = message

    def _skip_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        state, limit = self.state, self.config.max_nonfinite_steps
        state.nonfinite_steps += 1
        state.consecutive_nonfinite += 1
        logger.warning("step %d: non-finite loss or gradient norm; no update applied (%d in a row, %d in total).",
                       state.step + 1, state.consecutive_nonfinite, state.nonfinite_steps)
        if state.consecutive_nonfinite >= limit:
            latest = ckpt.latest_checkpoint(self.output_dir)
            raise NonFiniteLossError(
                f"Training stopped at step {state.step + 1}: the loss or gradient norm was NaN/inf in "
                f"{state.consecutive_nonfinite} consecutive steps (TrainingConfig.max_nonfinite_steps={limit}); "
                f"none of them changed the weights. Last checkpoint: {latest or 'none'}. Try a lower "
                "learning_rate, a longer warmup, max_grad_norm, bf16/fp32 instead of fp16, or look for "
                "NaN/inf in the inputs.")

    # ------------------------------------------------------------------ data
    def _train_loader(self, dataset, sampler, sampler_factory, batch_source) -> DataLoader:
        """The DataLoader of the training micro-batches: ``dataset`` in the order of ``sampler`` (or of one that
        ``sampler_factory`` makes, default :class:`SeededSampler`), or ``batch_source`` 's items; it sets
        :attr:`data_order` (what a checkpoint keeps the position of) and the micro-batches of an epoch."""
        config, accumulation = self.config, self.config.gradient_accumulation_steps
        self.batch_source = batch_source
        if batch_source is not None:
            self.sampler = None
            check_protocol(batch_source, "batch source", BATCH_SOURCE_METHODS, "bertkit.training.batch_source")
            self.data_order = batch_source
            self._micro_per_epoch = len(batch_source) // accumulation * accumulation
            if self._micro_per_epoch == 0:
                raise ValueError(f"One step needs {accumulation} micro-batches but the batch source gives "
                                 f"{len(batch_source)} per epoch; lower TrainingConfig.gradient_accumulation_steps "
                                 "or add data.")
            self._micro_batches_of = MicroBatches(batch_source, None)
            dataset, collate = Items(), CollateItem(self.collate_fn)
        else:
            factory = sampler_factory or SeededSampler
            self.sampler = sampler if sampler is not None else factory(
                len(dataset), seed=config.seed, rank=self.ctx.rank, world_size=self.ctx.world_size)
            check_protocol(self.sampler, "sampler", SAMPLER_METHODS, "bertkit.training.sampler")
            self.data_order = self.sampler
            step_examples = self.micro_batch_size * accumulation
            self._micro_per_epoch = len(self.sampler) // step_examples * accumulation
            if self._micro_per_epoch == 0:
                raise ValueError(f"One step needs {step_examples} examples per rank but the sampler gives "
                                 f"{len(self.sampler)} per epoch; lower TrainingConfig.batch_size or add data.")
            self._micro_batches_of = MicroBatches(self.sampler, self.micro_batch_size)
            collate = self.collate_fn
        return DataLoader(dataset, batch_sampler=self._micro_batches_of, collate_fn=collate,
                          num_workers=config.num_workers, pin_memory=self.device.type == "cuda",
                          generator=torch.Generator().manual_seed(config.seed))

    def _micro_batches(self) -> Iterator[dict]:
        """Micro-batches forever, epoch after epoch, keeping ``state.epoch`` / ``batch_in_epoch`` and the
        sampler snapshot in step. An epoch ends after its last whole optimizer step's worth of micro-batches."""
        while True:
            if self.state.batch_in_epoch >= self._micro_per_epoch:
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                self.data_order.set_epoch(self.state.epoch)
            self._micro_batches_of.snapshots.clear()
            for batch in self.train_loader:
                self._sampler_snapshot = self._micro_batches_of.snapshots.popleft()
                self.state.batch_in_epoch += 1
                yield batch
                if self.state.batch_in_epoch >= self._micro_per_epoch:
                    break
            else:  # the sampler ran out before the epoch's last full step (or was resumed at its end)
                if self.state.batch_in_epoch == 0:
                    raise RuntimeError("The sampler (or batch source) yielded no full micro-batch in a whole epoch.")
                self.state.batch_in_epoch = self._micro_per_epoch

    def _data_state(self) -> dict[str, Any]:
        return {"sampler": self._sampler_snapshot, "collate_fn": ckpt.object_state(self.collate_fn),
                "stateful": {name: ckpt.object_state(obj) for name, obj in self.stateful.items()}}

    # ------------------------------------------------------------------ start / resume
    def _start_fresh(self) -> None:
        existing = ckpt.latest_checkpoint(self.output_dir)
        if existing is not None:
            raise ValueError(f"{self.output_dir} already holds checkpoints ({existing.name}); pass "
                             "resume_from='latest' to continue that run, or use a new output_dir.")
        seed = self.config.seed + self.ctx.rank  # ranks draw different dropout masks
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        self.data_order.set_epoch(0)
        self._sampler_snapshot = ckpt.object_state(self.data_order)
        if self.ctx.is_main and self.metrics_path.exists():
            self.metrics_path.unlink()

    def _restore(self, path: Path) -> None:
        saved = ckpt.load_checkpoint(path, self.model)
        old = saved["config"]
        if saved["world_size"] != self.ctx.world_size or any(
                old[k] != self.config.to_dict()[k] for k in FIXED_ON_RESUME):
            raise ValueError(f"{path} was written with world size {saved['world_size']}, batch_size "
                             f"{old['batch_size']}, gradient_accumulation_steps {old['gradient_accumulation_steps']}"
                             f" and seed {old['seed']}; resume with the same values (the data position depends "
                             "on them).")
        if self.config.precision == "auto":  # "auto" continues in the run's precision, whatever it was
            self._keep_precision(old["precision"], saved.get("precision", old["precision"]))
        changed = hyperparameter_changes(old, self.config.to_dict())
        if changed and not self.apply_changes:
            raise ValueError(f"{path} was trained with other hyperparameters: {'; '.join(changed)}. Resume with "
                             "the run's values, or pass apply_changes=True (CLI: --apply-changes) to continue "
                             "with the new ones.")
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        if changed:
            self._apply_hyperparameters()
            logger.warning("resumed with changed hyperparameters: %s", "; ".join(changed))
        if self.scaler is not None and saved["scaler"] is not None:
            self.scaler.load_state_dict(saved["scaler"])
        self.state = TrainState(**saved["trainer"])
        self.last_log, self.last_eval = saved["metrics"]["last_log"], saved["metrics"]["last_eval"]
        local = saved["ranks"][self.ctx.rank]
        ckpt.set_rng_state(local["rng"])
        data = local["data"]
        ckpt.load_object_state(self.data_order, data["sampler"])
        self._sampler_snapshot = data["sampler"]
        ckpt.load_object_state(self.collate_fn, data["collate_fn"])
        for name, obj in self.stateful.items():
            ckpt.load_object_state(obj, data["stateful"].get(name))
        self._saved_step = self.state.step
        if self.ctx.is_main:
            truncate_metrics(self.metrics_path, self.state.step)
        logger.info("resumed from %s at step %d (epoch %d)", path, self.state.step, self.state.epoch)

    def _keep_precision(self, run_config: str, run_precision: str) -> None:
        """Continue a run whose config said ``run_config`` in ``run_precision``, what it computed in (``"auto"``
        from checkpoints that did not record it: this machine's choice then), where this device runs it; else in
        this machine's ``auto`` choice, with a warning."""
        if run_precision not in ("auto", self.precision):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # bf16 on a CPU without it falls back to fp32: not the run's
                    used = resolve_precision(run_precision, self.device)
            except (ValueError, UserWarning):
                warnings.warn(f"the resumed run trained in {run_precision}, which {self.device} does not compute "
                              f"natively; it continues in {self.precision} (precision='auto' here), so its numbers "
                              "drift from the run's own.", stacklevel=4)
                return
            self.precision = used
            self.scaler = _grad_scaler() if used == "fp16" else None
        self.config = self.config.replace(precision=run_config)
        self._precision_resumed = run_precision != "auto"

    def _apply_hyperparameters(self) -> None:
        """After loading a checkpoint's optimizer and scheduler: use this config's optimizer settings and peak
        learning rate (the schedule's shape already comes from this config) from the current step on."""
        cfg = self.config
        for group in self.optimizer.param_groups:  # a group's lr_scale: a parameter with its own learning rate
            group.update(betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon,
                         initial_lr=cfg.learning_rate * group.get("lr_scale", 1.0),
                         weight_decay=cfg.weight_decay if group.get("name") == "decay" else 0.0)
        self.scheduler.base_lrs = [group["initial_lr"] for group in self.optimizer.param_groups]
        for group, multiplier in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas):
            group["lr"] = group["initial_lr"] * multiplier(self.scheduler.last_epoch)

    def relocate(self, output_dir: str | os.PathLike) -> None:
        """Write everything from now on under ``output_dir`` (a run directory that was moved into place)."""
        self.output_dir = Path(output_dir)
        self.metrics_path = self.output_dir / METRICS_FILE
        self.config = self.config.replace(output_dir=os.fspath(output_dir))

    # ------------------------------------------------------------------ logging
    def _log(self, window: MetricWindow, bar) -> None:
        values, examples, tokens = window.reduce(self.ctx)
        seconds = max(window.seconds, 1e-9)
        record = {"split": "train", "step": self.state.step, "epoch": self.state.epoch, "lr": self._last_lr,
                  **values, "tokens_per_s": round(tokens / seconds, 2), "examples_per_s": round(examples / seconds, 2),
                  "elapsed_s": round(self.state.elapsed_s, 3), "nonfinite_steps": self.state.nonfinite_steps}
        if self._pending_warning is not None:
            record["warning"], self._pending_warning = self._pending_warning, None
        self.last_log = record
        self.write_metrics(record)
        if values.get("loss") is not None:
            bar.set_postfix(loss=f"{values['loss']:.4f}", tok_s=f"{tokens / seconds:.0f}", refresh=False)
        window.reset()
        self._trigger("on_log")

    def write_metrics(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line to metrics.jsonl (rank 0); opened per line, so a crash never loses a
        written one. Callbacks use it for what they measure (e.g. a task's validation scores); then
        ``on_metrics`` fires (rank 0)."""
        if self.ctx.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            self.last_record = record
            self._trigger("on_metrics")

    # ------------------------------------------------------------------ helpers
    def _autocast(self):
        return autocast(self.device, self.precision)

    def _trigger(self, event: str) -> None:
        for fn in self.callbacks[event]:
            fn(self)


def describe_batch(config: TrainingConfig, world_size: int) -> str:
    """The line a run says at its start about its batch: ``config.batch_size`` (rows per optimizer step, over every
    process and accumulated micro-batch) and its split, e.g. ``"batch size 64 rows per optimizer step = 8 per
    micro-batch and process x 2 processes x 4 accumulation steps"``."""
    accumulation = config.gradient_accumulation_steps
    return (f"batch size {config.batch_size} rows per optimizer step = {config.micro_batch_size(world_size)} per "
            f"micro-batch and process x {world_size} process{'es' if world_size > 1 else ''} x {accumulation} "
            f"accumulation step{'s' if accumulation > 1 else ''}")


def _grad_scaler():
    """fp16's loss scaler (``torch.amp.GradScaler`` since torch 2.3, ``torch.cuda.amp`` before)."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def _num_examples(batch: Mapping[str, Any]) -> int:
    """Leading dimension of ``input_ids`` (or of the first tensor in the batch)."""
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].shape[0]
    return next(v.shape[0] for v in batch.values() if isinstance(v, torch.Tensor))


def _num_tokens(batch: Mapping[str, Any]) -> torch.Tensor | int:
    """Real tokens: ``attention_mask.sum()`` (stays on device), else ``input_ids.numel()``, else the sum of the
    ``num_tokens`` of the batch's objects that count their own (the embedding and reranking batches), else 0.
    Called after ``training_step``, so a batch may count what its loss tokenized."""
    if isinstance(batch.get("attention_mask"), torch.Tensor):
        return batch["attention_mask"].sum()
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].numel()
    counts = [getattr(value, "num_tokens", None) for value in batch.values() if not isinstance(value, torch.Tensor)]
    return sum(n for n in counts if isinstance(n, int | torch.Tensor))


def _largest_gradient(params: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The largest absolute gradient entry of ``params`` on ``device`` (0 when no parameter has a gradient)."""
    grads = [p.grad.detach().abs().max().float().to(device) for p in params if p.grad is not None and p.grad.numel()]
    return torch.stack(grads).max() if grads else torch.zeros((), device=device)
