"""Answers, not tensors: ``bertkit.pipeline(task, model=SRC)``.

==============================  ====================================================================
task                            answers
==============================  ====================================================================
``fill-mask``                   top-k tokens per mask (``targets`` restricts them)
``embeddings``                  one vector per text (sentence-transformers modules, or mean pooling)
``sparse-embeddings``           SPLADE vectors over the vocabulary from a masked-LM head
``feature-extraction``          HF's token vectors ``[1, L, H]`` per text
``text-classification``         labels and scores; pairs, softmax / sigmoid / none, top-k, multi-label
``token-classification``        entities with character offsets (``ner``), five aggregation strategies
``question-answering``          spans of contexts of any length (doc-stride windows), top-k, impossible
``rerank``                      cross-encoder scores of passages for a query, best first
``zero-shot-classification``    candidate labels scored by an NLI model (entailment), multi-label, templates
``multi-vector``                a ColBERT's token vectors per side, MaxSim of (query, text) pairs
==============================  ====================================================================

``SRC`` is anything bertkit loads (a directory, a TF checkpoint, a registered name); the model runs on
bertkit's fast inference path in length-sorted batches of ``batch_size``. Inputs: one item, a list, or any
iterable (answers streamed back in order). Answers are plain Python data, as HF's pipelines return.
"""

from __future__ import annotations

import os
from typing import Any

from bertkit.tasks.table import TABLE, find_task, resolve

#: task name -> (module under bertkit.pipelines, class): the task table's rows that have a pipeline
TASKS = {row.name: tuple(row.pipeline.removeprefix("bertkit.pipelines.").split(":")) for row in TABLE
         if row.pipeline is not None}
#: Other names of the tasks (HF's and bertkit's): alias -> task.
ALIASES = {alias: row.name for row in TABLE if row.pipeline is not None for alias in row.aliases}


def pipeline_class(task: str) -> type:
    """The pipeline class of ``task`` (a name or alias of the task table); ValueError listing the tasks."""
    try:
        return resolve(find_task(task, "pipeline").pipeline)
    except ValueError:
        raise ValueError(f"unknown pipeline task {task!r}; tasks: {', '.join(TASKS)} "
                         f"(aliases: {', '.join(ALIASES)}).") from None


def pipeline(task: str, model: str | os.PathLike | Any = None, *, tokenizer: Any = None, device: Any = None,
             dtype: Any = "auto", batch_size: int = 32, batch_tokens: int | None = None, **defaults: Any):
    """A pipeline for ``task`` on ``model``: a source path or name (loaded with its own tokenizer), or a
    loaded bertkit model together with ``tokenizer``. ``device`` (``"cpu"``, ``"cuda"``, ``"gpu"``),
    ``dtype`` (``"auto"``: bf16 where the hardware computes it natively and the task's measured quality
    allows, else fp32, see :mod:`bertkit.inference.precision`; ``"fp32"`` (exact), ``"bf16"``, ``"fp16"``,
    ``"int8"``, a torch dtype; a loaded model passed in keeps its dtype under ``"auto"``), ``batch_size`` and
    ``batch_tokens`` (at most that many padded tokens per forward pass; None: no limit); any other
    keyword is a default of the task's call parameters (``top_k=3``, ``aggregation_strategy="simple"``)."""
    cls = pipeline_class(task)
    if model is None:
        raise ValueError(f"pipeline({task!r}) needs model=: a checkpoint directory, file or registered name.")
    options = dict(device=device, dtype=dtype, batch_size=batch_size, batch_tokens=batch_tokens, **defaults)
    if isinstance(model, str | os.PathLike):
        if tokenizer is not None:
            raise ValueError("tokenizer= goes with a loaded model; a model source brings its own tokenizer.")
        return cls.from_source(model, **options)
    if tokenizer is None:
        raise ValueError("pipeline(model=<a loaded model>) needs tokenizer= too.")
    if dtype == "auto":  # the caller's own model object is not cast behind their back
        options["dtype"] = None
    return cls(model, tokenizer, **options)


__all__ = ["ALIASES", "TASKS", "pipeline", "pipeline_class"]
