"""Learning a WordPiece vocabulary with the same normalisation and pre-tokenisation as encoding."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, trainers

from bertkit.tokenization.pipeline import build_normalizer, build_pre_tokenizer
from bertkit.tokenization.vocab import DEFAULT_SPECIAL_TOKENS

#: order of the special tokens at the start of a trained vocabulary ([PAD] is id 0, as in Google's)
_SPECIAL_ORDER = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")


def train_tokenizer(cls, files_or_iterator: Iterable[str] | Sequence[str | os.PathLike], *, vocab_size: int = 30522,
                    min_frequency: int = 2, do_lower_case: bool = True, strip_accents: bool | None = None,
                    tokenize_chinese_chars: bool = True, limit_alphabet: int = 1000, show_progress: bool = True,
                    special_tokens: dict[str, str] | None = None, **tokenizer_kwargs: Any):
    """Train a WordPiece vocabulary and return a tokenizer of class ``cls`` that uses it.

    ``files_or_iterator``: a path or a list of paths of UTF-8 text files, or an iterator of
    strings (a list means paths; pass ``iter(texts)`` for texts in memory). Special
    tokens come first ([PAD]=0, [UNK], [CLS], [SEP], [MASK]), then the learned pieces.
    """
    if vocab_size <= len(_SPECIAL_ORDER):
        raise ValueError(f"vocab_size must exceed the {len(_SPECIAL_ORDER)} special tokens, got {vocab_size}.")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}.")
    special = {**DEFAULT_SPECIAL_TOKENS, **(special_tokens or {})}
    strip = do_lower_case if strip_accents is None else strip_accents
    backend = Tokenizer(models.WordPiece(unk_token=special["unk_token"]))
    backend.normalizer = build_normalizer(lowercase=do_lower_case, strip_accents=strip)
    backend.pre_tokenizer = build_pre_tokenizer(tokenize_chinese_chars=tokenize_chinese_chars)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
        special_tokens=[special[name] for name in _SPECIAL_ORDER], limit_alphabet=limit_alphabet,
        continuing_subword_prefix="##")
    texts = _texts(files_or_iterator)
    if do_lower_case:
        from bertkit.tokenization.tokenizer import _fix_final_sigmas

        texts = (_fix_final_sigmas(t) for t in texts)
    backend.train_from_iterator(texts, trainer)
    vocab = backend.get_vocab()
    return cls(vocab=vocab, do_lower_case=do_lower_case, strip_accents=strip_accents,
               tokenize_chinese_chars=tokenize_chinese_chars, **special, **tokenizer_kwargs)


def _texts(files_or_iterator) -> Iterator[str]:
    """Lines of the files, or the strings of an iterator.

    A path, or a list / tuple of paths, names files (a missing one is an error, not text);
    any other iterable (a generator, ``iter(texts)``, a dataset) yields the training texts.
    """
    if isinstance(files_or_iterator, (str, os.PathLike)):
        files_or_iterator = [files_or_iterator]
    if isinstance(files_or_iterator, (list, tuple)):
        bad = [p for p in files_or_iterator if not isinstance(p, (str, os.PathLike))]
        if bad:
            raise ValueError(f"train takes file paths or strings; the list holds {type(bad[0]).__name__} {bad[0]!r}.")
        paths = [Path(p) for p in files_or_iterator]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ValueError(f"no such file: {', '.join(missing)}. A list names training files; to train on "
                             "strings in memory pass an iterator of them, e.g. iter(texts).")
        for path in paths:
            with open(path, encoding="utf-8") as f:
                yield from f
        return
    for text in files_or_iterator:
        if not isinstance(text, str):
            raise ValueError(f"the training iterator must yield strings, got {type(text).__name__}.")
        yield text
