"""Fine-tuning, evaluation and prediction for every task, on the one training engine.

:func:`finetune` reads the data with the task (:mod:`bertkit.tasks.base` says what a task
brings), loads any checkpoint bertkit reads with its tokenizer and runs the :class:`Finetuning` recipe on the
one run (:func:`~bertkit.training.run.run_recipe`: dynamic padding, shuffled batches, AdamW with linear warmup
and decay, exact resume, bf16, DDP), which scores the validation set after every epoch with the task's
metrics, keeps the best model in ``OUT/model`` and stops early when asked. Then it scores the best model on
every split and writes:

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
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.inference.batching import sorted_batches
from bertkit.inference.finite import check_rows
from bertkit.io import atomic_write_text, read_json_object
from bertkit.tasks.base import Task
from bertkit.tasks.classification import Classification, glue_files
from bertkit.tasks.multiple_choice import MultipleChoice
from bertkit.tasks.question_answering import QuestionAnswering
from bertkit.tasks.readers import strict_data
from bertkit.tasks.run_settings import warn_if_run_differs
from bertkit.tasks.token_classification import TokenClassification
from bertkit.training import LengthGroupedSampler, TrainingConfig
from bertkit.training.config import describe_precision, resolve_precision
from bertkit.training.distributed import DistributedContext, gather_to_all
from bertkit.training.eval_schedule import BestModel as BestModel
from bertkit.training.evaluation import forward_inputs, predict_batches
from bertkit.training.run import (
    MODEL_DIR,
    Recipe,
    RunResult,
    TrainingData,
    config_from_keywords,
    run_recipe,
)
from bertkit.training.rundir import file_fingerprint

logger = logging.getLogger("bertkit.finetune")

#: task name -> task class
TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (Classification, TokenClassification, QuestionAnswering,
                                                          MultipleChoice)}
TASK_FILE = "task.json"
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


#: the result of :func:`finetune`: the one run's (:class:`~bertkit.training.run.RunResult`)
FinetuneResult = RunResult

#: what :func:`finetune` trains with when no ``training`` config is given: 3 epochs, HF's fine-tuning defaults
FINETUNE_TRAINING = dict(epochs=3, learning_rate=5e-5, batch_size=32, eval_batch_size=64, warmup_ratio=0.1,
                         weight_decay=0.01)
#: :func:`finetune`'s keyword arguments of before ``training=`` that name a TrainingConfig field otherwise
#: (``progress``: the progress bar; the best model's metric and the early stop: ``keep_best`` and ``patience``)
RENAMED_KEYWORDS = {"progress": "progress_bar", "metric_for_best": "keep_best", "early_stopping_patience": "patience"}


def finetune(task: str | Task, model: str | os.PathLike, train: str | os.PathLike | None = None, *,
             output_dir: str | os.PathLike, training: TrainingConfig | None = None,
             validation: str | os.PathLike | None = None, test: str | os.PathLike | None = None,
             data_dir: str | os.PathLike | None = None, max_seq_length: int = 128, group_by_length: bool = False,
             strict: bool = False, resume: bool = False, overwrite: bool = False, apply_changes: bool = False,
             callbacks: Mapping[str, Any] | None = None, **options: Any) -> RunResult:
    """Fine-tune ``model`` (anything bertkit loads) on ``task`` and write ``output_dir`` (see the module doc).

    ``task``: ``"classify"``, ``"tag"``, ``"qa"``, ``"choice"`` (its options as keyword
    arguments, e.g. ``text_column="review"``, ``doc_stride=128``) or a task object. Files:
    ``train`` (required unless a GLUE ``data_dir`` provides it), ``validation``, ``test``;
    ``classify`` with ``glue=NAME, data_dir=DIR`` reads the GLUE release's files (MNLI's
    mismatched sets too).

    ``training``: the :class:`~bertkit.training.TrainingConfig` (default :data:`FINETUNE_TRAINING`: 3 epochs,
    which may be fractional, batch 32, learning rate 5e-5, 10% warm-up); its fields are also accepted as keyword
    arguments (``epochs=1, batch_size=16``; the older ``metric_for_best``, ``early_stopping_patience`` and
    ``progress`` too), applied over it. The validation set is scored every epoch (``eval_every``: every so many
    steps); ``keep_best`` (default: the task's primary metric; ``"loss"`` is lower-is-better) picks the
    evaluation whose model is kept; ``patience`` evaluations without improvement end the run. Batches are
    shuffled, as HF's Trainer does; ``group_by_length`` makes batches of similar length (less padding, faster
    steps), which learned worse on held-out NER (``benchmarks/ner_reference.py``; the README's fine-tuning
    section). A resumed run keeps its run's choice (another one is refused unless ``apply_changes``).

    The output directory belongs to the run (:func:`~bertkit.training.run.run_recipe`): ``resume`` continues
    it, ``overwrite`` replaces it. ``callbacks`` go to the :class:`~bertkit.training.Trainer` (event ->
    function or functions). Data a reader only warns about (a :class:`~bertkit.tasks.readers.DataWarning`,
    e.g. SQuAD answers that contradict ``is_impossible``) is an error with ``strict``; training and validation
    data without gold labels always are, before anything is trained. ``threads`` (``"auto"``: measured on the
    first steps, the CLI's default) and ``report_to`` (experiment trackers, which get the metrics, the settings
    and ``results.json``'s scores) are the config's.
    """
    config = config_from_keywords(training, options, FINETUNE_TRAINING, RENAMED_KEYWORDS)
    task = make_task(task, **options)
    splits = _splits(task, train, validation, test, data_dir)
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int | float) or max_seq_length <= 0:
        raise ValueError(f"max_seq_length must be a positive number, got {max_seq_length!r}.")
    with strict_data(strict):  # the data is read and its labels checked before the run directory opens
        examples = {name: task.read(path) for name, path in splits.items()}
    for name in ("train", "validation"):  # test data may be unlabelled: it is only predicted
        if name in examples:
            task.check_labelled(splits[name], examples[name])
    task.fit(examples["train"])
    recipe = Finetuning(task, model, splits, examples, max_seq_length, group_by_length)
    return run_recipe(recipe, config, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


class Finetuning(Recipe):
    """A task fine-tuned on its files (what :func:`finetune` runs): the task's model loaded from ``source`` with
    a new head seeded by the config's seed, its features, the validation set scored during training, the best
    model kept with ``task.json``, every split scored and predicted at the end."""

    changeable = ("batches",)
    evaluation_data = "a validation set (validation=, --validation FILE)"
    # scoring the validation set draws from the random state (its DataLoader's seed), as it always did: a
    # fine-tuning run keeps its numbers
    evaluation_keeps_random_state = False
    evaluation_state = "best_model"  # the name fine-tuning checkpoints have always given it: they still resume

    def __init__(self, task: Task, source: str | os.PathLike, splits: Mapping[str, Path],
                 examples: Mapping[str, Sequence[Any]], max_seq_length: int, group_by_length: bool):
        self.task, self.source, self.splits, self.examples = task, source, splits, examples
        self.max_seq_length, self.group_by_length = max_seq_length, group_by_length

    def start(self, run, config: TrainingConfig) -> None:
        torch.manual_seed(config.seed)  # the new head's initial weights are a function of the seed
        self.model, tokenizer = _load(self.source, self.task, self.max_seq_length)
        self.tokenizer = self.task.tokenizer_for(tokenizer)  # what the task encodes with is saved with the model
        self.features = {name: self.task.featurize(items, self.tokenizer, self.max_seq_length)
                         for name, items in self.examples.items()}

    def checks(self) -> dict[str, Any]:
        return {"task": {"name": self.task.name, "options": self.task.options(), "max_seq_length": self.max_seq_length},
                "model": {"source": os.fspath(self.source)},
                "data": {name: file_fingerprint([path]) for name, path in self.splits.items()},
                "batches": {"group_by_length": self.group_by_length}}

    def steps_per_epoch(self, config: TrainingConfig) -> int:
        steps = len(self.features["train"]) // config.batch_size
        if steps == 0:
            raise ValueError(f"the training data makes {len(self.features['train'])} features, fewer than one batch "
                             f"(batch_size={config.batch_size}); add data or lower --batch-size.")
        return steps

    def training_data(self, config: TrainingConfig) -> TrainingData:
        sampler_factory = None
        if self.group_by_length:
            sampler_factory = functools.partial(
                LengthGroupedSampler, lengths=[self.task.feature_length(f) for f in self.features["train"]],
                group_size=config.batch_size // config.gradient_accumulation_steps)  # one micro-batch of every rank
        return TrainingData(self.features["train"], collate_fn=self.task.collate, sampler_factory=sampler_factory)

    @property
    def evaluates(self) -> bool:
        return "validation" in self.features

    def evaluate(self, trainer) -> dict[str, Any]:
        return score_split(self.model, self.task, self.examples["validation"], self.features["validation"],
                           batch_size=_eval_batch_size(trainer), precision=trainer.precision,
                           ctx=trainer.ctx)[1]  # every rank scores its share

    def default_keep_best(self) -> str:
        return self.task.primary_metric

    def save(self, output: Path) -> None:
        directory = output / MODEL_DIR
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        _write_task_file(directory, self.task, self.max_seq_length)

    def load(self, output: Path) -> None:
        self.model.from_pretrained(output / MODEL_DIR, warn=False)

    def finish(self, trainer, result: RunResult) -> dict[str, Any]:
        results, result.predictions = _final_evaluation(self.model, self.task, self.examples, self.features,
                                                        result.output_dir, _eval_batch_size(trainer),
                                                        trainer.precision)
        _write_task_file(result.model_dir, self.task, self.max_seq_length)  # with what calibration learned
        return results


def _eval_batch_size(trainer) -> int:
    return trainer.config.eval_batch_size or trainer.micro_batch_size


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


def read_task_file(path: str | os.PathLike) -> dict[str, Any]:
    """The record :func:`_write_task_file` wrote: ``{"task": str, "options": dict, "max_seq_length": int or
    None}`` (options default to ``{}``, the length to None). A file that is not that JSON object is a
    ``ValueError`` naming it (and the line, column or key that is wrong)."""
    what = "the task record bertkit finetune writes ({\"task\": \"classify\", \"options\": {...}})"
    record = read_json_object(path, what)
    problems = {"task": isinstance(record.get("task"), str), "options": isinstance(record.get("options", {}), dict),
                "max_seq_length": isinstance(record.get("max_seq_length", 1), int | None)}
    wrong = [key for key, fine in problems.items() if not fine]
    if wrong:
        raise ValueError(f"{os.fspath(path)}: {', '.join(repr(k) for k in wrong)} missing or of the wrong type; it "
                         f"should hold {what}: fix the file or fine-tune again.")
    return {"options": {}, "max_seq_length": None, **record}


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


# ---------------------------------------------------------------------- a fine-tuned model on new data
def load_finetuned(model_dir: str | os.PathLike, task: str | None = None, **task_options: Any):
    """``(model, tokenizer, task, max_seq_length)`` from a directory :func:`finetune` wrote (its ``task.json``)
    or any fine-tuned HF directory (then ``task`` names the task; labels come from the config)."""
    from bertkit.tokenization import load_tokenizer

    model_dir = Path(model_dir)
    task_file = model_dir / TASK_FILE
    saved = read_task_file(task_file) if task_file.is_file() else None
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
