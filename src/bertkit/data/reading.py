"""Reading a partition's documents: byte ranges of text and JSON-lines files, Parquet row groups, Arrow
streams, documents from Python. This is what a data-creation worker runs (no torch here).

A byte range of a blank-line layout owns the documents that follow a blank line starting in it (and,
from offset 0, the first); a byte range of a JSON-lines file owns the lines that start in it. So the
ranges of a file read exactly the documents of the whole file, whatever the cut points.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from bertkit.data.corpus import (
    decoding_error,
    jsonl_document,
    line_too_long,
    read_documents,
    rest_of_line,
    split_sentences,
    text_document,
)
from bertkit.data.partitions import Partition, Piece, ReadSettings, plan_partitions, pyarrow_module


def partition_documents(partition: Partition, read: ReadSettings, *,
                        max_line_bytes: int | None = None) -> Iterator[list[str]]:
    """The documents of ``partition`` (lists of sentences, empty ones skipped), piece after piece. A line of a
    file (or a Parquet / Arrow cell) longer than ``max_line_bytes`` is refused before it is held whole."""
    for piece in partition.pieces:
        yield from _piece_documents(piece, read, max_line_bytes)


def _piece_documents(piece: Piece, read: ReadSettings, limit: int | None) -> Iterator[list[str]]:
    if piece.kind == "memory":
        for item in piece.items:
            if isinstance(item, str) and piece.layout is not None:  # a text in memory: read as a file would be
                yield from read_documents(item, piece.layout, read.encoding)
            else:
                document = text_document(item) if isinstance(item, str) else [s.strip() for s in item if s.strip()]
                if document:
                    yield document
    elif piece.kind == "parquet" or piece.kind == "arrow":
        yield from _table_documents(piece, read.text_field, limit)
    elif piece.start == 0 and piece.end is None:  # a whole text or JSON-lines file, possibly compressed
        layout = "paragraphs" if piece.layout == "blocks" else piece.layout or "auto"
        yield from read_documents(Path(piece.path), layout, read.encoding, read.text_field, max_line_bytes=limit)
    elif piece.kind == "jsonl":  # a byte range of an uncompressed file
        yield from _jsonl_range(piece, read, limit)
    else:
        yield from _blank_line_range(piece, read.encoding, limit)


def _range_lines(path: str, start: int, encoding: str, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """``(offset, line)`` for every line that starts at or after byte ``start`` of an uncompressed file; a line
    of more than ``limit`` bytes is refused (:func:`~bertkit.data.corpus.line_too_long`), never held whole."""
    codec = "utf-8" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # the end of the line that began before start (just "\n" if one ended there)
        offset = f.tell()
        size = -1 if limit is None else limit + 1
        for raw in iter(lambda: f.readline(size), b""):
            if limit is not None and len(raw) > limit:
                rest = rest_of_line(f.readline, limit)
                raise line_too_long(_line_at(path, offset), len(raw) + rest, limit)
            try:
                line = raw.decode(codec)
            except UnicodeDecodeError as error:
                raise decoding_error(path, encoding, codec, error) from None
            yield offset, (line.lstrip("\ufeff") if offset == 0 else line)
            offset += len(raw)


def _blank_line_range(piece: Piece, encoding: str, limit: int | None = None) -> Iterator[list[str]]:
    """The documents of a byte range of a blank-line layout: those following a blank line that starts in the
    range (and, from offset 0, the first); the last one read to its end, past the range."""
    def lines() -> Iterator[str]:
        inside = piece.start == 0
        for offset, line in _range_lines(piece.path, piece.start, encoding, limit):
            if not line.strip():
                if piece.end is not None and offset >= piece.end:
                    return
                inside = True
            if inside:
                yield line

    block: list[str] = []
    for line in itertools.chain(lines(), [""]):
        line = line.strip()
        if line:
            block.append(line)
        elif block:
            document = block if piece.layout == "google" else [s for p in block for s in split_sentences(p)]
            if document:
                yield document
            block = []


def _jsonl_range(piece: Piece, read: ReadSettings, limit: int | None = None) -> Iterator[list[str]]:
    for offset, line in _range_lines(piece.path, piece.start, read.encoding, limit):
        if piece.end is not None and offset >= piece.end:
            return
        document = jsonl_document(line, read.text_field, lambda offset=offset: _line_at(piece.path, offset))
        if document:
            yield document


def _line_at(path: str, offset: int) -> str:
    """``"FILE, line N"`` for the line starting at byte ``offset`` (counted only when an error needs it)."""
    newlines = 0
    with open(path, "rb") as f:
        while offset > 0:
            chunk = f.read(min(offset, 1 << 20))
            newlines += chunk.count(b"\n")
            offset -= len(chunk)
    return f"{path}, line {newlines + 1}"


def _table_documents(piece: Piece, text_field: str, limit: int | None = None) -> Iterator[list[str]]:
    """Rows of a Parquet row group range or an Arrow stream file: a document per row."""
    if piece.kind == "parquet":
        pq = pyarrow_module("parquet", piece.path)
        groups = list(range(piece.start, piece.end))
        batches = pq.ParquetFile(piece.path).iter_batches(row_groups=groups, columns=[text_field], batch_size=1024)
        where = f"row group {piece.start}" if len(groups) == 1 else f"row groups {piece.start}-{piece.end - 1}"
        yield from _column_documents(batches, text_field, f"{piece.path}, {where}", limit)
        return
    pa = pyarrow_module("ipc", piece.path)
    with pa.memory_map(piece.path) as source:
        yield from _column_documents(iter(pa.ipc.open_stream(source)), text_field, piece.path, limit)


def _column_documents(batches: Iterator, text_field: str, where: str,
                      limit: int | None = None) -> Iterator[list[str]]:
    rows = itertools.count()
    for batch in batches:
        for text, row in zip(batch.column(text_field).to_pylist(), rows):  # the list first: zip stops on it
            if not isinstance(text, str):
                raise ValueError(f"{where}, row {row}: {text_field!r} holds {type(text).__name__}, not text; "
                                 "pass the column that holds the text (--text-field), or drop the empty rows.")
            if limit is not None and len(text) > limit:
                raise line_too_long(f"{where}, row {row}", len(text.encode()), limit)
            document = text_document(text)
            if document:
                yield document


def select_documents(documents: Iterator[list[str]], every: int | None, heldout: bool) -> Iterator[list[str]]:
    """Hold out every ``every``-th document of a partition (its 0th, ``every``-th, ...): those alone with
    ``heldout``, the others without; all of them when ``every`` is None."""
    for number, document in enumerate(documents):
        if every is None or (number % every == 0) == heldout:
            yield document


def sample_texts(sources: list, sample_bytes: int, read: ReadSettings, partition_bytes: int,
                 heldout_every: int | None = None) -> list[str]:
    """About ``sample_bytes`` of the corpus's training documents (each a text, its sentences on lines), for
    learning a vocabulary: whole partitions spread evenly over the corpus (every k-th, k = input bytes /
    ``sample_bytes``; then the ones after those, while the text is short of ``sample_bytes``: JSON or Parquet
    bytes hold less text than their size), read with the readers data creation uses; held-out documents
    (``heldout_every``) are left out. Files only (a stream of
    :class:`~bertkit.data.partitions.Documents` would be consumed)."""
    if any(not isinstance(source, str) for source in sources):
        raise ValueError("a tokenizer sample is read from files and texts, not from Documents(...) (a stream "
                         "read once); train the tokenizer on an iterator of texts instead.")
    partitions = list(plan_partitions(sources, partition_bytes, read))
    total = sum(partition.size for partition in partitions)
    stride = max(1, -(-total // max(1, sample_bytes)))
    texts, size = [], 0
    for partition in (p for offset in range(stride) for p in partitions[offset::stride]):
        for document in select_documents(partition_documents(partition, read), heldout_every, heldout=False):
            texts.append("\n".join(document))
            size += len(texts[-1])
            if size >= sample_bytes:
                return texts
    return texts
