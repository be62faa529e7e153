"""Evaluation during training, the best model and early stopping: one mechanism for every recipe.

:class:`EvalSchedule` evaluates the model being trained and keeps what the evaluations said. It is fed one of
two ways:

* :meth:`~EvalSchedule.attach`: it calls ``evaluate() -> {metric name: number}`` itself (a closure over the
  model: a task's validation scores, a retrieval report) after every ``every`` steps and after the last one
  (``max_steps``, or wherever a callback stopped the run), and with ``at_start`` at step 0 too (the base model:
  the "before" of a before/after table). Each evaluation runs with every module in eval mode and gradients
  off, every module's own mode put back afterwards and the Python, NumPy and torch random states restored, so
  a run with evaluation trains exactly as the run without it (unless ``keep_random_state=False``: fine-tuning's
  evaluation has always drawn from them, and keeps doing so, so that its runs keep their numbers). Each is one
  ``"eval"`` record of ``metrics.jsonl``: ``{"split": "eval", "step", "epoch", PREFIX + name: value, ...,
  "eval_s", "elapsed_s"}`` (numbers only; a non-finite value is written ``null``);
* :meth:`~EvalSchedule.observe`: the Trainer scores its own eval set (``eval_dataset``, every
  ``TrainingConfig.eval_every`` steps and at the end) and writes the record; the schedule reads
  ``trainer.last_eval`` after each.

Either way, with ``keep_best`` (a metric name; lower is better for names ending in ``loss``, higher otherwise)
each evaluation that improves on the best so far calls ``on_best(trainer)`` (the run saves the model there),
and after ``patience`` evaluations in a row without improvement the run stops (``trainer.should_stop``).

The evaluations so far and the best are checkpoint state (a Trainer ``stateful`` object), written with every
checkpoint after the step's evaluation: a resumed run keeps them up to its checkpoint, the Trainer drops the
records written after it from ``metrics.jsonl``, and the later steps are evaluated again, so an interrupted and
resumed run ends with the records, the best and the patience of an uninterrupted one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from bertkit.training.checkpoint import rng_state, set_rng_state

logger = logging.getLogger("bertkit.training")


def greater_is_better(metric: str) -> bool:
    """Whether a higher ``metric`` is better: every metric but a loss (a name ending in ``loss``)."""
    return not metric.endswith("loss")


class BestModel:
    """The best evaluation so far of ``metric`` (``greater_is_better`` or not) and the evaluations since it;
    ``should_stop`` after ``patience`` of them (None: never). Checkpointed with the run (``state_dict``)."""

    def __init__(self, metric: str, greater_is_better: bool, patience: int | None):
        self.metric, self.greater, self.patience = metric, greater_is_better, patience
        self.value: float | None = None
        self.step = 0
        self.bad_evaluations = 0

    def update(self, metrics: Mapping[str, Any], step: int) -> bool:
        """Record an evaluation; True when it is the best so far (NaN never is, unless all were NaN)."""
        if self.metric not in metrics:
            raise ValueError(f"keep_best={self.metric!r} (--keep-best) is not among the evaluation's metrics "
                             f"{sorted(metrics)}; choose one of them.")
        value = float(metrics[self.metric])
        better = self.value is None or (not math.isnan(value) and (
            math.isnan(self.value) or (value > self.value if self.greater else value < self.value)))
        if better:
            self.value, self.step, self.bad_evaluations = value, step, 0
        else:
            self.bad_evaluations += 1
        return better

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.bad_evaluations >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "step": self.step, "bad_evaluations": self.bad_evaluations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A state of another metric (a resume that changed ``keep_best`` with ``apply_changes``) starts afresh."""
        if state.get("metric", self.metric) == self.metric:
            self.value, self.step, self.bad_evaluations = state["value"], state["step"], state["bad_evaluations"]


class EvalSchedule:
    """Evaluate during training, keep the best, stop early (see the module docstring).

    ``evaluate``: the closure :meth:`attach` calls (None with :meth:`observe`); ``every``: steps between
    evaluations (None: ``attach`` 's ``default_every``); ``prefix`` goes before every metric name; ``name``: the
    checkpoint state's; ``keep_best`` / ``patience`` / ``on_best``: the best model and early stopping;
    ``at_start``: evaluate the base model at step 0 too; ``keep_random_state=False`` leaves the random state as
    the evaluation left it (what fine-tuning always did: its runs keep their numbers)."""

    def __init__(self, evaluate: Callable[[], Mapping[str, Any]] | None = None, every: int | None = None, *,
                 prefix: str = "", name: str = "evaluation", keep_best: str | None = None,
                 patience: int | None = None, on_best: Callable[[Any], None] | None = None, at_start: bool = False,
                 keep_random_state: bool = True):
        check_every(every)
        self.evaluate, self.every, self.prefix, self.name, self.at_start = evaluate, every, prefix, name, at_start
        self.keep_random_state = keep_random_state
        if patience is not None and keep_best is None:
            raise ValueError(f"patience={patience} (--patience) counts evaluations without a better keep_best "
                             "metric; name it with keep_best (--keep-best METRIC).")
        self.best = BestModel(keep_best, greater_is_better(keep_best), patience) if keep_best else None
        self.on_best = on_best
        self.steps_per_epoch: int | None = None
        #: ``[{"step", "metrics": {name: value}}]``, one per evaluation, in step order
        self.history: list[dict[str, Any]] = []

    def attach(self, trainer, default_every: int | None, steps_per_epoch: int | None = None) -> None:
        """Evaluate on ``trainer`` with ``evaluate`` (before ``trainer.train``): register the callbacks, and the
        schedule as checkpoint state under :attr:`name`. ``steps_per_epoch``: the records' epoch is then the
        step over it (else the Trainer's epoch)."""
        if self.every is None:
            self.every = default_every
        self.steps_per_epoch = steps_per_epoch
        trainer.stateful[self.name] = self
        trainer.add_callback("on_train_begin", self._at_start)
        trainer.add_callback("on_step_end", self._after_step)
        trainer.add_callback("on_train_end", self._at_end)

    def observe(self, trainer) -> None:
        """Follow the evaluations ``trainer`` runs on its own eval set (``on_evaluate``) instead."""
        trainer.stateful[self.name] = self
        trainer.add_callback("on_evaluate", lambda trainer: self.record(trainer, numbers(trainer.last_eval)))

    @property
    def first(self) -> dict[str, Any] | None:
        return self.history[0] if self.history else None

    @property
    def last(self) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    @property
    def kept_best(self) -> bool:
        """Whether a best model was kept (``on_best`` called at least once)."""
        return self.best is not None and self.best.value is not None

    def state_dict(self) -> dict[str, Any]:
        return {"history": [{"step": h["step"], "metrics": dict(h["metrics"])} for h in self.history],
                "best": self.best.state_dict() if self.best is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The state :meth:`state_dict` wrote, or a :class:`BestModel` 's alone (fine-tuning checkpoints of before)."""
        if "history" not in state:
            state = {"history": [], "best": state}
        self.history = [{"step": h["step"], "metrics": dict(h["metrics"])} for h in state["history"]]
        if self.best is not None and state.get("best"):
            self.best.load_state_dict(state["best"])

    # ------------------------------------------------------------------ callbacks
    def _at_start(self, trainer) -> None:
        if self.at_start and trainer.state.step == 0 and not self._done(0):
            self.run(trainer)

    def _after_step(self, trainer) -> None:
        step = trainer.state.step
        if (self.every and step % self.every == 0) or step == trainer.config.max_steps:
            self.run(trainer)

    def _at_end(self, trainer) -> None:  # a run a callback stopped early ends evaluated too
        if not self._done(trainer.state.step):
            self.run(trainer)

    def _done(self, step: int) -> bool:
        return any(h["step"] == step for h in self.history)

    # ------------------------------------------------------------------ one evaluation
    def run(self, trainer) -> dict[str, float]:
        """Evaluate now (see the module docstring), write the record, :meth:`record` it; returns the metrics."""
        modes = [(module, module.training) for module in trainer.model.modules()]
        rng = rng_state()
        started = time.perf_counter()
        trainer.model.eval()
        try:
            with torch.no_grad():
                metrics = numbers(self.evaluate(), self.prefix)
        finally:
            for module, training in modes:
                module.training = training
            if self.keep_random_state:
                set_rng_state(rng)
        step = trainer.state.step
        epoch = step / self.steps_per_epoch if self.steps_per_epoch else trainer.state.epoch
        trainer.write_metrics({"split": "eval", "step": step, "epoch": epoch, **json_metrics(metrics),
                               "eval_s": round(time.perf_counter() - started, 3),
                               "elapsed_s": round(trainer.state.elapsed_s, 3)})
        self.record(trainer, metrics)
        return metrics

    def record(self, trainer, metrics: Mapping[str, float]) -> None:
        """Remember an evaluation at the trainer's step: the history, the best (``on_best`` when it improves),
        and the stop after ``patience`` evaluations without improvement."""
        step = trainer.state.step
        self.history = [h for h in self.history if h["step"] < step] + [{"step": step, "metrics": dict(metrics)}]
        best = self.best
        if best is None:
            return
        if best.update(metrics, step) and self.on_best is not None:
            self.on_best(trainer)
        logger.info("step %d: %s = %.4f (best %.4f at step %d)", step, best.metric,
                    float(metrics.get(best.metric, math.nan)), best.value, best.step)
        if best.should_stop:
            logger.info("early stopping: no better %s in %d evaluation(s)", best.metric, best.patience)
            trainer.should_stop = True


def numbers(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The scalar metrics of ``metrics`` as floats, names prefixed (tables such as NER's per-type scores and
    other non-numbers are left out: they go to a results file, not to ``metrics.jsonl``)."""
    return {f"{prefix}{k}": float(v) for k, v in metrics.items()
            if (isinstance(v, int | float) and not isinstance(v, bool))
            or (isinstance(v, torch.Tensor) and v.numel() == 1)}


def json_metrics(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """``metrics`` with each non-finite value (a correlation of constant scores) as None: JSON's ``null``."""
    return {k: v if math.isfinite(v) else None for k, v in metrics.items()}


def check_every(every: int | None) -> None:
    """``ValueError`` naming ``--eval-every`` unless ``every`` is None or a positive int."""
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(f"--eval-every must be a positive number of steps, got {every!r}.")
