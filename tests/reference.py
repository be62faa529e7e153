"""HF transformers <-> bertkit pairs, shared by tests/test_hf_parity.py and benchmarks/parity_report.py.

Each :class:`Case` names a bertkit task model, the HF ``Bert*`` class it mirrors, the
config it needs, the HF output fields in the order of our ``forward``'s outputs and
the losses to compare. :func:`build` makes the pair (random weights written by one side
and read by the other), :func:`compare` runs both and returns ``(name, ours, reference)``
tensors. HF transformers is a test-only dependency; the library never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

import bertkit
from conftest import TINY, padded_batch, randomize_

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

IMPLEMENTATIONS = ("eager", "sdpa")
BATCH, LENGTH, CHOICES = 3, 11, 2

Labels = dict[str, torch.Tensor]
Inputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Loss:
    """Our loss helper vs the ``loss`` HF returns when given ``hf_labels(labels)``.

    ``hf_class`` (an HF class name) loads the same directory into another HF class,
    for losses the pair's own HF class does not return on their own (pretraining's parts).
    """

    name: str
    ours: Callable[[torch.nn.Module, Labels, Inputs], torch.Tensor]
    hf_labels: Callable[[Labels], Labels] = lambda labels: labels
    hf_class: str | None = None


@dataclass(frozen=True)
class Case:
    id: str
    ours: type  # a bertkit model class
    hf_class: str
    #: BertConfig / BERTConfig keyword arguments beyond TINY (the same names in both).
    config: dict = field(default_factory=dict)
    #: HF output fields, in the order of our forward's outputs.
    hf_outputs: tuple[str, ...] = ("logits",)
    #: per output: True for [B, L, ...] outputs (compared where attention_mask == 1 only).
    token_level: tuple[bool, ...] = (False,)
    labels: Callable[[Inputs, torch.Generator], Labels] | None = None
    losses: tuple[Loss, ...] = ()
    choices: int = 0  # > 0: inputs are [B, choices, L]


# ---------------------------------------------------------------------------- inputs and labels

def make_inputs(choices: int = 0) -> Inputs:
    """padded_batch() as keyword inputs; with ``choices``, ``[B, C, L]`` (padding in some choices)."""
    rows = BATCH * choices if choices else BATCH
    input_ids, attention_mask, token_type_ids = padded_batch(TINY["vocab_size"], rows, LENGTH,
                                                             TINY["type_vocab_size"])
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    if choices:
        inputs = {k: v.view(BATCH, choices, LENGTH) for k, v in inputs.items()}
    return inputs


def token_labels(inputs: Inputs, g: torch.Generator, num_classes: int) -> torch.Tensor:
    """Random class ids ``[B, L]``; -100 at padding, at ~30% of the other positions and at position 0."""
    mask = inputs["attention_mask"]
    labels = torch.randint(0, num_classes, mask.shape, generator=g)
    labels[(mask == 0) | (torch.rand(mask.shape, generator=g) < 0.3)] = -100
    labels[:, 0] = -100
    labels[:, 1] = labels[:, 1].clamp(min=0)  # every row keeps a labelled position
    return labels


def causal_labels(inputs: Inputs, g: torch.Generator) -> torch.Tensor:
    """The input ids themselves (shifted by the models), -100 at padding and at ~30% of positions."""
    labels = inputs["input_ids"].clone()
    labels[(inputs["attention_mask"] == 0) | (torch.rand(labels.shape, generator=g) < 0.3)] = -100
    return labels


def qa_labels(inputs: Inputs, g: torch.Generator) -> Labels:
    """Span positions on real tokens; one start and one end lie outside the sequence (HF clamps them to L and
    ignores them). A span on padding would compare logits that unpadded execution leaves at 0."""
    lengths = inputs["attention_mask"].sum(1)
    start = (torch.rand(BATCH, generator=g) * (lengths // 2)).long()
    end = start + (torch.rand(BATCH, generator=g) * (lengths - start)).long()
    start[1] = LENGTH + 40
    end[2] = LENGTH + 3
    return dict(start_positions=start, end_positions=end)


def pretraining_labels(inputs: Inputs, g: torch.Generator) -> Labels:
    return dict(labels=token_labels(inputs, g, TINY["vocab_size"]),
                next_sentence_label=torch.tensor([0, 1, 1]))


def single_label(inputs: Inputs, g: torch.Generator) -> Labels:
    labels = torch.randint(0, 3, (BATCH,), generator=g)
    labels[-1] = -100  # ignored by both
    return dict(labels=labels)


# ---------------------------------------------------------------------------- the pairs

def _plain_loss(model, labels: Labels, inputs: Inputs) -> torch.Tensor:
    return model.get_loss(labels["labels"], **inputs)


PLAIN = (Loss("loss", _plain_loss),)

CASES: dict[str, Case] = {c.id: c for c in (
    Case("model", bertkit.BERT, "BertModel", hf_outputs=("last_hidden_state", "pooler_output"),
         token_level=(True, False)),
    Case("pretraining", bertkit.BERTForPreTraining, "BertForPreTraining",
         hf_outputs=("prediction_logits", "seq_relationship_logits"), token_level=(True, False),
         labels=pretraining_labels,
         losses=(
             Loss("loss", lambda m, y, x: m.get_loss(y["labels"], y["next_sentence_label"], **x)),
             Loss("mlm_loss", lambda m, y, x: m.get_mlm_loss(y["labels"], **x),
                  lambda y: dict(labels=y["labels"]), hf_class="BertForMaskedLM"),
             Loss("nsp_loss", lambda m, y, x: m.get_nsp_loss(y["next_sentence_label"], **x),
                  lambda y: dict(labels=y["next_sentence_label"]), hf_class="BertForNextSentencePrediction"),
         )),
    Case("masked_lm", bertkit.BERTForMaskedLM, "BertForMaskedLM", token_level=(True,),
         labels=lambda x, g: dict(labels=token_labels(x, g, TINY["vocab_size"])), losses=PLAIN),
    Case("causal_lm", bertkit.BERTForCausalLM, "BertLMHeadModel", config=dict(is_decoder=True),
         token_level=(True,), labels=lambda x, g: dict(labels=causal_labels(x, g)), losses=PLAIN),
    Case("next_sentence", bertkit.BERTForNextSentencePrediction, "BertForNextSentencePrediction",
         labels=lambda x, g: dict(labels=torch.tensor([1, 0, 1])), losses=PLAIN),
    Case("seq_cls_single", bertkit.BERTForSequenceClassification, "BertForSequenceClassification",
         config=dict(num_labels=3), labels=single_label, losses=PLAIN),
    Case("seq_cls_multi", bertkit.BERTForSequenceClassification, "BertForSequenceClassification",
         config=dict(num_labels=3, problem_type="multi_label_classification"),
         labels=lambda x, g: dict(labels=(torch.rand(BATCH, 3, generator=g) > 0.5).float()), losses=PLAIN),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "BertForSequenceClassification",
         config=dict(num_labels=1), labels=lambda x, g: dict(labels=torch.randn(BATCH, generator=g)),
         losses=PLAIN),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "BertForMultipleChoice", choices=CHOICES,
         labels=lambda x, g: dict(labels=torch.randint(0, CHOICES, (BATCH,), generator=g)), losses=PLAIN),
    Case("token_cls", bertkit.BERTForTokenClassification, "BertForTokenClassification",
         config=dict(num_labels=5), token_level=(True,),
         labels=lambda x, g: dict(labels=token_labels(x, g, 5)), losses=PLAIN),
    Case("qa", bertkit.BERTForQuestionAnswering, "BertForQuestionAnswering",
         hf_outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels,
         losses=(Loss("loss", lambda m, y, x: m.get_loss(y["start_positions"], y["end_positions"], **x)),)),
)}


# ---------------------------------------------------------------------------- building and comparing

@dataclass
class Pair:
    case: Case
    ours: torch.nn.Module
    hf: transformers.PreTrainedModel
    directory: Path
    impl: str


def hf_config(case: Case, impl: str, tie: bool = True) -> transformers.BertConfig:
    return transformers.BertConfig(**TINY, **case.config, tie_word_embeddings=tie, attn_implementation=impl)


def build(case: Case, directory: str | Path, impl: str, *, source: str = "hf", tie: bool = True,
          seed: int = 0) -> Pair:
    """Randomise all weights of one side, ``save_pretrained`` it to ``directory``, load it in the other.

    ``source="hf"``: HF writes, bertkit's ``from_pretrained`` reads; ``source="ours"``: the reverse.
    """
    directory = Path(directory)
    hf_cls = getattr(transformers, case.hf_class)
    if source == "hf":
        hf = randomize_(hf_cls(hf_config(case, impl, tie)), seed).eval()
        hf.save_pretrained(directory)
        ours = case.ours.from_pretrained(directory, attn_implementation=impl)
    elif source == "ours":
        config = bertkit.BERTConfig(**TINY, **case.config, tie_word_embedding=tie, attn_implementation=impl)
        ours = randomize_(case.ours(config), seed).eval()
        ours.save_pretrained(directory)
        hf = hf_cls.from_pretrained(directory, attn_implementation=impl).eval()
    else:
        raise ValueError(f"source must be 'hf' or 'ours', got {source!r}")
    if hf.config._attn_implementation != impl:
        raise RuntimeError(f"HF runs {hf.config._attn_implementation!r} attention, not {impl!r}")
    return Pair(case, ours, hf, directory, impl)


def _hf_from(hf_class: str, directory: Path, impl: str) -> transformers.PreTrainedModel:
    return getattr(transformers, hf_class).from_pretrained(directory, attn_implementation=impl).eval()


def _valid(t: torch.Tensor, mask: torch.Tensor, token_level: bool) -> torch.Tensor:
    return t[mask.bool()] if token_level else t


@torch.no_grad()
def compare(pair: Pair, seed: int = 0) -> tuple[list[tuple[str, torch.Tensor, torch.Tensor]], ...]:
    """``(outputs, losses)``: lists of ``(name, ours, hf)``; token-level outputs at valid positions only."""
    case = pair.case
    inputs = make_inputs(case.choices)
    mask = inputs["attention_mask"]
    ours_out = pair.ours(**inputs)
    ours_out = ours_out if isinstance(ours_out, tuple) else (ours_out,)
    hf_out = pair.hf(**inputs)
    outputs = [(name, _valid(a, mask, tok), _valid(getattr(hf_out, name), mask, tok))
               for name, a, tok in zip(case.hf_outputs, ours_out, case.token_level, strict=True)]

    losses = []
    if case.labels is not None:
        labels = case.labels(inputs, torch.Generator().manual_seed(seed))
        for loss in case.losses:
            hf = pair.hf if loss.hf_class is None else _hf_from(loss.hf_class, pair.directory, pair.impl)
            losses.append((loss.name, loss.ours(pair.ours, labels, inputs),
                           hf(**inputs, **loss.hf_labels(labels)).loss))
    return outputs, losses


def max_abs_diff(pairs: list[tuple[str, torch.Tensor, torch.Tensor]]) -> float:
    return max(((a.double() - b.double()).abs().max().item() for _, a, b in pairs), default=float("nan"))
