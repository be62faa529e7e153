"""pytorch_pretrained_bert 0.6.2's tokenizers on bertkit's Rust tokenization pipeline.

:class:`BertTokenizer` hands whole texts to :class:`bertkit.BERTTokenizerFast` (Google's
BasicTokenizer + WordPiece, token for token). 0.6.2's ``never_split`` rule (a whitespace
token equal to one of them is kept whole and not lower-cased) only matters when such a
token occurs in the text; then, and only then, the text takes the composed path
:class:`BasicTokenizer` -> :class:`WordpieceTokenizer`, 0.6.2's own structure, built on
the same Rust normalizer, pre-tokenizer and WordPiece model.

0.6.2 differs from Google's rules in one place, reproduced here: its clean-up drops every
character of a ``C*`` category, so beyond controls (Cc, Cf) it also removes lone
surrogates, private-use and unassigned code points (Cs, Co, Cn). Unlike 0.6.2,
``from_pretrained`` raises ``FileNotFoundError`` for a missing path (0.6.2 returned None)
and ``save_vocabulary`` also accepts a file path. No torch is imported here.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from urllib.parse import urlparse

from tokenizers import models

from bertkit.compat.pytorch_pretrained_bert._shortcuts import archive_map, fetch_registered, max_positions_map
from bertkit.compat.pytorch_pretrained_bert.file_utils import cached_path
from bertkit.io import atomic_write_text
from bertkit.tokenization.pipeline import build_normalizer, build_pre_tokenizer
from bertkit.tokenization.tokenizer import BERTTokenizerFast
from bertkit.tokenization.unicode import char_classes, final_sigma_positions, is_punctuation, is_removed, is_whitespace

logger = logging.getLogger(__name__)

#: The vocabulary file of a saved tokenizer directory.
VOCAB_NAME = "vocab.txt"
#: Tokens the basic tokenizer keeps whole (the special tokens).
NEVER_SPLIT = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")

#: 0.6.2's shortcut names, each with the URL of its checkpoint in bertkit's weights registry (0.6.2 pointed at
#: separate vocab.txt files; ``cached_path`` of these URLs gives the checkpoint's directory, holding vocab.txt).
PRETRAINED_VOCAB_ARCHIVE_MAP = archive_map()
#: 0.6.2's shortcut names, each with its model's number of positions (512 for all of them).
PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP = max_positions_map()


def load_vocab(vocab_file: str | os.PathLike) -> collections.OrderedDict[str, int]:
    """``{token: line number}`` as 0.6.2 reads it (lines stripped; a repeated token keeps its last line)."""
    vocab: collections.OrderedDict[str, int] = collections.OrderedDict()
    with open(vocab_file, encoding="utf-8") as reader:
        for index, line in enumerate(reader):
            vocab[line.strip()] = index
    return vocab


def whitespace_tokenize(text: str) -> list[str]:
    """Runs basic whitespace cleaning and splitting on a piece of text."""
    return text.split()


# ---------------------------------------------------------------------------- text rules (Google's, via bertkit)

def _python_class(onig_class: str) -> str:
    """bertkit's Oniguruma character class (``\\x{HEX}``) in Python ``re`` syntax."""
    return re.sub(r"\\x\{([0-9A-F]+)\}", lambda m: f"\\U{int(m.group(1), 16):08x}", onig_class)


@functools.cache
def _patterns() -> dict[str, re.Pattern]:
    classes = char_classes()
    patterns = {name: re.compile(_python_class(classes[name]) + "+")
                for name in ("remove", "cjk", "nonspacing_mark")}
    # 0.6.2's _is_control is `category.startswith("C")`: beyond Google's Cc/Cf it also drops surrogates,
    # private-use and unassigned code points
    extra = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) in ("Cs", "Co", "Cn")]
    ranges: list[list[int]] = []
    for cp in extra:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    patterns["other_controls"] = re.compile(
        "[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]+")
    patterns["surrogate"] = re.compile("[\ud800-\udfff]")
    return patterns


def _drop_other_controls(text: str) -> str:
    """``text`` without the characters 0.6.2 removes and Google's rules keep (categories Cs, Co, Cn)."""
    return text if text.isascii() else _patterns()["other_controls"].sub("", text)


def _clean(text: str) -> str:
    """``text`` without every character 0.6.2's clean-up removes (controls, NUL, U+FFFD, Cs/Co/Cn)."""
    return _patterns()["remove"].sub("", _drop_other_controls(text))


def _fold(text: str) -> str:
    """Lower-cased and accent-stripped as Google's BasicTokenizer does (``str.lower``, NFD, drop Mn)."""
    return _patterns()["nonspacing_mark"].sub("", unicodedata.normalize("NFD", text.lower()))


def _words(cleaned: str) -> list[str]:
    """Google's whitespace tokens of already cleaned text (CJK ideographs stand alone)."""
    return _patterns()["cjk"].sub(lambda m: " " + " ".join(m.group(0)) + " ", cleaned).split()


def _watch(tokens: Iterable[str], lower: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(tokens, those that can also match after folding)`` for :func:`_mentions`.

    Folded text holds only fixed points of :func:`_fold`, so only such tokens can occur in it
    (the default never_split tokens are upper-case: none of them).
    """
    tokens = tuple(t for t in tokens if t)
    return tokens, tuple(t for t in tokens if lower and _fold(t) == t)


def _mentions(cleaned: str, watch: tuple[tuple[str, ...], tuple[str, ...]]) -> bool:
    """Whether a watched token could be a whitespace token of the ``cleaned`` text (before or after folding)."""
    tokens, folded_tokens = watch
    if any(t in cleaned for t in tokens):
        return True
    if not folded_tokens:
        return False
    folded = _fold(cleaned)
    return any(t in folded for t in folded_tokens)


# ---------------------------------------------------------------------------- 0.6.2's character tests

def _is_whitespace(char: str) -> bool:
    """Whether ``char`` is whitespace to BERT: space, \\t, \\n, \\r or category Zs (Google's rule)."""
    return is_whitespace(char)


def _is_control(char: str) -> bool:
    """Whether ``char`` is a control character to 0.6.2: any ``C*`` category except \\t, \\n and \\r.

    Google's Cc/Cf controls (bertkit's :func:`~bertkit.tokenization.unicode.is_removed`, without
    the NUL and U+FFFD it adds) plus Cs, Co and Cn, the characters 0.6.2 also drops (module docstring).
    """
    category = unicodedata.category(char)
    if category in ("Cc", "Cf"):
        return is_removed(char, category)
    return category in ("Cs", "Co", "Cn")


def _is_punctuation(char: str) -> bool:
    """Whether ``char`` is split off as punctuation: ASCII non-alphanumerics and categories P* (Google's rule)."""
    return is_punctuation(char)


# ---------------------------------------------------------------------------- tokenizers

class BasicTokenizer:
    """Runs basic tokenization (punctuation splitting, lower casing, etc.)."""

    def __init__(self, do_lower_case: bool = True, never_split: Sequence[str] = NEVER_SPLIT):
        self.do_lower_case = do_lower_case
        self.never_split = never_split
        self._normalizer = build_normalizer(lowercase=do_lower_case, strip_accents=do_lower_case)
        self._pre_tokenizer = build_pre_tokenizer(tokenize_chinese_chars=True)
        self._watch = _watch(never_split, do_lower_case)

    def tokenize(self, text: str) -> list[str]:
        """Tokenizes a piece of text."""
        cleaned = _clean(text)
        if not _mentions(cleaned, self._watch):
            return self._split(cleaned)
        out: list[str] = []
        chunk: list[str] = []
        for word in _words(cleaned):
            kept = word if word in self.never_split else None
            if kept is None and self.do_lower_case and _fold(word) in self.never_split:
                kept = _fold(word)  # 0.6.2 lower-cases it, then finds it in never_split and does not split it
            if kept is None:
                chunk.append(word)
                continue
            out += self._split(" ".join(chunk))
            out.append(kept)
            chunk = []
        return out + self._split(" ".join(chunk))

    def _split(self, cleaned: str) -> list[str]:
        """Lower-case / strip accents, split punctuation and CJK: bertkit's Rust normalizer and pre-tokenizer."""
        if self.do_lower_case and "\u03a3" in cleaned:  # Python's context-dependent final sigma
            chars = list(cleaned)
            for i in final_sigma_positions(cleaned):
                chars[i] = "\u03c2"
            cleaned = "".join(chars)
        return [piece for piece, _ in self._pre_tokenizer.pre_tokenize_str(self._normalizer.normalize_str(cleaned))]


class WordpieceTokenizer:
    """Runs WordPiece tokenization (greedy longest match first, ``##`` continuations)."""

    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]", max_input_chars_per_word: int = 100):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        rust_vocab = dict(vocab)
        rust_vocab.setdefault(unk_token, max(vocab.values(), default=-1) + 1)  # 0.6.2 emits it even if absent
        self._model = models.WordPiece(rust_vocab, unk_token=unk_token,
                                       max_input_chars_per_word=max_input_chars_per_word)

    def tokenize(self, text: str) -> list[str]:
        """The word pieces of each whitespace token of ``text`` (already basic-tokenized)."""
        out: list[str] = []
        for word in whitespace_tokenize(text):
            if not word.isascii() and _patterns()["surrogate"].search(word):
                out.append(self.unk_token)  # no vocabulary entry holds a lone surrogate
            else:
                out += [t.value for t in self._model.tokenize(word)]
        return out


class BertTokenizer:
    """Runs end-to-end tokenization: punctuation splitting + wordpiece (0.6.2's API).

    Args:
        vocab_file: a ``vocab.txt`` (one token per line).
        do_lower_case: lower-case and strip accents (with ``do_basic_tokenize``).
        max_len: ``convert_tokens_to_ids`` warns for longer sequences (default 1e12, i.e. never).
        do_basic_tokenize: without it, only whitespace splitting and WordPiece.
        never_split: whitespace tokens kept whole (and not lower-cased).
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True, max_len: int | None = None,
                 do_basic_tokenize: bool = True, never_split: Sequence[str] = NEVER_SPLIT):
        if not os.path.isfile(vocab_file):
            raise ValueError(
                f"Can't find a vocabulary file at path '{vocab_file}'. To load the vocabulary from a Google pretrained "
                "model use `tokenizer = BertTokenizer.from_pretrained(PRETRAINED_MODEL_NAME)`")
        self.vocab = load_vocab(vocab_file)
        self.ids_to_tokens = collections.OrderedDict([(ids, tok) for tok, ids in self.vocab.items()])
        self.do_basic_tokenize = do_basic_tokenize
        if do_basic_tokenize:
            self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case, never_split=never_split)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self.max_len = max_len if max_len is not None else int(1e12)
        self._fast = _fast_tokenizer(self.vocab, do_lower_case) if do_basic_tokenize else None
        # texts holding one of these take the composed path (never_split / the fast tokenizer's specials)
        self._protected = _watch(dict.fromkeys([*never_split, *(self._fast.all_special_tokens if self._fast else ())]),
                                 do_lower_case)

    def tokenize(self, text: str) -> list[str]:
        if not self.do_basic_tokenize:
            return self.wordpiece_tokenizer.tokenize(text)
        if self._fast is not None:
            text = _drop_other_controls(text)
            if not _mentions(_clean(text), self._protected):
                return self._fast.tokenize(text)
        return [piece for token in self.basic_tokenizer.tokenize(text)
                for piece in self.wordpiece_tokenizer.tokenize(token)]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Converts a sequence of tokens into ids using the vocab (an unknown token is a KeyError)."""
        ids = [self.vocab[token] for token in tokens]
        if len(ids) > self.max_len:
            logger.warning(
                "Token indices sequence length is longer than the specified maximum "
                f" sequence length for this BERT model ({len(ids)} > {self.max_len}). Running this"
                " sequence through BERT will result in indexing errors"
            )
        return ids

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Converts a sequence of ids in wordpiece tokens using the vocab."""
        return [self.ids_to_tokens[int(i)] for i in ids]

    def save_vocabulary(self, vocab_path: str | os.PathLike) -> str:
        """Save the vocabulary to ``vocab_path/vocab.txt`` (a directory) or to the file ``vocab_path``."""
        vocab_file = os.path.join(vocab_path, VOCAB_NAME) if os.path.isdir(vocab_path) else os.fspath(vocab_path)
        lines = []
        index = 0
        for token, token_index in sorted(self.vocab.items(), key=lambda kv: kv[1]):
            if index != token_index:
                logger.warning(f"Saving vocabulary to {vocab_file}: vocabulary indices are not consecutive."
                               " Please check that the vocabulary is not corrupted!")
                index = token_index
            lines.append(token + "\n")
            index += 1
        atomic_write_text(vocab_file, "".join(lines))
        return vocab_file

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike,
                        cache_dir: str | os.PathLike | None = None, *inputs, **kwargs) -> BertTokenizer:
        """A shortcut name (``'bert-base-uncased'``, or any name of bertkit's weights registry,
        fetched into ``cache_dir``), a directory holding ``vocab.txt``, a vocab file, or a URL
        (of a vocab file, or a value of ``PRETRAINED_VOCAB_ARCHIVE_MAP``) fetched by ``cached_path``.

        0.6.2's rules for its shortcut names: ``-cased`` names force ``do_lower_case=False``
        (others ``True``), with a warning when that overrides the argument, and ``max_len``
        is capped at 512. A path that does not exist raises ``FileNotFoundError`` (0.6.2
        logged an error and returned None).
        """
        name = os.fspath(pretrained_model_name_or_path)
        if name in PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP:
            if "-cased" in name and kwargs.get("do_lower_case", True):
                logger.warning("The pre-trained model you are loading is a cased model but you have not set "
                               "`do_lower_case` to False. We are setting `do_lower_case=False` for you but "
                               "you may want to check this behavior.")
                kwargs["do_lower_case"] = False
            elif "-cased" not in name and not kwargs.get("do_lower_case", True):
                logger.warning("The pre-trained model you are loading is an uncased model but you have set "
                               "`do_lower_case` to False. We are setting `do_lower_case=True` for you "
                               "but you may want to check this behavior.")
                kwargs["do_lower_case"] = True
            vocab_file = _shortcut_vocab(name, cache_dir)
            max_len = kwargs.get("max_len")
            kwargs["max_len"] = min(int(1e12) if max_len is None else max_len,
                                    PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP[name])
        else:
            if urlparse(name).scheme in ("http", "https", "file"):  # a vocab.txt's URL, or a registered checkpoint's
                name = cached_path(name, cache_dir)
            vocab_file = os.path.join(name, VOCAB_NAME) if os.path.isdir(name) else name
            if not os.path.exists(vocab_file):
                vocab_file, do_lower_case = _registered_vocab(name, cache_dir)
                kwargs.setdefault("do_lower_case", do_lower_case)
        logger.info("loading vocabulary file %s", vocab_file)
        return cls(vocab_file, *inputs, **kwargs)


# ---------------------------------------------------------------------------- helpers

def _fast_tokenizer(vocab: dict[str, int], do_lower_case: bool) -> BERTTokenizerFast | None:
    """bertkit's tokenizer on this vocabulary, or None when it cannot take it (gaps in the ids, or
    no [UNK]/[CLS]/... tokens): the composed path then handles every text."""
    try:
        return BERTTokenizerFast(vocab=vocab, do_lower_case=do_lower_case)
    except ValueError:
        return None


def _shortcut_vocab(name: str, cache_dir: str | os.PathLike | None) -> str:
    if name == "bert-base-uncased":  # shipped with bertkit
        from bertkit.resources import BERT_BASE_UNCASED_VOCAB

        return os.fspath(BERT_BASE_UNCASED_VOCAB)
    return _registered_vocab(name, cache_dir)[0]


def _registered_vocab(name: str, cache_dir: str | os.PathLike | None) -> tuple[str, bool]:
    """``(vocab.txt path, do_lower_case)`` of a registered checkpoint name, fetched if needed."""
    entry, directory = fetch_registered(name, cache_dir, "vocabulary file")
    return os.path.join(directory, VOCAB_NAME), entry.do_lower_case


__all__ = ["NEVER_SPLIT", "PRETRAINED_VOCAB_ARCHIVE_MAP", "PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP",
           "VOCAB_NAME", "BasicTokenizer", "BertTokenizer", "WordpieceTokenizer", "cached_path", "load_vocab",
           "whitespace_tokenize"]
