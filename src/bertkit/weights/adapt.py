"""Fitting a checkpoint's state dict to a model: renames, prefixes, aliases, and a strict report.

The only adaptations allowed without an error (each listed in :class:`LoadReport`):

* other libraries' names (``LayerNorm.gamma/beta``, lucid 2.x ``layernorm``, NVIDIA's
  ``dense_act``) and saved buffers (``embeddings.position_ids`` / ``token_type_ids``);
* a backbone-only checkpoint (``embeddings.*``) in a task model (``bert.embeddings.*``),
  and a task checkpoint (``bert.*``) in a bare backbone;
* the task head missing from the checkpoint (freshly initialised), or one the model
  lacks (dropped), and a head whose shape changed because the config did (``num_labels``);
* the pooler absent on either side;
* tied aliases (``cls.predictions.decoder.bias`` is ``cls.predictions.bias``;
  ``decoder.weight`` is the word embeddings when tied). With untied embeddings a
  checkpoint's ``decoder.bias`` wins: HF v5 keeps it apart and its forward uses it.

Anything else missing, unexpected or mis-shaped is a ``ValueError`` that names the keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch import nn

#: Other libraries' parameter names -> HF names (regex, replacement), applied in order.
RENAMES: tuple[tuple[str, str], ...] = (
    (r"LayerNorm\.gamma$", "LayerNorm.weight"),  # 2018-era PyTorch ports
    (r"LayerNorm\.beta$", "LayerNorm.bias"),
    (r"(^|\.)layernorm\.", r"\1LayerNorm."),  # lucid 2.x
    (r"\.dense_act\.", ".dense."),  # NVIDIA DeepLearningExamples (fused bias + activation)
)

#: Buffers older checkpoints saved; bertkit recomputes them.
SAVED_BUFFERS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")

_BACKBONE_ROOTS = ("embeddings.", "encoder.", "pooler.")


@dataclass
class LoadReport:
    """What loading changed beyond copying tensors one to one."""

    loaded: int = 0
    initialized: list[str] = field(default_factory=list)  # model keys the checkpoint lacked (new head/pooler)
    dropped: list[str] = field(default_factory=list)  # checkpoint keys the model has no place for
    resized: list[str] = field(default_factory=list)  # head keys whose shape changed with the config
    renamed: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"loaded {self.loaded} tensors"]
        for title, keys in (("newly initialised (train them)", self.initialized),
                            ("dropped from the checkpoint", self.dropped),
                            ("re-initialised with a new shape", self.resized)):
            if keys:
                lines.append(f"{title}: {', '.join(sorted(keys))}")
        if self.renamed:
            lines.append(f"renamed {len(self.renamed)} legacy keys")
        return "; ".join(lines)


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """``alias key -> source key`` for parameters that share storage with another (saved once)."""
    seen: dict[int, str] = {}
    aliases = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            aliases[name] = seen[id(tensor)]
        else:
            seen[id(tensor)] = name
    return aliases


def adapt_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """Fit ``state`` to ``model``'s keys; return the tensors to load and the report (see module doc)."""
    report = LoadReport()
    expected = model.state_dict()
    aliases = tied_aliases(model)
    prefix = "bert." if hasattr(model, "bert") and model.bert is not model else ""
    state = _rename(state, report)
    state = _fit_prefix(state, prefix)

    # tied aliases: keep the source key; an alias only stands in when its source is absent. Except an
    # untied head's decoder.bias: HF (v5) unties it from predictions.bias too, and its forward adds it.
    untied = not getattr(model.config, "tie_word_embedding", True)
    for alias, source in aliases.items():
        if alias in state:
            tensor = state.pop(alias)
            if untied and alias.endswith("predictions.decoder.bias"):
                state[source] = tensor
            else:
                state.setdefault(source, tensor)

    head = tuple(getattr(model, "head_prefixes", ()))
    pooler = f"{prefix}pooler."
    missing = [k for k in expected if k not in state and k not in aliases]
    unexpected = [k for k in state if k not in expected]
    bad_missing = [k for k in missing if not k.startswith((*head, pooler))]
    # an unexpected backbone key means another architecture; another head's keys are dropped
    backbone = (f"{prefix}embeddings.", f"{prefix}encoder.")
    bad_unexpected = [k for k in unexpected if k.startswith(backbone)]
    if bad_missing or bad_unexpected:
        raise ValueError(_mismatch_message(type(model).__name__, bad_missing, bad_unexpected))
    report.initialized = missing
    report.dropped = unexpected
    for k in unexpected:
        del state[k]

    for k in list(state):
        if state[k].shape != expected[k].shape:
            if not k.startswith(head):
                raise ValueError(f"{k} has shape {tuple(state[k].shape)} in the checkpoint but "
                                 f"{tuple(expected[k].shape)} in {type(model).__name__}; the checkpoint's "
                                 "config does not match this model (vocab_size, hidden_size, ...).")
            report.resized.append(k)
            del state[k]
    report.loaded = len(state)
    return state, report


def _rename(state: dict[str, torch.Tensor], report: LoadReport) -> dict[str, torch.Tensor]:
    out = {}
    for key, tensor in state.items():
        if SAVED_BUFFERS.search(key):
            continue
        new = key
        for pattern, replacement in RENAMES:
            new = re.sub(pattern, replacement, new)
        if new != key:
            report.renamed[key] = new
        out[new] = tensor
    return out


def _fit_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Add ``bert.`` to a bare backbone's keys for a task model; strip it for a bare backbone."""
    has_prefixed = any(k.startswith("bert.") for k in state)
    if prefix and not has_prefixed:
        return {(prefix + k if k.startswith(_BACKBONE_ROOTS) else k): v for k, v in state.items()}
    if not prefix and has_prefixed:
        return {k.removeprefix("bert."): v for k, v in state.items()}
    return state


def _mismatch_message(model_name: str, missing: list[str], unexpected: list[str]) -> str:
    def show(keys: list[str]) -> str:
        return ", ".join(keys[:8]) + (f" ... ({len(keys)} in all)" if len(keys) > 8 else "")

    parts = [f"The checkpoint does not fit {model_name}."]
    if missing:
        parts.append(f"Missing from the checkpoint: {show(missing)}.")
    if unexpected:
        parts.append(f"Not in the model: {show(unexpected)}.")
    parts.append("Is it a BERT checkpoint of the same architecture (layers, decoder / cross-attention)?")
    return " ".join(parts)
