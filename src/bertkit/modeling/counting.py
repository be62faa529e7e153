"""Parameter counts from a config alone: no model is built, so a config of any size is counted at once.

:func:`count_parameters` is a formula over the config's fields (sizes, biases, the embedding LayerNorm,
cross-attention, weight tying); tests check it equal to ``sum(p.numel())`` of built models, for the
backbone and every head.
"""

from __future__ import annotations

from bertkit.config import BERTConfig, RopeLayer

#: HF architecture name -> whether the model builds the backbone's pooler (the bare backbone: where its family has one;
#: a first-token classifier without pooler, RoBERTa's and ELECTRA's, has as many parameters as the pooler)
POOLED = {
    "BertModel": True, "BertForPreTraining": True, "BertForMaskedLM": False, "BertLMHeadModel": False,
    "BertForNextSentencePrediction": True, "BertForSequenceClassification": True, "BertForMultipleChoice": True,
    "BertForTokenClassification": False, "BertForQuestionAnswering": False, "ElectraForPreTraining": False,
}


def count_parameters(config: BERTConfig, architecture: str = "BertModel") -> int:
    """The number of unique parameters (tied weights once) of ``architecture`` (a :data:`POOLED` key, as
    ``config.json``'s ``architectures`` names it) built from ``config``; ValueError for an unknown one."""
    if architecture not in POOLED:
        raise ValueError(f"architecture {architecture!r} is not one bertkit counts; known: {', '.join(POOLED)}.")
    spec = config.family_spec  # the bare backbone: the family's pooler; a shared-head family's heads: none
    pooler = POOLED[architecture] and not spec.shared_head and (architecture != "BertModel" or spec.pooler)
    return backbone_parameters(config, pooler=pooler) + head_parameters(config, architecture)


def backbone_parameters(config: BERTConfig, pooler: bool | None = None) -> int:
    """Embeddings (``embedding_width`` wide, with their projection to H where narrower) + ``num_hidden_layers``
    layers (+ the pooler's dense layer when ``pooler``; None: where the family's bare backbone has one), and
    MPNet's relative position bias table (``relative_attention_num_buckets`` x heads)."""
    h, e = config.hidden_size, config.embedding_width
    spec = config.family_spec
    if spec.layer == "deberta":  # no pooler in the bare backbone; the classifiers' ContextPooler is BERT's pooler
        return _deberta_backbone(config) + (h * h + h if pooler else 0)
    tables = config.vocab_size + (config.max_position_embeddings if spec.position_embeddings else 0) \
        + (config.type_vocab_size if spec.token_types else 0)
    embeddings = tables * e
    embeddings += _layer_norm(config, e) if config.embedding_layer_norm else 0
    embeddings += e * h + h if e != h else 0  # embeddings_project
    shared = config.relative_attention_num_buckets * config.num_attention_heads if spec.layer == "mpnet" else 0
    shared += h if spec.layer == "llama" else 0  # the final RMSNorm
    pooler = spec.pooler if pooler is None else pooler
    return embeddings + config.num_hidden_layers * layer_parameters(config) + shared + (h * h + h if pooler else 0)


def _deberta_backbone(config: BERTConfig) -> int:
    """DeBERTa-v2's backbone (no pooler): its embeddings (positions with ``position_biased_input``, token types where
    ``type_vocab_size > 0``, ``embed_proj`` without bias, LayerNorm over H), the layers with their separate position
    projections, ``rel_embeddings`` (+ LayerNorm) and the first layer's convolution."""
    h, e = config.hidden_size, config.embedding_width
    tables = config.vocab_size + (config.max_position_embeddings if config.position_biased_input else 0) \
        + config.type_vocab_size
    embeddings = tables * e + (e * h if e != h else 0) + 2 * h
    kinds = config.pos_att_type or []
    separate = config.relative_attention and not config.share_att_key
    projections = (h * h + h) * sum(separate and kind in kinds for kind in ("c2p", "p2c"))
    relative = 0
    if config.relative_attention:
        span = config.position_buckets if config.position_buckets > 0 else (
            config.max_relative_positions if config.max_relative_positions >= 1 else config.max_position_embeddings)
        relative = 2 * span * h
    relative += 2 * h if "layer_norm" in config.norm_rel_ebd.lower() else 0
    k = config.conv_kernel_size
    conv = h * (h // config.conv_groups) * k + h + 2 * h if k else 0
    layers = config.num_hidden_layers * (layer_parameters(config) + projections)
    return embeddings + layers + relative + conv


def _layer_norm(config: BERTConfig, width: int | None = None) -> int:
    """A LayerNorm over ``width`` features (default H): weight, and bias unless ``norm_bias=False``."""
    return (width or config.hidden_size) * (2 if config.norm_bias else 1)


def layer_parameters(config: BERTConfig) -> int:
    """One encoder layer: self-attention (and cross-attention with ``add_cross_attention``), feed-forward.

    A ModernBERT layer: ``attn_norm``, fused ``Wqkv`` and ``Wo``, ``mlp_norm``, GeGLU ``Wi`` (to twice the
    intermediate size) and ``Wo``. Its first layer has no ``attn_norm`` and the encoder ends with ``final_norm``,
    one LayerNorm each: counting one per layer counts both. A Llama-style layer (EuroBERT): ``q_proj``, ``o_proj``,
    ``k_proj`` and ``v_proj`` of ``key_value_heads``, the gated MLP, two RMSNorms (the encoder's final RMSNorm is
    counted with the backbone).
    """
    h, i = config.hidden_size, config.intermediate_size
    if config.family_spec.layer == "llama":  # q, o; k, v of the key/value heads; gated MLP; two RMSNorms
        kv = config.key_value_heads * config.head_dim
        attention = 2 * h * h + 2 * h * kv + (2 * h + 2 * kv if config.attention_bias else 0)
        swiglu = RopeLayer(mlp_input_bias=config.mlp_bias, mlp_output_bias=config.mlp_bias)
        return attention + _feed_forward(h, i, swiglu) + 2 * h
    if config.family_spec.layer == "modernbert":
        attention = 4 * h * h + (4 * h if config.attention_bias else 0)
        feed_forward = 3 * h * i + (2 * i + h if config.mlp_bias else 0)
        return attention + feed_forward + 2 * _layer_norm(config)
    if config.family_spec.layer == "rope":  # q/k/v/o, the gated (or plain) MLP, two LayerNorms
        feed_forward = _feed_forward(h, i, config.family_spec.rope_layer)
        return 4 * h * h + (4 * h if config.attention_bias else 0) + feed_forward + 2 * _layer_norm(config)
    attention = 4 * h * h + (4 * h if config.attention_bias else 0) + 2 * h  # q, k, v, output; its LayerNorm
    feed_forward = (h * i + i) + (i * h + h) + 2 * h  # intermediate, output, LayerNorm
    return attention * (2 if config.add_cross_attention else 1) + feed_forward



def _feed_forward(h: int, i: int, spec: RopeLayer) -> int:
    """The parameters of :class:`~bertkit.modeling.rotary_layer.RopeMLP` with switches ``spec``."""
    inputs = 2 if spec.gated_mlp else 1
    return (inputs + 1) * h * i + (inputs * i if spec.mlp_input_bias else 0) + (h if spec.mlp_output_bias else 0)


def head_parameters(config: BERTConfig, architecture: str) -> int:
    """The parameters outside the backbone: the vocabulary head (its decoder weight only when untied),
    NSP's two-way classifier, a classifier of ``num_labels`` (one score per choice for multiple choice),
    QA's start/end scorer, ELECTRA's discriminator head."""
    h, v, e = config.hidden_size, config.vocab_size, config.embedding_width
    transform = h * e + (e if config.classifier_bias else 0) + _layer_norm(config, e)
    lm = transform + v + (0 if config.tie_word_embedding else v * e)  # transform, bias, decoder
    if not config.family_spec.mlm_transform:  # EuroBERT's lm_head: the decoder alone, biased with mlp_bias
        lm = (v if config.mlp_bias else 0) + (0 if config.tie_word_embedding else v * e)
    heads = {
        "BertModel": 0, "BertForPreTraining": lm + 2 * h + 2, "BertForMaskedLM": lm, "BertLMHeadModel": lm,
        "BertForNextSentencePrediction": 2 * h + 2, "BertForSequenceClassification": (h + 1) * config.num_labels,
        "BertForMultipleChoice": h + 1, "BertForTokenClassification": (h + 1) * config.num_labels,
        "BertForQuestionAnswering": 2 * h + 2, "ElectraForPreTraining": h * h + h + h + 1,
    }
    shared_head = config.family_spec.shared_head and architecture in (  # ModernBERT's head before the classifier
        "BertForSequenceClassification", "BertForMultipleChoice", "BertForTokenClassification",
        "BertForQuestionAnswering")
    return heads[architecture] + (transform if shared_head else 0)
