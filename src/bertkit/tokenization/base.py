"""FastTokenizerBase: the HF-style encoding API every bertkit tokenizer shares, on a Rust ``tokenizers`` backend.

The Python layer only validates arguments, configures truncation and padding, and hands whole
batches to Rust; it never loops over tokens. Outputs follow HF's conventions (``input_ids``,
``token_type_ids``, ``attention_mask``, ...; see :meth:`FastTokenizerBase.__call__`).

A subclass builds the backend and says what its vocabulary and special tokens are; it sets, before
the API is used:

* ``vocab`` (``{token: id}``, every token the backend knows, added tokens included) and
  ``ids_to_tokens`` (its inverse);
* ``special_tokens``: ``{"cls_token": "[CLS]", ...}``, the named special tokens it has;
* ``model_max_length``, ``padding_side``, ``truncation_side``, ``model_input_names`` and
  ``clean_up_tokenization_spaces``;
* ``_backend``: the ``tokenizers.Tokenizer`` that encodes and decodes;

and calls :meth:`FastTokenizerBase._init_state`. It may override :meth:`~FastTokenizerBase._backends`
(every backend that carries the truncation / padding settings), :meth:`~FastTokenizerBase._encode_batch`
(how a batch is spread over them), :meth:`~FastTokenizerBase._prepare_inputs` (a fix applied to the
texts before Rust sees them) and :meth:`~FastTokenizerBase.num_special_tokens_to_add`.

Thread safety: a backend holds its truncation / padding configuration, so configuring and encoding
(and decoding) are one step under one lock per tokenizer; two threads may share a tokenizer.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.checks import check_int
from bertkit.tokenization import checks
from bertkit.tokenization.components import panicking_component
from bertkit.tokenization.encoding import BatchEncoding, to_tensors

TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
PADDING_STRATEGIES = ("longest", "max_length")

#: the named special tokens HF tokenizers have (an unset one reads as None, as in HF)
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

#: a ``model_max_length`` above this means "no known limit" (HF's LARGE_INTEGER): truncation and
#: padding to the model's length then do nothing, as in HF
UNLIMITED_ABOVE = 10**20
#: what HF writes for a tokenizer with no known limit (its VERY_LARGE_INTEGER)
NO_LIMIT = int(1e30)

TextInput = str | Sequence[str]

#: the advice in the ValueError that replaces a panic the checks did not foresee
_PANIC_FIX = ("A smaller stride or a larger max_length usually avoids this; please report the case, since "
              "bertkit should have rejected these arguments with a clearer message.")


@dataclass(frozen=True)
class PairLayout:
    """The special tokens a tokenizer puts around a pair (``before`` A, ``between`` A and B, ``after`` B) and the
    token type ids: ``*_types`` of those specials, ``a_type`` / ``b_type`` of A's and B's tokens."""

    before: tuple[int, ...]
    between: tuple[int, ...]
    after: tuple[int, ...]
    before_types: tuple[int, ...]
    between_types: tuple[int, ...]
    after_types: tuple[int, ...]
    a_type: int
    b_type: int

    @classmethod
    def of(cls, ids: Sequence[int], type_ids: Sequence[int], sequence_ids: Sequence[int | None]) -> PairLayout:
        """From a post-processed pair's ``ids``, ``type_ids`` and ``sequence_ids`` (None for a special token)."""
        first_a, last_a = sequence_ids.index(0), len(sequence_ids) - 1 - sequence_ids[::-1].index(0)
        first_b, last_b = sequence_ids.index(1), len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        parts = (slice(0, first_a), slice(last_a + 1, first_b), slice(last_b + 1, None))
        return cls(*(tuple(ids[p]) for p in parts), *(tuple(type_ids[p]) for p in parts),
                   type_ids[first_a], type_ids[first_b])

    @property
    def specials(self) -> int:
        """How many special tokens a pair gets."""
        return len(self.before) + len(self.between) + len(self.after)

    def join(self, a: Sequence[int], b: Sequence[int]) -> tuple[list[int], list[int]]:
        """``(input_ids, token_type_ids)`` of the pair of token id lists ``a``, ``b`` with the specials around."""
        ids = [*self.before, *a, *self.between, *b, *self.after]
        types = [*self.before_types, *[self.a_type] * len(a), *self.between_types, *[self.b_type] * len(b),
                 *self.after_types]
        return ids, types


class FastTokenizerBase:
    """The shared encoding / decoding API (see the module docstring for what a subclass provides)."""

    #: the outputs ``__call__`` returns by default (HF's ``model_input_names``); an instance may override it
    model_input_names: tuple[str, ...] = ("input_ids", "token_type_ids", "attention_mask")
    #: what a lone surrogate (which cannot cross into Rust) is replaced with before encoding
    _surrogate_replacement = "\ufffd"

    def _init_state(self) -> None:
        """Call at the end of ``__init__``: the truncation / padding state and the lock."""
        self._settings: tuple | None = None  # the truncation / padding the backends are configured with
        self._lock = threading.Lock()
        self._pair_layout: PairLayout | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    # ------------------------------------------------------------------ vocabulary
    def __len__(self) -> int:
        """Every token, added tokens included (HF's ``len(tokenizer)``)."""
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def __getattr__(self, name: str) -> Any:
        # unk_token, cls_token_id, ...: the special tokens and their ids; one this tokenizer lacks is None
        special = self.__dict__.get("special_tokens", {})
        if name in special:
            return special[name]
        if name.endswith("_id") and name[:-3] in special:
            return self.vocab[special[name[:-3]]]
        if name in SPECIAL_TOKEN_NAMES or (name.endswith("_id") and name[:-3] in SPECIAL_TOKEN_NAMES):
            return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def all_special_tokens(self) -> list[str]:
        """The named special tokens, then any extra ones, each once (HF's order)."""
        return list(dict.fromkeys([*self.special_tokens.values(), *getattr(self, "extra_special_tokens", ())]))

    @property
    def all_special_ids(self) -> list[int]:
        return [self.vocab[t] for t in self.all_special_tokens]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many tokens the post-processor adds to one text (or a pair)."""
        processor = self._backend.post_processor
        return 0 if processor is None else processor.num_special_tokens_to_add(pair)

    def pair_layout(self) -> PairLayout:
        """Where the post-processor puts its special tokens around a pair, and the token types of each part
        (BERT: ``[CLS] A [SEP] B [SEP]``, types 0 then 1; RoBERTa: ``<s> A </s></s> B </s>``, all 0): what task
        code needs to assemble ``special + A + special + B + special`` from token ids itself (QA windows)."""
        if self._pair_layout is None:
            with self._lock:
                self._configure(None, None, 0, None, None, self.padding_side, "right")
                pair = self._backend.encode("a", "b", add_special_tokens=True)
            self._pair_layout = PairLayout.of(pair.ids, pair.type_ids, pair.sequence_ids)
        return self._pair_layout

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int | None] | None:
        """Ids of ``tokens``; a token outside the vocabulary maps to ``unk_token``'s id (None without one)."""
        unk = self.vocab.get(self.special_tokens.get("unk_token"))
        if isinstance(tokens, str):
            return self.vocab.get(tokens, unk)
        return [self.vocab.get(t, unk) for t in tokens]

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """``tokens`` (token strings, or text already joined from them) as text, as the backend's decoder writes
        them (HF's ``convert_tokens_to_string``): WordPiece glues ``##`` pieces, byte-level BPE turns ``Ġ`` into a
        space, SentencePiece ``▁`` likewise; tokens joined by spaces where the backend has no decoder."""
        decoder = self._backend.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    @property
    def backend_tokenizer(self):
        """The ``tokenizers.Tokenizer`` (HF's name); it is reconfigured by every call, so read, do not encode."""
        return self._backend

    def with_prefix_space(self) -> FastTokenizerBase:
        """A tokenizer that reads every word as if a space came before it, as words inside a text are: what
        pre-split words (``is_split_into_words``) need. A WordPiece tokenizer splits at spaces and drops them,
        so it is returned as it is; :class:`~bertkit.tokenization.TokenizerFast` turns on byte-level BPE's
        ``add_prefix_space`` (see there)."""
        return self

    def convert_ids_to_tokens(self, ids: int | Iterable[int], skip_special_tokens: bool = False) -> str | list[str]:
        """The token of one id, or the list of tokens of a sequence / 1-D array / tensor of ids.

        A non-integer id is a TypeError; an id outside the vocabulary a ValueError naming it.
        """
        single = isinstance(ids, int) or getattr(ids, "ndim", None) == 0
        checked = checks.token_ids(ids, self._id_limit(), "ids")
        if single:
            return self.ids_to_tokens.get(checked[0])
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.ids_to_tokens.get(i) for i in checked if i not in special]

    def _id_limit(self) -> int:
        """One more than the largest id (ids are checked against it)."""
        return len(self.vocab)

    # ------------------------------------------------------------------ encoding
    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """The tokens of ``text`` (and ``pair``), without special tokens by default."""
        return self(text, pair, add_special_tokens=add_special_tokens, return_offsets_mapping=True).tokens()

    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True,
               **kwargs: Any) -> list[int]:
        """``input_ids`` of one text or pair (keyword arguments as for :meth:`__call__`)."""
        out = self(text, text_pair, add_special_tokens=add_special_tokens, **kwargs)["input_ids"]
        return out[0] if isinstance(out, list) and out and isinstance(out[0], list) else out

    def encode_plus(self, text_a: str, text_b: str | None = None, **kwargs: Any) -> BatchEncoding:
        """lucid's pair encoding: the dict :meth:`__call__` returns for one text (or pair)."""
        if not isinstance(text_a, str):
            raise ValueError(f"encode_plus encodes one text; got {type(text_a).__name__}. Use __call__ for batches.")
        return self(text_a, text_b, **kwargs)

    def batch_encode_plus(self, batch_text_or_text_pairs: Sequence[str | tuple[str, str]],
                          **kwargs: Any) -> BatchEncoding:
        """HF's older batch API: a list of texts or ``(text_a, text_b)`` pairs."""
        items = list(batch_text_or_text_pairs)
        if items and all(isinstance(i, (tuple, list)) and len(i) == 2 for i in items):
            return self([a for a, _ in items], [b for _, b in items], **kwargs)
        return self(items, **kwargs)

    def __call__(self, text: TextInput, text_pair: TextInput | None = None, *, add_special_tokens: bool = True,
                 padding: bool | str = False, truncation: bool | str | None = None, max_length: int | None = None,
                 stride: int = 0, is_split_into_words: bool = False, pad_to_multiple_of: int | None = None,
                 padding_side: str | None = None, truncation_side: str | None = None,
                 return_tensors: str | None = None,
                 return_token_type_ids: bool | None = None, return_attention_mask: bool | None = None,
                 return_overflowing_tokens: bool = False, return_special_tokens_mask: bool = False,
                 return_offsets_mapping: bool = False, return_length: bool = False) -> BatchEncoding:
        """Encode one text, a pair, or batches of either, with HF's conventions.

        ``truncation``: True / ``"longest_first"``, ``"only_first"``, ``"only_second"``
        (to ``max_length``, default ``model_max_length``; given ``max_length`` without
        ``truncation`` and without padding, ``"longest_first"``, as in HF). With
        ``return_overflowing_tokens`` the cut-off tokens come back as extra rows, windows
        overlapping by ``stride`` tokens, with ``overflow_to_sample_mapping``.
        ``truncation_side`` (default :attr:`truncation_side`, ``"right"``): ``"left"`` keeps a text's end.
        ``padding``: True / ``"longest"`` or ``"max_length"``, optionally to a multiple of
        ``pad_to_multiple_of``. ``return_tensors``: None (lists), ``"np"`` or ``"pt"``.
        A tokenizer without a known limit (``model_max_length`` above 1e20, HF's "no limit") neither
        truncates nor pads to it: truncation or ``padding="max_length"`` need an explicit ``max_length``.
        ``return_token_type_ids`` / ``return_attention_mask``: None follows :attr:`model_input_names`.

        Raises TypeError for arguments of the wrong type and ValueError for values that cannot
        work, e.g. a ``stride`` not smaller than the tokens a truncated text keeps (checked per
        pair: with ``"only_second"`` the first text must leave more than ``stride`` tokens), or
        padding with a tokenizer that has no ``pad_token``.
        """
        batched, texts, pairs = _normalise_inputs(text, text_pair, is_split_into_words)
        padding = _resolve_padding(padding)
        check_int("stride", stride, 0)
        check_int("max_length", max_length, 1, none_means="the model's limit")
        check_int("pad_to_multiple_of", pad_to_multiple_of, 1, none_means="no rounding")
        if truncation is None:  # HF: max_length alone means truncation, unless it is there for padding
            truncation = "longest_first" if max_length is not None and padding is None else False
        truncation, max_length = self._resolve_truncation(truncation, max_length, stride, pairs is not None,
                                                          add_special_tokens)
        if padding == "max_length" and max_length is None:
            if self.model_max_length > UNLIMITED_ABOVE:
                padding = None  # HF: no length to pad to
            else:
                max_length = self.model_max_length
        if padding is not None and self.special_tokens.get("pad_token") is None:
            raise ValueError(f"padding needs a pad_token, and this tokenizer has none; pass pad_token= to "
                             f"{type(self).__name__}.from_pretrained (e.g. its eos_token) or encode without padding.")
        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        inputs = list(zip(texts, pairs)) if pairs is not None else texts
        for name, side in (("padding_side", padding_side), ("truncation_side", truncation_side)):
            if side is not None:
                _check_side(name, side)
        settings = (truncation, max_length, stride, padding, pad_to_multiple_of, padding_side or self.padding_side,
                    truncation_side or self.truncation_side)
        encode_args = (inputs, is_split_into_words, add_special_tokens, return_overflowing_tokens)
        if pairs is not None and truncation is not None:
            self._check_pair_cuts(texts, pairs, settings, is_split_into_words, add_special_tokens)
        # token strings, offsets and word ids cost time in Rust: computed now only when asked for,
        # otherwise on the first call that needs them (BatchEncoding.word_ids(), tokens(), ...).
        # Overflow windows always take the full path: tokenizers' fast path gives their pair rows
        # wrong token_type_ids (tokenizers 0.23).
        full = return_offsets_mapping or return_overflowing_tokens
        try:
            rows, sample_of_row = self._encode_rows(settings, *encode_args, aligned=full)
        except Exception as error:  # the Rust core reports truncation problems as a bare Exception
            if pairs is None or "Truncation error" not in str(error):
                raise
            self._check_pair_cuts(texts, pairs, settings, is_split_into_words, add_special_tokens, every_row=True)
            raise ValueError(f"cannot truncate to max_length={max_length}: {error}. Use truncation='longest_first' "
                             "or a larger max_length.") from None
        aligned = rows if full else functools.partial(self._aligned_rows, settings, *encode_args)

        data: dict[str, Any] = {"input_ids": [r.ids for r in rows]}
        if return_token_type_ids:
            data["token_type_ids"] = [r.type_ids for r in rows]
        if return_attention_mask:
            data["attention_mask"] = [r.attention_mask for r in rows]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [r.special_tokens_mask for r in rows]
        if return_offsets_mapping:
            data["offset_mapping"] = [r.offsets for r in rows]
        if return_length:
            data["length"] = [len(r.ids) for r in rows]
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample_of_row
        # like HF: one text gives unbatched lists, but tensors and overflow windows keep the batch dimension
        # (and HF's length stays a list of one)
        unbatch = not batched and return_tensors is None and not return_overflowing_tokens
        if unbatch:
            data = {k: v if k == "length" else v[0] for k, v in data.items()}
        return BatchEncoding(to_tensors(data, return_tensors), aligned, batched=not unbatch)

    def _encode_rows(self, settings: tuple, inputs: list, is_split_into_words: bool, add_special_tokens: bool,
                     overflowing: bool, *, aligned: bool) -> tuple[list, list[int]]:
        """Encode ``inputs`` under ``settings``; overflow windows become extra rows. Returns (rows, sample of row)."""
        with self._lock:
            self._configure(*settings)
            encodings = self._encode_batch(inputs, is_split_into_words, add_special_tokens, aligned)
        rows, sample_of_row = [], []
        for i, enc in enumerate(encodings):
            for row in (enc, *(enc.overflowing if overflowing else ())):
                rows.append(row)
                sample_of_row.append(i)
        return rows, sample_of_row

    def _aligned_rows(self, *args) -> list:
        return self._encode_rows(*args, aligned=True)[0]

    def _resolve_truncation(self, truncation, max_length, stride, is_pair, add_special_tokens):
        if truncation is True:
            truncation = "longest_first"
        if truncation in (False, "do_not_truncate"):
            return None, max_length
        if truncation not in TRUNCATION_STRATEGIES:
            raise ValueError(f"truncation must be True/False or one of {TRUNCATION_STRATEGIES}, got {truncation!r}.")
        if truncation == "only_second" and not is_pair:
            raise ValueError("truncation='only_second' needs a text_pair to truncate.")
        if max_length is None and self.model_max_length > UNLIMITED_ABOVE:
            return None, None  # HF: no limit to truncate to
        max_length = self.model_max_length if max_length is None else max_length
        reserved = self.num_special_tokens_to_add(is_pair) if add_special_tokens else 0
        if max_length <= reserved:
            raise ValueError(f"max_length={max_length} leaves no room for text: the special tokens alone take "
                             f"{reserved} positions. Use max_length > {reserved}.")
        if stride >= max_length - reserved:
            raise ValueError(f"stride={stride} must be smaller than max_length - {reserved} special tokens = "
                             f"{max_length - reserved}, so that windows advance. Use a smaller stride or a larger "
                             "max_length.")
        single = self.num_special_tokens_to_add(False)
        limit = max_length - single  # tokenizers' own check, whatever add_special_tokens says
        if limit >= 0 and stride > limit:
            raise ValueError(f"stride={stride} must be <= max_length - {single} = {limit} even with "
                             "add_special_tokens=False (the tokenizers library checks it against a single text with "
                             "its special tokens). Use a smaller stride or a larger max_length.")
        return truncation, max_length

    def _check_pair_cuts(self, texts: list, pairs: list, settings: tuple, is_split_into_words: bool,
                         add_special_tokens: bool, every_row: bool = False) -> None:
        """ValueError for the first pair that truncation cannot cut (see :mod:`bertkit.tokenization.checks`).

        Only rows near the limit are examined (all with ``every_row``), so the usual cost is one
        encoding of the texts that ``only_first`` / ``only_second`` keep whole.
        """
        truncation, max_length, stride = settings[:3]
        reserved = self.num_special_tokens_to_add(True) if add_special_tokens else 0
        room = max_length - reserved
        if not every_row and (stride == 0 or (truncation == "longest_first" and stride < room // 2)):
            return  # every text that is cut keeps more than stride tokens
        if truncation == "longest_first":
            rows = list(range(len(texts)))
            first, second = self._token_counts(texts, is_split_into_words), None
        else:
            kept = texts if truncation == "only_second" else pairs
            counts = self._token_counts(kept, is_split_into_words)
            rows = [i for i, n in enumerate(counts) if every_row or room - n <= stride]
            first, second = (counts, None) if truncation == "only_second" else (None, counts)
        if not rows:
            return
        if first is None:
            first = dict(zip(rows, self._token_counts([texts[i] for i in rows], is_split_into_words)))
        if second is None:
            second = dict(zip(rows, self._token_counts([pairs[i] for i in rows], is_split_into_words)))
        for i in rows:
            problem = checks.pair_cut_problem(first[i], second[i], strategy=truncation, max_length=max_length,
                                              reserved=reserved, stride=stride,
                                              where=f" (pair {i} of the batch)" if len(texts) > 1 else "")
            if problem:
                raise ValueError(problem)

    def _token_counts(self, items: list, is_split_into_words: bool) -> list[int]:
        """Tokens of each text alone, without special tokens or truncation."""
        with self._lock:
            self._configure(None, None, 0, None, None, self.padding_side, "right")
            return [len(e.ids) for e in self._encode_batch(items, is_split_into_words, False, aligned=False)]

    def _backends(self) -> tuple:
        """Every backend that must carry the truncation / padding settings."""
        return (self._backend,)

    def _configure(self, truncation, max_length, stride, padding, pad_to_multiple_of, padding_side,
                   truncation_side) -> None:
        settings = (truncation, max_length, stride, padding, pad_to_multiple_of, padding_side, truncation_side)
        if settings == self._settings:
            return
        self._settings = None  # until every backend is configured
        for backend in self._backends():
            with checks.no_panics(lambda: self._describe(settings), _PANIC_FIX):
                if truncation is None:
                    backend.no_truncation()
                else:
                    backend.enable_truncation(max_length, stride=stride, strategy=truncation,
                                              direction=truncation_side)
                if padding is None:
                    backend.no_padding()
                else:
                    backend.enable_padding(**self._padding_args(padding, max_length, pad_to_multiple_of,
                                                                padding_side))
        self._settings = settings

    @staticmethod
    def _describe(settings: tuple, add_special_tokens: bool | None = None) -> str:
        names = ("truncation", "max_length", "stride", "padding", "pad_to_multiple_of", "padding_side",
                 "truncation_side")
        described = ", ".join(f"{name}={value!r}" for name, value in zip(names, settings))
        return described if add_special_tokens is None else f"{described}, add_special_tokens={add_special_tokens}"

    def _padding_args(self, padding, max_length, pad_to_multiple_of, padding_side) -> dict[str, Any]:
        pad = self.special_tokens["pad_token"]
        return dict(direction=padding_side, pad_id=self.vocab[pad], pad_token=pad,
                    length=max_length if padding == "max_length" else None, pad_to_multiple_of=pad_to_multiple_of)

    def _encode_batch(self, inputs: list, is_split_into_words: bool, add_special_tokens: bool, aligned: bool) -> list:
        """The encodings of ``inputs`` (called under the lock, with the backends configured)."""
        return self._run(self._backend, inputs, is_split_into_words, add_special_tokens, aligned)

    def _prepare_inputs(self, inputs: list) -> list:
        """The texts as the backend should see them (a subclass may fix them up); here unchanged."""
        return inputs

    def _run(self, backend, inputs: list, is_split_into_words: bool, add_special_tokens: bool, aligned: bool) -> list:
        inputs = self._prepare_inputs(inputs)
        encode = backend.encode_batch if aligned else backend.encode_batch_fast
        try:
            source = getattr(self, "source", type(self).__name__)  # a tokenizer.json's path, where one was read
            with checks.no_panics(lambda: self._describe(self._settings, add_special_tokens), _PANIC_FIX,
                                  lambda: panicking_component(backend, inputs, source)):
                return encode(inputs, is_pretokenized=is_split_into_words, add_special_tokens=add_special_tokens)
        except (UnicodeEncodeError, TypeError):
            # lone surrogates cannot cross into Rust (a UnicodeEncodeError, or a TypeError in tokenizers 0.23)
            replaced = [_replace_surrogates(x, self._surrogate_replacement) for x in inputs]
            if replaced == inputs:
                raise
            return self._run(backend, replaced, is_split_into_words, add_special_tokens, aligned)

    # ------------------------------------------------------------------ decoding
    def decode(self, token_ids, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None) -> str:
        """Text of ``token_ids`` (an int, a sequence of ints, a 1-D numpy array or torch tensor), as the
        backend's decoder writes it; ``clean_up_tokenization_spaces`` (None: the tokenizer's
        :attr:`clean_up_tokenization_spaces`) removes HF's spaces before punctuation and contractions.

        A non-integer id is a TypeError; an id outside the vocabulary a ValueError naming it.
        """
        ids = checks.token_ids(token_ids, self._id_limit())
        with self._lock, checks.no_panics(lambda: f"token_ids {ids!r:.80}",
                                          "Pass ids from this tokenizer's vocabulary."):
            text = self._backend.decode(ids, skip_special_tokens=skip_special_tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def batch_decode(self, sequences, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None) -> list[str]:
        return [self.decode(s, skip_special_tokens, clean_up_tokenization_spaces) for s in _as_list(sequences)]


# ---------------------------------------------------------------------------- helpers

def clean_up_tokenization(text: str) -> str:
    """HF's clean-up of decoded text: no space before punctuation and English contractions."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


def _normalise_inputs(text, text_pair, is_split_into_words: bool):
    """``(batched, texts, pairs)`` with texts / pairs as lists; clear errors for anything else.

    One input is a string, or with ``is_split_into_words`` a list of word strings.
    """
    def is_single(x) -> bool:
        if is_split_into_words:
            return isinstance(x, (list, tuple)) and all(isinstance(w, str) for w in x)
        return isinstance(x, str)

    if is_single(text):
        batched, texts = False, [text]
        if text_pair is not None and not is_single(text_pair):
            raise ValueError("text is a single text, so text_pair must be a single text too.")
        pairs = None if text_pair is None else [text_pair]
    elif isinstance(text, (list, tuple)):
        batched, texts = True, list(text)
        pairs = None if text_pair is None else list(text_pair)
        if pairs is not None and (is_single(text_pair) or len(pairs) != len(texts)):
            raise ValueError(f"text_pair must be a list as long as text ({len(texts)}) for a batch of pairs.")
    else:
        raise ValueError(f"text must be a string or a list of strings, got {type(text).__name__}.")
    for name, items in (("text", texts), ("text_pair", pairs or [])):
        for bad in (x for x in items if not is_single(x)):  # the first bad item (None included)
            what = "a list of word strings (is_split_into_words=True)" if is_split_into_words else "a string"
            raise ValueError(f"{name} holds {type(bad).__name__} {bad!r:.40}; every item must be {what}.")
    return batched, texts, pairs


def _resolve_padding(padding) -> str | None:
    if padding is True:
        return "longest"
    if padding in (False, None, "do_not_pad"):
        return None
    if padding not in PADDING_STRATEGIES:
        raise ValueError(f"padding must be True/False, 'longest' or 'max_length', got {padding!r}.")
    return padding


def _replace_surrogates(item, replacement: str):
    """Lone surrogates become ``replacement``, in a text, a pair or a list of words."""
    if isinstance(item, (tuple, list)):
        return type(item)(_replace_surrogates(x, replacement) for x in item)
    return "".join(replacement if "\ud800" <= ch <= "\udfff" else ch for ch in item)


def _as_list(values) -> list:
    if hasattr(values, "tolist"):
        values = values.tolist()
    return list(values)


def _check_side(name: str, side: Any) -> None:
    if side not in ("right", "left"):
        raise ValueError(f"{name} must be 'right' or 'left', got {side!r}.")
