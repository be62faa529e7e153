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
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling import (
    BERT,
    BERTForCausalLM,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForPreTraining,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from bertkit.modeling.base import BERTPreTrainedModel

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: the inputs of a model without token types to tell apart
UNTYPED_INPUT_NAMES = INPUT_NAMES[:2]
TOKENS = ("batch", "sequence")
CHOICES = ("batch", "choices", "sequence")
SENTENCE = "sentence-embedding"


@dataclass(frozen=True)
class Signature:
    """The axes of every input (all alike) and, per output in ``forward``'s order, its axes
    (a name for a dynamic axis, None for a fixed one)."""

    inputs: tuple[str, ...]
    outputs: dict[str, tuple[str | None, ...]]


_SEQUENCE_SCORES = Signature(TOKENS, {"logits": ("batch", "sequence", None)})
_SENTENCE_SCORES = Signature(TOKENS, {"logits": ("batch", None)})

#: task name (``--task``) -> (model class, signature); None stands for SentenceTransformer, imported when asked for
SIGNATURES: dict[str, tuple[type[nn.Module] | None, Signature]] = {
    "backbone": (BERT, Signature(TOKENS, {"last_hidden_state": ("batch", "sequence", None),
                                          "pooler_output": ("batch", None)})),
    "sequence-classification": (BERTForSequenceClassification, _SENTENCE_SCORES),
    "token-classification": (BERTForTokenClassification, _SEQUENCE_SCORES),
    "question-answering": (BERTForQuestionAnswering, Signature(TOKENS, {"start_logits": ("batch", "sequence"),
                                                                        "end_logits": ("batch", "sequence")})),
    "masked-lm": (BERTForMaskedLM, _SEQUENCE_SCORES),
    "causal-lm": (BERTForCausalLM, _SEQUENCE_SCORES),
    "pretraining": (BERTForPreTraining, Signature(TOKENS, {"prediction_logits": ("batch", "sequence", None),
                                                           "seq_relationship_logits": ("batch", None)})),
    "next-sentence-prediction": (BERTForNextSentencePrediction, _SENTENCE_SCORES),
    "multiple-choice": (BERTForMultipleChoice, Signature(CHOICES, {"logits": ("batch", "choices")})),
    SENTENCE: (None, Signature(TOKENS, {"sentence_embedding": ("batch", None)})),
}
#: other names ``--task`` accepts: ``bertkit finetune``'s tasks (as its task.json records them)
ALIASES = {"classify": "sequence-classification", "tag": "token-classification", "qa": "question-answering",
           "choice": "multiple-choice"}


def task_names() -> list[str]:
    return [*SIGNATURES, *ALIASES]


def model_class(task: str) -> type[nn.Module]:
    """The class exported for ``task`` (a name of :data:`SIGNATURES`, an alias, or an HF architecture name
    such as ``BertForSequenceClassification`` or another family's, ``RobertaForSequenceClassification``); ValueError
    for anything else."""
    from bertkit.config import bert_architecture_name
    from bertkit.weights.convert import ARCHITECTURES

    if bert_architecture_name(task) in ARCHITECTURES:  # any family's HF name: XLMRobertaForSequenceClassification
        return ARCHITECTURES[bert_architecture_name(task)]
    name = ALIASES.get(task, task)
    if name not in SIGNATURES:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(task_names())}, or an HF architecture "
                         f"({', '.join(sorted(ARCHITECTURES))}).")
    if name == SENTENCE:
        from bertkit.sentence import SentenceTransformer

        return SentenceTransformer
    return SIGNATURES[name][0]


def signature_of(model: nn.Module) -> Signature:
    """The signature of ``model``'s class, or of the nearest bertkit class it derives from (a backbone built
    without pooler has no ``pooler_output``); ValueError for other modules."""
    known = {model_class(name): signature for name, (_, signature) in SIGNATURES.items()}
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
    """The model class ``source`` holds: a sentence-transformers directory (``modules.json``) is a
    SentenceTransformer; a ``bertkit finetune`` directory's ``task.json`` names its task; otherwise the
    ``architectures`` of its ``config.json``, and for checkpoints that record none (Google's TF, ...) the heads
    present, as ``bertkit convert`` decides."""
    from bertkit.sentence import SentenceTransformer, is_sentence_transformer
    from bertkit.weights.download import resolve_source

    path = Path(resolve_source(source))
    if is_sentence_transformer(path):
        return SentenceTransformer
    cls = _recorded_class(path)
    if cls is None:  # no architecture recorded: the heads present decide
        from bertkit.weights.convert import model_for_checkpoint
        from bertkit.weights.formats import read_checkpoint

        cls = type(model_for_checkpoint(read_checkpoint(path), warn=False))
    return cls


def require_scoring_head(model: str | os.PathLike, flag: str) -> None:
    """Refuse (``ValueError`` naming ``flag``) a ``model`` that holds no trained scoring head: a cross-encoder
    directory (:func:`~bertkit.sentence.cross_encoder.is_cross_encoder`) or any checkpoint of a sequence classifier
    passes; an embedding model or a base checkpoint would score with a classifier initialised at random, whose
    scores mean nothing."""
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.cross_encoder import is_cross_encoder

    if is_cross_encoder(model):
        return
    cls = source_class(model)
    if getattr(cls, "hf_architecture", "") == "BertForSequenceClassification":
        return
    what = "an embedding model (a bi-encoder)" if cls is SentenceTransformer else f"a {cls.__name__}"
    raise ValueError(f"{flag}: {os.fspath(model)} holds {what} and no trained scoring head: its scores would come "
                     "from a classifier initialised at random. Give a cross-encoder (a reranker: what `bertkit "
                     "finetune rerank` writes, or a sentence-transformers CrossEncoder directory) or a sequence "
                     "classifier (what `bertkit finetune classify` writes).")


def _recorded_class(path: Path) -> type[nn.Module] | None:
    """The class a checkpoint's folder names: its task.json's task, else its config's architecture (None if
    neither)."""
    from bertkit.io import read_json_object
    from bertkit.tasks.finetuning import TASK_FILE, read_task_file

    folder = path if path.is_dir() else path.parent
    if (folder / TASK_FILE).is_file():
        return model_class(read_task_file(folder / TASK_FILE)["task"])
    for name in ("config.json", "bert_config.json"):
        if (folder / name).is_file():
            architecture = (read_json_object(folder / name, "a model config").get("architectures") or [None])[0]
            if architecture is None:
                return None
            try:
                return model_class(architecture)
            except ValueError:
                raise ValueError(f"{folder / name} names the architecture {architecture!r}, which bertkit does "
                                 f"not export; pass --task ({', '.join(task_names())}).") from None
    return None


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
