"""Learning a WordPiece vocabulary with the same normalisation and pre-tokenisation as encoding.

Training is deterministic: the same texts and options give the same vocabulary, id for id,
in every run and process. ``tokenizers``' WordPiece trainer (BPE merges underneath) breaks
ties between equally frequent merges by token id, and numbers the ``##`` continuation
pieces in hash-map order, which changes from run to run (tokenizers issue 1794). So a first,
cheap pass collects the corpus's characters and continuation pieces, and the real pass
starts from all of them, sorted by code point, as fixed tokens: every id, and with it every
tie, then depends on the corpus alone. The vocabulary is the one the trainer would learn
anyway, in a fixed order: special tokens, characters, ``##`` characters, merges.

The first pass normalises and pre-tokenises only the distinct whitespace-separated chunks of
the text: words never cross whitespace (the pre-tokenizer's separators are exactly what
``str.split()`` splits on, once the whitespace characters that normalisation deletes are
deleted), so the chunks hold the same words as the text, at a fraction of the cost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, trainers

from bertkit.checks import check_int
from bertkit.tokenization.pipeline import build_normalizer, build_pre_tokenizer
from bertkit.tokenization.unicode import is_removed
from bertkit.tokenization.vocab import DEFAULT_SPECIAL_TOKENS

#: order of the special tokens at the start of a trained vocabulary ([PAD] is id 0, as in Google's)
_SPECIAL_ORDER = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
_PREFIX = "##"
#: whitespace to str.split() that normalisation deletes (controls such as \x0b, \x1c, \x85), joining its
#: neighbours into one word (U+3000 is the last character Python counts as whitespace)
_DELETED_SPACE = re.compile("[" + "".join(c for c in map(chr, range(0x3001)) if c.isspace() and is_removed(c)) + "]")


def train_tokenizer(cls, files_or_iterator: Iterable[str] | Sequence[str | os.PathLike], *, vocab_size: int = 30522,
                    min_frequency: int = 2, do_lower_case: bool = True, strip_accents: bool | None = None,
                    tokenize_chinese_chars: bool = True, limit_alphabet: int = 1000, show_progress: bool = True,
                    special_tokens: dict[str, str] | None = None, **tokenizer_kwargs: Any):
    """Train a WordPiece vocabulary and return a tokenizer of class ``cls`` that uses it.

    ``files_or_iterator``: a path or a list of paths of UTF-8 text files, or an iterator of
    strings (a list means paths; pass ``iter(texts)`` for texts in memory). The texts are
    read twice: files from disk, an iterator's strings kept in memory. The vocabulary holds
    the special tokens ([PAD]=0, [UNK], [CLS], [SEP], [MASK]), the ``limit_alphabet`` most
    frequent characters and their ``##`` continuations, then the learned pieces (fewer than
    ``vocab_size`` when no further pair of pieces occurs ``min_frequency`` times). It is a
    function of the texts and options alone (see the module docstring).

    Raises ValueError for texts without any characters to learn from, and for a
    ``vocab_size`` too small to hold the special tokens and the characters.
    """
    for name, value in (("vocab_size", vocab_size), ("min_frequency", min_frequency),
                        ("limit_alphabet", limit_alphabet)):
        check_int(name, value, 0)
    if vocab_size <= len(_SPECIAL_ORDER):
        raise ValueError(f"vocab_size must exceed the {len(_SPECIAL_ORDER)} special tokens, got {vocab_size}.")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}.")
    if limit_alphabet < 1:
        raise ValueError(f"limit_alphabet must be >= 1 (the number of characters to keep), got {limit_alphabet}.")
    special = {**DEFAULT_SPECIAL_TOKENS, **(special_tokens or {})}
    strip = do_lower_case if strip_accents is None else strip_accents
    corpus = _Corpus(files_or_iterator, fix_final_sigmas=do_lower_case)

    def backend() -> Tokenizer:
        tokenizer = Tokenizer(models.WordPiece(unk_token=special["unk_token"]))
        tokenizer.normalizer = build_normalizer(lowercase=do_lower_case, strip_accents=strip)
        tokenizer.pre_tokenizer = build_pre_tokenizer(tokenize_chinese_chars=tokenize_chinese_chars)
        return tokenizer

    characters, continuations = _base_pieces(backend(), corpus, limit_alphabet)
    if not characters:
        raise ValueError(f"{corpus.description} no text to learn a vocabulary from (nothing but whitespace and "
                         "control characters); train on text.")
    base = list(dict.fromkeys([special[name] for name in _SPECIAL_ORDER] + characters + continuations))
    if vocab_size < len(base):
        raise ValueError(f"vocab_size={vocab_size} cannot hold the {len(base)} tokens every vocabulary of this text "
                         f"needs ({len(_SPECIAL_ORDER)} special tokens, {len(characters)} characters, "
                         f"{len(continuations)} '##' continuations); use vocab_size >= {len(base)} or a smaller "
                         "limit_alphabet.")
    # the base pieces go in as "special tokens", the trainer's only way to fix ids before it counts
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress, special_tokens=base,
        limit_alphabet=len(characters), initial_alphabet=characters, continuing_subword_prefix=_PREFIX)
    tokenizer = backend()
    with _stdout_to_stderr(show_progress):
        tokenizer.train_from_iterator(iter(corpus), trainer)
    return cls(vocab=tokenizer.get_vocab(), do_lower_case=do_lower_case, strip_accents=strip_accents,
               tokenize_chinese_chars=tokenize_chinese_chars, **special, **tokenizer_kwargs)


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """The trainer's progress bars end each stage with a newline printed to standard output (three blank lines
    before a CLI's own output, in a file or a pipe it feeds); while ``active``, file descriptor 1 points at
    standard error, where the bars are drawn. Without real descriptors (a notebook's streams) nothing moves."""
    try:
        out, err = sys.__stdout__.fileno(), sys.__stderr__.fileno()
    except (AttributeError, ValueError, OSError):
        active = False
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(out)
    os.dup2(err, out)
    try:
        yield
    finally:
        os.dup2(saved, out)
        os.close(saved)


def _base_pieces(scout: Tokenizer, corpus: _Corpus, limit_alphabet: int) -> tuple[list[str], list[str]]:
    """The characters the trainer keeps (the ``limit_alphabet`` most frequent, ties to the lower code
    point) and their ``##`` continuations that occur, each sorted by code point."""
    chunks: Counter = Counter()  # each whitespace-separated chunk of the text, and how often it occurs
    for text in corpus:
        chunks.update(_DELETED_SPACE.sub("", text).split())
    no_merges = trainers.WordPieceTrainer(vocab_size=0, show_progress=False, limit_alphabet=2**31 - 1,
                                          continuing_subword_prefix=_PREFIX)
    distinct = list(chunks)
    batches = (" ".join(distinct[i:i + 1024]) for i in range(0, len(distinct), 1024))
    scout.train_from_iterator(batches, no_merges)  # learns the characters and continuations, nothing else
    pieces = scout.get_vocab()
    characters = sorted((p for p in pieces if not p.startswith(_PREFIX)), key=ord)
    if len(characters) > limit_alphabet:
        counts: Counter = Counter()
        for chunk, n in chunks.items():
            for character, k in Counter(scout.normalizer.normalize_str(chunk)).items():
                counts[character] += k * n
        kept = set(sorted(characters, key=lambda c: (-counts[c], ord(c)))[:limit_alphabet])
        characters = [c for c in characters if c in kept]
    known = set(characters)
    continuations = sorted((p for p in pieces if p.startswith(_PREFIX) and p[len(_PREFIX):] in known),
                           key=lambda p: ord(p[len(_PREFIX):]))
    return characters, continuations


class _Corpus:
    """The training texts, to be read more than once: files are re-read, an iterator's strings are kept.

    A path, or a list / tuple of paths, names files (a missing one is an error, not text); any
    other iterable (a generator, ``iter(texts)``, a dataset) yields the training texts.
    """

    def __init__(self, files_or_iterator, fix_final_sigmas: bool):
        from bertkit.tokenization.tokenizer import _fix_final_sigmas

        self._fix = _fix_final_sigmas if fix_final_sigmas else None
        if isinstance(files_or_iterator, (str, os.PathLike)):
            files_or_iterator = [files_or_iterator]
        self.paths: list[Path] | None = None
        self.texts: list[str] | None = None
        if isinstance(files_or_iterator, (list, tuple)):
            bad = [p for p in files_or_iterator if not isinstance(p, (str, os.PathLike))]
            if bad:
                raise ValueError(f"train takes file paths or strings; the list holds {type(bad[0]).__name__} "
                                 f"{bad[0]!r}.")
            self.paths = [Path(p) for p in files_or_iterator]
            missing = [str(p) for p in self.paths if not p.is_file()]
            if missing:
                raise ValueError(f"no such file: {', '.join(missing)}. A list names training files; to train on "
                                 "strings in memory pass an iterator of them, e.g. iter(texts).")
        else:
            self.texts = []
            for text in files_or_iterator:
                if not isinstance(text, str):
                    raise ValueError(f"the training iterator must yield strings, got {type(text).__name__}.")
                self.texts.append(self._fix(text) if self._fix else text)

    @property
    def description(self) -> str:
        """The corpus as the subject of a sentence, with its verb "hold(s)"."""
        if self.texts is not None:
            return f"the training iterator's {len(self.texts)} strings hold"
        names = ", ".join(str(p) for p in self.paths)
        return f"the training files {names} hold" if len(self.paths) > 1 else f"the training file {names} holds"

    def __iter__(self) -> Iterator[str]:
        if self.texts is not None:
            yield from self.texts
            return
        for path in self.paths:
            with open(path, encoding="utf-8") as f:
                yield from (self._fix(line) for line in f) if self._fix else f
