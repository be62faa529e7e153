"""ModernBERT's encoder layer, as the layer variant ``"modernbert"`` (:mod:`bertkit.modeling.variants`).

What differs from BERT's layer (HF transformers' ``ModernBertModel``, whose parameter names are kept inside a
layer: ``attn_norm``, ``attn.Wqkv``, ``attn.Wo``, ``mlp_norm``, ``mlp.Wi``, ``mlp.Wo``):

* pre-norm: ``x + attn(attn_norm(x))``, then ``x + mlp(mlp_norm(x))``; layer 0's ``attn_norm`` is the identity
  (the embeddings end with a LayerNorm), and the encoder ends with ``final_norm``. LayerNorms have a bias only
  with ``norm_bias``; the projections only with ``attention_bias`` / ``mlp_bias``;
* one fused ``Wqkv`` projection (rows: every head's queries, then keys, then values);
* rotary position embeddings on queries and keys (no absolute position table; :mod:`bertkit.modeling.rotary`):
  theta ``global_rope_theta`` in the global layers, ``local_rope_theta`` in the others;
* alternating attention: layer ``i`` is global when ``i % global_attn_every_n_layers == 0``; the others attend
  within a sliding window, query ``i`` to keys ``j`` with ``|i - j| <= local_attention // 2`` (HF's rule);
* a GeGLU feed-forward block: ``Wi`` projects to ``2 * intermediate_size``, split into input and gate;
  ``Wo(dropout(act(input) * gate))`` with ``act`` = ``hidden_act`` and ``mlp_dropout``;
* dropout ``attention_probs_dropout_prob`` on the attention probabilities and again after ``Wo`` (HF's
  ``attention_dropout``).

:class:`RotaryContext` (``encoder.rotary``, no parameters) computes once per forward what every layer shares:
the cos/sin tables of both thetas at the batch's position ids, and the sliding-window mask combined with the
padding mask. Attention itself is :func:`bertkit.modeling.layers.attend` (SDPA or eager, boolean masks).

Unpadded execution (:mod:`bertkit.modeling.unpad`) is supported: the norms, projections and the feed-forward
block run on the packed real tokens ``[N, H]``; attention unpacks queries, keys and values to ``[B, L]`` (where
the rotary tables and masks are laid out) for one masked call and packs its output again.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.fast import Dropout, Linear
from bertkit.modeling.inputs import value_checks_disabled
from bertkit.modeling.layers import activation, attend, refuse_decoder_settings
from bertkit.modeling.norm import LayerNorm
from bertkit.modeling.rotary import rope_inverse_frequencies, rotary_tables, rotate
from bertkit.modeling.unpad import Packing, query_rows


def layer_norm(config: BERTConfig) -> nn.LayerNorm:
    """A LayerNorm of ``hidden_size`` with ``layer_norm_eps``, biased only with ``norm_bias``."""
    return LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)


def final_norm(config: BERTConfig) -> nn.LayerNorm:
    """``encoder.final_norm``: the LayerNorm after the last layer."""
    return layer_norm(config)


def is_global_layer(config: BERTConfig, layer_idx: int) -> bool:
    """Whether layer ``layer_idx`` attends globally (else within the sliding window)."""
    return layer_idx % config.global_attn_every_n_layers == 0


def sliding_window_mask(allowed: torch.Tensor | None, length: int, half_window: int,
                        device: torch.device) -> torch.Tensor | None:
    """The boolean mask of a sliding-window layer: ``allowed`` (the padding mask, ``[B|1, 1|nh, L|1, L]`` or None)
    and ``|query - key| <= half_window`` (HF's rule). Returns ``allowed`` itself when the window spans the sequence.

    A padding query farther than the window from every real token keeps no key (HF's mask keeps it so too); see
    :class:`ModernBERTAttention` for what such a row computes.
    """
    if length - 1 <= half_window:
        return allowed
    positions = torch.arange(length, device=device)
    band = (positions[:, None] - positions[None, :]).abs() <= half_window  # [L, L]
    return band[None, None] if allowed is None else allowed & band


class RotaryContext(nn.Module):
    """What every ModernBERT layer of one forward shares (``encoder.rotary``; no parameters, nothing saved).

    Called as ``context(hidden_states, allowed=..., position_ids=..., packing=...)``; returns the layers'
    keywords ``rotary`` (``{"global": (cos, sin), "local": (cos, sin)}``), ``local_allowed`` (the
    sliding-window mask, see :func:`sliding_window_mask`) and ``local_keyless`` (``[B|1, 1, L, 1]``, its rows
    without any key; None when there are none).
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        thetas = {"global": config.global_rope_theta, "local": config.local_rope_theta}
        self.frequencies = {kind: rope_inverse_frequencies({"rope_theta": theta}, config.head_dim,
                                                           config.max_position_embeddings)
                            for kind, theta in thetas.items()}
        self.half_window = config.local_attention // 2
        self.has_local = config.global_attn_every_n_layers > 1 and config.num_hidden_layers > 1

    def forward(self, hidden_states: torch.Tensor, *, allowed: torch.Tensor | None, position_ids: torch.Tensor,
                packing: Packing | None = None) -> dict:
        """``hidden_states [B, L, H]``, or the packed ``[N, H]`` with ``packing``; ``allowed`` and ``position_ids``
        are laid out ``[B, L]`` either way, and so are the tables and masks returned."""
        length = packing.length if packing is not None else hidden_states.shape[1]
        rotary = {kind: rotary_tables(position_ids, *frequencies, hidden_states.dtype)
                  for kind, frequencies in self.frequencies.items() if kind == "global" or self.has_local}
        local_allowed = sliding_window_mask(allowed, length, self.half_window,
                                            hidden_states.device) if self.has_local else None
        keyless = None
        if local_allowed is not None and local_allowed is not allowed:
            keyless = ~local_allowed.any(dim=-1, keepdim=True)
            if not value_checks_disabled() and not bool(keyless.any()):  # no sync while tracing: kept, all False
                keyless = None
        return {"rotary": rotary, "local_allowed": local_allowed, "local_keyless": keyless}


class ModernBERTAttention(nn.Module):
    """``Wqkv`` -> rotary on queries and keys -> attention -> ``Wo`` -> dropout (HF's ``attn``).

    A query without any key (``keyless``: a padding position out of every real token's window) gets what HF's
    implementation of the same name gives it: eager, the mean of every value (its scores are all the lowest
    float); SDPA, 0 (torch's answer; the row is opened for the kernel and its context zeroed, so that no kernel
    sees an empty row). Such outputs carry no meaning, but span losses normalise over padding positions too.
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        h = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.Wqkv = Linear(h, 3 * h, bias=config.attention_bias)
        self.Wo = Linear(h, h, bias=config.attention_bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.out_drop = Dropout(config.attention_probs_dropout_prob)
        self.eager = config.attn_implementation == "eager"

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, *,
                keyless: torch.Tensor | None = None, query_positions: slice | None = None,
                output_attentions: bool = False,
                packing: Packing | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x [B, L, H]`` -> ``[B, L, H]`` (``[B, n, H]`` at ``query_positions``: ``allowed`` and ``keyless``
        already cut to those rows) and the probabilities when eager. With ``packing``, ``x`` and the result are
        the packed ``[N, H]`` (``[B, n, H]`` at ``query_positions``)."""
        h = x.shape[-1]
        qkv = self.Wqkv(x) if packing is None else packing.spread(self.Wqkv(x))  # [B, L, 3H]
        b, length = qkv.shape[:2]
        q, k, v = qkv.view(b, length, 3, self.num_heads, self.head_dim).transpose(1, 3).unbind(dim=2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # [B, nh, L, hd]
        if query_positions is not None:
            q = q[:, :, query_positions]
        eager = self.eager or output_attentions
        zeroed = keyless is not None and not eager
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs = attend(q, k, v, allowed | keyless if zeroed else allowed, dropout_p, eager=eager)
        if zeroed:
            context = context.masked_fill(keyless, 0.0)
        context = context.transpose(1, 2).reshape(b, -1, h)  # [B, nh, L|n, hd] -> [B, L|n, H]
        if packing is not None and query_positions is None:
            context = packing.pack(context)
        return self.out_drop(self.Wo(context)), probs


class ModernBERTMLP(nn.Module):
    """GeGLU: ``Wo(dropout(act(input) * gate))`` with ``input, gate`` the halves of ``Wi(x)`` (HF's ``mlp``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = activation(config)
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(inputs) * gate))


class ModernBERTLayer(nn.Module):
    """One pre-norm ModernBERT layer (``encoder.layer.{i}``), global or sliding-window (:func:`is_global_layer`)."""

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__()
        refuse_decoder_settings(config)
        self.attn_norm = nn.Identity() if layer_idx == 0 else layer_norm(config)
        self.attn = ModernBERTAttention(config)
        self.mlp_norm = layer_norm(config)
        self.mlp = ModernBERTMLP(config)
        self.layer_idx = layer_idx
        self.kind = "global" if is_global_layer(config, layer_idx) else "local"

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, *, rotary: dict,
                local_allowed: torch.Tensor | None = None, local_keyless: torch.Tensor | None = None,
                output_attentions: bool = False, query_positions: slice | None = None,
                packing: Packing | None = None, self_cache=None, **_):
        """Returns ``(hidden_states [B, L, H], attention probabilities | None, None)``.

        ``allowed`` is the padding mask (global layers), ``local_allowed`` the sliding-window one (the others,
        with ``local_keyless`` its rows without a key), ``rotary`` the context's tables. ``query_positions``:
        compute the output at those positions only (``[B, n, H]``), each still attending to its keys (a
        classifier's last layer at the first token).
        ``packing``: ``hidden_states`` are the packed real tokens ``[N, H]`` (unpadded execution) and so is the
        output; ``query_positions`` may then only be ``slice(0, 1)`` (output ``[B, 1, H]``). The other keywords of
        :class:`~bertkit.modeling.layers.BERTLayer` (caches, cross-attention) are a decoder's, which this layer
        is not; they arrive empty.
        """
        if self_cache is not None:
            raise ValueError("ModernBERT layers keep no cache (they are encoder layers); pass no past_key_values.")
        mask, keyless = (allowed, None) if self.kind == "global" else (local_allowed, local_keyless)
        residual = hidden_states
        if query_positions is not None:  # the rows of those queries
            residual = query_rows(hidden_states, query_positions, packing)
            if mask is not None and mask.shape[-2] != 1:
                mask = mask[..., query_positions, :]
            keyless = keyless[..., query_positions, :] if keyless is not None else None
        attn, probs = self.attn(self.attn_norm(hidden_states), mask, *rotary[self.kind], keyless=keyless,
                                query_positions=query_positions, output_attentions=output_attentions,
                                packing=packing)
        x = residual + attn
        return x + self.mlp(self.mlp_norm(x)), probs, None
