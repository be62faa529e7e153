"""Reading labelled tables: CSV, TSV and JSON Lines, row by row with line numbers for error messages.

:func:`read_rows` is what the classification and multiple-choice tasks read their files with;
:func:`iter_rows` yields the same rows as the file is read (the embedding trainers' files can be large).
The format is what the file holds, whatever its name (:func:`bertkit.data.sniff.sniff_format`): JSON
(one JSON object per line, or one JSON list of objects), TSV (tab-separated, no quoting, as GLUE and
Google's readers do: a field may begin with ``"``) or CSV (comma-separated, ``"``-quoted); the name
decides only a one-column table (``.tsv``: TSV, else CSV). Text files may be gzip/bz2/xz compressed
(by suffix) and start with a byte-order mark. A CSV/TSV field may hold up to
:data:`FIELD_LIMIT` characters (Python's csv module stops at 128 KiB).

Errors name the file and line, ``"{path}, line {n}: what is wrong; what to do"``. What a reader
accepts but doubts is a :class:`DataWarning`; :func:`strict_data` turns those into errors.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import lzma
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.corpus import COMPRESSION, decoding_error, unreadable_error
from bertkit.data.sniff import format_error, sniff_format

#: the longest CSV/TSV field read, in characters (a long document in one cell is fine; a file with an
#: unclosed quote is caught well before its end swallows memory)
FIELD_LIMIT = 64 * 1024 * 1024


class DataWarning(UserWarning):
    """Data a reader accepted but doubts (e.g. SQuAD answers that contradict ``is_impossible``).

    Shown as a warning; inside :func:`strict_data` (``--strict``, ``strict=True``) it is an error.
    """


@contextlib.contextmanager
def strict_data(strict: bool = True) -> Iterator[None]:
    """Inside, with ``strict``, a :class:`DataWarning` raises ``ValueError`` with its message (and how to go
    on) instead of being shown; without ``strict`` nothing changes."""
    if not strict:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        try:
            yield
        except DataWarning as warning:
            raise ValueError(f"{warning} (an error under --strict / strict=True: fix the data, or leave strict out "
                             "to go on with a warning)") from None


@dataclass
class Row:
    """One record of a table: its values by column name and the line it starts on (1-based)."""

    values: dict[str, Any]
    line: int


def where(path: str | os.PathLike | None, line: int) -> str:
    """``"{path}, line {line}"``, the start of every row error (``"line {line}"`` when the path is unknown)."""
    return f"{path}, line {line}" if path else f"line {line}"


def table_format(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """``"jsonl"`` (JSON lines or a JSON list), ``"tsv"``, ``"csv"``, ``"parquet"`` or ``"arrow"``: what ``path``
    holds (:func:`~bertkit.data.sniff.sniff_format`); plain text lines are a one-column CSV table."""
    found = sniff_format(path, encoding)
    return {"json": "jsonl", "text": "csv"}.get(found, found)


@contextlib.contextmanager
def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[io.TextIOBase]:
    """``path`` opened for reading text (decompressed by suffix; a BOM is dropped; newlines kept raw). Text
    that is not valid ``encoding`` raises, as it is read, the ValueError of
    :func:`bertkit.data.corpus.decoding_error` (the file, the byte, the fix)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such file: {path}" if not path.exists() else f"{path} is not a file")
    codec = "utf-8-sig" if encoding.lower().replace("-", "") == "utf8" else encoding
    try:
        with COMPRESSION.get(path.suffix.lower(), open)(path, "rt", encoding=codec, newline="") as f:
            yield f
    except UnicodeDecodeError as error:
        raise decoding_error(path, encoding, codec, error) from None
    except (EOFError, OSError, lzma.LZMAError) as error:  # a truncated or corrupt compressed file
        raise unreadable_error(path, error) from None


def read_rows(path: str | os.PathLike, *, header: Sequence[str] | None = None, encoding: str = "utf-8") -> list[Row]:
    """Every record of ``path`` in file order (see the module docstring for formats).

    CSV / TSV files start with a header row naming the columns, unless ``header`` gives the
    names (a file without one, like CoLA's). A CSV/TSV row with another number of fields than
    the header, or a JSON line that is not an object, raises ``ValueError`` naming the file
    and line. Empty lines are skipped.
    """
    return list(iter_rows(path, header=header, encoding=encoding))


def iter_rows(path: str | os.PathLike, *, header: Sequence[str] | None = None,
              encoding: str = "utf-8") -> Iterator[Row]:
    """The records of ``path`` one at a time, as :func:`read_rows` reads them (same rows, same errors, raised
    when the bad record is reached): the file is read as it is iterated, never held whole, except a JSON file
    holding one list of objects (``[...]``), which has to be parsed at once."""
    kind = table_format(path, encoding)
    if kind in ("parquet", "arrow"):
        raise format_error(path, kind, "this reader takes CSV, TSV or JSON lines", "convert it to one of those (e.g. "
                           "pandas.read_parquet(...).to_json(lines=True, orient='records'))")
    with open_text(path, encoding) as f:
        yield from (_json_rows(path, f) if kind == "jsonl" else _delimited_rows(path, f, kind, header))


def _json_rows(path, f) -> Iterator[Row]:
    head = ""
    while not head.strip():  # the first non-blank character tells a list of objects from JSON lines
        chunk = f.read(1 << 12)
        if not chunk:
            break
        head += chunk
    if head.lstrip().startswith("["):  # a JSON list of objects
        try:
            records = json.loads(head + f.read())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error.msg} at line {error.lineno}).") from None
        numbered = zip(range(1, len(records) + 1), records)
    else:
        numbered = _json_lines(path, itertools.chain(_lines(head + f.readline()), f))
    for number, record in numbered:
        if not isinstance(record, Mapping):
            raise ValueError(f"{path}, line {number}: expected a JSON object with named fields, got "
                             f"{type(record).__name__}.")
        yield Row(dict(record), number)


_LINE_END = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> Iterator[str]:
    """``text``'s lines with their ends (``\\n``, ``\\r``, ``\\r\\n``), as a file opened with ``newline=""`` gives
    them; not through io.StringIO, which holds 4 bytes a character (a 50 MB first line cost 200 MB more)."""
    start = 0
    for end in _LINE_END.finditer(text):
        yield text[start:end.end()]
        start = end.end()
    if start < len(text):
        yield text[start:]


def _json_lines(path, lines: Iterator[str]) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` per non-blank line of a JSON-lines file (lines end at ``\\n``, ``\\r`` or ``\\r\\n``)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}); a JSON-lines file holds "
                             "one JSON object per line.") from None


def _delimited_rows(path, f, kind: str, header: Sequence[str] | None) -> Iterator[Row]:
    options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if kind == "tsv" else {"delimiter": ","}
    reader = csv.reader(f, **options)
    columns = list(header) if header is not None else None
    for number, fields in _records(path, reader):
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        if columns is None:
            columns = [c.strip() for c in fields]
            continue
        if len(fields) != len(columns):
            raise ValueError(f"{path}, line {number}: {len(fields)} fields, but the header has {len(columns)} "
                             f"({columns}); check the delimiter ({'tab' if kind == 'tsv' else 'comma'}, from the "
                             "header row) and quoting.")
        yield Row(dict(zip(columns, fields)), number)
    if columns is None:
        raise ValueError(f"{path} is empty: it has no header row and no records.")


def _records(path, reader) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` per record of a csv ``reader``; its errors (a field over :data:`FIELD_LIMIT`, a NUL
    byte, ...) as ``ValueError`` naming the file and line. The csv module's field limit is process-wide: it is
    raised for each record's read and put back before the record is yielded, so readers of several files may
    be interleaved."""
    while True:
        previous = csv.field_size_limit(FIELD_LIMIT)
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            fix = (f"bertkit reads fields of up to {FIELD_LIMIT} characters: look for an unclosed quote, or "
                   "split the field" if "field limit" in str(error) else "is it a text CSV/TSV file?")
            raise ValueError(f"{path}, line {reader.line_num}: {error}; {fix}.") from None
        finally:
            csv.field_size_limit(previous)
        yield reader.line_num, fields


def column(path: str | os.PathLike, rows: Sequence[Row], name: str, option: str) -> str:
    """``name`` if the rows have that column; else a ``ValueError`` listing the columns and naming ``option``."""
    if rows and name not in rows[0].values:
        raise ValueError(f"{path} has no column {name!r} (its columns: {sorted(rows[0].values)}); pass the right "
                         f"name with {option}.")
    return name


def guess_column(path: str | os.PathLike, rows: Sequence[Row], candidates: Sequence[str], option: str) -> str:
    """The first of ``candidates`` the rows have; a ``ValueError`` asking for ``option`` when none fits."""
    have = rows[0].values if rows else {}
    for name in candidates:
        if name in have:
            return name
    raise ValueError(f"{path}: cannot tell which column to use (looked for {list(candidates)}, found "
                     f"{sorted(have)}); name it with {option}.")
