"""MPNet's relative position bias: one learned score per head and bucket of relative distance, shared by every layer.

The "mpnet" layer variant (:data:`bertkit.modeling.variants.LAYER_VARIANTS`) is BERT's post-LN layer with this
bias added to its attention scores (:func:`bertkit.modeling.layers.attend`); the encoder computes it once per
forward (:class:`RelativePositionBias`, the variant's context, ``encoder.relative_attention_bias``) and passes it
to every layer as ``position_bias``.

Distances are bucketed as in T5 and MPNet (:func:`relative_position_buckets`): half the buckets for keys before
the query, half for keys after it; in each half, distances below a quarter of the buckets have a bucket each
and longer ones share logarithmically wider buckets up to ``max_distance`` (128), beyond which all share the last.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.unpad import Packing

#: distances from this on share the last bucket of their direction (MPNet's, fixed in its code and HF's)
MAX_DISTANCE = 128


def relative_position_buckets(length: int, num_buckets: int, max_distance: int = MAX_DISTANCE, *,
                              device: torch.device | None = None) -> torch.Tensor:
    """The bucket ``[L, L]`` of each query position ``i`` and key position ``j`` of a sequence of ``length``.

    The distance ``i - j`` is bucketed: keys at or before the query (``i - j >= 0``) take buckets
    ``[0, num_buckets // 2)``, keys after it the upper half. Within a half of ``n`` buckets, distances below
    ``n // 2`` are their own bucket and longer ones get ``n // 2 + floor(log(d / (n // 2)) /
    log(max_distance / (n // 2)) * (n - n // 2))``, at most ``n - 1``.
    """
    positions = torch.arange(length, dtype=torch.long, device=device)
    distance = positions[:, None] - positions[None, :]  # query i - key j
    half = num_buckets // 2
    buckets = (distance < 0).long() * half
    distance = distance.abs()
    exact = half // 2
    # this order of operations is HF's and fairseq's: a bucket boundary rounds the same way
    scaled = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact) * (half - exact)
    far = (exact + scaled.long()).clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Embedding):
    """The relative position bias table ``[relative_attention_num_buckets, num_attention_heads]``
    (``encoder.relative_attention_bias.weight``, as HF names it), and its expansion to attention scores.

    It is the "mpnet" variant's context module: ``forward`` returns ``{"position_bias": [1, nh, L, L]}`` for a
    batch of length ``L`` (the padded length, also when the layers run packed: attention is computed in the
    padded layout). As in HF's ``MPNetModel``, positions are ``0 .. L-1`` whatever ``position_ids`` say (left
    padding changes no distance between real tokens). Initialised as an embedding table (normal, std
    ``initializer_range``).

    Buckets are ``config.relative_attention_num_buckets`` (fairseq's meaning). HF's ``MPNetModel`` buckets with 32
    whatever its config says, so the two agree at 32, the value of every released MPNet; elsewhere HF would use
    32 rows of a larger table, or index past a smaller one.
    """

    def __init__(self, config: BERTConfig):
        super().__init__(config.relative_attention_num_buckets, config.num_attention_heads)

    def forward(self, hidden_states: torch.Tensor, *, allowed: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None,
                packing: Packing | None = None) -> dict[str, torch.Tensor]:
        length = packing.length if packing is not None else hidden_states.shape[1]
        buckets = relative_position_buckets(length, self.num_embeddings, device=self.weight.device)
        bias = super().forward(buckets)  # [L, L, nh]
        return {"position_bias": bias.permute(2, 0, 1).unsqueeze(0)}  # [1, nh, L, L]
