"""pytorch_pretrained_bert 0.6.2's layer classes: the engine's layers under 0.6.2's constructors and forwards.

Each class here is a subclass of its counterpart in :mod:`bertkit.modeling.layers` (or of
the backbone's :class:`~bertkit.modeling.backbone.BERTEncoder`), built from 0.6.2's
arguments (``BertEmbeddings(config)``, ``BertLMPredictionHead(config,
bert_model_embedding_weights)``) and called as 0.6.2 calls it; the arithmetic is the
engine's. Parameter names are 0.6.2's, so a 0.6.2 layer's ``state_dict`` loads with
``strict=True`` and the other way round. ``config`` is a 0.6.2 :class:`BertConfig` (or a
:class:`bertkit.BERTConfig`).

0.6.2's conventions that the engine does not share:

* Attention masks are 0.6.2's *additive* masks, as ``BertModel`` builds them:
  ``(1.0 - mask[:, None, None, :]) * -10000.0``, broadcastable to ``[B, heads, L, S]``;
  0 (or more) means attend, a negative value means masked. Masked keys get probability 0
  exactly (0.6.2's ``exp(-10000)`` is 0 in float32 too); a row with every key masked
  attends to all of them by score, as in 0.6.2. ``None`` means no mask.
* ``BertSelfAttention``, ``BertAttention`` and ``BertLayer`` return one tensor ``[B, L, H]``;
  ``BertEncoder`` returns a list (every layer's output, or the last alone with
  ``output_all_encoded_layers=False``); ``BertPreTrainingHeads`` takes and returns the
  pair ``(prediction_scores, seq_relationship_score)``.
* ``BertLMPredictionHead`` ties its decoder to the embedding matrix it is given and sizes
  itself from it; its ``state_dict`` has 0.6.2's ``bias`` and no ``decoder.bias`` (the engine
  keeps that name as an alias of the same tensor).
* ``BertLayerNorm`` is ``nn.LayerNorm`` with 0.6.2's signature ``(hidden_size, eps=1e-12)``
  and its ``variance_epsilon``; ``isinstance(m, BertLayerNorm)`` holds for every
  ``nn.LayerNorm``, so 0.6.2-style initialisation code finds the engine's LayerNorms.

The composite layers (attention, layer, encoder, heads) hold the engine's sub-layers,
which keep the engine's forwards. The models of :mod:`.modeling` are the engine's
:class:`~bertkit.BERT` (its attention stack is the engine's too); their LM heads are the
classes here.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertkit.config import BERTConfig
from bertkit.modeling.backbone import BERTEncoder, build_attention_mask
from bertkit.modeling.layers import (
    ACT_FNS,
    BERTAttention,
    BERTEmbeddings,
    BERTIntermediate,
    BERTLayer,
    BERTLMPredictionHead,
    BERTOnlyMLMHead,
    BERTOnlyNSPHead,
    BERTOutput,
    BERTPooler,
    BERTPredictionHeadTransform,
    BERTPreTrainingHeads,
    BERTSelfAttention,
    BERTSelfOutput,
)

#: 0.6.2's activation functions: the exact erf GELU and x * sigmoid(x), as the engine computes them.
gelu = ACT_FNS["gelu"]
#: ``x * sigmoid(x)``, 0.6.2's activation of that name.
swish = ACT_FNS["swish"]
#: 0.6.2's table of ``hidden_act`` names (the engine accepts more: see :data:`bertkit.config.ACTIVATIONS`).
ACT2FN = {name: ACT_FNS[name] for name in ("gelu", "relu", "swish")}


def engine_config(config) -> BERTConfig:
    """The engine's :class:`~bertkit.BERTConfig` for a 0.6.2 ``BertConfig`` (a ``BERTConfig`` is returned as is).

    Raises ``TypeError`` for anything else.
    """
    if isinstance(config, BERTConfig):
        return config
    to_bertkit = getattr(config, "to_bertkit", None)
    if to_bertkit is None:
        raise TypeError(f"config must be a pytorch_pretrained_bert BertConfig (or a bertkit BERTConfig), "
                        f"got {type(config).__name__}.")
    return to_bertkit()


def additive_mask_to_allowed(attention_mask: Tensor | None, key_length: int) -> Tensor | None:
    """0.6.2's additive attention mask as the engine's boolean one (True = attend), rows never all False.

    ``attention_mask`` broadcasts to ``[B, heads, L, S]``; values >= 0 attend, negative ones are
    masked. None stays None (and so does a mask that masks nothing).
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() > 4:
        raise ValueError(f"attention_mask must broadcast to [batch, heads, seq, seq] (0.6.2's extended mask is "
                         f"[batch, 1, 1, seq]), got shape {tuple(attention_mask.shape)}.")
    allowed = (attention_mask >= 0)[(None,) * (4 - attention_mask.dim())]  # -> 4-D, as the engine wants it
    return build_attention_mask(allowed, key_length, torch.arange(allowed.shape[-2], device=allowed.device),
                                causal=False)


# ---------------------------------------------------------------------------- LayerNorm

class _CoversEveryLayerNorm(type):
    """The metaclass of :class:`BertLayerNorm`: ``isinstance(m, BertLayerNorm)`` for any ``nn.LayerNorm``."""

    def __instancecheck__(cls, instance) -> bool:
        if cls is BertLayerNorm:
            return isinstance(instance, nn.LayerNorm)
        return super().__instancecheck__(instance)

    def __subclasscheck__(cls, subclass) -> bool:
        if cls is BertLayerNorm:
            return issubclass(subclass, nn.LayerNorm)
        return super().__subclasscheck__(subclass)


class BertLayerNorm(nn.LayerNorm, metaclass=_CoversEveryLayerNorm):
    """LayerNorm over the last dimension, epsilon inside the square root (0.6.2's "TF style")."""

    def __init__(self, hidden_size: int, eps: float = 1e-12):
        super().__init__(hidden_size, eps=eps)

    @property
    def variance_epsilon(self) -> float:
        """0.6.2's name of ``eps``."""
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        self.eps = value


# ---------------------------------------------------------------------------- embeddings and attention

class BertEmbeddings(BERTEmbeddings):
    """word + position + token-type embeddings, LayerNorm, dropout.

    ``forward(input_ids [B, L], token_type_ids [B, L] | None = None)`` -> ``[B, L, H]``;
    positions are ``0..L-1``, token types default to 0.
    """

    def __init__(self, config):
        super().__init__(engine_config(config))

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)  # [1, L]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return super().forward(input_ids, token_type_ids, position_ids)


class BertSelfAttention(BERTSelfAttention):
    """Multi-head self-attention: ``forward(hidden_states [B, L, H], attention_mask)`` -> context ``[B, L, H]``.

    ``attention_mask`` is 0.6.2's additive mask (see the module docstring). A ``hidden_size``
    that is not a multiple of ``num_attention_heads`` is a ``ValueError`` (from the config).
    """

    def __init__(self, config):
        super().__init__(engine_config(config), layer_idx=0)

    @property
    def num_attention_heads(self) -> int:
        return self.num_heads

    @property
    def attention_head_size(self) -> int:
        return self.head_dim

    @property
    def all_head_size(self) -> int:
        return self.num_heads * self.head_dim

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        """``[B, L, H]`` -> ``[B, heads, L, head_size]``."""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
        allowed = additive_mask_to_allowed(attention_mask, hidden_states.shape[1])
        return super().forward(hidden_states, allowed)[0]


class BertSelfOutput(BERTSelfOutput):
    """``LayerNorm(dropout(dense(hidden_states)) + input_tensor)``, H -> H."""

    def __init__(self, config):
        super().__init__(engine_config(config))

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return super().forward(hidden_states, input_tensor)


class BertAttention(BERTAttention):
    """Self-attention and its output block: ``forward(input_tensor [B, L, H], attention_mask)`` -> ``[B, L, H]``."""

    def __init__(self, config):
        super().__init__(engine_config(config), layer_idx=0)

    def forward(self, input_tensor: Tensor, attention_mask: Tensor | None) -> Tensor:
        return super().forward(input_tensor, additive_mask_to_allowed(attention_mask, input_tensor.shape[1]))[0]


class BertIntermediate(BERTIntermediate):
    """``act(dense(hidden_states))``: H -> intermediate_size, ``config.hidden_act`` a name or a callable."""

    def __init__(self, config):
        super().__init__(engine_config(config))


class BertOutput(BERTOutput):
    """``LayerNorm(dropout(dense(hidden_states)) + input_tensor)``: intermediate_size -> H."""

    def __init__(self, config):
        super().__init__(engine_config(config))

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return super().forward(hidden_states, input_tensor)


class BertLayer(BERTLayer):
    """One Transformer layer: ``forward(hidden_states [B, L, H], attention_mask)`` -> ``[B, L, H]``."""

    def __init__(self, config):
        super().__init__(engine_config(config), layer_idx=0)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
        return super().forward(hidden_states, additive_mask_to_allowed(attention_mask, hidden_states.shape[1]))[0]


class BertEncoder(BERTEncoder):
    """``config.num_hidden_layers`` layers (``layer.{i}``).

    ``forward(hidden_states, attention_mask, output_all_encoded_layers=True)`` returns the list
    of every layer's output ``[B, L, H]`` (no embedding output), or ``[last layer's output]``.
    """

    def __init__(self, config):
        super().__init__(engine_config(config))

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None,
                output_all_encoded_layers: bool = True) -> list[Tensor]:
        allowed = additive_mask_to_allowed(attention_mask, hidden_states.shape[1])
        last, hidden, _, _ = super().forward(hidden_states, allowed, output_hidden_states=output_all_encoded_layers)
        return list(hidden[1:]) if output_all_encoded_layers else [last]


class BertPooler(BERTPooler):
    """``tanh(dense(hidden_states[:, 0]))``: ``[B, L, H]`` -> ``[B, H]``."""

    def __init__(self, config):
        super().__init__(engine_config(config))


# ---------------------------------------------------------------------------- heads

class BertPredictionHeadTransform(BERTPredictionHeadTransform):
    """``LayerNorm(act(dense(hidden_states)))``, H -> H."""

    def __init__(self, config):
        super().__init__(engine_config(config))


def hide_decoder_bias_alias(predictions: BERTLMPredictionHead) -> None:
    """Keep ``decoder.bias`` (the same tensor as ``predictions.bias``) out of ``predictions``' state dicts.

    0.6.2's head has no ``decoder.bias``: saving drops the alias and loading fills it from
    ``bias``, so 0.6.2's state dicts load strictly and ours load in 0.6.2.
    """
    predictions.register_state_dict_post_hook(_drop_decoder_bias)
    predictions.register_load_state_dict_pre_hook(_fill_decoder_bias)


def _drop_decoder_bias(module, state_dict, prefix, local_metadata) -> None:
    if module.decoder.bias is module.bias:
        state_dict.pop(prefix + "decoder.bias", None)


def _fill_decoder_bias(module, state_dict, prefix, *args) -> None:
    if module.decoder.bias is module.bias and prefix + "bias" in state_dict:
        state_dict.setdefault(prefix + "decoder.bias", state_dict[prefix + "bias"])


class BertLMPredictionHead(BERTLMPredictionHead):
    """The MLM head: transform, then the decoder tied to ``bert_model_embedding_weights`` ``[V, H]``, plus ``bias``.

    ``forward(hidden_states [..., H])`` -> ``[..., V]``. The vocabulary size is the embedding
    matrix's; ``ValueError`` if its width is not ``config.hidden_size``.
    """

    def __init__(self, config, bert_model_embedding_weights: nn.Parameter):
        config = engine_config(config)
        vocab_size, width = bert_model_embedding_weights.shape
        if width != config.hidden_size:
            raise ValueError(f"bert_model_embedding_weights is {vocab_size} x {width}; its width must be "
                             f"config.hidden_size = {config.hidden_size}.")
        super().__init__(config.replace(vocab_size=vocab_size))
        self.decoder.weight = bert_model_embedding_weights
        hide_decoder_bias_alias(self)


class BertOnlyMLMHead(BERTOnlyMLMHead):
    """``predictions`` (a :class:`BertLMPredictionHead`): ``forward(sequence_output)`` -> scores ``[B, L, V]``."""

    def __init__(self, config, bert_model_embedding_weights: nn.Parameter):
        super().__init__(engine_config(config))
        self.predictions = BertLMPredictionHead(config, bert_model_embedding_weights)


class BertOnlyNSPHead(BERTOnlyNSPHead):
    """``seq_relationship``: ``forward(pooled_output [B, H])`` -> ``[B, 2]``."""

    def __init__(self, config):
        super().__init__(engine_config(config))


class BertPreTrainingHeads(BERTPreTrainingHeads):
    """``predictions`` and ``seq_relationship``.

    ``forward(sequence_output [B, L, H], pooled_output [B, H])`` ->
    ``(prediction_scores [B, L, V], seq_relationship_score [B, 2])``.
    """

    def __init__(self, config, bert_model_embedding_weights: nn.Parameter):
        super().__init__(engine_config(config))
        self.predictions = BertLMPredictionHead(config, bert_model_embedding_weights)

    def forward(self, sequence_output: Tensor, pooled_output: Tensor) -> tuple[Tensor, Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


__all__ = [
    "ACT2FN", "BertAttention", "BertEmbeddings", "BertEncoder", "BertIntermediate", "BertLMPredictionHead",
    "BertLayer", "BertLayerNorm", "BertOnlyMLMHead", "BertOnlyNSPHead", "BertOutput", "BertPooler",
    "BertPreTrainingHeads", "BertPredictionHeadTransform", "BertSelfAttention", "BertSelfOutput",
    "additive_mask_to_allowed", "engine_config", "gelu", "hide_decoder_bias_alias", "swish",
]
