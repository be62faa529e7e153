"""Loading any checkpoint bertkit reads together with its own tokenizer: what pretraining and fine-tuning start from.

A *source* is an HF / bertkit directory, a Google TF1 checkpoint (its directory, its
``bert_model.ckpt`` prefix, or a ``.zip`` of the directory), a pytorch_pretrained_bert
``.tar.gz``, or a registered name such as ``"bert-base-uncased"`` (fetched into the cache by
:func:`bertkit.weights.download.resolve_source`). :func:`load_model_and_tokenizer` reads it
once (:func:`bertkit.weights.formats.read_checkpoint`) and returns the model and the tokenizer
it was trained with; :func:`load_source` also says where it came from and fingerprints its
content, so a run can tell on resume whether it is handed the same checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from bertkit.config import BERTConfig
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.auto import load_tokenizer
from bertkit.tokenization.base import FastTokenizerBase

logger = logging.getLogger("bertkit.sources")

M = TypeVar("M", bound=BERTPreTrainedModel)


@dataclass
class LoadedSource:
    """A checkpoint loaded into ``model``, its ``tokenizer``, and what identifies it.

    ``source`` is what the caller named (a path made absolute, or a registered name), ``path``
    the local file or directory it resolved to, and ``fingerprint`` a JSON-able record of the
    content (format, tensor count, sha256 of every tensor and of the config): the same
    weights give the same fingerprint whatever their path or file format.
    """

    model: BERTPreTrainedModel
    tokenizer: FastTokenizerBase
    source: str
    path: Path
    fingerprint: dict[str, Any]


def load_model_and_tokenizer(source: str | os.PathLike, model_class: type[M], *, warn: bool = True,
                             **config_overrides: Any) -> tuple[M, FastTokenizerBase]:
    """``model_class`` with ``source``'s weights (in eval mode) and the tokenizer ``source`` was trained with.

    ``source``: anything bertkit loads (see the module doc; a registered name is downloaded once).
    The model is built from the checkpoint's config with ``config_overrides`` applied (e.g.
    ``num_labels=3``; ``strict=False`` and ``dtype`` are passed to the loader instead) and loaded as
    ``from_pretrained`` loads: strictly, with a fresh head where the checkpoint has none (an
    MLM-only checkpoint in :class:`~bertkit.BERTForPreTraining` gets a new NSP head) and each
    such adaptation in ``model.load_report`` and, unless ``warn=False``, a
    :class:`~bertkit.LoadWarning`.

    The tokenizer is the checkpoint's own, of the class :func:`bertkit.tokenization.load_tokenizer` picks
    (BERT's for BERT, DistilBERT and ELECTRA; the ``tokenizer.json`` as HF reads it for RoBERTa, XLM-R, MPNet,
    ModernBERT...): its ``tokenizer_config.json`` + ``vocab.txt`` or its ``tokenizer.json``; a bare ``vocab.txt``
    (Google's releases) is lower-cased unless its word pieces are capitalised (or, for a vocabulary without
    cased letters, the checkpoint's name says ``cased``), as ``bertkit convert`` decides
    (:func:`bertkit.weights.convert.guess_do_lower_case`).

    Raises ``ValueError`` when the source has no vocabulary (naming it and what to add), when the
    vocabulary is larger than the model's embeddings, or when the weights do not fit
    ``model_class``; ``FileNotFoundError`` when ``source`` holds no checkpoint.
    """
    loaded = load_source(source, model_class, warn=warn, **config_overrides)
    return loaded.model, loaded.tokenizer


def load_source(source: str | os.PathLike, model_class: type[M], *, warn: bool = True,
                **config_overrides: Any) -> LoadedSource:
    """:func:`load_model_and_tokenizer`, plus where the checkpoint came from and its content fingerprint."""
    from bertkit.weights.adapt import load_into
    from bertkit.weights.download import resolve_source
    from bertkit.weights.formats import read_checkpoint
    from bertkit.weights.hf import apply_load_dtype

    overrides = dict(config_overrides)
    strict = overrides.pop("strict", True)
    dtype = overrides.pop("dtype", None)
    resolved = Path(resolve_source(source))
    checkpoint = read_checkpoint(resolved)
    tokenizer = _checkpoint_tokenizer(checkpoint, resolved, source)
    config = checkpoint.config.replace(**overrides) if overrides else checkpoint.config
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"{source}: its vocabulary has {tokenizer.vocab_size} tokens but the model only "
                         f"{config.vocab_size} embeddings; the vocab.txt / tokenizer.json beside the weights belongs "
                         "to another checkpoint. Put the checkpoint's own vocabulary there.")
    model = model_class(config)
    load_into(model, checkpoint.state_dict, strict=strict, warn=warn, source=resolved)
    apply_load_dtype(model.eval(), checkpoint.quantization, dtype, resolved, warn)  # an int8 checkpoint runs int8
    named = os.path.abspath(source) if isinstance(source, str | os.PathLike) and os.path.exists(source) \
        else str(source)  # a registered name
    return LoadedSource(model.eval(), tokenizer, named, resolved, _fingerprint(checkpoint))


def source_config(source: str | os.PathLike) -> BERTConfig:
    """The config of ``source`` without reading its weights where it sits beside them (an archive is read whole):
    :func:`bertkit.weights.formats.read_source_config`."""
    from bertkit.weights.formats import read_source_config

    return read_source_config(source)


def _checkpoint_tokenizer(checkpoint, resolved: Path, source: str | os.PathLike) -> FastTokenizerBase:
    """The checkpoint's tokenizer, from the tokenizer files :func:`read_checkpoint` found beside its weights."""
    from bertkit.weights.convert import guess_do_lower_case

    files = checkpoint.tokenizer_files
    # named as Google names its releases: the archive, or the folder (of a TF prefix or weights file)
    named = resolved if resolved.is_dir() or _is_archive(resolved) else resolved.parent
    if "vocab.txt" not in files and "tokenizer.json" not in files:
        where = "inside the archive" if _is_archive(resolved) else f"in {named}"
        raise ValueError(f"{source} has no vocabulary: neither vocab.txt nor tokenizer.json {where}, so its "
                         "tokenizer is unknown. Put the vocab.txt the checkpoint was trained with (and its "
                         "tokenizer_config.json, for do_lower_case) beside its config, then load it again.")
    with tempfile.TemporaryDirectory() as staging:
        for name, data in files.items():
            (Path(staging) / name).write_bytes(data)
        if "tokenizer_config.json" in files or "tokenizer.json" in files:
            # the model type decides the tokenizer class where tokenizer_config.json names none, as in HF
            (Path(staging) / "config.json").write_text(json.dumps({"model_type": checkpoint.config.hf_model_type}))
            return load_tokenizer(staging)
        lower = guess_do_lower_case(str(named), files["vocab.txt"])
        logger.info("%s: vocab.txt without tokenizer_config.json; do_lower_case=%s from its vocabulary (or name)",
                    source, lower)
        return BERTTokenizerFast.from_pretrained(staging, do_lower_case=lower)


def _is_archive(path: Path) -> bool:
    from bertkit.weights.formats import is_archive

    return is_archive(path)


def _fingerprint(checkpoint) -> dict[str, Any]:
    """The checkpoint's content: every tensor (name, dtype, shape, bytes) and the config, hashed."""
    digest = hashlib.sha256()
    for name in sorted(checkpoint.state_dict):
        tensor = checkpoint.state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    config = json.dumps(checkpoint.config.to_dict(), sort_keys=True)
    return {"format": checkpoint.format, "tensors": len(checkpoint.state_dict), "weights_sha256": digest.hexdigest(),
            "config_sha256": hashlib.sha256(config.encode()).hexdigest()}


__all__ = ["LoadedSource", "load_model_and_tokenizer", "load_source", "source_config"]
