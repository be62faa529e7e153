"""The pieces of a BERT, top to bottom: embeddings, attention, feed-forward, layer, pooler, MLM head.

Module and parameter names are HF transformers' (``embeddings.LayerNorm``,
``attention.self.query``, ``attention.output.dense``, ``intermediate.dense``,
``output.LayerNorm``, ``cls.predictions.transform``...), so an HF or
pytorch_pretrained_bert state dict loads by identity. Post-LN throughout.

Shapes: B batch, L query length, S key length (past + new), H hidden, nh heads, hd head dim, V vocab.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.fast import ACTIVATIONS, Dropout, Linear
from bertkit.modeling.norm import LayerNorm
from bertkit.modeling.unpad import Packing
from bertkit.modeling.vocab_loss import linear_cross_entropy

#: Activation name -> function. "gelu" is the exact erf GELU of Google's checkpoints.
ACT_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


def activation(config: BERTConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function named (or given) by ``config.hidden_act``."""
    act = config.hidden_act
    return act if callable(act) else ACT_FNS[act]


class BERTEmbeddings(nn.Module):
    """word + position + token-type embeddings, then LayerNorm (unless ``embedding_layer_norm=False``) and dropout.

    A family without token types or absolute positions (``Family.token_types`` / ``position_embeddings``)
    has no such table (the attribute is None) and ignores those ids. The tables and the LayerNorm are
    ``config.embedding_width`` wide (ELECTRA's ``embedding_size``; the backbone projects them to H).

    In a family whose positions start after the padding id (RoBERTa), padding tokens sit at position
    ``pad_token_id``, a padding row of ``position_embeddings`` (zero at init, never trained), as in fairseq.
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        width = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        spec = config.family_spec
        position_padding = config.pad_token_id if spec.positions_after_padding else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width,
                                                padding_idx=position_padding) if spec.position_embeddings else None
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width) \
            if spec.token_types and config.type_vocab_size else None  # 0: none (Family.optional_token_types)
        self.LayerNorm = (LayerNorm(width, eps=config.layer_norm_eps, bias=config.norm_bias)
                          if config.embedding_layer_norm else None)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor,
                position_ids: torch.Tensor, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # [B, L, H]
        x = inputs_embeds
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x) if self.LayerNorm is not None else x)


def refuse_decoder_settings(config: BERTConfig) -> None:
    """``ValueError`` naming the first decoder-only setting (``is_decoder``, ``add_cross_attention``,
    ``chunk_size_feed_forward``) of ``config``: the encoder-only layer variants (ModernBERT, rope, Llama) have no
    caches, cross-attention or feed-forward chunking, and neither do their HF classes."""
    unsupported = [name for name in ("is_decoder", "add_cross_attention", "chunk_size_feed_forward")
                   if getattr(config, name)]
    if unsupported:
        raise ValueError(f"BERTConfig.{unsupported[0]}={getattr(config, unsupported[0])!r} is not supported by "
                         f"family {config.family!r}: its layers are encoder layers without caches, "
                         "cross-attention or feed-forward chunking (HF has none either); leave it at its default.")


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """The fixed position table ``[num_positions, dim]`` (float32) of DistilBERT's ``sinusoidal_pos_embds``, as HF
    computes it: angle ``pos / 10000 ** (2 * (j // 2) / dim)`` (in float64), its sine in the even columns ``j`` and
    its cosine in the odd ones."""
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    j = torch.arange(dim, dtype=torch.float64)
    angles = positions / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    return torch.where(j % 2 == 0, angles.sin(), angles.cos()).float()


def default_position_ids(config: BERTConfig, input_ids: torch.Tensor | None,
                         cache_position: torch.Tensor) -> torch.Tensor:
    """Default position ids of tokens at cache slots ``cache_position [L]``: ``[1, L]``, or ``[B, L]`` for a
    family whose positions skip padding (``config.family_spec.positions_after_padding``, RoBERTa).

    There the ``input_ids [B, L]`` that are not ``pad_token_id`` count from ``pad_token_id + 1`` (after the
    cached tokens, assumed free of padding) and padding tokens get ``pad_token_id``; from ``inputs_embeds``
    (no ids) positions are consecutive from ``pad_token_id + 1``. So a left-padded row starts at the same
    position as an unpadded one.
    """
    if not config.family_spec.positions_after_padding:
        return cache_position.unsqueeze(0)
    pad = config.pad_token_id
    if input_ids is None:
        return (cache_position + pad + 1).unsqueeze(0)
    real = (input_ids != pad).long()
    return (real.cumsum(dim=1) + cache_position[:1]) * real + pad  # [B, L]; cache_position[0] = cached tokens


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
           dropout_p: float, *, eager: bool, position_bias: torch.Tensor | None = None,
           scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention of ``q [B, nh, L, hd]`` over ``k, v [B, nh, S, hd]``.

    ``allowed`` is a boolean mask broadcastable to ``[B, nh, L, S]`` (True = attend) with
    at least one True per row, or None. ``position_bias`` (MPNet's relative position bias) is a float
    tensor broadcastable to ``[B, nh, L, S]`` added to the scaled scores before the mask, or None.
    ``scale``: the scores' factor; None: ``1 / sqrt(hd)`` (DeBERTa's is smaller).
    Returns the context ``[B, nh, L, hd]`` and, on the eager path only, the attention probabilities
    ``[B, nh, L, S]`` (before dropout).
    """
    if not eager and not fast.fast_dropout_applies(q, dropout_p, True):  # SDPA's CPU dropout is its math path
        mask = allowed
        if position_bias is not None:  # one float mask: the bias where allowed, the lowest score elsewhere
            bias = position_bias.to(q.dtype)
            mask = bias if allowed is None else torch.where(allowed, bias, torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale), None
    scores = torch.matmul(q, k.transpose(-1, -2))  # [B, nh, L, S]
    scores = scores / math.sqrt(q.size(-1)) if scale is None else scores * scale
    if position_bias is not None:
        scores = scores + position_bias.to(scores.dtype)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)
    context = torch.matmul(fast.dropout(probs, dropout_p) if dropout_p else probs, v)
    return context, probs


class BERTSelfAttention(nn.Module):
    """Multi-head attention projections (``query``/``key``/``value``); self- or cross-attention.

    For self-attention the keys come from ``hidden_states`` and are appended to ``cache``
    (a :class:`~bertkit.modeling.cache.KVCache`) when one is given. For cross-attention
    they come from ``encoder_hidden_states`` and are computed once per cache.
    """

    def __init__(self, config: BERTConfig, layer_idx: int, is_cross_attention: bool = False):
        super().__init__()
        h = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        bias = config.attention_bias
        self.query, self.key, self.value = (Linear(h, h, bias=bias) for _ in range(3))
        self.dropout_p = config.attention_probs_dropout_prob
        self.eager = config.attn_implementation == "eager"
        self.layer_idx = layer_idx
        self.is_cross_attention = is_cross_attention

    #: a prepared kernel of the three projections' concatenated weights, attached by
    #: :func:`bertkit.inference.optimize_for_inference` (bfloat16 on CPU), or None
    fused_packed = None

    def _fused_projections(self, x: torch.Tensor) -> torch.Tensor | None:
        """``[q | k | v]``, ``[..., 3H]``, of ``x [..., H]`` from one product on the concatenated weights (one
        GEMM three times wider, and in backward one pass over ``x`` for the three weight gradients), or None
        where the three modules must run themselves: the fast path off, hooks or replaced modules (adapters
        such as LoRA), prepared per-layer inference kernels without a prepared fused one (``fused_packed``)."""
        projections = (self.query, self.key, self.value)
        if not fast.settings().enabled or fast.tracing() or not all(
                type(m) is Linear and not m._forward_hooks and not m._forward_pre_hooks for m in projections):
            return None
        if any(m.packed is not None for m in projections):
            if self.fused_packed is None or torch.is_autocast_enabled(x.device.type) or (
                    torch.is_grad_enabled() and any(m.weight.requires_grad for m in projections)):
                return None
            return self.fused_packed(x, projections)  # None where it does not apply (another dtype, device)
        weight = torch.cat([m.weight for m in projections])
        bias = None if self.query.bias is None else torch.cat([m.bias for m in projections])
        return fast.linear(x, weight, bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # [B, n, H] -> [B, nh, n, hd]

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None,
                encoder_hidden_states: torch.Tensor | None = None, cache=None,
                cache_position: torch.Tensor | None = None, output_attentions: bool = False,
                queries: torch.Tensor | None = None, packing: Packing | None = None,
                position_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``queries [B, n, H]`` (self-attention only): the positions whose outputs are wanted, attending to
        all of ``hidden_states``; default: every position of ``hidden_states``. ``position_bias`` (float,
        broadcastable to ``[B, nh, n, S]``) is added to the attention scores (:func:`attend`).

        With ``packing`` (unpadded execution, :mod:`bertkit.modeling.unpad`) ``hidden_states`` are the
        packed real tokens ``[N, H]`` and so is the result (``[B, n, H]`` with ``queries``); ``allowed``
        is ignored (the packing's key mask applies).
        """
        if packing is not None:
            return self._packed_forward(hidden_states, packing, queries, position_bias)
        source = hidden_states if queries is None else queries
        b, n, h = source.shape
        fused = None
        if not self.is_cross_attention and queries is None and cache is None:
            fused = self._fused_projections(hidden_states)
        if fused is not None:
            q, k, v = (self._heads(t) for t in fused.chunk(3, dim=-1))
        elif self.is_cross_attention:
            q = self._heads(self.query(source))
            if cache is not None and cache.has_layer(self.layer_idx):
                k, v = cache.get(self.layer_idx)
            else:
                k, v = self._heads(self.key(encoder_hidden_states)), self._heads(self.value(encoder_hidden_states))
                if cache is not None:
                    k, v = cache.update(k, v, self.layer_idx)
        else:
            q = self._heads(self.query(source))
            k, v = self._heads(self.key(hidden_states)), self._heads(self.value(hidden_states))
            if cache is not None:
                k, v = cache.update(k, v, self.layer_idx, cache_position)
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs = attend(q, k, v, allowed, dropout_p, eager=self.eager or output_attentions,
                                position_bias=position_bias)
        return context.transpose(1, 2).reshape(b, n, h), probs  # [B, nh, n, hd] -> [B, n, H]

    def _packed_forward(self, x: torch.Tensor, packing: Packing, queries: torch.Tensor | None,
                        position_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        """Projections on the packed tokens ``x [N, H]``, one masked attention call on ``[B, L]``."""
        fused = self._fused_projections(x) if queries is None else None
        if fused is not None:
            q, k, v = packing.spread(fused).chunk(3, dim=-1)  # [B, L, H] each
        else:
            q = self.query(queries) if queries is not None else packing.spread(self.query(x))  # [B, n, H]
            k, v = packing.spread(self.key(x)), packing.spread(self.value(x))  # [B, L, H]
        dropout_p = self.dropout_p if self.training else 0.0
        context, _ = attend(self._heads(q), self._heads(k), self._heads(v), packing.keys, dropout_p,
                            eager=self.eager, position_bias=position_bias)
        context = context.transpose(1, 2).flatten(2)  # [B, nh, n, hd] -> [B, n, H]
        return (context if queries is not None else packing.pack(context)), None


class _ResidualOutput(nn.Module):
    """dense -> dropout -> residual add -> LayerNorm, projecting ``in_features`` back to H.

    ``dropout``: its probability; None: ``hidden_dropout_prob``."""

    def __init__(self, config: BERTConfig, in_features: int, bias: bool = True, dropout: float | None = None):
        super().__init__()
        self.dense = Linear(in_features, config.hidden_size, bias=bias)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob if dropout is None else dropout)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        out = self.dropout(self.dense(hidden_states))
        if self._sums_in_place(out, residual):
            return self.LayerNorm(out.add_(residual))  # inference: the product's fresh output takes the sum
        return self.LayerNorm(out + residual)

    def _sums_in_place(self, out: torch.Tensor, residual: torch.Tensor) -> bool:
        """Whether ``out`` (the product's output) may take the residual sum in place: no gradient needs it, it is
        the fresh output of bertkit's own dense layer (no hook or replaced module could hand back another
        tensor), of the residual's shape and dtype (autocast's products are narrower: the sum promotes)."""
        return (not (torch.is_grad_enabled() and out.requires_grad) and type(self.dense) is Linear
                and not self.dense._forward_hooks and out.shape == residual.shape and out.dtype == residual.dtype
                and not fast.tracing())


class BERTSelfOutput(_ResidualOutput):
    """The attention block's output (``attention.output``): H -> H, biased unless ``attention_bias=False``; without
    dropout in a family whose attention output has none (``Family.attention_output_dropout``: DistilBERT)."""

    def __init__(self, config: BERTConfig):
        super().__init__(config, config.hidden_size, bias=config.attention_bias,
                         dropout=None if config.family_spec.attention_output_dropout else 0.0)


class BERTAttention(nn.Module):
    """``self`` (the projections and attention) followed by ``output`` (dense + residual + LN)."""

    def __init__(self, config: BERTConfig, layer_idx: int, is_cross_attention: bool = False):
        super().__init__()
        self.self = BERTSelfAttention(config, layer_idx, is_cross_attention)
        self.output = BERTSelfOutput(config)

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, queries: torch.Tensor | None = None,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        context, probs = self.self(hidden_states, allowed, queries=queries, **kwargs)
        return self.output(context, hidden_states if queries is None else queries), probs


class BERTIntermediate(nn.Module):
    """H -> intermediate_size with the configured activation."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config)
        self.fused_act = config.hidden_act if config.hidden_act in ACTIVATIONS else None  # into the product

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.fused_act is not None:
            return self.dense(hidden_states, activation=self.fused_act)
        return self.act(self.dense(hidden_states))


class BERTOutput(_ResidualOutput):
    """The feed-forward block's output (the layer's ``output``): intermediate_size -> H."""

    def __init__(self, config: BERTConfig):
        super().__init__(config, config.intermediate_size)


class BERTLayer(nn.Module):
    """Self-attention, optional cross-attention (decoders), then the feed-forward block.

    With ``config.chunk_size_feed_forward > 0`` the feed-forward block runs on chunks of
    that many positions, trading speed for peak memory; results are identical.
    """

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__()
        self.attention = BERTAttention(config, layer_idx)
        if config.add_cross_attention:
            self.crossattention = BERTAttention(config, layer_idx, is_cross_attention=True)
        self.intermediate = BERTIntermediate(config)
        self.output = BERTOutput(config)
        self.chunk_size = config.chunk_size_feed_forward
        self.layer_idx = layer_idx

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None,
                encoder_hidden_states: torch.Tensor | None = None,
                encoder_allowed: torch.Tensor | None = None, self_cache=None, cross_cache=None,
                cache_position: torch.Tensor | None = None, output_attentions: bool = False,
                query_positions: slice | None = None, packing: Packing | None = None,
                position_bias: torch.Tensor | None = None):
        """Returns ``(hidden_states [B, L, H], self_attn_probs | None, cross_attn_probs | None)``.

        ``query_positions`` computes the layer's output only at those positions (``[B, n, H]``),
        each still attending to every position: the same values as the full layer's at those
        positions, for a fraction of the work (an encoder's last layer when only [CLS] is read).

        ``packing``: ``hidden_states`` are the packed real tokens ``[N, H]`` (unpadded execution) and
        so is the output; ``query_positions`` may then only be ``slice(0, 1)`` (output ``[B, 1, H]``).

        ``position_bias``: a float tensor ``[1|B, nh, L, S]`` added to the self-attention scores, in the padded
        layout even when packed (the MPNet variant's relative position bias); None: none (BERT).
        """
        queries = None
        if query_positions is not None and position_bias is not None and position_bias.shape[-2] != 1:
            position_bias = position_bias[..., query_positions, :]  # the wanted queries' rows
        if packing is not None:
            if query_positions is not None:
                if query_positions != slice(0, 1):
                    raise ValueError("with unpadded execution only query_positions=slice(0, 1) is supported.")
                queries = packing.first_tokens(hidden_states)
            x, _ = self.attention(hidden_states, None, queries=queries, packing=packing,
                                  position_bias=position_bias)
            return self._feed_forward_chunked(x), None, None
        if query_positions is not None:
            queries = hidden_states[:, query_positions]
            if allowed is not None and allowed.shape[-2] != 1:  # per-query rows: keep the wanted ones
                allowed = allowed[..., query_positions, :]
        x, self_probs = self.attention(hidden_states, allowed, queries=queries, cache=self_cache,
                                       cache_position=cache_position, output_attentions=output_attentions,
                                       position_bias=position_bias)
        cross_probs = None
        if encoder_hidden_states is not None or (cross_cache is not None
                                                 and cross_cache.has_layer(self.layer_idx)):
            if not hasattr(self, "crossattention"):
                raise ValueError(
                    "encoder_hidden_states were given but this model has no cross-attention; build it "
                    "with BERTConfig(is_decoder=True, add_cross_attention=True)."
                )
            x, cross_probs = self.crossattention(x, encoder_allowed, encoder_hidden_states=encoder_hidden_states,
                                                 cache=cross_cache, output_attentions=output_attentions)
        return self._feed_forward_chunked(x), self_probs, cross_probs

    def _feed_forward_chunked(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward block, on chunks of ``chunk_size`` positions (dim 1; dim 0 when packed ``[N, H]``)."""
        dim = 1 if x.dim() == 3 else 0
        if self.chunk_size and x.size(dim) > self.chunk_size:
            return torch.cat([self._feed_forward(c) for c in x.split(self.chunk_size, dim=dim)], dim=dim)
        return self._feed_forward(x)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(x), x)


class BERTPooler(nn.Module):
    """tanh(dense(h[:, 0])): the [CLS] representation used by NSP and classifiers.

    The activation is ``pooler_hidden_act``, else the family's ``head_activation`` (tanh for BERT; DistilBERT's
    ``pre_classifier`` is this pooler with relu, ELECTRA's multiple-choice ``sequence_summary`` with gelu); a
    dropout of ``context_pooler_dropout`` before the dense layer where set (DeBERTa's ``ContextPooler``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT_FNS[config.pooler_hidden_act or config.family_spec.head_activation]
        self.dropout = Dropout(config.context_pooler_dropout) if config.context_pooler_dropout else None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        first = hidden_states[:, 0]  # [B, L, H] -> [B, H]
        return self.transform(first if self.dropout is None else self.dropout(first))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """``activation(dense(x))`` on any ``[..., H]``: the pooler on another sentence representation (EuroBERT's
        mean) or on every token (its ``"late"`` classifier)."""
        return self.activation(self.dense(x))


class BERTPredictionHeadTransform(nn.Module):
    """dense -> activation -> LayerNorm, applied before the vocabulary projection: H -> ``config.embedding_width``
    (the word embeddings' width: H, or ELECTRA's ``embedding_size`` in its generator's head); in a ``shared_head``
    family also before the classifiers (ModernBERT's ``head``).

    The activation is ``config.classifier_activation``, else the family's ``mlm_activation``, else
    ``hidden_act``; the dense layer's bias follows ``classifier_bias`` and the LayerNorm's ``norm_bias``.
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_width, bias=config.classifier_bias)
        act = config.classifier_activation or config.family_spec.mlm_activation  # RoBERTa's: the exact GELU
        self.act = ACT_FNS[act] if act is not None else activation(config)
        self.LayerNorm = LayerNorm(config.embedding_width, eps=config.layer_norm_eps, bias=config.norm_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(hidden_states)))


class BERTLMPredictionHead(nn.Module):
    """The MLM head: transform, then ``decoder`` onto the vocabulary plus ``bias``.

    ``decoder.weight`` is tied to the word embeddings when ``config.tie_word_embedding``;
    ``decoder.bias`` is the same parameter as ``bias`` (``cls.predictions.bias`` in checkpoints).
    Works on any leading shape: ``[..., H] -> [..., V]`` (through ``config.embedding_width``).
    A family without the transform (``Family.mlm_transform=False``, EuroBERT's ``lm_head``) has the identity there,
    and a bias only with ``mlp_bias`` (else ``bias`` is None).
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        spec = config.family_spec
        self.transform = BERTPredictionHeadTransform(config) if spec.mlm_transform else nn.Identity()
        has_bias = spec.mlm_transform or config.mlp_bias
        self.decoder = Linear(config.embedding_width, config.vocab_size, bias=has_bias)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if has_bias else None
        self.decoder.bias = self.bias

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))

    def losses(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(losses [N], predictions [N])``: the cross-entropy of the scores of ``hidden_states [N, H]``
        against ``targets [N]`` (valid ids) and their argmax, without keeping the ``[N, V]`` scores."""
        return linear_cross_entropy(self.transform(hidden_states), self.decoder.weight, self.bias, targets)


class BERTOnlyMLMHead(nn.Module):
    def __init__(self, config: BERTConfig):
        super().__init__()
        self.predictions = BERTLMPredictionHead(config)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.predictions(sequence_output)


class BERTOnlyNSPHead(nn.Module):
    def __init__(self, config: BERTConfig):
        super().__init__()
        self.seq_relationship = Linear(config.hidden_size, 2)

    def forward(self, pooled_output: torch.Tensor) -> torch.Tensor:
        return self.seq_relationship(pooled_output)


class BERTPreTrainingHeads(BERTOnlyMLMHead):
    """MLM head (``predictions``) and NSP head (``seq_relationship``) under one ``cls`` module."""

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.seq_relationship = Linear(config.hidden_size, 2)
