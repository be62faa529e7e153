"""Tokenizer directories in HF's layout: ``vocab.txt`` + ``tokenizer_config.json`` (+ ``special_tokens_map.json``).

Reading also accepts an HF directory that holds only ``tokenizer.json`` (the vocabulary and
the BertNormalizer flags are taken from it), and a bare ``vocab.txt`` path.
:func:`tokenizer_fingerprint` says what makes two tokenizers the same, :func:`tokenizer_differences` how two differ.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_text, read_json_object
from bertkit.tokenization.vocab import DEFAULT_SPECIAL_TOKENS, write_vocab_file

VOCAB_NAME = "vocab.txt"
CONFIG_NAME = "tokenizer_config.json"
SPECIAL_TOKENS_NAME = "special_tokens_map.json"
TOKENIZER_JSON_NAME = "tokenizer.json"

#: tokenizer_config.json keys that are constructor arguments
_SETTINGS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "model_max_length", "padding_side",
             "truncation_side", "max_input_chars_per_word", "model_input_names", *DEFAULT_SPECIAL_TOKENS)
#: BERTTokenizerFast's default outputs (written to tokenizer_config.json only when a tokenizer has others)
_BERT_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")


def save_tokenizer(tokenizer, directory: str | os.PathLike) -> tuple[str, ...]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    write_vocab_file(tokenizer.vocab, d / VOCAB_NAME)
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.do_lower_case,
              "strip_accents": tokenizer.strip_accents, "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars,
              "model_max_length": tokenizer.model_max_length, "padding_side": tokenizer.padding_side,
              "truncation_side": tokenizer.truncation_side, "clean_up_tokenization_spaces": True,
              **tokenizer.special_tokens}
    if tokenizer.max_input_chars_per_word != 100:
        config["max_input_chars_per_word"] = tokenizer.max_input_chars_per_word
    if tuple(tokenizer.model_input_names) != _BERT_INPUT_NAMES:
        config["model_input_names"] = list(tokenizer.model_input_names)
    atomic_write_text(d / CONFIG_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")
    atomic_write_text(d / SPECIAL_TOKENS_NAME, json.dumps(tokenizer.special_tokens, indent=2, sort_keys=True) + "\n")
    return tuple(str(d / name) for name in (VOCAB_NAME, CONFIG_NAME, SPECIAL_TOKENS_NAME))


def load_bert_tokenizer(cls, source: str | os.PathLike, overrides: dict[str, Any]):
    """A BERTTokenizerFast (``cls``) from a directory (``vocab.txt`` or a WordPiece ``tokenizer.json``, with
    their settings) or a ``vocab.txt`` path; ``overrides`` replace the saved settings."""
    path = Path(source)
    if path.is_file():
        return cls(vocab_file=path, **overrides)
    if not path.is_dir():
        raise ValueError(f"{source} is neither a tokenizer directory nor a vocab.txt file.")
    settings: dict[str, Any] = {}
    for name in (SPECIAL_TOKENS_NAME, CONFIG_NAME):  # the config wins over the special-tokens map
        if (path / name).is_file():
            settings.update(_special_token_strings(read_json_object(path / name, f"tokenizer settings ({name})")))
    settings = {k: v for k, v in settings.items() if k in _SETTINGS}
    if (path / VOCAB_NAME).is_file():
        return cls(vocab_file=path / VOCAB_NAME, **{**settings, **overrides})
    if (path / TOKENIZER_JSON_NAME).is_file():
        vocab, json_settings = _read_tokenizer_json(path / TOKENIZER_JSON_NAME)
        return cls(vocab=vocab, **{**json_settings, **settings, **overrides})
    raise ValueError(f"{source} holds no {VOCAB_NAME} or {TOKENIZER_JSON_NAME}; is it a BERT tokenizer directory?")


def _special_token_strings(config: dict[str, Any]) -> dict[str, Any]:
    """HF may store special tokens as ``{"content": "[CLS]", ...}`` objects; keep the strings."""
    return {k: v["content"] if isinstance(v, dict) and "content" in v else v for k, v in config.items()}


def _read_tokenizer_json(path: Path) -> tuple[dict[str, int], dict[str, Any]]:
    data = read_json_object(path, "a tokenizers library tokenizer.json")
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or "vocab" not in model:
        raise ValueError(f"{path} is not a WordPiece tokenizer (model type {model.get('type')!r}).")
    settings: dict[str, Any] = {"max_input_chars_per_word": model.get("max_input_chars_per_word", 100)}
    if model.get("unk_token"):
        settings["unk_token"] = model["unk_token"]
    normalizer = data.get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        settings.update(do_lower_case=normalizer.get("lowercase", True),
                        strip_accents=normalizer.get("strip_accents"),
                        tokenize_chinese_chars=normalizer.get("handle_chinese_chars", True))
    return dict(model["vocab"]), settings


def tokenizer_fingerprint(tokenizer) -> dict[str, Any]:
    """What makes two tokenizers the same (JSON-ready, for run and data records).

    BERTTokenizerFast: the vocabulary (hashed) and the normalisation settings. A tokenizer.json
    tokenizer (:class:`~bertkit.tokenization.TokenizerFast`): ``kind`` ``"tokenizer.json"``, its
    vocabulary with added tokens (hashed) and its whole pipeline (hashed: normalizer, pre-tokenizer,
    model, post-processor, decoder, added tokens).
    """
    if hasattr(tokenizer, "pipeline_json"):
        tokens = "\n".join(t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]))
        pipeline = json.dumps(tokenizer.pipeline_json(), sort_keys=True, ensure_ascii=False)
        return {"kind": "tokenizer.json", "vocab_size": len(tokenizer), "vocab_sha256": _sha256(tokens),
                "pipeline_sha256": _sha256(pipeline)}
    vocab = "\n".join(tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size))))
    return {"vocab_size": tokenizer.vocab_size, "vocab_sha256": hashlib.sha256(vocab.encode()).hexdigest(),
            "do_lower_case": tokenizer.do_lower_case, "strip_accents": tokenizer.strip_accents,
            "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars}


def tokenizer_differences(first: dict[str, Any], second: dict[str, Any], first_name: str,
                          second_name: str) -> list[str]:
    """How two :func:`tokenizer_fingerprint` results differ, in words (``"vocab_size 500 (data) vs 600 (model)"``);
    empty when they are the same. A BERT tokenizer and a tokenizer.json one differ in ``kind``."""
    first, second = ({"kind": "BERT WordPiece", **f} for f in (first, second))
    if first["kind"] != second["kind"]:
        return [f"kind {first['kind']} ({first_name}) vs {second['kind']} ({second_name})"]
    differ = [f"{key} {first[key]} ({first_name}) vs {second.get(key)} ({second_name})" for key in first
              if not key.endswith("_sha256") and first[key] != second.get(key)]
    if first["vocab_sha256"] != second["vocab_sha256"] and first["vocab_size"] == second["vocab_size"]:
        differ.append("the vocabularies hold different tokens")
    elif not differ and first.get("pipeline_sha256") != second.get("pipeline_sha256"):
        differ.append("the tokenization pipelines (normalizer, pre-tokenizer, model, post-processor, added tokens) "
                      "differ")
    return differ


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
