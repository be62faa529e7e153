"""A corpus on disk indexed at scale: documents read from JSON lines or Parquet, encoded a chunk at a time into a
:class:`~bertkit.retrieval.sparse.SparseIndex` with their ids, in bounded memory, resumable after a kill.

The corpus is read lazily, in its order: ``corpus.jsonl`` as BEIR writes it (one ``{"_id", "title", "text"}``
object per line; ``"id"`` is taken where there is no ``"_id"``) or a Parquet file with those columns (pyarrow,
imported only then). A document's text is BEIR's: the title, a space and the text, stripped. Each chunk of
``chunk_documents`` texts is encoded by ``encode`` in batches sorted by length
(:func:`~bertkit.retrieval.sparse_retrieve.encode_sparse_sorted`) and added to a
:class:`~bertkit.retrieval.sparse.SparseIndexWriter`, which holds at most ``max_postings`` postings before it
writes a segment and records how far it got. A build killed at any point resumes (``resume=True``) after the
last segment: the documents before it are read again but not encoded. Memory: one chunk's texts and vectors,
plus ``max_postings`` x 20 bytes.

Cores: the encoder's forward runs on torch's intra-op threads (the CLI sets them to every core this process may
use); the tokenizer batches in its own threads. Reading and writing postings happen between chunks, on one core.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.progress import progress_bar
from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter
from bertkit.retrieval.sparse_retrieve import EncodeSparse, encode_sparse_sorted

#: the corpus formats, by file suffix
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class CorpusFields:
    """The fields of a corpus record: ``id`` (None: ``"_id"``, else ``"id"``), ``text``, and ``title`` (joined
    before the text when a record has one; None: never)."""

    id: str | None = None
    text: str = "text"
    title: str | None = "title"


def corpus_format(path: str | os.PathLike) -> str:
    """``"jsonl"`` or ``"parquet"`` by the suffix of ``path``; ``ValueError`` for another."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--corpus {path}: expected a .jsonl (BEIR's corpus.jsonl) or .parquet file, got "
                         f"{suffix or 'no suffix'!r}.")
    return FORMATS[suffix]


def read_corpus(path: str | os.PathLike, fields: CorpusFields = CorpusFields(), *, encoding: str = "utf-8",
                skip: int = 0) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of each document of the corpus file ``path`` in order, from the ``skip``-th on (blank JSON
    lines are no documents). ``ValueError`` naming the file and line (or row) for a record without the id or text
    field, a text that is not a string, a line that is not a JSON object, or bytes that are not ``encoding``."""
    if corpus_format(path) == "parquet":
        yield from _read_parquet(Path(path), fields, skip)
        return
    seen = 0
    for number, line in _lines(Path(path), encoding):
        if not line.strip():
            continue
        seen += 1
        if seen <= skip:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON object ({error.msg}); each line of a corpus holds one "
                             f"{{\"_id\", \"title\", \"text\"}} object.") from None
        yield _document(record, fields, f"{path}:{number}")


def _lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """``(number, text)`` of each line; bytes that are not ``encoding`` raise ``ValueError`` naming the line. An
    ASCII-compatible encoding (UTF-8, Latin-1, cp1252, ...) is decoded line by line, so the line named is exact."""
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"--encoding {encoding}: not an encoding Python knows; e.g. utf-8, latin-1, cp1252.") \
            from None
    if codec.encode("\n")[0] != b"\n":  # UTF-16/32: decoded as a stream
        with open(path, encoding=encoding) as f:
            try:
                yield from enumerate(f, 1)
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}: not {encoding} text ({error.reason}); pass --encoding with the file's "
                                 f"encoding.") from None
        return
    name = "utf-8-sig" if codec.name == "utf-8" else encoding  # a byte-order mark is no part of the first record
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield number, raw.decode(name if number == 1 else encoding)
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}: line {number} is not {encoding} text ({error.reason} at byte "
                                 f"{error.start} of the line); pass --encoding with the file's encoding.") from None


def _document(record: object, fields: CorpusFields, place: str) -> tuple[str, str]:
    """``(id, text)`` of one corpus record, checked; ``place`` names it in an error."""
    if not isinstance(record, dict):
        raise ValueError(f"{place}: expected a JSON object with an id and {fields.text!r}, got "
                         f"{type(record).__name__}.")
    id_field = fields.id or ("_id" if "_id" in record else "id")
    if record.get(id_field) is None:
        raise ValueError(f"{place}: no {id_field!r} field (fields: {sorted(record)}); every document needs an id "
                         f"(pass --id-field NAME if it has another name).")
    text = record.get(fields.text)
    if not isinstance(text, str):
        what = "no" if fields.text not in record else f"a {type(text).__name__} in the"
        raise ValueError(f"{place}: {what} {fields.text!r} field (fields: {sorted(record)}); every document needs a "
                         f"text string (pass --text-field NAME if it has another name).")
    title = record.get(fields.title) if fields.title else None
    if isinstance(title, str) and title:
        text = f"{title} {text}"
    return str(record[id_field]), text.strip()


def _parquet(path: str | os.PathLike):
    """The ``pyarrow.parquet.ParquetFile`` of ``path``; ``ValueError`` without pyarrow or for a file it cannot
    read."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"--corpus {path}: reading Parquet needs pyarrow: pip install 'bertkit[data]'.") from None
    try:
        return pq.ParquetFile(path)
    except Exception as error:  # pyarrow's own errors: one line naming the file
        raise ValueError(f"--corpus {path}: not a readable Parquet file ({error}).") from None


def _read_parquet(path: Path, fields: CorpusFields, skip: int) -> Iterator[tuple[str, str]]:
    parquet = _parquet(path)
    names = parquet.schema_arrow.names
    id_field = fields.id or ("_id" if "_id" in names else "id")
    for name in (id_field, fields.text):
        if name not in names:
            raise ValueError(f"{path}: no {name!r} column (columns: {names}); pass --id-field / --text-field with "
                             f"the corpus's column names.")
    columns = [id_field, fields.text] + ([fields.title] if fields.title in names else [])
    row = 0
    for batch in parquet.iter_batches(batch_size=8192, columns=columns):
        for record in batch.to_pylist():
            row += 1
            if row > skip:
                yield _document(record, fields, f"{path}: row {row}")


def count_documents(path: str | os.PathLike) -> int:
    """How many documents the corpus file holds (non-blank lines; Parquet: its row count), for progress."""
    if corpus_format(path) == "parquet":
        return _parquet(path).metadata.num_rows
    count = 0
    with open(path, "rb") as f:
        for line in f:
            count += bool(line.strip())
    return count


def model_fingerprint(directory: str | os.PathLike) -> str:
    """``"NAME sha256:DIGEST"``: the model directory's name and a digest of its files (names and bytes; a README
    aside), so an index records exactly which model built it and a search with another is refused."""
    directory = Path(directory)
    digest = hashlib.sha256()
    for file in sorted(p for p in directory.rglob("*") if p.is_file() and p.name.lower() != "readme.md"):
        digest.update(str(file.relative_to(directory)).encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 24), b""):
                digest.update(block)
    return f"{directory.resolve().name} sha256:{digest.hexdigest()[:16]}"


def checked_corpus(corpus: str | os.PathLike, chunk_documents: int = 1) -> tuple[Path, int]:
    """``(path, documents)`` of a corpus file to be read ``chunk_documents`` at a time; ``ValueError`` naming
    ``--corpus`` if it is missing or empty, ``--chunk-documents`` if it is below 1."""
    if chunk_documents < 1:
        raise ValueError(f"--chunk-documents must be at least 1, got {chunk_documents}.")
    corpus = Path(corpus)
    if not corpus.is_file():
        raise ValueError(f"--corpus {corpus}: no such file.")
    total = count_documents(corpus)
    if total == 0:
        raise ValueError(f"--corpus {corpus}: no documents; the corpus needs at least one record.")
    return corpus, total


def corpus_info(corpus: Path, fields: CorpusFields) -> dict:
    """What an index records of the corpus it was built from (a resumed build must be given the same)."""
    return {"corpus": corpus.name, "corpus_bytes": corpus.stat().st_size,
            "fields": [fields.id, fields.text, fields.title]}


def corpus_chunks(path: str | os.PathLike, fields: CorpusFields, *, encoding: str = "utf-8", skip: int = 0,
                  size: int = 1024) -> Iterator[list[tuple[str, str]]]:
    """:func:`read_corpus`'s ``(id, text)`` documents from the ``skip``-th on, ``size`` at a time (the last list
    may be shorter): what an index builder encodes and adds at once (:func:`checked_corpus` checks ``size``)."""
    chunk: list[tuple[str, str]] = []
    for document in read_corpus(path, fields, encoding=encoding, skip=skip):
        chunk.append(document)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build_sparse_corpus_index(encode: EncodeSparse, corpus: str | os.PathLike, directory: str | os.PathLike, *,
                              vocab_size: int, model: str, fields: CorpusFields = CorpusFields(),
                              encoding: str = "utf-8", batch_size: int = 32, chunk_documents: int = 1024,
                              max_postings: int = 10_000_000, resume: bool = False,
                              progress: bool = True) -> SparseIndex:
    """The :class:`~bertkit.retrieval.sparse.SparseIndex` in ``directory`` of the corpus file ``corpus`` (see the
    module docstring), each document encoded by ``encode`` (texts -> sparse vectors of width ``vocab_size``, made
    by ``model``) and stored with its id. ``resume``: continue an unfinished build of the same corpus and model
    in ``directory``. ``ValueError`` naming the file for an empty corpus or a bad record."""
    corpus, total = checked_corpus(corpus, chunk_documents)
    writer = SparseIndexWriter(directory, vocab_size, model, max_postings=max_postings, resume=resume,
                               info=corpus_info(corpus, fields))
    with progress_bar(total=total, initial=writer.documents, unit="doc", desc="index", disable=not progress) as bar:
        for chunk in corpus_chunks(corpus, fields, encoding=encoding, skip=writer.documents, size=chunk_documents):
            ids, texts = zip(*chunk)
            writer.add(encode_sparse_sorted(encode, list(texts), batch_size, vocab_size, f"--corpus {corpus}"), ids)
            bar.update(len(chunk))
    return writer.finish()
