"""pytorch-pretrained-bert 0.6.2 as a numeric reference for bertkit's models.

Shared by ``tests/test_ppb_parity.py`` and ``benchmarks/ppb_parity_report.py``. Each
:class:`Head` pairs a ppb class with the bertkit class that must reproduce it, and knows
how to call both on one padded batch and how ppb's label conventions translate to
bertkit's (ignore index -100 everywhere):

* PreTraining, MaskedLM, NextSentencePrediction: ppb ignores label -1;
* SequenceClassification, MultipleChoice: ppb ignores -100 (CrossEntropyLoss's default);
* TokenClassification: ppb 0.6.2 counts only positions with ``attention_mask == 1``;
* QuestionAnswering: both clamp positions to ``[0, L]`` and ignore ``L``.

Archives are written as ppb 0.6.2 reads them (``config.json`` from
``BertConfig.to_json_string()`` + ``pytorch_model.bin`` from ``torch.save(state_dict)``),
optionally with the 2018-era LayerNorm names ``gamma``/``beta`` that ppb's
``from_pretrained`` renames to ``weight``/``bias`` by substring replacement.
Nothing is downloaded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_pretrained_bert as ppb
import torch
from torch import Tensor, nn

import bertkit
from conftest import TINY, padded_batch, randomize_

NUM_LABELS = 5
NUM_CHOICES = 3
ATTN_IMPLEMENTATIONS = ("eager", "sdpa")
#: The tiny architecture of conftest.TINY in ppb's BertConfig arguments.
PPB_CONFIG = {"vocab_size_or_config_json_file": TINY["vocab_size"],
              **{k: v for k, v in TINY.items() if k != "vocab_size"}}


@dataclass
class Batch:
    """``padded_batch()`` inputs, ``[B, L]`` (or ``[B, C, L]`` for multiple choice)."""

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor

    @property
    def valid(self) -> Tensor:
        return self.attention_mask.bool()


def make_batch(choices: int | None = None) -> Batch:
    if choices is None:
        return Batch(*padded_batch(vocab_size=TINY["vocab_size"], type_vocab=TINY["type_vocab_size"]))
    tensors = padded_batch(vocab_size=TINY["vocab_size"], type_vocab=TINY["type_vocab_size"],
                           batch=2 * choices)
    return Batch(*(t.view(2, choices, -1) for t in tensors))  # [2C, L] -> [2, C, L]


# ---------------------------------------------------------------------------- labels (ppb's conventions)

def _mlm_labels(batch: Batch, g: torch.Generator) -> Tensor:
    """Random token ids at ~40% of the valid positions, -1 (ppb's ignore index) elsewhere."""
    ids = torch.randint(0, TINY["vocab_size"], batch.input_ids.shape, generator=g)
    chosen = (torch.rand(ids.shape, generator=g) < 0.4) & batch.valid
    return ids.masked_fill(~chosen, -1)


def _token_labels(batch: Batch, g: torch.Generator) -> Tensor:
    """Labels at every position, padding included (ppb drops those by the mask), one -100 at a valid one."""
    labels = torch.randint(0, NUM_LABELS, batch.input_ids.shape, generator=g)
    labels[0, 1] = -100
    return labels


def _ppb_ignore_to_ours(labels: Tensor) -> Tensor:
    return labels.masked_fill(labels == -1, -100)


def _identity(labels: Tensor, batch: Batch) -> Tensor:
    return labels


LABEL_MAKERS: dict[str, Callable[[Batch, torch.Generator], Tensor]] = {
    "masked_lm_labels": _mlm_labels,
    "next_sentence_label": lambda batch, g: torch.tensor([1, 0, -1]),  # the third ignored
    "labels": lambda batch, g: torch.tensor([3, -100, 1]),  # sequence classification, the second ignored
    "token_labels": _token_labels,
    "choice_labels": lambda batch, g: torch.tensor([2, 0]),
    # out of range (50, 77 -> clamped to L, ignored) and negative (-2 -> clamped to 0, counted)
    "start_positions": lambda batch, g: torch.tensor([3, 50, -2]),
    "end_positions": lambda batch, g: torch.tensor([9, 4, 77]),
}


# ---------------------------------------------------------------------------- heads

@dataclass(frozen=True)
class Head:
    """One ppb class and its bertkit counterpart.

    ``outputs`` names the tensors both forwards return (in order); ``per_token`` those of
    them indexed ``[B, L, ...]``, compared at valid positions only. ``labels`` maps ppb's
    ``forward`` label argument to (the maker in :data:`LABEL_MAKERS`, the conversion to
    bertkit's convention); bertkit's ``get_loss`` takes the converted labels in that order.
    """

    name: str
    ppb_class: str
    ours: type
    outputs: tuple[str, ...]
    per_token: frozenset[str] = frozenset()
    ppb_args: tuple = ()
    overrides: Mapping = field(default_factory=dict)
    choices: int | None = None
    labels: Mapping[str, tuple[str, Callable[[Tensor, Batch], Tensor]]] = field(default_factory=dict)


HEADS: dict[str, Head] = {h.name: h for h in (
    Head("model", "BertModel", bertkit.BERT,
         outputs=(*(f"layer_{i}" for i in range(TINY["num_hidden_layers"])), "pooled"),
         per_token=frozenset(f"layer_{i}" for i in range(TINY["num_hidden_layers"]))),
    Head("pretraining", "BertForPreTraining", bertkit.BERTForPreTraining,
         outputs=("prediction_scores", "seq_relationship"), per_token=frozenset({"prediction_scores"}),
         labels={"masked_lm_labels": ("masked_lm_labels", lambda t, b: _ppb_ignore_to_ours(t)),
                 "next_sentence_label": ("next_sentence_label", lambda t, b: _ppb_ignore_to_ours(t))}),
    Head("masked_lm", "BertForMaskedLM", bertkit.BERTForMaskedLM,
         outputs=("prediction_scores",), per_token=frozenset({"prediction_scores"}),
         labels={"masked_lm_labels": ("masked_lm_labels", lambda t, b: _ppb_ignore_to_ours(t))}),
    Head("next_sentence", "BertForNextSentencePrediction", bertkit.BERTForNextSentencePrediction,
         outputs=("seq_relationship",),
         labels={"next_sentence_label": ("next_sentence_label", lambda t, b: _ppb_ignore_to_ours(t))}),
    Head("sequence_classification", "BertForSequenceClassification", bertkit.BERTForSequenceClassification,
         outputs=("logits",), ppb_args=(NUM_LABELS,), overrides={"num_labels": NUM_LABELS},
         labels={"labels": ("labels", _identity)}),
    Head("multiple_choice", "BertForMultipleChoice", bertkit.BERTForMultipleChoice,
         outputs=("logits",), ppb_args=(NUM_CHOICES,), choices=NUM_CHOICES,
         labels={"labels": ("choice_labels", _identity)}),
    Head("token_classification", "BertForTokenClassification", bertkit.BERTForTokenClassification,
         outputs=("logits",), per_token=frozenset({"logits"}), ppb_args=(NUM_LABELS,),
         overrides={"num_labels": NUM_LABELS},
         # ppb 0.6.2 counts only attention_mask == 1 positions; bertkit counts labels != -100
         labels={"labels": ("token_labels", lambda t, b: t.masked_fill(~b.valid, -100))}),
    Head("question_answering", "BertForQuestionAnswering", bertkit.BERTForQuestionAnswering,
         outputs=("start_logits", "end_logits"), per_token=frozenset({"start_logits", "end_logits"}),
         labels={"start_positions": ("start_positions", _identity),
                 "end_positions": ("end_positions", _identity)}),
)}

LOSS_HEADS = tuple(name for name, head in HEADS.items() if head.labels)


# ---------------------------------------------------------------------------- building and archives

def build_ppb(head: Head, seed: int = 0) -> nn.Module:
    """The ppb model of ``head`` on the tiny config, every parameter randomised, in eval mode."""
    model = getattr(ppb, head.ppb_class)(ppb.BertConfig(**PPB_CONFIG), *head.ppb_args)
    return randomize_(model, seed).eval()


def legacy_layer_norm_names(state: Mapping[str, Tensor]) -> OrderedDict[str, Tensor]:
    """``LayerNorm.weight/bias`` -> ``LayerNorm.gamma/beta``, as the 2018 checkpoints named them.

    ppb's ``from_pretrained`` undoes this with ``key.replace('gamma', 'weight')`` and
    ``key.replace('beta', 'bias')`` on every key holding those words.
    """
    out = OrderedDict()
    for key, tensor in state.items():
        if key.endswith("LayerNorm.weight"):
            key = key.removesuffix("weight") + "gamma"
        elif key.endswith("LayerNorm.bias"):
            key = key.removesuffix("bias") + "beta"
        out[key] = tensor
    return out


def write_archive(model: nn.Module, directory: str | Path, *, legacy_names: bool = False) -> Path:
    """Save ``model`` as ppb 0.6.2 does: ``config.json`` + ``pytorch_model.bin`` (its state dict)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(model.config.to_json_string(), encoding="utf-8")
    state = model.state_dict()
    torch.save(legacy_layer_norm_names(state) if legacy_names else state, directory / "pytorch_model.bin")
    return directory


def load_ours(head: Head, directory: str | Path, attn_implementation: str) -> nn.Module:
    return head.ours.from_pretrained(directory, attn_implementation=attn_implementation, **head.overrides)


# ---------------------------------------------------------------------------- running both

def ppb_outputs(head: Head, model: nn.Module, batch: Batch) -> tuple[Tensor, ...]:
    with torch.no_grad():
        out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask)
    if head.name == "model":
        layers, pooled = out
        return (*layers, pooled)
    return out if isinstance(out, tuple) else (out,)


def our_outputs(head: Head, model: nn.Module, batch: Batch) -> tuple[Tensor, ...]:
    with torch.no_grad():
        if head.name == "model":
            enc = model.encode(batch.input_ids, attention_mask=batch.attention_mask,
                               token_type_ids=batch.token_type_ids, output_hidden_states=True)
            return (*enc.hidden_states[1:], enc.pooled_output)
        out = model(batch.input_ids, attention_mask=batch.attention_mask, token_type_ids=batch.token_type_ids)
    return out if isinstance(out, tuple) else (out,)


def at_valid(head: Head, name: str, tensor: Tensor, batch: Batch) -> Tensor:
    """``tensor`` at non-padded positions when it is per token, else all of it."""
    return tensor[batch.valid] if name in head.per_token else tensor


def make_labels(head: Head, batch: Batch, seed: int = 2) -> dict[str, Tensor]:
    """ppb's ``forward`` label arguments for ``head``, in ppb's conventions."""
    g = torch.Generator().manual_seed(seed)
    return {arg: LABEL_MAKERS[maker](batch, g) for arg, (maker, _) in head.labels.items()}


def to_our_labels(head: Head, labels: Mapping[str, Tensor], batch: Batch) -> tuple[Tensor, ...]:
    return tuple(convert(labels[arg], batch) for arg, (_, convert) in head.labels.items())


def ppb_loss(head: Head, model: nn.Module, batch: Batch, labels: Mapping[str, Tensor]) -> Tensor:
    """ppb's loss (labels cloned: its QA head clamps them in place)."""
    with torch.no_grad():
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask,
                     **{k: v.clone() for k, v in labels.items()})


def our_loss(head: Head, model: nn.Module, batch: Batch, our_labels: tuple[Tensor, ...], **kwargs) -> Tensor:
    with torch.no_grad():
        return model.get_loss(*our_labels, input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                              token_type_ids=batch.token_type_ids, **kwargs)


@dataclass
class Differences:
    """Max abs differences bertkit vs ppb for one head and attention implementation."""

    outputs: dict[str, float]
    loss: float | None


def max_differences(head: Head, directory: str | Path, attn_implementation: str, *,
                    legacy_names: bool = False, seed: int = 0) -> Differences:
    """Build and randomise the ppb model, archive it, load it in bertkit and compare everything."""
    reference = build_ppb(head, seed)
    ours = load_ours(head, write_archive(reference, directory, legacy_names=legacy_names), attn_implementation)
    batch = make_batch(head.choices)
    outputs = {name: (at_valid(head, name, a, batch) - at_valid(head, name, b, batch)).abs().max().item()
               for name, a, b in zip(head.outputs, our_outputs(head, ours, batch),
                                     ppb_outputs(head, reference, batch), strict=True)}
    loss = None
    if head.labels:
        labels = make_labels(head, batch)
        loss = (our_loss(head, ours, batch, to_our_labels(head, labels, batch))
                - ppb_loss(head, reference, batch, labels)).abs().item()
    return Differences(outputs, loss)
