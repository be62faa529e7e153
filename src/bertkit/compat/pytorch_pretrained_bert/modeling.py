"""pytorch_pretrained_bert 0.6.2's ``modeling`` API on bertkit's engine.

Here: :class:`BertConfig`, the base class :class:`BertPreTrainedModel` (``from_pretrained``),
the backbone :class:`BertModel`, checkpoint loading and the TF converter. The task models
(``BertForPreTraining``, ``BertForSequenceClassification``...) are in :mod:`.heads`, the
layer classes (``BertEmbeddings``, ``BertLayer``, ``BertLMPredictionHead``...), ``gelu``,
``swish`` and ``ACT2FN`` in :mod:`.layers`, ``cached_path``, ``CONFIG_NAME`` and
``WEIGHTS_NAME`` in :mod:`.file_utils`; all are re-exported here, where 0.6.2 has them.

Every class keeps 0.6.2's constructor, ``forward`` signature and return convention, and
its parameter names (``bert.*``, ``cls.*``, ``classifier``, ``qa_outputs``): a ppb
``state_dict`` loads with ``load_state_dict(strict=True)`` and ours loads in ppb. The
layers are bertkit's (:class:`bertkit.BERT`, :mod:`bertkit.modeling.layers`).

Deliberate differences: ``from_pretrained`` raises ``FileNotFoundError`` for a missing path
instead of logging and returning None, and is strict about the backbone (a missing backbone
tensor is an error; heads may be new). The heads' loss conventions are listed in :mod:`.heads`.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import Tensor, nn

from bertkit.compat.pytorch_pretrained_bert._shortcuts import archive_map, fetch_registered
from bertkit.compat.pytorch_pretrained_bert.file_utils import CONFIG_NAME, WEIGHTS_NAME, cached_path
from bertkit.compat.pytorch_pretrained_bert.layers import (
    ACT2FN,
    BertAttention,
    BertEmbeddings,
    BertEncoder,
    BertIntermediate,
    BertLayer,
    BertLayerNorm,
    BertLMPredictionHead,
    BertOnlyMLMHead,
    BertOnlyNSPHead,
    BertOutput,
    BertPooler,
    BertPredictionHeadTransform,
    BertPreTrainingHeads,
    BertSelfAttention,
    BertSelfOutput,
    gelu,
    swish,
)
from bertkit.config import BERTConfig
from bertkit.io import atomic_write, read_json_object
from bertkit.modeling.backbone import BERT
from bertkit.modeling.base import BERTPreTrainedModel

logger = logging.getLogger(__name__)

#: The config file of a Google TF checkpoint directory.
BERT_CONFIG_NAME = "bert_config.json"
#: The checkpoint prefix of a Google TF checkpoint directory.
TF_WEIGHTS_NAME = "model.ckpt"

#: 0.6.2's shortcut names, each with its checkpoint's URL in bertkit's weights registry (see
#: :func:`._shortcuts.archive_map`); ``from_pretrained`` accepts any name the registry knows.
PRETRAINED_MODEL_ARCHIVE_MAP = archive_map()

#: ppb's ignore index for PreTraining, MaskedLM and NSP labels.
PPB_IGNORE_INDEX = -1

#: BertConfig's fields in 0.6.2's order (``to_dict`` keeps insertion order).
_PPB_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "hidden_act",
               "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
               "max_position_embeddings", "type_vocab_size", "initializer_range")

#: BERTConfig fields that change the architecture and that a ppb config carries only when not default.
_ENGINE_EXTRAS = {"layer_norm_eps": 1e-12, "tie_word_embedding": True, "pad_token_id": 0}

#: config -> (the __dict__ it was derived from, its BERTConfig); kept outside __dict__ so to_dict is 0.6.2's.
_ENGINE_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------------- config

class BertConfig:
    """0.6.2's configuration: attributes are whatever the JSON (or the arguments) hold.

    ``BertConfig(30522)``, ``BertConfig("bert_config.json")`` and the alias
    ``BertConfig(vocab_size=30522)`` (the API spec's form) all work; ``to_dict`` /
    ``to_json_string`` / ``to_json_file`` write exactly these attributes, as 0.6.2 does.

    :meth:`to_bertkit` gives the engine's :class:`~bertkit.BERTConfig`. Reading an attribute
    0.6.2 never had but ``BERTConfig`` has (``layer_norm_eps``, ``tie_word_embedding``,
    ``is_decoder``...) answers from that derived view, so engine code that reads
    ``model.config.<field>`` works on these models; such reads never add attributes.
    """

    def __init__(self, vocab_size_or_config_json_file: int | str | os.PathLike | None = None,
                 hidden_size: int = 768, num_hidden_layers: int = 12, num_attention_heads: int = 12,
                 intermediate_size: int = 3072, hidden_act: Any = "gelu", hidden_dropout_prob: float = 0.1,
                 attention_probs_dropout_prob: float = 0.1, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, initializer_range: float = 0.02, *, vocab_size: int | None = None):
        if vocab_size is not None:
            if vocab_size_or_config_json_file is not None:
                raise ValueError("Pass the vocabulary size once: either positionally "
                                 "(vocab_size_or_config_json_file) or as vocab_size=, not both.")
            vocab_size_or_config_json_file = vocab_size
        source = vocab_size_or_config_json_file
        if isinstance(source, (str, os.PathLike)):
            json_config = read_json_object(source, "a BERT config")
            for key, value in json_config.items():
                self.__dict__[key] = value
        elif isinstance(source, int):
            values = (source, hidden_size, num_hidden_layers, num_attention_heads, hidden_act, intermediate_size,
                      hidden_dropout_prob, attention_probs_dropout_prob, max_position_embeddings,
                      type_vocab_size, initializer_range)
            self.__dict__.update(zip(_PPB_FIELDS, values))
        else:
            raise ValueError("First argument must be either a vocabulary size (int)"
                             "or the path to a pretrained model config file (str)")

    @classmethod
    def from_dict(cls, json_object: dict[str, Any]) -> BertConfig:
        """Constructs a `BertConfig` from a Python dictionary of parameters."""
        config = cls(vocab_size_or_config_json_file=-1)
        for key, value in json_object.items():
            config.__dict__[key] = value
        return config

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike) -> BertConfig:
        """Constructs a `BertConfig` from a json file of parameters."""
        return cls.from_dict(read_json_object(json_file, "a BERT config"))

    @classmethod
    def from_bertkit(cls, config: BERTConfig) -> BertConfig:
        """0.6.2's eleven fields of ``config``, plus the architecture fields that differ from the defaults."""
        d = {name: getattr(config, name) for name in _PPB_FIELDS}
        d.update({name: getattr(config, name) for name, default in _ENGINE_EXTRAS.items()
                  if getattr(config, name) != default})
        return cls.from_dict(d)

    def to_bertkit(self, **overrides: Any) -> BERTConfig:
        """The engine's :class:`~bertkit.BERTConfig` for these attributes (unknown keys are ignored)."""
        return BERTConfig.from_hf_dict({**self.__dict__, **overrides})

    def _engine_view(self) -> BERTConfig:
        state = dict(self.__dict__)
        cached = _ENGINE_VIEWS.get(self)
        if cached is None or cached[0] != state:
            cached = (state, self.to_bertkit())
            _ENGINE_VIEWS[self] = cached
        return cached[1]

    def __getattr__(self, name: str) -> Any:
        # only called for attributes 0.6.2's config lacks: answer BERTConfig's fields from the derived view
        if name.startswith("_") or not hasattr(BERTConfig, name):
            raise AttributeError(f"'BertConfig' object has no attribute {name!r}")
        try:
            view = self._engine_view()
        except (TypeError, ValueError) as e:
            raise AttributeError(f"'BertConfig' object has no attribute {name!r} (and it does not describe "
                                 f"a valid bertkit config: {e})") from None
        return getattr(view, name)

    def __repr__(self) -> str:
        return str(self.to_json_string())

    def to_dict(self) -> dict[str, Any]:
        """Serializes this instance to a Python dictionary."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self) -> str:
        """Serializes this instance to a JSON string."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, json_file_path: str | os.PathLike) -> None:
        """Save this instance to a json file."""
        with open(json_file_path, "w", encoding="utf-8") as writer:
            writer.write(self.to_json_string())


# ---------------------------------------------------------------------------- base

class BertPreTrainedModel(BERTPreTrainedModel):
    """0.6.2's base class: ``config`` is the :class:`BertConfig`, ``from_pretrained`` takes ppb's arguments.

    Subclass it for custom heads exactly as with ppb (build ``self.bert = BertModel(config)``
    and call ``self.apply(self.init_bert_weights)``). bertkit's model methods
    (``save_pretrained``, ``resize_token_embeddings``, gradient checkpointing) work too.
    """

    def __init__(self, config: BertConfig, *inputs: Any, **kwargs: Any):
        if isinstance(config, BERTConfig):
            config = BertConfig.from_bertkit(config)
        if not isinstance(config, BertConfig):
            raise ValueError(
                f"Parameter config in `{type(self).__name__}(config)` should be an instance of class `BertConfig`. "
                "To create a model from a Google pretrained model use "
                f"`model = {type(self).__name__}.from_pretrained(PRETRAINED_MODEL_NAME)`")
        super().__init__(config.to_bertkit())
        self.config = config

    @property
    def head_prefixes(self) -> tuple[str, ...]:
        """Everything but the backbone is a head: new (initialised) when a checkpoint lacks it."""
        return tuple(f"{name}." for name in (*self._modules, *self._parameters) if name != "bert")

    def init_bert_weights(self, module: nn.Module) -> None:
        """Initialise ``module`` as BERT does (normal(0, initializer_range), zero biases, LayerNorm 1/0)."""
        self.init_module_weights(module)

    def _engine_overrides(self) -> dict[str, Any]:
        """BERTConfig fields this model holds outside its config (e.g. ``num_labels``)."""
        return {}

    def set_config(self, config: BERTConfig) -> None:
        # bertkit's resize_token_embeddings hands in a BERTConfig: keep a ppb config, with the new size
        ppb_config = copy.deepcopy(self.config)
        ppb_config.vocab_size = config.vocab_size
        for module in self.modules():
            if isinstance(module, BERTPreTrainedModel):
                module.config = ppb_config

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """bertkit's / HF's format (``config.json`` + ``model.safetensors``), loadable by ``bertkit.BERT*``."""
        ppb_config = self.config
        self.config = ppb_config.to_bertkit(**self._engine_overrides())
        try:
            super().save_pretrained(directory)
        finally:
            self.config = ppb_config

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *inputs: Any,
                        cache_dir: str | os.PathLike | None = None, state_dict: dict | None = None,
                        from_tf: bool = False, **kwargs: Any):
        """Build ``cls`` from a checkpoint and load its weights (0.6.2's arguments).

        ``pretrained_model_name_or_path``: a shortcut name (``'bert-base-uncased'``; any name
        of :mod:`bertkit.weights`' registry, downloaded into ``cache_dir``), a directory
        (``config.json`` or ``bert_config.json`` + ``pytorch_model.bin`` / ``model.safetensors``
        / a TF checkpoint), or an archive (``.tar.gz`` / ``.zip``) of one. ``state_dict``
        replaces the checkpoint's weights; ``from_tf`` reads ``model.ckpt`` in the directory.
        Other positional and keyword arguments go to the constructor (``num_labels=3``). A
        string (or None) right after the name is ``cache_dir``, as in the API spec's signature.

        Tensors are fitted by :func:`bertkit.weights.adapt.adapt_state_dict`: legacy
        ``gamma``/``beta`` names are renamed, a missing head is initialised and an unused one
        dropped (both logged, as 0.6.2 does, and listed in ``model.load_report``); a missing
        or mis-shaped backbone tensor is a ``ValueError``. The model is returned in training
        mode, as 0.6.2 returns it.
        """
        if inputs and (inputs[0] is None or isinstance(inputs[0], (str, os.PathLike))):
            cache_dir, inputs = inputs[0], inputs[1:]
        source = resolve_pretrained(pretrained_model_name_or_path, cache_dir)
        config, weights = _read_pretrained(source, weights=state_dict is None and not from_tf)
        logger.info("Model config %s", config)
        model = cls(config, *inputs, **kwargs)
        if from_tf:
            return load_tf_weights_in_bert(model, Path(source) / TF_WEIGHTS_NAME)
        load_state_dict_into(model, weights if state_dict is None else state_dict)
        return model


# ---------------------------------------------------------------------------- backbone

class BertModel(BertPreTrainedModel, BERT):
    """The backbone: bertkit's :class:`~bertkit.BERT` with 0.6.2's ``forward``.

    ``forward`` returns ``(encoded_layers, pooled_output)``: ``encoded_layers`` is the list
    of the L layers' outputs ``[B, L, H]`` (no embedding output), or the last one alone
    with ``output_all_encoded_layers=False``. Built with ``output_attentions=True`` it
    returns ``(all_attentions, encoded_layers, pooled_output)`` (one ``[B, nh, L, L]`` per layer).
    """

    hf_architecture = "BertModel"
    head_prefixes = ()
    drops_padding = False  # 0.6.2's outputs at every position, padding included (GEMMs still take the fast path)

    def __init__(self, config: BertConfig, output_attentions: bool = False):
        super().__init__(config)
        self.output_attentions = output_attentions

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                output_all_encoded_layers: bool = True) -> tuple:
        out = self.encode(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          output_hidden_states=output_all_encoded_layers, output_attentions=self.output_attentions)
        encoded_layers = list(out.hidden_states[1:]) if output_all_encoded_layers else out.last_hidden_state
        if self.output_attentions:
            return list(out.attentions), encoded_layers, out.pooled_output
        return encoded_layers, out.pooled_output


# ---------------------------------------------------------------------------- loading

def resolve_pretrained(name_or_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local path as is; a URL through :func:`.file_utils.cached_path` (a registered checkpoint's URL, e.g. a
    value of ``PRETRAINED_MODEL_ARCHIVE_MAP``, gives its directory); otherwise a registered name
    (``'bert-base-uncased'``) fetched into ``cache_dir``."""
    if urlparse(os.fspath(name_or_path)).scheme in ("http", "https", "file"):
        return Path(cached_path(name_or_path, cache_dir))
    path = Path(name_or_path)
    if path.exists() or path.with_name(path.name + ".index").is_file():
        return path
    return fetch_registered(name_or_path, cache_dir, "file")[1]


def _read_pretrained(source: Path, *, weights: bool) -> tuple[BertConfig, dict[str, torch.Tensor] | None]:
    """The config (0.6.2's: ``config.json``, else ``bert_config.json``, as written) and, if asked, the tensors."""
    config_file = next((source / n for n in (CONFIG_NAME, BERT_CONFIG_NAME) if (source / n).is_file()), None) \
        if source.is_dir() else None
    if config_file is not None and not weights:
        return BertConfig.from_json_file(config_file), None
    from bertkit.weights.formats import read_checkpoint

    checkpoint = read_checkpoint(source)
    config = BertConfig.from_json_file(config_file) if config_file else BertConfig.from_bertkit(checkpoint.config)
    return config, checkpoint.state_dict if weights else None


def load_state_dict_into(model: BERTPreTrainedModel, state_dict: dict[str, torch.Tensor]) -> BERTPreTrainedModel:
    """Fit ``state_dict`` to ``model`` with bertkit's rules and load it; logs what 0.6.2 logs.

    As in 0.6.2, tensors the model has no place for are dropped (not an error) and reported
    through the log, not as warnings.
    """
    from bertkit.weights.adapt import load_into

    report = load_into(model, dict(state_dict), strict=False, warn=False)
    if report.initialized or report.resized:
        logger.info("Weights of %s not initialized from pretrained model: %s", type(model).__name__,
                    report.initialized + report.resized)
    if report.dropped:
        logger.info("Weights from pretrained model not used in %s: %s", type(model).__name__, report.dropped)
    return model


def load_tf_weights_in_bert(model: BERTPreTrainedModel, tf_checkpoint_path: str | os.PathLike):
    """Load a Google TF checkpoint (prefix such as ``bert_model.ckpt``) into ``model``; returns the model.

    Reads with :func:`bertkit.weights.formats.read_checkpoint` (no TensorFlow needed).
    Optimizer slots and ``global_step`` are skipped; ``cls/squad`` goes to ``qa_outputs``.
    Unlike 0.6.2 this also loads into a bare :class:`BertModel` (0.6.2 skipped every tensor),
    and a model tensor the checkpoint lacks is reported (warning) rather than left silently random.
    """
    try:
        from bertkit.weights.formats import read_checkpoint
    except ImportError as e:
        raise ImportError(f"reading TF checkpoints needs bertkit.weights.formats, unavailable here ({e}).") from e
    prefix = Path(tf_checkpoint_path)
    logger.info("Converting TensorFlow checkpoint from %s", prefix.resolve())
    if any((prefix.parent / n).is_file() for n in (CONFIG_NAME, BERT_CONFIG_NAME)):
        state = read_checkpoint(prefix).state_dict
    else:  # read_checkpoint wants a config beside the weights; the model has one
        with tempfile.TemporaryDirectory() as tmp:
            for f in prefix.parent.glob(prefix.name + ".*"):
                _link_or_copy(f, Path(tmp) / f.name)
            (Path(tmp) / BERT_CONFIG_NAME).write_text(_config_json(model), encoding="utf-8")
            state = read_checkpoint(Path(tmp) / prefix.name).state_dict
    load_state_dict_into(model, state)
    if model.load_report.initialized:
        logger.warning("The TF checkpoint %s has no values for %s; they keep their initial values.",
                       prefix, model.load_report.initialized)
    return model


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.symlink(src.resolve(), dst)
    except OSError:
        shutil.copyfile(src, dst)


def _config_json(model: nn.Module) -> str:
    config = model.config
    return config.to_json_string() if isinstance(config, BertConfig) else json.dumps(config.to_hf_dict())


def convert_tf_checkpoint_to_pytorch(tf_checkpoint_path: str | os.PathLike, bert_config_file: str | os.PathLike,
                                     pytorch_dump_path: str | os.PathLike) -> None:
    """0.6.2's converter: a TF checkpoint -> the state dict of a :class:`BertForPreTraining` (ppb names).

    The dump is written atomically with ``torch.save``; ppb and bertkit both load it.
    """
    config = BertConfig.from_json_file(bert_config_file)
    print(f"Building PyTorch model from configuration: {config}")
    model = BertForPreTraining(config)
    load_tf_weights_in_bert(model, tf_checkpoint_path)
    print(f"Save PyTorch model to {pytorch_dump_path}")
    state = model.state_dict()
    atomic_write(pytorch_dump_path, lambda tmp: torch.save(state, tmp))


# ---------------------------------------------------------------------------- task models

# Defined in heads.py, which builds on the classes above (so it is imported last), and re-exported here:
# 0.6.2's users import them from ``pytorch_pretrained_bert.modeling``.
from bertkit.compat.pytorch_pretrained_bert.heads import (  # noqa: E402
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)

#: The name of 0.4/0.5 scripts for :class:`BertPreTrainedModel` (0.6.2 renamed it).
PreTrainedBertModel = BertPreTrainedModel

__all__ = [
    "ACT2FN", "BERT_CONFIG_NAME", "CONFIG_NAME", "PRETRAINED_MODEL_ARCHIVE_MAP", "TF_WEIGHTS_NAME", "WEIGHTS_NAME",
    "BertAttention", "BertConfig", "BertEmbeddings", "BertEncoder", "BertForMaskedLM", "BertForMultipleChoice",
    "BertForNextSentencePrediction", "BertForPreTraining", "BertForQuestionAnswering",
    "BertForSequenceClassification", "BertForTokenClassification", "BertIntermediate", "BertLMPredictionHead",
    "BertLayer", "BertLayerNorm", "BertModel", "BertOnlyMLMHead", "BertOnlyNSPHead", "BertOutput", "BertPooler",
    "BertPreTrainedModel", "BertPreTrainingHeads", "BertPredictionHeadTransform", "BertSelfAttention",
    "BertSelfOutput", "PreTrainedBertModel", "cached_path", "convert_tf_checkpoint_to_pytorch", "gelu",
    "load_state_dict_into", "load_tf_weights_in_bert", "resolve_pretrained", "swish",
]
