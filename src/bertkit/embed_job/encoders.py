"""The model of an embedding job, loaded once per worker process, and what it answers for a list of texts.

:func:`model_kind` tells a directory's kind without loading its weights: ``multi-vector`` (a ColBERT directory),
``sparse`` (a sentence-transformers sparse encoder), ``static`` (a Model2Vec or sentence-transformers
``StaticEmbedding`` directory, :mod:`bertkit.sentence.static`), else ``dense`` (a sentence-transformers
directory, or any BERT: mean pooling, as the ``embeddings`` pipeline embeds it). :func:`load_encoder` loads it as
the pipelines do and caches it in the process (a pool worker or Dask worker embeds many shards with one model);
:meth:`Encoder.encode` gives the store's vectors (:func:`bertkit.embed_job.store.write_shard`), in input order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelSpec:
    """What a worker loads: the model ``path`` and its ``kind``, the ``dtype`` / ``device`` to run it in, the
    ``batch_size``, whether vectors are L2-``normalize``-d, a sentence-transformers ``prompt_name``, the torch
    ``threads`` of one worker (None: torch's default)."""

    path: str
    kind: str
    dtype: str = "auto"
    device: str | None = None
    batch_size: int = 32
    normalize: bool = False
    prompt_name: str | None = None
    threads: int | None = None


def model_kind(path: str | os.PathLike) -> str:
    """``dense``, ``static``, ``sparse`` or ``multi-vector`` (module doc), from the directory's files."""
    from bertkit.tasks.sources import inspect_source

    info = inspect_source(path)
    if info.layout == "static":
        return "static"
    if info.multi_vector is not None and info.task == "multi-vector":
        return "multi-vector"
    if info.task == "sparse-embeddings":
        return "sparse"
    return "dense"


class Encoder:
    """A loaded model of one kind: :meth:`encode` and its vectors' ``dim``."""

    def __init__(self, spec: ModelSpec):
        import torch

        if spec.threads is not None:
            torch.set_num_threads(spec.threads)
        self.spec, self.kind = spec, spec.kind
        self.model, self.dim, self.dtype = _LOADERS[spec.kind](spec)

    def encode(self, texts: list[str]) -> Any:
        """The vectors of ``texts`` in order: a float32 ``[n, dim]`` array (dense, static), ``(indices, values)``
        pairs (sparse), ``[tokens, dim]`` arrays (multi-vector)."""
        return _ENCODERS[self.kind](self, texts)


def _load_dense(spec: ModelSpec) -> tuple[Any, int, str]:
    from bertkit.pipelines import pipeline

    pipe = pipeline("embeddings", model=spec.path, device=spec.device, dtype=spec.dtype, batch_size=spec.batch_size,
                    normalize=spec.normalize, prompt_name=spec.prompt_name)
    return pipe, pipe.dimension, str(getattr(pipe.model, "dtype_choice", None) or spec.dtype)


def _encode_dense(encoder: Encoder, texts: list[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, encoder.dim), np.float32)
    return np.asarray(encoder.model(texts), dtype=np.float32)


def _load_sparse(spec: ModelSpec) -> tuple[Any, int, str]:
    from bertkit.sentence.sparse import SparseEncoder

    model = SparseEncoder(spec.path, spec.device, dtype=spec.dtype)
    return model, model.get_sentence_embedding_dimension(), str(getattr(model, "dtype_choice", None) or spec.dtype)


def _encode_sparse(encoder: Encoder, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    import torch

    out = []
    with torch.inference_mode():  # encode's rows hold inference tensors: read them in the same mode
        rows = encoder.model.encode(texts, prompt_name=encoder.spec.prompt_name, batch_size=encoder.spec.batch_size,
                                    show_progress_bar=False, convert_to_tensor=False, convert_to_sparse_tensor=True)
        for row in rows:  # built coalesced (one entry per index, sorted)
            indices, values = row.indices()[0].numpy().astype(np.int32), row.values().float().numpy()
            if encoder.spec.normalize and len(values):
                values = values / max(float(np.linalg.norm(values)), 1e-12)
            out.append((indices, values.astype(np.float32)))
    return out


def _load_multi_vector(spec: ModelSpec) -> tuple[Any, int, str]:
    from bertkit.sentence.multi_vector import MultiVectorEncoder

    model = MultiVectorEncoder(spec.path, spec.device, dtype=spec.dtype)
    return model, model.get_sentence_embedding_dimension(), str(getattr(model, "dtype_choice", None) or spec.dtype)


def _encode_multi_vector(encoder: Encoder, texts: list[str]) -> list[np.ndarray]:
    return encoder.model.encode(texts, prompt_name=encoder.spec.prompt_name, batch_size=encoder.spec.batch_size,
                                show_progress_bar=False, convert_to_numpy=True,
                                normalize_embeddings=encoder.spec.normalize)


def _load_static(spec: ModelSpec) -> tuple[Any, int, str]:
    from bertkit.sentence.static import load_static

    module, normalize, _ = load_static(spec.path)
    return (module, normalize or spec.normalize), module.dim, "fp32"


def _encode_static(encoder: Encoder, texts: list[str]) -> np.ndarray:
    module, normalize = encoder.model
    if not texts:
        return np.zeros((0, encoder.dim), np.float32)
    return np.asarray(module.encode(texts, batch_size=encoder.spec.batch_size, normalize=normalize), np.float32)


_LOADERS = {"dense": _load_dense, "sparse": _load_sparse, "multi-vector": _load_multi_vector, "static": _load_static}
_ENCODERS = {"dense": _encode_dense, "sparse": _encode_sparse, "multi-vector": _encode_multi_vector,
             "static": _encode_static}
#: this process's model: a worker loads it for its first shard and keeps it for the rest
_LOADED: dict[ModelSpec, Encoder] = {}


def load_encoder(spec: ModelSpec) -> Encoder:
    """The model of ``spec``, loaded once per process (the one before it, if any, dropped)."""
    if spec not in _LOADED:
        _LOADED.clear()
        _LOADED[spec] = Encoder(spec)
    return _LOADED[spec]
