"""Evaluation during training: score the model being trained at step 0, every N steps and at the last step.

:class:`EvalSchedule` takes any ``evaluate() -> {metric name: number}`` (a closure over the model being
trained: a retrieval or similarity report of a bi-encoder, a reranking report of a cross-encoder) and, once
:meth:`~EvalSchedule.attach` ed to a :class:`~bertkit.training.Trainer`, calls it

* at step 0, before the first update (the base model: the "before" of the before/after table),
* after every ``every`` steps, and after the last step (``max_steps``, or wherever a callback stopped the run),

each time with every module of the trained model in eval mode and gradients off, every module's own mode put
back afterwards, and the Python, NumPy and torch random states restored, so that the run with evaluation trains
exactly as the run without it (same dropout masks, same weights). Each evaluation is one ``"eval"`` record of
``metrics.jsonl``: ``{"split": "eval", "step", "epoch", PREFIX + name: value, ..., "eval_s", "elapsed_s"}``
(a non-finite value is written ``null``).

The evaluations so far are the schedule's checkpoint state (a Trainer ``stateful`` object), written with every
checkpoint after the step's evaluation: a resumed run keeps those up to its checkpoint, the Trainer drops the
records written after it from ``metrics.jsonl``, and the later steps are evaluated again, so an interrupted
and resumed run ends with the records and the :attr:`~EvalSchedule.history` of an uninterrupted one.
:func:`evaluation_table` renders the history as a model card's markdown table.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

#: a model card shows every evaluation up to this many, else the first and the last
CARD_COLUMNS = 6


class EvalSchedule:
    """Evaluate with ``evaluate()`` at step 0, every ``every`` steps (None: the ``default_every`` given to
    :meth:`attach`) and at the last step; metric names get ``prefix``. See the module docstring."""

    def __init__(self, evaluate: Callable[[], Mapping[str, float]], every: int | None = None, *, prefix: str = "",
                 name: str = "evaluation"):
        check_every(every)
        self.evaluate, self.every, self.prefix, self.name = evaluate, every, prefix, name
        #: ``[{"step", "metrics": {name: value}}]``, one per evaluation, in step order
        self.history: list[dict[str, Any]] = []

    def attach(self, trainer, default_every: int) -> None:
        """Register the schedule on ``trainer`` (before ``trainer.train``): its callbacks, and itself as checkpoint
        state under :attr:`name`."""
        if self.every is None:
            self.every = default_every
        trainer.stateful[self.name] = self
        trainer.add_callback("on_train_begin", self._at_start)
        trainer.add_callback("on_step_end", self._after_step)
        trainer.add_callback("on_train_end", self._at_end)

    @property
    def first(self) -> dict[str, Any] | None:
        return self.history[0] if self.history else None

    @property
    def last(self) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    def state_dict(self) -> dict[str, Any]:
        return {"history": [{"step": h["step"], "metrics": dict(h["metrics"])} for h in self.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = [{"step": h["step"], "metrics": dict(h["metrics"])} for h in state["history"]]

    # ------------------------------------------------------------------ callbacks
    def _at_start(self, trainer) -> None:
        if trainer.state.step == 0 and not self._done(0):
            self.run(trainer)

    def _after_step(self, trainer) -> None:
        step = trainer.state.step
        if step % self.every == 0 or step == trainer.config.max_steps:
            self.run(trainer)

    def _at_end(self, trainer) -> None:  # a run a callback stopped early ends evaluated too
        if not self._done(trainer.state.step):
            self.run(trainer)

    def _done(self, step: int) -> bool:
        return any(h["step"] == step for h in self.history)

    # ------------------------------------------------------------------ one evaluation
    def run(self, trainer) -> dict[str, float]:
        """Evaluate now (see the module docstring), write the record, remember it; returns the metrics."""
        from bertkit.training.checkpoint import rng_state, set_rng_state

        modes = [(module, module.training) for module in trainer.model.modules()]
        rng = rng_state()
        started = time.perf_counter()
        trainer.model.eval()
        try:
            with torch.no_grad():
                metrics = {f"{self.prefix}{k}": _number(k, v) for k, v in self.evaluate().items()}
        finally:
            for module, training in modes:
                module.training = training
            set_rng_state(rng)
        step = trainer.state.step
        self.history = [h for h in self.history if h["step"] < step] + [{"step": step, "metrics": metrics}]
        trainer.write_metrics({"split": "eval", "step": step, "epoch": trainer.state.epoch,
                               **json_metrics(metrics),
                               "eval_s": round(time.perf_counter() - started, 3),
                               "elapsed_s": round(trainer.state.elapsed_s, 3)})
        return metrics


def json_metrics(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """``metrics`` with each non-finite value (a correlation of constant scores) as None: JSON's ``null``."""
    return {k: v if math.isfinite(v) else None for k, v in metrics.items()}


def check_every(every: int | None) -> None:
    """``ValueError`` naming ``--eval-every`` unless ``every`` is None or a positive int."""
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(f"--eval-every must be a positive number of steps, got {every!r}.")


def check_needed(every: int | None, described: Mapping[str, str], flags: str) -> None:
    """``ValueError`` naming ``--eval-every`` when it is set but nothing is evaluated on (``described`` is empty);
    ``flags``: what to add, for the message."""
    if every is not None and not described:
        raise ValueError(f"--eval-every needs something to evaluate on: add {flags}.")


def check_beir_directory(directory, split: str, flag: str = "--eval-beir") -> None:
    """A one-line ``ValueError`` naming ``flag`` unless ``directory`` is a directory (its content is checked as it
    is read: :func:`~bertkit.embedding.beir.load_beir`)."""
    from pathlib import Path

    if not Path(directory).is_dir():
        raise ValueError(f"{flag} {directory}: not a directory; give a BEIR directory holding corpus.jsonl, "
                         f"queries.jsonl and qrels/{split}.tsv.")


def _number(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"the evaluation returned {value!r} for {name!r}; evaluate() must return numbers.") from None


def evaluation_table(history: Sequence[Mapping[str, Any]], max_columns: int = CARD_COLUMNS) -> list[str]:
    """Markdown lines of a table, one row per metric and one column per evaluation of ``history`` (all of them up
    to ``max_columns``, else the first and the last); the step-0 column is headed "base". ``[]`` when empty."""
    if not history:
        return []
    shown = list(history) if len(history) <= max_columns else [history[0], history[-1]]
    heads = ["base (step 0)" if h["step"] == 0 else f"step {h['step']}" for h in shown]
    names = list(dict.fromkeys(name for h in shown for name in h["metrics"]))
    lines = ["| metric | " + " | ".join(heads) + " |", "|:--|" + "--:|" * len(shown)]
    for name in names:
        cells = [_cell(h["metrics"].get(name)) for h in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _cell(value: float | None) -> str:
    return "" if value is None else "n/a" if not math.isfinite(value) else f"{value:.4f}"
