"""A corpus as input shards: runs of at most ``shard_rows`` rows of one file, numbered, with stable row ranges.

CORPUS is files, directories (every corpus file in them, sorted) or glob patterns, as data creation takes them
(:func:`bertkit.data.partitions.expand_inputs`, plus ``.csv`` / ``.tsv`` files in a directory). What a file holds is
told from its content (:func:`bertkit.data.sniff.sniff_format`). A row is: a line of a text file (a blank line too:
it is embedded as the empty text, so rows line up with lines); a non-blank line of a JSON-lines file (its
``text_column``); a record of a CSV / TSV table (header first); a row of a Parquet file or an Arrow stream.

A row's default id is its position in the corpus: lines of text and JSON-lines files (a blank JSON line's number
is left unused), records of tables, counted across the files in order from 0. So an id names one row of the
corpus for as long as the corpus is unchanged (the plan records each file's size and modification time, and a
resume refuses a changed corpus). With ``id_column`` the row's own id is kept (as text) instead.

Planning reads each text file once, counting lines a block at a time (memory bounded); an uncompressed text or
JSON-lines file in an ASCII-compatible encoding is cut at line starts into byte ranges, so a worker seeks to its
shard. A compressed file, another encoding and a CSV / TSV table (its quoted fields may span lines) are read from
their start by each of their shards, skipping the rows before; Parquet and Arrow shards are row ranges.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.corpus import COMPRESSION, decoding_error, open_bytes, unreadable_error
from bertkit.data.partitions import expand_inputs, pyarrow_module
from bertkit.data.sniff import format_error, sniff_format

#: what each file kind is read as; tables are csv / tsv
KINDS = ("text", "jsonl", "csv", "tsv", "parquet", "arrow")
#: suffixes (before compression) of the files a directory contributes
SUFFIXES = (".txt", ".text", ".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".arrow")
_BLOCK = 1 << 22
#: the record of a text file's row (it has none); shared, never changed
_NO_RECORD: dict = {}


@dataclass(frozen=True)
class InputShard:
    """Input shard ``ordinal``: ``rows`` rows (lines, for text and JSON lines) of ``path`` from its row
    ``first_row`` (0-based; ``row``: the same row's position in the whole corpus), read as ``kind``; ``start`` /
    ``end`` the byte range holding them where the file is cut into byte ranges (else 0 / None: read from the
    start, skipping ``first_row`` rows)."""

    ordinal: int
    path: str
    kind: str
    first_row: int
    rows: int
    row: int
    start: int = 0
    end: int | None = None

    @property
    def name(self) -> str:
        return f"part-{self.ordinal:05d}"

    def describe(self) -> str:
        """``shard 3 (FILE rows 100-199)``, for messages."""
        unit = "lines" if self.kind in ("text", "jsonl") else "rows"
        return f"shard {self.ordinal} ({self.path} {unit} {self.first_row}-{self.first_row + self.rows - 1})"


@dataclass(frozen=True)
class ReadOptions:
    """How rows are read: the ``text_column`` of JSON lines and tables, the ``id_column`` (None: row positions),
    the files' ``encoding``."""

    text_column: str = "text"
    id_column: str | None = None
    encoding: str = "utf-8"


def corpus_files(inputs: list[str]) -> list[str]:
    """The files of ``inputs`` in order (directories: their corpus files, sorted, as data creation lists them, plus
    CSV / TSV tables); ValueError naming an input that holds none."""
    files: list[str] = []
    for item in inputs:
        if os.path.isdir(item) and not os.path.isfile(os.path.join(item, "state.json")):
            found = sorted(str(p) for p in Path(item).rglob("*") if p.is_file() and not p.name.startswith(".")
                           and _base_suffix(p) in SUFFIXES)
            if not found:
                raise ValueError(f"--input {item} holds no corpus files ({', '.join(SUFFIXES)}, possibly compressed "
                                 f"{', '.join(COMPRESSION)}); pass a directory of them, or the files.")
            files += found
        else:
            files += expand_inputs(item)
    return files


def _base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSION:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def file_kind(path: str, encoding: str) -> str:
    """What ``path`` holds, one of :data:`KINDS`; one JSON document is refused."""
    found = sniff_format(path, encoding)
    if found == "json":
        raise format_error(path, found, "a corpus to embed is text, JSON lines, CSV, Parquet or Arrow",
                           "write one JSON object per line (JSON lines)")
    return found


def identity(path: str) -> dict[str, Any]:
    """A file as the plan knows it: its path, size and modification time."""
    stat = os.stat(path)
    return {"path": os.path.abspath(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def plan_shards(files: list[str], shard_rows: int, read: ReadOptions) -> Iterator[InputShard]:
    """The input shards of ``files`` in order (module doc): each file's rows counted, cut every ``shard_rows``."""
    if type(shard_rows) is not int or shard_rows < 1:
        raise ValueError(f"--shard-rows must be a positive integer, got {shard_rows!r}.")
    ordinal = row = 0
    for path in files:
        kind = file_kind(path, read.encoding)
        for first, rows, start, end in _file_pieces(path, kind, shard_rows, read):
            yield InputShard(ordinal, path, kind, first, rows, row, start, end)
            ordinal, row = ordinal + 1, row + rows


def _file_pieces(path: str, kind: str, shard_rows: int, read: ReadOptions) -> Iterator[tuple]:
    """``(first_row, rows, start, end)`` of each piece of one file."""
    if kind in ("parquet", "arrow"):
        total = _table_rows(path, kind, read)
        yield from ((first, min(shard_rows, total - first), 0, None) for first in range(0, total, shard_rows))
    elif kind in ("text", "jsonl") and _seekable(path, read.encoding):
        yield from _line_ranges(path, shard_rows)
    else:
        total = sum(1 for _ in read_rows(path, kind, read, 0, None))
        yield from ((first, min(shard_rows, total - first), 0, None) for first in range(0, total, shard_rows))


def _seekable(path: str, encoding: str) -> bool:
    """Whether lines end at ``\\n`` bytes that a worker can seek to: uncompressed, an ASCII-compatible encoding."""
    name = codecs.lookup(encoding).name
    return Path(path).suffix.lower() not in COMPRESSION and "\n".encode(name) == b"\n" \
        and not name.startswith(("utf-16", "utf-32"))


def _line_ranges(path: str, shard_rows: int) -> Iterator[tuple[int, int, int, int | None]]:
    """Cut a file after every ``shard_rows`` lines, finding the ``\n`` bytes a block at a time (numpy); a last line
    without its ``\n`` counts. The last piece's end is None (to the end of the file)."""
    first = start = lines = offset = 0
    last = b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            at = shard_rows - lines - 1  # the newline (of this block) that ends the current piece
            while at < len(ends):
                end = offset + int(ends[at]) + 1
                yield first, shard_rows, start, end
                first, start, at = first + shard_rows, end, at + shard_rows
            lines = len(ends) - at + shard_rows - 1
            offset, last = offset + len(block), block[-1:]
    lines += last != b"\n"
    if lines:
        yield first, lines, start, None


def _table_rows(path: str, kind: str, read: ReadOptions) -> int:
    """The rows of a Parquet or Arrow file, its columns checked."""
    pa = pyarrow_module("parquet" if kind == "parquet" else "ipc", path)
    try:
        if kind == "parquet":
            metadata = pa.ParquetFile(path).metadata
            names, total = [metadata.schema.column(i).name for i in range(metadata.num_columns)], metadata.num_rows
        else:
            with pa.memory_map(path) as source:
                reader = pa.ipc.open_stream(source)
                names, total = reader.schema.names, sum(batch.num_rows for batch in reader)
    except Exception as error:  # pyarrow.ArrowInvalid: cut short, or another format
        raise ValueError(f"{path} is not a readable {kind.title()} file ({error}): truncated, or another format "
                         "under its name? Fetch it again or leave it out.") from None
    for flag, column in (("--text-column", read.text_column), ("--id-column", read.id_column)):
        if column is not None and column not in names:
            raise ValueError(f"{path}: no column {column!r} (columns: {names}); pass the column that holds the "
                             f"{'text' if flag == '--text-column' else 'ids'} ({flag}).")
    return total


# ---------------------------------------------------------------------------- reading

def shard_rows(shard: InputShard, read: ReadOptions) -> Iterator[tuple[Any, str]]:
    """``(id, text)`` of each row of ``shard``, in order; each bad row a ValueError naming the file and its line or
    row (and the flag that fixes it)."""
    for row_id, text, _ in shard_rows_where(shard, read):
        yield row_id, text


def shard_rows_where(shard: InputShard, read: ReadOptions) -> Iterator[tuple[Any, str, int]]:
    """:func:`shard_rows` with each row's position in its file (:func:`where` says it in words)."""
    ids = iter(range(shard.row, shard.row + shard.rows))
    for position, record, text in read_rows(shard.path, shard.kind, read, shard.first_row, shard.rows, shard.start):
        number = next(ids)
        if text is None:  # a blank JSON line: no row, its number unused
            continue
        if read.id_column is None:
            yield number, text, position
        else:
            yield _row_id(record, read.id_column, shard.path, where(shard.kind, position)), text, position


def where(kind: str, position: int) -> str:
    """``line N`` (1-based) of a text or JSON-lines file, ``row N`` (0-based) of a table."""
    return f"line {position}" if kind in ("text", "jsonl") else f"row {position}"


def _row_id(record: dict, column: str, path: str, where: str) -> str:
    value = record.get(column)
    if value is None or isinstance(value, (dict, list)):
        raise ValueError(f"{path}, {where}: no id in {column!r} (found: {sorted(record)}); every row needs an id in "
                         "--id-column (or leave --id-column out: ids are then row positions).")
    return str(value)


def read_rows(path: str, kind: str, read: ReadOptions, first: int, count: int | None,
              start: int = 0) -> Iterator[tuple[str, dict, str | None]]:
    """``(position, record, text)`` for ``count`` rows (None: all) of a file from its row ``first`` (at byte ``start``
    where it was cut into byte ranges); ``position`` is the 1-based line of a text or JSON-lines file, the 0-based
    row of a table (:func:`where`); ``text`` None for a blank JSON line. A text file's rows have no record."""
    if kind in ("parquet", "arrow"):
        yield from _table_rows_of(path, kind, read, first, count)
        return
    if kind in ("csv", "tsv"):
        yield from _csv_rows(path, kind, read, first, count)
        return
    lines = _lines(path, read.encoding, start, skip=0 if start else first)
    for number, line in zip(range(first + 1, first + 1 + count) if count is not None else _count(first + 1), lines):
        if kind == "text":
            yield number, _NO_RECORD, line.rstrip("\r\n")
        elif not line.strip():
            yield number, _NO_RECORD, None
        else:
            record = _json_record(line, path, number)
            yield number, record, _text(record, read.text_column, path, f"line {number}")


def _count(start: int) -> Iterator[int]:
    while True:
        yield start
        start += 1


def _lines(path: str, encoding: str, start: int, skip: int) -> Iterator[str]:
    """The lines of a file from byte ``start`` (``\\n``-ended, BOM dropped), the first ``skip`` left out; a byte
    that is not ``encoding`` text is a ValueError naming the file and its offset."""
    name = codecs.lookup(encoding).name
    codec = "utf-8-sig" if name == "utf-8" and start == 0 else encoding
    try:
        with open_bytes(path) as raw:
            raw.seek(start)
            text = io.TextIOWrapper(raw, encoding=codec, errors="strict", newline="")
            try:
                for number, line in enumerate(text):
                    if number >= skip:
                        yield line
            except UnicodeDecodeError as error:
                raise decoding_error(path, encoding, codec, error) from None
    except (ValueError, GeneratorExit):
        raise
    except Exception as error:  # EOFError, gzip.BadGzipFile, lzma.LZMAError, OSError
        raise unreadable_error(path, error) from None


def _json_record(line: str, path: str, number: int) -> dict:
    import json

    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}, line {number}: not JSON ({error.msg}); a .jsonl corpus holds one JSON object per "
                         "line.") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}, line {number}: a JSON {type(record).__name__}, not an object; a .jsonl corpus "
                         "holds one JSON object per line.")
    return record


def _text(record: dict, column: str, path: str, where: str) -> str:
    text = record.get(column)
    if not isinstance(text, str):
        found = f"found: {sorted(record)}" if text is None else f"it holds {type(text).__name__}"
        raise ValueError(f"{path}, {where}: no text in {column!r} ({found}); pass the column that holds the text "
                         "(--text-column), or drop the row.")
    return text


def _csv_rows(path: str, kind: str, read: ReadOptions, first: int, count: int | None) -> Iterator:
    reader = csv.DictReader(_lines(path, read.encoding, 0, 0), delimiter="\t" if kind == "tsv" else ",")
    names = reader.fieldnames or []
    for flag, column in (("--text-column", read.text_column), ("--id-column", read.id_column)):
        if column is not None and column not in names:
            raise ValueError(f"{path}: no column {column!r} in its header (columns: {names}); pass the column that "
                             f"holds the {'text' if flag == '--text-column' else 'ids'} ({flag}).")
    for number, record in enumerate(reader):
        if number < first:
            continue
        if count is not None and number >= first + count:
            return
        if record.get(read.text_column) is None:
            raise ValueError(f"{path}, row {number} (line {reader.line_num}): the row ends before column "
                             f"{read.text_column!r}; fix the row or its quoting.")
        yield number, record, record[read.text_column]


def _table_rows_of(path: str, kind: str, read: ReadOptions, first: int, count: int | None) -> Iterator:
    pa = pyarrow_module("parquet" if kind == "parquet" else "ipc", path)
    columns = [read.text_column] + ([read.id_column] if read.id_column not in (None, read.text_column) else [])
    if kind == "parquet":
        batches = pa.ParquetFile(path).iter_batches(columns=columns, batch_size=4096)
        yield from _batch_rows(batches, path, read, first, count)
        return
    with pa.memory_map(path) as source:  # batches before the shard's are mapped, never read
        yield from _batch_rows(iter(pa.ipc.open_stream(source)), path, read, first, count)


def _batch_rows(batches: Iterator, path: str, read: ReadOptions, first: int, count: int | None) -> Iterator:
    end = None if count is None else first + count
    offset = 0
    for batch in batches:
        low, high = max(first - offset, 0), batch.num_rows if end is None else min(end - offset, batch.num_rows)
        if low < high:
            part = batch.slice(low, high - low).to_pydict()
            for i, text in enumerate(part[read.text_column]):
                record = {key: values[i] for key, values in part.items()}
                if not isinstance(text, str):
                    raise ValueError(f"{path}, row {offset + low + i}: {read.text_column!r} holds "
                                     f"{type(text).__name__}, not text; pass the column that holds the text "
                                     "(--text-column), or drop the row.")
                yield offset + low + i, record, text
        offset += batch.num_rows
        if end is not None and offset >= end:
            return


def plan_record(shards: list[InputShard]) -> list[dict[str, Any]]:
    """The shards as JSON, for the plan file."""
    return [asdict(shard) for shard in shards]
