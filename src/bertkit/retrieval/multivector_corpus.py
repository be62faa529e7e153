"""A corpus on disk indexed for late interaction: documents read from JSON lines or Parquet
(:func:`~bertkit.retrieval.sparse_corpus.read_corpus`, BEIR's text: title, a space, the text), encoded a chunk at a
time into an exact :class:`~bertkit.retrieval.multivector.MultiVectorIndex` with their ids, in bounded memory,
resumable after a kill.

``encode`` is any callable from a list of texts to one ``[n_i, d]`` array or tensor of token vectors per text (a
:class:`bertkit.MultiVectorEncoder`'s ``encode_document``, which batches by length itself). Memory: one chunk's
texts and vectors, plus the writer's ``max_tokens`` buffered vectors. A build killed at any point, run again with
``resume=True``, continues after the last segment written (the documents before it are read again, not encoded)
and gives the index a one-go build gives. Cores: the forward runs on torch's intra-op threads (the CLI sets them to
every core this process may use).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertkit.progress import progress_bar
from bertkit.retrieval.multivector import MultiVectorIndex, MultiVectorIndexWriter
from bertkit.retrieval.sparse_corpus import CorpusFields, checked_corpus, corpus_chunks, corpus_info

#: texts -> one ``[n_i, d]`` array or tensor of token vectors per text
EncodeTokens = Callable[[list[str]], Sequence[Any]]


def encode_chunk(encode: EncodeTokens, chunk: list[tuple[str, str]], corpus: Path) -> list[Any]:
    """The token vectors of ``chunk``'s ``(id, text)`` documents; ``ValueError`` naming the corpus and the document
    for an encoder that gives another count, or a document left with no token vector."""
    vectors = list(encode([text for _, text in chunk]))
    if len(vectors) != len(chunk):
        raise ValueError(f"encoding --corpus {corpus}: the encoder returned {len(vectors)} token-vector arrays for "
                         f"{len(chunk)} texts; it must return one per text.")
    for (doc_id, _), rows in zip(chunk, vectors):
        if len(rows) == 0:
            raise ValueError(f"--corpus {corpus}: document {doc_id!r} has no token vectors after the model's skiplist "
                             f"(e.g. only punctuation); drop it or give it a word.")
    return vectors


def add_corpus(writer: MultiVectorIndexWriter, encode: EncodeTokens, corpus: Path, total: int, *,
               fields: CorpusFields, encoding: str, chunk_documents: int, progress: bool) -> None:
    """Every document of ``corpus`` the writer does not hold yet, encoded ``chunk_documents`` at a time and added."""
    with progress_bar(total=total, initial=writer.documents, unit="doc", desc="index", disable=not progress) as bar:
        for chunk in corpus_chunks(corpus, fields, encoding=encoding, skip=writer.documents, size=chunk_documents):
            writer.add(encode_chunk(encode, chunk, corpus), [doc_id for doc_id, _ in chunk])
            bar.update(len(chunk))


def build_multivector_corpus_index(encode: EncodeTokens, corpus: str | os.PathLike, directory: str | os.PathLike,
                                   *, dim: int, model: str, fields: CorpusFields | None = None,
                                   encoding: str = "utf-8", chunk_documents: int = 1024, max_tokens: int = 1_000_000,
                                   dtype: str = "float16", resume: bool = False,
                                   progress: bool = True) -> MultiVectorIndex:
    """The exact :class:`MultiVectorIndex` in ``directory`` of the corpus file ``corpus`` (see the module docstring):
    each document encoded by ``encode`` into ``dim``-wide token vectors (made by ``model``, e.g.
    :func:`~bertkit.retrieval.sparse_corpus.model_fingerprint` of its directory) and stored with its id as ``dtype``.
    ``resume``: continue an unfinished build of the same corpus and model. ``ValueError`` naming the file for an
    empty corpus, a bad record or a document without token vectors."""
    fields = fields or CorpusFields()
    corpus, total = checked_corpus(corpus, chunk_documents)
    writer = MultiVectorIndexWriter(directory, dim, model, dtype=dtype, max_tokens=max_tokens, resume=resume,
                                    info=corpus_info(corpus, fields))
    add_corpus(writer, encode, corpus, total, fields=fields, encoding=encoding, chunk_documents=chunk_documents,
               progress=progress)
    return writer.finish()
