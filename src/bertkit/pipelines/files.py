"""Pipeline inputs from files, read lazily, and answers written as JSON lines.

A file's format is what it holds, whatever its name (:func:`bertkit.data.sniff.sniff_format`). Text lines: one
text per line (blank lines skipped, or read as the empty text with ``keep_blank=True`` so that inputs stay
aligned with lines; the same holds for JSON lines' blank lines). JSON lines: one input per line, a JSON string
or an object (``{"text", "text_pair"}`` for pairs, ``{"question", "context"}`` for question answering,
``{"query", "passages"}`` for rerank; an object with only ``"text"`` is that text). CSV / TSV: a header row
naming the same fields. Nothing is read before it is needed, so a file larger than memory streams.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from typing import Any

from bertkit.data.sniff import format_error, sniff_format

#: the formats an input file may hold (a ``.txt``, ``.jsonl``, ``.csv`` or ``.tsv`` file)
FORMATS = ("text", "jsonl", "csv", "tsv")


def input_format(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """One of :data:`FORMATS`: what ``path`` holds; a file holding anything else (Parquet, one JSON document) is
    refused naming what it holds."""
    found = sniff_format(path, encoding)
    if found not in FORMATS:
        raise format_error(path, found, "an input file holds text lines, JSON lines, CSV or TSV",
                           "write one input per line (a .txt or .jsonl file) or a table with a header row (.csv)")
    return found


def read_inputs(path: str | os.PathLike, encoding: str = "utf-8", *, keep_blank: bool = False) -> Iterator[Any]:
    """The inputs of ``path`` one by one (see the module doc); a ValueError names the line that is wrong, and
    text that is not ``encoding`` raises :func:`bertkit.data.corpus.decoding_error` (the file, the byte, the
    ``--encoding`` that reads it).

    A blank line (empty or only whitespace) of a .txt / .jsonl file is skipped, or with ``keep_blank=True``
    yielded as ``""``, so that the n-th input is the n-th line. A .csv file's blank rows are always skipped
    (its records are not lines: a quoted field may span several).
    """
    from bertkit.data.corpus import decoding_error

    codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        yield from _inputs(path, codec, keep_blank)
    except UnicodeDecodeError as error:
        raise decoding_error(path, encoding, codec, error) from None


def _inputs(path: str | os.PathLike, codec: str, keep_blank: bool) -> Iterator[Any]:
    fmt = input_format(path, codec)
    if fmt in ("csv", "tsv"):
        from bertkit.tasks.readers import iter_rows

        for row in iter_rows(path, encoding=codec):
            yield _item(row.values, path, row.line)
        return
    with open(path, encoding=codec, newline="") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if keep_blank:
                    yield ""
                continue
            if fmt == "text":
                yield line
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON ({error.msg}).") from None
            yield _item(value, path, number)


def _item(value: Any, path: Any, number: int) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if set(value) == {"text"}:
            return value["text"]
        if "query" in value:
            return {"query": value["query"], "passages": list(value.get("passages") or [])}
        if value.keys() & {"text", "text_pair", "question", "context"}:
            return {k: v for k, v in value.items() if k in ("text", "text_pair", "question", "context") and v}
    raise ValueError(f"{path}:{number}: expected a text or an object with text / text_pair, question / context or "
                     f"query / passages, got {str(value)[:80]!r}.")


def locate_input(path: str | os.PathLike, index: int, encoding: str = "utf-8") -> str:
    """Where input ``index`` (0-based) of ``read_inputs(path, keep_blank=True)`` is, to name it in a message:
    ``"texts.txt, line 7"`` (text or JSON lines), ``"texts.csv, record 7"`` (a table: its records after the
    header)."""
    if input_format(path, encoding) in ("csv", "tsv"):
        return f"{path}, record {index + 1}"
    return f"{path}, line {index + 1}"


def count_inputs(path: str | os.PathLike, encoding: str = "utf-8", *, keep_blank: bool = False) -> int:
    """How many inputs :func:`read_inputs` will yield (one pass over the file, nothing kept)."""
    return sum(1 for _ in read_inputs(path, encoding, keep_blank=keep_blank))
