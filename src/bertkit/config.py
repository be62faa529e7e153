"""BERTConfig: the one typed description of a BERT's architecture.

The config validates itself on construction and raises ``ValueError`` naming the
field, what was wrong and how to fix it: first every field's type (an integer field
takes no ``768.0`` nor ``"768"``, a number field takes ints but no numeric strings, a
flag takes only ``True``/``False``), then the values. Errors from a config file name the
file and the key as the file spells it. It reads and writes three dialects:

* bertkit's own field names (``to_dict`` / ``from_dict``, lucid's names);
* HF ``config.json`` (``to_hf_dict`` / ``from_hf_dict``: ``tie_word_embeddings``,
  ``model_type`` ``"bert"``, ``"roberta"``, ``"xlm-roberta"``, ``"camembert"``, ``"mpnet"``, ``"distilbert"``,
  ``"electra"`` or ``"modernbert"``, ``id2label``; a family's own key names, such as DistilBERT's ``dim``, through
  its :attr:`Family.hf_config_keys`);
* Google's ``bert_config.json`` (a subset of HF's names; read by ``from_hf_dict``).

A family may spell some keys its own way in HF (ModernBERT's ``norm_eps``, ``hidden_activation``,
``rope_parameters``, ``layer_types``): :attr:`Family.hf_config_keys`.

The other encoder families are configuration of the same engine: ``BERTConfig.family`` names a
:class:`Family`, a record of data (where position ids start, which classification head, the
special ids' defaults, HF's class names) that the modeling and weights code read. See
:data:`FAMILIES`.

This module imports nothing from torch: activations are validated by name here and
resolved to functions in :mod:`bertkit.modeling.layers`. Two private modules hold the parts that read apart:
``bertkit._config_types`` (the fields' type checks, read from their annotations) and ``bertkit._config_hf`` (the
HF ``config.json`` dialect behind ``to_hf_dict`` / ``from_hf_dict``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import bertkit._config_hf as _config_hf  # not `from bertkit import`: the package's lazy __getattr__ imports modeling
from bertkit._config_types import type_problem
from bertkit.families import _FAMILY_OF_MODEL_TYPE, FAMILIES, FAMILY_FIELDS, ROPE_TYPES, Family
from bertkit.families import RopeLayer as RopeLayer  # re-exported: modeling reads family records via config
from bertkit.io import atomic_write_text

#: Activation names accepted by ``hidden_act``. "gelu" is the exact erf form used by
#: Google's checkpoints, HF and pytorch_pretrained_bert; "gelu_tanh" is the tanh approximation.
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu", "swish", "tanh")

#: Other libraries' names for the same functions, normalised on construction.
ACTIVATION_ALIASES = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",
    "gelu_python": "gelu",
}

ATTN_IMPLEMENTATIONS = ("sdpa", "eager")

#: ``classifier_pooling``: the sentence representation of a ``shared_head`` family's classifiers (ModernBERT) is
#: its first token (``"cls"``) or the mean over its real tokens (``"mean"``); EuroBERT's classifier also averages its
#: per-token logits over the real tokens (``"late"``). Each family takes those of ``Family.classifier_poolings``.
CLASSIFIER_POOLINGS = ("cls", "mean", "late")

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


@dataclass
class BERTConfig:
    """Architecture and runtime options of a BERT model (or of another family of the same engine).

    Defaults are bert-base-uncased's. ``hidden_act`` is a name from :data:`ACTIVATIONS`
    (or an HF alias such as ``"gelu_new"``) or a callable such as
    ``torch.nn.functional.gelu``. Special token ids left as None take the
    bert-base-uncased vocabulary's (unk 100, cls 101, sep 102, mask 103) when the
    vocabulary is that large, and stay None (unknown) otherwise; a model trained with its
    own vocabulary stores its own ids here.

    ``embedding_layer_norm=False`` drops the LayerNorm after the embedding sum and
    ``attention_bias=False`` drops the biases of the query/key/value and attention-output
    projections; both exist for architectures such as d2l's BERT and are True for BERT.
    HF's ``BertModel`` has neither option, so such configs cannot be written as HF configs.

    ``family`` selects an encoder family of the same engine (:data:`FAMILIES`): ``"bert"`` or
    ``"roberta"``. A family is data, not code: a ``"roberta"`` config builds the same layers with
    fairseq's position ids (from ``pad_token_id + 1``; :attr:`position_offset`), RoBERTa's
    classification head (``classifier.dense`` / ``classifier.out_proj`` on the first token, no
    pooler), no NSP head, and its own special-id defaults (pad 1, ``<s>`` 0, ``</s>`` 2, ``<unk>`` 3,
    ``<mask>`` the last id); its checkpoints are read and written under HF's ``roberta.*`` /
    ``lm_head.*`` names. ``model_type`` keeps which HF model type a config came from
    (``"xlm-roberta"``, ``"camembert"``; None: the family's own name) so that saving writes it back;
    it changes nothing else. Build one with :func:`bertkit.presets.RoBERTaConfig` (also
    ``XLMRoBERTaConfig``, ``CamemBERTConfig``) or ``BERTConfig(family="roberta", ...)``.
    ``pad_token_id`` left as None takes the family's (0 for BERT, 1 for RoBERTa).

    ``family="distilbert"`` (:func:`bertkit.presets.DistilBERTConfig`) and ``family="electra"``
    (:func:`bertkit.presets.ELECTRAConfig`) are BERT's layers too. Their own fields (:data:`FAMILY_FIELDS`; at
    their defaults they change nothing):

    * ``embedding_size`` (ELECTRA): the width E of the embedding tables, projected to ``hidden_size`` by the
      backbone's ``embeddings_project`` when it differs; the MLM head projects back to E (its decoder is tied to
      the E-wide word embeddings). None: ``hidden_size``.
    * ``sinusoidal_pos_embds`` (DistilBERT): the position embeddings start as the fixed sinusoidal table (still
      trained, as in HF transformers 5) instead of random values.
    * ``pooler_dropout``: the dropout between the pooled output and ``classifier`` (DistilBERT's
      ``seq_classif_dropout``, ELECTRA's multiple-choice ``summary_last_dropout``). None: ``classifier_dropout``,
      else ``hidden_dropout_prob`` (BERT).
    * ``qa_dropout`` (DistilBERT): a dropout before ``qa_outputs``. None: none (BERT).

    ``family="mpnet"`` (:func:`bertkit.presets.MPNetConfig`) is RoBERTa's embeddings without token types plus a
    relative position bias shared by every layer's attention, ``relative_attention_num_buckets`` buckets of
    relative distance (T5's bucketing: exact below 8, logarithmic up to 128, per direction); checkpoints are
    read and written under HF's ``mpnet.*`` names. The field is left out of :meth:`to_dict` at its default.

    ``family="modernbert"`` builds ModernBERT's layers (:mod:`bertkit.modeling.modernbert`: pre-norm, fused
    ``Wqkv``, rotary positions, GeGLU, alternating global and sliding-window attention) from these fields, which
    keep HF's names: ``norm_bias`` / ``mlp_bias`` (with ``attention_bias``, the biases it may drop),
    ``mlp_dropout``, ``global_attn_every_n_layers``, ``local_attention`` (the window: keys within half of it),
    ``global_rope_theta`` / ``local_rope_theta``, and for its heads ``classifier_bias`` / ``classifier_activation``
    (the dense layer and activation of the transform that its MLM head and classifiers share; None: the MLM head's
    usual activation) and ``classifier_pooling`` (``"cls"`` or ``"mean"``). Their defaults leave BERT as it is;
    :func:`bertkit.presets.ModernBERTConfig` gives HF's ModernBERT defaults.

    ``family="deberta-v2"`` (DeBERTa-v2/v3, mDeBERTa; :mod:`bertkit.modeling.deberta`) builds disentangled attention
    over relative positions from these fields, which keep HF's names: ``relative_attention``, ``pos_att_type``,
    ``max_relative_positions``, ``position_buckets``, ``share_att_key``, ``norm_rel_ebd``, ``position_biased_input``,
    ``conv_kernel_size`` / ``conv_groups`` / ``conv_act``, ``legacy`` (the masked LM's head layout), and for its
    classifiers ``pooler_hidden_act`` and ``context_pooler_dropout`` (HF's ``pooler_dropout``; HF's ``cls_dropout`` is
    ``pooler_dropout``). ``type_vocab_size`` may be 0 there (no token types); :func:`bertkit.presets.DeBERTaV2Config`
    gives deberta-v3-base's values.
    ``family="eurobert"`` builds EuroBERT's Llama-style layers (:mod:`bertkit.modeling.llama_layer`: RMSNorm with
    ``layer_norm_eps``, grouped-query attention over ``num_key_value_heads`` with the rope of ``rope_theta`` /
    ``rope_scaling``, SwiGLU, ``attention_bias`` / ``mlp_bias``), embeddings without norm, positions or token types
    (``embedding_layer_norm=False``), a masked LM that is one ``lm_head`` Linear, and a sequence classifier that pools
    by ``classifier_pooling`` ``"cls"`` (HF's ``"bos"``), ``"mean"`` or ``"late"``;
    :func:`bertkit.presets.EuroBERTConfig` gives HF's defaults.
    """

    #: Rows of the word-embedding table: the tokenizer's vocabulary size.
    vocab_size: int = 30522
    #: Width H of every layer (the embeddings and each block's output).
    hidden_size: int = 768
    #: Attention heads per layer; must divide ``hidden_size``.
    num_attention_heads: int = 12
    #: Transformer blocks L.
    num_hidden_layers: int = 12
    #: Width of each block's feed-forward layer (4 H in the released sizes).
    intermediate_size: int = 3072
    #: The feed-forward activation (and the MLM head's): a name from ``ACTIVATIONS``, an HF alias such as
    #: ``gelu_new``, or a callable.
    hidden_act: str | Callable = "gelu"
    #: Dropout on the embeddings and on every block's sublayer outputs.
    hidden_dropout_prob: float = 0.1
    #: Dropout on the attention probabilities.
    attention_probs_dropout_prob: float = 0.1
    #: Rows of the learned position table: the longest input in tokens (512 for BERT).
    max_position_embeddings: int = 512
    #: The MLM decoder shares the word-embedding matrix (HF's ``tie_word_embeddings``).
    tie_word_embedding: bool = True
    #: Token types (segments): 2 for sentence pairs; 1 for RoBERTa-style models.
    type_vocab_size: int = 2
    #: Standard deviation of the truncated-normal initialisation of new weights.
    initializer_range: float = 0.02
    #: Epsilon of every LayerNorm.
    layer_norm_eps: float = 1e-12
    #: Apply LayerNorm (and dropout) after the embedding sum; False for d2l's BERT.
    embedding_layer_norm: bool = True
    #: Biases on the query, key, value and attention-output projections; False for d2l's BERT.
    attention_bias: bool = True
    #: A decoder returns its keys and values for incremental decoding.
    use_cache: bool = False
    #: Causal (left-to-right) self-attention, as ``BERTForCausalLM`` needs.
    is_decoder: bool = False
    #: Each block attends to an encoder's output as well (needs ``is_decoder``).
    add_cross_attention: bool = False
    #: Run the feed-forward layer over this many positions at a time to save memory; 0: all at once.
    chunk_size_feed_forward: int = 0
    #: Id of the padding token; None: the family's (0 for BERT, 1 for RoBERTa).
    pad_token_id: int | None = None
    #: Id of the unknown token; None: bert-base-uncased's where the vocabulary is that large.
    unk_token_id: int | None = None
    #: Id of the first token ([CLS] / <s>); None: as ``unk_token_id``.
    cls_token_id: int | None = None
    #: Id of the separator ([SEP] / </s>); None: as ``unk_token_id``.
    sep_token_id: int | None = None
    #: Id of the mask token; None: as ``unk_token_id``.
    mask_token_id: int | None = None
    #: Dropout before a task head's classifier; None: ``hidden_dropout_prob``.
    classifier_dropout: float | None = None
    #: Outputs of a classification or tagging head (1 for regression and rerankers).
    num_labels: int = 2
    #: Loss of a sequence classifier: regression, single_label_classification or multi_label_classification; None:
    #: decided from ``num_labels`` and the labels' dtype, as HF does.
    problem_type: str | None = None
    #: Attention kernel: ``sdpa`` (PyTorch's fused scaled-dot-product attention) or ``eager`` (the matmuls written
    #: out; returns attention probabilities).
    attn_implementation: str = "sdpa"
    #: Label id -> name of a classification or tagging head; saved in config.json, used by pipelines and ``bertkit
    #: serve``.
    id2label: dict[int, str] | None = field(default=None, repr=False)
    #: The encoder family of the same engine: bert, roberta, mpnet, distilbert, electra, modernbert or deberta-v2.
    family: str = "bert"
    #: The HF model type this config came from (xlm-roberta, camembert); None: the family's name.
    model_type: str | None = None
    relative_attention_num_buckets: int = 32
    embedding_size: int | None = None
    sinusoidal_pos_embds: bool = False
    pooler_dropout: float | None = None
    qa_dropout: float | None = None
    # ModernBERT's (HF's names; these defaults leave BERT as it is, and to_dict omits them there)
    norm_bias: bool = True
    mlp_bias: bool = True
    mlp_dropout: float = 0.0
    classifier_bias: bool = True
    classifier_activation: str | None = None
    classifier_pooling: str = "cls"
    global_attn_every_n_layers: int = 1
    local_attention: int = 128
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    # DeBERTa-v2's (HF's names but two; these defaults leave BERT as it is, and to_dict omits them there)
    #: The pooler's activation (DeBERTa's ``pooler_hidden_act``); None: the family's (BERT's tanh).
    pooler_hidden_act: str | None = None
    #: Dropout on the first token before the pooler's dense layer (HF DeBERTa's ``pooler_dropout``; its
    #: ``cls_dropout``, before the classifier, is ``pooler_dropout`` here).
    context_pooler_dropout: float = 0.0
    #: DeBERTa: attention terms over relative positions (``encoder.rel_embeddings``).
    relative_attention: bool = False
    #: DeBERTa: relative distances beyond it share one embedding; below 1: ``max_position_embeddings``.
    max_relative_positions: int = -1
    #: DeBERTa: relative positions in this many log buckets (deberta-v3: 256); -1: one per distance.
    position_buckets: int = -1
    #: DeBERTa's relative attention terms: a list of ``"c2p"`` / ``"p2c"`` (HF's ``"p2c|c2p"`` is read too).
    pos_att_type: str | list | None = None
    #: DeBERTa: project the relative embeddings with the layer's key / query projections (else their own).
    share_att_key: bool = False
    #: DeBERTa: ``"layer_norm"`` normalises the relative embeddings (deberta-v3); ``"none"`` does not.
    norm_rel_ebd: str = "none"
    #: DeBERTa: add absolute position embeddings to the word embeddings (False in deberta-v3).
    position_biased_input: bool = True
    #: DeBERTa: the kernel of the convolution after the first layer (deberta-v2-xlarge: 3); 0: none.
    conv_kernel_size: int = 0
    #: DeBERTa: groups of that convolution.
    conv_groups: int = 1
    #: DeBERTa: the activation after that convolution.
    conv_act: str = "tanh"
    #: DeBERTa's masked-LM head layout: True, HF's default ``cls.predictions.*``; False, ``lm_predictions.lm_head.*``.
    legacy: bool = True
    # the rope of a family with one rope for every layer (Family.rope: GTE, NomicBERT, Jina v3, EuroBERT); HF's
    # flat rope_parameters is {"rope_theta": rope_theta, **rope_scaling}
    #: The rotary base (HF's ``rope_parameters["rope_theta"]``).
    rope_theta: float = 10_000.0
    #: The rest of HF's ``rope_parameters``: ``rope_type`` (``linear``, ``dynamic``, ``yarn``, ``llama3``) and its
    #: keys (``factor``...), ``partial_rotary_factor``; None: the default rope over the whole head.
    rope_scaling: dict | None = None
    #: Key/value heads of grouped-query attention (EuroBERT's, HF's name): a divisor of ``num_attention_heads``, each
    #: serving a group of consecutive query heads; None: one per query head.
    num_key_value_heads: int | None = None

    def __post_init__(self) -> None:
        self._check_types()  # before normalising, which relies on them
        if isinstance(self.hidden_act, str):
            self.hidden_act = ACTIVATION_ALIASES.get(self.hidden_act, self.hidden_act)
        if self.classifier_activation is not None:
            self.classifier_activation = ACTIVATION_ALIASES.get(self.classifier_activation, self.classifier_activation)
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
        if isinstance(self.pos_att_type, str):  # HF's "p2c|c2p" spelling
            self.pos_att_type = [t.strip() for t in self.pos_att_type.lower().split("|") if t.strip()]
        for name in ("pooler_hidden_act", "conv_act"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, ACTIVATION_ALIASES.get(value, value))
        if self.family in FAMILIES:  # an unknown family is validate()'s error
            for name, default in FAMILIES[self.family].special_ids.items():
                default = self.vocab_size - 1 if default == -1 else default
                if getattr(self, name) is None and 0 <= default < self.vocab_size:
                    setattr(self, name, default)
            for name, default in FAMILIES[self.family].field_defaults.items():
                if getattr(self, name) is None:
                    setattr(self, name, default)
        if self.pad_token_id is None:
            self.pad_token_id = 0
        self.validate()

    # ------------------------------------------------------------------ validation
    def _check_types(self) -> None:
        for f in fields(self):
            problem = type_problem(type(self), f.name, getattr(self, f.name))
            if problem:
                raise ValueError(f"BERTConfig.{f.name} {problem}.")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field (its type, then its value) and how to fix it."""
        self._check_types()
        for name in ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size", "num_labels"):
            value = getattr(self, name)
            spec = FAMILIES.get(self.family, FAMILIES["bert"])  # an unknown family: its error comes below
            if value == 0 and name == "type_vocab_size" and spec.optional_token_types:
                continue  # no token-type table (gte-base-en-v1.5)
            if value <= 0:
                raise ValueError(f"BERTConfig.{name} must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BERTConfig.hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}); choose e.g. num_attention_heads="
                f"{_largest_divisor_at_most(self.hidden_size, self.num_attention_heads)}."
            )
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(f"BERTConfig.embedding_size must be a positive integer (or None: hidden_size), "
                             f"got {self.embedding_size!r}.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "pooler_dropout",
                     "qa_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"BERTConfig.{name} must lie in [0, 1), got {value!r}.")
        if not self.initializer_range > 0:
            raise ValueError(f"BERTConfig.initializer_range must be > 0, got {self.initializer_range!r}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"BERTConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}.")
        if not callable(self.hidden_act) and self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BERTConfig.hidden_act {self.hidden_act!r} is unknown; use one of {ACTIVATIONS} "
                "or pass a callable."
            )
        if self.chunk_size_feed_forward < 0:
            raise ValueError(
                f"BERTConfig.chunk_size_feed_forward must be >= 0 (0 disables chunking), "
                f"got {self.chunk_size_feed_forward!r}."
            )
        if self.family not in FAMILIES:
            raise ValueError(f"BERTConfig.family must be one of {tuple(FAMILIES)}, got {self.family!r}.")
        if self.model_type is not None and self.model_type not in self.family_spec.model_types:
            raise ValueError(
                f"BERTConfig.model_type {self.model_type!r} is not a model type of family {self.family!r} "
                f"({', '.join(self.family_spec.model_types)}); "
                + (f"set family={_FAMILY_OF_MODEL_TYPE[self.model_type]!r}."
                   if self.model_type in _FAMILY_OF_MODEL_TYPE else "leave it None.")
            )
        if self.relative_attention_num_buckets < 4:
            raise ValueError(f"BERTConfig.relative_attention_num_buckets must be at least 4 (half for each "
                             f"direction, half of those exact), got {self.relative_attention_num_buckets!r}.")
        if self.family == "mpnet" and self.pad_token_id != 1:
            raise ValueError(f"BERTConfig.pad_token_id={self.pad_token_id!r}: MPNet pads with id 1 (HF's MPNet fixes "
                             "it whatever its config says, and counts positions from 2); set pad_token_id=1.")
        if self.is_decoder and self.family_spec.causal_lm_class is None:
            raise ValueError(f"BERTConfig.is_decoder=True: family {self.family!r} has no causal LM (HF has no such "
                             "class); leave is_decoder False and use BERTForMaskedLM.")
        if self.max_tokens < 1:
            raise ValueError(
                f"BERTConfig.max_position_embeddings ({self.max_position_embeddings}) leaves no position for a "
                f"token: family {self.family!r} starts positions at pad_token_id + 1 = {self.position_offset}; "
                f"use at least {self.position_offset + 1}."
            )
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(
                f"BERTConfig.attn_implementation must be one of {ATTN_IMPLEMENTATIONS}, "
                f"got {self.attn_implementation!r}."
            )
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ValueError(
                f"BERTConfig.problem_type must be None or one of {PROBLEM_TYPES}, got {self.problem_type!r}."
            )
        if self.add_cross_attention and not self.is_decoder:
            raise ValueError(
                "BERTConfig.add_cross_attention=True needs is_decoder=True: cross-attention layers "
                "belong to a decoder."
            )
        for name in ("pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id", "mask_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"BERTConfig.{name}={value!r} is outside the vocabulary [0, {self.vocab_size}); "
                    f"set it to the id of that token in your vocab."
                )
        if self.id2label is not None and len(self.id2label) != self.num_labels:
            raise ValueError(
                f"BERTConfig.id2label has {len(self.id2label)} entries but num_labels={self.num_labels}; "
                "make them agree or drop id2label."
            )
        self._validate_modernbert_fields()
        self._validate_deberta_fields()
        self._validate_rope_fields()

    def _validate_rope_fields(self) -> None:
        if not self.rope_theta > 0:
            raise ValueError(f"BERTConfig.rope_theta must be > 0, got {self.rope_theta!r}.")
        if self.rope_scaling is None:
            return
        scaling = dict(self.rope_scaling)
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"BERTConfig.rope_scaling rope_type={rope_type!r} is not supported; use one of "
                             f"{tuple(ROPE_TYPES)} (or rope_scaling=None for the default rope).")
        for key in ROPE_TYPES[rope_type]:
            if not isinstance(scaling.get(key), (int, float)) or isinstance(scaling.get(key), bool):
                raise ValueError(f"BERTConfig.rope_scaling rope_type={rope_type!r} needs the number {key!r}, "
                                 f"got {scaling.get(key)!r}; add it, e.g. {{'rope_type': {rope_type!r}, "
                                 f"{key!r}: 2.0}}.")
        partial = scaling.get("partial_rotary_factor", 1.0)
        if not (isinstance(partial, (int, float)) and 0 < partial <= 1
                and int(self.head_dim * partial) % 2 == 0 and int(self.head_dim * partial) > 0):
            raise ValueError(f"BERTConfig.rope_scaling partial_rotary_factor={partial!r} must lie in (0, 1] and "
                             f"rotate an even number of the head's {self.head_dim} features.")

    def _validate_modernbert_fields(self) -> None:
        for name in ("global_attn_every_n_layers", "local_attention"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BERTConfig.{name} must be a positive integer, got {getattr(self, name)!r}.")
        for name in ("global_rope_theta", "local_rope_theta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"BERTConfig.{name} must be > 0, got {getattr(self, name)!r}.")
        if not 0.0 <= self.mlp_dropout < 1.0:
            raise ValueError(f"BERTConfig.mlp_dropout must lie in [0, 1), got {self.mlp_dropout!r}.")
        if self.classifier_activation is not None and self.classifier_activation not in ACTIVATIONS:
            raise ValueError(f"BERTConfig.classifier_activation {self.classifier_activation!r} is unknown; use one of "
                             f"{ACTIVATIONS}, or None for the MLM head's usual activation.")
        poolings = self.family_spec.classifier_poolings
        if self.classifier_pooling not in poolings:
            hf_spelling = {hf: ours for ours, hf in self.family_spec.hf_values.get("classifier_pooling", {}).items()}
            hint = f" (HF's {self.classifier_pooling!r} is {hf_spelling[self.classifier_pooling]!r} here)" \
                if self.classifier_pooling in hf_spelling else ""
            raise ValueError(f"BERTConfig.classifier_pooling must be one of {poolings} for family {self.family!r}, "
                             f"got {self.classifier_pooling!r}{hint}.")
        kv_heads = self.num_key_value_heads
        if kv_heads is not None and (kv_heads <= 0 or self.num_attention_heads % kv_heads):
            raise ValueError(f"BERTConfig.num_key_value_heads={kv_heads!r} must be a positive divisor of "
                             f"num_attention_heads ({self.num_attention_heads}), or None for one per query head.")

    def _validate_deberta_fields(self) -> None:
        kinds = self.pos_att_type or []
        if not all(isinstance(t, str) for t in kinds):
            raise ValueError(f"BERTConfig.pos_att_type must be a list of 'c2p' / 'p2c' (or HF's 'p2c|c2p'), "
                             f"got {self.pos_att_type!r}.")
        unknown = [t for t in kinds if t not in ("c2p", "p2c")]
        if unknown:
            raise ValueError(f"BERTConfig.pos_att_type={self.pos_att_type!r}: {unknown[0]!r} is not a DeBERTa-v2 "
                             "attention term (it has 'c2p' and 'p2c' only; HF's DebertaV2 has no 'p2p'); drop "
                             f"{unknown[0]!r} (deberta-v3: ['p2c', 'c2p']).")
        for name in ("pooler_hidden_act", "conv_act"):
            value = getattr(self, name)
            if value is not None and value not in ACTIVATIONS:
                raise ValueError(f"BERTConfig.{name} {value!r} is unknown; use one of {ACTIVATIONS}.")
        if not 0.0 <= self.context_pooler_dropout < 1.0:
            raise ValueError(f"BERTConfig.context_pooler_dropout must lie in [0, 1), got "
                             f"{self.context_pooler_dropout!r}.")
        norms = [t.strip() for t in self.norm_rel_ebd.lower().split("|")]
        if any(t not in ("none", "layer_norm") for t in norms):
            raise ValueError(f"BERTConfig.norm_rel_ebd={self.norm_rel_ebd!r} is not supported; use 'layer_norm' "
                             "(deberta-v3) or 'none'.")
        if self.position_buckets == 0 or self.position_buckets == 1:
            raise ValueError(f"BERTConfig.position_buckets={self.position_buckets!r}: use -1 (no buckets: one "
                             "relative position per distance) or at least 2 (deberta-v3: 256).")
        span = self.max_relative_positions if self.max_relative_positions >= 1 else self.max_position_embeddings
        if self.position_buckets > 1 and span <= self.position_buckets // 2 + 1:
            raise ValueError(f"BERTConfig.position_buckets={self.position_buckets}: its logarithmic buckets need "
                             f"max_relative_positions (here {span}) above position_buckets // 2 + 1 = "
                             f"{self.position_buckets // 2 + 1}; lower position_buckets (deberta-v3: 256 with 512) "
                             "or raise max_relative_positions.")
        if self.conv_kernel_size < 0 or (self.conv_kernel_size and self.conv_kernel_size % 2 == 0):
            raise ValueError(f"BERTConfig.conv_kernel_size={self.conv_kernel_size!r}: use 0 (no convolution) or an "
                             "odd size (deberta-v2-xlarge: 3), which keeps the sequence length.")
        if self.conv_groups < 1 or self.hidden_size % self.conv_groups:
            raise ValueError(f"BERTConfig.conv_groups={self.conv_groups!r} must be a positive divisor of "
                             f"hidden_size ({self.hidden_size}).")
        if not self.legacy and not (self.tie_word_embedding and self.embedding_width == self.hidden_size):
            raise ValueError("BERTConfig.legacy=False (DeBERTa's lm_predictions head) always decodes with the word "
                             "embeddings, from hidden_size; set tie_word_embedding=True and embedding_size=None, or "
                             "legacy=True for an untied or narrower decoder.")

    # ------------------------------------------------------------------ derived
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def key_value_heads(self) -> int:
        """Key/value heads per layer: ``num_key_value_heads``, or ``num_attention_heads`` when it is None."""
        return self.num_attention_heads if self.num_key_value_heads is None else self.num_key_value_heads

    @property
    def embedding_width(self) -> int:
        """The width of the embedding tables (and of the MLM head's output space): ``embedding_size``, or
        ``hidden_size`` when it is None."""
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def family_spec(self) -> Family:
        """The :class:`Family` named by ``family``."""
        return FAMILIES[self.family]

    @property
    def position_offset(self) -> int:
        """The position id of a sequence's first token: 0 for BERT, ``pad_token_id + 1`` for RoBERTa."""
        return self.pad_token_id + 1 if self.family_spec.positions_after_padding else 0

    @property
    def max_tokens(self) -> int:
        """The longest input the position embeddings cover: ``max_position_embeddings - position_offset``."""
        return self.max_position_embeddings - self.position_offset

    @property
    def hf_model_type(self) -> str:
        """The HF ``model_type`` this config is written as (``model_type``, or the family's own)."""
        return self.model_type or self.family

    def hf_architecture_name(self, architecture: str) -> str:
        """The HF class name of ``architecture`` (a bertkit class's ``hf_architecture``, BERT's HF name such
        as ``"BertForMaskedLM"``) in this config's model type: ``"XLMRobertaForMaskedLM"``. Other names pass."""
        if not architecture.startswith("Bert"):
            return architecture
        spec = self.family_spec
        prefix = spec.class_prefixes[spec.model_types.index(self.hf_model_type)]
        rest = architecture.removeprefix("Bert")
        if rest == FAMILIES["bert"].causal_lm_class:
            rest = spec.causal_lm_class or rest
        return prefix + rest

    @property
    def special_token_ids(self) -> tuple[int, ...]:
        """The ids never masked nor drawn as random replacements in MLM."""
        ids = {self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id}
        return tuple(sorted(i for i in ids if i is not None))

    def replace(self, **changes: Any) -> BERTConfig:
        """A validated copy with ``changes`` applied (the config itself is never mutated)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(
                f"Unknown BERTConfig field(s) {sorted(unknown)}; valid fields: "
                f"{[f.name for f in fields(self)]}."
            )
        if "num_labels" in changes and "id2label" not in changes and self.id2label is not None \
                and len(self.id2label) != changes["num_labels"]:
            changes["id2label"] = None
        return replace(self, **changes)

    # ------------------------------------------------------------------ own dialect
    def to_dict(self) -> dict[str, Any]:
        """Fields by bertkit's names; a callable ``hidden_act`` is written by its name. ``family``,
        ``model_type`` and the :data:`FAMILY_FIELDS` are left out at their defaults (BERT), so a BERT config's dict
        is what it was before families existed (runs recorded then still resume)."""
        d = dataclasses.asdict(self)
        d["hidden_act"] = self.activation_name()
        if d["id2label"] is None:
            del d["id2label"]
        if d["family"] == "bert":
            del d["family"]
        if d["model_type"] is None:
            del d["model_type"]
        for name, default in FAMILY_FIELDS.items():
            if d[name] == default:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BERTConfig:
        """Build from bertkit's field names; unknown keys are an error that lists them.

        Raises ``TypeError`` when ``d`` is not a mapping, ``ValueError`` naming the field otherwise.
        """
        _require_mapping("BERTConfig.from_dict", d)
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(
                f"Unknown BERTConfig field(s) {sorted(unknown)}. For an HF or Google config.json "
                "use BERTConfig.from_hf_dict or BERTConfig.from_json_file."
            )
        return cls(**d)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, self.to_json_string())

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BERTConfig:
        """Read a config written by bertkit, HF (config.json) or Google (bert_config.json).

        Every problem with the file's content is a ``ValueError`` that starts with the
        file's path: not UTF-8 JSON, not a JSON object, a key of the wrong type (named as the
        file spells it, e.g. ``hidden_dropout_prob must be a number, got the string '0.1'``)
        or an invalid value. A missing file is ``FileNotFoundError``.
        """
        if os.path.isdir(path):
            raise ValueError(f"{path} is a directory; pass the config.json (or bert_config.json) file inside it.")
        from bertkit.io import read_json_object

        d = read_json_object(path, "a BERT config (JSON object of config fields, {\"hidden_size\": 768, ...})")
        try:
            return cls.from_hf_dict(d)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    # ------------------------------------------------------------------ HF dialect
    def to_hf_dict(self, architecture: str | None = None) -> dict[str, Any]:
        """An HF ``config.json`` dict (loads in HF transformers' config class of ``model_type``: ``BertConfig``,
        ``RobertaConfig``...).

        ``architecture`` is BERT's HF class name (a bertkit class's ``hf_architecture``); it is written in
        this config's model type (:meth:`hf_architecture_name`). The family's own keys are written under its
        HF names (:attr:`Family.hf_config_keys`, :attr:`Family.hf_constants`). Raises ``ValueError`` for options the
        family's HF classes lack (``embedding_layer_norm`` or ``attention_bias`` set to False, a value of
        :attr:`Family.fixed_fields` changed, a :data:`FAMILY_FIELDS` option of another family).
        """
        return _config_hf.to_hf_dict(self, architecture)

    @classmethod
    def from_hf_dict(cls, d: Mapping[str, Any]) -> BERTConfig:
        """Build from an HF config.json, a Google bert_config.json, or bertkit's own dict.

        Keys that only matter to other libraries (``architectures``, ``transformers_version``,
        Google's ``pooler_*``...) are ignored and ``null`` values keep the default; an
        architecture bertkit does not implement (``position_embedding_type`` other than
        ``"absolute"``) is an error. A value of the wrong type is a ``ValueError`` naming the
        key as ``d`` spells it (``tie_word_embeddings``, not our ``tie_word_embedding``).

        ``model_type`` picks the family (:data:`FAMILIES`; absent: BERT) and is kept when it is not
        the family's own name (``"xlm-roberta"``, ``"camembert"``); an unknown one is an error. A
        family's HF names of special ids (RoBERTa's ``bos_token_id`` / ``eos_token_id``) fill
        ``cls_token_id`` / ``sep_token_id`` unless those are given. A family's own key names
        (:attr:`Family.hf_config_keys`: DistilBERT's ``dim``, ``n_layers``...) are read as the fields they
        hold; two keys giving one field different values, and a value of :attr:`Family.hf_constants` bertkit
        does not implement, are errors naming the keys. ELECTRA's ``embedding_size`` equal to ``hidden_size``
        is read as None (the same model).
        """
        _require_mapping("BERTConfig.from_hf_dict", d)
        return _config_hf.from_hf_dict(cls, d)

    def to_google_dict(self) -> dict[str, Any]:
        """Google's ``bert_config.json`` (the keys its TensorFlow code reads); BERT only (``ValueError`` otherwise)."""
        if self.family != "bert":
            raise ValueError(f"Google's bert_config.json describes BERT; this config is family {self.family!r} "
                             "(save it with save_pretrained as an HF checkpoint instead).")
        keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
                "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
                "num_hidden_layers", "type_vocab_size", "vocab_size")
        d = self.to_dict()
        return {k: d[k] for k in keys}

    # ------------------------------------------------------------------ helpers
    def activation_name(self) -> str:
        """``hidden_act`` as a name; raises if it is a callable with no known name."""
        act = self.hidden_act
        if isinstance(act, str):
            return act
        name = getattr(act, "__name__", "")
        module = getattr(act, "__module__", "") or ""
        if name in ACTIVATIONS and (module.startswith("torch") or module == ""):
            return name
        raise ValueError(
            f"BERTConfig.hidden_act is the callable {act!r}, which cannot be written to a config "
            f"file; use one of the names {ACTIVATIONS} to save this config."
        )


def bert_architecture_name(architecture: str) -> str:
    """The BERT HF class name (bertkit's ``hf_architecture``) of any family's HF class name, the inverse of
    :meth:`BERTConfig.hf_architecture_name`: ``"XLMRobertaForMaskedLM"`` -> ``"BertForMaskedLM"``,
    ``"RobertaForCausalLM"`` -> ``"BertLMHeadModel"``. Other names pass unchanged."""
    prefixes = sorted(((p, f) for f in FAMILIES.values() for p in f.class_prefixes), key=lambda pf: -len(pf[0]))
    for prefix, family in prefixes:
        if architecture.startswith(prefix) and architecture[len(prefix):len(prefix) + 1].isupper():
            rest = architecture[len(prefix):]
            if rest == family.causal_lm_class:
                rest = FAMILIES["bert"].causal_lm_class
            return "Bert" + rest
    return architecture


def _require_mapping(where: str, d: Any) -> None:
    if not isinstance(d, Mapping):
        raise TypeError(f"{where} takes a dict of config fields ({{'hidden_size': 768, ...}}), got "
                        f"{type(d).__name__}.")


def _largest_divisor_at_most(n: int, k: int) -> int:
    return max(d for d in range(1, k + 1) if n % d == 0)
