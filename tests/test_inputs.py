"""Bad input gets a clear ValueError naming the argument; padding and chunking never change results."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from bertkit import BERT, BERTForPreTraining, BERTForSequenceClassification, BERTForTokenClassification
from bertkit.modeling.backbone import build_attention_mask
from conftest import NSP, TINY, V, mlm_labels_for, model_of, padded_batch


def test_input_ids_out_of_vocab(batch):
    model = model_of(BERTForSequenceClassification)
    ids, mask, types = batch
    bad = ids.clone()
    bad[0, 3] = V
    with pytest.raises(ValueError, match="input_ids"):
        model(bad, mask, types)
    bad[0, 3] = -1
    with pytest.raises(ValueError, match="input_ids"):
        model(bad, mask, types)


def test_token_type_ids_out_of_range(batch):
    model = model_of(BERTForSequenceClassification)
    ids, mask, types = batch
    bad = types.clone()
    bad[1, 0] = TINY["type_vocab_size"]
    with pytest.raises(ValueError, match="token_type_ids"):
        model(ids, mask, bad)


def test_sequence_longer_than_max_position_embeddings():
    model = model_of(BERT)
    n = TINY["max_position_embeddings"]
    with torch.no_grad():
        model(torch.randint(5, V, (1, n)))  # exactly the limit is fine
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.randint(5, V, (1, n + 1)))


def test_labels_out_of_range(batch, pretraining):
    ids, mask, types = batch
    model = model_of(BERTForSequenceClassification, num_labels=3)
    with pytest.raises(ValueError, match="labels"):
        model.get_loss(torch.tensor([0, 3, 1]), ids, mask, types)
    with pytest.raises(ValueError, match="labels"):
        model.get_loss(torch.tensor([0, -2, 1]), ids, mask, types)
    labels = mlm_labels_for(ids, mask)
    labels[0, 0] = V
    with pytest.raises(ValueError, match="mlm_labels"):
        pretraining.get_mlm_loss(labels, ids, mask, types)
    with pytest.raises(ValueError, match="nsp_labels"):
        pretraining.get_nsp_loss(torch.tensor([0, 2, 1]), ids, mask, types)
    tokens = model_of(BERTForTokenClassification, num_labels=5)
    bad = torch.zeros_like(ids)
    bad[2, 2] = 5
    with pytest.raises(ValueError, match="labels"):
        tokens.get_loss(bad, ids, mask, types)


@pytest.mark.parametrize("value", [2, -1])
def test_attention_mask_must_be_binary(batch, value):
    model = model_of(BERT)
    ids, mask, types = batch
    bad = mask.clone()
    bad[0, 0] = value
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, bad, types)
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, mask.float().masked_fill(mask == 0, float("-inf")), types)  # an additive mask


def test_exactly_one_of_input_ids_and_inputs_embeds(batch):
    model = model_of(BERT)
    ids, mask, _ = batch
    embeds = torch.randn(3, 11, TINY["hidden_size"])
    for kwargs in ({}, {"input_ids": ids, "inputs_embeds": embeds}):
        with pytest.raises(ValueError, match="input_ids") as info:
            model(attention_mask=mask, **kwargs)
        assert "inputs_embeds" in str(info.value)


def test_inputs_embeds_equals_input_ids(batch):
    model = model_of(BERT)
    ids, mask, types = batch
    with torch.no_grad():
        a = model(ids, mask, types)
        b = model(attention_mask=mask, token_type_ids=types, inputs_embeds=model.embeddings.word_embeddings(ids))
    assert_close(a[0], b[0])
    assert_close(a[1], b[1])


# ---------------------------------------------------------------------------- padding and chunking

@pytest.mark.parametrize("cls", [BERTForPreTraining, BERTForTokenClassification])
def test_fully_padded_row_gives_no_nan(cls, batch):
    ids, mask, types = batch
    mask = mask.clone()
    mask[1] = 0
    ids = ids.masked_fill(mask == 0, 0)
    outs = {}
    for attn in ("eager", "sdpa"):
        model = model_of(cls, attn_implementation=attn)
        with torch.no_grad():
            out = model(ids, mask, types)
        out = out[0] if isinstance(out, tuple) else out
        assert not torch.isnan(out).any(), attn
        outs[attn] = out
    # every query row keeps at least one key (an all-masked softmax row is NaN on some backends)
    allowed = build_attention_mask(mask.bool(), 11, torch.arange(11), causal=False)
    assert allowed.any(dim=-1).all()
    keep = torch.tensor([0, 2])
    assert_close(outs["eager"][keep], outs["sdpa"][keep], atol=1e-5, rtol=1e-5)
    # the other rows are unaffected by the padded one
    with torch.no_grad():
        alone = model(ids[keep], mask[keep], types[keep])
    assert_close((alone[0] if isinstance(alone, tuple) else alone), outs["sdpa"][keep], atol=1e-5, rtol=1e-5)


def test_fully_padded_row_loss_is_finite():
    model = model_of(BERTForPreTraining)
    ids, mask, types = padded_batch()
    mask[1] = 0
    labels = mlm_labels_for(ids, mask)
    loss = model.get_loss(labels, NSP, ids, mask, types)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("chunk", [1, 4, 11, 100])
def test_chunked_feed_forward_matches_unchunked(chunk, batch):
    ids, mask, types = batch
    ref_model = model_of(BERTForPreTraining)
    chunked = model_of(BERTForPreTraining, chunk_size_feed_forward=chunk)
    assert chunked.bert.encoder.layer[0].chunk_size == chunk
    with torch.no_grad():
        ref = ref_model(ids, mask, types)
        out = chunked(ids, mask, types)
        enc_ref = ref_model.bert.encode(ids, mask, types, output_hidden_states=True)
        enc = chunked.bert.encode(ids, mask, types, output_hidden_states=True)
    assert_close(out[0], ref[0], atol=1e-5, rtol=1e-5)
    assert_close(out[1], ref[1], atol=1e-5, rtol=1e-5)
    for a, b in zip(enc.hidden_states, enc_ref.hidden_states):
        assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_chunked_feed_forward_gradients_match(batch):
    ids, mask, types = batch
    grads = []
    for chunk in (0, 3):
        model = model_of(BERTForSequenceClassification, chunk_size_feed_forward=chunk)
        model.get_loss(torch.tensor([0, 1, 1]), ids, mask, types).backward()
        grads.append(model.bert.encoder.layer[0].intermediate.dense.weight.grad)
    assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
