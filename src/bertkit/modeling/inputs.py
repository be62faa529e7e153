"""Model inputs checked once, before anything runs: the one place where bad inputs are caught.

:func:`validate_inputs` turns what a user passes (tensors, Python lists, numpy arrays) into
checked tensors on the model's device, or raises a ``TypeError`` (wrong kind or dtype) or
``ValueError`` (wrong shape or value) naming the argument, what was expected and how to fix
it — never an error from deep inside a layer. :class:`~bertkit.modeling.backbone.BERT`
calls it on every forward (task heads reach it through ``self.bert``; multiple choice calls
it on its ``[B, C, L]`` inputs before flattening).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from bertkit.config import BERTConfig
from bertkit.modeling.cache import KVCache, split_cache


def validate_inputs(config: BERTConfig, weight: torch.Tensor, input_ids=None, attention_mask=None,
                    token_type_ids=None, position_ids=None, inputs_embeds=None, *, encoder_hidden_states=None,
                    encoder_attention_mask=None, past_key_values=None, use_cache: bool | None = None,
                    cache_position=None, batch_dims: int = 1) -> ModelInputs:
    """Check and normalise the inputs of a model with ``config`` whose word embeddings are ``weight``
    (their device and dtype are the model's); the one place where bad inputs are caught.

    Accepted (``*B`` is ``[batch]``, or ``[batch, choices]`` with ``batch_dims=2``; L the
    sequence length; S the key length: cached + new tokens, or the encoder's length):

    * exactly one of ``input_ids [*B, L]`` (torch.long/int; int8/int16 are widened; nested
      lists and numpy integer arrays are converted to torch.long) and ``inputs_embeds
      [*B, L, hidden_size]`` (floating point); ids in ``[0, vocab_size)``, ``B >= 1``, ``L >= 1``;
    * ``token_type_ids`` / ``position_ids``: integer ids shaped like ``input_ids`` (any batch
      dimension may be 1), or ``[L]``, shared by the batch; values in ``[0, type_vocab_size)`` /
      ``[0, max_position_embeddings)``. Without ``position_ids``, ``past + L`` may not exceed
      ``config.max_tokens`` (``max_position_embeddings``, less ``pad_token_id + 1`` for RoBERTa);
    * ``attention_mask``: 1 = attend, 0 = masked (bool, integer or float holding only 0/1),
      ``[*B, S]`` (padding; with a :class:`~bertkit.StaticKVCache` it may stop after the last
      written position), or per query ``[*B, L, S]`` / ``[*B, 1 or num_heads, L, S]``;
      any batch dimension may be 1 to broadcast. An additive mask (0 / -inf) is refused:
      pass ``mask == 0``;
    * ``encoder_hidden_states [B, S_enc, hidden_size]`` (needs ``add_cross_attention``) and
      ``encoder_attention_mask`` as ``attention_mask`` over ``S_enc``;
    * ``past_key_values`` / ``use_cache`` / ``cache_position [L]`` as in :mod:`bertkit.modeling.cache`.

    Tensors are moved to the model's device, lists and arrays created there; masks
    become boolean. Wrong kinds or dtypes raise ``TypeError``, wrong shapes or values
    ``ValueError``; messages name the argument, what was got and what was expected.
    The value checks (id ranges, 0/1 masks) cost one host-device sync together and are
    skipped while ``torch.compile`` or ``torch.jit.trace`` traces the model.
    """
    given = _Given(config, weight.device, weight.dtype, batch_dims, input_ids=input_ids,
                   attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
                   inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_hidden_states,
                   encoder_attention_mask=encoder_attention_mask, past_key_values=past_key_values,
                   use_cache=use_cache, cache_position=cache_position)
    for check in CHECKS:
        check(given)
    _check_values(given.ranges, given.masks)
    return ModelInputs(input_ids=given.input_ids, attention_mask=given.attention_mask,
                       token_type_ids=given.token_type_ids, position_ids=given.position_ids,
                       inputs_embeds=given.inputs_embeds, batch_shape=given.batch_shape, length=given.length,
                       cache_position=given.cache_position, key_length=given.key_length,
                       self_cache=given.self_cache, cross_cache=given.cross_cache,
                       encoder_hidden_states=given.encoder_hidden_states,
                       encoder_attention_mask=given.encoder_attention_mask)


@dataclass
class _Given:
    """The arguments of one :func:`validate_inputs` call, replaced by their checked tensors as the checks run, and
    what the checks settle for the ones after them (the sequence's shape, the cache, the queued value checks)."""

    config: BERTConfig
    device: torch.device
    dtype: torch.dtype
    batch_dims: int
    input_ids: Any = None
    attention_mask: Any = None
    token_type_ids: Any = None
    position_ids: Any = None
    inputs_embeds: Any = None
    encoder_hidden_states: Any = None
    encoder_attention_mask: Any = None
    past_key_values: Any = None
    use_cache: bool | None = None
    cache_position: Any = None
    # settled by the checks
    ref_name: str = ""
    batch_shape: tuple[int, ...] = ()
    length: int = 0
    self_cache: KVCache | None = None
    cross_cache: KVCache | None = None
    past: int = 0
    given_cache_position: bool = False
    key_length: int = 0
    ranges: list[_RangeCheck] = field(default_factory=list)
    masks: list[tuple[str, torch.Tensor]] = field(default_factory=list)

    @property
    def lead(self) -> str:
        """The batch axes' names in messages: ``"batch"`` or ``"batch, choices"``."""
        return ", ".join(("batch", "choices")[:self.batch_dims])

    @property
    def ids_shape(self) -> tuple[int, ...]:
        return (*self.batch_shape, self.length)


def _token_inputs(g: _Given) -> None:
    """Exactly one of input_ids and inputs_embeds, of the right kind and rank; ids queued for their range."""
    cfg, lead = g.config, g.lead
    if (g.input_ids is None) == (g.inputs_embeds is None):
        raise ValueError(f"Pass exactly one of input_ids [{lead}, seq] or inputs_embeds [{lead}, seq, hidden].")
    if g.input_ids is not None:
        g.input_ids = ref = _index_tensor("input_ids", g.input_ids, g.device)
        g.ref_name, rank = "input_ids", g.batch_dims + 1
        if ref.dim() != rank:
            raise ValueError(f"input_ids must be [{lead}, seq] token ids, got shape {tuple(ref.shape)}"
                             + ("; to pass one example, add the batch dimension: input_ids[None]."
                                if ref.dim() == rank - 1 else "."))
        g.ranges.append(_RangeCheck("input_ids", ref, cfg.vocab_size,
                                    f"this model's vocabulary (vocab_size={cfg.vocab_size})",
                                    "use the tokenizer this model was trained with, or resize_token_embeddings() "
                                    "after adding tokens"))
    else:
        g.inputs_embeds = ref = _float_tensor("inputs_embeds", g.inputs_embeds, g.device, g.dtype)
        g.ref_name, rank = "inputs_embeds", g.batch_dims + 2
        if ref.dim() != rank or ref.shape[-1] != cfg.embedding_width:
            width = "hidden_size" if cfg.embedding_size is None else "embedding_size"
            raise ValueError(f"inputs_embeds must be [{lead}, seq, {cfg.embedding_width}] ({width}), "
                             f"got shape {tuple(ref.shape)}.")
    g.batch_shape, g.length = tuple(ref.shape[:g.batch_dims]), ref.shape[g.batch_dims]
    if 0 in g.batch_shape:
        raise ValueError(f"{g.ref_name} has shape {tuple(ref.shape)}: an empty batch; pass at least one sequence.")
    if g.length == 0:
        raise ValueError(f"{g.ref_name} has shape {tuple(ref.shape)}: empty sequences (seq = 0); every sequence "
                         "needs at least one token (the tokenizer adds [CLS] and [SEP]).")


def _cache(g: _Given) -> None:
    """The caches, the new tokens' cache slots (``cache_position``) and the number of keys."""
    g.self_cache, g.cross_cache = _resolve_cache(g.config, g.past_key_values, g.use_cache)
    g.past = g.self_cache.get_seq_length() if g.self_cache is not None else 0
    g.given_cache_position = g.cache_position is not None
    if g.given_cache_position:
        g.cache_position = _index_tensor("cache_position", g.cache_position, g.device)
        if tuple(g.cache_position.shape) != (g.length,):
            raise ValueError(f"cache_position must be [{g.length}] (the cache slot of each new token), "
                             f"got shape {tuple(g.cache_position.shape)}.")
    else:
        g.cache_position = torch.arange(g.past, g.past + g.length, device=g.device)
    g.key_length = g.past_key_values.key_length(g.cache_position) if g.past_key_values is not None else g.length


def _token_types(g: _Given) -> None:
    """Segment ids per token, queued for their range; dropped for a family without segment embeddings."""
    cfg = g.config
    if not cfg.family_spec.token_types or cfg.type_vocab_size == 0:
        g.token_type_ids = None  # a family without segment embeddings ignores them (tokenizers may still send 0s)
    if g.token_type_ids is None:
        return
    g.token_type_ids = _index_tensor("token_type_ids", g.token_type_ids, g.device)
    _check_per_token("token_type_ids", g.token_type_ids, g.ids_shape, g.ref_name, "segment id")
    g.ranges.append(_RangeCheck("token_type_ids", g.token_type_ids, cfg.type_vocab_size,
                                f"this model's segments (type_vocab_size={cfg.type_vocab_size})",
                                "use 0 for the first text and 1 for the second"))


def _grows_beyond_positions(config) -> bool:
    """Whether ``config``'s positions extend past ``max_position_embeddings`` by design: a ``dynamic`` rope (its
    base grows with the sequence; :mod:`bertkit.modeling.rotary`)."""
    return config.family_spec.rope and (config.rope_scaling or {}).get("rope_type") == "dynamic"


def _positions(g: _Given) -> None:
    """Position ids (or the cache slots, or the length after the cache) within the model's positions."""
    cfg = g.config
    positions_hint = f"truncate the input to {cfg.max_tokens} tokens (tokenizer truncation=True)"
    positions_range = f"this model's positions (max_position_embeddings={cfg.max_position_embeddings})"
    # a family whose positions start at pad_token_id + 1 (RoBERTa) takes that many tokens fewer
    offset_note = f", positions from {cfg.position_offset}" if cfg.position_offset else ""
    if g.position_ids is not None:
        g.position_ids = _index_tensor("position_ids", g.position_ids, g.device)
        _check_per_token("position_ids", g.position_ids, g.ids_shape, g.ref_name, "position")
        g.ranges.append(_RangeCheck("position_ids", g.position_ids, cfg.max_position_embeddings, positions_range,
                                    positions_hint))
    elif g.given_cache_position:
        g.ranges.append(_RangeCheck("cache_position", g.cache_position, cfg.max_tokens,
                                    f"this model's {cfg.max_tokens} token positions (max_position_embeddings="
                                    f"{cfg.max_position_embeddings}{offset_note})", positions_hint))
    elif g.past + g.length > cfg.max_tokens and not _grows_beyond_positions(cfg):
        cached = f" after {g.past} cached tokens" if g.past else ""
        limit = f"{cfg.max_tokens} tokens (max_position_embeddings={cfg.max_position_embeddings}{offset_note})" \
            if cfg.position_offset else f"max_position_embeddings={cfg.max_position_embeddings}"
        raise ValueError(f"{g.ref_name} has {g.length} tokens{cached}, more than this model's "
                         f"{limit}; {positions_hint}.")


def _attention_mask(g: _Given) -> None:
    """A 0/1 padding or per-query mask over the keys (queued for its 0/1 check)."""
    if g.attention_mask is None:
        return
    g.attention_mask = _mask_tensor("attention_mask", g.attention_mask, g.device, g.masks)
    past, length, key_length = g.past, g.length, g.key_length
    # The last key a 2-D mask must cover: a StaticKVCache's unwritten slots may be left out.
    mask_end = key_length if g.self_cache is None else \
        int(g.cache_position[-1]) + 1 if g.given_cache_position else past + length
    keys = "seq" if g.self_cache is None else f"{past} cached + {length} new tokens" \
        if key_length == past + length else f"{key_length} cache slots"
    _check_mask_shape("attention_mask", g.attention_mask, g.batch_shape, length, key_length, mask_end,
                      g.config.num_attention_heads, f"{g.lead}, {keys}")


def _encoder_states(g: _Given) -> None:
    """Cross-attention's encoder states: only for a model with cross-attention, ``[B, S_enc, hidden_size]``."""
    if g.encoder_hidden_states is None:
        return
    cfg = g.config
    if not cfg.add_cross_attention:
        raise ValueError("encoder_hidden_states were given but this model has no cross-attention; build it "
                         "with BERTConfig(is_decoder=True, add_cross_attention=True).")
    g.encoder_hidden_states = _float_tensor("encoder_hidden_states", g.encoder_hidden_states, g.device, g.dtype)
    shape = tuple(g.encoder_hidden_states.shape)
    if len(shape) != g.batch_dims + 2 or shape[-1] != cfg.hidden_size \
            or any(d not in (1, b) for d, b in zip(shape, g.batch_shape)) or shape[-2] == 0:
        raise ValueError(f"encoder_hidden_states must be [{', '.join(map(str, g.batch_shape))}, enc_seq, "
                         f"{cfg.hidden_size}] (batch, encoder length >= 1, hidden_size), got shape {shape}.")


def _encoder_mask(g: _Given) -> None:
    """The encoder states' mask, over the encoder's (or the cross-attention cache's) positions."""
    if g.encoder_attention_mask is None:
        return
    if g.encoder_hidden_states is not None:
        encoder_length = g.encoder_hidden_states.shape[-2]
    elif g.cross_cache is not None and g.cross_cache.has_layer(0):
        encoder_length = g.cross_cache.get_seq_length()
    else:
        raise ValueError("encoder_attention_mask was given without encoder_hidden_states (and no "
                         "cross-attention cache holds them); pass the encoder states it masks.")
    g.encoder_attention_mask = _mask_tensor("encoder_attention_mask", g.encoder_attention_mask, g.device, g.masks)
    _check_mask_shape("encoder_attention_mask", g.encoder_attention_mask, g.batch_shape, g.length,
                      encoder_length, encoder_length, g.config.num_attention_heads, f"{g.lead}, encoder positions")


#: :func:`validate_inputs`'s checks, in the order they run (each reads what the ones before it settled; the
#: first bad argument is the one named); the value checks they queue run last, in one host-device sync
CHECKS = (_token_inputs, _cache, _token_types, _positions, _attention_mask, _encoder_states, _encoder_mask)


@dataclass
class ModelInputs:
    """What :meth:`BERT.validate_inputs` returns: the checked inputs on the model's device.

    Arguments not given stay None; ids are torch.long or torch.int, masks boolean (True = attend)
    with the rank they were given in. ``batch_shape`` is ``(B,)`` or ``(B, C)``, ``length`` L,
    ``cache_position`` the ``[L]`` cache slots (``past .. past + L - 1`` by default) and
    ``key_length`` S, the number of keys self-attention sees.
    """

    input_ids: torch.Tensor | None
    attention_mask: torch.Tensor | None
    token_type_ids: torch.Tensor | None
    position_ids: torch.Tensor | None
    inputs_embeds: torch.Tensor | None
    batch_shape: tuple[int, ...]
    length: int
    cache_position: torch.Tensor
    key_length: int
    self_cache: KVCache | None = None
    cross_cache: KVCache | None = None
    encoder_hidden_states: torch.Tensor | None = None
    encoder_attention_mask: torch.Tensor | None = None

    def merged_batch(self) -> dict[str, torch.Tensor | None]:
        """The token inputs with their batch dimensions merged (``[B, C, ...]`` -> ``[B*C, ...]``, for
        multiple choice), broadcast ones expanded first; keyword arguments for :meth:`BERT.forward`."""
        n = math.prod(self.batch_shape)

        def merge(t: torch.Tensor | None, per_example_dims: int) -> torch.Tensor | None:
            if t is None:
                return None
            tail = t.shape[t.dim() - per_example_dims:]
            return t.expand(*self.batch_shape, *tail).reshape(n, *tail)  # [*B, ...] -> [B*C, ...]

        rank = len(self.batch_shape)
        mask = self.attention_mask
        return dict(input_ids=merge(self.input_ids, 1),
                    attention_mask=merge(mask, mask.dim() - rank) if mask is not None else None,
                    token_type_ids=merge(self.token_type_ids, 1), position_ids=merge(self.position_ids, 1),
                    inputs_embeds=merge(self.inputs_embeds, 2))


@dataclass
class _RangeCheck:
    """``tensor`` must lie in ``[0, high)``: ``what`` names that range, ``fix`` says how to get there."""

    name: str
    tensor: torch.Tensor
    high: int
    what: str
    fix: str


def _as_tensor(name: str, value, device: torch.device, what: str) -> torch.Tensor:
    """``value`` as a tensor on ``device``: tensors are moved, nested lists/tuples and numpy arrays converted."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be {what}, not text; tokenize first, e.g. tokenizer(text, return_tensors='pt').")
    if isinstance(value, Mapping):
        raise TypeError(f"{name} got a {type(value).__name__} (a tokenizer's output?); pass its entries as keyword "
                        "arguments: model(**encoding).")
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__array__"):
        raise TypeError(f"{name} must be {what} (a tensor, nested lists or a numpy array), got {type(value).__name__}.")
    try:
        return torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{name} could not be made into a tensor ({e}); every row must have the same length "
                         "(pad them, e.g. tokenizer padding=True) and a list of tensors needs torch.stack.") from None


def _index_tensor(name: str, value, device: torch.device) -> torch.Tensor:
    """Ids as an integer tensor nn.Embedding takes; bool, unsigned and floating dtypes are a TypeError."""
    t = _as_tensor(name, value, device, "integer ids")
    converted = not isinstance(value, torch.Tensor)
    if t.dtype in (torch.long, torch.int):
        return t.long() if converted else t
    if t.dtype in (torch.int8, torch.int16) or (converted and t.numel() == 0):  # [] converts to float
        return t.long()
    if t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids (torch.long), got a torch.bool tensor; booleans look like a "
                        f"mask (pass it as attention_mask); convert ids with {name}.long().")
    raise TypeError(f"{name} must hold integer ids (torch.long), got dtype {t.dtype}; if it holds ids, "
                    f"convert with {name}.long().")


def _float_tensor(name: str, value, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Vectors as a floating-point tensor; lists and arrays take the model's dtype."""
    t = _as_tensor(name, value, device, "float vectors")
    if not isinstance(value, torch.Tensor):
        t = t.to(dtype)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor (vectors, not ids), got dtype {t.dtype}.")
    return t


def _mask_tensor(name: str, value, device: torch.device, to_check: list[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """A 0/1 mask as booleans; a non-boolean one is queued in ``to_check`` for the 0/1 value check."""
    t = _as_tensor(name, value, device, "a 0/1 mask")
    if t.dtype == torch.bool:
        return t
    if t.is_complex():
        raise TypeError(f"{name} must hold 0/1 or booleans (1 = attend), got dtype {t.dtype}.")
    to_check.append((name, t))
    return t != 0


def _check_per_token(name: str, t: torch.Tensor, ids_shape: tuple[int, ...], ref_name: str, what: str) -> None:
    """``t`` must have ``ids_shape`` ``[*B, L]`` (any batch dim may be 1), or be ``[L]``."""
    *batch_shape, length = ids_shape
    if t.dim() == 1 and t.shape[0] == length:
        return
    if t.dim() == len(ids_shape) and t.shape[-1] == length and all(d in (1, b) for d, b in zip(t.shape, batch_shape)):
        return
    raise ValueError(f"{name} has shape {tuple(t.shape)}; expected one {what} per token of {ref_name}: "
                     f"{list(ids_shape)} (or [{length}] for every sequence alike).")


def _check_mask_shape(name: str, mask: torch.Tensor, batch_shape: tuple[int, ...], length: int, key_length: int,
                      min_key_length: int, heads: int, axes: str) -> None:
    """``mask`` must be ``[*B, S]``, ``[*B, L, S]`` or ``[*B, 1|heads, L, S]`` (batch dims may be 1).

    ``axes`` names the dimensions of the 2-D form in the message (``"batch, seq"``).

    A 2-D padding mask may be shorter than S down to ``min_key_length`` (a static cache's
    unwritten slots); a per-query mask covers S exactly.
    """
    rank = len(batch_shape)
    shape = tuple(mask.shape)
    extra = shape[rank:]
    fits = mask.dim() > rank and all(d in (1, b) for d, b in zip(shape, batch_shape)) and (
        (len(extra) == 1 and min_key_length <= extra[0] <= key_length)
        or (len(extra) == 2 and extra[0] in (1, length) and extra[1] == key_length)
        or (len(extra) == 3 and extra[0] in (1, heads) and extra[1] in (1, length) and extra[2] == key_length))
    if not fits:
        b = ", ".join(map(str, batch_shape))
        raise ValueError(f"{name} has shape {shape}; expected [{b}, {key_length}] ({axes}; 1 = attend, 0 = masked), "
                         f"or a per-query mask [{b}, {length}, {key_length}] or [{b}, 1 or {heads}, {length}, "
                         f"{key_length}].")


def value_checks_disabled() -> bool:
    """True while torch.compile or torch.jit.trace records the forward: data-dependent checks would break it."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def _check_values(ranges: list[_RangeCheck], masks: list[tuple[str, torch.Tensor]]) -> None:
    """Raise a ValueError for the first id outside its range or mask value other than 0/1.

    All checks reduce to one flag on the device, so a valid batch costs one host sync.
    """
    if not (ranges or masks) or value_checks_disabled():
        return
    flags = []
    for check in ranges:
        lo, hi = torch.aminmax(check.tensor)
        flags.append((lo < 0) | (hi >= check.high))
    flags += [((mask != 0) & (mask != 1)).any() for _, mask in masks]
    flags = torch.stack(flags)
    if not bool(flags.any()):
        return
    for check, bad in zip(ranges, flags.tolist()):
        if bad:
            t = check.tensor
            outside = t[(t < 0) | (t >= check.high)]
            raise ValueError(f"{check.name} holds {int(outside[0])}, outside {check.what}: valid values are 0 to "
                             f"{check.high - 1} ({outside.numel()} of {t.numel()} are outside); {check.fix}.")
    name, _ = next(m for m, bad in zip(masks, flags.tolist()[len(ranges):]) if bad)
    raise ValueError(f"{name} must hold 0/1 or booleans (1 = attend, 0 = masked); got other values. "
                     "For an additive mask (0 / -inf) pass `mask == 0` instead.")


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
