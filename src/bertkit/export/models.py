"""What an export holds: the model chosen for a source, its signature (named inputs and outputs with their
axes), the module the exporter traces, and the sample batches that verify the result.

Every exported model takes ``input_ids`` and ``attention_mask`` (int64, ``[batch, sequence]``; ``[batch, choices,
sequence]`` for multiple choice), and ``token_type_ids`` too where the model tells token types apart (BERT,
ELECTRA: two or more types; :func:`input_names`): the inputs its family's tokenizer returns. It returns the tensors
its ``forward`` returns, named as HF names them:

=============================  ===============================================================
model                          outputs
=============================  ===============================================================
BERT (backbone)                ``last_hidden_state [B, L, H]``, ``pooler_output [B, H]`` (with a pooler)
BERTForSequenceClassification  ``logits [B, num_labels]``
BERTForTokenClassification     ``logits [B, L, num_labels]``
BERTForQuestionAnswering       ``start_logits [B, L]``, ``end_logits [B, L]``
BERTForMaskedLM                ``logits [B, L, V]``
BERTForCausalLM                ``logits [B, L, V]`` (no cache: the whole sequence at once)
BERTForPreTraining             ``prediction_logits [B, L, V]``, ``seq_relationship_logits [B, 2]``
BERTForNextSentencePrediction  ``logits [B, 2]``
BERTForMultipleChoice          ``logits [B, C]`` from inputs ``[B, C, L]``
SentenceTransformer            ``sentence_embedding [B, D]`` (pooling, Dense and normalisation inside)
=============================  ===============================================================

Each signature is its task's row in the task table (:data:`bertkit.tasks.table.TABLE`, ``export``); ``--task``
takes the names and aliases of those rows, or an HF architecture name.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config import BERTConfig, bert_architecture_name
from bertkit.modeling import BERT
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.tasks.table import CHOICES, TABLE, TOKENS, Signature, find_task, resolve  # noqa: F401 (CHOICES, TOKENS)

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: the inputs of a model without token types to tell apart
UNTYPED_INPUT_NAMES = INPUT_NAMES[:2]


def task_names() -> list[str]:
    """The names ``--task`` takes: every name and alias of the task table's rows with an export signature."""
    return [name for row in TABLE if row.export is not None for name in row.names]


def model_class(task: str) -> type[nn.Module]:
    """The class exported for ``task`` (a name or alias of the task table's rows with an export signature, or an
    HF architecture name such as ``BertForSequenceClassification`` or another family's,
    ``RobertaForSequenceClassification``); ValueError for anything else."""
    from bertkit.weights.convert import ARCHITECTURES

    if bert_architecture_name(task) in ARCHITECTURES:  # any family's HF name: XLMRobertaForSequenceClassification
        return ARCHITECTURES[bert_architecture_name(task)]
    try:
        return resolve(find_task(task, "export").model)
    except ValueError:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(task_names())}, or an HF architecture "
                         f"({', '.join(sorted(ARCHITECTURES))}).") from None


def signature_of(model: nn.Module) -> Signature:
    """The signature of ``model``'s class, or of the nearest bertkit class it derives from (a backbone built
    without pooler has no ``pooler_output``); ValueError for other modules."""
    known = {resolve(row.model): row.export for row in TABLE if row.export is not None}
    signature = next((known[cls] for cls in type(model).__mro__ if cls in known), None)
    if signature is None:
        raise ValueError(f"bertkit exports BERT, its task models and SentenceTransformer; got "
                         f"{type(model).__name__}.")
    if isinstance(model, BERT) and model.pooler is None:
        return Signature(signature.inputs, {"last_hidden_state": signature.outputs["last_hidden_state"]})
    return signature


def input_names(config: BERTConfig) -> tuple[str, ...]:
    """The graph's inputs for a model of ``config``: :data:`INPUT_NAMES`, without ``token_type_ids`` where the
    family has no token-type embeddings (DistilBERT, MPNet, ModernBERT) or a single type (RoBERTa, XLM-R:
    every id is 0), whose tokenizers return none (HF's exports of these families take none either)."""
    return INPUT_NAMES if config.family_spec.token_types and config.type_vocab_size > 1 else UNTYPED_INPUT_NAMES


def described_by(model: nn.Module) -> BERTPreTrainedModel:
    """The bertkit model whose config (and HF architecture) describes ``model``: itself, or a
    SentenceTransformer's backbone."""
    return model if isinstance(model, BERTPreTrainedModel) else model.bert


def load_for_export(source: str | os.PathLike, task: str | None = None) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` for ``source`` (anything bertkit loads), in eval mode: ``task``'s class when
    given, else :func:`source_class`'s."""
    from bertkit.sentence import SentenceTransformer
    from bertkit.tasks.sources import load_model_and_tokenizer

    cls = model_class(task) if task is not None else source_class(source)
    if cls is SentenceTransformer:
        from bertkit.weights.download import resolve_source

        model = SentenceTransformer.from_pretrained(Path(resolve_source(source)), optimize=False)
        return model.eval(), model.tokenizer
    return load_model_and_tokenizer(source, cls)


def source_class(source: str | os.PathLike) -> type[nn.Module]:
    """The model class ``source`` holds (:func:`bertkit.tasks.sources.inspect_source`'s ``model``): a
    sentence-transformers directory is a SentenceTransformer; a ``bertkit finetune`` directory's ``task.json``
    names its task; otherwise the ``architectures`` of its ``config.json``, and for checkpoints that record none
    (Google's TF, ...) the heads present, as ``bertkit convert`` decides."""
    from bertkit.tasks.sources import inspect_source

    info = inspect_source(source)
    if info.model is None:
        raise ValueError(f"{info.config_path} names the architecture {info.architecture!r}, which bertkit does "
                         f"not export; pass --task ({', '.join(task_names())}).")
    return resolve(info.model)


class ExportedModule(nn.Module):
    """``model`` as the exporter sees it: the inputs by position (``token_type_ids`` left out where the graph has
    none), a flat tuple of tensors out (a backbone without pooler returns one)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids, attention_mask, token_type_ids)
        return tuple(t for t in (out if isinstance(out, tuple) else (out,)) if t is not None)


def sample_batch(config: BERTConfig, signature: Signature, *, rows: int, choices: int, length: int,
                 seed: int = 0) -> dict[str, torch.Tensor]:
    """Random int64 inputs ``[rows, length]`` (``[rows, choices, length]`` for multiple choice), those of
    :func:`input_names`.

    Sequence lengths spread evenly from ``length`` down to a third of it, so every sequence but the first is
    padded (``pad_token_id``, mask 0) and the masking is exercised; token type 1 from the middle of each
    sequence where the model has two types.
    """
    g = torch.Generator().manual_seed(seed)
    lead = (rows, choices) if "choices" in signature.inputs else (rows,)
    ids = torch.randint(0, config.vocab_size, (*lead, length), generator=g)
    lengths = torch.linspace(length, max(1, length // 3), math.prod(lead)).round().long().view(*lead, 1)
    positions = torch.arange(length)
    mask = positions < lengths  # [*lead, L]
    types = (positions >= (lengths + 1) // 2) & mask if config.type_vocab_size > 1 else torch.zeros_like(mask)
    batch = {"input_ids": ids.masked_fill(~mask, config.pad_token_id), "attention_mask": mask.long(),
             "token_type_ids": types.long()}
    return {name: batch[name] for name in input_names(config)}
