"""Tasks: what people run end to end, built on data + training.

* :mod:`.pretraining`: pretrain (or continue pretraining) a BERT from raw text or prepared data;
* :mod:`.finetuning`: :func:`finetune`; :mod:`.predicting`: :func:`evaluate`, :func:`predict` of a fine-tuned
  model (prepared for inference as the pipelines and the server prepare theirs), for every fine-tuning task:
  :mod:`.classification` (``"classify"``, GLUE), :mod:`.token_classification` (``"tag"``),
  :mod:`.question_answering` (``"qa"``; :mod:`.squad` reads SQuAD files) and :mod:`.multiple_choice`
  (``"choice"``, SWAG); each
  brings its data reading, features, metrics and decoding (:mod:`.base` is the contract,
  :mod:`.metrics` the metrics);
* :mod:`.table`: the task table, every task once with the names each part of bertkit uses;
  :func:`~.sources.inspect_source` says which task (and layout, labels, length, dtype) a source holds.

Submodules are imported on first use, so ``import bertkit.tasks`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"finetune": "finetuning", "evaluate": "predicting", "predict": "predicting", "TASKS": "predicting",
            "FinetuneResult": "finetuning", "pretrain": "pretraining", "pretrain_from_text": "pretraining",
            "TABLE": "table", "TaskRow": "table", "find_task": "table", "inspect_source": "sources",
            "SourceInfo": "sources"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"bertkit.tasks.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'bertkit.tasks' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
