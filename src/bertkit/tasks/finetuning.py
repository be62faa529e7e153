"""Fine-tuning for every task, on the one training engine.

:func:`finetune` reads the data with the task (:mod:`bertkit.tasks.base` says what a task
brings), loads any checkpoint bertkit reads with its tokenizer, trains with
:class:`~bertkit.training.Trainer` (dynamic padding, shuffled batches, AdamW with
linear warmup and decay, exact resume, bf16, DDP), scores the validation set after every
epoch with the task's metrics, keeps the best model in ``OUT/model`` and stops early when
asked. Then it scores the best model on every split and writes:

* ``OUT/model/``: the model in HF format with its tokenizer and ``task.json`` (what
  :func:`evaluate` and :func:`predict` need to rebuild the task);
* ``OUT/results.json``: ``{"validation": {...}, "test": {...}}`` (splits with gold labels);
* ``OUT/predictions_<split>.jsonl``: one line per input row, in input order (plus the
  task's own files, e.g. SQuAD's official JSON);
* ``OUT/metrics.jsonl`` and ``OUT/metrics.png``: training and validation curves.

Validation during training scores the model being trained under the run's precision with
:func:`~bertkit.tasks.predicting.score_split`; a fine-tuned model on new data (:func:`evaluate`,
:func:`predict`, :func:`load_finetuned`, :func:`run_model`) is :mod:`bertkit.tasks.predicting`'s, whose
public names are importable from here too.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit.io import atomic_write_text
from bertkit.modeling.fast import GemmChoice
from bertkit.tasks.base import Task
from bertkit.tasks.classification import glue_files
from bertkit.tasks.predicting import (
    BULKY_KEYS,
    TASK_FILE,
    TASKS,
    check_outputs,
    evaluate,
    load_finetuned,
    make_task,
    predict,
    read_task_file,
    run_model,
    score_split,
    write_jsonl,
    write_predictions,
    write_task_file,
)
from bertkit.tasks.readers import strict_data
from bertkit.tasks.run_settings import follow_run
from bertkit.training import LengthGroupedSampler, Trainer, TrainingConfig
from bertkit.training.config import describe_precision, resolve_precision
from bertkit.training.metrics import plot_metrics
from bertkit.training.reporting import report_final
from bertkit.training.rundir import file_fingerprint, open_run

logger = logging.getLogger("bertkit.finetune")

MODEL_DIR = "model"
RESULTS_FILE = "results.json"
#: the fine-tuned model on new data lives in :mod:`bertkit.tasks.predicting`; its public names stay importable here
__all__ = ["BULKY_KEYS", "MODEL_DIR", "RESULTS_FILE", "TASKS", "TASK_FILE", "BestModel", "FinetuneResult",
           "check_outputs", "evaluate", "finetune", "load_finetuned", "make_task", "predict", "read_task_file",
           "run_model", "say_precision", "score_split", "write_jsonl", "write_predictions", "write_task_file"]


@dataclass
class FinetuneResult:
    """Where a run put things and what it measured (``results``: split -> metrics)."""

    output_dir: Path
    model_dir: Path
    results: dict[str, dict[str, Any]]
    metrics_path: Path
    plot_path: Path | None = None
    predictions: dict[str, Path] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


class BestModel:
    """Tracks the validation metric across epochs: whether this one is the best so far, and when to stop.

    Checkpointed with the run (``state_dict``), so a resumed run knows its best epoch and patience.
    """

    def __init__(self, metric: str, greater_is_better: bool, patience: int | None):
        self.metric, self.greater, self.patience = metric, greater_is_better, patience
        self.value: float | None = None
        self.step = 0
        self.bad_evaluations = 0

    def update(self, metrics: Mapping[str, Any], step: int) -> bool:
        """Record an evaluation; True when it is the best so far (then the caller saves the model)."""
        if self.metric not in metrics:
            raise ValueError(f"metric_for_best={self.metric!r} is not among the validation metrics "
                             f"{sorted(metrics)}; choose one of them (--metric-for-best).")
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
        return {"value": self.value, "step": self.step, "bad_evaluations": self.bad_evaluations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.value, self.step, self.bad_evaluations = state["value"], state["step"], state["bad_evaluations"]


def finetune(task: str | Task, model: str | os.PathLike, train: str | os.PathLike | None = None, *,
             output_dir: str | os.PathLike, validation: str | os.PathLike | None = None,
             test: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
             epochs: float = 3, learning_rate: float = 5e-5, batch_size: int = 32, eval_batch_size: int = 64,
             max_seq_length: int = 128, warmup_ratio: float = 0.1, weight_decay: float = 0.01, seed: int = 42,
             precision: str = "auto", gradient_accumulation_steps: int = 1,
             early_stopping_patience: int | None = None, metric_for_best: str | None = None,
             group_by_length: bool = False, device: str = "auto", resume: bool = False, overwrite: bool = False,
             apply_changes: bool = False, progress: bool = True, callbacks: Mapping[str, Any] | None = None,
             strict: bool = False, threads: int | str | None = None, report_to: str | Sequence[str] | None = None,
             **task_options: Any) -> FinetuneResult:
    """Fine-tune ``model`` (anything bertkit loads) on ``task`` and write ``output_dir`` (see the module doc).

    ``task``: ``"classify"``, ``"tag"``, ``"qa"``, ``"choice"`` (its options as keyword
    arguments, e.g. ``text_column="review"``, ``doc_stride=128``) or a task object. Files:
    ``train`` (required unless a GLUE ``data_dir`` provides it), ``validation``, ``test``;
    ``classify`` with ``glue=NAME, data_dir=DIR`` reads the GLUE release's files (MNLI's
    mismatched sets too). ``epochs`` may be fractional. ``metric_for_best`` (default: the
    task's primary metric; ``"loss"`` is lower-is-better) picks the epoch whose model is kept;
    ``early_stopping_patience`` evaluations without improvement end the run. Batches are shuffled, as HF's
    Trainer does; ``group_by_length`` makes batches of similar length (less padding, faster steps), which
    learned worse on held-out NER (``benchmarks/ner_reference.py``; the README's fine-tuning section). A
    resumed run keeps its run's choice (another one is refused unless ``apply_changes``). The output
    directory belongs to the run: ``resume`` continues it, ``overwrite`` replaces it. ``callbacks``
    go to the :class:`~bertkit.training.Trainer` (event -> function or functions). Data a reader only
    warns about (a :class:`~bertkit.tasks.readers.DataWarning`, e.g. SQuAD answers that contradict
    ``is_impossible``) is an error with ``strict``; training and validation data without gold labels
    always are, before anything is trained. ``threads``: CPU threads (``"auto"``: measured on the first steps,
    the CLI's default; None: torch's as it is; see :class:`~bertkit.training.TrainingConfig`). ``report_to``:
    experiment trackers (``"tensorboard"``, ``"mlflow"``, ``"trackio"``; :mod:`bertkit.training.reporting`),
    which get the metrics, the settings and ``results.json``'s scores.
    """
    start = time.perf_counter()
    task = make_task(task, **task_options)
    splits = _splits(task, train, validation, test, data_dir)
    for name, value in (("epochs", epochs), ("max_seq_length", max_seq_length)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}.")
    with strict_data(strict):  # the data is read and its labels checked before the run directory opens
        examples = {name: task.read(path) for name, path in splits.items()}
    for name in ("train", "validation"):  # test data may be unlabelled: it is only predicted
        if name in examples:
            task.check_labelled(splits[name], examples[name])
    task.fit(examples["train"])
    with open_run(output_dir, resume=resume, overwrite=overwrite) as run:
        torch.manual_seed(seed)  # the new head's initial weights are a function of the seed
        net, tokenizer = _load(model, task, max_seq_length)
        tokenizer = task.tokenizer_for(tokenizer)  # what the task encodes with is what is saved with the model
        features = {name: task.featurize(items, tokenizer, max_seq_length) for name, items in examples.items()}
        run.check("task", {"name": task.name, "options": task.options(), "max_seq_length": max_seq_length})
        run.check("model", {"source": os.fspath(model)})
        run.check("data", {name: file_fingerprint([path]) for name, path in splits.items()})
        (run.record if apply_changes else run.check)("batches", {"group_by_length": group_by_length})
        run.save()

        train_features = features["train"]
        steps_per_epoch = len(train_features) // batch_size
        if steps_per_epoch == 0:
            raise ValueError(f"the training data makes {len(train_features)} features, fewer than one batch "
                             f"(batch_size={batch_size}); add data or lower --batch-size.")
        training = TrainingConfig(
            max_steps=max(1, round(epochs * steps_per_epoch)), learning_rate=learning_rate, weight_decay=weight_decay,
            warmup_ratio=warmup_ratio, batch_size=batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
            eval_batch_size=eval_batch_size, precision=precision, seed=seed, device=device,
            log_every=max(1, min(50, steps_per_epoch // 4)), save_every=steps_per_epoch, keep_last=1,
            output_dir=str(run.path), progress_bar=progress, threads=threads, report_to=report_to)
        best = BestModel(metric_for_best or task.primary_metric, (metric_for_best or "") != "loss",
                         early_stopping_patience)
        sampler_factory = None
        if group_by_length:
            sampler_factory = functools.partial(
                LengthGroupedSampler, lengths=[task.feature_length(f) for f in train_features],
                group_size=batch_size // gradient_accumulation_steps)  # one micro-batch of every rank
        trainer = Trainer(net, train_features, config=training, collate_fn=task.collate,
                          sampler_factory=sampler_factory, stateful={"best_model": best, "gemm": GemmChoice()},
                          apply_changes=apply_changes, callbacks=callbacks)

        def save_model(directory: Path) -> None:
            net.save_pretrained(directory)
            tokenizer.save_pretrained(directory)
            write_task_file(directory, task, max_seq_length)

        def end_of_epoch(trainer: Trainer) -> None:
            step = trainer.state.step
            if step % steps_per_epoch and step != training.max_steps:
                return
            if "validation" not in features:
                return
            scores = score_split(net, task, examples["validation"], features["validation"],  # ranks share it
                                 batch_size=eval_batch_size, precision=trainer.precision, ctx=trainer.ctx)[1]
            trainer.write_metrics({"split": "eval", "step": step, "epoch": step / steps_per_epoch,
                                   **_numbers(scores), "elapsed_s": round(trainer.state.elapsed_s, 3)})
            if best.update(scores, step) and trainer.ctx.is_main:
                save_model(run.path / MODEL_DIR)
            logger.info("epoch %.2f: validation %s = %.4f (best %.4f at step %d)", step / steps_per_epoch,
                        best.metric, scores.get(best.metric, float("nan")), best.value, best.step)
            if best.should_stop:
                logger.info("early stopping: no better %s in %d evaluation(s)", best.metric, best.patience)
                trainer.should_stop = True

        trainer.add_callback("on_step_end", end_of_epoch)
        follow_run(trainer, run)
        trainer.train(resume_from="latest" if run.resumed else None)

        output = run.path
        model_dir = output / MODEL_DIR
        result = FinetuneResult(output, model_dir, {}, output / "metrics.jsonl", best=best.state_dict())
        if not trainer.ctx.is_main:
            return result
        if "validation" in features:
            net.from_pretrained(model_dir, warn=False)  # the best epoch's weights
        else:
            save_model(model_dir)
        result.results, result.predictions = _final_evaluation(net, task, examples, features, output,
                                                               eval_batch_size, trainer.precision)
        write_task_file(model_dir, task, max_seq_length)  # with what calibration learned
        if trainer.warnings:  # e.g. zero gradients, a run that trained nothing
            result.results["warnings"] = list(trainer.warnings)
        atomic_write_text(output / RESULTS_FILE, json.dumps(result.results, indent=2) + "\n")
        report_final(trainer, result.results)
        result.plot_path = plot_metrics(result.metrics_path, output / "metrics.png")
        result.seconds = time.perf_counter() - start
        return result


def _splits(task: Task, train, validation, test, data_dir) -> dict[str, Path]:
    files: dict[str, Path] = {}
    if data_dir is not None:
        if not getattr(task, "glue", None):
            raise ValueError("data_dir (--data-dir) reads a GLUE task's directory; name the task with glue= "
                             "(--glue), or pass the files with train= / validation= / test=.")
        files.update(glue_files(task.glue, data_dir))
    files.update({name: Path(path) for name, path in (("train", train), ("validation", validation),
                                                      ("test", test)) if path is not None})
    if "train" not in files:
        raise ValueError("no training data: pass train= (--train FILE).")
    return files


def _load(source: str | os.PathLike, task: Task, max_seq_length: int):
    from bertkit.tasks.sources import load_model_and_tokenizer

    net, tokenizer = load_model_and_tokenizer(source, task.model_class, **task.model_overrides())
    positions = net.config.max_tokens  # RoBERTa's first positions are reserved: 514 embeddings, 512 tokens
    if max_seq_length > positions:
        raise ValueError(f"max_seq_length={max_seq_length} exceeds the {positions} token positions {source} was "
                         f"trained with; use --max-seq-length {positions} or less.")
    return net, tokenizer


def _final_evaluation(model, task: Task, examples, features, output: Path, batch_size: int,
                      precision: str) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """Score the best model on every split but train (validation first: a task may calibrate on it)."""
    results, written = {}, {}
    names = sorted((n for n in examples if n != "train"), key=lambda n: (not n.startswith("validation"), n))
    for name in names:
        predictions, scores, outputs = score_split(model, task, examples[name], features[name],
                                                   batch_size=batch_size, precision=precision)
        calibrate = getattr(task, "calibrate", None)
        if name == "validation" and callable(calibrate) and task.has_labels(examples[name]):
            calibration = calibrate(examples[name], predictions)
            if calibration:  # decide again with what the validation set taught (e.g. SQuAD v2's null threshold)
                predictions = task.decode(examples[name], features[name], outputs)
                scores = {**scores, **task.score(examples[name], predictions), **calibration}
        if scores:
            results[name] = scores
        written[name] = write_predictions(task, name, examples[name], predictions, output)
    return results, written


def _numbers(scores: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of ``scores`` (tables such as NER's per-type scores stay out of metrics.jsonl)."""
    return {k: float(v) for k, v in scores.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def say_precision(net: torch.nn.Module, precision: str) -> str:
    """The training ``precision`` (autocast) ``net`` would run in on its device, said once (logger ``bertkit``):
    what ``auto`` chose and why. (``evaluate`` and ``predict`` no longer autocast: they run the model prepared in
    a ``dtype``, :func:`~bertkit.tasks.predicting.prepare_finetuned`.)"""
    device = next(net.parameters()).device
    used = resolve_precision(precision, device)
    logger.info(describe_precision(precision, used, device))
    return used

