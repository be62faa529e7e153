"""What a text file's bytes look like, so an error can name the encoding that reads it.

:func:`sniff_encoding` looks at the first bytes of a file: a byte-order mark (UTF-8, UTF-16 and UTF-32
in either byte order), then the pattern of NUL bytes that ASCII-range text has in UTF-16 (every other
byte) or UTF-32 (three bytes of four), then bytes of a single-byte legacy encoding (high bytes that
are not UTF-8). :func:`encoding_advice` turns that into the sentence a decoding error ends with.
:func:`noise_share` tells bytes that no encoding makes text of (random or compressed data named ``.txt``):
read by the best of a few encodings, many of their characters are still control characters or undefined.
"""

from __future__ import annotations

import codecs
import unicodedata
from typing import NamedTuple

#: how many leading bytes are looked at
SAMPLE = 4096

#: the single-byte encodings suggested for high bytes that are not UTF-8
_LEGACY = ("latin-1", "cp1252")

#: a share of NUL bytes at a position this high (and near none elsewhere) makes a NUL pattern
_NUL_SHARE = 0.9

#: text in no encoding: more than this share of control / undefined characters whatever encoding reads it (random
#: bytes: 13 % read as cp1252, 24 % as latin-1, most of them as UTF-8; text in any encoding: next to none)
NOISE_SHARE = 0.05
#: the fewest bytes judged (a shorter sample says too little)
_NOISE_SAMPLE = 256
#: the control characters text holds
_TEXT_CONTROLS = set("\t\n\r\f\v")


class Guess(NamedTuple):
    """``looks``: what the bytes look like, as a phrase; ``encoding``: the ``--encoding`` value that reads
    them (``None`` when no encoding would: a binary file)."""

    looks: str
    encoding: str | None


#: (byte-order mark, encoding that drops it, description); UTF-32 LE first, as its mark starts with UTF-16 LE's
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32 little-endian text (it starts with a UTF-32 byte-order mark)"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32 big-endian text (it starts with a UTF-32 byte-order mark)"),
    (codecs.BOM_UTF8, "utf-8-sig", "UTF-8 text (it starts with a UTF-8 byte-order mark)"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16 little-endian text (it starts with a UTF-16 byte-order mark)"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16 big-endian text (it starts with a UTF-16 byte-order mark)"),
)


def sniff_encoding(head: bytes) -> Guess | None:
    """What ``head`` (a file's first bytes) looks like, or None when it looks like plain ASCII / UTF-8.

    A byte-order mark decides; without one, NUL bytes at three of every four positions mean UTF-32
    (``utf-32-le`` / ``utf-32-be`` by where the non-NUL byte is), at every other position UTF-16, and
    anywhere else a binary file (``encoding`` None). Bytes >= 0x80 that are not UTF-8 mean a single-byte
    legacy encoding: ``cp1252`` when some fall in 0x80-0x9F (printable there only in Windows code
    pages), else ``latin-1``.
    """
    head = head[:SAMPLE]
    for bom, encoding, looks in _BOMS:
        if head.startswith(bom):
            return Guess(looks, encoding)
    if b"\0" in head:
        return _nul_pattern(head)
    if all(byte < 0x80 for byte in head) or _is_utf8(head):
        return None
    if any(0x80 <= byte <= 0x9F for byte in head):
        return Guess("text in a single-byte Windows encoding (bytes 0x80-0x9F, as cp1252 uses for quotes and "
                     "dashes)", "cp1252")
    return Guess("text in a single-byte legacy encoding (bytes above 0x7F that are not UTF-8)", "latin-1")


def _nul_pattern(head: bytes) -> Guess:
    """UTF-32 / UTF-16 (and byte order) from where the NUL bytes of ``head`` sit, else binary."""
    for width, name in ((4, "UTF-32"), (2, "UTF-16")):
        usable = head[: len(head) - len(head) % width]
        units = len(usable) // width
        if units == 0:
            continue
        nul = [sum(usable[i] == 0 for i in range(position, len(usable), width)) / units for position in range(width)]
        filled = [position for position in range(width) if nul[position] < 1 - _NUL_SHARE]
        if len(filled) == 1 and all(nul[p] >= _NUL_SHARE for p in range(width) if p != filled[0]):
            order = "little" if filled[0] == 0 else "big" if filled[0] == width - 1 else None
            if order:
                spacing = "three bytes of every four are" if width == 4 else "every other byte is"
                return Guess(f"{name} {order}-endian text without a byte-order mark ({spacing} NUL)",
                             f"{name.lower()}-{order[0]}e")
    return Guess("a binary file, not text (it holds NUL bytes in no text encoding's pattern)", None)


def _is_utf8(head: bytes) -> bool:
    """True when ``head`` is UTF-8, allowing a character cut off at its end when it is a full sample (the
    file may go on)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < SAMPLE)
    except UnicodeDecodeError:
        return False
    return True


def noise_share(sample: bytes, encoding: str) -> float:
    """The least share, over ``encoding``, UTF-8 and cp1252, of ``sample``'s characters that no text holds
    (control characters but white space, unassigned or private code points, undecodable bytes); 0.0 for a
    sample shorter than 256 bytes. Above :data:`NOISE_SHARE` the bytes are text in no encoding."""
    if len(sample) < _NOISE_SAMPLE:
        return 0.0
    shares = []
    for codec in dict.fromkeys((encoding, "utf-8", "cp1252")):
        try:
            text = sample.decode(codec, errors="replace")
        except LookupError:
            continue
        text = text[:-1] if text.endswith("\ufffd") else text  # a character cut off at the sample's end
        odd = sum(1 for c in text if c == "\ufffd" or (c not in _TEXT_CONTROLS
                                                       and unicodedata.category(c) in ("Cc", "Cn", "Co", "Cs")))
        shares.append(odd / max(1, len(text)))
    return min(shares, default=0.0)


def not_text(sample: bytes, encoding: str) -> str | None:
    """The phrase saying that ``sample`` is text in no encoding (see :func:`noise_share`), or None when it may be."""
    share = noise_share(sample, encoding)
    if share <= NOISE_SHARE:
        return None
    names = " or ".join(dict.fromkeys(codecs.lookup(c).name for c in (encoding, "utf-8", "cp1252")))
    return (f"its bytes do not look like text in any encoding: read as {names}, at least "
            f"{share:.0%} of the characters are control characters or undefined (random, compressed or binary "
            "data?), so no --encoding makes text of them")


def encoding_advice(head: bytes, encoding: str, around: bytes = b"") -> str:
    """The end of a decoding error for a file read as ``encoding``: what its bytes look like and the exact
    ``--encoding`` to pass, or why no flag helps. ``head``: the file's first bytes (byte-order mark, NUL
    pattern); ``around``: the bytes from the first one that did not decode (a legacy encoding may show
    only there)."""
    guess = sniff_encoding(head) or sniff_encoding(around)
    noise = not_text(around or head, encoding) if guess is None or guess.encoding in _LEGACY else None
    if noise is not None:  # high bytes, but no single-byte encoding makes text of them either
        return f"{noise}; pass a text file"
    if guess is None:
        return ("its bytes look like neither UTF-16 / UTF-32 nor a single-byte encoding; re-save the file as UTF-8, "
                "or pass the encoding it was written in (--encoding NAME; Python: encoding=...)")
    if guess.encoding is None:
        return f"it looks like {guess.looks}; pass a text file"
    if _same_codec(guess.encoding, encoding):
        return (f"it looks like {guess.looks}, yet is not valid {encoding}: the file is damaged or mixes encodings; "
                f"re-save it in one encoding")
    if guess.encoding in _LEGACY:  # which code page cannot be told from the bytes: name both
        other = _LEGACY[1 - _LEGACY.index(guess.encoding)]
        return (f"pass its encoding, e.g. --encoding {guess.encoding} or --encoding {other} (Python: encoding=...): "
                f"it looks like {guess.looks}")
    return f"it looks like {guess.looks}: pass --encoding {guess.encoding} (Python: encoding={guess.encoding!r})"


def _same_codec(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one codec (``utf-8-sig`` counts as ``utf-8``, ``utf-16-le`` as ``utf-16``)."""
    def family(name: str) -> str:
        try:
            name = codecs.lookup(name).name
        except LookupError:
            return name
        return name.replace("-sig", "").removesuffix("-le").removesuffix("-be")

    return family(a) == family(b)
