"""Sentence (pair) classification and regression: any CSV / TSV / JSONL table, and the nine GLUE tasks.

One example per row: ``text_column`` (and ``text_pair_column`` for pairs) and ``label_column``.
Labels may be strings or numbers. The problem type is ``problem_type`` or inferred from the
training labels:

* ``multi_label_classification`` when a label is a list, or a string holding ``|``
  (``"sports|politics"``): a sigmoid per label, a label predicted when its probability > 0.5;
* ``regression`` when a label is a number with a fractional part (``3.25``): one output;
* ``single_label_classification`` otherwise: one class per example (softmax).

The label set is the training set's, sorted (numerically when every label is a number); its
names go to the model config's ``id2label``, so a saved model shows them in HF transformers too.
Predictions give each ``label`` as it appears in the data.

GLUE (:data:`GLUE`): ``glue="mnli"`` and ``data_dir`` read the original TSV layouts of the
GLUE release (headerless CoLA, MNLI's matched and mismatched dev/test files) and score with the
task's official metrics (accuracy, F1, Matthews correlation, Pearson / Spearman).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.modeling.heads import BERTForSequenceClassification
from bertkit.tasks import metrics
from bertkit.tasks.base import Task, softmax
from bertkit.tasks.readers import Row, column, guess_column, read_rows, where
from bertkit.tokenization.cut import cut_pairs, cut_texts

SINGLE, MULTI, REGRESSION = "single_label_classification", "multi_label_classification", "regression"
PROBLEM_TYPES = {SINGLE: SINGLE, MULTI: MULTI, REGRESSION: REGRESSION,
                 "single": SINGLE, "multi": MULTI, "multi_label": MULTI, "single_label": SINGLE}
TEXT_COLUMNS = ("text", "sentence", "sentence1", "question1", "question", "premise", "content", "review")
PAIR_COLUMNS = ("text_pair", "sentence2", "question2", "hypothesis")


@dataclass(frozen=True)
class GlueTask:
    """Where one GLUE task keeps its data in the release's TSV files, and how it is scored."""

    text: str
    pair: str | None
    label: str
    metrics: tuple[str, ...]  # the first picks the best checkpoint
    splits: dict[str, str]  # split -> file name in the task's directory
    header: tuple[str, ...] | None = None  # the column names of a headerless train/dev file (CoLA)
    regression: bool = False


_DEV_TEST = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
GLUE: dict[str, GlueTask] = {
    "cola": GlueTask("sentence", None, "label", ("matthews_correlation", "accuracy"), _DEV_TEST,
                     header=("source", "label", "label_notes", "sentence")),
    "sst2": GlueTask("sentence", None, "label", ("accuracy",), _DEV_TEST),
    "mrpc": GlueTask("#1 String", "#2 String", "Quality", ("f1", "accuracy"), _DEV_TEST),
    "stsb": GlueTask("sentence1", "sentence2", "score", ("pearson", "spearman"), _DEV_TEST, regression=True),
    "qqp": GlueTask("question1", "question2", "is_duplicate", ("accuracy", "f1"), _DEV_TEST),
    "mnli": GlueTask("sentence1", "sentence2", "gold_label", ("accuracy",),
                     {"train": "train.tsv", "validation": "dev_matched.tsv",
                      "validation_mismatched": "dev_mismatched.tsv", "test": "test_matched.tsv",
                      "test_mismatched": "test_mismatched.tsv"}),
    "qnli": GlueTask("question", "sentence", "label", ("accuracy",), _DEV_TEST),
    "rte": GlueTask("sentence1", "sentence2", "label", ("accuracy",), _DEV_TEST),
    "wnli": GlueTask("sentence1", "sentence2", "label", ("accuracy",), _DEV_TEST),
}
#: the GLUE release's directory names
GLUE_DIRS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
             "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def glue_files(name: str, data_dir: str | os.PathLike) -> dict[str, Path]:
    """The split files of GLUE task ``name`` under ``data_dir`` (the task's folder, or the GLUE root).

    Only the files that exist are returned; ``train`` must, or ``ValueError`` says where it looked.
    """
    if name not in GLUE:
        raise ValueError(f"unknown GLUE task {name!r}; choose one of {sorted(GLUE)}.")
    root = Path(data_dir)
    if not (root / GLUE[name].splits["train"]).exists() and (root / GLUE_DIRS[name]).is_dir():
        root = root / GLUE_DIRS[name]
    files = {split: root / file for split, file in GLUE[name].splits.items() if (root / file).is_file()}
    if "train" not in files and "validation" not in files:
        raise ValueError(f"no GLUE {name} data in {data_dir}: expected {GLUE[name].splits['train']} there or in "
                         f"{Path(data_dir) / GLUE_DIRS[name]}.")
    return files


@dataclass
class TextExample:
    """One row: the text (and pair), its label as in the data (None when the file has none), its line and its
    file (for error messages; "" when built in code)."""

    text: str
    text_pair: str | None
    label: Any
    line: int
    path: str = ""


class Classification(Task):
    """Sequence classification / regression (``bertkit finetune classify``); see the module docstring."""

    name = "classify"
    model_class = BERTForSequenceClassification

    def __init__(self, *, text_column: str | None = None, text_pair_column: str | None = None,
                 label_column: str | None = None, problem_type: str | None = None, glue: str | None = None,
                 labels: list | None = None, encoding: str = "utf-8"):
        super().__init__()
        if problem_type is not None and problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {sorted(set(PROBLEM_TYPES.values()))} (or single, multi), "
                             f"got {problem_type!r}.")
        if glue is not None and glue not in GLUE:
            raise ValueError(f"glue must be one of {sorted(GLUE)}, got {glue!r}.")
        spec = GLUE.get(glue) if glue else None
        self.glue = glue
        self.text_column = text_column or (spec.text if spec else None)
        self.text_pair_column = text_pair_column or (spec.pair if spec else None)
        self.label_column = label_column or (spec.label if spec else "label")
        self.problem_type = PROBLEM_TYPES[problem_type] if problem_type else (REGRESSION if spec and spec.regression
                                                                              else None)
        self.labels = list(labels) if labels is not None else None
        self.encoding = encoding
        self.primary_metric = spec.metrics[0] if spec else ("pearson" if self.problem_type == REGRESSION
                                                            else "accuracy")

    @property
    def label_hint(self) -> str:
        return f"column {self.label_column!r}; name another with --label-column"

    def options(self) -> dict[str, Any]:
        return {"text_column": self.text_column, "text_pair_column": self.text_pair_column,
                "label_column": self.label_column, "problem_type": self.problem_type, "glue": self.glue,
                "labels": self.labels, "encoding": self.encoding}

    # ------------------------------------------------------------------ reading
    def read(self, path: str | os.PathLike) -> list[TextExample]:
        header = None
        if self.glue and GLUE[self.glue].header and not Path(path).name.startswith("test"):
            header = GLUE[self.glue].header
        rows = read_rows(path, header=header, encoding=self.encoding)
        if not rows:
            raise ValueError(f"{path} holds no examples.")
        text = column(path, rows, self.text_column, "--text-column") if self.text_column else \
            guess_column(path, rows, TEXT_COLUMNS, "--text-column")
        self.text_column = self.text_column or text
        pair = column(path, rows, self.text_pair_column, "--text-pair-column") if self.text_pair_column else None
        has_label = self.label_column in rows[0].values
        return [TextExample(_text(path, row, text), _text(path, row, pair) if pair else None,
                            _label(path, row, self.label_column) if has_label else None, row.line, str(path))
                for row in rows]

    # ------------------------------------------------------------------ labels
    def fit(self, examples: Sequence[TextExample]) -> None:
        """The problem type (unless given) and the label set: the training labels sorted (numbers by value), or
        ``labels`` as given (their order is the ids') when they hold every training label."""
        labelled = [e for e in examples if e.label is not None]
        if not labelled:
            raise ValueError(f"the training data has no labels (no {self.label_column!r} column); name it with "
                             "--label-column.")
        if self.problem_type is None:
            self.problem_type = _infer_problem_type([e.label for e in labelled])
        if self.problem_type == REGRESSION:
            for example in labelled:  # every training label a finite number, said before anything is trained
                _number(example)
            self.labels = None
            if not self.glue:
                self.primary_metric = "pearson"
            return
        values = {item for e in labelled for item in self._label_items(e.label)}
        if self.labels is None:
            self.labels = sorted(values, key=_label_sort_key)
        elif missing := {str(v) for v in values} - {str(label) for label in self.labels}:
            raise ValueError(f"the training labels {sorted(missing, key=_label_sort_key)} are not in labels="
                             f"{self.labels}; add them there (--labels), or leave labels out to take the training "
                             "set's.")
        if len(self.labels) < 2 and self.problem_type == SINGLE:
            raise ValueError(f"the training data has a single label ({self.labels[0]!r}): a classifier needs at "
                             "least two. Check --label-column, or use --problem-type regression for numbers.")

    def model_overrides(self) -> dict[str, Any]:
        if self.problem_type == REGRESSION:
            return {"num_labels": 1, "problem_type": REGRESSION, "id2label": None}
        return {"num_labels": len(self.labels), "problem_type": self.problem_type,
                "id2label": {i: str(label) for i, label in enumerate(self.labels)}}

    def restore(self, config: Any) -> None:
        self.problem_type = self.problem_type or config.problem_type
        if self.labels is None and self.problem_type != REGRESSION and config.id2label:
            self.labels = [config.id2label[i] for i in range(config.num_labels)]

    def _label_index(self) -> dict[str, int]:
        """Label (as text, so 1 and "1" agree) -> class id."""
        return {str(label): i for i, label in enumerate(self.labels)}

    def _label_items(self, label: Any) -> list:
        if self.problem_type != MULTI:
            return [label]
        if isinstance(label, list):
            return label
        return [part.strip() for part in str(label).split("|") if part.strip()]

    def _target(self, example: TextExample) -> Any:
        if self.problem_type == REGRESSION:
            return _number(example)
        index = self._label_index()
        items = [str(item) for item in self._label_items(example.label)]
        unknown = sorted(set(items) - set(index))
        if unknown:
            raise ValueError(f"{where(example.path, example.line)}: label(s) {unknown} are not among the training "
                             f"labels {self.labels}; every label must occur in the training data.")
        if self.problem_type == MULTI:
            hot = [0.0] * len(self.labels)
            for item in items:
                hot[index[item]] = 1.0
            return hot
        return index[items[0]]

    # ------------------------------------------------------------------ features
    def featurize(self, examples: Sequence[TextExample], tokenizer: Any, max_seq_length: int) -> list[dict]:
        self.prepare(tokenizer)
        # texts cut to what truncation keeps: the same tokens, at a cost bounded by max_seq_length
        texts, side = [e.text for e in examples], tokenizer.truncation_side
        if self.text_pair_column:
            texts, pairs = cut_pairs(tokenizer, texts, [e.text_pair or "" for e in examples], max_seq_length, side)
        else:
            texts, pairs = cut_texts(tokenizer, texts, max_seq_length, side), None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_seq_length, return_token_type_ids=True)
        features = []
        for i, example in enumerate(examples):
            feature = {"example": i, "input_ids": encoded["input_ids"][i],
                       "token_type_ids": encoded["token_type_ids"][i]}
            if example.label is not None:
                feature["labels"] = self._target(example)
            features.append(feature)
        return features

    # ------------------------------------------------------------------ predictions and scores
    def decode(self, examples, features, outputs) -> list[dict[str, Any]]:
        logits = np.stack([np.asarray(o) for o in outputs])
        if self.problem_type == REGRESSION:
            return [{"label": float(value)} for value in logits[:, 0]]
        if self.problem_type == MULTI:
            probabilities = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            return [{"label": [self.labels[j] for j in np.flatnonzero(p > 0.5)],
                     "probabilities": {str(label): float(q) for label, q in zip(self.labels, p)}}
                    for p in probabilities]
        probabilities = softmax(logits)
        best = probabilities.argmax(-1)
        return [{"label": self.labels[b], "score": float(p[b]),
                 "probabilities": {str(label): float(q) for label, q in zip(self.labels, p)}}
                for b, p in zip(best, probabilities)]

    def score(self, examples, predictions) -> dict[str, float]:
        if self.problem_type == REGRESSION:
            gold = np.array([_number(e) for e in examples])
            predicted = np.array([p["label"] for p in predictions])
            return {"pearson": metrics.pearson(predicted, gold), "spearman": metrics.spearman(predicted, gold),
                    "mse": float(np.mean((predicted - gold) ** 2))}
        if self.problem_type == MULTI:
            index = self._label_index()
            gold = np.array([self._target(e) for e in examples], dtype=np.int64)
            predicted = np.zeros_like(gold)
            for row, p in enumerate(predictions):
                predicted[row, [index[str(label)] for label in p["label"]]] = 1
            scores = metrics.multilabel_scores(predicted, gold)
            return {"accuracy": scores["exact_match"], "micro_f1": scores["micro_f1"],
                    "macro_f1": scores["macro_f1"]}
        gold = [self._target(e) for e in examples]
        index = self._label_index()
        predicted = [index[str(p["label"])] for p in predictions]
        scores = {"accuracy": metrics.accuracy(predicted, gold)}
        if len(self.labels) == 2:  # the second label (e.g. 1, "pos") is the positive class
            scores.update(metrics.precision_recall_f1(predicted, gold, average="binary", positive=1))
        else:
            scores["f1"] = metrics.f1_score(predicted, gold, average="macro")
        scores["matthews_correlation"] = metrics.matthews_corrcoef(predicted, gold)
        return scores


def _text(path, row: Row, name: str) -> str:
    value = row.values.get(name)
    if value is None:
        raise ValueError(f"{path}, line {row.line}: no {name!r} value.")
    return value if isinstance(value, str) else str(value)


def _label(path, row: Row, name: str) -> Any:
    value = row.values.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{path}, line {row.line}: the label ({name!r}) is empty; every row of a labelled file "
                         "needs one.")
    return value.strip() if isinstance(value, str) else value


def _infer_problem_type(labels: list) -> str:
    if any(isinstance(label, list) or (isinstance(label, str) and "|" in label) for label in labels):
        return MULTI
    numbers = [_maybe_number(label) for label in labels]
    if all(n is not None for n in numbers) and any(not float(n).is_integer() for n in numbers):
        return REGRESSION
    return SINGLE


def _maybe_number(label: Any) -> float | None:
    if isinstance(label, bool):
        return None
    if isinstance(label, int | float):
        return float(label)
    try:
        return float(label)  # NaN and infinities too: numbers, refused as regression labels by _number
    except (TypeError, ValueError):
        return None


def _number(example: TextExample) -> float:
    value = _maybe_number(example.label)
    if value is None:
        raise ValueError(f"{where(example.path, example.line)}: regression needs a number as label, got "
                         f"{example.label!r}.")
    if not math.isfinite(value):
        raise ValueError(f"{where(example.path, example.line)}: the label {example.label!r} is not finite; "
                         "regression needs a finite number: fix the label or drop the row.")
    return value


def _label_sort_key(label: Any) -> tuple:
    number = _maybe_number(label)
    return (0, number, "") if number is not None else (1, 0.0, str(label))
