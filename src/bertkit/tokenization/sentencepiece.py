"""SentencePiece ``spm.model`` files (DeBERTa-v2/v3's tokenizer) read without the ``sentencepiece`` or ``protobuf``
packages.

An ``spm.model`` is one serialised protobuf message, SentencePiece's ``ModelProto``. :func:`read_spm_model` decodes
the protobuf wire format itself and keeps what a tokenizer needs: the pieces (text, score, kind), the trainer's
model type, special ids and ``byte_fallback``, and the normalizer's rule (its precompiled character map and the
whitespace switches). :func:`spm_tokenizer_json` turns that into a ``tokenizer.json`` document (Unigram model,
``Precompiled`` normalizer + SentencePiece's whitespace rules, Metaspace), the form the rest of bertkit loads;
a tokenizer class with a recipe (``DebertaV2Tokenizer``: :mod:`bertkit.tokenization.hf_classes`) then rebuilds
the pipeline as transformers does.

Only Unigram models are read (DeBERTa-v2/v3's and mDeBERTa's are: transformers builds them as Unigram); a BPE,
word or character model, an empty, truncated or foreign file is a ValueError naming the file and the fix.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

SPM_NAME = "spm.model"
METASPACE = "\u2581"

# SentencePiece's enums (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
MODEL_TYPES = {1: "Unigram", 2: "BPE", 3: "word", 4: "char"}

# protobuf wire types
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class _Damaged(Exception):
    """What is wrong with the bytes (turned into the one-line ValueError naming the file)."""


class SpmPiece(NamedTuple):
    """One vocabulary entry: its text, its log-probability score and its kind (NORMAL, CONTROL, ...)."""

    text: str
    score: float = 0.0
    kind: int = NORMAL


@dataclass(frozen=True)
class SentencePieceModel:
    """The parts of a ``ModelProto`` a tokenizer needs (the protobuf defaults where a field is absent)."""

    pieces: tuple[SpmPiece, ...]
    model_type: int = 1
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    byte_fallback: bool = False
    split_digits: bool = False
    normalizer_name: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


# field number -> (attribute, decoder) of the messages read; other fields are skipped
def _int32(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value  # negative int32s travel as 10-byte varints


_TRAINER_FIELDS = {3: ("model_type", int), 25: ("split_digits", bool), 35: ("byte_fallback", bool),
                   40: ("unk_id", _int32), 41: ("bos_id", _int32), 42: ("eos_id", _int32), 43: ("pad_id", _int32)}
_NORMALIZER_FIELDS = {1: ("normalizer_name", "text"), 2: ("precompiled_charsmap", bytes),
                      3: ("add_dummy_prefix", bool), 4: ("remove_extra_whitespaces", bool),
                      5: ("escape_whitespaces", bool)}


def read_spm_model(path: str | os.PathLike) -> SentencePieceModel:
    """The SentencePiece model in ``path``; a ValueError naming the file when it is missing, empty, cut short,
    not a ``ModelProto``, or a model type other than Unigram."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path} does not exist; copy the model's {SPM_NAME} (or its tokenizer.json) into the "
                         "directory.")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise ValueError(f"{path} is empty; restore the file (copy {SPM_NAME} from the model's repository again).")
    try:
        model = _decode_model(data)
    except _Damaged as why:
        raise ValueError(f"{path} is not a SentencePiece model ({why}); restore the file (copy {SPM_NAME} from the "
                         "model's repository again) or save the tokenizer with transformers to get tokenizer.json."
                         ) from None
    if model.model_type != 1:
        kind = MODEL_TYPES.get(model.model_type, f"type {model.model_type}")
        raise ValueError(f"{path} holds a SentencePiece {kind} model; bertkit reads Unigram models (DeBERTa's) "
                         "only: save the tokenizer with transformers (tokenizer.json) and load that directory.")
    return model


def spm_tokenizer_json(model: SentencePieceModel) -> dict[str, Any]:
    """``model`` as a tokenizer.json document, as SentencePiece itself encodes: the Unigram model with its
    scores, unknown id and byte fallback; the precompiled normalization rule, then the whitespace rules
    (``remove_extra_whitespaces``: trimmed ends, runs of spaces as one); Metaspace ``▁`` for spaces with
    ``add_dummy_prefix`` as the prepend scheme; control and user-defined pieces as added tokens (control
    ones special). No post-processor: the tokenizer class adds its special tokens."""
    normalizers: list[dict[str, Any]] = []
    if model.precompiled_charsmap:
        normalizers.append({"type": "Precompiled",
                            "precompiled_charsmap": base64.b64encode(model.precompiled_charsmap).decode("ascii")})
    if model.remove_extra_whitespaces:
        normalizers += [{"type": "Strip", "strip_left": True, "strip_right": True},
                        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    metaspace = {"type": "Metaspace", "replacement": METASPACE, "split": True,
                 "prepend_scheme": "always" if model.add_dummy_prefix else "never"}
    added = [{"id": i, "content": p.text, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": p.kind == CONTROL}
             for i, p in enumerate(model.pieces) if p.kind in (CONTROL, USER_DEFINED)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": normalizers} if normalizers else None,
            "pre_tokenizer": metaspace, "post_processor": None, "decoder": dict(metaspace),
            "model": {"type": "Unigram", "unk_id": model.unk_id, "byte_fallback": model.byte_fallback,
                      "vocab": [[p.text, p.score] for p in model.pieces]}}


def special_pieces(model: SentencePieceModel) -> list[str]:
    """The control and user-defined pieces, in id order: transformers makes them the tokenizer's extra special
    tokens (:func:`spm_tokenizer_json` has made them added tokens, special or not)."""
    return [p.text for p in model.pieces if p.kind in (CONTROL, USER_DEFINED)]


def check_escaped(model: SentencePieceModel, source: str) -> None:
    """ValueError when the model keeps spaces as spaces (``escape_whitespaces`` off): Metaspace cannot say so."""
    if not model.escape_whitespaces:
        raise ValueError(f"{source} keeps whitespace unescaped (normalizer_spec.escape_whitespaces is false), which "
                         "the tokenizers library cannot represent; save the tokenizer with transformers "
                         "(tokenizer.json) and load that directory.")


# ---------------------------------------------------------------------------- the wire format
# Positions into the one bytes object (no copies but each piece's text); a real DeBERTa-v3 model has 128,000 pieces,
# so a piece's usual fields (text, score, type) are decoded inline.

_PIECE_TEXT, _PIECE_SCORE, _PIECE_TYPE = (1 << 3) | _BYTES, (2 << 3) | _FIXED32, (3 << 3) | _VARINT


def _decode_model(data: bytes) -> SentencePieceModel:
    pieces: list[SpmPiece] = []
    found: dict[str, Any] = {}
    seen = set()
    for number, wire, value in _fields(data, 0, len(data)):
        if number == 1:
            pieces.append(_decode_piece(data, *_span(value, wire, "pieces")))
        elif number == 2:
            found.update(_decode_fields(data, _span(value, wire, "trainer_spec"), _TRAINER_FIELDS, "trainer_spec"))
        elif number == 3:
            found.update(_decode_fields(data, _span(value, wire, "normalizer_spec"), _NORMALIZER_FIELDS,
                                        "normalizer_spec"))
        seen.add(number)
    if not pieces:
        raise _Damaged("it holds no pieces")
    for number, name in ((2, "trainer_spec"), (3, "normalizer_spec")):
        if number not in seen:
            raise _Damaged(f"it has no {name}: a truncated file?")
    model = SentencePieceModel(pieces=tuple(pieces), **found)
    if not 0 <= model.unk_id < len(pieces) or pieces[model.unk_id].kind != UNKNOWN:
        raise _Damaged(f"trainer_spec.unk_id {model.unk_id} is not its unknown piece")
    return model


def _decode_piece(data: bytes, pos: int, end: int) -> SpmPiece:
    text, score, kind = "", 0.0, NORMAL
    while pos < end:
        key, pos = _varint(data, pos, end)
        if key == _PIECE_TEXT:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise _Damaged("it ends inside a field: a truncated file?")
            text, pos = _text(data[pos:pos + length], "piece"), pos + length
        elif key == _PIECE_SCORE:
            if pos + 4 > end:
                raise _Damaged("it ends inside a number: a truncated file?")
            score, pos = struct.unpack_from("<f", data, pos)[0], pos + 4
        elif key == _PIECE_TYPE:
            kind, pos = _varint(data, pos, end)
        elif key >> 3 in (1, 2, 3):
            raise _Damaged(f"a piece's field {key >> 3} has wire type {key & 7}, not its own")
        else:
            pos = _skip(data, pos, end, key)
    if not text:
        raise _Damaged("a piece has no text")
    return SpmPiece(text, score, kind)


def _decode_fields(data: bytes, span: tuple[int, int], table: dict[int, tuple[str, Any]],
                   message: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data, *span):
        if number not in table:
            continue
        name, kind = table[number]
        if kind is bytes or kind == "text":
            start, stop = _span(value, wire, f"{message}.{name}")
            out[name] = data[start:stop] if kind is bytes else _text(data[start:stop], f"{message}.{name}")
        elif wire != _VARINT:
            raise _Damaged(f"{message}.{name} is not a number")
        else:
            out[name] = kind(value)
    return out


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field in ``data[pos:end]``: an int for varints and
    fixed-width numbers, ``(start, stop)`` for length-delimited bytes."""
    while pos < end:
        key, pos = _varint(data, pos, end)
        start = pos
        pos = _skip(data, pos, end, key)
        wire = key & 7
        if wire == _VARINT:
            value = _varint(data, start, end)[0]
        elif wire == _BYTES:
            value = (_varint(data, start, end)[1], pos)
        else:
            value = int.from_bytes(data[start:pos], "little")
        yield key >> 3, wire, value


def _skip(data: bytes, pos: int, end: int, key: int) -> int:
    """The position after the value of a field with ``key`` starting at ``pos``."""
    number, wire = key >> 3, key & 7
    if number == 0:
        raise _Damaged(f"field number 0 before byte {pos}")
    if wire == _VARINT:
        return _varint(data, pos, end)[1]
    if wire in (_FIXED64, _FIXED32):
        width = 8 if wire == _FIXED64 else 4
        if pos + width > end:
            raise _Damaged("it ends inside a number: a truncated file?")
        return pos + width
    if wire == _BYTES:
        length, pos = _varint(data, pos, end)
        if pos + length > end:
            raise _Damaged("it ends inside a field: a truncated file?")
        return pos + length
    raise _Damaged(f"wire type {wire} at byte {pos} is not one a ModelProto uses")


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos < end and data[pos] < 0x80:  # one byte: most keys, lengths and types
        return data[pos], pos + 1
    value = shift = 0
    while True:
        if pos >= end:
            raise _Damaged("it ends inside a number: a truncated file?")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Damaged(f"a number longer than 10 bytes before byte {pos}")


def _span(value: Any, wire: int, name: str) -> tuple[int, int]:
    if wire != _BYTES:
        raise _Damaged(f"{name} is not a length-delimited field")
    return value


def _text(value: bytes, name: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _Damaged(f"{name} is not UTF-8 text") from None
