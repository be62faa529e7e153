"""BERT: embeddings + a stack of layers (+ pooler), and the attention masks they use.

``BERT.forward`` returns ``(sequence_output [B, L, H], pooled_output [B, H] | None)``;
``BERT.encode`` returns a :class:`BERTEncoding` with every layer's hidden states and
attention probabilities on request. Parameter names match HF's ``BertModel``; the same backbone
is RoBERTa's (``RobertaModel``) when ``config.family == "roberta"``: only the default position ids
differ (:func:`bertkit.modeling.layers.default_position_ids`), and checkpoints name it ``roberta.*``
(:mod:`bertkit.weights.tables`).

Every input passes :meth:`BERT.validate_inputs` (:mod:`bertkit.modeling.inputs`) first, so a
bad input is a clear ``TypeError`` / ``ValueError`` naming the argument, never an error from
deep inside a layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertkit.config import BERTConfig
from bertkit.modeling import fast, unpad
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.modeling.fast import Linear
from bertkit.modeling.inputs import ModelInputs, validate_inputs, value_checks_disabled
from bertkit.modeling.layers import BERTEmbeddings, BERTPooler, default_position_ids
from bertkit.modeling.variants import layer_variant


@dataclass
class BERTEncoding:
    """Everything the backbone computed for one batch.

    ``hidden_states`` (when asked) holds L+1 tensors ``[B, L, H]``: the embedding output
    first, then each layer's output. ``attentions`` / ``cross_attentions`` hold one
    ``[B, nh, L, S]`` tensor of attention probabilities per layer.
    """

    last_hidden_state: torch.Tensor
    pooled_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


class BERTEncoder(nn.Module):
    """The stack of layers (``encoder.layer.{i}``), with optional gradient checkpointing.

    The layers are :class:`~bertkit.modeling.layers.BERTLayer` or the family's variant
    (:mod:`bertkit.modeling.variants`), with the variant's shared context module (``encoder.<context_name>``,
    called once per forward) and final norm (``encoder.final_norm``) where it has them.
    """

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.variant = layer_variant(config)
        build_layer, build_context, build_norm = (self.variant.build(part) for part in ("layer", "context",
                                                                                        "final_norm"))
        self.layer = nn.ModuleList(build_layer(config, i) for i in range(config.num_hidden_layers))
        self.context_name = self.variant.context_name if build_context is not None else None
        if build_context is not None:
            self.add_module(self.context_name, build_context(config))
        self.final_norm = build_norm(config) if build_norm is not None else None
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor, allowed, *, output_hidden_states: bool = False,
                output_attentions: bool = False, self_cache=None, last_layer_positions: slice | None = None,
                position_ids: torch.Tensor | None = None, **layer_kwargs):
        """``last_layer_positions``: compute the last layer only at these positions (see :class:`BERTLayer`).
        ``position_ids`` go to the variant's context (BERT's layers do not read them)."""
        if self.context_name is not None:
            context = getattr(self, self.context_name)
            layer_kwargs.update(context(x, allowed=allowed, position_ids=position_ids,
                                        packing=layer_kwargs.get("packing")))
        hidden, attns, cross = [x] if output_hidden_states else None, [], []
        use_checkpoint = self.gradient_checkpointing and self.training and torch.is_grad_enabled() \
            and self_cache is None
        for i, layer in enumerate(self.layer):
            if i == len(self.layer) - 1 and last_layer_positions is not None:
                layer_kwargs = {**layer_kwargs, "query_positions": last_layer_positions}
            if use_checkpoint:
                x, a, c = checkpoint(fast.pinned(layer), x, allowed, use_reentrant=False,
                                     output_attentions=output_attentions, **layer_kwargs)
            else:
                x, a, c = layer(x, allowed, self_cache=self_cache, output_attentions=output_attentions,
                                **layer_kwargs)
            if i == len(self.layer) - 1 and self.final_norm is not None:
                x = self.final_norm(x)
            if output_hidden_states:
                hidden.append(x)
            attns.append(a)
            cross.append(c)
        return x, hidden, attns, cross


class BERT(BERTPreTrainedModel):
    """The bidirectional Transformer backbone (HF's ``BertModel``, or ``RobertaModel`` for a ``"roberta"``
    family config; lucid's ``BERT``).

    Where the embeddings are narrower than the layers (ELECTRA's ``embedding_size``), ``embeddings_project``
    (a Linear E -> H, HF's ``electra.embeddings_project``) maps them to H; otherwise it is None.

    Args:
        config: the architecture.
        add_pooling_layer: build the pooler (``tanh(dense(h[:, 0]))``); without it
            ``pooled_output`` is None. None: the family's bare backbone's choice (``Family.pooler``:
            BERT and RoBERTa have one, DistilBERT and ELECTRA none).
    """

    hf_architecture = "BertModel"
    #: Unpadded execution (:mod:`bertkit.modeling.unpad`) on the fast path when a batch has enough
    #: padding: outputs at padding positions are then 0. The compat models, which reproduce their
    #: references at every position (padding included), set it False.
    drops_padding: bool = True

    def __init__(self, config: BERTConfig, add_pooling_layer: bool | None = None):
        super().__init__(config)
        self.embeddings = (layer_variant(config).build("embeddings") or BERTEmbeddings)(config)
        self.embeddings_project = Linear(config.embedding_width, config.hidden_size) \
            if config.embedding_width != config.hidden_size and not getattr(self.embeddings, "projects", False) \
            else None
        self.encoder = BERTEncoder(config)
        if add_pooling_layer is None:
            add_pooling_layer = config.family_spec.pooler
        self.pooler = BERTPooler(config) if add_pooling_layer else None
        self.post_init()

    @property
    def bert(self) -> BERT:
        return self

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.LongTensor | None = None, position_ids: torch.LongTensor | None = None,
                inputs_embeds: torch.FloatTensor | None = None,
                encoder_hidden_states: torch.FloatTensor | None = None,
                encoder_attention_mask: torch.Tensor | None = None, past_key_values=None,
                use_cache: bool | None = None,
                cache_position: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encode a batch; returns ``(sequence_output [B, L, H], pooled_output [B, H] or None)``.

        The inputs are those of :meth:`validate_inputs`, which checks them first.
        Decoders (``is_decoder``) add the causal mask themselves.
        """
        out = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                          encoder_hidden_states, encoder_attention_mask, past_key_values, use_cache,
                          cache_position)
        return out.last_hidden_state, out.pooled_output

    def encode(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.LongTensor | None = None, position_ids: torch.LongTensor | None = None,
               inputs_embeds: torch.FloatTensor | None = None,
               encoder_hidden_states: torch.FloatTensor | None = None,
               encoder_attention_mask: torch.Tensor | None = None, past_key_values=None,
               use_cache: bool | None = None, cache_position: torch.Tensor | None = None, *,
               output_hidden_states: bool = False, output_attentions: bool = False,
               first_token_only: bool = False) -> BERTEncoding:
        """Like :meth:`forward`, returning a :class:`BERTEncoding` (all layers on request).

        ``first_token_only``: for heads that read only the first ([CLS]) token (the pooler): the
        last layer is computed at that position alone (it still attends to every token), so
        ``last_hidden_state`` is ``[B, 1, H]``; the pooled output is the same as without it. It
        applies to encoders without a cache and without hidden states or attentions requested,
        and is ignored otherwise.
        """
        inputs = self.validate_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                                      encoder_hidden_states=encoder_hidden_states,
                                      encoder_attention_mask=encoder_attention_mask,
                                      past_key_values=past_key_values, use_cache=use_cache,
                                      cache_position=cache_position)
        cache_position, length = inputs.cache_position, inputs.length
        position_ids = inputs.position_ids
        if position_ids is None:  # [1, L], or [B, L] where the family's positions skip padding tokens
            position_ids = default_position_ids(self.config, inputs.input_ids, cache_position)
        token_type_ids = inputs.token_type_ids
        if token_type_ids is None:
            token_type_ids = torch.zeros(1, length, dtype=torch.long, device=cache_position.device)
        allowed = build_attention_mask(inputs.attention_mask, inputs.key_length, cache_position,
                                       causal=self.config.is_decoder)
        encoder_allowed = None
        if inputs.encoder_attention_mask is not None:
            encoder_allowed = build_attention_mask(inputs.encoder_attention_mask,
                                                   inputs.encoder_attention_mask.shape[-1], cache_position,
                                                   causal=False)

        first_only = first_token_only and not (self.config.is_decoder or inputs.self_cache is not None
                                               or output_hidden_states or output_attentions)
        packing = None
        if allowed is not None and self.drops_padding and self.encoder.variant.unpadded and not (
                self.config.is_decoder or inputs.self_cache is not None
                or inputs.encoder_hidden_states is not None or output_attentions):
            packing = unpad.plan(inputs.attention_mask, allowed, need_first=first_only)
        if packing is None:
            x = self.embeddings(inputs.input_ids, token_type_ids, position_ids, inputs.inputs_embeds)
        else:  # unpadded execution: the embeddings and the encoder see the real tokens alone, [N, H]
            x = self.embeddings(*(None if t is None else packing.pack(t) for t in (
                inputs.input_ids, token_type_ids, position_ids, inputs.inputs_embeds)))
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        x, hidden, attns, cross = self.encoder(
            x, allowed, encoder_hidden_states=inputs.encoder_hidden_states, encoder_allowed=encoder_allowed,
            self_cache=inputs.self_cache, cross_cache=inputs.cross_cache, cache_position=cache_position,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions,
            last_layer_positions=slice(0, 1) if first_only else None,
            position_ids=position_ids,  # [1|B, L], padded layout even when packed (the context packs what it needs)
            **({"packing": packing} if packing is not None else {}))
        if packing is not None:
            x = x if first_only else packing.unpack(x)
            hidden = [packing.unpack(h) for h in hidden] if output_hidden_states else hidden
        return BERTEncoding(
            last_hidden_state=x,
            pooled_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attns) if output_attentions else None,
            cross_attentions=tuple(cross) if output_attentions and encoder_hidden_states is not None else None,
        )

    def validate_inputs(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                        inputs_embeds=None, *, encoder_hidden_states=None, encoder_attention_mask=None,
                        past_key_values=None, use_cache: bool | None = None, cache_position=None,
                        batch_dims: int = 1) -> ModelInputs:
        """Check and normalise the inputs for this model: :func:`bertkit.modeling.inputs.validate_inputs`."""
        return validate_inputs(self.config, self.embeddings.word_embeddings.weight, input_ids, attention_mask,
                               token_type_ids, position_ids, inputs_embeds,
                               encoder_hidden_states=encoder_hidden_states,
                               encoder_attention_mask=encoder_attention_mask, past_key_values=past_key_values,
                               use_cache=use_cache, cache_position=cache_position, batch_dims=batch_dims)


def build_attention_mask(mask: torch.Tensor | None, key_length: int, q_positions: torch.Tensor, *,
                         causal: bool) -> torch.Tensor | None:
    """The boolean mask ``[B|1, 1|nh, L|1, S]`` (True = attend) for :func:`~bertkit.modeling.layers.attend`.

    ``mask`` is a boolean mask checked by :meth:`BERT.validate_inputs`: ``[B, S']`` (``S' <= S``;
    the missing tail, a static cache's unwritten slots, is masked), ``[B, L, S]`` or
    ``[B, 1|nh, L, S]``. It is combined with the causal rule ``key_pos <= q_positions``
    (``q_positions [L]``) when ``causal``. Rows with no key to attend to (e.g. fully padded
    sequences) are opened to every key so that no NaN appears; their outputs carry no
    meaning. Returns None when nothing is masked (the fast path; not taken while compiling).
    """
    allowed = None
    if mask is not None:
        if mask.dim() == 2:
            if mask.shape[1] < key_length:
                mask = torch.nn.functional.pad(mask, (0, key_length - mask.shape[1]), value=False)
            allowed = mask[:, None, None, :]  # [B, S] -> [B, 1, 1, S]
        elif mask.dim() == 3:
            allowed = mask[:, None]  # [B, L, S] -> [B, 1, L, S]
        else:
            allowed = mask
    if causal:
        keys = torch.arange(key_length, device=q_positions.device)
        future_ok = keys[None, :] <= q_positions[:, None]  # [L, S]
        allowed = future_ok[None, None] if allowed is None else allowed & future_ok
    if allowed is None:
        return None
    allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    if not causal and not value_checks_disabled() and bool(allowed.all()):
        return None
    return allowed
