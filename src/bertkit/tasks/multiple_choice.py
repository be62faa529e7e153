"""Multiple choice: pick the right ending (SWAG) or answer among any number of choices.

Two layouts, by what the file holds, whatever its name (:mod:`bertkit.tasks.readers`):

* SWAG's CSV: ``sent1`` (the context), ``sent2`` (the start of every ending) and ``ending0`` ...
  ``endingN``, ``label`` (the right ending's index); each choice is read as the pair
  ``(sent1, sent2 + " " + ending_i)``, as the SWAG baselines do;
* JSON Lines: ``{"context": ..., "choices": [...], "label": index}`` (``question`` is accepted
  for ``context``, ``answer`` / ``answerKey`` for ``label``; a label may also be the right
  choice's text).

Examples may have any number of choices, at least 2, and need not agree (2 for COPA, 4 for SWAG,
3 to 5 for ARC): a batch is ``[B, C, L]`` with ``C`` its largest count, the others padded with
absent choices (rows without tokens), which the model scores at the lowest value and so never
picks (:class:`~bertkit.modeling.heads.BERTForMultipleChoice`). The metric is accuracy;
predictions give the chosen ``label`` (its index) and ``choice`` (its text) with the
probabilities of the example's own choices.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.modeling.heads import BERTForMultipleChoice
from bertkit.tasks import metrics
from bertkit.tasks.base import Task, softmax
from bertkit.tasks.readers import Row, read_rows, table_format
from bertkit.tokenization.cut import cut_pairs

_ENDING = re.compile(r"^ending(\d+)$")


@dataclass
class ChoiceExample:
    """A context, its choices (each paired with the context), the right choice's index (or None), its line."""

    context: str
    choices: list[str]
    label: int | None
    line: int


class MultipleChoice(Task):
    """``bertkit finetune choice``; see the module docstring."""

    name = "choice"
    model_class = BERTForMultipleChoice
    label_hint = ("column 'label': the right choice's index, or its text; JSON Lines may name it \"answer\" or "
                  "\"answerKey\"")

    def __init__(self, *, encoding: str = "utf-8"):
        super().__init__()
        self.encoding = encoding

    def options(self) -> dict[str, Any]:
        return {"encoding": self.encoding}

    def read(self, path: str | os.PathLike) -> list[ChoiceExample]:
        rows = read_rows(path, encoding=self.encoding)
        if not rows:
            raise ValueError(f"{path} holds no examples.")
        read = _json_example if table_format(path, self.encoding) == "jsonl" else _swag_example
        examples = [read(path, row) for row in rows]
        for example in examples:
            count = len(example.choices)
            if count < 2:
                raise ValueError(f"{path}, line {example.line}: {count} choice(s); an example needs at least 2.")
            if example.label is not None and not 0 <= example.label < count:
                raise ValueError(f"{path}, line {example.line}: label {example.label} is not a choice index in "
                                 f"[0, {count}).")
        return examples

    def featurize(self, examples: Sequence[ChoiceExample], tokenizer: Any, max_seq_length: int) -> list[dict]:
        self.prepare(tokenizer)
        contexts = [e.context for e in examples for _ in e.choices]
        endings = [choice for e in examples for choice in e.choices]
        # cut to what truncation keeps: the same tokens, at a cost bounded by max_seq_length
        contexts, endings = cut_pairs(tokenizer, contexts, endings, max_seq_length, tokenizer.truncation_side)
        encoded = tokenizer(contexts, endings, truncation=True, max_length=max_seq_length, return_token_type_ids=True)
        features, start = [], 0
        for i, example in enumerate(examples):
            rows = range(start, start + len(example.choices))
            start = rows.stop
            feature = {"example": i, "input_ids": [encoded["input_ids"][r] for r in rows],
                       "token_type_ids": [encoded["token_type_ids"][r] for r in rows]}
            if example.label is not None:
                feature["labels"] = example.label
            features.append(feature)
        return features

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """``[B, C, L]`` tensors, ``C`` the most choices of these features; an example with fewer gets absent
        choices (rows without tokens: an all-zero attention mask)."""
        most = max(len(f["input_ids"]) for f in features)
        features = [f if len(f["input_ids"]) == most else
                    {**f, "input_ids": f["input_ids"] + [[]] * (most - len(f["input_ids"])),
                     "token_type_ids": f["token_type_ids"] + [[]] * (most - len(f["token_type_ids"]))}
                    for f in features]
        return super().collate(features)

    def decode(self, examples, features, outputs) -> list[dict[str, Any]]:
        predictions = []
        for example, logits in zip(examples, outputs):
            probabilities = softmax(np.asarray(logits)[:len(example.choices)])  # a padded batch's absent ones out
            best = int(probabilities.argmax())
            predictions.append({"label": best, "choice": example.choices[best], "score": float(probabilities[best]),
                                "probabilities": [float(p) for p in probabilities]})
        return predictions

    def score(self, examples, predictions) -> dict[str, float]:
        return {"accuracy": metrics.accuracy([p["label"] for p in predictions], [e.label for e in examples])}


def _swag_example(path, row: Row) -> ChoiceExample:
    values = row.values
    endings = sorted((int(m.group(1)), key) for key in values if (m := _ENDING.match(key)))
    missing = [key for key in ("sent1", "sent2") if key not in values]
    if missing or not endings:
        raise ValueError(f"{path}: a SWAG-style CSV needs the columns sent1, sent2, ending0, ending1, ... (and label); "
                         f"it has {sorted(values)}. For other layouts use JSON Lines with context, choices, label.")
    choices = [f"{values['sent2']} {values[key]}".strip() for _, key in endings]
    return ChoiceExample(values["sent1"], choices, _index(path, row, values.get("label"), choices), row.line)


def _json_example(path, row: Row) -> ChoiceExample:
    values = row.values
    context = values.get("context", values.get("question"))
    choices = values.get("choices", values.get("endings"))
    if not isinstance(context, str) or not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"{path}, line {row.line}: expected {{\"context\": text, \"choices\": [texts], \"label\": "
                         f"index}}, got keys {sorted(values)}.")
    label = values.get("label", values.get("answer", values.get("answerKey")))
    return ChoiceExample(context, list(choices), _index(path, row, label, choices), row.line)


def _index(path, row: Row, label: Any, choices: list[str]) -> int | None:
    """The label as a choice index: an integer (or its text), or the text of one of the choices."""
    if label is None or label == "":
        return None
    if isinstance(label, int) and not isinstance(label, bool):
        return label
    if isinstance(label, str):
        if label.strip().lstrip("-").isdigit():
            return int(label)
        if label in choices:
            return choices.index(label)
    raise ValueError(f"{path}, line {row.line}: label {label!r} is neither a choice index nor one of the choices.")
