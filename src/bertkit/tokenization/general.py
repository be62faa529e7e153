"""TokenizerFast: any HF ``tokenizer.json`` (byte-level BPE, SentencePiece Unigram, WordPiece, ...) behind
the API of :class:`~bertkit.tokenization.BERTTokenizerFast`.

It serves RoBERTa, XLM-RoBERTa, CamemBERT, MPNet, ModernBERT and any other encoder whose tokenizer
is a ``tokenizers`` pipeline: the file's model, added tokens and post-processor do the work
(``<s> A </s></s> B </s>`` pairs, byte-level offsets, ...), and truncation, overflow windows and
padding are the Rust core's, as in HF's fast tokenizers. :meth:`TokenizerFast.from_pretrained`
reads a directory as ``transformers.AutoTokenizer`` does (see :mod:`bertkit.tokenization.tokenizer_json`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Tokenizer

from bertkit.checks import check_int
from bertkit.tokenization.base import NO_LIMIT, SPECIAL_TOKEN_NAMES, FastTokenizerBase, _check_side

#: AddedToken flags a special token may carry (``{"content": "<mask>", "lstrip": true, ...}`` in HF's files)
_FLAGS = ("single_word", "lstrip", "rstrip", "normalized")

SpecialToken = str | Mapping[str, Any]


class TokenizerFast(FastTokenizerBase):
    """A ``tokenizers`` pipeline with HF's tokenizer API (``__call__``, encode, decode, save / load, ...).

    Args:
        tokenizer_file: path of a ``tokenizer.json`` (or pass ``tokenizer_object=`` a
            ``tokenizers.Tokenizer``, which is copied).
        bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token: the named special
            tokens (None: the tokenizer has none). A string, or HF's ``{"content": ..., "lstrip": ...}``
            form whose flags are applied. One the backend does not know as an added token becomes a
            special added token (its vocabulary id, or a new id), as HF does.
        extra_special_tokens: further special tokens (a list, or HF's ``{name: token}``).
        model_max_length: the default ``max_length``; the default :data:`~bertkit.tokenization.base.NO_LIMIT`
            (HF's "no limit") makes truncation and ``padding="max_length"`` need an explicit ``max_length``.
        model_input_names: the outputs ``__call__`` returns by default (HF's for the class; RoBERTa-style
            tokenizers return no ``token_type_ids``).
        clean_up_tokenization_spaces: :meth:`decode`'s default (False, as transformers 5 has it).
        tokenizer_class: the transformers class name written to ``tokenizer_config.json`` when saving.

    The post-processor's special tokens must be in the vocabulary with the ids it inserts (a ValueError
    naming the file otherwise). The backend is configured per call (truncation, padding) under the
    tokenizer's lock: use :attr:`backend_tokenizer` for reading, not for encoding.
    """

    def __init__(self, tokenizer_file: str | os.PathLike | None = None, *, tokenizer_object: Tokenizer | None = None,
                 bos_token: SpecialToken | None = None, eos_token: SpecialToken | None = None,
                 unk_token: SpecialToken | None = None, sep_token: SpecialToken | None = None,
                 pad_token: SpecialToken | None = None, cls_token: SpecialToken | None = None,
                 mask_token: SpecialToken | None = None,
                 extra_special_tokens: Sequence[SpecialToken] | Mapping[str, SpecialToken] | None = None,
                 model_max_length: int = NO_LIMIT, padding_side: str = "right", truncation_side: str = "right",
                 model_input_names: Sequence[str] = ("input_ids", "attention_mask"),
                 clean_up_tokenization_spaces: bool = False, tokenizer_class: str = "PreTrainedTokenizerFast"):
        from bertkit.tokenization.tokenizer_json import backend_from_file

        if (tokenizer_file is None) == (tokenizer_object is None):
            raise ValueError("Pass exactly one of tokenizer_file (a tokenizer.json path) or tokenizer_object "
                             "(a tokenizers.Tokenizer).")
        if tokenizer_file is not None:
            backend, source = backend_from_file(tokenizer_file), os.fspath(tokenizer_file)
        elif isinstance(tokenizer_object, Tokenizer):
            backend, source = Tokenizer.from_str(tokenizer_object.to_str()), "tokenizer_object"
        else:
            raise TypeError(f"tokenizer_object must be a tokenizers.Tokenizer, got {type(tokenizer_object).__name__}.")
        named = dict(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, sep_token=sep_token,
                     pad_token=pad_token, cls_token=cls_token, mask_token=mask_token)
        self._setup(backend, source, named, extra_special_tokens, model_max_length=model_max_length,
                    padding_side=padding_side, truncation_side=truncation_side, model_input_names=model_input_names,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces, tokenizer_class=tokenizer_class)

    @classmethod
    def _from_backend(cls, backend: Tokenizer, source: str, named: dict[str, SpecialToken | None],
                      extra_special_tokens, *, init_config: dict[str, Any], follows_class: bool,
                      **settings: Any) -> TokenizerFast:
        """A tokenizer owning ``backend`` (not copied): the loaders' way in."""
        tokenizer = cls.__new__(cls)
        tokenizer._setup(backend, source, named, extra_special_tokens, **settings)
        tokenizer.init_config = dict(init_config)
        tokenizer.follows_class = follows_class
        return tokenizer

    def _setup(self, backend: Tokenizer, source: str, named: dict[str, SpecialToken | None], extra_special_tokens,
               *, model_max_length: int, padding_side: str, truncation_side: str, model_input_names: Sequence[str],
               clean_up_tokenization_spaces: bool, tokenizer_class: str) -> None:
        check_int("model_max_length", model_max_length, 1)
        for name, side in (("padding_side", padding_side), ("truncation_side", truncation_side)):
            _check_side(name, side)
        unknown = set(named) - set(SPECIAL_TOKEN_NAMES)
        if unknown:
            raise TypeError(f"unknown special token name(s) {sorted(unknown)}; the names are {SPECIAL_TOKEN_NAMES}.")
        self.source = source
        self.special_tokens = {name: _content(value, name) for name in SPECIAL_TOKEN_NAMES
                               if (value := named.get(name)) is not None}
        extras = list(extra_special_tokens.values()) if isinstance(extra_special_tokens, Mapping) else \
            list(extra_special_tokens or ())
        self.extra_special_tokens = [_content(value, "extra_special_tokens") for value in extras]
        _add_special_tokens(backend, [*(v for v in named.values() if v is not None), *extras])
        self._backend = backend
        processor = backend.post_processor  # read once: it never changes
        self._special_counts = (0, 0) if processor is None else \
            (processor.num_special_tokens_to_add(False), processor.num_special_tokens_to_add(True))
        self.vocab = backend.get_vocab(with_added_tokens=True)
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        if processor is not None:  # its own JSON: serialising the whole backend would copy the vocabulary
            _check_post_processor(json.loads(processor.__getstate__()), self.vocab, source)
        self.model_max_length = model_max_length
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        self.model_input_names = tuple(model_input_names)
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.tokenizer_class = tokenizer_class
        self.init_config: dict[str, Any] = {}
        self.follows_class = False  # whether the pipeline is transformers' recipe for tokenizer_class
        self._init_state()

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        """The model's vocabulary, without added tokens (HF's ``vocab_size``; ``len()`` counts them)."""
        return self._backend.get_vocab_size(with_added_tokens=False)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return self._special_counts[bool(pair)]

    def _id_limit(self) -> int:
        return max(self.ids_to_tokens) + 1 if self.ids_to_tokens else 0

    def pipeline_json(self) -> dict[str, Any]:
        """The backend as tokenizer.json holds it, without the per-call truncation / padding settings."""
        with self._lock:
            data = json.loads(self._backend.to_str())
        data["truncation"] = data["padding"] = None
        return data

    def with_prefix_space(self) -> TokenizerFast:
        """This tokenizer with byte-level BPE's ``add_prefix_space`` on (``Ġ`` before the first word too), as HF's
        ``run_ner`` loads RoBERTa-style tokenizers for pre-split words: without it, each word of
        ``is_split_into_words`` input is encoded as a text's first word (``world``, not the ``Ġworld`` of running
        text). The pre-tokenizer and the post-processor (its offsets) get the option, and so does
        ``tokenizer_config.json`` when saved: ``transformers.AutoTokenizer`` reads the saved directory back to
        the same pipeline. A pipeline without a byte-level pre-tokenizer (WordPiece; SentencePiece, whose
        Metaspace already marks every word) or with the option on is returned as it is."""
        pre_tokenizer = self._backend.pre_tokenizer  # its own JSON first: serialising the backend copies the vocabulary
        if pre_tokenizer is None or not _prefix_space_on(json.loads(pre_tokenizer.__getstate__()), "pre_tokenizer"):
            return self
        data = self.pipeline_json()
        _prefix_space_on(data["pre_tokenizer"], "pre_tokenizer")
        _prefix_space_on(data.get("post_processor"), "post_processor")
        backend = Tokenizer.from_str(json.dumps(data))
        options = dict(model_max_length=self.model_max_length, padding_side=self.padding_side,
                       truncation_side=self.truncation_side, model_input_names=self.model_input_names,
                       clean_up_tokenization_spaces=self.clean_up_tokenization_spaces,
                       tokenizer_class=self.tokenizer_class)
        return type(self)._from_backend(backend, self.source, dict(self.special_tokens), self.extra_special_tokens,
                                        init_config={**self.init_config, "add_prefix_space": True},
                                        follows_class=self.follows_class, **options)

    # ------------------------------------------------------------------ files
    def save_pretrained(self, directory: str | os.PathLike) -> tuple[str, ...]:
        """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` (HF's layout:
        ``transformers.AutoTokenizer`` and :meth:`from_pretrained` read them back to the same tokenizer)."""
        from bertkit.tokenization.tokenizer_json import save_json_tokenizer

        return save_json_tokenizer(self, directory)

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, *, follow_tokenizer_class: bool = True,
                        **overrides: Any) -> TokenizerFast:
        """Load an HF tokenizer directory (``tokenizer.json`` + ``tokenizer_config.json``; a DeBERTa-v2/v3 one may
        hold SentencePiece's ``spm.model`` instead of ``tokenizer.json``) or a ``tokenizer.json``.

        ``follow_tokenizer_class``: build the pipeline as transformers 5 builds the ``tokenizer_class``
        (see :mod:`bertkit.tokenization.hf_classes`); False uses the file's pipeline as written.
        ``overrides`` replace saved settings (``model_max_length=512``, ``pad_token="<pad>"``, ...).
        """
        from bertkit.tokenization.tokenizer_json import load_json_tokenizer

        return load_json_tokenizer(cls, source, overrides, follow_tokenizer_class=follow_tokenizer_class)

    def __repr__(self) -> str:
        model = type(self._backend.model).__name__
        return (f"TokenizerFast(tokenizer_class={self.tokenizer_class!r}, model={model!r}, "
                f"vocab_size={self.vocab_size}, added_tokens={len(self) - self.vocab_size}, "
                f"special_tokens={self.special_tokens})")


def _content(value: SpecialToken, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise TypeError(f"{name} must be a token string or a {{'content': token, ...}} mapping, got {value!r:.60}.")


def _add_special_tokens(backend: Tokenizer, tokens: list[SpecialToken]) -> None:
    """Make each token a special added token of ``backend``: a string the backend already has as an added
    token is left as it is; a mapping sets its flags; anything else is added (normalized=False, as HF adds)."""
    present = {t.content for t in backend.get_added_tokens_decoder().values()}
    for value in tokens:
        content = _content(value, "special token")
        if isinstance(value, str) and content in present:
            continue
        flags = {k: bool(value[k]) for k in _FLAGS if isinstance(value, Mapping) and k in value}
        flags.setdefault("normalized", False)
        backend.add_special_tokens([AddedToken(content, special=True, **flags)])
        present.add(content)


def _prefix_space_on(component: dict[str, Any] | None, kind: str) -> bool:
    """Set ``add_prefix_space`` on the byte-level parts of a pre-tokenizer / post-processor in tokenizer.json's
    form (in place, inside a Sequence too); True when one was off (the pipeline changes)."""
    if not component:
        return False
    if component.get("type") == "Sequence":
        key = "pretokenizers" if kind == "pre_tokenizer" else "processors"
        return any([_prefix_space_on(inner, kind) for inner in component.get(key) or ()])
    if component.get("type") in ("ByteLevel", "RobertaProcessing") and not component.get("add_prefix_space"):
        component["add_prefix_space"] = True
        return True
    return False


def _check_post_processor(processor: dict[str, Any] | None, vocab: dict[str, int], source: str) -> None:
    """ValueError naming ``source`` when the post-processor inserts a token the vocabulary lacks, or with
    another id than the vocabulary gives it (every encoding would carry a wrong id)."""
    if not processor:
        return
    kind = processor.get("type")
    if kind == "Sequence":
        for inner in processor.get("processors") or ():
            _check_post_processor(inner, vocab, source)
        return
    inserted: list[tuple[str, int]] = []
    if kind in ("RobertaProcessing", "BertProcessing"):
        inserted = [tuple(processor[k]) for k in ("cls", "sep") if processor.get(k)]
    elif kind == "TemplateProcessing":
        for special in (processor.get("special_tokens") or {}).values():
            inserted += list(zip(special.get("tokens", ()), special.get("ids", ())))
    for token, token_id in inserted:
        if vocab.get(token) != token_id:
            has = "lacks it" if token not in vocab else f"has it as id {vocab[token]}"
            raise ValueError(f"{source}: the {kind} post-processor inserts the special token {token!r} as id "
                             f"{token_id}, but the vocabulary {has}; fix the post-processor or the vocabulary "
                             "(the tokenizer would give the model wrong ids).")
