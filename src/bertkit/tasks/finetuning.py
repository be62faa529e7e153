"""Fine-tuning for every task, on the one training engine.

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

Validation during training scores the model being trained under the run's precision with
:func:`~bertkit.tasks.predicting.score_split`; a fine-tuned model on new data (:func:`evaluate`,
:func:`predict`, :func:`load_finetuned`, :func:`run_model`) is :mod:`bertkit.tasks.predicting`'s, whose
public names are importable from here too.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

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
from bertkit.training import LengthGroupedSampler, TrainingConfig
from bertkit.training.config import describe_precision, resolve_precision
from bertkit.training.eval_schedule import BestModel as BestModel
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

#: the fine-tuned model on new data lives in :mod:`bertkit.tasks.predicting`; its public names stay importable here
__all__ = ["BULKY_KEYS", "MODEL_DIR", "TASKS", "TASK_FILE", "BestModel", "FinetuneResult",
           "check_outputs", "evaluate", "finetune", "load_finetuned", "make_task", "predict", "read_task_file",
           "run_model", "say_precision", "score_split", "write_jsonl", "write_predictions", "write_task_file"]


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
        write_task_file(directory, self.task, self.max_seq_length)

    def load(self, output: Path) -> None:
        self.model.from_pretrained(output / MODEL_DIR, warn=False)

    def finish(self, trainer, result: RunResult) -> dict[str, Any]:
        results, result.predictions = _final_evaluation(self.model, self.task, self.examples, self.features,
                                                        result.output_dir, _eval_batch_size(trainer),
                                                        trainer.precision)
        write_task_file(result.model_dir, self.task, self.max_seq_length)  # with what calibration learned
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




def say_precision(net: torch.nn.Module, precision: str) -> str:
    """The training ``precision`` (autocast) ``net`` would run in on its device, said once (logger ``bertkit``):
    what ``auto`` chose and why. (``evaluate`` and ``predict`` no longer autocast: they run the model prepared in
    a ``dtype``, :func:`~bertkit.tasks.predicting.prepare_finetuned`.)"""
    device = next(net.parameters()).device
    used = resolve_precision(precision, device)
    logger.info(describe_precision(precision, used, device))
    return used

