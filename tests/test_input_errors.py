"""Every bad model input is a TypeError/ValueError naming the argument, what was got and what is expected.

All checks live in ``BERT.validate_inputs``; the task heads reach it through their backbone
(multiple choice calls it on ``[B, C, L]`` before flattening). Lists and numpy arrays of ids
are accepted; per-query attention masks (3-D / 4-D) give HF transformers' results.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from bertkit import (
    BERT,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForPreTraining,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
    KVCache,
)
from conftest import TINY, V, model_of, padded_batch

B, L = 3, 11
IDS, MASK, TYPES = padded_batch(batch=B, length=L)
HEADS = TINY["num_attention_heads"]


@pytest.fixture(scope="module")
def model():
    return model_of(BERT)


def run(model, *args, **kwargs):
    with torch.no_grad():
        return model(*args, **kwargs)


def per_query_mask(seed: int = 3) -> torch.Tensor:
    """A random boolean ``[B, L, L]`` mask in which every query keeps at least one key."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, L, L, generator=g) > 0.4
    mask[..., 0] = True
    return mask


# ---------------------------------------------------------------------------- what is accepted

@pytest.mark.parametrize("convert", [
    torch.Tensor.tolist,
    lambda t: tuple(tuple(row) for row in t.tolist()),
    lambda t: t.numpy(),
    lambda t: t.numpy().astype(np.int32),
    lambda t: t.int(),
    lambda t: t.to(torch.int16),
], ids=["list", "tuple", "numpy", "numpy-int32", "int32", "int16"])
def test_lists_arrays_and_integer_dtypes_give_the_tensor_result(model, convert):
    ref = run(model, IDS, MASK, TYPES)
    out = run(model, convert(IDS), convert(MASK), convert(TYPES))
    assert_close(out[0], ref[0], rtol=0, atol=0)
    assert_close(out[1], ref[1], rtol=0, atol=0)


@pytest.mark.parametrize("mask", [MASK.bool(), MASK.float(), MASK.to(torch.uint8), MASK.numpy().astype(bool)],
                         ids=["bool", "float", "uint8", "numpy-bool"])
def test_mask_dtypes_are_equivalent(model, mask):
    assert_close(run(model, IDS, mask, TYPES)[0], run(model, IDS, MASK, TYPES)[0], rtol=0, atol=0)


def test_converted_inputs_are_long_tensors_on_the_model_device(model):
    inputs = model.validate_inputs(IDS.numpy().astype(np.int32), MASK.tolist(), TYPES.tolist())
    assert inputs.input_ids.dtype == torch.long and inputs.token_type_ids.dtype == torch.long
    assert inputs.input_ids.device == model.embeddings.word_embeddings.weight.device
    assert inputs.attention_mask.dtype == torch.bool
    assert (inputs.batch_shape, inputs.length, inputs.key_length) == ((B,), L, L)


@pytest.mark.parametrize("cls", [BERTForSequenceClassification, BERTForTokenClassification, BERTForQuestionAnswering,
                                 BERTForMaskedLM, BERTForNextSentencePrediction, BERTForPreTraining])
def test_heads_accept_lists_and_refuse_bad_ids_through_the_backbone(cls):
    head = model_of(cls)
    ref = run(head, IDS, MASK, TYPES)
    out = run(head, IDS.tolist(), MASK.tolist(), TYPES.tolist())
    for a, b in zip(ref if isinstance(ref, tuple) else (ref,), out if isinstance(out, tuple) else (out,)):
        assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"input_ids.*torch\.bool"):
        head.predict(IDS.bool(), MASK, TYPES)
    with pytest.raises(ValueError, match="token_type_ids has shape"):
        run(head, IDS, MASK, TYPES[:, :4])


def test_sequence_classification_loss_and_predictions_take_lists():
    head = model_of(BERTForSequenceClassification)
    labels = torch.tensor([0, 1, 1])
    assert_close(head.get_loss(labels, IDS.tolist(), MASK.tolist()), head.get_loss(labels, IDS, MASK))
    assert torch.equal(head.predict(IDS.numpy(), MASK.numpy()), head.predict(IDS, MASK))


# ---------------------------------------------------------------------------- wrong kinds and dtypes

@pytest.mark.parametrize(("ids", "pattern"), [
    (IDS.bool(), r"input_ids must hold integer ids \(torch.long\), got a torch.bool tensor"),
    (IDS.to(torch.uint8), r"input_ids must hold integer ids \(torch.long\), got dtype torch.uint8"),
    (IDS.float(), r"input_ids must hold integer ids \(torch.long\), got dtype torch.float32"),
    (IDS.numpy().astype(np.float64), "got dtype torch.float64"),
    ("a sentence", "not text; tokenize first"),
    ({"input_ids": IDS}, r"model\(\*\*encoding\)"),
    (42, "got int"),
])
def test_wrong_kind_of_input_ids_is_a_type_error(model, ids, pattern):
    with pytest.raises(TypeError, match=pattern):
        run(model, ids)


@pytest.mark.parametrize("name", ["token_type_ids", "position_ids"])
def test_float_segment_and_position_ids_are_type_errors(model, name):
    with pytest.raises(TypeError, match=f"{name} must hold integer ids"):
        run(model, IDS, MASK, **{name: torch.zeros(B, L)})


def test_float_inputs_embeds_required(model):
    with pytest.raises(TypeError, match="inputs_embeds must be a floating-point tensor"):
        run(model, inputs_embeds=torch.ones(B, L, TINY["hidden_size"], dtype=torch.long))


def test_ragged_lists_say_to_pad(model):
    with pytest.raises(ValueError, match=r"input_ids could not be made into a tensor.*padding=True"):
        run(model, [[5, 6, 7], [5, 6]])


# ---------------------------------------------------------------------------- wrong shapes

@pytest.mark.parametrize(("ids", "pattern"), [
    (IDS[0], r"input_ids must be \[batch, seq\] token ids, got shape \(11,\); .*input_ids\[None\]"),
    (IDS[None], r"input_ids must be \[batch, seq\] token ids, got shape \(1, 3, 11\)\."),
    (IDS[:, :0], r"input_ids has shape \(3, 0\): empty sequences"),
    (IDS[:0], r"input_ids has shape \(0, 11\): an empty batch"),
    ([[]], r"input_ids has shape \(1, 0\): empty sequences"),
])
def test_input_ids_shape_errors(model, ids, pattern):
    with pytest.raises(ValueError, match=pattern):
        run(model, ids)


def test_inputs_embeds_shape_errors(model):
    with pytest.raises(ValueError, match=r"inputs_embeds must be \[batch, seq, 36\] \(hidden_size\), got shape"):
        run(model, inputs_embeds=torch.randn(B, L, 5))
    with pytest.raises(ValueError, match=r"inputs_embeds has shape .*empty sequences"):
        run(model, inputs_embeds=torch.randn(B, 0, TINY["hidden_size"]))


@pytest.mark.parametrize("name", ["token_type_ids", "position_ids"])
@pytest.mark.parametrize("shape", [(B, 5), (2, L), (B, L, 1), (5,)])
def test_per_token_ids_of_the_wrong_shape(model, name, shape):
    with pytest.raises(ValueError, match=rf"{name} has shape \({', '.join(map(str, shape))},?\); expected one "
                                         rf".* per token of input_ids: \[3, 11\] \(or \[11\]"):
        run(model, IDS, MASK, **{name: torch.zeros(shape, dtype=torch.long)})


@pytest.mark.parametrize("shape", [(L,), (1, L)])
def test_per_token_ids_broadcast_over_the_batch(model, shape):
    types = TYPES[0].view(shape)
    assert_close(run(model, IDS, MASK, types)[0], run(model, IDS, MASK, TYPES[0].expand(B, L))[0], rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(L,), (2, L), (B, 5), (B, 13), (B, 5, L), (B, L, 5), (B, 2, L, L), (B, 1, 1, 1, L)])
def test_attention_mask_of_the_wrong_shape(model, shape):
    with pytest.raises(ValueError, match=rf"attention_mask has shape .*; expected \[3, 11\] \(batch, seq; "
                                         rf"1 = attend, 0 = masked\), or a per-query mask \[3, 11, 11\] or "
                                         rf"\[3, 1 or {HEADS}, 11, 11\]"):
        run(model, IDS, torch.ones(shape, dtype=torch.long), TYPES)


def test_cache_position_of_the_wrong_shape():
    decoder = model_of(BERT, is_decoder=True)
    with pytest.raises(ValueError, match=r"cache_position must be \[11\]"):
        run(decoder, IDS, MASK, TYPES, cache_position=torch.arange(4))


def test_mask_shorter_than_the_cache_names_the_cached_tokens():
    decoder = model_of(BERT, is_decoder=True)
    cache = KVCache()
    run(decoder, IDS[:, :5], MASK[:, :5], TYPES[:, :5], past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError, match=r"expected \[3, 6\] \(batch, 5 cached \+ 1 new tokens"):
        run(decoder, IDS[:, 5:6], MASK[:, 5:6], TYPES[:, 5:6], past_key_values=cache, use_cache=True)


# ---------------------------------------------------------------------------- wrong values

def test_out_of_vocabulary_id_is_named_with_the_vocab_size(model):
    bad = IDS.clone()
    bad[1, 4] = V + 7
    with pytest.raises(ValueError, match=rf"input_ids holds {V + 7}, outside this model's vocabulary "
                                         rf"\(vocab_size={V}\): valid values are 0 to {V - 1} \(1 of 33"):
        run(model, bad, MASK, TYPES)
    bad[1, 4] = -3
    with pytest.raises(ValueError, match="input_ids holds -3"):
        run(model, bad.tolist(), MASK, TYPES)


def test_segment_id_beyond_type_vocab_size(model):
    bad = TYPES.clone()
    bad[0, 2] = TINY["type_vocab_size"]
    with pytest.raises(ValueError, match=r"token_type_ids holds 3, outside this model's segments "
                                         r"\(type_vocab_size=3\)"):
        run(model, IDS, MASK, bad)


def test_positions_beyond_max_position_embeddings(model):
    n = TINY["max_position_embeddings"]
    with pytest.raises(ValueError, match=rf"input_ids has {n + 1} tokens, more than this model's "
                                         rf"max_position_embeddings={n}; truncate"):
        run(model, torch.randint(5, V, (1, n + 1)))
    with pytest.raises(ValueError, match=rf"position_ids holds {n}, outside this model's positions"):
        run(model, IDS, MASK, TYPES, torch.arange(L)[None] + n - 5)


def test_cached_plus_new_tokens_beyond_max_position_embeddings():
    decoder = model_of(BERT, is_decoder=True)
    n = TINY["max_position_embeddings"]
    cache = KVCache()
    ids = torch.randint(5, V, (1, n))
    run(decoder, ids[:, :30], past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError, match=rf"input_ids has 11 tokens after 30 cached tokens, more than this "
                                         rf"model's max_position_embeddings={n}"):
        run(decoder, torch.randint(5, V, (1, 11)), past_key_values=cache, use_cache=True)


@pytest.mark.parametrize("mask", [MASK * 2, MASK - 1, MASK.float() * 0.5,
                                  MASK.float().masked_fill(MASK == 0, float("-inf"))],
                         ids=["two", "minus-one", "half", "additive"])
def test_mask_values_must_be_zero_or_one(model, mask):
    with pytest.raises(ValueError, match=r"attention_mask must hold 0/1 or booleans .* pass `mask == 0`"):
        run(model, IDS, mask, TYPES)


# ---------------------------------------------------------------------------- cross-attention inputs

def test_encoder_inputs_are_checked():
    with pytest.raises(ValueError, match="encoder_hidden_states were given but this model has no cross-attention"):
        run(model_of(BERT), IDS, MASK, encoder_hidden_states=torch.randn(B, 4, TINY["hidden_size"]))
    decoder = model_of(BERT, is_decoder=True, add_cross_attention=True)
    with pytest.raises(ValueError, match=r"encoder_hidden_states must be \[3, enc_seq, 36\]"):
        run(decoder, IDS, MASK, encoder_hidden_states=torch.randn(B, 4, 5))
    with pytest.raises(ValueError, match="encoder_attention_mask was given without encoder_hidden_states"):
        run(decoder, IDS, MASK, encoder_attention_mask=torch.ones(B, 4))
    with pytest.raises(ValueError, match=r"encoder_attention_mask has shape \(3, 5\); expected \[3, 4\] "
                                         r"\(batch, encoder positions"):
        run(decoder, IDS, MASK, encoder_hidden_states=torch.randn(B, 4, TINY["hidden_size"]),
            encoder_attention_mask=torch.ones(B, 5))


# ---------------------------------------------------------------------------- multiple choice

def choice_inputs(choices: int = 2):
    ids, mask, types = padded_batch(batch=B * choices, length=L)
    return tuple(t.view(B, choices, L) for t in (ids, mask, types))


def test_multiple_choice_checks_before_flattening():
    head = model_of(BERTForMultipleChoice)
    ids, mask, types = choice_inputs()
    ref = run(head, ids, mask, types)
    assert ref.shape == (B, 2)
    assert_close(run(head, ids.tolist(), mask.numpy(), types[0, 0]), run(head, ids, mask, types[0, 0].expand(B, 2, L)))
    assert_close(run(head, ids, mask[:1], types), run(head, ids, mask[:1].expand(B, 2, L), types))  # broadcast batch
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, choices, seq\] token ids, got shape \(3, 11\)"):
        run(head, ids[:, 0], mask[:, 0], types[:, 0])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 11\); expected \[3, 2, 11\] "
                                         r"\(batch, choices, seq"):
        run(head, ids, mask[:, 0], types)
    with pytest.raises(ValueError, match=r"token_type_ids has shape \(3, 2, 4\); expected .*: \[3, 2, 11\]"):
        run(head, ids, mask, types[..., :4])
    with pytest.raises(ValueError, match=r"input_ids has shape \(3, 2, 0\): empty sequences"):
        run(head, ids[..., :0])


# ---------------------------------------------------------------------------- per-query masks

def test_per_query_masks_agree_with_each_other(model):
    mask = per_query_mask()
    ref = run(model, IDS, mask, TYPES)[0]
    for variant in (mask.long(), mask.float(), mask[:, None], mask[:, None].expand(B, HEADS, L, L).long()):
        assert_close(run(model, IDS, variant, TYPES)[0], ref, rtol=0, atol=0)
    # a padding mask expanded over the queries is the padding mask (at real positions: the 2-D mask may
    # take the unpadded path, whose outputs at padding positions are 0)
    padding = MASK[:, None, :].expand(B, L, L)
    real = MASK.bool()
    assert_close(run(model, IDS, padding, TYPES)[0][real], run(model, IDS, MASK, TYPES)[0][real])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_per_query_masks_match_hf_transformers(impl, tmp_path):
    """HF's BertModel takes a 4-D mask as given: boolean (SDPA) or additive. Ours takes 0/1 in 3-D or 4-D."""
    pytest.importorskip("transformers")
    from reference import CASES, build

    pair = build(CASES["model"], tmp_path, impl)
    mask = per_query_mask()
    per_head = mask[:, None].expand(B, HEADS, L, L).clone()
    per_head[:, 1] = per_query_mask(seed=4)  # heads differ
    for ours_mask in (mask, mask[:, None].long(), per_head):
        four_d = ours_mask.bool() if ours_mask.dim() == 4 else ours_mask[:, None]
        additive = torch.zeros(four_d.shape).masked_fill(~four_d, torch.finfo(torch.float32).min)
        with torch.no_grad():
            ours = pair.ours(IDS, ours_mask, TYPES)[0]
            hf = pair.hf(input_ids=IDS, attention_mask=additive, token_type_ids=TYPES).last_hidden_state
            assert_close(ours, hf, atol=1e-5, rtol=1e-5)
            if impl == "sdpa":
                hf_bool = pair.hf(input_ids=IDS, attention_mask=four_d, token_type_ids=TYPES).last_hidden_state
                assert_close(ours, hf_bool, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- compilers

def test_forward_compiles_without_graph_breaks(model):
    """The value checks stand aside while dynamo traces, so the whole forward is one graph."""
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        out = compiled(IDS, MASK, TYPES)
    real = MASK.bool()  # compiled graphs keep the padded path; eager may drop padding (0 there)
    assert_close(out[0][real], run(model, IDS, MASK, TYPES)[0][real])
