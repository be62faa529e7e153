"""The texts a static int8 model is calibrated on (``bertkit convert ... --dtype int8 --calibration FILE``), read
and checked before any calibration runs.

A calibration file holds one text per line (UTF-8; blank lines are skipped; a ``.gz`` / ``.bz2`` / ``.xz`` file is
decompressed as it is read). It is refused, in one line naming the file and the fix, when it

* is not UTF-8 text (:func:`bertkit.data.corpus.decoding_error`: the byte, what the bytes look like, the
  encoding that reads them);
* holds no text, or fewer than :data:`MIN_TEXTS` (the calibration keeps a share of them out of the activation
  ranges to choose the layers that stay float by a retrieval metric, and that needs queries and documents);
* is in another language than the model's tokenizer expects: more than :data:`MAX_FRAGMENTED` of the word
  pieces that hold a letter are ``[UNK]`` or a single letter. Measured with all-MiniLM-L6-v2's (English,
  uncased) tokenizer: English (Austen) 5 %, German 11 %, French 16 %, Russian 98 %, Greek 98 %, Arabic 100 %,
  Chinese 100 % (60 % [UNK]), Japanese 100 %, Hindi 100 %, source code 74 %. The check is the tokenizer's own
  view, not a script test: a multilingual vocabulary splits Russian into whole pieces and passes it.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: the fewest texts a calibration file may hold (a 30 % held-out split of them is searched, each text a query
#: against the rest, for the top-10 neighbours that pick the fallback layers: 64 texts give 19 queries)
MIN_TEXTS = 64
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


def read_calibration(path: str | os.PathLike, tokenizer=None) -> CalibrationSet:
    """The texts of the calibration file ``path``, checked (see the module doc) against ``tokenizer`` (the
    model's; None skips the language check). Raises ``ValueError`` (one line naming the file) for a file that
    is missing, not UTF-8, empty, too short or of another language."""
    from bertkit.data.corpus import decoding_error, open_bytes

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{FLAG} {path}: no such file; give a text file with one calibration text per line "
                         f"(at least {MIN_TEXTS}), or leave {FLAG} out for the default set shipped with bertkit.")
    try:
        with io.TextIOWrapper(open_bytes(path), encoding="utf-8-sig") as handle:
            texts = [" ".join(line.split()) for line in handle if line.strip()]
    except UnicodeDecodeError as error:
        raise ValueError(f"{FLAG} {decoding_error(path, 'utf-8', 'utf-8-sig', error)}") from None
    check_texts(texts, path, tokenizer)
    return CalibrationSet(texts, str(path), texts_sha256(texts))


def texts_sha256(texts: Sequence[str]) -> str:
    """The sha256 of ``texts`` joined by newlines (UTF-8): a calibration's fingerprint."""
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def check_texts(texts: Sequence[str], source: object, tokenizer=None) -> None:
    """ValueError (one line naming ``source``) unless ``texts`` are at least :data:`MIN_TEXTS` non-blank texts
    that ``tokenizer`` (when given) does not shred into letters (:func:`fragmented_share`)."""
    if not texts:
        raise ValueError(f"{FLAG} {source} holds no text (it is empty or blank); write one calibration text per "
                         f"line, at least {MIN_TEXTS}, in the language the model was trained on.")
    if len(texts) < MIN_TEXTS:
        raise ValueError(f"{FLAG} {source} holds {len(texts)} texts; calibrating needs at least {MIN_TEXTS} (a "
                         f"share is held out to choose the layers that stay float): add {MIN_TEXTS - len(texts)} "
                         "more, one per line.")
    if tokenizer is None:
        return
    share = fragmented_share(texts[:LANGUAGE_SAMPLE], tokenizer)
    if share > MAX_FRAGMENTED:
        raise ValueError(f"{FLAG} {source} looks like another language than the model's tokenizer expects: "
                         f"{share:.0%} of its word pieces are [UNK] or single letters (text in the model's "
                         f"language: ~5 %, refused above {MAX_FRAGMENTED:.0%}); calibrate on texts like the ones "
                         "the model will embed.")


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
