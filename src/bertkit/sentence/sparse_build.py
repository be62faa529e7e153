"""A new learned-sparse model from a masked-LM base: :func:`new_sparse_encoder` writes the directory, which
:class:`~bertkit.sentence.sparse.SparseEncoder` (and sentence-transformers 6.2) load.

SPLADE: the base's MLM head (``MLMTransformer``) under a ``SpladePooling``. Inference-free: a ``Router`` whose
``document`` route is that SPLADE pipeline and whose ``query`` route is a ``SparseStaticEmbedding`` (one weight per
vocabulary entry, no forward pass), its weights initialised from the inverse document frequency of each token over
the documents given (:func:`idf_weights`: the training corpus), so that an untrained query side already weighs a
rare term above a common one. Any family whose MLM head bertkit loads (BERT, DistilBERT, RoBERTa, ModernBERT, ...)
works; a base without an MLM head is refused (a fresh random head would make the vectors noise). A base that is
already a sparse encoder directory is re-written as it is (or, with ``inference_free``, its SPLADE side under a new
Router).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.sentence.modules import SpladePooling, is_sentence_transformer, read_layout


def idf_weights(texts: Iterable[str], tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """``[vocab_size]`` float32: BM25's inverse document frequency ``log(1 + (N - df + 0.5) / (df + 0.5))`` of each
    token over ``texts`` (``df``: the texts holding the token at least once, special tokens left out as the static
    side leaves them out; a token in no text gets the largest weight, ``log(1 + 2N + 1)``)."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    n = 0
    batch: list[str] = []

    def count(batch: list[str]) -> None:
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            counts[torch.tensor(sorted(set(ids)), dtype=torch.long)] += 1

    for text in texts:
        batch.append(text)
        n += 1
        if len(batch) == 1024:
            count(batch)
            batch = []
    if batch:
        count(batch)
    return torch.log1p((n - counts + 0.5) / (counts + 0.5)).float()


@dataclass
class _SpladeParts:
    """A SPLADE route as the sparse encoder writer reads it (:func:`~bertkit.sentence.saving.save_sparse_encoder`)."""

    mlm: nn.Module
    tokenizer: Any
    max_seq_length: int
    splade: SpladePooling
    layout: Any = field(default_factory=lambda: _Settings())


@dataclass
class _Settings:
    do_lower_case: bool = False


@dataclass
class _StaticParts:
    tokenizer: Any
    weight: torch.Tensor


@dataclass
class _Blueprint:
    """A sparse encoder's parts as the writer reads them: its routes and settings."""

    routes: Mapping[str, Any]
    router: bool
    max_active_dims: int | None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str = "dot"
    default_route: str | None = None

    @property
    def layout(self) -> Any:
        return _Layout(self.router)


@dataclass
class _Layout:
    routes: bool


def load_masked_lm(source: str | os.PathLike) -> tuple[nn.Module, Any, Path]:
    """The masked LM, its tokenizer and its folder for ``source``: a checkpoint with an MLM head, or a SPLADE /
    inference-free directory (its document side). A checkpoint without the head: one-line ``ValueError``."""
    from bertkit.modeling.lm_heads import BERTForMaskedLM
    from bertkit.tasks.sources import load_model_and_tokenizer

    path = Path(source)
    if is_sentence_transformer(path):
        layout = read_layout(path)
        sides = [side for side in (layout.routes or {"": layout}).values() if side.masked_lm and side.splade]
        if not sides:
            raise ValueError(f"--model {os.fspath(source)} is a sentence-transformers directory without a masked-LM "
                             "(SPLADE) module; pass the MLM checkpoint it was built from, or a SPLADE directory.")
        path = sides[0].transformer
    mlm, tokenizer = load_model_and_tokenizer(path, BERTForMaskedLM, warn=False)
    fresh = [key for key in mlm.load_report.initialized if key.startswith("cls.")]
    if fresh:
        raise ValueError(f"--model {os.fspath(source)} has no masked-LM head (its checkpoint lacks {fresh[0]}); "
                         "pass a checkpoint with its MLM head (a pretraining checkpoint, e.g. bert-base-uncased's, or "
                         "one `bertkit pretrain` wrote) or a SPLADE directory.")
    return mlm, tokenizer, path


def new_sparse_encoder(base: str | os.PathLike, directory: str | os.PathLike, *, inference_free: bool = False,
                       documents: Iterable[str] | None = None, pooling: str = "max", activation: str = "relu",
                       max_active_dims: int | None = None, max_seq_length: int | None = None,
                       prompts: Mapping[str, str] | None = None) -> Path:
    """Write a sentence-transformers sparse encoder directory at ``directory`` from the MLM ``base`` (module
    docstring); returns it. ``inference_free``: a Router with a static query side whose weights are
    :func:`idf_weights` over ``documents`` (needed then); ``pooling`` / ``activation``: SpladePooling's (``max`` /
    ``sum``, ``relu`` / ``log1p_relu``); ``max_active_dims``: the weights kept per vector when encoding;
    ``max_seq_length``: default the base's limit; ``prompts``: name -> text saved with the model."""
    from bertkit.sentence.saving import save_sparse_encoder

    if max_active_dims is not None and (isinstance(max_active_dims, bool) or not isinstance(max_active_dims, int)
                                        or max_active_dims < 1):
        raise ValueError(f"--max-active-dims must be a positive integer (the weights kept per vector), got "
                         f"{max_active_dims!r}; leave it out to keep every non-zero weight.")
    mlm, tokenizer, _ = load_masked_lm(base)
    limit = mlm.config.max_tokens
    if max_seq_length is not None and not 0 < max_seq_length <= limit:
        raise ValueError(f"--max-seq-length {max_seq_length}: {os.fspath(base)} takes 1 to {limit} tokens.")
    splade = _SpladeParts(mlm, tokenizer, max_seq_length or limit, SpladePooling(pooling, activation))
    routes: dict[str, Any] = {"main": splade}
    if inference_free:
        if documents is None:
            raise ValueError("an inference-free model needs the documents its query weights' IDF is counted over.")
        vocab = mlm.config.vocab_size
        query_tokenizer = copy.copy(tokenizer)  # cut queries where the document side cuts, as sentence-transformers'
        query_tokenizer.model_max_length = splade.max_seq_length  # Router (one tokenizer for both sides) saves it
        routes = {"query": _StaticParts(query_tokenizer, idf_weights(documents, tokenizer, vocab)), "document": splade}
    blueprint = _Blueprint(routes, inference_free, max_active_dims, dict(prompts or {}),
                           default_route="document" if inference_free else None)
    return save_sparse_encoder(blueprint, directory)

