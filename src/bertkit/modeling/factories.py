"""``bert_for_<task>_<size>(**overrides)`` factories, generated from two tables.

``TASKS`` maps a task name to its model class (and the config fields the task needs);
:data:`bertkit.presets.SIZES` gives the sizes. Every combination becomes a function in
this module, e.g. ``bert_for_sequence_classification_base(num_labels=3)``.

These names are the factories' own (the functions' public names). What a task is everywhere else (its aliases,
pipeline, export signature, routes) is :data:`bertkit.tasks.table.TABLE`, above this layer; its rows name the
classes here, and a test checks both agree.
"""

from __future__ import annotations

from typing import Any

from bertkit.modeling.backbone import BERT
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.modeling.heads import (
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from bertkit.modeling.lm_heads import BERTForCausalLM, BERTForMaskedLM, BERTForPreTraining
from bertkit.presets import SIZES, preset_config

#: task name -> (model class, config fields the task requires)
TASKS: dict[str, tuple[type[BERTPreTrainedModel], dict[str, Any]]] = {
    "pre_training": (BERTForPreTraining, {}),
    "masked_lm": (BERTForMaskedLM, {}),
    "causal_lm": (BERTForCausalLM, {"is_decoder": True}),
    "next_sentence_prediction": (BERTForNextSentencePrediction, {}),
    "sequence_classification": (BERTForSequenceClassification, {}),
    "multiple_choice": (BERTForMultipleChoice, {}),
    "token_classification": (BERTForTokenClassification, {}),
    "question_answering": (BERTForQuestionAnswering, {}),
}


def build(task: str, size: str, **overrides: Any) -> BERTPreTrainedModel:
    """A randomly initialised ``task`` model of preset ``size``; ``overrides`` are BERTConfig fields."""
    if task == "backbone":
        return BERT(preset_config(size, **overrides))
    try:
        model_cls, required = TASKS[task]
    except KeyError:
        raise ValueError(f"Unknown task {task!r}; choose one of {['backbone', *TASKS]}.") from None
    return model_cls(preset_config(size, **{**required, **overrides}))


def _make_factory(task: str, size: str):
    model_cls = TASKS[task][0]
    layers, hidden, heads = SIZES[size]

    def factory(**overrides: Any) -> BERTPreTrainedModel:
        return build(task, size, **overrides)

    factory.__name__ = factory.__qualname__ = f"bert_for_{task}_{size}"
    factory.__doc__ = (
        f"{model_cls.__name__} of the {size} size (L={layers}, H={hidden}, A={heads}, "
        f"intermediate={4 * hidden}), randomly initialised.\n\n"
        "Keyword arguments override BERTConfig fields, e.g. vocab_size=8000 or num_labels=3."
    )
    return factory


FACTORIES = {f"bert_for_{task}_{size}": _make_factory(task, size) for task in TASKS for size in SIZES}
globals().update(FACTORIES)
__all__ = ["FACTORIES", "TASKS", "build", *FACTORIES]
