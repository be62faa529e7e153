"""Jina embeddings v3's task LoRA adapters, and its original checkpoint layout read as HF's port.

jinaai/jina-embeddings-v3 was released as ``XLMRobertaLoRA`` (jinaai/xlm-roberta-flash-implementation): a
``config.json`` of ``model_type`` ``"xlm-roberta"`` with ``position_embedding_type`` ``"rotary"``,
``rotary_emb_base`` and the adapters' keys (``lora_adaptations``: the task names, ``lora_rank``, ``lora_alpha``,
``task_instructions``), and weights under flash-attention's names (``roberta.emb_ln``,
``roberta.encoder.layers.{i}.mixer.Wqkv`` / ``.out_proj``, ``norm1``, ``mlp.fc1`` / ``fc2``, ``norm2``), every
Linear and Embedding of the backbone carrying ``torch.nn.utils.parametrize``'s tensors: the base weight
``X.parametrizations.weight.original`` and one LoRA pair per task stacked on dim 0,
``X.parametrizations.weight.0.lora_A`` / ``.lora_B``. With ``s = lora_alpha / lora_rank`` and task ``t``:

* a Linear (weight ``[out, in]``): ``lora_A [tasks, rank, in]``, ``lora_B [tasks, out, rank]``,
  ``W_t = W + s * lora_B[t] @ lora_A[t]``;
* an Embedding (weight ``[vocab, dim]``): ``lora_A [tasks, vocab, rank]``, ``lora_B [tasks, rank, dim]``,
  ``W_t = W + s * lora_A[t] @ lora_B[t]``.

The original applies a task's pair per row of the batch (``adapter_mask``); asked for no task it runs the base
weights, with every adapter off. bertkit merges the one task asked for into the weights at load (``W_t``), or
takes the base weights without a task. What is left is the layout HF's port (``jina_embeddings_v3``) writes, the
original's names without the parametrizations, which the family's table (:data:`bertkit.weights.tables.JINA_TABLE`)
names as bertkit does; its config.json is read as the port's (``bertkit._config_hf``). HF's port itself carries
no adapters: ``task=`` on its directories is refused (:func:`refuse_task`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

#: the config.json key that marks the original layout (the adapters' task names)
ADAPTERS_KEY = "lora_adaptations"
_ORIGINAL = ".parametrizations.weight.original"
_LORA = ".parametrizations.weight.0.lora_"


@dataclass(frozen=True)
class TaskAdapters:
    """The adapters a checkpoint carries: task names in their order on dim 0, rank, alpha, and each task's
    instruction (the prefix the original puts before a text of that task)."""

    tasks: tuple[str, ...]
    rank: int
    alpha: float
    instructions: Mapping[str, str]

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def index(self, task: str, source: Any) -> int:
        """Position of ``task`` on the adapters' dim 0; a ValueError listing the tasks otherwise."""
        if task not in self.tasks:
            raise ValueError(f"task={task!r} is not one of the task adapters of {source}: "
                             f"{', '.join(self.tasks)}; pass one of them, or no task for the base weights.")
        return self.tasks.index(task)


def is_original(raw: Mapping[str, Any]) -> bool:
    """Whether a config.json dict is the original layout's (it names task adapters)."""
    return ADAPTERS_KEY in raw


def adapters_of(raw: Mapping[str, Any], source: Any) -> TaskAdapters:
    """The :class:`TaskAdapters` of an original config.json dict; a bad key is a ValueError naming it."""
    tasks = raw[ADAPTERS_KEY]
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"{source}: {ADAPTERS_KEY} must be a non-empty list of task names, got {tasks!r}.")
    rank, alpha = raw.get("lora_rank", 4), raw.get("lora_alpha", 1)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"{source}: lora_rank must be a positive integer, got {rank!r}.")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise ValueError(f"{source}: lora_alpha must be a number, got {alpha!r}.")
    instructions = raw.get("task_instructions") or {}
    if not isinstance(instructions, Mapping):
        raise ValueError(f"{source}: task_instructions must be an object keyed by task, got {instructions!r}.")
    return TaskAdapters(tuple(tasks), rank, float(alpha), dict(instructions))


def refuse_task(task: str | None, source: Any) -> None:
    """``task=`` given for a checkpoint without adapters: a ValueError saying so."""
    if task is not None:
        raise ValueError(f"task={task!r} was given, but {source} has no task adapters (its config.json has no "
                         f"{ADAPTERS_KEY}): task= selects one of the LoRA adapters of a Jina embeddings v3 "
                         "checkpoint in its original layout (jinaai/jina-embeddings-v3). Leave task out.")


def merge_adapters(state: dict[str, torch.Tensor], adapters: TaskAdapters, task: str | None,
                   source: Any) -> dict[str, torch.Tensor]:
    """``state`` with each parametrized weight made plain: task ``task``'s pair merged into it (module doc), or
    the base weight for no task; the LoRA tensors are dropped."""
    t = None if task is None else adapters.index(task, source)
    out = {}
    for name, value in state.items():
        if _LORA in name:
            continue
        if not name.endswith(_ORIGINAL):
            out[name] = value
            continue
        module = name.removesuffix(_ORIGINAL)
        out[module + ".weight"] = value if t is None else _merged(state, module, value, adapters, t, source)
    return out


def _merged(state: dict[str, torch.Tensor], module: str, weight: torch.Tensor, adapters: TaskAdapters, t: int,
            source: Any) -> torch.Tensor:
    """``weight`` of ``module`` with pair ``t`` merged (in float32, or the weight's wider dtype)."""
    a, b = state.get(f"{module}{_LORA}A"), state.get(f"{module}{_LORA}B")
    if a is None or b is None:
        raise ValueError(f"{source}: {module} has a parametrized weight but no lora_A / lora_B pair; the "
                         "checkpoint is incomplete.")
    tasks, rank = len(adapters.tasks), adapters.rank
    dtype = torch.promote_types(weight.dtype, torch.float32)
    a, b, w = a.to(dtype), b.to(dtype), weight.to(dtype)
    if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0] == tasks:
        rows, cols = w.shape
        if a.shape[1:] == (rank, cols) and b.shape[1:] == (rows, rank):  # a Linear: W + s B A
            return w + adapters.scaling * (b[t] @ a[t])
        if a.shape[1:] == (rows, rank) and b.shape[1:] == (rank, cols):  # an Embedding: W + s A B
            return w + adapters.scaling * (a[t] @ b[t])
    raise ValueError(f"{source}: the LoRA pair of {module} has shapes lora_A {tuple(a.shape)}, lora_B "
                     f"{tuple(b.shape)}, which fit neither a Linear nor an Embedding of weight {tuple(w.shape)} "
                     f"with {tasks} tasks ({ADAPTERS_KEY}) of rank {rank} (lora_rank).")


def read_original(raw: Mapping[str, Any], state: dict[str, torch.Tensor], task: str | None,
                  source: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of an original-layout checkpoint (``raw``: its config.json dict) with ``task``'s adapters merged,
    or the base weights for ``task=None``: the names HF's port writes (the config dict is read as the port's by
    :meth:`bertkit.BERTConfig.from_hf_dict`)."""
    return merge_adapters(state, adapters_of(raw, source), task, source)
