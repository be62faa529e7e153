"""BERTTokenizerFast: Google's BERT tokenization, token for token, on the Rust ``tokenizers`` core.

The encoding API (``__call__``, padding, truncation, overflow windows, tensors, decoding) is
:class:`~bertkit.tokenization.base.FastTokenizerBase`'s; this class builds Google's pipeline
(:mod:`bertkit.tokenization.pipeline`), cuts pairs as Google's BERT does (2 special tokens for a
text, 3 for a pair), and encodes pure-ASCII texts with a faster pipeline that gives the same tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tokenizers import decoders

from bertkit.tokenization import checks
from bertkit.tokenization.base import FastTokenizerBase, _check_side
from bertkit.tokenization.base import clean_up_tokenization as clean_up_tokenization  # its old home
from bertkit.tokenization.pipeline import build_backend
from bertkit.tokenization.unicode import final_sigma_positions
from bertkit.tokenization.vocab import (
    check_special_tokens,
    read_vocab_file,
    vocab_from_tokens,
)

#: HF's BERT tokenizers' decoder, which ``convert_tokens_to_string`` uses
_JOINING_DECODER = decoders.WordPiece(prefix="##", cleanup=True)


class BERTTokenizerFast(FastTokenizerBase):
    """WordPiece tokenizer with Google's BasicTokenizer semantics (see :mod:`bertkit.tokenization.unicode`).

    Args:
        vocab_file: path of a ``vocab.txt`` (or pass ``vocab=`` a token list / ``{token: id}``).
        do_lower_case: lower-case (and, unless ``strip_accents=False``, strip accents).
        strip_accents: None follows ``do_lower_case``; True / False force it.
        tokenize_chinese_chars: isolate CJK ideographs as single tokens.
        unk_token, sep_token, pad_token, cls_token, mask_token: the special tokens; each
            must be in the vocabulary, and each is recognised when written in a text.
        max_input_chars_per_word: longer words become ``unk_token``.
        model_max_length: the default ``max_length`` when truncating or padding to max length.
        model_input_names: the outputs ``__call__`` returns by default (HF's; DistilBERT's omit
            ``token_type_ids``); None: ``input_ids``, ``token_type_ids`` and ``attention_mask``.

    Decoding cleans up spaces before punctuation by default (``clean_up_tokenization_spaces``), as
    HF's BERT tokenizer does; a lone surrogate in a text becomes U+E000 (private use), like it a
    letter in no vocabulary.
    """

    _surrogate_replacement = "\ue000"

    def __init__(self, vocab_file: str | os.PathLike | None = None, do_lower_case: bool = True,
                 strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
                 unk_token: str = "[UNK]", sep_token: str = "[SEP]", pad_token: str = "[PAD]",
                 cls_token: str = "[CLS]", mask_token: str = "[MASK]", *,
                 vocab: Mapping[str, int] | Sequence[str] | None = None, max_input_chars_per_word: int = 100,
                 model_max_length: int = 512, padding_side: str = "right", truncation_side: str = "right",
                 model_input_names: Sequence[str] | None = None):
        if (vocab_file is None) == (vocab is None):
            raise ValueError("Pass exactly one of vocab_file (a vocab.txt path) or vocab (tokens or {token: id}).")
        if vocab_file is not None:
            self.vocab = read_vocab_file(vocab_file)
            source = f"vocab_file {os.fspath(vocab_file)!r}"
        else:
            self.vocab = _vocab_from(vocab)
            source = "vocab"
        self.special_tokens = {"unk_token": unk_token, "sep_token": sep_token, "pad_token": pad_token,
                               "cls_token": cls_token, "mask_token": mask_token}
        check_special_tokens(self.vocab, self.special_tokens, source)
        if max_input_chars_per_word < 1 or model_max_length < 3:
            raise ValueError(f"max_input_chars_per_word must be >= 1 and model_max_length >= 3, got "
                             f"{max_input_chars_per_word} and {model_max_length}.")
        for name, side in (("padding_side", padding_side), ("truncation_side", truncation_side)):
            _check_side(name, side)
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.model_max_length = model_max_length
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        if model_input_names is not None:
            self.model_input_names = tuple(model_input_names)
        self.clean_up_tokenization_spaces = True
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        options = dict(lowercase=do_lower_case, strip_accents=do_lower_case if strip_accents is None else strip_accents,
                       tokenize_chinese_chars=tokenize_chinese_chars, special_tokens=self.special_tokens,
                       max_input_chars_per_word=max_input_chars_per_word)
        self._backend = build_backend(self.vocab, **options)
        self._ascii_backend = build_backend(self.vocab, **options, ascii_only=True)  # same output on ASCII text
        self._init_state()

    # ------------------------------------------------------------------ vocabulary and backends
    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return checks.SPECIAL_TOKENS_PAIR if pair else checks.SPECIAL_TOKENS_SINGLE

    def _backends(self) -> tuple:
        return (self._backend, self._ascii_backend)

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """As HF's BERT tokenizers join tokens: ``##`` pieces glued, the rest separated by spaces, then HF's
        clean-up of each piece (``" ,"`` -> ``","``, ...): the WordPiece decoder with ``cleanup`` (:meth:`decode`
        applies the clean-up to the whole text instead, per ``clean_up_tokenization_spaces``)."""
        return _JOINING_DECODER.decode(list(tokens))

    def _prepare_inputs(self, inputs: list) -> list:
        if self.do_lower_case:
            return [_fix_final_sigmas(x) for x in inputs]
        return inputs

    def _encode_batch(self, inputs: list, is_split_into_words: bool, add_special_tokens: bool, aligned: bool) -> list:
        """Encode with the ASCII pipeline where it applies and the full one elsewhere; keep the order."""
        ascii_rows = [i for i, x in enumerate(inputs) if _is_ascii(x)]
        if len(ascii_rows) == len(inputs):
            return self._run(self._ascii_backend, inputs, is_split_into_words, add_special_tokens, aligned)
        if not ascii_rows:
            return self._run(self._backend, inputs, is_split_into_words, add_special_tokens, aligned)
        is_ascii = set(ascii_rows)
        other_rows = [i for i in range(len(inputs)) if i not in is_ascii]
        out: list = [None] * len(inputs)
        for backend, rows in ((self._ascii_backend, ascii_rows), (self._backend, other_rows)):
            for i, enc in zip(rows, self._run(backend, [inputs[i] for i in rows], is_split_into_words,
                                              add_special_tokens, aligned)):
                out[i] = enc
        _, max_length, _, padding, pad_to_multiple_of, padding_side, _ = self._settings
        if padding == "longest":  # each half was padded to its own longest: pad both to the batch's
            longest = max(len(e.ids) for e in out)
            args = self._padding_args(padding, max_length, pad_to_multiple_of, padding_side)
            if pad_to_multiple_of:
                longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
            for enc in out:
                enc.pad(longest, direction=args["direction"], pad_id=args["pad_id"], pad_token=args["pad_token"])
        return out

    # ------------------------------------------------------------------ files and training
    def save_pretrained(self, directory: str | os.PathLike) -> tuple[str, ...]:
        """Write ``vocab.txt``, ``tokenizer_config.json`` and ``special_tokens_map.json`` (HF's names)."""
        from bertkit.tokenization.files import save_tokenizer

        return save_tokenizer(self, directory)

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, **overrides: Any) -> BERTTokenizerFast:
        """Load a directory written by bertkit or HF (``vocab.txt`` + config, or ``tokenizer.json``),
        or a ``vocab.txt`` path; ``overrides`` replace saved settings (e.g. ``do_lower_case=False``)."""
        from bertkit.tokenization.files import load_bert_tokenizer

        return load_bert_tokenizer(cls, source, overrides)

    @classmethod
    def train(cls, files_or_iterator: Iterable[str] | Sequence[str | os.PathLike], vocab_size: int = 30522,
              min_frequency: int = 2, **kwargs: Any) -> BERTTokenizerFast:
        """Learn a WordPiece vocabulary from text files or an iterator of strings (see
        :func:`bertkit.tokenization.training.train_tokenizer` for the options)."""
        from bertkit.tokenization.training import train_tokenizer

        return train_tokenizer(cls, files_or_iterator, vocab_size=vocab_size, min_frequency=min_frequency, **kwargs)

    def __repr__(self) -> str:
        return (f"BERTTokenizerFast(vocab_size={len(self.vocab)}, do_lower_case={self.do_lower_case}, "
                f"strip_accents={self.strip_accents}, tokenize_chinese_chars={self.tokenize_chinese_chars})")


BERTTokenizer = BERTTokenizerFast

# ---------------------------------------------------------------------------- helpers

def _vocab_from(vocab: Mapping[str, int] | Sequence[str]) -> dict[str, int]:
    if isinstance(vocab, Mapping):
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise ValueError("vocab ids must be 0..N-1, each used once.")
        return dict(vocab)
    tokens = list(vocab)
    if not tokens:
        raise ValueError("vocab is empty.")
    return vocab_from_tokens(tokens)


def _is_ascii(item) -> bool:
    return item.isascii() if isinstance(item, str) else all(_is_ascii(x) for x in item)


def _fix_final_sigmas(item):
    """Substitute ``ς`` where Python's ``str.lower`` would produce it (see ``final_sigma_positions``)."""
    if isinstance(item, tuple):
        return tuple(_fix_final_sigmas(x) for x in item)
    if isinstance(item, list):
        return [_fix_final_sigmas(x) for x in item]
    if "\u03a3" not in item:
        return item
    chars = list(item)
    for i in final_sigma_positions(item):
        chars[i] = "\u03c2"
    return "".join(chars)
