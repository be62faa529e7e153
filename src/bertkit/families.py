"""Encoder families as data: a :class:`Family` record per family in :data:`FAMILIES`, and the config fields only
some families read (:data:`FAMILY_FIELDS`). :class:`bertkit.config.BERTConfig` names its family by ``family``; the
modeling and weights code read the record (no second transformer). Imports nothing from torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The rope types bertkit implements (HF's ``rope_parameters["rope_type"]``) -> the keys each one needs beside
#: ``rope_theta`` (:func:`bertkit.modeling.rotary.rope_inverse_frequencies`).
ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (), "linear": ("factor",), "dynamic": ("factor",), "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}

#: bert-base-uncased's special token ids: the defaults wherever the vocabulary holds them.
DEFAULT_SPECIAL_IDS = {"unk_token_id": 100, "cls_token_id": 101, "sep_token_id": 102, "mask_token_id": 103}


@dataclass(frozen=True)
class RopeLayer:
    """The switches of the post-LN rotary layer (the ``"rope"`` variant, :mod:`bertkit.modeling.rotary_layer`)
    that a family's HF classes hard-code (the attention's biases are ``BERTConfig.attention_bias``):

    * ``gated_mlp``: ``mlp.down_proj(act(gate) * up)`` (GTE, NomicBERT); False: the plain ``mlp.fc2(act(mlp.fc1(x)))``
      (Jina v3's XLM-R feed-forward).
    * ``fused_up_gate``: ``up, gate`` are the halves of one ``mlp.up_gate_proj`` (GTE's checkpoints); False: two
      projections ``mlp.up_proj`` and ``mlp.gate_proj`` (NomicBERT's ``fc11`` / ``fc12``).
    * ``mlp_input_bias`` / ``mlp_output_bias``: biases of ``gate_proj`` and ``up_proj`` (or ``fc1``) / of
      ``down_proj`` (or ``fc2``).
    * ``mlp_dropout``: ``hidden_dropout_prob`` on the gated activation before ``down_proj`` (GTE).
    """

    gated_mlp: bool = True
    fused_up_gate: bool = False
    mlp_input_bias: bool = True
    mlp_output_bias: bool = True
    mlp_dropout: bool = False


@dataclass(frozen=True)
class Family:
    """How an encoder family departs from BERT, as data the one engine reads (no second transformer).

    * ``model_types``: the HF ``model_type`` values read as this family, its own name first;
      ``class_prefixes`` gives each one's HF class-name prefix (``XLMRobertaForMaskedLM``).
    * ``positions_after_padding``: fairseq's positions. Position ids count the non-padding tokens
      from ``pad_token_id + 1`` on and padding tokens get ``pad_token_id`` (whose position embedding is
      a padding row), so ``max_position_embeddings`` is the longest input plus ``pad_token_id + 1``
      (RoBERTa: 514 for 512 tokens). Otherwise positions are ``0, 1, ...`` (BERT).
    * ``sequence_head``: ``"pooler"`` (BERT: dropout + ``classifier`` on the pooled output) or
      ``"first_token"`` (RoBERTa: ``classifier.dense`` + tanh + ``classifier.out_proj`` on the first
      token, with dropout before each, and no pooler).
    * ``mlm_activation``: the MLM head transform's activation; None: ``hidden_act`` (RoBERTa's head
      always uses the exact GELU).
    * ``next_sentence``: whether the family pretrains with NSP (has ``BERTForPreTraining`` and
      ``BERTForNextSentencePrediction``).
    * ``special_ids``: defaults of the special token ids left unset, applied when below ``vocab_size``;
      -1 stands for the vocabulary's last id (fairseq appends ``<mask>`` last).
    * ``hf_token_keys``: HF config keys that hold our special ids under another name (RoBERTa's
      ``bos_token_id`` is the ``<s>`` that plays [CLS]'s part, ``eos_token_id`` the ``</s>`` of [SEP]).
    * ``causal_lm_class``: the end of the HF causal-LM class name (``BertLMHeadModel``, ``RobertaForCausalLM``);
      None: the family has no causal LM (``is_decoder`` is refused; MPNet).
    * ``token_types``: whether the embeddings add token-type (segment) embeddings; without them
      ``token_type_ids`` are ignored (DistilBERT, MPNet, ModernBERT have none).
    * ``position_embeddings``: whether the embeddings add absolute position embeddings (ModernBERT rotates
      queries and keys instead).
    * ``layer``: the encoder-layer variant, a key of :data:`bertkit.modeling.variants.LAYER_VARIANTS`
      (``"bert"``: BERT's post-LN layer; a family that differs in structure names its own there).
    * ``pooler``: whether the bare backbone (HF's ``XModel``) has a pooler; the heads that read one build it
      whatever this says (DistilBERT's ``pre_classifier`` and ELECTRA's multiple-choice ``sequence_summary`` are
      BERT's pooler under other names, :mod:`bertkit.weights.tables`), except in a ``shared_head`` family.
    * ``head_activation``: the activation of the first-token dense layer of the sentence heads: the pooler's and
      the ``"first_token"`` classifier's (BERT, RoBERTa: tanh; DistilBERT: relu; ELECTRA: gelu).
    * ``attention_output_dropout``: whether the attention block's output has BERT's dropout before its residual
      sum (DistilBERT's has none).
    * ``discriminator``: whether the family has ELECTRA's replaced-token-detection head
      (:class:`bertkit.modeling.electra.ELECTRAForPreTraining`).
    * ``hf_config_keys``: HF ``config.json`` keys that hold a :class:`BERTConfig` field under another name (or a
      field of :data:`FAMILY_FIELDS`): DistilBERT's ``dim`` is ``hidden_size``, ModernBERT's ``norm_eps``
      ``layer_norm_eps``; a field under its own name (``norm_bias``) is written explicitly, HF's defaults not being
      bertkit's. Read and written; a second key for
      the same field (DistilBERT's old ``tie_weights_``) is only read. A field of :data:`FAMILY_FIELDS` named
      nowhere here has no HF equivalent in this family: off its default, the config cannot be written as HF's.
    * ``hf_constants``: HF config keys whose only value bertkit implements (ELECTRA's ``summary_type="first"``):
      written as such, any other value read is an error naming the key.
    * ``fixed_fields``: fields the family's HF classes hard-code (DistilBERT's LayerNorm eps 1e-12, no decoder):
      a config with another value builds and runs, but cannot be written as an HF checkpoint.
    * ``field_defaults``: values of the :data:`FAMILY_FIELDS` left None, as the family's HF config defaults them
      (DistilBERT's ``seq_classif_dropout`` 0.2).
    * ``hf_sdpa``: whether the family's HF classes take ``attn_implementation="sdpa"``; where not (MPNet), the
      key is left out of the HF config, which HF would refuse to load.
    * ``shared_head``: the classification heads (sequence, token, multiple choice, QA) read the encoder's output
      through ``head``, a transform like the MLM head's (dense, ``classifier_activation``, LayerNorm), and the
      sentence representation is ``head`` on the sequence pooled by ``classifier_pooling`` (ModernBERT: HF's
      ``head``, one module name that its masked LM and classifiers share).
    * ``rotary``: attention rotates queries and keys (RoPE): global layers with ``global_rope_theta`` every
      ``global_attn_every_n_layers`` layers, sliding-window layers with ``local_rope_theta`` between them
      (HF's ``rope_parameters`` and ``layer_types``).
    * ``optional_token_types``: ``type_vocab_size`` 0 is allowed and means no token-type table (HF's DeBERTa-v2:
      its released checkpoints have none); token type ids are then ignored.
    * ``rope``: attention rotates queries and keys with one rope for every layer (GTE, NomicBERT, Jina v3,
      EuroBERT): ``rope_theta`` and ``rope_scaling``, read from and written to HF's flat ``rope_parameters``.
    * ``mlm_transform``: the MLM head transforms the hidden states (dense, activation, LayerNorm) before its decoder;
      without it (EuroBERT's ``lm_head``) the decoder reads the encoder's output, biased only with ``mlp_bias``.
    * ``classifier_poolings``: the ``classifier_pooling`` values the family's sequence classifier takes (``"late"``:
      EuroBERT's classifier on every token, its logits averaged over the real tokens).
    * ``hf_values``: field -> {our value: the family's HF value} where HF spells a value otherwise (EuroBERT's
      ``classifier_pooling`` ``"bos"`` is our ``"cls"``); written so, read back.
    * ``rope_layer``: the switches of the ``"rope"`` layer variant (:class:`RopeLayer`), for a family whose
      ``layer`` is ``"rope"``.
    * ``hf_defaults``: our fields' values when an HF config of this family leaves a key out (its HF config
      class's defaults, where they differ from :class:`BERTConfig`'s); also the family's base preset.

    The state-dict names of each family's HF checkpoints are in :mod:`bertkit.weights.tables`.
    """

    name: str
    model_types: tuple[str, ...]
    class_prefixes: tuple[str, ...]
    positions_after_padding: bool = False
    sequence_head: str = "pooler"
    mlm_activation: str | None = None
    next_sentence: bool = True
    special_ids: Mapping[str, int] = field(default_factory=dict)
    hf_token_keys: Mapping[str, str] = field(default_factory=dict)
    causal_lm_class: str | None = "ForCausalLM"
    token_types: bool = True
    position_embeddings: bool = True
    layer: str = "bert"
    pooler: bool = True
    head_activation: str = "tanh"
    attention_output_dropout: bool = True
    discriminator: bool = False
    hf_config_keys: Mapping[str, str] = field(default_factory=dict)
    hf_constants: Mapping[str, Any] = field(default_factory=dict)
    fixed_fields: Mapping[str, Any] = field(default_factory=dict)
    field_defaults: Mapping[str, Any] = field(default_factory=dict)
    hf_sdpa: bool = True
    shared_head: bool = False
    rotary: bool = False
    optional_token_types: bool = False
    rope: bool = False
    mlm_transform: bool = True
    classifier_poolings: tuple[str, ...] = ("cls", "mean")
    hf_values: Mapping[str, Mapping[Any, Any]] = field(default_factory=dict)
    rope_layer: RopeLayer | None = None
    hf_defaults: Mapping[str, Any] = field(default_factory=dict)


#: family name -> :class:`Family`. RoBERTa, XLM-RoBERTa and CamemBERT share one architecture and differ in
#: vocabulary (and HF class names) only.
FAMILIES: dict[str, Family] = {
    "bert": Family("bert", ("bert",), ("Bert",), special_ids={"pad_token_id": 0, **DEFAULT_SPECIAL_IDS},
                   causal_lm_class="LMHeadModel"),
    "roberta": Family("roberta", ("roberta", "xlm-roberta", "camembert"), ("Roberta", "XLMRoberta", "Camembert"),
                      positions_after_padding=True, sequence_head="first_token", mlm_activation="gelu",
                      next_sentence=False,
                      special_ids={"pad_token_id": 1, "cls_token_id": 0, "sep_token_id": 2, "unk_token_id": 3,
                                   "mask_token_id": -1},
                      hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"}),
    # RoBERTa's embeddings without token types and its heads, plus a relative position bias in every layer's
    # attention (the "mpnet" layer variant); HF's MPNetForMultipleChoice pools as BERT does (the table's default)
    "mpnet": Family("mpnet", ("mpnet",), ("MPNet",), positions_after_padding=True, sequence_head="first_token",
                    mlm_activation="gelu", next_sentence=False,
                    special_ids={"pad_token_id": 1, "cls_token_id": 0, "sep_token_id": 2, "unk_token_id": 3,
                                 "mask_token_id": -1},
                    hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"},
                    causal_lm_class=None, token_types=False, layer="mpnet",
                    hf_config_keys={"relative_attention_num_buckets": "relative_attention_num_buckets"},
                    hf_sdpa=False),
    # DistilBERT: BERT's layer under other names, without token types, pooler or the attention output's dropout;
    # its sentence heads are BERT's pooler (pre_classifier, relu) + dropout + classifier
    "distilbert": Family("distilbert", ("distilbert",), ("DistilBert",), next_sentence=False,
                         special_ids={"pad_token_id": 0, **DEFAULT_SPECIAL_IDS}, token_types=False, pooler=False,
                         head_activation="relu", attention_output_dropout=False,
                         hf_config_keys={"dim": "hidden_size", "n_layers": "num_hidden_layers",
                                         "n_heads": "num_attention_heads", "hidden_dim": "intermediate_size",
                                         "activation": "hidden_act", "dropout": "hidden_dropout_prob",
                                         "attention_dropout": "attention_probs_dropout_prob",
                                         "seq_classif_dropout": "pooler_dropout", "qa_dropout": "qa_dropout",
                                         "sinusoidal_pos_embds": "sinusoidal_pos_embds",
                                         "tie_weights_": "tie_word_embedding"},
                         fixed_fields={"layer_norm_eps": 1e-12, "is_decoder": False, "add_cross_attention": False},
                         field_defaults={"pooler_dropout": 0.2, "qa_dropout": 0.1}),
    # ELECTRA: BERT with embeddings of width embedding_size (projected to hidden_size), no pooler, a gelu
    # first-token classifier, the generator's MLM head (to embedding_size) and the discriminator's head
    "electra": Family("electra", ("electra",), ("Electra",), next_sentence=False,
                      special_ids={"pad_token_id": 0, **DEFAULT_SPECIAL_IDS}, sequence_head="first_token",
                      mlm_activation="gelu", pooler=False, head_activation="gelu", discriminator=True,
                      hf_config_keys={"embedding_size": "embedding_size", "summary_last_dropout": "pooler_dropout"},
                      hf_constants={"summary_type": "first", "summary_use_proj": True, "summary_activation": "gelu"},
                      field_defaults={"pooler_dropout": 0.1}),
    "modernbert": Family(
        "modernbert", ("modernbert",), ("ModernBert",), sequence_head="pooler", next_sentence=False,
        special_ids={"pad_token_id": 50283, "cls_token_id": 50281, "sep_token_id": 50282, "unk_token_id": 50280,
                     "mask_token_id": 50284},
        hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"},
        token_types=False, position_embeddings=False, layer="modernbert", pooler=False, shared_head=True,
        rotary=True,
        hf_config_keys={"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps",
                        "embedding_dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob",
                        **{name: name for name in (
                            "attention_bias", "classifier_dropout", "norm_bias", "mlp_bias", "mlp_dropout",
                            "classifier_bias", "classifier_activation", "classifier_pooling",
                            "global_attn_every_n_layers", "local_attention", "global_rope_theta", "local_rope_theta")}},
        hf_defaults=dict(vocab_size=50368, intermediate_size=1152, num_hidden_layers=22, max_position_embeddings=8192,
                         layer_norm_eps=1e-5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         classifier_dropout=0.0, attention_bias=False, norm_bias=False, mlp_bias=False,
                         classifier_bias=False, classifier_activation="gelu", global_attn_every_n_layers=3)),
    # DeBERTa-v2/v3 and mDeBERTa: BERT's post-LN layer with disentangled attention (content-to-position and
    # position-to-content terms over relative positions, the "deberta" layer variant and its own embeddings), no
    # pooler in the bare backbone, HF's ContextPooler (the pooler with pooler_hidden_act) before its classifiers
    "deberta-v2": Family(
        "deberta-v2", ("deberta-v2",), ("DebertaV2",), next_sentence=False,
        special_ids={"pad_token_id": 0, "cls_token_id": 1, "sep_token_id": 2, "unk_token_id": 3,
                     "mask_token_id": 128000},
        causal_lm_class=None, layer="deberta", pooler=False, head_activation="gelu", hf_sdpa=False,
        optional_token_types=True,
        hf_config_keys={"cls_dropout": "pooler_dropout", "pooler_dropout": "context_pooler_dropout",
                        **{name: name for name in (
                            "embedding_size", "pooler_hidden_act", "relative_attention", "max_relative_positions",
                            "position_buckets", "pos_att_type", "share_att_key", "norm_rel_ebd",
                            "position_biased_input", "conv_kernel_size", "conv_groups", "conv_act", "legacy")}},
        fixed_fields={"is_decoder": False, "add_cross_attention": False},
        field_defaults={"pooler_hidden_act": "gelu"},
        hf_defaults=dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
                         intermediate_size=6144, type_vocab_size=0, layer_norm_eps=1e-7)),
    # EuroBERT: a Llama-style pre-norm encoder (the "llama" layer variant: RMSNorm, grouped-query attention with
    # RoPE, SwiGLU), embeddings without positions, token types or norm; its sequence classifier is BERT's pooler
    # (HF's top-level dense, with gelu) on the pooled sequence and classifier, its masked LM one lm_head Linear
    "eurobert": Family(
        "eurobert", ("eurobert",), ("EuroBert",), next_sentence=False, causal_lm_class=None,
        special_ids={"pad_token_id": 128001, "cls_token_id": 128000, "sep_token_id": 128001, "mask_token_id": 128002},
        hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"},
        token_types=False, position_embeddings=False, layer="llama", pooler=False, head_activation="gelu",
        attention_output_dropout=False, rope=True, mlm_transform=False, classifier_poolings=("cls", "mean", "late"),
        hf_values={"classifier_pooling": {"cls": "bos"}},
        hf_config_keys={"rms_norm_eps": "layer_norm_eps", "attention_dropout": "attention_probs_dropout_prob",
                        **{name: name for name in ("attention_bias", "mlp_bias", "num_key_value_heads",
                                                   "classifier_pooling")}},
        fixed_fields={"embedding_layer_norm": False, "hidden_dropout_prob": 0.0, "classifier_dropout": None,
                      "is_decoder": False, "add_cross_attention": False},
        hf_defaults=dict(vocab_size=128256, hidden_act="silu", max_position_embeddings=8192, layer_norm_eps=1e-5,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embedding=False,
                         embedding_layer_norm=False, attention_bias=False, mlp_bias=False,
                         classifier_pooling="late")),
    # GTE (gte-*-v1.5, gte-multilingual): BERT's embeddings without positions (token types optional), post-LN
    # rotary layers with a gated MLP (biased down_proj only; dropout on the gated activation), XLM-R's MLM head,
    # BERT's pooler + classifier; the bare GteModel has no pooler
    "gte": Family(
        "gte", ("gte",), ("Gte",), mlm_activation="gelu", next_sentence=False, special_ids={"pad_token_id": 1},
        hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"}, causal_lm_class=None,
        position_embeddings=False, layer="rope", pooler=False, rope=True,
        rope_layer=RopeLayer(gated_mlp=True, fused_up_gate=True, mlp_input_bias=False, mlp_output_bias=True,
                             mlp_dropout=True),
        optional_token_types=True,
        hf_defaults=dict(vocab_size=250048, attention_probs_dropout_prob=0.0, max_position_embeddings=8192,
                         type_vocab_size=1, pad_token_id=1, rope_theta=160_000.0)),
    # NomicBERT (nomic-embed-text v1/v1.5): GTE's layer without any bias in attention or MLP and no MLP dropout,
    # token types, BERT's MLM head (its transform's activation hidden_act, LayerNorm HF-named layer_norm)
    "nomic_bert": Family(
        "nomic_bert", ("nomic_bert",), ("NomicBert",), next_sentence=False,
        special_ids={"pad_token_id": 0, **DEFAULT_SPECIAL_IDS}, causal_lm_class=None, position_embeddings=False,
        layer="rope", pooler=False, rope=True,
        rope_layer=RopeLayer(gated_mlp=True, mlp_input_bias=False, mlp_output_bias=False, mlp_dropout=False),
        fixed_fields={"attention_bias": False},
        hf_defaults=dict(vocab_size=30528, hidden_act="silu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         max_position_embeddings=2048, attention_bias=False, rope_theta=1000.0)),
    # Jina embeddings v3 (HF's port of jina-embeddings-v3): XLM-R's embeddings without position embeddings, its
    # first-token classifier and MLM head, and the post-LN rotary layer with XLM-R's plain GELU MLP and q/k/v/o
    # biases; rotary positions 0, 1, ... (not RoBERTa's after the padding). The released checkpoint's task LoRA
    # adapters are merged at load (bertkit.weights.task_adapters), not part of the config.
    "jina_embeddings_v3": Family(
        "jina_embeddings_v3", ("jina_embeddings_v3",), ("JinaEmbeddingsV3",), sequence_head="first_token",
        mlm_activation="gelu", next_sentence=False,
        special_ids={"pad_token_id": 1, "cls_token_id": 0, "sep_token_id": 2, "unk_token_id": 3, "mask_token_id": -1},
        hf_token_keys={"bos_token_id": "cls_token_id", "eos_token_id": "sep_token_id"}, causal_lm_class=None,
        position_embeddings=False, layer="rope", rope=True, rope_layer=RopeLayer(gated_mlp=False),
        hf_defaults=dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                         intermediate_size=4096, max_position_embeddings=8194, type_vocab_size=1, layer_norm_eps=1e-5,
                         pad_token_id=1, rope_theta=20_000.0)),
}

#: Fields only some families use, and their defaults. At the default they change nothing (BERT's architecture) and are
#: left out of ``to_dict`` (so BERT configs' dicts are unchanged) and out of ``to_hf_dict`` where the family's HF
#: config has no key for them.
FAMILY_FIELDS: dict[str, Any] = {
    "embedding_size": None, "sinusoidal_pos_embds": False, "pooler_dropout": None, "qa_dropout": None,  # DistilBERT,
    "relative_attention_num_buckets": 32,  # MPNet                                                      # ELECTRA
    "norm_bias": True, "mlp_bias": True, "mlp_dropout": 0.0, "classifier_bias": True,  # ModernBERT
    "classifier_activation": None, "classifier_pooling": "cls", "global_attn_every_n_layers": 1,
    "local_attention": 128, "global_rope_theta": 160_000.0, "local_rope_theta": 10_000.0,
    "pooler_hidden_act": None, "context_pooler_dropout": 0.0, "relative_attention": False,  # DeBERTa-v2
    "max_relative_positions": -1, "position_buckets": -1, "pos_att_type": None, "share_att_key": False,
    "norm_rel_ebd": "none", "position_biased_input": True, "conv_kernel_size": 0, "conv_groups": 1,
    "conv_act": "tanh", "legacy": True,
    "rope_theta": 10_000.0, "rope_scaling": None,  # one rope for every layer (GTE, NomicBERT, Jina v3, EuroBERT)
    "num_key_value_heads": None,  # EuroBERT (grouped-query attention; None: num_attention_heads)
}

#: HF model_type -> family name
_FAMILY_OF_MODEL_TYPE = {model_type: f.name for f in FAMILIES.values() for model_type in f.model_types}
