"""Fine-tuning, evaluation and prediction for every task, on the one training engine.

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

:func:`evaluate` and :func:`predict` run a fine-tuned model directory on a file with the same
code. :func:`run_model` is the one inference loop over features (sorted by length for speed,
outputs handed back in feature order).
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

import numpy as np
import torch

from bertkit.inference.batching import sorted_batches
from bertkit.inference.finite import check_rows
from bertkit.io import atomic_write_text
from bertkit.modeling.fast import GemmChoice
from bertkit.tasks.base import Task
from bertkit.tasks.classification import glue_files
from bertkit.tasks.readers import strict_data
from bertkit.tasks.run_settings import follow_run, warn_if_run_differs
from bertkit.tasks.sources import TASK_FILE, inspect_source, read_task_file  # noqa: F401 (read_task_file: public here)
from bertkit.tasks.table import TABLE, resolve
from bertkit.training import LengthGroupedSampler, Trainer, TrainingConfig
from bertkit.training.config import describe_precision, resolve_precision
from bertkit.training.distributed import DistributedContext, gather_to_all
from bertkit.training.evaluation import forward_inputs, predict_batches
from bertkit.training.metrics import plot_metrics
from bertkit.training.reporting import report_final
from bertkit.training.rundir import file_fingerprint, open_run

logger = logging.getLogger("bertkit.finetune")

#: task name -> task class: the rows of the task table that fine-tuning trains
TASKS: dict[str, type[Task]] = {row.finetune: resolve(row.trainer) for row in TABLE if row.trainer is not None}
MODEL_DIR = "model"
RESULTS_FILE = "results.json"
#: prediction keys left out of the JSON lines (the task writes them to files of their own)
BULKY_KEYS = frozenset({"nbest"})


def make_task(task: str | Task, **options: Any) -> Task:
    """A task object: ``task`` itself, or the task named ``task`` built with ``options``."""
    if isinstance(task, Task):
        if options:
            raise ValueError(f"task options {sorted(options)} apply when the task is given by name.")
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}.")
    return TASKS[task](**options)


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
            _write_task_file(directory, task, max_seq_length)

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
        _write_task_file(model_dir, task, max_seq_length)  # with what calibration learned
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


def _write_task_file(model_dir: Path, task: Task, max_seq_length: int) -> None:
    record = {"task": task.name, "options": task.options(), "max_seq_length": max_seq_length}
    atomic_write_text(Path(model_dir) / TASK_FILE, json.dumps(record, indent=2) + "\n")


# ---------------------------------------------------------------------- running a model over features
def run_model(model: torch.nn.Module, task: Task, features: Sequence[dict[str, Any]], *, batch_size: int = 64,
              precision: str = "auto", ctx: DistributedContext | None = None) -> tuple[list[Any], float | None]:
    """Every feature's outputs (float32 numpy; a tuple for QA) in feature order, and the mean loss when
    the features carry labels (None otherwise). Features run longest first, so batches pad little;
    outputs with a sequence axis are trimmed to the feature's own length.

    With ``ctx`` of a multi-process job, every rank must call this: each runs every ``world_size``-th feature
    and all get every output (exchanged once), so evaluation takes 1/world_size of the time."""
    if ctx is None or not ctx.enabled:
        outputs, loss_sum, counted = _run_features(model, task, features, batch_size, precision)
        return outputs, (loss_sum / counted if counted else None)
    mine = range(ctx.rank, len(features), ctx.world_size)
    shard = _run_features(model, task, [features[i] for i in mine], batch_size, precision)
    outputs: list[Any] = [None] * len(features)
    loss_sum, counted = 0.0, 0
    for rank, (part, part_sum, part_count) in enumerate(gather_to_all(shard, ctx)):
        for i, output in zip(range(rank, len(features), ctx.world_size), part):
            outputs[i] = output
        loss_sum, counted = loss_sum + part_sum, counted + part_count
    return outputs, (loss_sum / counted if counted else None)


def _run_features(model: torch.nn.Module, task: Task, features: Sequence[dict[str, Any]], batch_size: int,
                  precision: str) -> tuple[list[Any], float, int]:
    """(outputs in feature order, summed loss of the labelled batches, their number of features)."""
    lengths = [task.feature_length(f) for f in features]
    order = [i for batch in sorted_batches(lengths, batch_size) for i in batch]  # the pipelines' batching
    ordered = [features[i] for i in order]
    outputs: list[Any] = [None] * len(features)
    loss_sum, counted, position = 0.0, 0, 0
    forward = functools.partial(_forward_with_loss, label_keys=model.label_keys)
    for batch, (logits, loss) in predict_batches(model, ordered, collate_fn=task.collate, batch_size=batch_size,
                                                 precision=precision, forward=forward):
        size = batch["input_ids"].shape[0]
        lengths = batch["attention_mask"].sum(-1).tolist() if task.sequence_outputs else None
        for row in range(size):
            outputs[order[position + row]] = _row(logits, row, lengths[row] if lengths else None)
        position += size
        if loss is not None:
            loss_sum, counted = loss_sum + float(loss) * size, counted + size
    return outputs, loss_sum, counted


def _forward_with_loss(model, batch, label_keys):
    logits = forward_inputs(model, batch)
    if not all(key in batch for key in label_keys):
        return logits, None
    labels = batch[label_keys[0]] if len(label_keys) == 1 else tuple(batch[key] for key in label_keys)
    return logits, model.loss_from_logits(logits, labels)


def _row(logits: Any, row: int, length: int | None) -> Any:
    if isinstance(logits, tuple | list):
        return tuple(_row(part, row, length) for part in logits)
    values = logits[row]
    return (values[:length] if length is not None else values).numpy()


def check_outputs(task: Task, path: str | os.PathLike, examples: Sequence[Any], features: Sequence[dict[str, Any]],
                  outputs: Sequence[Any]) -> None:
    """:class:`~bertkit.inference.finite.NonFiniteOutput` naming the example (file and line) of the first feature
    whose outputs hold NaN or infinity, before anything is decoded, scored or written."""
    check_rows(outputs, lambda i: task.locate(path, examples[features[i]["example"]]))


def score_split(model, task: Task, examples: Sequence[Any], features: Sequence[dict[str, Any]], *,
                batch_size: int = 64, precision: str = "auto",
                ctx: DistributedContext | None = None) -> tuple[list[dict[str, Any]], dict[str, Any], list]:
    """``(predictions, metrics, outputs)`` for one split; metrics (with ``loss``) only when it is labelled.
    ``ctx``: as :func:`run_model` (every rank scores, each having run its share)."""
    outputs, loss = run_model(model, task, features, batch_size=batch_size, precision=precision, ctx=ctx)
    predictions = task.decode(examples, features, outputs)
    scores: dict[str, Any] = {}
    if task.has_labels(examples):
        scores = dict(task.score(examples, predictions))
        if loss is not None:
            scores["loss"] = loss
    return predictions, scores, outputs


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


def write_predictions(task: Task, split: str, examples: Sequence[Any], predictions: Sequence[dict[str, Any]],
                      directory: str | os.PathLike) -> Path:
    """``predictions_<split>.jsonl`` (one line per example, in input order) and the task's own files."""
    path = Path(directory) / f"predictions_{split}.jsonl"
    write_jsonl(path, [{k: v for k, v in p.items() if k not in BULKY_KEYS} for p in predictions])
    write_extra = getattr(task, "write_extra", None)
    if callable(write_extra):
        write_extra(split, examples, predictions, directory)
    return path


def write_jsonl(path: str | os.PathLike, records: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n"
                                    for r in records))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _numbers(scores: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of ``scores`` (tables such as NER's per-type scores stay out of metrics.jsonl)."""
    return {k: float(v) for k, v in scores.items() if isinstance(v, int | float) and not isinstance(v, bool)}


# ---------------------------------------------------------------------- a fine-tuned model on new data
def load_finetuned(model_dir: str | os.PathLike, task: str | None = None, **task_options: Any):
    """``(model, tokenizer, task, max_seq_length)`` from a directory :func:`finetune` wrote (its ``task.json``)
    or any fine-tuned HF directory (then ``task`` names the task; labels come from the config)."""
    from bertkit.tokenization import load_tokenizer

    model_dir = Path(model_dir)
    saved = inspect_source(model_dir).record  # its task.json, None without one
    if saved is not None:
        if task is not None and task != saved["task"]:
            raise ValueError(f"{model_dir} was fine-tuned for {saved['task']!r}, not {task!r}; pass --task "
                             f"{saved['task']} or leave it out.")
        task_object = make_task(saved["task"], **{**saved["options"], **task_options})
        max_seq_length = saved["max_seq_length"]
    elif task is None:
        raise ValueError(f"{model_dir} has no {TASK_FILE}; name its task with --task ({', '.join(sorted(TASKS))}).")
    else:
        task_object, max_seq_length = make_task(task, **task_options), None
    net = task_object.model_class.from_pretrained(model_dir)
    task_object.restore(net.config)
    tokenizer = task_object.tokenizer_for(load_tokenizer(model_dir))
    return net, tokenizer, task_object, max_seq_length or min(512, net.config.max_tokens)


def say_precision(net: torch.nn.Module, precision: str) -> str:
    """The precision ``net`` runs in on its device, said once (logger ``bertkit``): what ``auto`` chose and why."""
    device = next(net.parameters()).device
    used = resolve_precision(precision, device)
    logger.info(describe_precision(precision, used, device))
    return used


def evaluate(model_dir: str | os.PathLike, data: str | os.PathLike, *, task: str | None = None,
             batch_size: int = 64, precision: str = "auto", max_seq_length: int | None = None,
             output: str | os.PathLike | None = None, **task_options: Any) -> dict[str, Any]:
    """The task's metrics of a fine-tuned model on a labelled file (and its predictions in ``output``)."""
    net, tokenizer, task_object, saved_length = load_finetuned(model_dir, task, **task_options)
    examples = task_object.read(data)
    if not task_object.has_labels(examples):
        raise ValueError(f"{data} has no gold labels to evaluate against; use `bertkit predict` for unlabelled data.")
    warn_if_run_differs(model_dir, next(net.parameters()).device, precision, "this evaluation")
    precision = say_precision(net, precision)
    features = task_object.featurize(examples, tokenizer, max_seq_length or saved_length)
    predictions, scores, outputs = score_split(net, task_object, examples, features, batch_size=batch_size,
                                               precision=precision)
    check_outputs(task_object, data, examples, features, outputs)
    if output is not None:
        write_jsonl(output, [{k: v for k, v in p.items() if k not in BULKY_KEYS} for p in predictions])
    return scores


def predict(model_dir: str | os.PathLike, data: str | os.PathLike, output: str | os.PathLike, *,
            task: str | None = None, batch_size: int = 64, precision: str = "auto",
            max_seq_length: int | None = None, **task_options: Any) -> list[dict[str, Any]]:
    """Predictions of a fine-tuned model for every row of ``data``, written to ``output`` (JSON lines)."""
    net, tokenizer, task_object, saved_length = load_finetuned(model_dir, task, **task_options)
    examples = task_object.read(data)
    features = task_object.featurize(examples, tokenizer, max_seq_length or saved_length)
    outputs, _ = run_model(net, task_object, features, batch_size=batch_size, precision=say_precision(net, precision))
    check_outputs(task_object, data, examples, features, outputs)
    predictions = task_object.decode(examples, features, outputs)
    write_jsonl(output, [{k: v for k, v in p.items() if k not in BULKY_KEYS} for p in predictions])
    return predictions
