"""KV caches and incremental decoding: caches reproduce the full causal forward exactly.

A decoder fed its sequence one token (or one chunk) at a time through a cache must give
the logits of one full forward; the cross-attention cache computes the encoder's keys
once; the static cache matches the dynamic one; ``generate`` matches a cache-free
argmax loop; and one case is checked against HF transformers' ``BertLMHeadModel``.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import bertkit
from bertkit import BERTConfig, BERTForCausalLM, BERTForMaskedLM, EncoderDecoderCache, KVCache, StaticKVCache
from conftest import TINY, padded_batch, randomize_

ATOL = RTOL = 1e-5
IMPLS = ("eager", "sdpa")
ENC_LEN = 7


def decoder(attn: str = "sdpa", *, cross: bool = False, seed: int = 0) -> BERTForCausalLM:
    config = BERTConfig(**TINY, is_decoder=True, add_cross_attention=cross, attn_implementation=attn)
    return randomize_(BERTForCausalLM(config), seed=seed).eval()


def right_padded(length: int = 11, seed: int = 1):
    """``padded_batch``: three rows, rows 1 and 2 padded on the right (4 and 7 positions)."""
    return padded_batch(TINY["vocab_size"], 3, length, TINY["type_vocab_size"], seed)


def encoder_states(batch: int = 3, seed: int = 5):
    """Random encoder output ``[B, S_enc, H]`` and a mask with padding in two rows."""
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(batch, ENC_LEN, TINY["hidden_size"], generator=g)
    mask = torch.ones(batch, ENC_LEN, dtype=torch.long)
    mask[1, ENC_LEN - 2:] = 0
    mask[2, ENC_LEN - 5:] = 0
    return states, mask


def incremental(model, input_ids, attention_mask, token_type_ids, cache, chunks, **kwargs):
    """Logits of feeding ``input_ids`` in pieces of the sizes ``chunks`` through ``cache``."""
    assert sum(chunks) == input_ids.shape[1]
    out, start = [], 0
    for n in chunks:
        end = start + n
        out.append(model(input_ids[:, start:end], attention_mask[:, :end], token_type_ids[:, start:end],
                         past_key_values=cache, use_cache=True, **kwargs))
        start = end
    return torch.cat(out, dim=1)


# ---------------------------------------------------------------------------- self-attention cache

@pytest.mark.parametrize("attn", IMPLS)
@pytest.mark.parametrize("chunks", [[1] * 11, [4, 1, 3, 3], [11]], ids=["tokens", "chunks", "one-shot"])
def test_incremental_matches_full_forward(attn, chunks):
    model = decoder(attn)
    ids, mask, types = right_padded()
    with torch.no_grad():
        full = model(ids, mask, types)
        cache = KVCache()
        step = incremental(model, ids, mask, types, cache, chunks)
    assert_close(step, full, atol=ATOL, rtol=RTOL)
    assert cache.get_seq_length() == ids.shape[1]
    assert len(cache) == TINY["num_hidden_layers"]
    k, v = cache.get(0)
    nh = TINY["num_attention_heads"]
    assert k.shape == v.shape == (3, nh, 11, TINY["hidden_size"] // nh)


def test_incremental_without_mask_matches_full_forward():
    model = decoder()
    ids, _, types = right_padded(seed=3)
    with torch.no_grad():
        full = model(ids, token_type_ids=types)
        cache = KVCache()
        step = torch.cat([model(ids[:, t:t + 1], token_type_ids=types[:, t:t + 1], past_key_values=cache,
                                use_cache=True) for t in range(ids.shape[1])], dim=1)
    assert_close(step, full, atol=ATOL, rtol=RTOL)


def test_cache_changes_the_result():
    """Sanity: a step without the cache sees no history and differs (the comparison above can fail)."""
    model = decoder()
    ids, mask, types = right_padded()
    with torch.no_grad():
        full = model(ids, mask, types)
        alone = model(ids[:, 5:6], mask[:, 5:6], types[:, 5:6], position_ids=torch.tensor([[5]]))
    assert not torch.allclose(alone[:, 0], full[:, 5], atol=1e-3)


def test_eager_and_sdpa_agree_with_cache():
    ids, mask, types = right_padded()
    with torch.no_grad():
        a = incremental(decoder("eager"), ids, mask, types, KVCache(), [3, 3, 5])
        b = incremental(decoder("sdpa"), ids, mask, types, KVCache(), [3, 3, 5])
    assert_close(a, b, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------- cross-attention cache

class _CallCounter:
    def __init__(self, modules):
        self.calls = 0
        self.handles = [m.register_forward_hook(self) for m in modules]

    def __call__(self, module, args, output):
        self.calls += 1

    def remove(self):
        for h in self.handles:
            h.remove()


@pytest.mark.parametrize("attn", IMPLS)
@pytest.mark.parametrize("chunks", [[1] * 11, [2, 5, 4]], ids=["tokens", "chunks"])
def test_cross_attention_cache_matches_full_forward(attn, chunks):
    model = decoder(attn, cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    cross_keys = [layer.crossattention.self.key for layer in model.bert.encoder.layer]
    self_keys = [layer.attention.self.key for layer in model.bert.encoder.layer]
    with torch.no_grad():
        full = model(ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        cache = EncoderDecoderCache()
        cross_counter, self_counter = _CallCounter(cross_keys), _CallCounter(self_keys)
        try:
            out, start = [], 0
            for i, n in enumerate(chunks):
                end = start + n
                out.append(model(ids[:, start:end], mask[:, :end], types[:, start:end],
                                 encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
                                 past_key_values=cache, use_cache=True))
                start = end
                if i == 0:
                    first_keys = [cache.cross_attention_cache.get(j)[0]
                                  for j in range(TINY["num_hidden_layers"])]
        finally:
            cross_counter.remove()
            self_counter.remove()
    step = torch.cat(out, dim=1)
    assert_close(step, full, atol=ATOL, rtol=RTOL)
    # the encoder's keys were projected once per layer (first step) and reused afterwards
    assert cross_counter.calls == TINY["num_hidden_layers"]
    assert self_counter.calls == TINY["num_hidden_layers"] * len(chunks)
    cross = cache.cross_attention_cache
    assert len(cross) == TINY["num_hidden_layers"]
    assert cross.get_seq_length() == ENC_LEN
    for j in range(TINY["num_hidden_layers"]):
        assert cross.get(j)[0] is first_keys[j]
    assert cache.get_seq_length() == ids.shape[1]
    assert cache.self_attention_cache.get_seq_length() == ids.shape[1]


def test_cross_attention_mask_padding_matters():
    """The encoder mask is honoured: changing a padded encoder state leaves logits unchanged, a real one not."""
    model = decoder(cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    changed_pad, changed_real = enc.clone(), enc.clone()
    changed_pad[2, -1] += 5.0  # padded in row 2
    changed_real[2, 0] += 5.0
    with torch.no_grad():
        ref = incremental(model, ids, mask, types, EncoderDecoderCache(), [3, 8],
                          encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        pad = incremental(model, ids, mask, types, EncoderDecoderCache(), [3, 8],
                          encoder_hidden_states=changed_pad, encoder_attention_mask=enc_mask)
        real = incremental(model, ids, mask, types, EncoderDecoderCache(), [3, 8],
                           encoder_hidden_states=changed_real, encoder_attention_mask=enc_mask)
    assert_close(pad, ref, atol=ATOL, rtol=RTOL)
    assert not torch.allclose(real[2], ref[2], atol=1e-3)
    assert_close(real[:2], ref[:2], atol=ATOL, rtol=RTOL)


def test_cross_cache_reused_without_encoder_states():
    """After the first step the cached encoder keys suffice: later steps may omit encoder_hidden_states."""
    model = decoder(cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        full = model(ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        cache = EncoderDecoderCache()
        out = [model(ids[:, :4], mask[:, :4], types[:, :4], encoder_hidden_states=enc,
                     encoder_attention_mask=enc_mask, past_key_values=cache, use_cache=True)]
        for t in range(4, ids.shape[1]):
            out.append(model(ids[:, t:t + 1], mask[:, :t + 1], types[:, t:t + 1], encoder_attention_mask=enc_mask,
                             past_key_values=cache, use_cache=True))
    assert_close(torch.cat(out, dim=1), full, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------- static cache

@pytest.mark.parametrize("attn", IMPLS)
def test_static_cache_matches_dynamic(attn):
    model = decoder(attn)
    ids, mask, types = right_padded()
    with torch.no_grad():
        full = model(ids, mask, types)
        dynamic = incremental(model, ids, mask, types, KVCache(), [4, 1, 1, 5])
        cache = StaticKVCache(16)
        static = incremental(model, ids, mask, types, cache, [4, 1, 1, 5])
    assert_close(static, dynamic, atol=ATOL, rtol=RTOL)
    assert_close(static, full, atol=ATOL, rtol=RTOL)
    assert cache.get_seq_length() == 11
    k, _ = cache.get(0)
    assert k.shape[-2] == 16  # preallocated
    assert torch.count_nonzero(k[..., 11:, :]) == 0


def test_static_cache_token_by_token_and_exact_fit():
    model = decoder("eager")
    ids, mask, types = right_padded()
    with torch.no_grad():
        full = model(ids, mask, types)
        static = incremental(model, ids, mask, types, StaticKVCache(ids.shape[1]), [1] * ids.shape[1])
    assert_close(static, full, atol=ATOL, rtol=RTOL)


def test_static_cache_with_cross_attention():
    model = decoder(cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        full = model(ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        cache = EncoderDecoderCache(StaticKVCache(20))
        step = incremental(model, ids, mask, types, cache, [5, 1, 5],
                           encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
    assert_close(step, full, atol=ATOL, rtol=RTOL)


def test_static_cache_overflow_raises():
    model = decoder()
    ids, mask, types = right_padded()
    cache = StaticKVCache(6)
    with torch.no_grad():
        model(ids[:, :6], mask[:, :6], types[:, :6], past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="max_length"):
            model(ids[:, 6:7], token_type_ids=types[:, 6:7], past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="max_length"):
            model(ids[:, :7], token_type_ids=types[:, :7], past_key_values=StaticKVCache(6), use_cache=True)
        # with a mask covering 7 positions the mask check may be the one that refuses
        with pytest.raises(ValueError):
            model(ids[:, :7], mask[:, :7], types[:, :7], past_key_values=StaticKVCache(6), use_cache=True)
    with pytest.raises(ValueError):
        StaticKVCache(0)


# ---------------------------------------------------------------------------- reorder / crop

def _filled(cache, length=8):
    model = decoder()
    ids, mask, types = right_padded(length=length)
    with torch.no_grad():
        model(ids, mask, types, past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("make", [KVCache, lambda: StaticKVCache(12)], ids=["dynamic", "static"])
def test_reorder_cache_selects_beams(make):
    cache = _filled(make())
    before = [tuple(t.clone() for t in cache.get(i)) for i in range(len(cache))]
    beam_idx = torch.tensor([2, 0, 0, 1])
    cache.reorder_cache(beam_idx)
    for i, (k, v) in enumerate(before):
        new_k, new_v = cache.get(i)
        assert new_k.shape[0] == 4
        assert_close(new_k, k[beam_idx], rtol=0, atol=0)
        assert_close(new_v, v[beam_idx], rtol=0, atol=0)


def test_reorder_cache_then_decode_matches_reordered_full_forward():
    """Decoding after a beam reorder equals running the reordered sequences from scratch."""
    model = decoder()
    ids, mask, types = right_padded()
    beam_idx = torch.tensor([1, 2, 0])
    with torch.no_grad():
        cache = KVCache()
        model(ids[:, :6], mask[:, :6], types[:, :6], past_key_values=cache, use_cache=True)
        cache.reorder_cache(beam_idx)
        r_ids, r_mask, r_types = ids[beam_idx], mask[beam_idx], types[beam_idx]
        step = model(r_ids[:, 6:], r_mask, r_types[:, 6:], past_key_values=cache, use_cache=True)
        full = model(r_ids, r_mask, r_types)
    assert_close(step, full[:, 6:], atol=ATOL, rtol=RTOL)


def test_encoder_decoder_cache_reorder_reorders_both():
    model = decoder(cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    cache = EncoderDecoderCache()
    with torch.no_grad():
        model(ids[:, :5], mask[:, :5], types[:, :5], encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
              past_key_values=cache, use_cache=True)
    self_k = cache.self_attention_cache.get(1)[0].clone()
    cross_k = cache.cross_attention_cache.get(1)[0].clone()
    beam_idx = torch.tensor([2, 2, 1])
    cache.reorder_cache(beam_idx)
    assert_close(cache.self_attention_cache.get(1)[0], self_k[beam_idx], rtol=0, atol=0)
    assert_close(cache.cross_attention_cache.get(1)[0], cross_k[beam_idx], rtol=0, atol=0)


@pytest.mark.parametrize("make", [KVCache, lambda: StaticKVCache(12)], ids=["dynamic", "static"])
def test_crop(make):
    cache = _filled(make())
    k_before = cache.get(0)[0].clone()
    cache.crop(6)
    assert cache.get_seq_length() == 6
    assert_close(cache.get(0)[0][..., :6, :], k_before[..., :6, :], rtol=0, atol=0)
    cache.crop(-2)  # drop two from the end
    assert cache.get_seq_length() == 4
    assert_close(cache.get(0)[0][..., :4, :], k_before[..., :4, :], rtol=0, atol=0)
    cache.crop(10)  # longer than held: nothing changes
    assert cache.get_seq_length() == 4
    with pytest.raises(ValueError):
        cache.crop(-5)
    if isinstance(cache, StaticKVCache):
        assert torch.count_nonzero(cache.get(1)[1][..., 4:, :]) == 0
    else:
        assert cache.get(1)[1].shape[-2] == 4


@pytest.mark.parametrize("make", [KVCache, lambda: StaticKVCache(12)], ids=["dynamic", "static"])
def test_crop_then_continue_matches_full_forward(make):
    """Rolling back (as speculative decoding does) and re-feeding gives the full-forward logits."""
    model = decoder()
    ids, mask, types = right_padded()
    other = ids.clone()
    other[:, 5:] = torch.flip(ids[:, 5:], dims=[1]) % 50 + 5
    with torch.no_grad():
        full = model(ids, mask, types)
        cache = make()
        model(ids[:, :5], mask[:, :5], types[:, :5], past_key_values=cache, use_cache=True)
        model(other[:, 5:9], mask[:, :9], types[:, 5:9], past_key_values=cache, use_cache=True)  # rejected draft
        cache.crop(-4)
        assert cache.get_seq_length() == 5
        step = model(ids[:, 5:], mask, types[:, 5:], past_key_values=cache, use_cache=True)
    assert_close(step, full[:, 5:], atol=ATOL, rtol=RTOL)


def test_encoder_decoder_cache_crop_keeps_cross():
    cache = EncoderDecoderCache()
    model = decoder(cross=True)
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        model(ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
              past_key_values=cache, use_cache=True)
    cache.crop(-3)
    assert cache.get_seq_length() == ids.shape[1] - 3
    assert cache.cross_attention_cache.get_seq_length() == ENC_LEN
    cache.reset()
    assert cache.get_seq_length() == 0 and len(cache.cross_attention_cache) == 0


# ---------------------------------------------------------------------------- misuse

def test_use_cache_without_cache_raises():
    model = decoder()
    ids, mask, types = right_padded()
    with pytest.raises(ValueError, match="KVCache"):
        model(ids, mask, types, use_cache=True)


def test_cache_on_non_decoder_raises():
    model = BERTForMaskedLM(BERTConfig(**TINY)).eval()
    ids, mask, types = right_padded()
    with pytest.raises(ValueError, match="is_decoder"):
        model.bert(ids, mask, types, past_key_values=KVCache(), use_cache=True)


def test_cache_with_use_cache_false_and_foreign_cache_raise():
    model = decoder()
    ids, mask, types = right_padded()
    with pytest.raises(ValueError):
        model(ids, mask, types, past_key_values=KVCache(), use_cache=False)
    with pytest.raises(TypeError, match="KVCache"):
        model(ids, mask, types, past_key_values=((torch.zeros(1),),), use_cache=True)


def test_mask_not_covering_the_cache_raises():
    model = decoder()
    ids, mask, types = right_padded()
    cache = KVCache()
    with torch.no_grad():
        model(ids[:, :5], mask[:, :5], types[:, :5], past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="attention_mask"):
            model(ids[:, 5:6], mask[:, 5:6], types[:, 5:6], past_key_values=cache, use_cache=True)


def test_decoder_without_cache_is_causal():
    """Changing a later token never changes an earlier position's logits (and does change its own)."""
    model = decoder()
    ids, _, types = right_padded()
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 11) % TINY["vocab_size"]
    with torch.no_grad():
        a, b = model(ids, token_type_ids=types), model(changed, token_type_ids=types)
    assert_close(a[:, :7], b[:, :7], atol=0, rtol=0)
    assert not torch.allclose(a[:, 7], b[:, 7], atol=1e-3)


# ---------------------------------------------------------------------------- generate

def argmax_loop(model, input_ids, n, eos_token_id=None, **kwargs):
    """Greedy decoding by full forwards, no cache."""
    tokens = input_ids
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(n):
        with torch.no_grad():
            nxt = model(tokens, **kwargs)[:, -1].argmax(-1)
        if eos_token_id is not None:
            nxt = nxt.masked_fill(done, eos_token_id)
            done |= nxt == eos_token_id
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        if eos_token_id is not None and bool(done.all()):
            break
    return tokens


@pytest.mark.parametrize("attn", IMPLS)
def test_generate_greedy_matches_argmax_loop(attn):
    model = decoder(attn, seed=3)
    prompt = torch.randint(5, TINY["vocab_size"], (3, 4), generator=torch.Generator().manual_seed(7))
    out = model.generate(prompt, max_new_tokens=12)
    assert out.shape == (3, 16)
    assert torch.equal(out[:, :4], prompt)
    assert torch.equal(out, argmax_loop(model, prompt, 12))


def test_generate_with_cross_attention_matches_argmax_loop():
    model = decoder(cross=True, seed=4)
    enc, _ = encoder_states()
    prompt = torch.randint(5, TINY["vocab_size"], (3, 3), generator=torch.Generator().manual_seed(8))
    out = model.generate(prompt, max_new_tokens=8, encoder_hidden_states=enc)
    assert torch.equal(out, argmax_loop(model, prompt, 8, encoder_hidden_states=enc))


def test_generate_respects_eos():
    model = decoder(seed=3)
    prompt = torch.randint(5, TINY["vocab_size"], (3, 4), generator=torch.Generator().manual_seed(7))
    free = model.generate(prompt, max_new_tokens=12)
    # make the token row 0 emits at its third new step the eos token
    eos = int(free[0, 6])
    first_eos = [(row[4:] == eos).nonzero() for row in free]
    out = model.generate(prompt, max_new_tokens=12, eos_token_id=eos)
    assert torch.equal(out, argmax_loop(model, prompt, 12, eos_token_id=eos))
    for b, hits in enumerate(first_eos):
        if len(hits):  # everything after a row's first eos is eos, everything before unchanged
            t = 4 + int(hits[0])
            assert torch.equal(out[b, :t + 1], free[b, :t + 1])
            assert bool((out[b, t:] == eos).all())
    if all(len(h) for h in first_eos):  # all rows finished: generation stopped early
        assert out.shape[1] == 4 + 1 + max(int(h[0]) for h in first_eos)


def test_generate_stops_when_all_rows_emit_eos():
    model = decoder(seed=3)
    prompt = torch.randint(5, TINY["vocab_size"], (1, 4), generator=torch.Generator().manual_seed(7))
    free = model.generate(prompt, max_new_tokens=6)
    eos = int(free[0, 4])  # the very first generated token
    out = model.generate(prompt, max_new_tokens=6, eos_token_id=eos)
    assert out.shape == (1, 5)
    assert int(out[0, -1]) == eos


def test_generate_stops_at_max_position_embeddings():
    model = decoder(seed=3)
    prompt = torch.randint(5, TINY["vocab_size"], (2, TINY["max_position_embeddings"] - 3),
                           generator=torch.Generator().manual_seed(7))
    out = model.generate(prompt, max_new_tokens=10)
    assert out.shape == (2, TINY["max_position_embeddings"])


def test_generate_sampling_is_seeded():
    model = decoder(seed=3)
    prompt = torch.randint(5, TINY["vocab_size"], (2, 3), generator=torch.Generator().manual_seed(7))
    a = model.generate(prompt, 8, do_sample=True, top_k=5, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 8, do_sample=True, top_k=5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 2, do_sample=True, temperature=0.0)


# ---------------------------------------------------------------------------- HF reference

def test_incremental_matches_hf_bert_lm_head_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = decoder("eager", cross=True, seed=6)
    model.save_pretrained(tmp_path)
    hf = transformers.BertLMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert hf.config.is_decoder and hf.config.add_cross_attention
    ids, mask, types = right_padded()
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, encoder_hidden_states=enc,
                 encoder_attention_mask=enc_mask).logits
        step = incremental(model, ids, mask, types, EncoderDecoderCache(), [3, 1, 1, 1, 5],
                           encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
    assert_close(step, ref, atol=ATOL, rtol=RTOL)


def test_public_names():
    assert bertkit.KVCache is KVCache
    assert bertkit.StaticKVCache is StaticKVCache
    assert bertkit.EncoderDecoderCache is EncoderDecoderCache
