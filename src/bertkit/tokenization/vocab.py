"""WordPiece vocabularies: ``vocab.txt`` (one token per line, id = line number), validated."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from bertkit.io import atomic_write_text

#: Constructor argument -> the token BERT uses for it.
DEFAULT_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def read_vocab_file(path: str | os.PathLike) -> dict[str, int]:
    """``{token: id}`` from a ``vocab.txt``; a missing, empty or duplicated vocabulary is a ValueError."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"vocab_file {str(path)!r} does not exist; pass the path of a WordPiece vocab.txt "
                         "(one token per line).")
    with open(path, encoding="utf-8") as f:
        tokens = [line.rstrip("\r\n") for line in f]
    while tokens and tokens[-1] == "":
        tokens.pop()  # trailing blank lines are not tokens
    if not tokens:
        raise ValueError(f"vocab_file {str(path)!r} is empty; a WordPiece vocab.txt has one token per line.")
    return vocab_from_tokens(tokens, source=str(path))


def vocab_from_tokens(tokens: Iterable[str], source: str = "vocab") -> dict[str, int]:
    """``{token: id}`` with ids in order; duplicates are a ValueError naming both lines."""
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in vocab:
            raise ValueError(f"{source} lists the token {token!r} twice (lines {vocab[token] + 1} and {i + 1}); "
                             "each token must appear once so that ids are unambiguous.")
        vocab[token] = i
    return vocab


def check_special_tokens(vocab: Mapping[str, int], special_tokens: Mapping[str, str], source: str) -> None:
    """Every special token must be in the vocabulary, or encodings would silently use wrong ids."""
    missing = {name: token for name, token in special_tokens.items() if token not in vocab}
    if missing:
        listed = ", ".join(f"{name}={token!r}" for name, token in missing.items())
        raise ValueError(f"{source} lacks the special token(s) {listed}; add them to the vocabulary or pass "
                         "the names your vocabulary uses (e.g. unk_token='<unk>').")


def write_vocab_file(vocab: Mapping[str, int], path: str | os.PathLike) -> None:
    """Write ``vocab.txt`` atomically, one token per line in id order."""
    tokens = sorted(vocab, key=vocab.__getitem__)
    atomic_write_text(path, "".join(f"{token}\n" for token in tokens))
