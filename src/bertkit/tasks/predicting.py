"""A fine-tuned model on new data: :func:`evaluate`, :func:`predict`, and the loop they share.

:func:`load_finetuned` reads a directory :func:`bertkit.tasks.finetuning.finetune` wrote (its ``task.json``
says the task and its settings) or any fine-tuned HF directory. :func:`evaluate` and :func:`predict` then
prepare that model for inference exactly as ``bertkit serve``, ``bertkit predict TASK`` and the pipelines
prepare theirs (:func:`bertkit.inference.precision.prepare`: one ``dtype`` resolution, the same prepared
weights), so a classifier scores the same under ``evaluate`` and ``serve`` at every dtype.

:func:`run_model` is the one loop over features (sorted by length for speed, outputs handed back in feature
order); :func:`score_split` decodes and scores its outputs. Fine-tuning's validation calls them too, on the
model it is training, under the run's autocast precision (the model is not prepared there).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.inference.batching import sorted_batches
from bertkit.inference.finite import check_rows
from bertkit.inference.precision import DtypeChoice, prepare
from bertkit.io import atomic_write_text
from bertkit.modeling.text import resolve_device
from bertkit.tasks.base import Task
from bertkit.tasks.run_settings import warn_if_run_differs
from bertkit.tasks.sources import TASK_FILE, inspect_source, read_task_file  # noqa: F401 (read_task_file: public here)
from bertkit.tasks.table import TABLE, resolve
from bertkit.training.distributed import DistributedContext, gather_to_all
from bertkit.training.evaluation import forward_inputs, predict_batches

#: task name -> task class: the rows of the task table that fine-tuning trains
TASKS: dict[str, type[Task]] = {row.finetune: resolve(row.trainer) for row in TABLE if row.trainer is not None}
#: fine-tuning task -> the pipeline task (its table row's name) whose row of the measured quality table decides
#: ``dtype="auto"``, as the server's and the pipeline's model of that task decide it (a task without a quality
#: row, multiple choice, stays fp32 under auto)
QUALITY_TASK = {row.finetune: row.name for row in TABLE if row.trainer is not None}
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


# ---------------------------------------------------------------------- the task record of a model directory
def write_task_file(model_dir: str | os.PathLike, task: Task, max_seq_length: int) -> None:
    """``model_dir/task.json``: the task, its options and the length it was fine-tuned at."""
    record = {"task": task.name, "options": task.options(), "max_seq_length": max_seq_length}
    atomic_write_text(Path(model_dir) / TASK_FILE, json.dumps(record, indent=2) + "\n")


# ---------------------------------------------------------------------- running a model over features
def run_model(model: torch.nn.Module, task: Task, features: Sequence[dict[str, Any]], *, batch_size: int = 64,
              precision: str = "fp32", ctx: DistributedContext | None = None) -> tuple[list[Any], float | None]:
    """Every feature's outputs (float32 numpy; a tuple for QA) in feature order, and the mean loss when
    the features carry labels (None otherwise). Features run longest first, so batches pad little;
    outputs with a sequence axis are trimmed to the feature's own length. ``precision`` is the autocast of a
    model being trained (``"fp32"``, none, for a model :func:`prepare_finetuned` prepared: it computes in its
    own dtype).

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
    if next(model.parameters()).dtype != torch.float32:  # prepared in bf16 / fp16: the loss in float32
        logits = _float32(logits)
    labels = batch[label_keys[0]] if len(label_keys) == 1 else tuple(batch[key] for key in label_keys)
    return logits, model.loss_from_logits(logits, labels)


def _float32(logits: Any) -> Any:
    if isinstance(logits, tuple | list):
        return type(logits)(_float32(part) for part in logits)
    return logits.float()


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
                batch_size: int = 64, precision: str = "fp32",
                ctx: DistributedContext | None = None) -> tuple[list[dict[str, Any]], dict[str, Any], list]:
    """``(predictions, metrics, outputs)`` for one split; metrics (with ``loss``) only when it is labelled.
    ``precision`` and ``ctx``: as :func:`run_model` (every rank scores, each having run its share)."""
    outputs, loss = run_model(model, task, features, batch_size=batch_size, precision=precision, ctx=ctx)
    predictions = task.decode(examples, features, outputs)
    scores: dict[str, Any] = {}
    if task.has_labels(examples):
        scores = dict(task.score(examples, predictions))
        if loss is not None:
            scores["loss"] = loss
    return predictions, scores, outputs


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
    """``records`` as JSON lines in ``path``, written atomically (numpy scalars and arrays as numbers and lists)."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n"
                                    for r in records))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# ---------------------------------------------------------------------- a fine-tuned model on new data
def load_finetuned(model_dir: str | os.PathLike, task: str | None = None, **task_options: Any):
    """``(model, tokenizer, task, max_seq_length)`` from a directory :func:`bertkit.tasks.finetuning.finetune` wrote
    (its ``task.json``) or any fine-tuned HF directory (then ``task`` names the task; labels come from the
    config). The model is as loaded (float32, CPU, not prepared): :func:`prepare_finetuned` prepares it."""
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


@dataclass
class Finetuned:
    """A fine-tuned model prepared for inference: what :func:`prepare_finetuned` returns."""

    model: torch.nn.Module
    tokenizer: Any
    task: Task
    max_seq_length: int
    dtype: DtypeChoice


def prepare_finetuned(model_dir: str | os.PathLike, task: str | None = None, *, dtype: Any = "auto",
                      device: str | torch.device | None = None, what: str = "this evaluation",
                      **task_options: Any) -> Finetuned:
    """:func:`load_finetuned`'s model moved to ``device`` (default: the CPU) and prepared for inference in
    ``dtype`` by :func:`bertkit.inference.precision.prepare`, the function the pipelines and the server use
    (``"auto"``: bf16 where the hardware computes it natively and the task's measured quality allows, else fp32;
    ``"fp32"``, ``"bf16"``, ``"fp16"``, ``"int8"``). The choice is logged once (logger ``bertkit``); ``what``
    names the computation in the warning given when the fine-tuning run computed with other numerics."""
    net, tokenizer, task_object, max_seq_length = load_finetuned(model_dir, task, **task_options)
    if device is not None:
        net.to(resolve_device(device))
    choice = prepare(net, dtype, QUALITY_TASK.get(task_object.name))
    warn_if_run_differs(model_dir, next(net.parameters()).device, choice.name, what)
    return Finetuned(net, tokenizer, task_object, max_seq_length, choice)


def inference_dtype(dtype: Any, precision: str | None) -> Any:
    """``dtype``, or the deprecated ``precision=`` of :func:`evaluate` / :func:`predict` mapped onto it (with a
    FutureWarning saying so); both given differently is a ValueError."""
    if precision is None:
        return dtype
    if dtype not in ("auto", precision):
        raise ValueError(f"precision={precision!r} (the old name) and dtype={dtype!r} disagree; pass dtype alone.")
    warnings.warn(f"precision= of evaluate / predict is the old name of dtype= (the number format the prepared "
                  f"model runs in, as serve's); pass dtype={precision!r}.", FutureWarning, stacklevel=3)
    return precision


def evaluate(model_dir: str | os.PathLike, data: str | os.PathLike, *, task: str | None = None,
             batch_size: int = 64, dtype: Any = "auto", device: str | torch.device | None = None,
             max_seq_length: int | None = None, output: str | os.PathLike | None = None,
             precision: str | None = None, **task_options: Any) -> dict[str, Any]:
    """The task's metrics of a fine-tuned model on a labelled file (and its predictions in ``output``), the model
    prepared as :func:`prepare_finetuned` says. ``precision``: the old name of ``dtype`` (deprecated)."""
    dtype = inference_dtype(dtype, precision)
    tuned = prepare_finetuned(model_dir, task, dtype=dtype, device=device, what="this evaluation", **task_options)
    examples = tuned.task.read(data)
    if not tuned.task.has_labels(examples):
        raise ValueError(f"{data} has no gold labels to evaluate against; use `bertkit predict` for unlabelled data.")
    features = tuned.task.featurize(examples, tuned.tokenizer, max_seq_length or tuned.max_seq_length)
    predictions, scores, outputs = score_split(tuned.model, tuned.task, examples, features, batch_size=batch_size)
    check_outputs(tuned.task, data, examples, features, outputs)
    if output is not None:
        write_jsonl(output, [{k: v for k, v in p.items() if k not in BULKY_KEYS} for p in predictions])
    return scores


def predict(model_dir: str | os.PathLike, data: str | os.PathLike, output: str | os.PathLike, *,
            task: str | None = None, batch_size: int = 64, dtype: Any = "auto",
            device: str | torch.device | None = None, max_seq_length: int | None = None,
            precision: str | None = None, **task_options: Any) -> list[dict[str, Any]]:
    """Predictions of a fine-tuned model for every row of ``data``, written to ``output`` (JSON lines); the model
    prepared as :func:`prepare_finetuned` says. ``precision``: the old name of ``dtype`` (deprecated)."""
    dtype = inference_dtype(dtype, precision)
    tuned = prepare_finetuned(model_dir, task, dtype=dtype, device=device, what="this prediction", **task_options)
    examples = tuned.task.read(data)
    features = tuned.task.featurize(examples, tuned.tokenizer, max_seq_length or tuned.max_seq_length)
    outputs, _ = run_model(tuned.model, tuned.task, features, batch_size=batch_size)
    check_outputs(tuned.task, data, examples, features, outputs)
    predictions = tuned.task.decode(examples, features, outputs)
    write_jsonl(output, [{k: v for k, v in p.items() if k not in BULKY_KEYS} for p in predictions])
    return predictions
