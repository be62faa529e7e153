"""Key/value caches for incremental decoding with a decoder BERT (``is_decoder=True``).

Caches are owned by the caller, as in lucid::

    cache = KVCache()
    logits = model(input_ids, past_key_values=cache, use_cache=True)   # fills cache in place
    logits = model(next_ids, past_key_values=cache, use_cache=True)    # attends to the cached keys

Each layer's keys and values are ``[B, nh, S, hd]``. :class:`KVCache` grows by
concatenation; :class:`StaticKVCache` preallocates ``max_length`` slots and writes at
``cache_position`` (fixed shapes, friendlier to compilers and CUDA graphs);
:class:`EncoderDecoderCache` pairs a self-attention cache with a cross-attention cache
whose keys, computed once from the encoder states, are reused at every step.
"""

from __future__ import annotations

import torch


class KVCache:
    """Dynamic cache: one ``(keys, values)`` pair per layer, growing along the sequence axis."""

    def __init__(self) -> None:
        self.key_cache: list[torch.Tensor] = []
        self.value_cache: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.key_cache)

    def has_layer(self, layer_idx: int) -> bool:
        return layer_idx < len(self.key_cache)

    def get(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self) -> int:
        """Number of cached positions (0 when empty)."""
        return self.key_cache[0].shape[-2] if self.key_cache else 0

    def key_length(self, cache_position: torch.Tensor) -> int:
        """Length of the keys attention will see once the tokens at ``cache_position`` are added."""
        return self.get_seq_length() + len(cache_position)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int,
               cache_position: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key, value [B, nh, n, hd]`` for ``layer_idx``; return all cached keys and values."""
        if layer_idx == len(self.key_cache):
            self.key_cache.append(key)
            self.value_cache.append(value)
        elif layer_idx < len(self.key_cache):
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value], dim=-2)
        else:
            raise ValueError(f"KVCache layers must be filled in order: got layer {layer_idx}, "
                             f"have {len(self.key_cache)}.")
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Select batch rows ``beam_idx`` in every layer (beam search)."""
        for i in range(len(self.key_cache)):
            idx = beam_idx.to(self.key_cache[i].device)
            self.key_cache[i] = self.key_cache[i].index_select(0, idx)
            self.value_cache[i] = self.value_cache[i].index_select(0, idx)

    def _crop_length(self, max_length: int) -> int:
        """``max_length`` resolved: a negative value counts back from the cached length."""
        if max_length < 0:
            max_length = self.get_seq_length() + max_length
        if max_length < 0:
            raise ValueError(f"crop would leave a negative length ({max_length}).")
        return max_length

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions; a negative value drops that many from the end."""
        max_length = self._crop_length(max_length)
        self.key_cache = [k[..., :max_length, :] for k in self.key_cache]
        self.value_cache = [v[..., :max_length, :] for v in self.value_cache]

    def reset(self) -> None:
        self.key_cache.clear()
        self.value_cache.clear()


class StaticKVCache(KVCache):
    """Preallocated cache of ``max_length`` positions per layer, written at ``cache_position``.

    Buffers are allocated on the first update (taking batch size, dtype and device from
    it). Unfilled slots are excluded by the causal mask. Overflowing ``max_length`` is a
    ``ValueError``.
    """

    def __init__(self, max_length: int) -> None:
        super().__init__()
        if max_length <= 0:
            raise ValueError(f"StaticKVCache max_length must be positive, got {max_length}.")
        self.max_length = max_length
        self._length = 0

    def get_seq_length(self) -> int:
        return self._length

    def key_length(self, cache_position: torch.Tensor) -> int:
        self._check_fits(cache_position)
        return self.max_length

    def _check_fits(self, cache_position: torch.Tensor) -> int:
        end = int(cache_position[-1]) + 1
        if end > self.max_length:
            raise ValueError(f"StaticKVCache holds {self.max_length} positions; writing position {end - 1} "
                             "overflows it. Create the cache with a larger max_length.")
        return end

    def update(self, key, value, layer_idx, cache_position=None):
        n = key.shape[-2]
        if cache_position is None:
            cache_position = torch.arange(self._length, self._length + n, device=key.device)
        end = self._check_fits(cache_position)
        if layer_idx == len(self.key_cache):
            shape = (*key.shape[:2], self.max_length, key.shape[-1])
            self.key_cache.append(key.new_zeros(shape))
            self.value_cache.append(value.new_zeros(shape))
        elif layer_idx > len(self.key_cache):
            raise ValueError(f"StaticKVCache layers must be filled in order: got layer {layer_idx}.")
        self.key_cache[layer_idx].index_copy_(2, cache_position, key)
        self.value_cache[layer_idx].index_copy_(2, cache_position, value)
        if layer_idx == 0:
            self._length = max(self._length, end)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def crop(self, max_length: int) -> None:
        max_length = self._crop_length(max_length)
        for k, v in zip(self.key_cache, self.value_cache):
            k[..., max_length:, :] = 0
            v[..., max_length:, :] = 0
        self._length = min(self._length, max_length)

    def reset(self) -> None:
        super().reset()
        self._length = 0


class EncoderDecoderCache:
    """A self-attention cache plus a cross-attention cache (keys of the encoder states)."""

    def __init__(self, self_attention_cache: KVCache | None = None,
                 cross_attention_cache: KVCache | None = None) -> None:
        self.self_attention_cache = self_attention_cache if self_attention_cache is not None else KVCache()
        self.cross_attention_cache = cross_attention_cache if cross_attention_cache is not None else KVCache()

    def get_seq_length(self) -> int:
        return self.self_attention_cache.get_seq_length()

    def key_length(self, cache_position: torch.Tensor) -> int:
        return self.self_attention_cache.key_length(cache_position)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.self_attention_cache.reorder_cache(beam_idx)
        self.cross_attention_cache.reorder_cache(beam_idx)

    def crop(self, max_length: int) -> None:
        self.self_attention_cache.crop(max_length)

    def reset(self) -> None:
        self.self_attention_cache.reset()
        self.cross_attention_cache.reset()


def split_cache(past_key_values) -> tuple[KVCache | None, KVCache | None]:
    """``(self_cache, cross_cache)`` for whatever the caller passed as ``past_key_values``."""
    if past_key_values is None:
        return None, None
    if isinstance(past_key_values, EncoderDecoderCache):
        return past_key_values.self_attention_cache, past_key_values.cross_attention_cache
    if isinstance(past_key_values, KVCache):
        return past_key_values, None
    raise TypeError(
        f"past_key_values must be a bertkit KVCache, StaticKVCache or EncoderDecoderCache, "
        f"got {type(past_key_values).__name__}; create one with bertkit.KVCache()."
    )
