"""HF tokenizer directories around a ``tokenizer.json``: reading them as ``transformers.AutoTokenizer`` does,
and writing them so that it reads them back.

Reading a directory (:func:`load_json_tokenizer`):

1. settings: ``special_tokens_map.json``, then ``tokenizer_config.json`` over it (special tokens as
   strings or ``{"content": ...}`` objects; ``added_tokens_decoder`` sets added tokens' flags);
2. the class: ``tokenizer_config.json``'s ``tokenizer_class``, else the one ``config.json``'s
   ``model_type`` implies (:data:`~bertkit.tokenization.hf_classes.MODEL_TYPE_CLASSES`);
3. special tokens the settings do not name take the class's defaults (``<s>``, ``</s>``, ... for
   RoBERTa-style classes; none for the generic one);
4. the pipeline: ``tokenizer.json`` (or, for a class that reads one, such as DeBERTa-v2's, the directory's
   SentencePiece ``spm.model``: :mod:`bertkit.tokenization.sentencepiece`), rebuilt with transformers' recipe for
   the class (:func:`~bertkit.tokenization.hf_classes.rebuild`) unless ``follow_tokenizer_class=False``;
5. ``model_max_length``, ``padding_side``, ``truncation_side``, ``model_input_names`` and
   ``clean_up_tokenization_spaces`` from the settings, else the class's (HF's) defaults.

Every file problem is a ValueError naming the file: text that is not JSON (or is cut short), a
model type the ``tokenizers`` library does not support, a post-processor token the vocabulary lacks, a
normalizer or pre-tokenizer component that would panic (:mod:`bertkit.tokenization.components`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from bertkit.io import atomic_write_text, read_json_object
from bertkit.tokenization import checks, hf_classes, sentencepiece
from bertkit.tokenization.base import NO_LIMIT, SPECIAL_TOKEN_NAMES
from bertkit.tokenization.components import check_components
from bertkit.tokenization.files import CONFIG_NAME, SPECIAL_TOKENS_NAME, TOKENIZER_JSON_NAME

MODEL_CONFIG_NAME = "config.json"
#: the model types of tokenizers 0.23
SUPPORTED_MODELS = ("BPE", "Unigram", "WordLevel", "WordPiece")
_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
#: tokenizer_config.json keys a saved tokenizer writes afresh (the rest of the loaded config is carried over)
_REWRITTEN = {"added_tokens_decoder", "additional_special_tokens", "extra_special_tokens", "tokenizer_file",
              "name_or_path", "auto_map", *SPECIAL_TOKEN_NAMES}


# ---------------------------------------------------------------------------- tokenizer.json

def read_tokenizer_json(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``tokenizer.json``, its model checked; a ValueError naming ``path`` for anything unusable."""
    data = read_json_object(path, "a tokenizers library tokenizer.json")
    model = data.get("model")
    if not isinstance(model, dict):
        raise ValueError(f"{os.fspath(path)} has no model section, so it is not a tokenizers library tokenizer.json; "
                         "restore the file.")
    kind = model.get("type")
    if kind is not None and kind not in SUPPORTED_MODELS:
        raise ValueError(f"{os.fspath(path)} holds a model of type {kind!r}, which the tokenizers library does not "
                         f"support (it supports {', '.join(SUPPORTED_MODELS)}); bertkit cannot load this tokenizer.")
    return data


def backend_from_json(data: dict[str, Any], source: str | os.PathLike) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from parsed tokenizer.json ``data``; the library's complaint, an empty
    ``Replace`` pattern or a catastrophically backtracking regex
    (:func:`~bertkit.tokenization.components.check_components`) is a ValueError naming ``source`` and the part."""
    try:
        backend = Tokenizer.from_str(json.dumps(data))
    except BaseException as error:  # a malformed section is an Exception, or a Rust panic (a BaseException)
        if not (isinstance(error, Exception) or checks.is_panic(error)):
            raise
        message = " ".join(str(error).split())
        raise ValueError(f"{os.fspath(source)} is not a tokenizer the tokenizers library can load ({message}); "
                         "restore the file or re-save it with the tokenizers / transformers library.") from None
    check_components(data, source)
    return backend


def backend_from_file(path: str | os.PathLike) -> Tokenizer:
    return backend_from_json(read_tokenizer_json(path), path)


# ---------------------------------------------------------------------------- directories

def read_settings(directory: Path) -> dict[str, Any]:
    """``special_tokens_map.json`` and ``tokenizer_config.json`` merged (the config wins); {} without them."""
    config, special_map = read_setting_files(directory)
    return {**special_map, **config}


def read_setting_files(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tokenizer_config.json, special_tokens_map.json)``, each {} when absent."""
    return tuple(read_json_object(directory / name, f"tokenizer settings ({name})") if (directory / name).is_file()
                 else {} for name in (CONFIG_NAME, SPECIAL_TOKENS_NAME))


def tokenizer_class_of(directory: Path, settings: dict[str, Any]) -> str | None:
    """The transformers class ``AutoTokenizer`` uses: the settings' ``tokenizer_class``, else the one the
    model's ``config.json`` ``model_type`` implies; None when neither says."""
    if settings.get("tokenizer_class"):
        return str(settings["tokenizer_class"])
    if (directory / MODEL_CONFIG_NAME).is_file():
        model_type = read_json_object(directory / MODEL_CONFIG_NAME, "a model configuration").get("model_type")
        return hf_classes.MODEL_TYPE_CLASSES.get(model_type)
    return None


def load_json_tokenizer(cls, source: str | os.PathLike, overrides: dict[str, Any], *,
                        follow_tokenizer_class: bool = True):
    """A ``cls`` (:class:`~bertkit.tokenization.general.TokenizerFast`) for a directory or a tokenizer.json
    path, as the module docstring describes; ``overrides`` replace any setting or special token."""
    path = Path(source)
    if path.is_file():
        directory, file, config, special_map = path.parent, path, {}, {}
    elif path.is_dir():
        directory, file = path, path / TOKENIZER_JSON_NAME
        config, special_map = read_setting_files(path)
    else:
        raise ValueError(f"{source} is neither a tokenizer directory nor a {TOKENIZER_JSON_NAME} file.")
    hf_class = hf_classes.class_named(tokenizer_class_of(directory, config) if path.is_dir() else None)
    from_spm = not file.is_file()
    if from_spm:
        file = spm_file_for(path, hf_class)
        data, config = _from_spm(file, config, as_written=not (follow_tokenizer_class and hf_class.recipe))
    else:
        data = read_tokenizer_json(file)
    _apply_added_token_flags(data, config.get("added_tokens_decoder"), file)
    overrides = dict(overrides)
    named = _special_tokens(config, special_map, hf_class, overrides, data)
    extras = _extra_special_tokens(config, special_map, hf_class, overrides)
    strings = {name: value if isinstance(value, str) else value["content"]
               for name, value in named.items() if value is not None}
    if from_spm:  # a named special token that is a user-defined piece is special all the same, as in transformers
        for token in data["added_tokens"]:
            token["special"] = token["special"] or token["content"] in strings.values()
    if follow_tokenizer_class:
        hf_classes.rebuild(data, hf_class, config, strings, str(file))
    for name, flags in hf_class.added_flags.items():  # the flags the class gives a special token it adds
        value = named.get(name)
        if isinstance(value, str) and not _is_added(data, value):
            named[name] = {"content": value, **flags}
    backend = backend_from_json(data, file)
    options = dict(model_max_length=config.get("model_max_length") or NO_LIMIT,
                   padding_side=config.get("padding_side") or "right",
                   truncation_side=config.get("truncation_side") or "right",
                   model_input_names=config.get("model_input_names") or hf_class.model_input_names,
                   clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
                   tokenizer_class=hf_class.name)
    unknown = set(overrides) - set(options)
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; TokenizerFast.from_pretrained takes the special "
                        f"tokens, extra_special_tokens and {sorted(options)}.")
    options.update(overrides)
    return cls._from_backend(backend, str(file), named, extras, init_config=config,
                             follows_class=follow_tokenizer_class and hf_class.recipe is not None, **options)


def spm_file_for(directory: Path, hf_class: hf_classes.HFClass) -> Path:
    """The SentencePiece file a directory without tokenizer.json is read from: the class's (DeBERTa-v2's
    ``spm.model``); a ValueError naming what is missing when the class reads none or the file is absent."""
    if hf_class.spm_model is None:
        raise ValueError(f"{directory} holds no {TOKENIZER_JSON_NAME}: a TokenizerFast needs one (found: "
                         f"{_listing(directory)}).")
    file = directory / hf_class.spm_model
    if not file.is_file():
        raise ValueError(f"{directory} holds neither {TOKENIZER_JSON_NAME} nor {hf_class.spm_model}, one of which its "
                         f"tokenizer class {hf_class.name} needs (found: {_listing(directory)}); copy the model's "
                         f"{hf_class.spm_model} (or tokenizer.json) into it.")
    return file


def _from_spm(file: Path, config: dict[str, Any], as_written: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tokenizer.json data, settings) for an spm.model, as transformers reads one: the model's unknown id and
    its control / user-defined pieces as extra special tokens replace the config's. ``as_written``: SentencePiece's
    own pipeline is used (no class recipe replaces it), so it must be one the tokenizers library can hold."""
    model = sentencepiece.read_spm_model(file)
    if as_written:
        sentencepiece.check_escaped(model, str(file))
    config = {**config, "unk_id": model.unk_id, "additional_special_tokens": sentencepiece.special_pieces(model)}
    return sentencepiece.spm_tokenizer_json(model), config


def _special_tokens(config: dict[str, Any], special_map: dict[str, Any], hf_class: hf_classes.HFClass,
                    overrides: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """Each named special token: the override, else the settings' (None there means none), else the class's.

    As transformers 5 reads them: a config with ``added_tokens_decoder`` (transformers >= 4.34) wins over
    special_tokens_map.json, and its ``{"content": ..., "lstrip": ...}`` flags are applied; in an older
    directory special_tokens_map.json wins, and a token's flags there or in the config only apply to a
    token that tokenizer.json does not hold yet.
    """
    current = "added_tokens_decoder" in config
    first, second = (config, special_map) if current else (special_map, config)
    named = {}
    for name in SPECIAL_TOKEN_NAMES:
        if name in overrides:
            named[name] = overrides.pop(name)
            continue
        source = first if name in first else second if name in second else None
        value = _token_value(source[name]) if source is not None else hf_class.special_tokens.get(name)
        flags_apply = source is None or (current and source is config) or not _is_added(data, _content(value))
        named[name] = value if flags_apply or not isinstance(value, dict) else value["content"]
    return named


def _extra_special_tokens(config: dict[str, Any], special_map: dict[str, Any], hf_class: hf_classes.HFClass,
                          overrides: dict[str, Any]) -> list:
    """The override, else the config's ``extra_special_tokens`` / ``additional_special_tokens``, else (in a
    directory without ``added_tokens_decoder``) special_tokens_map.json's, else the class's own."""
    if "extra_special_tokens" in overrides:
        extras = overrides.pop("extra_special_tokens")
    elif "extra_special_tokens" in config:
        extras = config["extra_special_tokens"]
    elif "additional_special_tokens" in config:
        extras = config["additional_special_tokens"]
    elif "added_tokens_decoder" not in config and "additional_special_tokens" in special_map:
        extras = special_map["additional_special_tokens"]
    else:
        extras = list(hf_class.extra_special_tokens)
    if isinstance(extras, dict):
        extras = list(extras.values())
    return [_token_value(t) for t in extras or ()]


def _content(value: Any) -> Any:
    return value.get("content") if isinstance(value, dict) else value


def _token_value(value: Any) -> Any:
    """A special token as the settings hold it: a string, or HF's AddedToken object (``__type`` dropped)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "__type"}
    return value


def _is_added(data: dict[str, Any], token: str) -> bool:
    return any(t.get("content") == token for t in data.get("added_tokens") or ())


def _apply_added_token_flags(data: dict[str, Any], decoder: Any, source: Path) -> None:
    """``added_tokens_decoder`` (``{id: {"content": ..., "lstrip": ...}}``) sets the flags of the added tokens
    it lists (HF gives it precedence over tokenizer.json) and adds those the file lacks."""
    if not decoder:
        return
    if not isinstance(decoder, dict):
        raise ValueError(f"{source.parent / CONFIG_NAME}: added_tokens_decoder must map ids to tokens, got "
                         f"{type(decoder).__name__}.")
    added = data.setdefault("added_tokens", [])
    by_content = {t.get("content"): t for t in added}
    for token_id, entry in sorted(decoder.items(), key=lambda item: int(item[0])):
        if not isinstance(entry, dict) or "content" not in entry:
            raise ValueError(f"{source.parent / CONFIG_NAME}: added_tokens_decoder[{token_id!r}] is not a token "
                             f"object ({{'content': ..., ...}}).")
        flags = {k: bool(entry[k]) for k in _FLAGS if k in entry}
        if entry["content"] in by_content:
            by_content[entry["content"]].update(flags)
        else:
            new = {"id": int(token_id), "content": entry["content"], "single_word": False, "lstrip": False,
                   "rstrip": False, "normalized": False, "special": False, **flags}
            added.append(new)
            by_content[new["content"]] = new


def _listing(directory: Path) -> str:
    names = sorted(p.name for p in directory.iterdir())
    return ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "") if names else "nothing"


# ---------------------------------------------------------------------------- saving

def save_json_tokenizer(tokenizer, directory: str | os.PathLike) -> tuple[str, ...]:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``.

    The config carries over what the loaded one held (``add_prefix_space``, ``do_lower_case``, ...) and
    states the rest; a pipeline that is not the class's recipe (``follow_tokenizer_class=False``) is saved
    under the generic class, so that transformers uses the file as written.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    recipe = hf_classes.class_named(tokenizer.tokenizer_class).recipe
    tokenizer_class = tokenizer.tokenizer_class if recipe is None or tokenizer.follows_class else \
        "PreTrainedTokenizerFast"
    config = {k: v for k, v in tokenizer.init_config.items() if k not in _REWRITTEN}
    config.update(tokenizer_class=tokenizer_class, model_max_length=tokenizer.model_max_length,
                  padding_side=tokenizer.padding_side, truncation_side=tokenizer.truncation_side,
                  clean_up_tokenization_spaces=tokenizer.clean_up_tokenization_spaces,
                  model_input_names=list(tokenizer.model_input_names),
                  **{name: tokenizer.special_tokens.get(name) for name in SPECIAL_TOKEN_NAMES})
    if tokenizer.extra_special_tokens or hf_classes.class_named(tokenizer_class).extra_special_tokens:
        config["extra_special_tokens"] = list(tokenizer.extra_special_tokens)
    special_map = dict(tokenizer.special_tokens)
    files = {TOKENIZER_JSON_NAME: json.dumps(tokenizer.pipeline_json(), ensure_ascii=False, indent=2),
             CONFIG_NAME: json.dumps(config, ensure_ascii=False, indent=2, sort_keys=True),
             SPECIAL_TOKENS_NAME: json.dumps(special_map, ensure_ascii=False, indent=2, sort_keys=True)}
    for name, text in files.items():
        atomic_write_text(d / name, text + "\n")
    return tuple(str(d / name) for name in files)
