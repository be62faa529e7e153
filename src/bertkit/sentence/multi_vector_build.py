"""A new multi-vector (ColBERT) model from a plain encoder: :func:`new_multi_vector_encoder` writes the directory,
which :class:`~bertkit.sentence.multi_vector.MultiVectorEncoder` (and sentence-transformers 6.2) load.

What sentence-transformers 6's ``MultiVectorEncoder(base)`` builds, written as its directory: the base's BERT as
the ``Transformer``, a token-level projection ``Dense`` (``dim`` outputs, no bias, identity activation, PyTorch's
default initialisation under the caller's seed), a ``MultiVectorMask`` and a token ``Normalize``. A
sentence-transformers base loses its pooling and sentence-level ``Normalize``; a ``Dense`` it has is kept and read
per token (its learned weights are the projection, no new one is added), as sentence-transformers converts one.
The ColBERT settings default to sentence-transformers' for a fresh model (no markers, no query expansion, no
skiplist, the base's sequence length for queries and documents); :class:`ColBERTSettings` sets any of them.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from torch import nn

from bertkit.sentence.modules import Dense

#: the skiplists by ``--skiplist`` name: PyLate's and Stanford ColBERT's punctuation, or none
SKIPLISTS: dict[str, list[str]] = {"none": [], "punctuation": list(string.punctuation)}
#: the projection's outputs where a new one is added (sentence-transformers', ColBERTv2's)
DEFAULT_DIM = 128


@dataclass(frozen=True)
class ColBERTSettings:
    """A new ColBERT's settings: ``dim`` (the projection's outputs; None: 128, or a base's own Dense's),
    ``query_length`` / ``document_length`` (tokens; default the base's sequence length), ``query_expansion``
    (pad each query with ``[MASK]`` to this many tokens, ColBERT's query augmentation, not attended; None: off),
    ``skiplist`` (document tokens never scored: :data:`SKIPLISTS` name or a word list), ``prompts`` (role ->
    text, e.g. ``{"query": "[Q] ", "document": "[D] "}``), ``similarity`` (``maxsim`` or ``meanmaxsim``)."""

    dim: int | None = None
    query_length: int | None = None
    document_length: int | None = None
    query_expansion: int | None = None
    skiplist: str | Sequence[str] = "none"
    prompts: Mapping[str, str] = field(default_factory=dict)
    similarity: str = "maxsim"

    def __post_init__(self):
        for flag, value in (("--dim", self.dim), ("--query-length", self.query_length),
                            ("--document-length", self.document_length),
                            ("--query-expansion", self.query_expansion)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{flag} must be a positive integer, got {value!r}.")
        if isinstance(self.skiplist, str) and self.skiplist not in SKIPLISTS:
            raise ValueError(f"--skiplist {self.skiplist!r} is not one of {', '.join(SKIPLISTS)}.")
        if self.similarity not in ("maxsim", "meanmaxsim"):
            raise ValueError(f"--similarity must be maxsim or meanmaxsim, got {self.similarity!r}.")

    @property
    def skiplist_words(self) -> list[str]:
        return list(SKIPLISTS[self.skiplist] if isinstance(self.skiplist, str) else self.skiplist)


def new_multi_vector_encoder(base: str | os.PathLike, directory: str | os.PathLike,
                             settings: ColBERTSettings | None = None) -> Path:
    """Write a sentence-transformers 6 ``MultiVectorEncoder`` directory at ``directory`` built from ``base`` (any
    checkpoint bertkit loads: an HF directory, a sentence-transformers directory, a registry name) with
    ``settings`` (module docstring); returns it. Seed torch first for a reproducible projection."""
    from bertkit.sentence.model import SentenceTransformer
    from bertkit.sentence.saving import save_multi_vector_encoder

    settings = settings or ColBERTSettings()
    dense = SentenceTransformer(base, dtype="fp32", optimize=False)
    hidden = dense.bert.config.hidden_size
    layers = list(dense.dense)
    if not layers:
        layers = [Dense(hidden, settings.dim or DEFAULT_DIM, bias=False, activation="Identity")]
    elif settings.dim not in (None, layers[-1].linear.out_features):
        raise ValueError(f"--dim {settings.dim}: {os.fspath(base)} has its own Dense layer "
                         f"({layers[-1].linear.out_features} outputs), which becomes the projection with its learned "
                         "weights; leave --dim out.")
    limit = dense.max_seq_length
    for flag, value in (("--query-length", settings.query_length), ("--document-length", settings.document_length),
                        ("--query-expansion", settings.query_expansion)):
        if value is not None and value > dense.bert.config.max_tokens:
            raise ValueError(f"{flag} {value}: {os.fspath(base)} takes at most {dense.bert.config.max_tokens} "
                             "tokens.")
    expansion = {"strategy": "fixed", "attend": False, "token": None, "length": settings.query_expansion} \
        if settings.query_expansion else None
    layout = SimpleNamespace(do_lower_case=dense.layout.do_lower_case, query_length=settings.query_length,
                             document_length=settings.document_length, markers={})
    parts = SimpleNamespace(
        bert=dense.bert, tokenizer=dense.tokenizer, layout=layout, max_seq_length=limit,
        query_expansion=expansion, dense=nn.ModuleList(layers), skiplist_words=settings.skiplist_words,
        skiplist_tasks=["document"], keep_only_token_ids=None, normalize_output=True, token_pooling=None,
        prompts=dict(settings.prompts), default_prompt_name=None, similarity_fn_name=settings.similarity)
    return save_multi_vector_encoder(parts, directory)
