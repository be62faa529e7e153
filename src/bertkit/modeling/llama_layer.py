"""The pre-norm Llama-style encoder layer, as the layer variant ``"llama"`` (:mod:`bertkit.modeling.variants`):
EuroBERT's (HF transformers' ``EuroBertModel``, whose parameter names are kept inside a layer).

What differs from BERT's layer:

* pre-norm with RMSNorm (:class:`~bertkit.modeling.norm.RMSNorm`, eps ``layer_norm_eps``):
  ``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``; the encoder ends with
  ``final_norm`` (HF's ``model.norm``); no dropout but the attention probabilities' (HF has none);
* separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` (biased only with ``attention_bias``), with grouped-query
  attention: ``num_key_value_heads`` key/value heads (None: one per query head), query head ``j`` reading key/value
  head ``j // (num_attention_heads / num_key_value_heads)``;
* rotary position embeddings on queries and keys (:mod:`bertkit.modeling.rotary`: ``rope_theta``,
  ``rope_scaling``), no absolute position table;
* a SwiGLU feed-forward block, the rope variant's :class:`~bertkit.modeling.rotary_layer.RopeMLP`:
  ``down_proj(act(gate_proj(x)) * up_proj(x))``, ``act`` = ``hidden_act`` (silu), biased only with ``mlp_bias``.

The context is the rope variant's :class:`~bertkit.modeling.rotary_layer.RopeContext` (``encoder.rotary``, no
parameters): the cos/sin tables once per forward at the batch's position ids (``0 .. L-1`` whatever the padding, as
HF's). Attention itself is :func:`bertkit.modeling.layers.attend` (SDPA or eager, boolean masks).

Unpadded execution (:mod:`bertkit.modeling.unpad`) is supported: the norms, projections and the feed-forward block
run on the packed real tokens ``[N, H]``; attention spreads queries, keys and values to ``[B, L]`` (where the rotary
tables and the mask are laid out) for one masked call and packs its output again.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import BERTConfig, RopeLayer
from bertkit.modeling.fast import Linear
from bertkit.modeling.layers import attend, refuse_decoder_settings
from bertkit.modeling.norm import RMSNorm
from bertkit.modeling.rotary import rotate
from bertkit.modeling.rotary_layer import RopeMLP
from bertkit.modeling.unpad import Packing, query_rows


def rms_norm(config: BERTConfig) -> RMSNorm:
    """An RMSNorm of ``hidden_size`` with ``layer_norm_eps`` (HF's ``rms_norm_eps``)."""
    return RMSNorm(config.hidden_size, eps=config.layer_norm_eps)


def final_norm(config: BERTConfig) -> RMSNorm:
    """``encoder.final_norm``: the RMSNorm after the last layer (HF's ``model.norm``)."""
    return rms_norm(config)


class LlamaAttention(nn.Module):
    """``q_proj`` / ``k_proj`` / ``v_proj`` -> rotary on queries and keys -> grouped-query attention -> ``o_proj``
    (HF's ``self_attn``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        h, hd = config.hidden_size, config.head_dim
        self.num_heads, self.head_dim = config.num_attention_heads, hd
        self.num_kv_heads = config.key_value_heads
        bias = config.attention_bias
        self.q_proj = Linear(h, self.num_heads * hd, bias=bias)
        self.k_proj = Linear(h, self.num_kv_heads * hd, bias=bias)
        self.v_proj = Linear(h, self.num_kv_heads * hd, bias=bias)
        self.o_proj = Linear(self.num_heads * hd, h, bias=bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.eager = config.attn_implementation == "eager"

    def _heads(self, x: torch.Tensor, heads: int, packing: Packing | None) -> torch.Tensor:
        """``[B, L, heads * hd]`` (packed: ``[N, ...]``, spread to ``[B, L, ...]``) -> ``[B, heads, L, hd]``."""
        x = x if packing is None else packing.spread(x)
        b, length = x.shape[:2]
        return x.view(b, length, heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, *,
                query_positions: slice | None = None, output_attentions: bool = False,
                packing: Packing | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x [B, L, H]`` (packed: ``[N, H]``) -> the same layout (``[B, n, H]`` at ``query_positions``: ``allowed``
        already cut to those rows) and the probabilities when eager."""
        q = rotate(self._heads(self.q_proj(x), self.num_heads, packing), cos, sin)
        k = rotate(self._heads(self.k_proj(x), self.num_kv_heads, packing), cos, sin)
        v = self._heads(self.v_proj(x), self.num_kv_heads, packing)
        if self.num_kv_heads != self.num_heads:  # each key/value head serves a group of consecutive query heads
            groups = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if query_positions is not None:
            q = q[:, :, query_positions]
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs = attend(q, k, v, allowed, dropout_p, eager=self.eager or output_attentions)
        b = context.shape[0]
        context = context.transpose(1, 2).reshape(b, -1, self.num_heads * self.head_dim)  # [B, L|n, nh * hd]
        if packing is not None and query_positions is None:
            context = packing.pack(context)
        return self.o_proj(context), probs


class LlamaLayer(nn.Module):
    """One pre-norm layer (``encoder.layer.{i}``; HF's ``model.layers.{i}``)."""

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__()
        refuse_decoder_settings(config)
        self.input_layernorm = rms_norm(config)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = rms_norm(config)
        # SwiGLU: the rope variant's gated block, unfused, biased with mlp_bias, no dropout
        self.mlp = RopeMLP(config, RopeLayer(mlp_input_bias=config.mlp_bias, mlp_output_bias=config.mlp_bias))
        self.layer_idx = layer_idx

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, *, rotary: tuple,
                output_attentions: bool = False, query_positions: slice | None = None,
                packing: Packing | None = None, self_cache=None, **_):
        """Returns ``(hidden_states [B, L, H], attention probabilities | None, None)``.

        ``allowed`` is the padding mask, ``rotary`` the context's ``(cos, sin)``. ``query_positions``: compute the
        output at those positions only (``[B, n, H]``), each still attending to every key (a classifier that reads
        the first token). ``packing``: ``hidden_states`` are the packed real tokens ``[N, H]`` and so is the output;
        ``query_positions`` may then only be ``slice(0, 1)`` (output ``[B, 1, H]``). The other keywords of
        :class:`~bertkit.modeling.layers.BERTLayer` (caches, cross-attention) are a decoder's; they arrive empty.
        """
        if self_cache is not None:
            raise ValueError("EuroBERT layers keep no cache (they are encoder layers); pass no past_key_values.")
        residual = hidden_states
        if query_positions is not None:  # the rows of those queries
            residual = query_rows(hidden_states, query_positions, packing)
            if allowed is not None and allowed.shape[-2] != 1:
                allowed = allowed[..., query_positions, :]
        attn, probs = self.self_attn(self.input_layernorm(hidden_states), allowed, *rotary,
                                     query_positions=query_positions, output_attentions=output_attentions,
                                     packing=packing)
        x = residual + attn
        return x + self.mlp(self.post_attention_layernorm(x)), probs, None

