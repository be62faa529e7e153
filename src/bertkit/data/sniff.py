"""What a data file holds, told from its first bytes whatever its name: the one place bertkit decides a format.

A name can lie (``cp pairs.jsonl pairs.csv``); the content does not: Parquet and Arrow files start with magic
numbers, a JSON-lines file's first non-blank line is a JSON object, a JSON file opens with ``[{`` or ``{"``,
and a table's header row holds tabs or commas. :func:`sniff_format` reads the head of the file (decompressed
by its suffix) and says which; the name settles only what the head leaves open: a table without a delimiter
in its header (one column), text lines that hold commas (a ``.txt`` file), a ``.jsonl`` file whose first line
is broken (its reader then names the line). When the content overrules the name, a warning says so, once per
file. A reader that cannot read what a file holds refuses it with :func:`format_error`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from bertkit.data.corpus import COMPRESSION, open_bytes

logger = logging.getLogger(__name__)

#: bytes read from a file's (decompressed) start to tell its format
HEAD_BYTES = 1 << 16
FORMATS = ("parquet", "arrow", "json", "jsonl", "csv", "tsv", "text")
#: each format in words, for messages
WORDS = {"parquet": "a Parquet file", "arrow": "an Arrow file", "json": "one JSON document (a list or an object)",
         "jsonl": "JSON lines (a JSON object per line)", "csv": "a comma-separated table",
         "tsv": "a tab-separated table", "text": "plain text lines"}
#: the suffix that names each format
SUFFIXES = {"parquet": ".parquet", "arrow": ".arrow", "json": ".json", "jsonl": ".jsonl", "csv": ".csv",
            "tsv": ".tsv", "text": ".txt"}
_NAMED = {".parquet": "parquet", ".arrow": "arrow", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
          ".csv": "csv", ".tsv": "tsv", ".txt": "text"}
#: compressed data behind a name without a compression suffix: its magic number -> the suffix it needs
_COMPRESSED = {b"\x1f\x8b": ".gz", b"\xfd7zXZ\x00": ".xz", b"\x28\xb5\x2f\xfd": ".zst", b"BZh91AY&SY": ".bz2"}
_warned: set[str] = set()


def name_format(path: str | os.PathLike) -> str | None:
    """The format the file name says (a compression suffix looked through), None for a suffix bertkit does not
    know."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSION:
        suffixes.pop()
    return _NAMED.get(suffixes[-1]) if suffixes else None


def sniff_format(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """One of :data:`FORMATS`: what ``path`` holds (module docstring). A file that cannot be read is left to its
    reader's own error (the name's format is returned); compressed data behind a name without its compression
    suffix raises ``ValueError`` naming the rename."""
    named = name_format(path)
    try:
        with open_bytes(path) as raw:
            head = raw.read(HEAD_BYTES)
    except Exception:  # missing, a directory, corrupt compressed data: said by the reader
        return named or "text"
    if Path(path).suffix.lower() not in COMPRESSION:
        suffix = next((suffix for magic, suffix in _COMPRESSED.items() if head.startswith(magic)), None)
        if suffix is not None:
            raise ValueError(f"{os.fspath(path)} holds {suffix[1:]}-compressed data (by its first bytes) under a "
                             f"name without {suffix}; rename it {Path(path).name}{suffix} so it is decompressed.")
    if head.startswith(b"PAR1"):
        found = "parquet"
    elif head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
        found = "arrow"
    else:
        try:
            text = head.decode(encoding, errors="replace").lstrip("\ufeff")
        except LookupError:  # an unknown --encoding: said by the reader
            return named or "text"
        found = text_format(text, named, whole=len(head) < HEAD_BYTES)
    key = os.path.abspath(path)
    if named is not None and found != named and {found, named} != {"json", "jsonl"} and key not in _warned:
        _warned.add(key)
        logger.warning("%s holds %s, whatever its name says: read as such (rename it %s to say so).",
                       os.fspath(path), WORDS[found], SUFFIXES[found])
    return found


def text_format(head: str, named: str | None, whole: bool = True) -> str:
    """The format of text whose start is ``head`` (``whole``: the entire text) in a file named as ``named``
    says (see :func:`sniff_format`)."""
    lines = iter(head.splitlines(keepends=True))
    first = next((line for line in lines if line.strip()), "")
    if not first:
        return named or "text"  # an empty file holds what its name says: its reader says it is empty
    complete = first.endswith(("\n", "\r")) or whole
    line = first.strip()
    parsed, value = _json(line) if complete else (False, None)
    if isinstance(value, dict) or (line.startswith('{"') and not complete):
        return "jsonl"
    if named in ("json", "jsonl") and (parsed or line[:1] in ('{', '[', '"')):
        return named  # JSON strings per line, or a broken first line its reader names
    after = head.lstrip()[1:].lstrip()[:1]  # the first character inside an opening bracket, on any line
    if ((line[:1] == "[" and after in ('{', '[', '"')) or (line[:1] == "{" and after == '"')) \
            and (named != "text" or line in ("[", "{")):  # text lines may start so; a pretty-printed file does not
        return "json"  # a list of records, or one object over several lines
    if named == "text":
        return "text"
    tabs, commas = "\t" in line, "," in line
    if tabs != commas:
        return "tsv" if tabs else "csv"
    if tabs:  # both delimiters: a table, of the name's kind
        return named if named in ("csv", "tsv") else "csv"
    return named if named in ("csv", "tsv") else "text"  # neither: one column, or lines


def format_error(path: str | os.PathLike, found: str, reads: str, fix: str) -> ValueError:
    """The one-line refusal of a file holding ``found`` (a :data:`FORMATS` item) by a reader of ``reads`` (words);
    ``fix`` says what to do."""
    return ValueError(f"{os.fspath(path)} holds {WORDS[found]} (by its content), but {reads}; {fix}.")


def _json(line: str) -> tuple[bool, Any]:
    """``(True, value)`` of ``line`` parsed as JSON, ``(False, None)`` when it is not JSON."""
    try:
        return True, json.loads(line)
    except ValueError:
        return False, None
