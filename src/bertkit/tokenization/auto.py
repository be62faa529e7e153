"""One loader for every tokenizer directory: :func:`load_tokenizer` / :class:`AutoTokenizer`.

The rule (:func:`tokenizer_class_for`), in order:

1. A ``vocab.txt`` path is BERT's (:class:`~bertkit.tokenization.BERTTokenizerFast`); a ``tokenizer.json``
   path is loaded as it is written (:class:`~bertkit.tokenization.TokenizerFast`).
2. A directory's tokenizer class is ``tokenizer_config.json``'s ``tokenizer_class``, else the one
   ``config.json``'s ``model_type`` implies (as ``transformers.AutoTokenizer`` decides).
3. BERT's classes (``Bert*``, ``DistilBert*``, ``Electra*``) get BERTTokenizerFast, exactly as it loads
   today, from ``vocab.txt`` or the WordPiece vocabulary of ``tokenizer.json``: transformers builds
   these classes' pipeline (BertNormalizer, WordPiece, ``[CLS] A [SEP] B [SEP]``) from the vocabulary
   and the config's options alone, as BERTTokenizerFast does. DistilBERT's return no
   ``token_type_ids``, as in HF. The one exception: a ``tokenizer.json`` with added tokens beyond its
   WordPiece vocabulary, which BERTTokenizerFast cannot hold, gets TokenizerFast (with transformers'
   BERT recipe). A BERT class over a model that is not WordPiece is an error.
4. No class named: a ``tokenizer.json`` whose pipeline is BERT's (BertNormalizer, BertPreTokenizer,
   ``##`` WordPiece, ``[CLS] A [SEP] (B [SEP])`` post-processing with the tokens the settings name,
   no added tokens beyond the vocabulary) gets BERTTokenizerFast, any other ``tokenizer.json``
   TokenizerFast; a directory with only ``vocab.txt`` gets BERTTokenizerFast.
5. Any other class (RoBERTa, XLM-RoBERTa, CamemBERT, MPNet, ModernBERT's generic one, ...) needs
   ``tokenizer.json`` and gets TokenizerFast. MPNet's is WordPiece with BertNormalizer, but its
   ``<s> A </s></s> B </s>`` pairs are not BERT's. DeBERTa-v2/v3's ``DebertaV2Tokenizer`` reads
   SentencePiece's ``spm.model`` when there is no ``tokenizer.json`` (:mod:`bertkit.tokenization.sentencepiece`).
6. Anything else is a ValueError naming what is missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.tokenization import hf_classes
from bertkit.tokenization.base import FastTokenizerBase
from bertkit.tokenization.files import TOKENIZER_JSON_NAME, VOCAB_NAME
from bertkit.tokenization.general import TokenizerFast
from bertkit.tokenization.tokenizer import BERTTokenizerFast
from bertkit.tokenization.tokenizer_json import (
    _listing,
    read_settings,
    read_tokenizer_json,
    spm_file_for,
    tokenizer_class_of,
)


def load_tokenizer(source: str | os.PathLike, **overrides: Any) -> FastTokenizerBase:
    """The tokenizer of a directory (or a ``vocab.txt`` / ``tokenizer.json`` path), of the class the module's
    rule picks; ``overrides`` replace saved settings (``model_max_length=512``, ...)."""
    cls, options = _choose(Path(source))
    return cls.from_pretrained(source, **{**options, **overrides})


def tokenizer_class_for(source: str | os.PathLike) -> type[FastTokenizerBase]:
    """The class :func:`load_tokenizer` uses for ``source`` (BERTTokenizerFast or TokenizerFast)."""
    return _choose(Path(source))[0]


class AutoTokenizer:
    """``AutoTokenizer.from_pretrained(directory)``: HF's entry point, with :func:`load_tokenizer`'s rule."""

    def __init__(self) -> None:
        raise TypeError("AutoTokenizer is not instantiated; use AutoTokenizer.from_pretrained(directory).")

    @staticmethod
    def from_pretrained(source: str | os.PathLike, **overrides: Any) -> FastTokenizerBase:
        return load_tokenizer(source, **overrides)


def _choose(path: Path) -> tuple[type[FastTokenizerBase], dict[str, Any]]:
    """(the class, options its from_pretrained needs beyond the directory's own settings)."""
    if path.is_file():
        if path.name == TOKENIZER_JSON_NAME or path.suffix == ".json":
            return TokenizerFast, {}
        return BERTTokenizerFast, {}
    if not path.is_dir():
        raise ValueError(f"{path} is neither a tokenizer directory nor a {VOCAB_NAME} / {TOKENIZER_JSON_NAME} file.")
    settings = read_settings(path)
    name = tokenizer_class_of(path, settings)
    has_json, has_vocab = (path / TOKENIZER_JSON_NAME).is_file(), (path / VOCAB_NAME).is_file()
    data = read_tokenizer_json(path / TOKENIZER_JSON_NAME) if has_json else None
    hf_class = hf_classes.class_named(name)
    if hf_class.name in hf_classes.BERT_CLASSES:
        if data is not None and _beyond_vocab(data):
            return TokenizerFast, {}
        if data is not None and not has_vocab and data["model"].get("type") != "WordPiece":
            raise ValueError(f"{path / TOKENIZER_JSON_NAME} holds a {data['model'].get('type')} model, but "
                             f"{hf_class.name} (the directory's tokenizer class) is a WordPiece tokenizer; fix "
                             "tokenizer_config.json's tokenizer_class.")
        if data is None and not has_vocab:
            raise ValueError(f"{path} holds neither {VOCAB_NAME} nor {TOKENIZER_JSON_NAME}, which {hf_class.name} "
                             f"needs (found: {_listing(path)}).")
        options = {} if "model_input_names" in settings else {"model_input_names": hf_class.model_input_names}
        return BERTTokenizerFast, options
    if name is None:
        if data is not None:
            return (BERTTokenizerFast, {}) if is_bert_pipeline(data, settings) else (TokenizerFast, {})
        if has_vocab:
            return BERTTokenizerFast, {}
        raise ValueError(f"{path} holds neither {TOKENIZER_JSON_NAME} nor {VOCAB_NAME}: it is not a tokenizer "
                         f"directory (found: {_listing(path)}).")
    if data is None and hf_class.spm_model is not None:
        spm_file_for(path, hf_class)  # the file must be there: the error names it
        return TokenizerFast, {}
    if data is None:
        raise ValueError(f"{path} holds no {TOKENIZER_JSON_NAME}, which its tokenizer class {name} needs (bertkit "
                         f"reads tokenizers from tokenizer.json; found: {_listing(path)}). Save the tokenizer with "
                         "transformers' fast tokenizer (save_pretrained writes tokenizer.json).")
    return TokenizerFast, {}


def is_bert_pipeline(data: dict[str, Any], settings: dict[str, Any]) -> bool:
    """Whether a parsed tokenizer.json is BERT's pipeline, with the [CLS] / [SEP] tokens ``settings`` name."""
    model = data["model"]
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        return False
    if (data.get("normalizer") or {}).get("type") != "BertNormalizer":
        return False
    if (data.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer" or _beyond_vocab(data):
        return False
    cls, sep = _string(settings.get("cls_token", "[CLS]")), _string(settings.get("sep_token", "[SEP]"))
    return _bert_post_processor(data.get("post_processor") or {}) == (cls, sep)


def _bert_post_processor(processor: dict[str, Any]) -> tuple[str, str] | None:
    """``(cls, sep)`` of a ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B:1 [SEP]:1`` post-processor, else None."""
    if processor.get("type") == "BertProcessing":
        return processor["cls"][0], processor["sep"][0]
    if processor.get("type") != "TemplateProcessing":
        return None

    def pieces(template: list) -> list[tuple[str, str, int]]:
        return [(kind, value.get("id"), value.get("type_id")) for item in template for kind, value in item.items()]

    single, pair = pieces(processor.get("single") or []), pieces(processor.get("pair") or [])
    if len(single) != 3 or len(pair) != 5:
        return None
    cls, sep = single[0][1], single[2][1]
    bert = [("SpecialToken", cls, 0), ("Sequence", "A", 0), ("SpecialToken", sep, 0)]
    if single != bert or pair != [*bert, ("Sequence", "B", 1), ("SpecialToken", sep, 1)]:
        return None
    return cls, sep


def _beyond_vocab(data: dict[str, Any]) -> bool:
    """Whether tokenizer.json has added tokens its model's vocabulary lacks (BERTTokenizerFast cannot hold them)."""
    vocab = data["model"].get("vocab")
    if not isinstance(vocab, dict):
        return bool(data.get("added_tokens"))
    return any(t.get("content") not in vocab for t in data.get("added_tokens") or ())


def _string(value: Any) -> Any:
    return value.get("content") if isinstance(value, dict) else value

