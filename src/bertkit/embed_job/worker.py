"""One worker's encoding loop: a shard's texts in chunks, the tokenizer one chunk ahead of the model.

:func:`encode_shard` cuts a stream of rows into chunks of ``chunk_rows`` texts and yields each chunk with its
vectors, in input order. While the model embeds chunk k, a thread reads and tokenizes chunk k+1 (file reading,
the Rust tokenizer and the model's kernels release the GIL, so they overlap); at most one chunk waits tokenized,
so the loop holds two chunks whatever the shard's size. Within a chunk the model runs length-sorted
batches (:func:`bertkit.inference.batching.run_sorted`) and hands the vectors back in the chunk's order.

How a model splits into a tokenizing step and an embedding step is :func:`steps_for`, by kind: a
sentence-transformers dense model (its :meth:`~bertkit.SentenceTransformer.features` then
:meth:`~bertkit.SentenceTransformer.embed_features`) overlaps its tokenizer with its model; a static model, whose
tokenizer is most of the work, runs its own ``encode`` (batches on threads, one batch tokenized beside another's
pooling); sparse, multi-vector and plain-BERT dense models tokenize inside their own ``encode`` (a transformer's
forward passes are over 99 % of the time: all-MiniLM-L6-v2 tokenized 4,000 Austen sentences in 0.3 s and embedded
them in 186 s on 2 busy cores). For every kind the next chunk is read ahead. The torch threads of a worker are set
when its model loads (``cores // workers``: :class:`~bertkit.embed_job.encoders.ModelSpec`).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from bertkit.inference.batching import check_batch_size, chunks

T = TypeVar("T")

#: texts per chunk: large enough that length-sorting fills batches evenly, small enough that two chunks of
#: tokens and one of vectors are a few MB
CHUNK_ROWS = 4096
#: the smallest batch a static model's texts are tokenized in (``--batch-size`` is a transformer's)
STATIC_BATCH = 1024


@dataclass(frozen=True)
class Steps:
    """A model as two steps: ``tokenize(texts)`` (no model: what the thread runs ahead) and ``embed(tokens)``
    (the model: the chunk's vectors in its order, as :meth:`bertkit.embed_job.encoders.Encoder.encode` gives
    them)."""

    tokenize: Callable[[list[str]], Any]
    embed: Callable[[Any], Any]


def encode_shard(encoder: Any, rows: Iterable[T], batch_size: int | None = None, *,
                 text: Callable[[T], str] | None = None, chunk_rows: int = CHUNK_ROWS) -> Iterator[tuple[list[T], Any]]:
    """``(chunk, vectors)`` for consecutive chunks of ``rows`` (at most ``chunk_rows`` each), in order; ``text``
    picks a row's text (rows are texts when None). ``encoder`` is a loaded
    :class:`~bertkit.embed_job.encoders.Encoder`; ``batch_size`` the model's batch (its spec's when None). A
    ValueError of either step (a text the model refuses) is raised here, for the chunk it belongs to."""
    check_batch_size(chunk_rows, "chunk_rows")
    steps = steps_for(encoder, batch_size if batch_size is not None else encoder.spec.batch_size)
    pieces = chunks(rows, chunk_rows)

    def read_ahead() -> tuple[list[T], Any] | None:
        # runs in the one helper thread, one call after another: the reader is never advanced by two threads
        chunk = next(pieces, None)
        if chunk is None:
            return None
        return chunk, steps.tokenize(chunk if text is None else [text(row) for row in chunk])

    with cf.ThreadPoolExecutor(1, thread_name_prefix="bertkit-read-ahead") as helper:
        pending = helper.submit(read_ahead)
        while (ready := pending.result()) is not None:
            pending = helper.submit(read_ahead)  # chunk k+1 is read and tokenized while chunk k is embedded
            try:
                yield ready[0], steps.embed(ready[1])
            except BaseException:  # an error, or the caller stopped: the chunk read ahead is not waited for
                pending.cancel()
                raise


def steps_for(encoder: Any, batch_size: int) -> Steps:
    """The two steps of ``encoder``'s model (module doc); a model without a separate tokenizing step gets
    ``tokenize`` = the texts as they are and ``embed`` = its ``encode``."""
    check_batch_size(batch_size)
    split = _SPLITS.get(encoder.kind)
    steps = split(encoder, batch_size) if split is not None else None
    return steps if steps is not None else Steps(lambda texts: texts, encoder.encode)


def _dense_steps(encoder: Any, batch_size: int) -> Steps | None:
    """A sentence-transformers model's own features and embedding (prompt, casing, pooling, Dense, Normalize),
    as the ``embeddings`` pipeline runs it, without turning each vector into a list of floats."""
    import torch

    from bertkit.sentence.model import SentenceTransformer
    from bertkit.sentence.modules import normalize

    pipe = encoder.model
    model = getattr(pipe, "model", None)
    if not isinstance(model, SentenceTransformer) or pipe.params.get("pooling") is not None:
        return None
    prefix = model.prompt(encoder.spec.prompt_name)
    dim = encoder.dim

    def embed(rows: list[dict]) -> np.ndarray:
        if not rows:
            return np.zeros((0, dim), np.float32)
        vectors = torch.stack(model.embed_features(rows, "sentence_embedding", prefix, batch_size=batch_size,
                                                   batch_tokens=pipe.batch_tokens))
        pipe.finite(vectors)
        return (normalize(vectors) if encoder.spec.normalize else vectors).numpy()

    return Steps(lambda texts: model.features(texts, prefix), embed)


def _static_steps(encoder: Any, batch_size: int) -> Steps:
    """A static model's own ``encode`` on each chunk, in batches of at least :data:`STATIC_BATCH` texts on the
    worker's threads: it already cuts one batch's tokens while another's become vectors (the tokenizer runs outside
    the GIL), which outran a split into one tokenizing thread and the pooling (4,700-5,800 texts/s against
    6,300-7,400, measured side by side); the read-ahead thread reads the next chunk."""
    module, normalize = encoder.model
    batch = max(batch_size, STATIC_BATCH)  # no padding to save: the batch only sizes the tokenizer's calls

    def embed(texts: list[str]) -> np.ndarray:
        return module.encode(texts, batch_size=batch, normalize=normalize, threads=encoder.spec.threads)

    return Steps(lambda texts: texts, embed)


_SPLITS: dict[str, Callable[[Any, int], Steps | None]] = {"dense": _dense_steps, "static": _static_steps}

