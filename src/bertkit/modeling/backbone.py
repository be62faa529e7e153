"""BERT: embeddings + a stack of layers (+ pooler). Masks, input checks and KV-cache plumbing live here.

``BERT.forward`` returns ``(sequence_output [B, L, H], pooled_output [B, H] | None)``;
``BERT.encode`` returns a :class:`BERTEncoding` with every layer's hidden states and
attention probabilities on request. Parameter names match HF's ``BertModel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertkit.config import BERTConfig
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.modeling.cache import split_cache
from bertkit.modeling.layers import BERTEmbeddings, BERTLayer, BERTPooler


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
    """The stack of :class:`BERTLayer` (``encoder.layer.{i}``), with optional gradient checkpointing."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.layer = nn.ModuleList(BERTLayer(config, i) for i in range(config.num_hidden_layers))
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor, allowed, *, output_hidden_states: bool = False,
                output_attentions: bool = False, self_cache=None, **layer_kwargs):
        hidden, attns, cross = [x] if output_hidden_states else None, [], []
        use_checkpoint = self.gradient_checkpointing and self.training and torch.is_grad_enabled() \
            and self_cache is None
        for layer in self.layer:
            if use_checkpoint:
                x, a, c = checkpoint(layer, x, allowed, use_reentrant=False, output_attentions=output_attentions,
                                     **layer_kwargs)
            else:
                x, a, c = layer(x, allowed, self_cache=self_cache, output_attentions=output_attentions,
                                **layer_kwargs)
            if output_hidden_states:
                hidden.append(x)
            attns.append(a)
            cross.append(c)
        return x, hidden, attns, cross


class BERT(BERTPreTrainedModel):
    """The bidirectional Transformer backbone (HF's ``BertModel``; lucid's ``BERT``).

    Args:
        config: the architecture.
        add_pooling_layer: build the pooler (``tanh(dense(h[:, 0]))``); without it
            ``pooled_output`` is None.
    """

    hf_architecture = "BertModel"

    def __init__(self, config: BERTConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BERTEmbeddings(config)
        self.encoder = BERTEncoder(config)
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

        ``attention_mask`` is 2-D ``[B, S]`` 0/1 (1 = attend), or 3-D ``[B, L, S]`` / 4-D
        ``[B, 1|nh, L, S]``, booleans or 0/1. With a cache, S covers the cached tokens
        plus the new ones. Decoders (``is_decoder``) add the causal mask themselves.
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
               output_hidden_states: bool = False, output_attentions: bool = False) -> BERTEncoding:
        """Like :meth:`forward`, returning a :class:`BERTEncoding` (all layers on request)."""
        cfg = self.config
        batch, length, device = _check_inputs(cfg, input_ids, inputs_embeds)
        self_cache, cross_cache = _resolve_cache(cfg, past_key_values, use_cache)
        past = self_cache.get_seq_length() if self_cache is not None else 0
        if cache_position is None:
            cache_position = torch.arange(past, past + length, device=device)
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0)  # [1, L]
        if token_type_ids is None:
            token_type_ids = torch.zeros(1, length, dtype=torch.long, device=device)
        _check_ids("position_ids", position_ids, cfg.max_position_embeddings,
                   f"sequences are limited to max_position_embeddings={cfg.max_position_embeddings} tokens; "
                   "truncate the input")
        _check_ids("token_type_ids", token_type_ids, cfg.type_vocab_size,
                   f"this model has type_vocab_size={cfg.type_vocab_size} segment ids")
        key_length = past_key_values.key_length(cache_position) if past_key_values is not None else length
        allowed = build_attention_mask(attention_mask, batch, length, key_length, cache_position,
                                       causal=cfg.is_decoder, device=device)
        encoder_allowed = None
        if encoder_attention_mask is not None:
            enc_len = encoder_attention_mask.shape[-1]
            encoder_allowed = build_attention_mask(encoder_attention_mask, batch, length, enc_len,
                                                   cache_position, causal=False, device=device,
                                                   name="encoder_attention_mask")

        x = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        x, hidden, attns, cross = self.encoder(
            x, allowed, encoder_hidden_states=encoder_hidden_states, encoder_allowed=encoder_allowed,
            self_cache=self_cache, cross_cache=cross_cache, cache_position=cache_position,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        return BERTEncoding(
            last_hidden_state=x,
            pooled_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attns) if output_attentions else None,
            cross_attentions=tuple(cross) if output_attentions and encoder_hidden_states is not None else None,
        )


# ---------------------------------------------------------------------------- checks and masks

def _check_inputs(cfg: BERTConfig, input_ids, inputs_embeds) -> tuple[int, int, torch.device]:
    """Validate the token inputs; return ``(batch, length, device)``."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids [batch, seq] or inputs_embeds [batch, seq, hidden].")
    if input_ids is not None:
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be an integer tensor [batch, seq], got "
                             f"{input_ids.dtype} of shape {tuple(input_ids.shape)}.")
        _check_ids("input_ids", input_ids, cfg.vocab_size,
                   f"the vocabulary has {cfg.vocab_size} ids; was the tokenizer built for another vocab?")
        return input_ids.shape[0], input_ids.shape[1], input_ids.device
    if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != cfg.hidden_size:
        raise ValueError(f"inputs_embeds must be [batch, seq, {cfg.hidden_size}], got {tuple(inputs_embeds.shape)}.")
    return inputs_embeds.shape[0], inputs_embeds.shape[1], inputs_embeds.device


def _check_ids(name: str, ids: torch.Tensor, high: int, hint: str) -> None:
    """Raise a ValueError naming ``name`` if any id is outside ``[0, high)``."""
    if ids.numel() == 0:
        return
    lo, hi = torch.aminmax(ids)
    if lo < 0 or hi >= high:
        raise ValueError(f"{name} holds values in [{int(lo)}, {int(hi)}] but must lie in [0, {high}): {hint}.")


def _resolve_cache(cfg: BERTConfig, past_key_values, use_cache: bool | None):
    if use_cache is None:
        use_cache = past_key_values is not None
    if use_cache and past_key_values is None:
        raise ValueError("use_cache=True needs a cache to fill: create one with `cache = bertkit.KVCache()` "
                         "and pass past_key_values=cache (bertkit caches are owned by the caller).")
    if past_key_values is not None and not use_cache:
        raise ValueError("past_key_values was given with use_cache=False; pass use_cache=True or drop the cache.")
    if past_key_values is not None and not cfg.is_decoder:
        raise ValueError("KV caching needs causal attention: build the model with BERTConfig(is_decoder=True).")
    return split_cache(past_key_values)


def build_attention_mask(mask: torch.Tensor | None, batch: int, q_len: int, k_len: int,
                         q_positions: torch.Tensor, *, causal: bool, device: torch.device,
                         name: str = "attention_mask") -> torch.Tensor | None:
    """The boolean mask ``[B, 1|nh, L, S]`` (True = attend) for :func:`~bertkit.modeling.layers.attend`.

    Combines the user's mask (2-D ``[B, S]``, 3-D ``[B, L, S]`` or 4-D, booleans or 0/1)
    with the causal rule ``key_pos <= q_positions`` when ``causal``. A 2-D mask shorter
    than ``S`` (a preallocated cache) is padded with "masked". Rows with no key to attend
    to (e.g. fully padded sequences) are opened to every key so that no NaN appears;
    their outputs carry no meaning. Returns None when nothing is masked (the fast path).
    """
    allowed = None
    if mask is not None:
        mask = mask.to(device)
        if mask.dtype != torch.bool:
            if ((mask != 0) & (mask != 1)).any():
                raise ValueError(f"{name} must hold 0/1 or booleans (1 = attend); got other values. "
                                 "For an additive mask (0 / -inf) pass `mask == 0` instead.")
            mask = mask != 0
        if mask.dim() == 2:
            if mask.shape[0] not in (1, batch) or mask.shape[1] > k_len:
                raise ValueError(f"{name} has shape {tuple(mask.shape)}; expected [{batch}, {k_len}] "
                                 f"(batch, cached + new tokens).")
            if mask.shape[1] < k_len:
                if not causal or mask.shape[1] < int(q_positions[-1]) + 1:
                    raise ValueError(f"{name} covers {mask.shape[1]} positions but attention spans {k_len}; "
                                     "with a cache, pass the mask of the cached tokens plus the new ones.")
                mask = torch.nn.functional.pad(mask, (0, k_len - mask.shape[1]), value=False)
            allowed = mask[:, None, None, :]  # [B, S] -> [B, 1, 1, S]
        elif mask.dim() == 3:
            allowed = mask[:, None]  # [B, L, S] -> [B, 1, L, S]
        elif mask.dim() == 4:
            allowed = mask
        else:
            raise ValueError(f"{name} must be 2-D, 3-D or 4-D, got shape {tuple(mask.shape)}.")
        if allowed.shape[-1] != k_len or allowed.shape[-2] not in (1, q_len):
            raise ValueError(f"{name} has shape {tuple(mask.shape)}, which does not fit {q_len} queries "
                             f"over {k_len} keys.")
    if causal:
        keys = torch.arange(k_len, device=device)
        future_ok = keys[None, :] <= q_positions[:, None]  # [L, S]
        allowed = future_ok[None, None] if allowed is None else allowed & future_ok
    if allowed is None:
        return None
    allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    if not causal and bool(allowed.all()):
        return None
    return allowed
