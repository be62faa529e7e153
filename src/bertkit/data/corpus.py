"""Reading raw text into documents: a document is a list of sentences.

Three layouts are understood, chosen per file (``format="auto"``) or forced:

- ``"google"``: the input of Google's ``create_pretraining_data.py``: one sentence per
  line, a blank line between documents.
- ``"prose"``: ordinary books (e.g. the bundled Austen novels): paragraphs separated by
  blank lines, sentences wrapped across lines. A file is split into documents at chapter
  headings ("CHAPTER IV", "Chapter 12", "CHAPTER 1. Loomings."), paragraphs are unwrapped,
  and each paragraph is split into sentences by :func:`split_sentences`.
- ``"paragraphs"``: one paragraph per line (what most editors and exporters write), blank
  lines optional; otherwise as ``"prose"``. Where blank lines separate blocks of several
  paragraph lines and the file has no chapter headings, each block is a document (a corpus
  written one document after another), as :func:`blocks_are_documents` decides.

A ``.jsonl`` file (compressed or not) holds one document per line, a JSON object whose ``text_field``
(default ``"text"``, as C4 and FineWeb write it) is the document's text: its lines are paragraphs, split
into sentences; a line that is not such an object is a ValueError naming the file and line.

With ``format="auto"`` the layout is decided per file from its first 2,000 lines and said in one
log line (``bertkit.data``, INFO) naming the file.

Files are read in any encoding Python knows (``encoding``, UTF-8 by default; a byte-order
mark is dropped), with any line ending, and ``.gz`` / ``.bz2`` / ``.xz`` files (``.zst`` with the
zstandard package) are decompressed on the fly. A file that does not decode raises ``ValueError`` naming the file
and the byte offset; a binary file is refused. Reading streams line by line, so a file
never has to fit in memory; the output depends only on the input (nothing random here).
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import itertools
import json
import logging
import lzma
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bertkit.data.encodings import SAMPLE, encoding_advice, not_text, sniff_encoding

FORMATS = ("auto", "google", "prose", "paragraphs")
#: lines sampled from the start of a source to decide its layout
HEAD_LINES = 2000
logger = logging.getLogger("bertkit.data")



def _zstd_open(path: str | os.PathLike, mode: str = "rb", **kwargs) -> io.IOBase:
    """A ``.zst`` file, through the ``zstandard`` package (``pip install bertkit[data]``)."""
    try:
        import zstandard
    except ImportError:
        raise ValueError(f"{os.fspath(path)} is Zstandard-compressed, and reading it needs the zstandard package: "
                         "pip install 'bertkit[data]' (or zstandard), or decompress it (zstd -d).") from None
    return zstandard.open(path, mode, **kwargs)


#: file suffix -> opener of the decompressed stream (``opener(path, "rb")``; "rt" with ``encoding=``)
COMPRESSION = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".zst": _zstd_open}

#: a line this long is a whole paragraph: wrapped prose stays far below it
PARAGRAPH_LINE = 200

#: words that end in "." without ending a sentence (compared lower-cased, without the dot)
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "st", "sr", "jr", "prof", "rev", "hon", "capt", "col",
    "gen", "lt", "sgt", "maj", "adm", "esq", "mt", "ft", "vs", "viz", "cf", "ca", "approx", "dept", "fig",
})

_OPENERS = "\"'“‘([_"
_CLOSERS = "\"'”’)]_"
# a run of terminal punctuation, closing quotes/brackets, white space, then (looking ahead) opening
# quotes/brackets and the first word character of what follows
_CANDIDATE = re.compile(rf"([.?!…]+)([{re.escape(_CLOSERS)}]*)\s+(?=[{re.escape(_OPENERS)}]*(\w))")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]|[A-HJ-Z]")  # "U.S", "e.g", or one capital other than "I"
# "CHAPTER XII", "Chapter 3", "Chapter the First", optionally followed by a short title after a separator:
# "CHAPTER 1. Loomings.", "Chapter 4: The Storm", "CHAPTER II -- THE NEWS"
_CHAPTER = re.compile(r"(?:CHAPTER|Chapter)\s+(?:[IVXLCDM]+|\d+|(?:the\s+|THE\s+)?[A-Z][a-z]+(?:[- ][A-Za-z]+)*)\.?"
                      r"(?:\s*[.:\u2014\u2013-]+\s*\S.{0,78})?")
_SECTION = re.compile(r"(?:VOLUME|Volume|BOOK|Book|PART|Part)\s+(?:[IVXLCDM]+|\d+|[A-Z][a-z]+)\.?")
_LAST_WORD = re.compile(r"[\w.]*\Z")
_ENDS_SENTENCE = re.compile(rf"[.?!…][{re.escape(_CLOSERS)}]*$")


def read_documents(sources: str | os.PathLike | Iterable[str | os.PathLike],
                   format: str = "auto", encoding: str = "utf-8", text_field: str = "text", *,
                   max_line_bytes: int | None = None) -> Iterator[list[str]]:
    """Yield the documents of ``sources``, each a list of sentences (empty documents are skipped).

    ``sources``: files, or texts in memory. A ``Path`` (any ``os.PathLike``) is a file; a
    ``str`` is a file if one exists at that path, and a text if it contains a line break;
    anything else is a ValueError. A document never spans two sources.
    ``format``: ``"auto"`` (decided per source by :func:`detect_format`), ``"google"``,
    ``"prose"`` or ``"paragraphs"``. ``encoding``: of the files (``codecs`` names). ``text_field``: the
    field holding a document's text in a ``.jsonl`` file. ``max_line_bytes``: a file's line longer than this
    is refused (:func:`line_too_long`) before it is held whole.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"encoding={encoding!r} is not a text encoding Python knows (e.g. 'utf-8', "
                         "'latin-1', 'cp1252', 'utf-16').") from None
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    for source in sources:
        lines = _lines_of(source, encoding, max_line_bytes)
        if _is_jsonl(source, encoding):
            yield from _jsonl_documents(lines, source, text_field)
            continue
        head = list(itertools.islice(lines, HEAD_LINES))
        lines = itertools.chain(head, lines)
        chosen = detect_format(head) if format == "auto" else format
        blocks = chosen == "paragraphs" and blocks_are_documents(head)
        if format == "auto":
            logger.info("%s: %s", _name(source), _LAYOUTS["blocks" if blocks else chosen])
        if chosen == "google":
            yield from _google_documents(lines)
        elif blocks:
            yield from _block_documents(lines)
        else:
            yield from _prose_documents(lines, one_paragraph_per_line=chosen == "paragraphs")


#: what each layout means, for the log line of ``format="auto"``
_LAYOUTS = {"google": "one sentence per line, a blank line between documents (google)",
            "prose": "prose: paragraphs between blank lines, documents at chapter headings",
            "paragraphs": "one paragraph per line, documents at chapter headings (paragraphs)",
            "blocks": "one paragraph per line, a document per blank-line separated block (paragraphs)"}


def _name(source: str | os.PathLike) -> str:
    return os.fspath(source) if is_file(source) else "text in memory"


def blocks_are_documents(head: list[str]) -> bool:
    """Whether blank-line separated blocks of one-paragraph lines are documents: the sample has no chapter
    heading, and most of its blocks (two at least) hold several lines. A blank line after every paragraph
    (blocks of one line) separates paragraphs, not documents."""
    sizes, size = [], 0
    for line in head:
        stripped = line.strip()
        if stripped and is_heading(stripped):
            return False
        if stripped:
            size += 1
        elif size:
            sizes.append(size)
            size = 0
    if size:
        sizes.append(size)
    return len(sizes) >= 2 and sum(n > 1 for n in sizes) >= len(sizes) / 2


def detect_format(lines: Iterable[str]) -> str:
    """``"google"`` when the non-blank lines look like one sentence each, ``"paragraphs"`` when
    they look like whole paragraphs, else ``"prose"``.

    One sentence per line means most lines end with terminal punctuation and hardly any
    line holds two sentences. Wrapped prose ends most lines mid-sentence and never runs
    past :data:`PARAGRAPH_LINE` characters; a paragraph per line often does, and holds
    several sentences per line.
    """
    sample = [line.strip() for line in lines if line.strip()]
    if not sample:
        return "google"
    ending = sum(bool(_ENDS_SENTENCE.search(line)) for line in sample) / len(sample)
    several = sum(len(split_sentences(line)) > 1 for line in sample) / len(sample)
    if ending >= 0.6 and several <= 0.25:
        return "google"
    long_lines = sum(len(line) > PARAGRAPH_LINE for line in sample) / len(sample)
    return "paragraphs" if long_lines >= 0.1 else "prose"


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with a careful rule-based splitter.

    A sentence ends at ``.``, ``?``, ``!`` (plus any closing quotes or brackets) followed by
    white space and a capital letter, optionally behind an opening quote. Kept together:
    abbreviations such as "Mr.", "Mrs.", "Dr.", "St." (:data:`ABBREVIATIONS`), initials
    ("J. Smith", "U.S. Navy") and ellipses ("...", "…", ". . ."). White space is normalised.
    """
    text = " ".join(text.split())
    sentences, start = [], 0
    for m in _CANDIDATE.finditer(text):
        if m.group(3).isupper() and _ends_sentence(text[start:m.start()], m.group(1)):
            sentences.append(text[start:m.end(2)])
            start = m.end()
    if start < len(text):
        sentences.append(text[start:])
    return sentences


def is_heading(paragraph: str) -> bool:
    """A chapter heading ("CHAPTER XII", "Chapter 3", "Chapter the First")."""
    return _CHAPTER.fullmatch(paragraph) is not None


def _ends_sentence(before: str, punctuation: str) -> bool:
    if punctuation != ".":
        return "…" not in punctuation and ".." not in punctuation  # "?", "!", "?!"; not an ellipsis
    word = _LAST_WORD.search(before).group()  # "cheerful--Mr" -> "Mr", "(Mrs" -> "Mrs"
    if not word or set(word) == {"."}:  # ". . ." spaced ellipsis
        return False
    return word.lower() not in ABBREVIATIONS and _INITIALS.fullmatch(word) is None


def is_file(source: str | os.PathLike) -> bool:
    """Whether ``source`` names a file (a Path always does), rather than being a text in memory."""
    return isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.isfile(source))


def _lines_of(source: str | os.PathLike, encoding: str, max_line_bytes: int | None = None) -> Iterator[str]:
    if is_file(source):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"no such file: {path}")
        return _file_lines(path, encoding, max_line_bytes)
    if not isinstance(source, str):
        raise ValueError(f"a source must be a file path or a text, got {type(source).__name__}.")
    if "\n" not in source and "\r" not in source:
        raise ValueError(f"{source[:80]!r} is not an existing file, and a text in memory must contain a line "
                         "break (a Path always means a file).")
    return iter(source.splitlines())


def open_bytes(path: str | os.PathLike) -> io.BufferedIOBase:
    """``path`` as a binary stream, decompressed when its suffix is one of :data:`COMPRESSION`."""
    path = Path(path)
    opener = COMPRESSION.get(path.suffix.lower(), open)
    return opener(path, "rb")


def _file_lines(path: Path, encoding: str, max_line_bytes: int | None = None) -> Iterator[str]:
    """The lines of a text file (universal newlines, BOM dropped); decoding errors name the file and byte, a
    truncated or corrupt compressed file names the file (:func:`unreadable_error`), a line of more than
    ``max_line_bytes`` characters is refused (:func:`line_too_long`), read in bounded memory."""
    name = codecs.lookup(encoding).name
    codec = "utf-8-sig" if name == "utf-8" else encoding
    try:
        with open_bytes(path) as raw:
            head = raw.read(8192)
        if b"\0" in head and not name.startswith(("utf-16", "utf-32")):
            raise _nul_bytes_error(path, head, encoding)
        with open_bytes(path) as raw:  # opened again: a zstd stream cannot rewind
            try:
                text = io.TextIOWrapper(raw, encoding=codec, errors="strict", newline=None)
                if max_line_bytes is None:
                    yield from text
                    return
                for number, line in enumerate(iter(lambda: text.readline(max_line_bytes + 1), ""), 1):
                    if len(line) > max_line_bytes:
                        rest = rest_of_line(text.readline, max_line_bytes)
                        raise line_too_long(f"{path}, line {number}", len(line) + rest, max_line_bytes)
                    yield line
            except UnicodeDecodeError as error:
                raise decoding_error(path, encoding, codec, error) from None
    except ValueError:
        raise
    except Exception as error:  # EOFError, gzip.BadGzipFile, lzma.LZMAError, zstandard.ZstdError, OSError
        raise unreadable_error(path, error) from None


def rest_of_line(readline: Callable[[int], str | bytes], size: int) -> int:
    """Read the rest of a line ``size`` at a time with ``readline`` (a text or binary stream's); its length."""
    total = 0
    while True:
        piece = readline(size)
        ends = piece[-1:] in ("\n", b"\n")
        total += len(piece) - ends
        if not piece or ends:
            return total


def line_too_long(where: str, size: int, limit: int) -> ValueError:
    """The error for a line (a document, or part of one) of ``size`` bytes or characters over ``limit``, the
    partition size: it would not fit the memory a partition is given."""
    return ValueError(f"{where}: a line of {size:,} bytes, longer than the partition size ({limit:,} bytes), so "
                      "reading it would not fit the memory a worker is given; raise --partition-size above "
                      f"{size / (1 << 20):.2f} (megabytes; Python: partition_bytes > {size:,}), or split the line.")


#: bytes of a text file's head judged by :func:`refuse_noise`
NOISE_HEAD = 1 << 16


def refuse_noise(path: str | os.PathLike, encoding: str) -> None:
    """ValueError naming ``path`` when its first bytes (decompressed) are text in no encoding, ``encoding`` or
    another (:func:`bertkit.data.encodings.not_text`); a file with NUL bytes is left to the reader's own error."""
    try:
        with open_bytes(path) as raw:
            head = raw.read(NOISE_HEAD)
    except Exception:  # a corrupt compressed file, an unreadable one: said by the reader
        return
    noise = None if b"\0" in head else not_text(head, encoding)
    if noise is not None:
        raise ValueError(f"{os.fspath(path)} is not text: {noise}; pass text files.")


def unreadable_error(path: str | os.PathLike, error: BaseException) -> ValueError:
    """A file that cannot be read to its end, as one line naming it: a compressed stream that ends early
    (a partial download or copy), corrupt compressed data, or the operating system's error."""
    if isinstance(error, EOFError):
        return ValueError(f"{os.fspath(path)} is truncated: its compressed data ends before the end of the stream "
                          "(a partial download or copy?); fetch or copy it again, or leave it out.")
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if isinstance(error, OSError) and not isinstance(error, gzip.BadGzipFile) and error.errno is not None:
        return ValueError(f"cannot read {os.fspath(path)}: {error.strerror or what}.")
    return ValueError(f"{os.fspath(path)} is not readable as its suffix says ({what}): corrupt compressed data, "
                      "or a file named for another format; check it (e.g. gzip -t / xz -t / zstd -t).")


def _nul_bytes_error(path: Path, head: bytes, encoding: str) -> ValueError:
    """The error for a file read as ``encoding`` whose first bytes ``head`` hold NUL bytes: UTF-16 / UTF-32
    text gets the ``--encoding`` that reads it, anything else is refused as binary."""
    guess = sniff_encoding(head)
    if guess is None or guess.encoding is None:
        return ValueError(f"{path} looks like a binary file (it contains NUL bytes), not text; pass text files "
                          "(.txt, or .txt.gz / .bz2 / .xz).")
    return ValueError(f"{path} is not {encoding} text (it holds NUL bytes); {encoding_advice(head, encoding)}")


def decoding_error(path: str | os.PathLike, encoding: str, codec: str, error: UnicodeDecodeError) -> ValueError:
    """The error for a file that is not valid ``encoding`` text (read with ``codec``): it names the file, the
    offset of the first undecodable byte in the whole (decompressed) file, what the bytes look like and the
    ``--encoding`` that reads them (:func:`bertkit.data.encodings.encoding_advice`)."""
    offset = _first_undecodable_byte(Path(path), codec)
    shown = f"at byte {offset}" if offset is not None else "somewhere"
    head, around = _bytes_at(Path(path), 0), _bytes_at(Path(path), offset or 0)
    return ValueError(f"{path} is not valid {encoding} text ({shown}: {error.reason}); "
                      f"{encoding_advice(head, encoding, around)}")


def _bytes_at(path: Path, offset: int) -> bytes:
    """Up to :data:`~bertkit.data.encodings.SAMPLE` (decompressed) bytes of ``path`` from ``offset``."""
    with open_bytes(path) as raw:
        raw.seek(offset)
        return raw.read(SAMPLE)


def _first_undecodable_byte(path: Path, codec: str) -> int | None:
    """The offset (in the decompressed bytes) where decoding ``path`` with ``codec`` first fails."""
    decoder = codecs.getincrementaldecoder(codec)(errors="strict")
    consumed = 0
    with open_bytes(path) as raw:
        while chunk := raw.read(1 << 20):
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                return consumed - pending + error.start
            consumed += len(chunk)
    return None


def _google_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    document: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _is_jsonl(source: str | os.PathLike, encoding: str) -> bool:
    """Whether ``source`` is a file holding JSON lines, whatever its name (:func:`bertkit.data.sniff.sniff_format`)."""
    from bertkit.data.sniff import sniff_format  # sniff reads files through this module: imported when used

    return is_file(source) and sniff_format(source, encoding) == "jsonl"


def _jsonl_documents(lines: Iterable[str], source: str | os.PathLike, text_field: str) -> Iterator[list[str]]:
    """A document per line of a JSON-lines file: the sentences of its ``text_field``, paragraph by paragraph."""
    for number, line in enumerate(lines, 1):
        document = jsonl_document(line, text_field, lambda number=number: f"{os.fspath(source)}, line {number}")
        if document:
            yield document


def jsonl_document(line: str, text_field: str, where: Callable[[], str]) -> list[str]:
    """The document of one JSON-lines line (``[]`` for a blank line); ``where()`` names the file and line in
    the ValueError for a line that is not a JSON object with a string ``text_field``."""
    if not line.strip():
        return []
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where()}: not JSON ({error.msg}); a .jsonl corpus holds one JSON object per "
                         "line.") from None
    text = record.get(text_field) if isinstance(record, dict) else None
    if not isinstance(text, str):
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"{where()}: no text in field {text_field!r} (found: {keys}); pass the field that "
                         "holds the text (--text-field; Python: text_field=...).")
    return text_document(text)


def text_document(text: str) -> list[str]:
    """A document given as one text (a JSON-lines record, a Parquet cell): its lines are paragraphs, each
    split into sentences."""
    return [sentence for paragraph in text.splitlines() if paragraph.strip()
            for sentence in split_sentences(paragraph.strip())]


def _block_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    """A document per blank-line separated block; each line a paragraph, split into sentences."""
    for block in _google_documents(lines):
        document = [sentence for paragraph in block for sentence in split_sentences(paragraph)]
        if document:
            yield document


def _prose_documents(lines: Iterable[str], one_paragraph_per_line: bool = False) -> Iterator[list[str]]:
    document: list[str] = []
    paragraphs = (line.strip() for line in lines if line.strip()) if one_paragraph_per_line else _paragraphs(lines)
    for paragraph in paragraphs:
        if is_heading(paragraph):
            if document:
                yield document
            document = []
        elif not _SECTION.fullmatch(paragraph):  # "VOLUME II" belongs to no chapter
            document.extend(split_sentences(paragraph))
    if document:
        yield document


def _paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line separated blocks, their lines joined with single spaces."""
    block: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            block.append(line)
        elif block:
            yield " ".join(block)
            block = []
    if block:
        yield " ".join(block)
