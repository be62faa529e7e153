"""A corpus as partitions: the units that data creation tokenizes, pairs and writes one at a time.

:func:`expand_inputs` turns what a user names into sources: files, directories (every corpus
file in them, sorted), glob patterns (``"shards/*.jsonl.gz"``), a directory written by
``datasets.save_to_disk`` (its Arrow files), texts in memory and :class:`Documents` (any iterable
of documents, from Python). Kinds, by suffix (before a ``.gz`` / ``.bz2`` / ``.xz`` / ``.zst``):

- text (``.txt`` and anything else): a layout per file (``bertkit.data.corpus``), decided from
  its head and said in one log line;
- ``.jsonl``: a document per line, its ``text_field``;
- ``.parquet``: a document per row, its ``text_field`` column, read a row group at a time
  (pyarrow, the ``data`` extra);
- ``.arrow``: an Arrow stream as ``datasets`` writes it, a document per row.

:func:`plan_partitions` cuts the sources into :class:`Partition` s of about ``partition_bytes``
input bytes: consecutive small files share a partition; a large uncompressed text file whose
documents end at blank lines (Google's layout, paragraph blocks), or a JSON-lines file, is cut
into byte ranges; a Parquet file into runs of row groups. A byte range owns the documents that
start in it (for blank-line layouts: that follow a blank line starting in it; the first range
also the file's first document), so the ranges of a file read exactly the documents of the whole
file. A compressed file, a book (documents at chapter headings) or an Arrow file is one piece.
The plan depends only on the inputs and ``partition_bytes``: never on the number of workers.
:func:`bertkit.data.reading.partition_documents` reads one partition; it runs in a worker.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.data.corpus import (
    COMPRESSION,
    FORMATS,
    HEAD_LINES,
    _file_lines,
    blocks_are_documents,
    detect_format,
    is_file,
    refuse_noise,
)
from bertkit.data.sniff import format_error, sniff_format

logger = logging.getLogger("bertkit.data")

#: suffixes (before compression) of the files a directory contributes
CORPUS_SUFFIXES = (".txt", ".text", ".jsonl", ".parquet", ".arrow")
#: layouts whose documents end at blank lines: a file in them can be cut into byte ranges
_BLANK_LINE_LAYOUTS = ("google", "blocks")
_LAYOUT_WORDS = {"google": "one sentence per line, a blank line between documents (google)",
                 "prose": "prose: paragraphs between blank lines, documents at chapter headings",
                 "paragraphs": "one paragraph per line, documents at chapter headings (paragraphs)",
                 "blocks": "one paragraph per line, a document per blank-line separated block (paragraphs)"}


class Documents:
    """Documents from Python, for :func:`bertkit.data.create_pretraining_data`: any iterable (a list, a
    generator, a ``datasets`` column) whose items are a document's text (a string: its lines are paragraphs,
    split into sentences) or its sentences (a list of strings). Read once, in order, by the creating process."""

    def __init__(self, documents: Iterable[str | Sequence[str]], name: str = "documents"):
        self.documents, self.name = documents, name

    def __repr__(self) -> str:
        return f"Documents({self.name!r})"


@dataclass(frozen=True)
class Piece:
    """Part of one source: ``kind`` "text", "jsonl", "parquet", "arrow" or "memory"; ``start`` / ``end``
    a byte range (text, JSON lines; ``end`` None: to the end) or row groups (Parquet); ``layout`` of a text
    file; ``size`` the input bytes it stands for (progress); ``items`` the documents of a memory piece."""

    kind: str
    path: str | None = None
    start: int = 0
    end: int | None = None
    layout: str | None = None
    size: int = 0
    items: tuple = ()

    def describe(self) -> str:
        """What the piece reads, in words: a file's byte range or row groups, or documents from Python."""
        if self.kind == "memory":
            return f"{len(self.items)} documents given in memory"
        if self.kind == "parquet":
            if self.end == self.start + 1:
                return f"{self.path} row group {self.start}"
            return f"{self.path} row groups {self.start}-{self.end - 1}"
        if self.start == 0 and self.end is None:
            return self.path
        return f"{self.path} bytes {self.start}-{'end' if self.end is None else self.end - 1}"

    def identity(self) -> dict[str, Any]:
        """What this piece reads, for fingerprints: the file (path, size, modification time) and the range,
        or a hash of the documents."""
        if self.kind == "memory":
            digest = hashlib.sha256(json.dumps(self.items, ensure_ascii=False).encode()).hexdigest()
            return {"kind": "memory", "sha256": digest, "documents": len(self.items)}
        stat = os.stat(self.path)
        return {"kind": self.kind, "path": os.path.abspath(self.path), "bytes": stat.st_size,
                "mtime_ns": stat.st_mtime_ns, "start": self.start, "end": self.end, "layout": self.layout}


@dataclass(frozen=True)
class Partition:
    """Partition ``ordinal`` of a plan: its pieces, read in order."""

    ordinal: int
    pieces: tuple[Piece, ...] = field(default=())

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def describe(self) -> str:
        """``partition N (FILE bytes A-B, ...)``, for errors."""
        return f"partition {self.ordinal} ({', '.join(piece.describe() for piece in self.pieces)})"


@dataclass(frozen=True)
class ReadSettings:
    """How sources are read: ``format`` (``"auto"`` or a layout), the files' ``encoding``, the JSON-lines /
    Parquet / Arrow ``text_field``."""

    format: str = "auto"
    encoding: str = "utf-8"
    text_field: str = "text"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}.")
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ValueError(f"text_field must be a column / field name, got {self.text_field!r}.")


# ---------------------------------------------------------------------------- inputs

def expand_inputs(inputs: str | os.PathLike | Documents | Iterable[str | os.PathLike | Documents]) -> list:
    """Files (``str`` paths), texts in memory (``str`` with a line break) and :class:`Documents`, in order:
    directories and glob patterns expanded (sorted). ValueError for a path that names nothing, a glob that
    matches nothing, a directory without corpus files, or a ``DatasetDict`` directory (pass one split)."""
    if isinstance(inputs, (str, os.PathLike, Documents)):
        inputs = [inputs]
    sources: list = []
    for item in inputs:
        if isinstance(item, Documents) or (isinstance(item, str) and ("\n" in item or "\r" in item)):
            sources.append(item)
        elif not isinstance(item, (str, os.PathLike)):
            raise ValueError(f"an input must be a file, a directory, a glob pattern, a text or bertkit.data."
                             f"Documents(...), got {type(item).__name__}.")
        elif os.path.isdir(item):
            sources.extend(_directory_files(Path(item)))
        elif os.path.isfile(item):
            sources.append(os.fspath(item))
        elif isinstance(item, str) and glob.has_magic(item):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise ValueError(f"the glob pattern {item!r} matches no file; check the pattern (quote it so the "
                                 "shell does not expand it) and the directory.")
            sources.extend(matches)
        else:
            raise ValueError(f"no such file or directory: {os.fspath(item)}")
    return sources


def _directory_files(directory: Path) -> list[str]:
    if (directory / "dataset_dict.json").is_file():
        splits = json.loads((directory / "dataset_dict.json").read_text()).get("splits", [])
        raise ValueError(f"{directory} is a datasets DatasetDict (splits {splits}); pass one split's directory, "
                         f"e.g. {directory / (splits[0] if splits else 'train')}.")
    if (directory / "state.json").is_file():  # datasets.save_to_disk
        state = json.loads((directory / "state.json").read_text())
        files = [str(directory / f["filename"]) for f in state.get("_data_files", [])]
        if files:
            return files
    files = sorted(str(p) for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and _base_suffix(p) in CORPUS_SUFFIXES)
    if not files:
        raise ValueError(f"{directory} holds no corpus files ({', '.join(CORPUS_SUFFIXES)}, possibly compressed "
                         f"{', '.join(COMPRESSION)}).")
    return files


def _base_suffix(path: str | os.PathLike) -> str:
    """The suffix before a compression suffix: ``a.jsonl.gz`` -> ``.jsonl``."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSION:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _kind(path: str, encoding: str) -> str:
    """``"jsonl"``, ``"parquet"``, ``"arrow"`` or ``"text"``: what the file holds, whatever its name
    (:func:`~bertkit.data.sniff.sniff_format`; a table is text); one JSON document is refused."""
    found = sniff_format(path, encoding)
    if found == "json":
        raise format_error(path, found, "a corpus is text, JSON lines, Parquet or Arrow",
                           "write one JSON object per line (JSON lines)")
    return found if found in ("jsonl", "parquet", "arrow") else "text"


# ---------------------------------------------------------------------------- planning

def plan_partitions(sources: Sequence, partition_bytes: int, read: ReadSettings, *,
                    max_line_bytes: int | None = None) -> Iterator[Partition]:
    """The partitions of ``sources`` (from :func:`expand_inputs`), lazily and in order (see the module doc). A
    text file whose head (read for its layout) has a line longer than ``max_line_bytes`` is refused
    (:func:`bertkit.data.corpus.line_too_long`)."""
    if partition_bytes < 1:
        raise ValueError(f"partition_bytes must be >= 1, got {partition_bytes}.")
    ordinal = itertools.count()
    pending: list[Piece] = []
    room = partition_bytes

    def flush() -> Iterator[Partition]:
        nonlocal room
        if pending:
            yield Partition(next(ordinal), tuple(pending))
        pending.clear()
        room = partition_bytes

    for source in sources:
        if isinstance(source, Documents):
            yield from flush()
            for chunk in _document_chunks(source, partition_bytes):
                yield Partition(next(ordinal), (chunk,))
            continue
        for piece, splittable in _pieces(source, read, max_line_bytes):
            if not splittable:
                pending.append(piece)
                room -= piece.size
            else:
                start = piece.start
                while piece.size - start > room:
                    pending.append(replace(piece, start=start, end=start + room, size=room))
                    start += room
                    yield from flush()
                pending.append(replace(piece, start=start, end=None, size=piece.size - start))
                room -= piece.size - start
            if room <= 0:
                yield from flush()
    yield from flush()


def _pieces(source: str, read: ReadSettings, max_line_bytes: int | None = None) -> Iterator[tuple[Piece, bool]]:
    """A source as pieces, each with whether it may be cut into byte ranges."""
    if not is_file(source):  # a text in memory
        yield Piece("memory", items=(source,), layout=read.format, size=len(source.encode())), False
        return
    size, kind = os.path.getsize(source), _kind(source, read.encoding)
    if size == 0:
        raise ValueError(f"{source} is empty (0 bytes): a truncated download or copy? Remove it from the inputs or "
                         "fetch it again.")
    compressed = Path(source).suffix.lower() in COMPRESSION
    if kind == "parquet":
        yield from ((piece, False) for piece in _parquet_pieces(source, read.text_field))
    elif kind == "arrow":
        _check_arrow_column(source, read.text_field)
        yield Piece("arrow", source, size=size), False
    elif kind == "jsonl":
        yield Piece("jsonl", source, size=size), not compressed
    else:
        refuse_noise(source, read.encoding)
        layout = _text_layout(source, read, max_line_bytes)
        splittable = not compressed and layout in _BLANK_LINE_LAYOUTS and _bytes_split_lines(source, read.encoding)
        yield Piece("text", source, layout=layout, size=size), splittable


def _text_layout(path: str, read: ReadSettings, max_line_bytes: int | None = None) -> str:
    """The file's layout: forced, or decided from its head (and said in a log line, as ``read_documents``)."""
    lines = _file_lines(Path(path), read.encoding, max_line_bytes)
    head = list(itertools.islice(lines, HEAD_LINES))
    lines.close()
    chosen = detect_format(head) if read.format == "auto" else read.format
    if chosen == "paragraphs" and blocks_are_documents(head):
        chosen = "blocks"
    if read.format == "auto":
        logger.info("%s: %s", path, _LAYOUT_WORDS[chosen])
    return chosen


def _bytes_split_lines(path: str, encoding: str) -> bool:
    """Whether the file's lines end at ``\\n`` bytes (an ASCII-compatible encoding, and not old Mac ``\\r``)."""
    try:
        if "\n".encode(encoding) != b"\n" or "é".encode(encoding, "replace").count(b"\n"):
            return False
    except LookupError:
        return False
    if encoding.lower().replace("_", "-").startswith(("utf-16", "utf-32", "utf16", "utf32")):
        return False
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return b"\n" in head or b"\r" not in head


def _parquet_pieces(path: str, text_field: str) -> Iterator[Piece]:
    pq = pyarrow_module("parquet", path)
    try:
        metadata = pq.ParquetFile(path).metadata
    except Exception as error:  # pyarrow.ArrowInvalid: not Parquet, or cut short
        raise ValueError(f"{path} is not a readable Parquet file ({error}): truncated, or another format named "
                         ".parquet? Fetch it again or leave it out.") from None
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    if text_field not in names:
        raise ValueError(f"{path}: no column {text_field!r} (columns: {names}); pass the column that holds the "
                         "text (--text-field; Python: text_field=...).")
    column = names.index(text_field)
    if metadata.num_rows == 0:
        raise ValueError(f"{path} holds no rows: a truncated or empty Parquet file? Remove it from the inputs.")
    for group in range(metadata.num_row_groups):
        size = metadata.row_group(group).column(column).total_uncompressed_size
        yield Piece("parquet", path, start=group, end=group + 1, size=size)


def _check_arrow_column(path: str, text_field: str) -> None:
    pa = pyarrow_module("ipc", path)
    try:
        with pa.memory_map(path) as source:
            names = pa.ipc.open_stream(source).schema.names
    except Exception as error:  # pyarrow.ArrowInvalid
        raise ValueError(f"{path} is not a readable Arrow stream ({error}), as datasets.save_to_disk writes them; "
                         "fetch it again or leave it out.") from None
    if text_field not in names:
        raise ValueError(f"{path}: no column {text_field!r} (columns: {names}); pass the column that holds the "
                         "text (--text-field; Python: text_field=...).")


def pyarrow_module(part: str, path: str):
    """``pyarrow.parquet`` (``part`` "parquet") or ``pyarrow``; ValueError naming ``path`` without pyarrow."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise ValueError(f"{path} is a Parquet / Arrow file, and reading it needs pyarrow: pip install "
                         "'bertkit[data]' (or pyarrow).") from None
    return pyarrow.parquet if part == "parquet" else pyarrow


def _document_chunks(source: Documents, partition_bytes: int) -> Iterator[Piece]:
    items: list = []
    size = 0
    for number, item in enumerate(source.documents):
        if isinstance(item, str):
            items.append(item)
            size += len(item)
        elif isinstance(item, (list, tuple)) and all(isinstance(s, str) for s in item):
            items.append(list(item))
            size += sum(map(len, item))
        else:
            raise ValueError(f"{source.name}, document {number}: a document must be a text (str) or a list of "
                             f"sentences (str), got {type(item).__name__}.")
        if size >= partition_bytes:
            yield Piece("memory", items=tuple(items), size=size)
            items, size = [], 0
    if items:
        yield Piece("memory", items=tuple(items), size=size)
