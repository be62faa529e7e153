"""What transformers' tokenizer classes do with a ``tokenizer.json``, for the classes of bertkit's families.

transformers 5 builds a model-specific tokenizer (``RobertaTokenizer``, ``XLMRobertaTokenizer``, ...)
from its own recipe: it takes the vocabulary (and merges) and the added tokens from ``tokenizer.json``
and sets the normalizer, pre-tokenizer, post-processor and decoder itself, from
``tokenizer_config.json``'s options (``add_prefix_space``, ``trim_offsets``, ``do_lower_case``, ...).
Only the generic classes (``PreTrainedTokenizerFast`` / ``TokenizersBackend``) use the file as written.
So that bertkit encodes exactly as ``transformers.AutoTokenizer`` does, :func:`rebuild` applies the same
recipe to the file's JSON for the classes listed in :data:`CLASSES`; the recipes were established by
loading tokenizers with transformers 5.23 and comparing the resulting pipelines (see
tests/test_tokenizer_json.py, which checks them against the installed transformers).

A class not listed here is used with the file's pipeline as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                     "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
_BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}
_WITH_TYPES = ("input_ids", "token_type_ids", "attention_mask")
_WITHOUT_TYPES = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class HFClass:
    """One transformers tokenizer class, as bertkit mirrors it.

    ``special_tokens``: the defaults for names the config does not set; ``extra_special_tokens``:
    the class's own extra special tokens (used when the config lists none); ``added_flags``: the
    AddedToken flags the class gives a special token it has to add; ``model``: the tokenizers model
    type the recipe needs (None: any); ``recipe``: the name of the :func:`rebuild` recipe (None: the
    file's pipeline as written).
    """

    name: str
    model_input_names: tuple[str, ...] = _WITHOUT_TYPES
    special_tokens: dict[str, str] = field(default_factory=dict)
    extra_special_tokens: tuple[str, ...] = ()
    added_flags: dict[str, dict[str, bool]] = field(default_factory=dict)
    model: str | None = None
    recipe: str | None = None


CLASSES = {c.name: c for c in (
    HFClass("BertTokenizer", _WITH_TYPES, _BERT_SPECIALS, model="WordPiece", recipe="bert"),
    HFClass("DistilBertTokenizer", _WITHOUT_TYPES, _BERT_SPECIALS, model="WordPiece", recipe="bert"),
    HFClass("ElectraTokenizer", _WITH_TYPES, _BERT_SPECIALS, model="WordPiece", recipe="bert"),
    HFClass("RobertaTokenizer", _WITHOUT_TYPES, _ROBERTA_SPECIALS, model="BPE", recipe="roberta"),
    HFClass("XLMRobertaTokenizer", _WITHOUT_TYPES, _ROBERTA_SPECIALS, model="Unigram", recipe="xlm_roberta"),
    HFClass("CamembertTokenizer", _WITHOUT_TYPES, _ROBERTA_SPECIALS,
            extra_special_tokens=("<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED"), model="Unigram",
            recipe="xlm_roberta"),
    HFClass("MPNetTokenizer", _WITHOUT_TYPES, {**_ROBERTA_SPECIALS, "unk_token": "[UNK]"},
            added_flags={"mask_token": {"lstrip": True}}, model="WordPiece", recipe="mpnet"),
    HFClass("TokenizersBackend"),
    HFClass("PreTrainedTokenizerFast"),
)}

#: the classes whose tokenizer is Google's BERT WordPiece (bertkit's BERTTokenizerFast)
BERT_CLASSES = frozenset({"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer"})

#: config.json ``model_type`` -> the class AutoTokenizer uses when tokenizer_config.json names none
MODEL_TYPE_CLASSES = {"bert": "BertTokenizer", "distilbert": "BertTokenizer", "electra": "BertTokenizer",
                      "roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer",
                      "camembert": "CamembertTokenizer", "mpnet": "MPNetTokenizer", "modernbert": "TokenizersBackend",
                      "eurobert": "TokenizersBackend",
                      "gte": "XLMRobertaTokenizer", "nomic_bert": "BertTokenizer",
                      "jina_embeddings_v3": "XLMRobertaTokenizer"}

GENERIC = CLASSES["TokenizersBackend"]


def class_named(name: str | None) -> HFClass:
    """The :class:`HFClass` for a ``tokenizer_class`` value (``"RobertaTokenizerFast"`` is RoBERTa's);
    an unknown name gets the generic behaviour under its own name."""
    if not name:
        return GENERIC
    base = name[:-4] if name.endswith("Fast") else name
    if base == "PreTrainedTokenizer":
        base = "PreTrainedTokenizerFast"
    known = CLASSES.get(base)
    return known if known is not None else HFClass(name)


def rebuild(data: dict[str, Any], hf_class: HFClass, config: dict[str, Any], specials: dict[str, str],
            source: str) -> None:
    """Set ``data``'s (a parsed tokenizer.json) pipeline as transformers' ``hf_class`` builds it, in place.

    ``config``: tokenizer_config.json's options; ``specials``: the resolved special tokens (strings).
    A model of another type than the recipe needs, or a special token the post-processor inserts that
    the vocabulary lacks, is a ValueError naming ``source``.
    """
    if hf_class.recipe is None:
        return
    model = data["model"]
    if hf_class.model is not None and model.get("type") != hf_class.model:
        raise ValueError(f"{source} holds a {model.get('type')} model, but {hf_class.name} (its tokenizer_class) is "
                         f"built on a {hf_class.model} model; fix tokenizer_config.json's tokenizer_class, or load "
                         "with follow_tokenizer_class=False to use the file as written.")
    _RECIPES[hf_class.recipe](data, config, specials, lambda name: _special(data, specials, name, hf_class, source))


def _special(data: dict[str, Any], specials: dict[str, str], name: str, hf_class: HFClass,
             source: str) -> tuple[str, int]:
    """``(token, id)`` of the special token ``name`` the post-processor inserts; ValueError if it is missing."""
    token = specials.get(name)
    token_id = None if token is None else token_id_in(data, token)
    if token_id is None:
        what = f"no {name}" if token is None else f"{name} {token!r}, which {source} does not hold"
        raise ValueError(f"{hf_class.name}'s post-processor inserts the {name}, but the tokenizer has {what}; set "
                         f"{name} in tokenizer_config.json to a token of the vocabulary.")
    return token, token_id


def token_id_in(data: dict[str, Any], token: str) -> int | None:
    """The id ``token`` has in a parsed tokenizer.json (added tokens, then the model's vocabulary), or None."""
    for added in data.get("added_tokens") or ():
        if added.get("content") == token:
            return added.get("id")
    vocab = data["model"].get("vocab")
    if isinstance(vocab, dict):
        return vocab.get(token)
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        for i, entry in enumerate(vocab):
            if entry and entry[0] == token:
                return i
    return None


def _roberta(data, config, specials, special) -> None:
    prefix = bool(config.get("add_prefix_space", False))
    data["model"].update(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                         fuse_unk=False, byte_fallback=False, ignore_merges=False)
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": True}
    data["post_processor"] = {"type": "RobertaProcessing", "sep": list(special("sep_token")),
                              "cls": list(special("cls_token")),
                              "trim_offsets": bool(config.get("trim_offsets", True)), "add_prefix_space": prefix}
    data["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def _xlm_roberta(data, config, specials, special) -> None:
    scheme = "always" if config.get("add_prefix_space", True) else "never"
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": True}
    data["model"].update(unk_id=token_id_in(data, specials["unk_token"]) if specials.get("unk_token") else None,
                         byte_fallback=False)
    data["normalizer"] = _precompiled(data.get("normalizer"))
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, dict(metaspace)]}
    data["decoder"] = dict(metaspace)
    (bos, bos_id), (eos, eos_id) = special("bos_token"), special("eos_token")
    data["post_processor"] = _template([bos, "A", eos], [bos, "A", eos, eos, "B", eos], {bos: bos_id, eos: eos_id})


def _wordpiece_model(data, config, specials) -> None:
    data["model"].update(unk_token=specials.get("unk_token"), continuing_subword_prefix="##",
                         max_input_chars_per_word=100)
    data["normalizer"] = {"type": "BertNormalizer", "clean_text": True,
                          "handle_chinese_chars": bool(config.get("tokenize_chinese_chars", True)),
                          "strip_accents": config.get("strip_accents"),
                          "lowercase": bool(config.get("do_lower_case", True))}
    data["pre_tokenizer"] = {"type": "BertPreTokenizer"}
    data["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}


def _mpnet(data, config, specials, special) -> None:
    _wordpiece_model(data, config, specials)
    data["post_processor"] = {"type": "RobertaProcessing", "sep": list(special("sep_token")),
                              "cls": list(special("cls_token")), "trim_offsets": True, "add_prefix_space": False}


def _bert(data, config, specials, special) -> None:
    _wordpiece_model(data, config, specials)
    (cls, cls_id), (sep, sep_id) = special("cls_token"), special("sep_token")
    data["post_processor"] = _template([cls, "A", sep], [cls, "A", sep, "B:1", f"{sep}:1"], {cls: cls_id, sep: sep_id})


_RECIPES = {"roberta": _roberta, "xlm_roberta": _xlm_roberta, "mpnet": _mpnet, "bert": _bert}


def _precompiled(normalizer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The SentencePiece ``Precompiled`` normalizer inside ``normalizer`` (alone or in a Sequence), or None."""
    if not normalizer:
        return None
    if normalizer.get("type") == "Precompiled":
        return normalizer
    if normalizer.get("type") == "Sequence":
        return next((n for n in normalizer.get("normalizers", ()) if n and n.get("type") == "Precompiled"), None)
    return None


def _template(single: list[str], pair: list[str], ids: dict[str, int]) -> dict[str, Any]:
    """A TemplateProcessing post-processor in tokenizer.json's form; ``"A"`` / ``"B:1"`` are the texts,
    other items special tokens (``"[SEP]:1"``: with type id 1)."""
    def piece(item: str) -> dict[str, Any]:
        name, _, type_id = item.rpartition(":") if item.endswith(":1") else (item, "", "0")
        key = "Sequence" if name in ("A", "B") else "SpecialToken"
        return {key: {"id": name, "type_id": int(type_id)}}

    return {"type": "TemplateProcessing", "single": [piece(i) for i in single], "pair": [piece(i) for i in pair],
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in ids.items()}}
