"""``zero-shot-classification``: candidate labels scored by an NLI model, as HF's pipeline scores them.

Each text is the premise of one pair per candidate label, whose hypothesis is ``hypothesis_template`` with the
label in its ``{}`` ("This example is {}."); the premise is cut to fit (``only_first``), the hypothesis never.
The model's logit of its *entailment* class (the label whose name starts with "entail", any case, or the one
``entailment_label`` names) scores the label:

* one label of many (``multi_label=False``): the softmax of the entailment logits across the labels (they sum
  to one);
* ``multi_label=True``, or a single candidate label: each label on its own, the softmax of its
  [contradiction, entailment] logits. The contradiction class is the label whose name starts with
  "contradict"; a model without one uses HF's choice, id 0 (the last id when entailment is id 0).

Answer per text: ``{"sequence", "labels", "scores"}``, labels best first. ``candidate_labels``: a list, or one
string of comma-separated labels. All pairs of a call run in length-sorted batches.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from bertkit.pipelines.aggregation import softmax
from bertkit.pipelines.classification import _SequenceScores

TEMPLATE = "This example is {}."


def parse_labels(labels: Any) -> list[str]:
    """``candidate_labels`` as a list: a string splits at its commas (blank parts dropped); ValueError for no
    label or anything but strings."""
    if isinstance(labels, str):
        labels = [part.strip() for part in labels.split(",") if part.strip()]
    if not isinstance(labels, list | tuple) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"candidate_labels must be a list of strings or one comma-separated string, got "
                         f"{labels!r:.80}.")
    if not labels:
        raise ValueError("candidate_labels is empty: give at least one label (a list, or \"a, b, c\").")
    return list(labels)


def check_template(template: Any) -> str:
    """``hypothesis_template`` if it has a place (``{}``) for the label; ValueError otherwise."""
    probe = "\x00label\x00"
    try:
        ok = isinstance(template, str) and probe in template.format(probe)
    except (IndexError, KeyError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"hypothesis_template {template!r} has no {{}} where the label goes; write one such as "
                         f"{TEMPLATE!r}.")
    return template


def nli_ids(id2label: dict[int, str], entailment_label: str | None = None) -> tuple[int, int]:
    """``(entailment id, contradiction id)`` of an NLI model's labels (see the module doc); ValueError naming the
    labels and the fix when none is the entailment class."""
    names = ", ".join(f"{i}: {name!r}" for i, name in sorted(id2label.items()))
    if entailment_label is not None:
        matches = [i for i, name in sorted(id2label.items()) if name == entailment_label]
        if not matches:
            raise ValueError(f"entailment_label {entailment_label!r} is none of the model's labels ({names}).")
    else:
        matches = [i for i, name in sorted(id2label.items()) if name.lower().startswith("entail")]
        if not matches:
            raise ValueError(f"zero-shot classification needs an NLI model whose labels name the entailment class; "
                             f"this model's labels are {{{names}}}: set id2label in its config.json, or name the "
                             f"class with entailment_label= (bertkit predict: --entailment-label).")
    entailment = matches[0]
    named = [i for i, name in sorted(id2label.items()) if name.lower().startswith("contradict") and i != entailment]
    contradiction = named[0] if named else (max(id2label) if entailment == 0 else 0)
    return entailment, contradiction


class ZeroShotClassificationPipeline(_SequenceScores):
    """An NLI sequence classifier scoring candidate labels (the module doc); made with
    ``bertkit.pipeline("zero-shot-classification", model=DIR)``, which fails at once, naming the labels, for a model
    without an entailment class."""

    task = "zero-shot-classification"
    defaults: ClassVar[dict[str, Any]] = {"candidate_labels": None, "hypothesis_template": TEMPLATE,
                                          "multi_label": False, "entailment_label": None}

    def __call__(self, inputs: Any, candidate_labels: Any = None, **params: Any) -> Any:
        """``pipe(texts, candidate_labels, ...)``, as HF's pipeline takes the labels (second, or by name)."""
        if candidate_labels is not None:
            params["candidate_labels"] = candidate_labels
        return super().__call__(inputs, **params)

    def stream(self, inputs: Any, candidate_labels: Any = None, **params: Any) -> Any:
        """:meth:`Pipeline.stream` taking the labels as ``__call__`` does."""
        if candidate_labels is not None:
            params["candidate_labels"] = candidate_labels
        return super().stream(inputs, **params)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        check_template(params["hypothesis_template"])
        if not isinstance(params["multi_label"], bool):
            raise ValueError(f"multi_label must be true or false, got {params['multi_label']!r}.")
        nli_ids(self.labels(), params["entailment_label"])  # a model without an entailment class fails here
        if params["candidate_labels"] is not None:
            params["candidate_labels"] = parse_labels(params["candidate_labels"])
        return params

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(item, str):
            raise ValueError(f"zero-shot-classification takes texts, got {type(item).__name__}.")
        if params["candidate_labels"] is None:
            raise ValueError("zero-shot-classification needs candidate_labels: pipe(text, candidate_labels=[...]).")
        return [self.pair(item, label, params) for label in params["candidate_labels"]]

    def pair(self, text: str, label: str, params: dict[str, Any]) -> dict[str, Any]:
        """The feature of (``text``, the hypothesis of ``label``): the text cut to fit, the hypothesis whole."""
        hypothesis = params["hypothesis_template"].format(label)
        try:
            return self.encode(text, hypothesis, params, truncation="only_first")
        except ValueError as error:
            if "cannot truncate" not in str(error):
                raise
            raise ValueError(f"the hypothesis of candidate label {label!r:.60} ({hypothesis!r:.80}) leaves no room "
                             f"for the text within the model's {self.max_length} tokens; use a shorter label or "
                             "hypothesis_template.") from None

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> dict:
        logits = np.stack(outputs)  # [labels, classes]
        entailment, contradiction = nli_ids(self.labels(), params["entailment_label"])
        if params["multi_label"] or len(outputs) == 1:
            scores = softmax(logits[:, [contradiction, entailment]])[:, 1]
        else:
            scores = softmax(logits[:, entailment])
        order = np.argsort(scores)[::-1]  # HF's order, ties included (the later label first)
        labels = params["candidate_labels"]
        return {"sequence": item, "labels": [labels[i] for i in order], "scores": [float(scores[i]) for i in order]}
