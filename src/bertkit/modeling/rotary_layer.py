"""The post-LN rotary encoder layer, as the layer variant ``"rope"`` (:mod:`bertkit.modeling.variants`): GTE,
NomicBERT and Jina v3 (HF transformers' ``GteLayer``, ``NomicBertLayer``, ``JinaEmbeddingsV3Layer``).

What differs from BERT's layer:

* rotary position embeddings on queries and keys (:mod:`bertkit.modeling.rotary`; the family's ``rope_theta``
  and ``rope_scaling``), no absolute position table;
* one fused ``attention.qkv_proj`` and ``attention.o_proj`` (biased with ``attention_bias``); the block is
  ``attn_ln(x + dropout(attention))``, then ``mlp_ln(x + dropout(mlp))`` (post-LN as BERT's, dropout
  ``hidden_dropout_prob``). The names are those of the checkpoints HF transformers writes (the original remote-code
  layout: GTE's names, NomicBERT's and Jina's renamed by :mod:`bertkit.weights.tables`);
* the feed-forward block per the family's :class:`~bertkit.families.RopeLayer`: gated
  (``down_proj(act(gate_proj(x)) * up_proj(x))``, optionally with dropout on the product) or plain
  (``fc2(act(fc1(x)))``), its biases switched separately for the input and output projections.

:class:`RopeContext` (``encoder.rotary``, no parameters) computes the cos/sin tables once per forward. Unpadded
execution (:mod:`bertkit.modeling.unpad`) is supported: norms, projections and the feed-forward block run on the
packed real tokens ``[N, H]``; attention spreads queries, keys and values to ``[B, L]`` (where the tables are
laid out) for one masked call and packs its output again.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import BERTConfig, RopeLayer
from bertkit.modeling.fast import Dropout, Linear
from bertkit.modeling.layers import activation, attend, refuse_decoder_settings
from bertkit.modeling.norm import LayerNorm
from bertkit.modeling.rotary import rope_inverse_frequencies, rotary_tables, rotate
from bertkit.modeling.unpad import Packing


def rope_parameters(config: BERTConfig) -> dict:
    """``config``'s rope as HF's flat ``rope_parameters``: ``{"rope_theta": ..., **rope_scaling}``."""
    return {"rope_theta": config.rope_theta, **(config.rope_scaling or {})}


class RopeContext(nn.Module):
    """The cos/sin tables every layer of one forward shares (``encoder.rotary``; no parameters, nothing saved).

    Called as ``context(hidden_states, allowed=..., position_ids=..., packing=...)``; returns the layers' keyword
    ``rotary``: ``(cos, sin)`` ``[1|B, L, d]`` at ``position_ids`` (laid out ``[B, L]`` also when packed). A
    ``dynamic`` rope recomputes its frequencies from the batch's longest position (one host sync per forward).
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.rope = rope_parameters(config)
        self.head_dim, self.max_positions = config.head_dim, config.max_position_embeddings
        self.dynamic = self.rope.get("rope_type", self.rope.get("type")) == "dynamic"
        self.frequencies = rope_inverse_frequencies(self.rope, self.head_dim, self.max_positions)

    def forward(self, hidden_states: torch.Tensor, *, allowed: torch.Tensor | None, position_ids: torch.Tensor,
                packing: Packing | None = None) -> dict:
        frequencies = self.frequencies
        if self.dynamic:
            frequencies = rope_inverse_frequencies(self.rope, self.head_dim, self.max_positions,
                                                   seq_len=int(position_ids.max()) + 1)
        return {"rotary": rotary_tables(position_ids, *frequencies, hidden_states.dtype)}


class RopeAttention(nn.Module):
    """``qkv_proj`` (one fused projection: rows every head's queries, then keys, then values) -> rotary on
    queries and keys -> attention -> ``o_proj`` (GTE's ``attention``; NomicBERT's ``attn``, Jina's ``mixer``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        h, bias = config.hidden_size, config.attention_bias
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.qkv_proj = Linear(h, 3 * h, bias=bias)
        self.o_proj = Linear(h, h, bias=bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.eager = config.attn_implementation == "eager"

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, *,
                query_positions: slice | None = None, output_attentions: bool = False,
                packing: Packing | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x [B, L, H]`` -> ``[B, L, H]`` (``[B, n, H]`` at ``query_positions``, ``allowed`` already cut to those
        rows) and the probabilities when eager. With ``packing``, ``x`` and the result are the packed ``[N, H]``
        (``[B, 1, H]`` at ``query_positions``) and ``packing.keys`` masks the keys."""
        h = x.shape[-1]
        qkv = self.qkv_proj(x) if packing is None else packing.spread(self.qkv_proj(x))  # [B, L, 3H]
        b, length = qkv.shape[:2]
        q, k, v = qkv.view(b, length, 3, self.num_heads, self.head_dim).transpose(1, 3).unbind(dim=2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # [B, nh, L, hd]
        if query_positions is not None:
            q = q[:, :, query_positions]
        context, probs = attend(q, k, v, packing.keys if packing is not None else allowed,
                                self.dropout_p if self.training else 0.0, eager=self.eager or output_attentions)
        context = context.transpose(1, 2).reshape(b, -1, h)  # [B, nh, L|n, hd] -> [B, L|n, H]
        if packing is not None and query_positions is None:
            context = packing.pack(context)
        return self.o_proj(context), probs


class RopeMLP(nn.Module):
    """The feed-forward block (HF's ``mlp``) per the family's :class:`~bertkit.families.RopeLayer`: gated
    ``down_proj(act(gate) * up)`` with ``up, gate`` from one fused ``up_gate_proj`` (rows: up, then gate; GTE) or
    from ``up_proj`` and ``gate_proj`` (NomicBERT), or plain ``fc2(act(fc1(x)))`` (Jina v3)."""

    def __init__(self, config: BERTConfig, spec: RopeLayer | None = None):
        """``spec``: the switches; None: the family's (``config.family_spec.rope_layer``). EuroBERT's Llama layer
        passes its own (a gated MLP biased with ``mlp_bias``): one feed-forward block for every gated family."""
        super().__init__()
        spec = spec or config.family_spec.rope_layer
        h, i = config.hidden_size, config.intermediate_size
        self.gated, self.fused = spec.gated_mlp, spec.gated_mlp and spec.fused_up_gate
        if self.fused:
            self.up_gate_proj = Linear(h, 2 * i, bias=spec.mlp_input_bias)
        elif self.gated:
            self.up_proj = Linear(h, i, bias=spec.mlp_input_bias)
            self.gate_proj = Linear(h, i, bias=spec.mlp_input_bias)
        else:
            self.fc1 = Linear(h, i, bias=spec.mlp_input_bias)
        if self.gated:
            self.down_proj = Linear(i, h, bias=spec.mlp_output_bias)
        else:
            self.fc2 = Linear(i, h, bias=spec.mlp_output_bias)
        self.act = activation(config)
        self.drop = Dropout(config.hidden_dropout_prob if spec.mlp_dropout else 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.gated:
            return self.fc2(self.act(self.fc1(x)))
        up, gate = self.up_gate_proj(x).chunk(2, dim=-1) if self.fused else (self.up_proj(x), self.gate_proj(x))
        return self.down_proj(self.drop(self.act(gate) * up))


class RotaryLayer(nn.Module):
    """One post-LN rotary layer (``encoder.layer.{i}``): ``attention``, ``attn_ln``, ``mlp``, ``mlp_ln`` (GTE's
    names; the other families' are renamed by :mod:`bertkit.weights.tables`)."""

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__()
        refuse_decoder_settings(config)
        self.attention = RopeAttention(config)
        self.attn_ln = LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.mlp = RopeMLP(config)
        self.mlp_ln = LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.dropout = Dropout(config.hidden_dropout_prob)  # after attention and after the MLP (HF: two modules)
        self.layer_idx = layer_idx

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, *, rotary: tuple,
                output_attentions: bool = False, query_positions: slice | None = None,
                packing: Packing | None = None, self_cache=None, **_):
        """Returns ``(hidden_states [B, L, H], attention probabilities | None, None)``.

        ``rotary``: the context's ``(cos, sin)``. ``query_positions``: the output at those positions only
        (``[B, n, H]``), each still attending to every key (a classifier's last layer at the first token).
        ``packing``: ``hidden_states`` are the packed real tokens ``[N, H]`` and so is the output;
        ``query_positions`` may then only be ``slice(0, 1)`` (output ``[B, 1, H]``). The decoder keywords of
        :class:`~bertkit.modeling.layers.BERTLayer` (caches, cross-attention) arrive empty.
        """
        if self_cache is not None:
            raise ValueError("rotary post-LN layers keep no cache (they are encoder layers); pass no past_key_values.")
        residual = hidden_states
        if query_positions is not None:
            if packing is None:
                residual = hidden_states[:, query_positions]
                if allowed is not None and allowed.shape[-2] != 1:
                    allowed = allowed[..., query_positions, :]
            elif query_positions != slice(0, 1):
                raise ValueError("with unpadded execution only query_positions=slice(0, 1) is supported.")
            else:
                residual = packing.first_tokens(hidden_states)
        attention, probs = self.attention(hidden_states, allowed, *rotary, query_positions=query_positions,
                                          output_attentions=output_attentions, packing=packing)
        x = self.attn_ln(residual + self.dropout(attention))
        return self.mlp_ln(x + self.dropout(self.mlp(x))), probs, None
