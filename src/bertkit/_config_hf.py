"""BERTConfig's HF ``config.json`` dialect (private to :mod:`bertkit.config`, whose ``BERTConfig.to_hf_dict`` and
``BERTConfig.from_hf_dict`` call these and document the contract).

HF spells a few keys otherwise (``tie_word_embeddings``), has no ``gelu_tanh`` and names special ids per family;
each family may hold a field under its own key (:attr:`~bertkit.families.Family.hf_config_keys`: DistilBERT's
``dim``, ModernBERT's ``norm_eps``), fix a value (:attr:`~bertkit.families.Family.fixed_fields`,
:attr:`~bertkit.families.Family.hf_constants`) and, for rotary families, describe its layers by
``rope_parameters`` and ``layer_types``. Reading also accepts Google's ``bert_config.json`` (a subset of HF's
names) and bertkit's own dict. ``config`` below is a :class:`~bertkit.config.BERTConfig` and ``config_class``
that class (not imported here: :mod:`bertkit.config` imports this module). Imports nothing from torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from bertkit._config_types import describe, type_problem
from bertkit.families import _FAMILY_OF_MODEL_TYPE, FAMILIES, FAMILY_FIELDS

#: How our activation names are written into an HF config.json (HF has no "gelu_tanh").
_HF_ACTIVATION_NAMES = {"gelu_tanh": "gelu_pytorch_tanh"}

#: HF config.json keys whose name differs from ours.
_HF_RENAMES = {"tie_word_embeddings": "tie_word_embedding"}

#: Our architecture options that HF's BertModel lacks (always True in an HF config).
_NON_HF_OPTIONS = ("embedding_layer_norm", "attention_bias")

#: HF's ``layer_types`` names: global attention, sliding-window attention
_LAYER_TYPES = ("full_attention", "sliding_attention")


# ---------------------------------------------------------------------------- writing
def to_hf_dict(config: Any, architecture: str | None = None) -> dict[str, Any]:
    """``config``'s HF ``config.json`` dict: see ``BERTConfig.to_hf_dict``."""
    spec = config.family_spec
    d = config.to_dict()
    d.pop("family", None)
    for name in _NON_HF_OPTIONS:  # a family's fixed value is checked with the others (_family_hf_keys)
        if name not in spec.hf_config_keys.values() and name not in spec.fixed_fields and not d.pop(name):
            raise ValueError(f"BERTConfig.{name}=False has no HF transformers equivalent, so this model "
                             "cannot be written as an HF checkpoint; save its state_dict with torch.save.")
    d["tie_word_embeddings"] = d.pop("tie_word_embedding")
    d["hidden_act"] = _HF_ACTIVATION_NAMES.get(d["hidden_act"], d["hidden_act"])
    id2label = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
    d["id2label"] = {str(k): v for k, v in id2label.items()}
    d["label2id"] = {v: k for k, v in id2label.items()}
    if spec.position_embeddings:
        d["position_embedding_type"] = "absolute"
    d["model_type"] = config.hf_model_type
    if not spec.hf_sdpa:
        del d["attn_implementation"]
    for hf_key, ours in spec.hf_token_keys.items():
        d[hf_key] = d[ours]
    if spec.rotary:
        d.update(_hf_rotary_keys(config))
    if spec.rope:
        d.pop("rope_theta", None), d.pop("rope_scaling", None)
        d["rope_parameters"] = {"rope_theta": config.rope_theta, "rope_type": "default", **(config.rope_scaling or {})}
    if architecture is not None:
        d["architectures"] = [config.hf_architecture_name(architecture)]
    return _family_hf_keys(config, d)


def _family_hf_keys(config: Any, d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (an HF dict under BERT's keys) with the family's own keys: see ``BERTConfig.to_hf_dict``."""
    spec = config.family_spec
    prefix = spec.class_prefixes[spec.model_types.index(config.hf_model_type)]
    for name, value in spec.fixed_fields.items():
        if getattr(config, name) != value:
            raise ValueError(f"BERTConfig.{name}={getattr(config, name)!r}: HF's {prefix} models fix it at "
                             f"{value!r}, so this model cannot be written as an HF checkpoint; set it to that "
                             "value, or save its state_dict with torch.save.")
        d.pop(name, None)
    supported = set(spec.hf_config_keys.values()) | ({"rope_theta", "rope_scaling"} if spec.rope else set())
    for name, default in FAMILY_FIELDS.items():
        if name not in supported and getattr(config, name) != default:
            raise ValueError(f"BERTConfig.{name}={getattr(config, name)!r} has no equivalent in HF's {prefix} "
                             f"config, so this model cannot be written as an HF checkpoint; leave it at "
                             f"{default!r} or save its state_dict with torch.save.")
    stands_for = {"embedding_size": config.embedding_width,  # what None means, for HF configs taking no null
                  "classifier_dropout": config.hidden_dropout_prob,
                  "classifier_activation": spec.mlm_activation or config.activation_name()}
    for hf_key, name in spec.hf_config_keys.items():
        if name not in d and name not in FAMILY_FIELDS and hf_key != name:
            continue  # a second HF key for one field (DistilBERT's old tie_weights_) is only read
        # written explicitly, at their defaults too: HF's defaults for them are not bertkit's
        value = d.pop(name) if name in d else getattr(config, name)
        d[hf_key] = stands_for[name] if value is None and name in stands_for else value
        if name == "classifier_activation":
            d[hf_key] = _HF_ACTIVATION_NAMES.get(d[hf_key], d[hf_key])
        if name in spec.hf_values:  # HF's spelling of the value (only there: DeBERTa's pos_att_type is a list)
            d[hf_key] = spec.hf_values[name].get(d[hf_key], d[hf_key])
    d.update(spec.hf_constants)
    return d


def _hf_rotary_keys(config: Any) -> dict[str, Any]:
    """HF's ``rope_parameters`` and ``layer_types`` (transformers 5; the flat keys, which older versions read,
    are written beside them)."""
    n = config.global_attn_every_n_layers
    return {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.global_rope_theta},
                                "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta}},
            "layer_types": [_LAYER_TYPES[bool(i % n)] for i in range(config.num_hidden_layers)]}


# ---------------------------------------------------------------------------- reading
def from_hf_dict(config_class: type, d: Mapping[str, Any]) -> Any:
    """A ``config_class`` from the mapping ``d`` (HF's, Google's or bertkit's keys): see
    ``BERTConfig.from_hf_dict``, which checks that ``d`` is a mapping."""
    if _JINA_ADAPTERS_KEY in d:
        d = _jina_original_as_port(d)
    known = {f.name for f in fields(config_class)} - {"model_type", "family"}
    kwargs: dict[str, Any] = _family_fields(d)
    family = kwargs.get("family", "bert")
    spec = FAMILIES.get(family) if isinstance(family, str) else None  # else the constructor's error
    own = spec if spec is not None and "family" not in d else None  # HF's spelling (bertkit's dict names a family)
    if own is not None:
        kwargs = {**own.hf_defaults, **kwargs}
    renames = {**_HF_RENAMES, **(spec.hf_config_keys if spec is not None else {})}
    # our name of a field that the family's HF config spells otherwise is no key of that config (HF ignores
    # ModernBERT's layer_norm_eps beside its norm_eps)
    shadowed = {ours for hf_key, ours in own.hf_config_keys.items() if hf_key != ours} if own is not None else set()
    given_as: dict[str, str] = {}
    for given_key, value in d.items():
        key = renames.get(given_key, given_key)
        if given_key in shadowed and given_key not in renames:
            continue
        if spec is not None and key in spec.hf_constants:
            if value is not None and value != spec.hf_constants[key]:
                raise ValueError(f"{key}={value!r} is not supported; bertkit implements {spec.name}'s "
                                 f"{key}={spec.hf_constants[key]!r}.")
        elif key in given_as and value is not None and kwargs.get(key) != value:
            raise ValueError(f"{given_as[key]}={kwargs[key]!r} and {given_key}={value!r} both give "
                             f"BERTConfig.{key}; keep one of them.")
        elif key == "decoder_bias" and value is False:
            raise ValueError("decoder_bias=false (an MLM decoder without a bias) is not supported: bertkit's MLM "
                             "head always has one.")
        elif key == "position_embedding_type":
            if value not in (None, "absolute"):
                raise ValueError(
                    f"position_embedding_type={value!r} is not supported; bertkit implements "
                    "BERT's absolute position embeddings."
                )
        elif key == "head_dim":
            _check_head_dim(d, value)
        elif key in known and value is not None:
            value = {hf: ours for ours, hf in spec.hf_values.get(key, {}).items()}.get(value, value) \
                if spec is not None and isinstance(value, str) else value  # a family's spelling of the value
            problem = type_problem(config_class, key, value)
            if problem:
                raise ValueError(f"{given_key} {problem}.")
            kwargs[key] = value
            given_as[key] = given_key
    if kwargs.get("embedding_size") is not None and kwargs["embedding_size"] == kwargs.get("hidden_size", 768):
        del kwargs["embedding_size"]  # HF's ELECTRA always writes it; equal to hidden_size it is our None
    id2label = kwargs.get("id2label")
    if id2label is not None:
        kwargs.setdefault("num_labels", len(id2label))
        if all(str(v) == f"LABEL_{k}" for k, v in id2label.items()):
            del kwargs["id2label"]  # HF's placeholder names carry no information
    if own is not None and own.rotary:
        kwargs.update(_rotary_fields(config_class, d, kwargs.get("num_hidden_layers", 12)))
    if own is not None and own.rope:
        kwargs.update(_rope_fields(config_class, d))
    for hf_key, ours in (spec.hf_token_keys if spec is not None else {}).items():
        if d.get(hf_key) is not None and ours not in kwargs:
            problem = type_problem(config_class, ours, d[hf_key])
            if problem:
                raise ValueError(f"{hf_key} {problem}.")
            kwargs[ours] = d[hf_key]
    return config_class(**kwargs)


def _check_head_dim(d: Mapping[str, Any], head_dim: Any) -> None:
    """HF's ``head_dim`` (Llama-style configs) must be ``hidden_size / num_attention_heads``, the only width bertkit
    builds; ``ValueError`` otherwise."""
    hidden, heads = d.get("hidden_size", 768), d.get("num_attention_heads", 12)
    if head_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0 \
            and head_dim != hidden // heads:
        raise ValueError(f"head_dim={head_dim!r} is not hidden_size / num_attention_heads = {hidden // heads}; "
                         "bertkit builds heads of that width only: remove head_dim or make them agree.")


def _family_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """``family`` / ``model_type`` of a config dict (HF's ``model_type``, or bertkit's own two keys)."""
    family, model_type = d.get("family"), d.get("model_type")
    out: dict[str, Any] = {}
    if family is not None:
        out["family"] = family  # checked by the constructor, with model_type against it
    if model_type is not None:
        if not isinstance(model_type, str) or model_type not in _FAMILY_OF_MODEL_TYPE:
            raise ValueError(f"config model_type is {model_type!r}; bertkit loads model_type "
                             f"{', '.join(repr(t) for t in _FAMILY_OF_MODEL_TYPE)}.")
        out.setdefault("family", _FAMILY_OF_MODEL_TYPE[model_type])
        if model_type != out["family"]:
            out["model_type"] = model_type
    return out


def _rotary_fields(config_class: type, d: Mapping[str, Any], num_layers: Any) -> dict[str, Any]:
    """``global_rope_theta`` / ``local_rope_theta`` / ``global_attn_every_n_layers`` from HF's ``rope_parameters``
    and ``layer_types`` (transformers 5), which win over the flat keys older versions wrote, as in HF."""
    out: dict[str, Any] = {}
    if d.get("rope_scaling") is not None:
        raise ValueError(f"rope_scaling={d['rope_scaling']!r} is not supported; bertkit implements the default "
                         "rotary embeddings.")
    rope = d.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, Mapping):
            raise ValueError(f"rope_parameters must be an object keyed by layer type, got {describe(rope)}.")
        for layer_type, name in zip(_LAYER_TYPES, ("global_rope_theta", "local_rope_theta"), strict=True):
            params = rope.get(layer_type) or {}
            if not isinstance(params, Mapping):
                raise ValueError(f"rope_parameters.{layer_type} must be an object, got {describe(params)}.")
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"rope_parameters.{layer_type}.rope_type={params['rope_type']!r} is not supported; "
                                 "bertkit implements the default rotary embeddings.")
            if params.get("rope_theta") is not None:
                problem = type_problem(config_class, name, params["rope_theta"])
                if problem:
                    raise ValueError(f"rope_parameters.{layer_type}.rope_theta {problem}.")
                out[name] = params["rope_theta"]
    layer_types = d.get("layer_types")
    if layer_types is not None:
        out["global_attn_every_n_layers"] = _global_every(layer_types, num_layers)
    return out


def _rope_fields(config_class: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_theta`` / ``rope_scaling`` of a family with one rope (:attr:`~bertkit.families.Family.rope`) from HF's
    flat ``rope_parameters``; an older config's ``rope_scaling`` wins over it and ``rope_theta`` fills in a missing
    theta, as in HF. A default rope type with nothing else is ``rope_scaling=None``."""
    head_dim = d.get("head_dim")
    if head_dim is not None and d.get("hidden_size") and d.get("num_attention_heads") and \
            head_dim * d["num_attention_heads"] != d["hidden_size"]:
        raise ValueError(f"head_dim={head_dim!r} is not hidden_size / num_attention_heads "
                         f"({d['hidden_size']} / {d['num_attention_heads']}); bertkit builds heads of that width only.")
    given = d.get("rope_scaling") or d.get("rope_parameters")
    key = "rope_scaling" if d.get("rope_scaling") else "rope_parameters"
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ValueError(f"{key} must be an object ({{\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}), "
                         f"got {describe(given)}.")
    out: dict[str, Any] = {}
    scaling = {k: v for k, v in given.items() if k != "rope_theta"}
    if "type" in scaling:  # HF's older spelling of rope_type
        scaling.setdefault("rope_type", scaling.pop("type"))
    theta = given.get("rope_theta", d.get("rope_theta"))
    if theta is not None:
        problem = type_problem(config_class, "rope_theta", theta)
        if problem:
            raise ValueError(f"{key}.rope_theta {problem}.")
        out["rope_theta"] = theta
    if scaling.get("rope_type", "default") == "default" and set(scaling) <= {"rope_type"}:
        scaling = None
    out["rope_scaling"] = scaling
    return out


def _global_every(layer_types: Any, num_layers: Any) -> int:
    """n of HF's ``layer_types`` when they are global every n layers from the first (the only pattern bertkit
    builds); ``ValueError`` otherwise."""
    if not isinstance(layer_types, list) or not all(t in _LAYER_TYPES for t in layer_types):
        raise ValueError(f"layer_types must be a list of {' / '.join(map(repr, _LAYER_TYPES))}, "
                         f"got {describe(layer_types)}.")
    if len(layer_types) != num_layers:
        raise ValueError(f"layer_types names {len(layer_types)} layers but num_hidden_layers is {num_layers!r}.")
    n = next((i for i, t in enumerate(layer_types) if i and t == _LAYER_TYPES[0]), len(layer_types)) or 1
    if layer_types != [_LAYER_TYPES[bool(i % n)] for i in range(len(layer_types))]:
        raise ValueError(f"layer_types {layer_types} are not global attention every n layers from the first, the "
                         "pattern bertkit builds (global_attn_every_n_layers).")
    return n


# ---------------------------------------------------------------------------- Jina v3's original config.json
#: the key of Jina embeddings v3's original config.json (``XLMRobertaFlashConfig``, ``model_type`` "xlm-roberta")
#: that names its task adapters; its tensors are read by :mod:`bertkit.weights.task_adapters`
_JINA_ADAPTERS_KEY = "lora_adaptations"

#: keys HF's port (``jina_embeddings_v3``) reads as the original writes them
_JINA_SHARED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                     "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "bos_token_id",
                     "eos_token_id", "classifier_dropout", "id2label", "label2id", "attn_implementation")

#: the original's rotary options whose only value the port (and bertkit) implements
_JINA_ROTARY_CONSTANTS = {"position_embedding_type": "rotary", "rotary_emb_interleaved": False,
                          "rotary_emb_scale_base": None}


def _jina_original_as_port(d: Mapping[str, Any]) -> dict[str, Any]:
    """Jina embeddings v3's original config dict as HF's port's: the model's keys, ``rotary_emb_base`` as
    ``rope_parameters``; the adapters' keys, flash-attention's and the pooling options are not the model's."""
    for key, value in _JINA_ROTARY_CONSTANTS.items():
        if d.get(key, value) != value:
            raise ValueError(f"{key}={d[key]!r} is not supported; Jina embeddings v3 (and bertkit) implement "
                             f"{key}={value!r}.")
    hidden, heads, rotary_dim = d.get("hidden_size", 1024), d.get("num_attention_heads", 16), d.get("rotary_emb_dim")
    if rotary_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0 \
            and rotary_dim != hidden // heads:
        raise ValueError(f"rotary_emb_dim={rotary_dim!r} rotates part of each head; bertkit implements Jina "
                         f"embeddings v3's rotation of the whole head (rotary_emb_dim {hidden // heads}).")
    out = {key: d[key] for key in _JINA_SHARED_KEYS if key in d}
    out["model_type"] = "jina_embeddings_v3"
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": d.get("rotary_emb_base", 10_000.0)}
    return out
