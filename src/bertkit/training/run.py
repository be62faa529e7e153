"""The one run around the Trainer that every recipe uses: :func:`run_recipe` with a :class:`Recipe`.

A recipe (fine-tuning a task, pretraining, an embedding model, a reranker, ...) brings what is its own: its
checks, its model, its data, how it evaluates, how it saves, and its final step. The run does the rest, the
same way for each:

1. it opens the run directory (:func:`~bertkit.training.rundir.open_run`: new, ``resume`` or ``overwrite``)
   and lets the recipe start in it (:meth:`Recipe.start`: load the model, build what lives in the directory);
2. it records the recipe's checks in ``run.json`` (:meth:`Recipe.checks`; a resume with others is refused);
3. for a recipe that counts epochs (:meth:`Recipe.steps_per_epoch`) it turns ``epochs`` into ``max_steps`` and
   sets the bookkeeping once (:func:`epoch_bookkeeping`: a log line about 4 times an epoch, a checkpoint every
   epoch, the last one kept);
4. it builds the :class:`~bertkit.training.Trainer` (its settings and numerics recorded as it starts, the
   float32 GEMM backend kept on resume) and evaluates on a schedule
   (:class:`~bertkit.training.eval_schedule.EvalSchedule`): every ``eval_every`` steps (an epoch-counting
   recipe: every epoch) with :meth:`Recipe.evaluate`, or where the Trainer scores the recipe's eval set; it
   keeps the best evaluation's model on ``keep_best`` and stops after ``patience`` evaluations without a
   better one, all of it resumable;
5. after training (the main process), the model directory holds the kept best model, else the last one
   (:meth:`Recipe.save` / :meth:`Recipe.load`); the recipe's :meth:`Recipe.finish` gives its results, which
   the run writes (``results.json``), hands to the trackers and returns in one :class:`RunResult`, with the
   plot of ``metrics.jsonl``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from bertkit.io import atomic_write_text
from bertkit.modeling.fast import GemmChoice
from bertkit.modeling.numerics import describe, warn_if_different
from bertkit.training.config import TrainingConfig
from bertkit.training.eval_schedule import EvalSchedule
from bertkit.training.metrics import plot_metrics
from bertkit.training.reporting import report_final
from bertkit.training.rundir import open_run
from bertkit.training.trainer import METRICS_FILE, Trainer

logger = logging.getLogger("bertkit.training")

MODEL_DIR = "model"
RESULTS_FILE = "results.json"


@dataclass
class TrainingData:
    """What the Trainer reads: ``dataset`` through ``collate_fn``, in the order of ``sampler`` (already sharded)
    or of ``sampler_factory(len(dataset), seed=, rank=, world_size=)`` (neither: a shuffled
    :class:`~bertkit.training.SeededSampler`), or instead of ``dataset`` a ``batch_source``
    (:mod:`~bertkit.training.batch_source`: whole micro-batches, each through ``collate_fn``); ``eval_dataset``
    (through ``eval_collate_fn``): a held-out set the Trainer scores itself, its ``training_step`` loss and
    metrics, every ``eval_every`` steps and at the end.
    """

    dataset: Any = None
    collate_fn: Callable | None = None
    sampler: Any = None
    sampler_factory: Callable | None = None
    eval_dataset: Any = None
    eval_collate_fn: Callable | None = None
    batch_source: Any = None

    def trainer_arguments(self) -> dict[str, Any]:
        """The :class:`~bertkit.training.Trainer` 's keyword arguments these make (its first one: ``dataset``)."""
        return {"collate_fn": self.collate_fn, "sampler": self.sampler, "sampler_factory": self.sampler_factory,
                "eval_dataset": self.eval_dataset, "eval_collate_fn": self.eval_collate_fn,
                "batch_source": self.batch_source}


class Recipe:
    """What a recipe brings to :func:`run_recipe`; subclass it and override what is yours.

    Required: :meth:`training_data`, :meth:`save` and the :attr:`model` (an ``nn.Module`` with
    ``training_step(batch) -> (loss, metrics)``, set by :meth:`start` at the latest). The rest has defaults: no
    checks, no epochs (``TrainingConfig.max_steps`` as given), no evaluation of its own, no results.
    """

    #: the model the Trainer trains (``training_step``)
    model: nn.Module
    #: the model's directory inside the run directory, and the results file (beside it)
    model_dir: str = MODEL_DIR
    results_file: str = RESULTS_FILE
    #: sections of :meth:`checks` a resume may change with ``apply_changes`` (recorded, not compared)
    changeable: tuple[str, ...] = ()
    #: with epochs (:meth:`steps_per_epoch`), log, checkpoint and keep checkpoints by the epoch
    #: (:func:`epoch_bookkeeping`); False: as the config says
    bookkeeping_by_epoch: bool = True
    #: evaluate the model before the first step too (the "before" of a before/after table)
    evaluate_at_start: bool = False
    #: the evaluations' name in a checkpoint's state
    evaluation_state: str = "evaluation"
    #: put the random state back after each evaluation (False: leave it as the evaluation left it)
    evaluation_keeps_random_state: bool = True
    #: what to add for an evaluation during training, said when keep_best / patience have nothing to evaluate
    evaluation_data: str = "data to evaluate on"

    def start(self, run: Any, config: TrainingConfig) -> None:
        """The run directory ``run`` is open (fresh or resumed): load the model, build what lives in the run."""

    def checks(self) -> dict[str, Any]:
        """``run.json`` sections a resumed run must match (section -> JSON value): model source, data, settings."""
        return {}

    def steps_per_epoch(self, config: TrainingConfig) -> int | None:
        """Optimizer steps in one pass over the data under ``config``; None: the recipe does not count epochs."""
        return None

    def training_data(self, config: TrainingConfig) -> TrainingData:
        """The data the Trainer reads."""
        raise NotImplementedError(f"{type(self).__name__} must say what it trains on (training_data).")

    @property
    def evaluates(self) -> bool:
        """Whether :meth:`evaluate` has something to score (e.g. a validation set was given)."""
        return False

    def evaluate(self, trainer: Trainer) -> Mapping[str, Any]:
        """The model's metrics now (``{name: number}``; other values are left out of ``metrics.jsonl``). Called in
        eval mode without gradients on every process (each may score its share: ``trainer.ctx``)."""
        raise NotImplementedError(f"{type(self).__name__} has no evaluation during training.")

    def default_keep_best(self) -> str | None:
        """The metric whose best model is kept when ``TrainingConfig.keep_best`` is None (None: the last model)."""
        return None

    def begin(self, trainer: Trainer, run: Any) -> None:
        """The Trainer is built, training not started (e.g. score the starting model)."""

    def moved(self, staging: Path, run: Any) -> None:
        """An ``overwrite`` run moved from ``staging`` to ``run.path``: follow what lived inside (data built there)."""

    def save(self, output: Path) -> None:
        """Write the model (and what goes with it) into the run directory ``output`` (its :attr:`model_dir`)."""
        raise NotImplementedError(f"{type(self).__name__} must say how its model is saved (save).")

    def load(self, output: Path) -> None:
        """Load the weights :meth:`save` wrote into ``output`` back into :attr:`model` (the kept best model)."""
        raise NotImplementedError(f"{type(self).__name__} keeps a best model but cannot load it back (load).")

    def finish(self, trainer: Trainer, result: RunResult) -> dict[str, Any] | None:
        """After training, on the main process, with the final model in place: the final evaluation. Returns the
        results to write to :attr:`results_file` (None: nothing to write); may fill ``result`` 's fields."""
        return None


@dataclass
class RunResult:
    """Where a run put things and what it measured: ``results`` (what its results file holds), ``best`` (the
    kept best evaluation: metric, value, step; empty when none), a fine-tuning run's ``predictions`` (split ->
    file) and an ELECTRA run's ``generator_dir``."""

    output_dir: Path
    model_dir: Path
    results: dict[str, Any]
    metrics_path: Path
    plot_path: Path | None = None
    seconds: float = 0.0
    best: dict[str, Any] = field(default_factory=dict)
    predictions: dict[str, Path] = field(default_factory=dict)
    generator_dir: Path | None = None

    @property
    def evaluation(self) -> dict[str, Any]:
        """A pretraining run's name for its results (its held-out scores)."""
        return self.results


def run_recipe(recipe: Recipe, config: TrainingConfig, *, output_dir: str | os.PathLike, resume: bool = False,
               overwrite: bool = False, apply_changes: bool = False,
               callbacks: Mapping[str, Any] | None = None) -> RunResult:
    """Run ``recipe`` with ``config`` in the run directory ``output_dir`` (the module docstring says how).

    ``resume`` continues the run there, ``overwrite`` replaces it (once this run has a checkpoint);
    ``apply_changes``: a resumed run takes changed hyperparameters (and the recipe's :attr:`~Recipe.changeable`
    checks) instead of refusing them; ``callbacks`` go to the Trainer (event -> function or functions)."""
    start = time.perf_counter()
    with open_run(output_dir, resume=resume, overwrite=overwrite) as run:
        recipe.start(run, config)
        for section, value in recipe.checks().items():
            (run.record if apply_changes and section in recipe.changeable else run.check)(section, value)
        run.save()
        per_epoch = recipe.steps_per_epoch(config)
        config = epoch_bookkeeping(config, per_epoch, recipe.bookkeeping_by_epoch).replace(
            output_dir=os.fspath(run.path))
        data = recipe.training_data(config)
        trainer = Trainer(recipe.model, data.dataset, config=config, **data.trainer_arguments(),
                          stateful={"gemm": GemmChoice()},  # a resumed run keeps its float32 product backend
                          callbacks=callbacks, apply_changes=apply_changes)
        schedule = _schedule(recipe, trainer, data, run, per_epoch)
        follow_run(trainer, run, moved=functools.partial(recipe.moved, run=run))
        recipe.begin(trainer, run)
        trainer.train(resume_from="latest" if run.resumed else None)

        output = run.path
        result = RunResult(output, output / recipe.model_dir, {}, output / METRICS_FILE,
                           best=schedule.best.state_dict() if schedule.kept_best else {})
        if not trainer.ctx.is_main:
            return result
        if schedule.kept_best:
            recipe.load(output)  # the best evaluation's weights, saved when it was measured
        else:
            recipe.save(output)
        results = recipe.finish(trainer, result)
        if results is not None:
            if trainer.warnings:  # e.g. zero gradients, a run that trained nothing
                results["warnings"] = list(trainer.warnings)
            atomic_write_text(output / recipe.results_file, json.dumps(results, indent=2) + "\n")
            report_final(trainer, results)
            result.results = results
        result.plot_path = plot_metrics(result.metrics_path, output / "metrics.png")
        result.seconds = time.perf_counter() - start
        return result


def epoch_bookkeeping(config: TrainingConfig, steps_per_epoch: int | None, bookkeeping: bool = True) -> TrainingConfig:
    """``config`` for a recipe with ``steps_per_epoch`` steps an epoch: ``max_steps`` from ``epochs`` (unless
    given) and, with ``bookkeeping``, a metrics line about 4 times an epoch (at most every 50 steps), a checkpoint
    every epoch (unless ``save_every``), the last checkpoint kept. ``config`` as it is for a recipe without epochs
    (None)."""
    if steps_per_epoch is None:
        if config.max_steps is None:
            raise ValueError("TrainingConfig.max_steps is None, and this recipe does not count epochs: give "
                             "max_steps (--max-steps).")
        return config
    steps = config.max_steps if config.max_steps is not None else max(1, round(config.epochs * steps_per_epoch))
    if not bookkeeping:
        return config.replace(max_steps=steps)
    return config.replace(max_steps=steps, log_every=max(1, min(50, steps_per_epoch // 4)),
                          save_every=config.save_every or steps_per_epoch, keep_last=1)


def _schedule(recipe: Recipe, trainer: Trainer, data: TrainingData, run: Any,
              per_epoch: int | None) -> EvalSchedule:
    """The run's evaluation schedule on ``trainer``: the Trainer's own evaluations of ``data.eval_dataset``, or
    the recipe's :meth:`~Recipe.evaluate` (every ``eval_every`` steps, by default every epoch), or none."""
    config = trainer.config
    keep_best = config.keep_best or recipe.default_keep_best()
    trainer_evaluates = data.eval_dataset is not None
    if not (trainer_evaluates or recipe.evaluates):
        if config.keep_best is not None or config.patience is not None:
            raise ValueError(f"keep_best / patience (--keep-best / --patience) choose among the evaluations during "
                             f"training, and this run has none: add {recipe.evaluation_data}.")
        keep_best = None

    def save_best(trainer: Trainer) -> None:
        if trainer.ctx.is_main:
            recipe.save(run.path)

    schedule = EvalSchedule(functools.partial(recipe.evaluate, trainer), config.eval_every,
                            name=recipe.evaluation_state, keep_best=keep_best,
                            patience=config.patience, on_best=save_best, at_start=recipe.evaluate_at_start,
                            keep_random_state=recipe.evaluation_keeps_random_state)
    if trainer_evaluates:
        schedule.observe(trainer)
    elif recipe.evaluates:
        schedule.attach(trainer, default_every=per_epoch, steps_per_epoch=per_epoch)
    return schedule


# ---------------------------------------------------------------------- what run.json records as the run goes
def record_numerics(run: Any, trainer: Any) -> None:
    """Store the trainer's numerics (:func:`bertkit.modeling.numerics.describe`) and thread choice as
    ``run.json``'s ``"numerics"`` (``run``: a ``RunDirectory``), warning first when a resumed run's stored
    ones differ in what decides the numbers; writes run.json."""
    current = describe(trainer.device, trainer.precision) | {"threads": trainer.threads.report()}
    if run.resumed:
        warn_if_different(run.info.get("numerics"), current, "the resumed run")
    run.record("numerics", current)
    run.save()


def record_run_settings(run: Any, trainer: Any) -> None:
    """``run.json``'s ``"training"`` (the config the Trainer accepted: fresh, or checked on resume; its
    ``output_dir`` the run's own name, never the hidden folder an ``--overwrite`` run is built in) and
    ``"numerics"`` (:func:`record_numerics`)."""
    run.record("training", trainer.config.to_dict() | {"output_dir": os.fspath(run.final)})
    record_numerics(run, trainer)


def follow_run(trainer: Any, run: Any, moved: Callable[[Path], None] | None = None) -> None:
    """Register a run directory's callbacks on ``trainer``: its settings when training begins; at every save the
    directory's commit (an ``--overwrite`` run replaces the old directory at its first checkpoint, and the
    Trainer follows it there; ``moved(old_path)`` then moves anything else that lived inside) and the numerics."""

    def commit(trainer: Any) -> None:
        staging = run.path
        run.commit()
        if run.path != staging:
            trainer.relocate(run.path)
            if moved is not None:
                moved(staging)

    trainer.add_callback("on_train_begin", functools.partial(record_run_settings, run))
    trainer.add_callback("on_save", commit)
    trainer.add_callback("on_save", functools.partial(record_numerics, run))


def config_from_keywords(training: TrainingConfig | None, options: dict[str, Any], defaults: Mapping[str, Any],
                         renamed: Mapping[str, str] | None = None) -> TrainingConfig:
    """A recipe's :class:`TrainingConfig` when it also takes the config's fields as keyword arguments (as recipe
    functions did before they took a config): ``training`` (None: the recipe's ``defaults``) with the keyword
    arguments in ``options`` that name a field (or an older name in ``renamed``: old name -> field) applied;
    those are popped from ``options``, the recipe's own stay."""
    names = {f.name for f in dataclasses.fields(TrainingConfig)}
    given = {}
    for key in list(options):
        name = (renamed or {}).get(key, key)
        if name in names:
            given[name] = options.pop(key)
    base = training.to_dict() if training is not None else dict(defaults)
    return TrainingConfig.from_dict({**base, **given})
