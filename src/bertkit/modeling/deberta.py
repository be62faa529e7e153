"""DeBERTa-v2/v3's encoder (mDeBERTa's too), as the layer variant ``"deberta"`` (:mod:`bertkit.modeling.variants`).

What differs from BERT (HF transformers' ``DebertaV2Model``):

* the embeddings (:class:`DeBERTaEmbeddings`): absolute positions only with ``position_biased_input``, token types
  only with ``type_vocab_size > 0``, and a bias-free ``embed_proj`` from ``embedding_size`` to H *before* the
  LayerNorm; HF multiplies their output by the attention mask, which the first layer does here (the same values);
* disentangled attention (:class:`DisentangledSelfAttention`): the content scores ``q . k`` plus, per
  ``pos_att_type``, content-to-position ``q_i . pk[d(i, j)]`` and position-to-content ``k_j . pq[d(i, j)]``,
  where ``pk`` / ``pq`` project the relative-position embeddings (by the layer's own key / query projections with
  ``share_att_key``, else by ``pos_key_proj`` / ``pos_query_proj``) and ``d(i, j)`` is the relative position
  ``i - j`` (log-bucketed with ``position_buckets``: deberta-v3's 256) shifted into ``[0, 2 * span)``; every term
  is divided by ``sqrt(head_dim * (1 + len(pos_att_type)))``;
* the relative-position embeddings ``encoder.rel_embeddings`` (``2 * span`` rows, ``span`` = ``position_buckets``
  or ``max_relative_positions``), LayerNorm-ed with ``norm_rel_ebd="layer_norm"`` (:class:`RelativeContext`,
  once per forward, only the rows a batch's length can reach);
* an optional convolution after the first layer (``conv_kernel_size``, deberta-v2-xlarge: :class:`ConvLayer`);
* HF's mask is ``mask_i & mask_j``: a padding query attends to nothing, and HF's eager softmax over all-lowest
  scores gives it the mean of every value. The padded path does the same (span losses count padding positions).

The layer is BERT's (``attention.output``, ``intermediate``, ``output``: post-LN); inside ``attention.self`` the
projections are named ``query`` / ``key`` / ``value`` (HF's ``query_proj``...; :mod:`bertkit.weights.tables`), so
the fused projections and int8 paths of :class:`~bertkit.modeling.layers.BERTSelfAttention` serve it too.

Unpadded execution (:mod:`bertkit.modeling.unpad`) is supported: projections and the feed-forward block run on the
packed real tokens; attention (and the convolution) unpack to the padded layout, where relative positions live.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.fast import Dropout, Linear
from bertkit.modeling.layers import ACT_FNS, BERTLayer, BERTSelfAttention, attend
from bertkit.modeling.norm import LayerNorm
from bertkit.modeling.unpad import Packing


def relative_span(config: BERTConfig) -> int:
    """Half the rows of ``rel_embeddings``: ``position_buckets`` when set, else ``max_relative_positions`` (else
    ``max_position_embeddings``)."""
    if config.position_buckets > 0:
        return config.position_buckets
    return config.max_relative_positions if config.max_relative_positions >= 1 else config.max_position_embeddings


def log_buckets(relative: torch.Tensor, buckets: int, max_position: int) -> torch.Tensor:
    """DeBERTa's bucketed relative positions (long): exact for ``|r| <= buckets // 2``, beyond it
    ``sign(r) * (mid + ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1)))`` with ``mid =
    buckets // 2``; antisymmetric, so ``bucket(j - i) = -bucket(i - j)``."""
    mid = buckets // 2
    magnitude = relative.abs()
    inside = magnitude <= mid
    scaled = torch.log(magnitude.clamp(min=mid).float() / mid) / math.log((max_position - 1) / mid) * (mid - 1)
    far = (torch.ceil(scaled) + mid).long() * relative.sign()
    return torch.where(inside, relative, far)


def relative_index(length: int, config: BERTConfig, device: torch.device) -> torch.Tensor:
    """``[L, L]``: the ``rel_embeddings`` row of query ``i`` and key ``j``, ``clamp(bucket(i - j) + span, 0,
    2 * span - 1)``."""
    positions = torch.arange(length, device=device)
    return relative_rows(positions[:, None] - positions[None, :], config)


def relative_rows(relative: torch.Tensor, config: BERTConfig) -> torch.Tensor:
    """The ``rel_embeddings`` rows of the relative positions ``relative`` (query - key), as :func:`relative_index`."""
    span = relative_span(config)
    if config.position_buckets > 0:
        max_position = config.max_relative_positions if config.max_relative_positions >= 1 \
            else config.max_position_embeddings
        relative = log_buckets(relative, config.position_buckets, max_position)
    return (relative + span).clamp(0, 2 * span - 1)


@dataclass
class RelativeTables:
    """One forward's relative positions: ``embeddings [R, H]`` (the rows of ``rel_embeddings`` the batch reaches,
    normed) and ``index [L, L]`` into them (:func:`relative_index` less the first row's number)."""

    embeddings: torch.Tensor
    index: torch.Tensor


class RelativeContext(nn.Module):
    """``encoder.relative``: the relative-position embeddings (HF's ``encoder.rel_embeddings`` and
    ``encoder.LayerNorm``) and, once per forward, the :class:`RelativeTables` every layer reads (keyword
    ``relative``; None without ``relative_attention``)."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.config = config
        self.rel_embeddings = nn.Embedding(2 * relative_span(config), config.hidden_size) \
            if config.relative_attention else None
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps) \
            if "layer_norm" in config.norm_rel_ebd.lower() else None
        self._index: tuple | None = None  # (length, device, first row, last row, index): the last length's

    def forward(self, hidden_states: torch.Tensor, *, allowed: torch.Tensor | None, position_ids: torch.Tensor,
                packing: Packing | None = None) -> dict:
        """The layers' keyword ``relative``: a :class:`RelativeTables`, or None without relative attention."""
        if self.rel_embeddings is None:
            return {"relative": None}
        length = packing.length if packing is not None else hidden_states.shape[1]
        first, last, index = self._rows(length, hidden_states.device)
        rows = self.rel_embeddings.weight[first:last + 1]
        if self.LayerNorm is not None:
            rows = self.LayerNorm(rows)
        return {"relative": RelativeTables(rows.to(hidden_states.dtype), index)}

    def _rows(self, length: int, device: torch.device) -> tuple[int, int, torch.Tensor]:
        """``(first, last, index)``: the rows a length-L batch reaches, ``d(0, L-1) .. d(L-1, 0)`` (computed on the
        CPU, no device sync), and :func:`relative_index` counted from ``first``; kept for the next batch of that
        length. While tracing, every row (a graph of any length)."""
        if fast.tracing():
            return 0, self.rel_embeddings.num_embeddings - 1, relative_index(length, self.config, device)
        if self._index is None or self._index[:2] != (length, device):
            first, last = relative_rows(torch.tensor([1 - length, length - 1]), self.config).tolist()
            self._index = (length, device, first, last, relative_index(length, self.config, device) - first)
        return self._index[2:]


class DeBERTaEmbeddings(nn.Module):
    """word (+ position with ``position_biased_input``) (+ token type with ``type_vocab_size > 0``) embeddings,
    ``embedding_size`` wide, then ``embed_proj`` (no bias) to H where narrower, LayerNorm and dropout (HF's
    ``DebertaV2Embeddings``; the backbone adds no projection of its own)."""

    projects = True  # the backbone builds no embeddings_project

    def __init__(self, config: BERTConfig):
        super().__init__()
        width, h = config.embedding_width, config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width) \
            if config.position_biased_input else None
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size else None
        self.embed_proj = Linear(width, h, bias=False) if width != h else None
        self.LayerNorm = LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None,
                position_ids: torch.Tensor, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None and token_type_ids is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        return self.dropout(self.LayerNorm(x))


class DisentangledSelfAttention(BERTSelfAttention):
    """BERT's ``query`` / ``key`` / ``value`` with DeBERTa's relative terms (``attention.self``): see the module
    docstring. ``pos_key_proj`` (c2p) / ``pos_query_proj`` (p2c) exist without ``share_att_key``."""

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        kinds = config.pos_att_type or []
        self.c2p, self.p2c = "c2p" in kinds, "p2c" in kinds
        self.scale = math.sqrt(self.head_dim * (1 + self.c2p + self.p2c))
        h = config.hidden_size
        separate = config.relative_attention and not config.share_att_key
        self.pos_key_proj = Linear(h, h) if separate and self.c2p else None
        self.pos_query_proj = Linear(h, h) if separate and self.p2c else None
        self.pos_dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, *,
                relative: RelativeTables | None, queries: slice | None = None, packing: Packing | None = None,
                query_padding: torch.Tensor | None = None,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``hidden_states [B, L, H]`` (packed ``[N, H]`` with ``packing``) -> the context ``[B, L, H]`` (packed
        ``[N, H]``; ``[B, n, H]`` at the positions ``queries``) and the eager probabilities. ``query_padding``
        (``[B, 1, L|n, 1]``, True at padding queries): their context is the mean of every value, as in HF."""
        fused = self._fused_projections(hidden_states)
        if fused is not None:  # [.., 3H]: spread once when packed
            q, k, v = (fused if packing is None else packing.spread(fused)).chunk(3, dim=-1)
        else:
            q, k, v = (proj(hidden_states) for proj in (self.query, self.key, self.value))
            if packing is not None:
                q, k, v = (packing.spread(t) for t in (q, k, v))
        q, k, v = self._heads(q), self._heads(k), self._heads(v)  # [B, nh, L, hd]
        bias = self._relative_scores(q, k, relative, queries) if relative is not None else None
        if queries is not None:
            q = q[:, :, queries]
        mask = packing.keys if packing is not None else allowed
        dropout_p = self.dropout_p if self.training else 0.0
        context, probs = attend(q, k, v, mask, dropout_p, eager=self.eager or output_attentions,
                                position_bias=bias, scale=1.0 / self.scale)
        if query_padding is not None:
            context = torch.where(query_padding, v.mean(dim=-2, keepdim=True), context)
        b, n = context.shape[0], context.shape[2]
        context = context.transpose(1, 2).reshape(b, n, -1)  # [B, nh, n, hd] -> [B, n, H]
        if packing is not None and queries is None:
            context = packing.pack(context)
        return context, probs

    def _relative_scores(self, q: torch.Tensor, k: torch.Tensor, relative: RelativeTables,
                         queries: slice | None) -> torch.Tensor | None:
        """``(c2p + p2c) / scale``, ``[B, nh, L|n, L]``: ``q_i . pk[d(i, j)]`` and ``k_j . pq[d(i, j)]``."""
        index = relative.index if queries is None else relative.index[queries]  # [n, L]
        rows = self.pos_dropout(relative.embeddings)  # [R, H]
        b, nh, n, length = q.shape[0], q.shape[1], index.shape[0], k.shape[2]
        scores = None
        if self.c2p:  # the position keys divided by the scale: R rows, not the [B, nh, n, L] scores
            pos_key = self._heads((self.key if self.pos_key_proj is None else self.pos_key_proj)(rows)[None])
            q_rows = q if queries is None else q[:, :, queries]
            c2p = torch.matmul(q_rows, pos_key.transpose(-1, -2) / self.scale)  # [B, nh, n, R]
            scores = c2p.gather(-1, index.expand(b, nh, n, length))
        if self.p2c:
            pos_query = self._heads((self.query if self.pos_query_proj is None else self.pos_query_proj)(rows)[None])
            p2c = torch.matmul(k, pos_query.transpose(-1, -2) / self.scale)  # [B, nh, L (keys), R]
            p2c = p2c.gather(-1, index.t().expand(b, nh, length, n)).transpose(-1, -2)
            scores = p2c if scores is None else scores + p2c
        return scores


class ConvLayer(nn.Module):
    """``encoder.conv`` (HF's name; here the first layer's ``conv``): after the first layer, ``LayerNorm(out +
    act(dropout(conv(x))))`` with ``x`` the layer's input (zero at padding) and ``conv`` a 1-D convolution over
    positions (``conv_kernel_size``, ``conv_groups``, ``conv_act``), zeroed at padding, as is the result."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        k = config.conv_kernel_size
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, k, padding=(k - 1) // 2,
                              groups=config.conv_groups)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.act = ACT_FNS[config.conv_act]

    def forward(self, layer_input: torch.Tensor, layer_output: torch.Tensor, keys: torch.Tensor | None,
                packing: Packing | None, queries: slice | None) -> torch.Tensor:
        """``layer_input`` ``[B, L, H]`` (packed ``[N, H]``), ``layer_output`` at the same positions (``[B, n, H]``
        at ``queries``), ``keys [B, L]`` (True at real tokens; None: no padding)."""
        x = packing.unpack(layer_input) if packing is not None else layer_input  # zeros at padding
        if keys is not None and packing is None:
            x = x * keys[..., None].to(x.dtype)
        out = self.conv(x.transpose(1, 2)).transpose(1, 2)  # [B, L, H]
        if keys is not None:
            out = out.masked_fill(~keys[..., None], 0.0)
        if packing is not None:
            out = packing.pack(out) if queries is None else packing.first_tokens(packing.pack(out))
        elif queries is not None:
            out, keys = out[:, queries], None if keys is None else keys[:, queries]
        result = self.LayerNorm(layer_output + self.act(self.dropout(out)))
        return result if keys is None or packing is not None else result * keys[..., None].to(result.dtype)


class DeBERTaLayer(BERTLayer):
    """One DeBERTa layer (``encoder.layer.{i}``): BERT's post-LN layer around a
    :class:`DisentangledSelfAttention`; the first one also holds the :class:`ConvLayer` where configured."""

    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.attention.self = DisentangledSelfAttention(config, layer_idx)
        self.conv = ConvLayer(config) if layer_idx == 0 and config.conv_kernel_size > 0 else None

    def forward(self, hidden_states: torch.Tensor, allowed: torch.Tensor | None, *,
                relative: RelativeTables | None = None, output_attentions: bool = False,
                query_positions: slice | None = None, packing: Packing | None = None, self_cache=None, **_):
        """Returns ``(hidden_states, attention probabilities | None, None)``; the arguments are
        :class:`~bertkit.modeling.layers.BERTLayer`'s (``relative`` from :class:`RelativeContext`). DeBERTa
        layers keep no cache and have no cross-attention (HF's neither)."""
        if self_cache is not None:
            raise ValueError("DeBERTa layers keep no cache (they are encoder layers); pass no past_key_values.")
        keys = allowed[:, 0, 0] if packing is None and allowed is not None and allowed.shape[1:3] == (1, 1) \
            else None  # [B, L]: the padding mask, where the mask is one
        if keys is not None and self.layer_idx == 0:  # HF's embeddings output times the mask
            hidden_states = hidden_states * keys[..., None].to(hidden_states.dtype)
        padding = None if keys is None else ~keys[:, None, :, None]  # [B, 1, L, 1]: padding queries
        if query_positions is not None:
            if packing is not None and query_positions != slice(0, 1):
                raise ValueError("with unpadded execution only query_positions=slice(0, 1) is supported.")
            residual = packing.first_tokens(hidden_states) if packing is not None \
                else hidden_states[:, query_positions]
            padding = None if padding is None else padding[:, :, query_positions]
        else:
            residual = hidden_states
        context, probs = self.attention.self(hidden_states, allowed, relative=relative, queries=query_positions,
                                             packing=packing, query_padding=padding,
                                             output_attentions=output_attentions)
        x = self._feed_forward_chunked(self.attention.output(context, residual))
        if self.conv is not None:
            x = self.conv(hidden_states, x, keys if packing is None else packing.keys[:, 0, 0], packing,
                          query_positions)
        return x, probs, None
