"""Fitting a checkpoint's state dict to a model: renames, prefixes, aliases, casts, and a strict report.

The only adaptations allowed without an error (each listed in :class:`LoadReport`):

* other libraries' names (``LayerNorm.gamma/beta``, lucid 2.x ``layernorm``, NVIDIA's
  ``dense_act``) and saved buffers (``embeddings.position_ids`` / ``token_type_ids``,
  integer tensors that bertkit recomputes);
* a backbone-only checkpoint (``embeddings.*``) in a task model (``bert.embeddings.*``),
  and a task checkpoint (``bert.*``) in a bare backbone;
* the task head missing from the checkpoint (freshly initialised), a head the model lacks
  dropped when it is one of BERT's known heads (:data:`KNOWN_HEADS`: the MLM and NSP
  pretraining heads, ``classifier``, ``qa_outputs``), and a head whose shape changed because
  the config did (``num_labels``);
* the pooler absent on either side;
* a family's heads that HF names alike and bertkit apart (ModernBERT's ``head``, read as the MLM head's
  transform, fills a classifier's ``head``: :data:`~bertkit.weights.tables.HF_FAMILY_SHARED_HEADS`);
* tied aliases (``cls.predictions.decoder.bias`` is ``cls.predictions.bias``;
  ``decoder.weight`` is the word embeddings when tied). With untied embeddings a
  checkpoint's ``decoder.bias`` wins: HF v5 keeps it apart and its forward uses it;
* a floating-point tensor stored in another float dtype (fp16, bf16, fp64) than the
  model's parameter: cast to the parameter's dtype.

With ``strict=False`` unexpected keys outside the backbone that match no known head (e.g. a
head saved as ``score.*``) are dropped too. Whatever ``strict`` says, a missing, unexpected or
mis-shaped backbone tensor, and an integer tensor for a float parameter (or the reverse), are a
``ValueError`` that names the keys.

:func:`load_into` applies the result to a model and says what it adapted: ``model.load_report``
holds the full report, and every adaptation that changes what the model computes (new,
dropped or re-initialised tensors, dtype casts) is also a :class:`LoadWarning`; renames of
legacy names are not (they hold the same tensors). The whole report, renames included, is
logged at DEBUG on the ``"bertkit.weights"`` logger. Silence the warnings with ``warn=False``, or
with ``warnings.filterwarnings("ignore", category=bertkit.weights.adapt.LoadWarning)``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from bertkit.weights.tables import HF_FAMILY_IGNORED_KEYS, HF_FAMILY_SHARED_HEADS

logger = logging.getLogger("bertkit.weights")


class LoadWarning(UserWarning):
    """A checkpoint was adapted to fit the model (tensors new, dropped, re-initialised or cast).

    The message starts with the checkpoint's path and names the keys; the same facts are in
    ``model.load_report``. Silence with ``from_pretrained(..., warn=False)`` or
    ``warnings.filterwarnings("ignore", category=LoadWarning)``.
    """

#: Other libraries' parameter names -> HF names (regex, replacement), applied in order.
RENAMES: tuple[tuple[str, str], ...] = (
    (r"LayerNorm\.gamma$", "LayerNorm.weight"),  # 2018-era PyTorch ports
    (r"LayerNorm\.beta$", "LayerNorm.bias"),
    (r"(^|\.)layernorm\.", r"\1LayerNorm."),  # lucid 2.x
    (r"\.dense_act\.", ".dense."),  # NVIDIA DeepLearningExamples (fused bias + activation)
)

#: Buffers older checkpoints saved; bertkit recomputes them.
SAVED_BUFFERS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")

_BACKBONE_ROOTS = ("embeddings.", "embeddings_project.", "encoder.", "pooler.")

#: Heads of BERT architectures (HF's names; ELECTRA's discriminator head too). A checkpoint key under one of these
#: that the model has no place for (an NSP head in a masked LM, a classifier in a backbone) is dropped; any other
#: unexpected key is an error unless strict=False.
KNOWN_HEADS = ("cls.predictions.", "cls.seq_relationship.", "classifier.", "qa_outputs.", "discriminator_predictions.")


@dataclass
class LoadReport:
    """What loading changed beyond copying tensors one to one."""

    loaded: int = 0
    initialized: list[str] = field(default_factory=list)  # model keys the checkpoint lacked (new head/pooler)
    dropped: list[str] = field(default_factory=list)  # checkpoint keys the model has no place for
    resized: list[str] = field(default_factory=list)  # head keys whose shape changed with the config
    renamed: dict[str, str] = field(default_factory=dict)
    cast: dict[str, tuple[torch.dtype, torch.dtype]] = field(default_factory=dict)  # key -> (stored, model's)

    def __str__(self) -> str:
        lines = [f"loaded {self.loaded} tensors"]
        for title, keys in (("newly initialised (train them)", self.initialized),
                            ("dropped from the checkpoint", self.dropped),
                            ("re-initialised with a new shape", self.resized)):
            if keys:
                lines.append(f"{title}: {', '.join(sorted(keys))}")
        lines += [f"cast from {stored} to {target}: {_show(keys)}" for (stored, target), keys in self._casts()]
        if self.renamed:
            lines.append(f"renamed {len(self.renamed)} legacy keys")
        return "; ".join(lines)

    def adaptations(self, model_name: str) -> list[str]:
        """One sentence per kind of adaptation that changes what the model computes (the :class:`LoadWarning` texts).

        Renames are not among them: a legacy name holds the same tensor.
        """
        messages = []
        if self.initialized:
            messages.append(f"not in the checkpoint, newly initialised in {model_name} (train them before use): "
                            f"{_show(self.initialized)}")
        if self.resized:
            messages.append(f"re-initialised in {model_name} because the checkpoint's shape differs (the config "
                            f"changed, e.g. num_labels; train them before use): {_show(self.resized)}")
        if self.dropped:
            messages.append(f"in the checkpoint but not in {model_name}, dropped: {_show(self.dropped)}")
        messages += [f"cast from {stored} to {target} (the dtype of {model_name}'s parameters): "
                     + (f"all {len(keys)} tensors" if len(keys) == self.loaded else _show(keys))
                     for (stored, target), keys in self._casts()]
        return messages

    def _casts(self) -> list[tuple[tuple[torch.dtype, torch.dtype], list[str]]]:
        groups: dict[tuple[torch.dtype, torch.dtype], list[str]] = {}
        for key, dtypes in self.cast.items():
            groups.setdefault(dtypes, []).append(key)
        return list(groups.items())


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


def adapt_state_dict(model: nn.Module, state: dict[str, torch.Tensor], *, strict: bool = True,
                     source: str | os.PathLike | None = None) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """Fit ``state`` to ``model``'s keys and dtypes; return the tensors to load and the report (see module doc).

    ``strict`` (default True) refuses unexpected keys that match no known head; ``source`` (the
    checkpoint's path) only names the checkpoint in error messages. Raises ``ValueError``
    (``TypeError`` for a ``strict`` that is not a bool).
    """
    _check_flag("strict", strict)
    report = LoadReport()
    model_name = type(model).__name__
    where = f"{os.fspath(source)}: " if source is not None else ""
    expected = model.state_dict()
    aliases = tied_aliases(model)
    prefix = "bert." if hasattr(model, "bert") and model.bert is not model else ""
    state = _rename(state, report)
    state = _fit_prefix(state, prefix)
    state = _fill_shared_heads(state, expected, getattr(model.config, "family", "bert"), report)
    ignored = HF_FAMILY_IGNORED_KEYS.get(getattr(model.config, "family", "bert"))
    if ignored is not None:  # keys the family's HF classes skip where the model has no place for them
        state = {k: v for k, v in state.items() if k in expected or not ignored.search(k)}

    # tied aliases: keep the source key; an alias only stands in when its source is absent. Except an
    # untied head's decoder.bias: HF (v5) unties it from predictions.bias too, and its forward adds it.
    untied = not getattr(model.config, "tie_word_embedding", True)
    for alias, source_key in aliases.items():
        if alias in state:
            tensor = state.pop(alias)
            if untied and alias.endswith("predictions.decoder.bias"):
                state[source_key] = tensor
            else:
                state.setdefault(source_key, tensor)

    head = tuple(getattr(model, "head_prefixes", ()))
    pooler = f"{prefix}pooler."
    missing = [k for k in expected if k not in state and k not in aliases]
    unexpected = [k for k in state if k not in expected]
    bad_missing = [k for k in missing if not k.startswith((*head, pooler))]
    # an unexpected backbone key means another architecture; another known head's keys are dropped
    backbone = (f"{prefix}embeddings.", f"{prefix}embeddings_project.", f"{prefix}encoder.")
    bad_unexpected = [k for k in unexpected if k.startswith(backbone)]
    if bad_missing or bad_unexpected:
        raise ValueError(where + _mismatch_message(model_name, bad_missing, bad_unexpected))
    unknown = [k for k in unexpected if not k.startswith((*KNOWN_HEADS, pooler))]
    if strict and unknown:
        raise ValueError(where + _unknown_head_message(model_name, unknown, head))
    report.initialized = missing
    report.dropped = unexpected
    for k in unexpected:
        del state[k]

    for k in list(state):
        if state[k].shape != expected[k].shape:
            if not k.startswith(head):
                raise ValueError(f"{where}{k} has shape {tuple(state[k].shape)} in the checkpoint but "
                                 f"{tuple(expected[k].shape)} in {model_name}; the checkpoint's "
                                 "config does not match this model (vocab_size, hidden_size, ...).")
            report.resized.append(k)
            del state[k]
    state = _cast(state, expected, report, model_name, where)
    report.loaded = len(state)
    return state, report


def load_into(model: nn.Module, state: dict[str, torch.Tensor], *, strict: bool = True, warn: bool = True,
              source: str | os.PathLike | None = None) -> LoadReport:
    """Fit ``state`` to ``model`` (:func:`adapt_state_dict`), load it, re-tie the embeddings, and report.

    Sets ``model.load_report`` and returns it. Unless ``warn=False``, every adaptation that
    changes what the model computes is a :class:`LoadWarning` (one per kind, naming ``source``
    and the keys), attributed to the caller's line outside bertkit; the full report is also
    logged at DEBUG on the ``"bertkit.weights"`` logger. Raises ``ValueError`` as
    :func:`adapt_state_dict` does (the model is then unchanged).
    """
    _check_flag("warn", warn)
    fitted, report = adapt_state_dict(model, state, strict=strict, source=source)
    model.load_state_dict(fitted, strict=False)
    model.tie_weights()
    model.load_report = report
    name = os.fspath(source) if source is not None else "the checkpoint"
    logger.debug("%s loaded into %s: %s", name, type(model).__name__, report)
    if warn:
        for message in report.adaptations(type(model).__name__):
            warnings.warn(f"{name}: {message}", LoadWarning, stacklevel=_caller_stacklevel())
    return report


def _cast(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], report: LoadReport, model_name: str,
          where: str) -> dict[str, torch.Tensor]:
    """Cast float tensors to their parameter's dtype (recorded in ``report.cast``); refuse int <-> float."""
    wrong_kind = [k for k, v in state.items() if v.dtype != expected[k].dtype
                  and v.dtype.is_floating_point != expected[k].dtype.is_floating_point]
    if wrong_kind:
        shown = ", ".join(f"{k} ({state[k].dtype}, {model_name} has {expected[k].dtype})" for k in wrong_kind[:8])
        more = f" ... ({len(wrong_kind)} in all)" if len(wrong_kind) > 8 else ""
        raise ValueError(f"{where}integer and floating-point tensors do not convert into each other: {shown}{more}. "
                         "Is the checkpoint quantised or damaged? bertkit loads floating-point weights only.")
    for k, v in state.items():
        if v.dtype != expected[k].dtype:
            report.cast[k] = (v.dtype, expected[k].dtype)
            state[k] = v.to(expected[k].dtype)
    return state


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}.")


def _caller_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` in the calling function that names the first frame outside bertkit."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1  # the function that warns is stacklevel 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


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


def _fill_shared_heads(state: dict[str, torch.Tensor], expected: dict, family: str,
                       report: LoadReport) -> dict[str, torch.Tensor]:
    """The family's heads that HF names alike (:data:`~bertkit.weights.tables.HF_FAMILY_SHARED_HEADS`): a model's
    head absent from the checkpoint is filled from the checkpoint's head of the other name (renames reported)."""
    for source, target in HF_FAMILY_SHARED_HEADS.get(family, ()):
        if any(k.startswith(target) for k in expected) and not any(k.startswith(target) for k in state):
            renamed = {k: target + k[len(source):] for k in state if k.startswith(source)}
            report.renamed.update(renamed)
            state = {renamed.get(k, k): v for k, v in state.items()}
    return state


def _show(keys: list[str]) -> str:
    return ", ".join(keys[:8]) + (f" ... ({len(keys)} in all)" if len(keys) > 8 else "")


def _unknown_head_message(model_name: str, unknown: list[str], head: tuple[str, ...]) -> str:
    known = f"the known heads bertkit drops: {', '.join(p + '*' for p in KNOWN_HEADS)}, pooler"
    if head:
        what = (f"the checkpoint's head does not match {model_name}'s {', '.join(p + '*' for p in head)} "
                f"(nor is it one of {known})")
        fix = "initialise the head"
    else:
        what = f"{model_name} has no place for them, and they are none of {known}"
        fix = "drop them"
    return (f"unexpected keys {_show(unknown)}: {what}; rename them, or pass strict=False to load the backbone "
            f"only and {fix}.")


def _mismatch_message(model_name: str, missing: list[str], unexpected: list[str]) -> str:
    parts = [f"The checkpoint does not fit {model_name}."]
    if missing:
        parts.append(f"Missing from the checkpoint: {_show(missing)}.")
    if unexpected:
        parts.append(f"Not in the model: {_show(unexpected)}.")
    parts.append("Is it a BERT checkpoint of the same architecture (layers, decoder / cross-attention)?")
    return " ".join(parts)
