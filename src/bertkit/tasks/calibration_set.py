"""The texts a static int8 model is calibrated on (``bertkit convert ... --dtype int8 --calibration FILE``), read
and checked before any calibration runs.

A calibration file holds one text per line (UTF-8 unless ``--encoding`` says otherwise; blank lines are skipped; a
``.gz`` / ``.bz2`` / ``.xz`` file is decompressed as it is read). It is refused, in one line naming the file and
the fix, when it

* is not text in its encoding (:func:`bertkit.data.corpus.decoding_error`: the byte, what the bytes look like,
  the ``--encoding`` that reads them);
* holds no text, or fewer than :data:`bertkit.inference.calibration.MIN_TEXTS` (the calibration keeps a share
  of them out of the activation ranges to choose the layers that stay float by a retrieval metric, which needs
  queries and their neighbours): :func:`bertkit.inference.calibration.check_texts`;
* is in another language than the model's tokenizer expects: more than :data:`MAX_FRAGMENTED` of the word
  pieces that hold a letter are ``[UNK]`` or a single letter. Measured with all-MiniLM-L6-v2's (English,
  uncased) tokenizer: English (Austen) 5 %, German 11 %, French 16 %, Russian 98 %, Greek 98 %, Arabic 100 %,
  Chinese 100 % (60 % [UNK]), Japanese 100 %, Hindi 100 %, source code 74 %. The check is the tokenizer's own
  view, not a script test: a multilingual vocabulary splits Russian into whole pieces and passes it.
"""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.inference.calibration import MIN_TEXTS, check_texts, texts_sha256

#: the largest share of letter-bearing word pieces that may be [UNK] or a single letter (see the module doc)
MAX_FRAGMENTED = 0.5
#: how many texts the language check tokenizes (the first ones: enough to judge, cheap on a large file)
LANGUAGE_SAMPLE = 256
#: the flag a message names
FLAG = "--calibration"


@dataclass(frozen=True)
class CalibrationSet:
    """Texts to calibrate on and where they came from: ``source`` (the file's path, as given), ``sha256`` of the
    texts (joined by newlines, UTF-8: the same texts in another file give the same digest)."""

    texts: list[str]
    source: str
    sha256: str


def read_calibration(path: str | os.PathLike, tokenizer=None, encoding: str = "utf-8") -> CalibrationSet:
    """The texts of the calibration file ``path`` (in ``encoding``), checked (see the module doc) against
    ``tokenizer`` (the model's; None skips the language check). Raises ``ValueError`` (one line naming the file)
    for a file that is missing, not ``encoding`` text, empty, too short or of another language."""
    from bertkit.data.corpus import decoding_error, open_bytes

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{FLAG} {path}: no such file; give a text file with one calibration text per line "
                         f"(at least {MIN_TEXTS}), or leave {FLAG} out for the default set shipped with bertkit.")
    codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding  # a byte-order mark is dropped
    try:
        with io.TextIOWrapper(open_bytes(path), encoding=codec) as handle:
            texts = [" ".join(line.split()) for line in handle if line.strip()]
    except UnicodeDecodeError as error:
        raise ValueError(f"{FLAG} {decoding_error(path, encoding, codec, error)}") from None
    check_texts(texts, f"{FLAG} {path}")
    check_language(texts, tokenizer, f"{FLAG} {path}", "calibrate on texts like the ones the model will embed")
    return CalibrationSet(texts, str(path), texts_sha256(texts))


def check_language(texts: Sequence[str], tokenizer, source: str, fix: str) -> None:
    """ValueError (one line: ``source``, the share measured, ``fix``) when ``tokenizer`` (None: no check) shreds
    more than :data:`MAX_FRAGMENTED` of ``texts``' word pieces into [UNK] or single letters
    (:func:`fragmented_share` of the first :data:`LANGUAGE_SAMPLE` texts)."""
    if tokenizer is None:
        return
    share = fragmented_share(texts[:LANGUAGE_SAMPLE], tokenizer)
    if share > MAX_FRAGMENTED:
        raise ValueError(f"{source} looks like another language than the model's tokenizer expects: {share:.0%} "
                         f"of its word pieces are [UNK] or single letters (text in the model's language: ~5 %, "
                         f"refused above {MAX_FRAGMENTED:.0%}); {fix}.")


def fragmented_share(texts: Sequence[str], tokenizer) -> float:
    """The share of ``texts``' word pieces holding a letter that are the tokenizer's unknown token or a single
    letter (a ``##`` continuation mark aside); 0.0 when no piece holds a letter."""
    unknown = getattr(tokenizer, "unk_token", None)
    letters = shredded = 0
    for text in texts:
        for piece in tokenizer.tokenize(text):
            core = piece.removeprefix("##").removeprefix("\u2581").removeprefix("\u0120")  # WordPiece, SP, BPE
            if piece == unknown:
                letters, shredded = letters + 1, shredded + 1
            elif any(c.isalpha() for c in core):
                letters, shredded = letters + 1, shredded + (len(core) == 1)
    return shredded / letters if letters else 0.0
