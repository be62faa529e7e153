"""Encoder-layer variants: how a family's layers differ in structure from BERT's, as a registry.

Most families are BERT's layer under other names (RoBERTa, XLM-R, CamemBERT, DistilBERT, ELECTRA:
configuration, :data:`bertkit.config.FAMILIES`). A family whose layer differs in structure (MPNet's
relative position bias, ModernBERT's pre-norm rotary layer) registers a :class:`LayerVariant` here under
the name its :class:`~bertkit.config.Family` gives as ``layer``; :class:`~bertkit.modeling.backbone.BERTEncoder`
builds from it. Entries are ``"module:attribute"`` strings resolved on first use, so a variant's module is
imported only by the models that use it.

A variant's contract:

* ``layer(config, layer_idx)`` builds ``encoder.layer.{i}``. Its ``forward`` takes what
  :class:`~bertkit.modeling.layers.BERTLayer` takes (``hidden_states, allowed`` and keywords) plus the
  keywords of the context, and returns ``(hidden_states, self_attn_probs | None, cross_attn_probs | None)``.
* ``context`` (optional) builds ``encoder.<context_name>``, a module holding what every layer shares
  (MPNet's relative position bias table). The encoder calls it once per forward as
  ``context(hidden_states, allowed=..., position_ids=..., packing=...)`` and passes the dict it returns
  to every layer as keywords; each layer takes the entries it needs.
* ``final_norm`` (optional) builds ``encoder.final_norm``, applied to the last layer's output.
* ``unpadded``: whether the layer runs on packed tokens (:mod:`bertkit.modeling.unpad`).
* ``embeddings`` (optional) builds ``embeddings`` in place of
  :class:`~bertkit.modeling.layers.BERTEmbeddings` (same ``forward``); one with a true ``projects`` attribute maps
  to H itself (the backbone then adds no ``embeddings_project``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from bertkit.config import BERTConfig


@dataclass(frozen=True)
class LayerVariant:
    layer: str
    context: str | None = None
    context_name: str = "context"
    final_norm: str | None = None
    unpadded: bool = True
    embeddings: str | None = None

    def build(self, name: str) -> Callable[..., nn.Module] | None:
        """The builder that field ``name`` names, imported now (None for an absent optional part)."""
        target = getattr(self, name)
        if target is None:
            return None
        module, attribute = target.split(":")
        return getattr(importlib.import_module(module), attribute)


#: ``Family.layer`` -> its :class:`LayerVariant`
LAYER_VARIANTS: dict[str, LayerVariant] = {
    "bert": LayerVariant("bertkit.modeling.layers:BERTLayer"),
    # BERT's layer with a relative position bias added to its attention scores, computed once per forward by
    # encoder.relative_attention_bias in the padded layout, which is also the layout of the packed path's attention
    "mpnet": LayerVariant("bertkit.modeling.layers:BERTLayer",
                          context="bertkit.modeling.relative_bias:RelativePositionBias",
                          context_name="relative_attention_bias"),
    "modernbert": LayerVariant("bertkit.modeling.modernbert:ModernBERTLayer",
                               context="bertkit.modeling.modernbert:RotaryContext", context_name="rotary",
                               final_norm="bertkit.modeling.modernbert:final_norm"),
    # BERT's layer with disentangled attention over relative positions (shared by the layers: encoder.relative),
    # DeBERTa's embeddings (optional positions and token types, embed_proj before the LayerNorm)
    "deberta": LayerVariant("bertkit.modeling.deberta:DeBERTaLayer",
                            context="bertkit.modeling.deberta:RelativeContext", context_name="relative",
                            embeddings="bertkit.modeling.deberta:DeBERTaEmbeddings"),
    # EuroBERT's pre-norm Llama-style layer: RMSNorm, grouped-query attention with RoPE, SwiGLU; a final RMSNorm
    "llama": LayerVariant("bertkit.modeling.llama_layer:LlamaLayer",
                          context="bertkit.modeling.llama_layer:RopeContext", context_name="rotary",
                          final_norm="bertkit.modeling.llama_layer:final_norm"),
    # post-LN rotary layers (GTE, NomicBERT, Jina v3): one rope for every layer, its tables computed once per
    # forward by encoder.rotary in the padded layout (the packed path's attention spreads to it)
    "rope": LayerVariant("bertkit.modeling.rotary_layer:RotaryLayer",
                         context="bertkit.modeling.rotary_layer:RopeContext", context_name="rotary"),
}


def layer_variant(config: BERTConfig) -> LayerVariant:
    """The :class:`LayerVariant` of ``config``'s family."""
    return LAYER_VARIANTS[config.family_spec.layer]
