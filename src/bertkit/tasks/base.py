"""What a fine-tuning task brings to the one generic :mod:`bertkit.tasks.finetuning`: data in, answers out.

A task never trains or runs the model itself. :class:`Task` is the contract each task module
(classification, token classification, question answering, multiple choice) fulfils:

1. ``read(path)`` -> examples, in the file's order (task-specific records; a bad row is a
   ``ValueError`` naming the file, the line and the fix);
   ``check_labelled(path, examples)`` refuses training or validation data without gold labels
   before anything is trained;
2. ``fit(train_examples)`` learns what the head needs from the training data (the label set),
   ``model_overrides()`` turns that into config overrides (``num_labels``, ``id2label``, ...)
   and ``restore(config)`` takes it back from a saved model's config; ``tokenizer_for(tokenizer)``
   may derive the tokenizer the task needs from the model's (saved with the model);
3. ``featurize(examples, tokenizer, max_seq_length)`` -> features: one dict per model input
   row with ``example`` (the index of its example; QA windows share one), the unpadded
   ``input_ids`` / ``token_type_ids`` lists, and the labels under the head's ``label_keys``
   when the example has gold labels; tasks keep extra per-feature data (offsets, word ids)
   under other keys, which :meth:`collate` ignores;
4. :meth:`collate` pads a list of features into the batch dict ``training_step`` and
   ``forward`` take (dynamic padding: to the longest row of the batch);
5. ``decode(examples, features, outputs)`` -> one prediction dict per example, in order,
   from ``outputs[i]``: feature ``i``'s logits as float32 numpy arrays (a tuple for QA),
   trimmed to the feature's length where they have a sequence axis;
6. ``score(examples, predictions)`` -> metrics over the examples with gold labels;
   ``primary_metric`` names the one that picks the best checkpoint.

``options()`` is everything needed to rebuild the task for ``evaluate`` / ``predict``
(``type(task)(**task.options())`` plus ``restore``); it is saved as ``task.json`` beside the
model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.inference.batching import pad_lists
from bertkit.modeling.heads import TaskModel
from bertkit.tasks.readers import where

#: the model inputs every feature carries; ``attention_mask`` is made by :meth:`Task.collate`
FEATURE_INPUTS = ("input_ids", "token_type_ids")
#: padding of a label list (ignored by every loss)
IGNORE_INDEX = -100


class Task:
    """Base class of the fine-tuning tasks; see the module docstring for the contract."""

    #: the CLI's name for the task (``bertkit finetune NAME``)
    name: ClassVar[str] = ""
    #: the bertkit head the task fine-tunes
    model_class: ClassVar[type[TaskModel]]
    #: the metric that picks the best checkpoint, unless the user names another
    primary_metric: ClassVar[str] = "accuracy"

    def __init__(self) -> None:
        self.pad_token_id = 0

    # ------------------------------------------------------------------ to override
    def options(self) -> dict[str, Any]:
        """Constructor arguments that rebuild this task (JSON-serialisable)."""
        return {}

    def read(self, path: str) -> list[Any]:
        raise NotImplementedError

    def fit(self, examples: Sequence[Any]) -> None:
        """Learn what the head needs (e.g. the label set) from the training examples."""

    def model_overrides(self) -> dict[str, Any]:
        """``BERTConfig`` overrides for the head (``num_labels``, ``id2label``, ``problem_type``)."""
        return {}

    def restore(self, config: Any) -> None:
        """Take back what :meth:`fit` learned from a fine-tuned model's config."""

    def featurize(self, examples: Sequence[Any], tokenizer: Any, max_seq_length: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def decode(self, examples: Sequence[Any], features: Sequence[dict[str, Any]],
               outputs: Sequence[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def score(self, examples: Sequence[Any], predictions: Sequence[dict[str, Any]]) -> dict[str, float]:
        raise NotImplementedError

    def has_labels(self, examples: Sequence[Any]) -> bool:
        """Whether the examples carry gold labels (a test set may not): then they are scored."""
        return bool(examples) and all(getattr(e, "label", None) is not None for e in examples)

    #: where the task's files hold gold labels, for the error that asks for them
    label_hint: ClassVar[str] = "a gold label per example"

    def check_labelled(self, path: Any, examples: Sequence[Any]) -> None:
        """Nothing when every example of ``path`` has a gold label, as training and picking the best epoch
        need; else a ValueError naming the file and the first example without one (or the file alone when
        none has one) and :attr:`label_hint`. Predicting needs no labels and does not call this."""
        missing = [e for e in examples if getattr(e, "label", None) is None]
        if not missing:
            return
        if len(missing) == len(examples):
            raise ValueError(f"{path} has no gold labels ({self.label_hint}); training and validation data need "
                             "one on every example (unlabelled data can go to --test, or to bertkit predict).")
        raise ValueError(f"{self.locate(path, missing[0])}: no gold label ({self.label_hint}), though "
                         f"{len(examples) - len(missing)} other example(s) have one; training and validation data "
                         "need one on every example.")

    @staticmethod
    def locate(path: Any, example: Any) -> str:
        """Where ``example`` is in ``path``, to start an error message: ``"{path}, line {n}"``."""
        return where(path, example.line)

    def tokenizer_for(self, tokenizer: Any) -> Any:
        """The tokenizer this task encodes with, given the model's: itself here. A task may derive another (the
        tag task's pre-split words need byte-level BPE's ``add_prefix_space``); :func:`~bertkit.tasks.finetune`
        saves the derived one beside the model, and ``featurize`` derives it again (a no-op then)."""
        return tokenizer

    # ------------------------------------------------------------------ shared
    def prepare(self, tokenizer: Any) -> None:
        """Called with the model's tokenizer before featurizing: remembers its padding id."""
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad ``features`` to the longest row: inputs with the tokenizer's pad id, label lists with -100.

        Works for rows ``[L]`` and for multiple choice's ``[C, L]`` (one list per choice).
        """
        input_ids, lengths = pad_lists([f["input_ids"] for f in features], self.pad_token_id, with_lengths=True)
        positions = torch.arange(input_ids.shape[-1])
        batch = {"input_ids": input_ids, "attention_mask": (positions < lengths.unsqueeze(-1)).long(),
                 "token_type_ids": pad_lists([f["token_type_ids"] for f in features], 0)}
        for key in self.model_class.label_keys:
            if key not in features[0]:
                continue
            values = [f[key] for f in features]
            batch[key] = pad_lists(values, IGNORE_INDEX) if self.pads_labels else torch.tensor(values)
        return batch

    #: whether ``labels`` is a per-token list to pad (token classification)
    pads_labels: ClassVar[bool] = False
    #: whether the head's outputs have a sequence axis (tagging, QA): they are trimmed to each feature's length
    sequence_outputs: ClassVar[bool] = False

    @staticmethod
    def feature_length(feature: dict[str, Any]) -> int:
        """Tokens in the feature's longest row (what batching by length groups on)."""
        ids = feature["input_ids"]
        return max(map(len, ids)) if ids and isinstance(ids[0], list) else len(ids)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64 for stable probabilities."""
    z = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
