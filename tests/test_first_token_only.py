"""The [CLS]-only last layer of pooled heads computes exactly what the full last layer gives at [CLS]."""

from __future__ import annotations

import pytest
import torch

from bertkit import BERT, BERTForMultipleChoice, BERTForSequenceClassification
from conftest import padded_batch, randomize_

pytestmark = pytest.mark.usefixtures("engine_path")  # the parity suite on the fast and the plain path


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "per_query"])
def test_first_token_only_matches_the_full_last_layer(tiny_config, impl, mask_kind):
    model = randomize_(BERT(tiny_config.replace(attn_implementation=impl)), seed=3).eval()
    input_ids, attention_mask, token_type_ids = padded_batch()
    inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if mask_kind == "padding":
        inputs["attention_mask"] = attention_mask
    elif mask_kind == "per_query":  # [B, L, S]: each query row its own keys
        g = torch.Generator().manual_seed(0)
        mask = torch.rand(3, 11, 11, generator=g) > 0.3
        mask[:, :, 0] = True
        inputs["attention_mask"] = mask
    full = model.encode(**inputs)
    first = model.encode(**inputs, first_token_only=True)
    assert first.last_hidden_state.shape == (3, 1, tiny_config.hidden_size)
    torch.testing.assert_close(first.last_hidden_state[:, 0], full.last_hidden_state[:, 0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(first.pooled_output, full.pooled_output, atol=1e-6, rtol=1e-5)
    # requests that need every position ignore it
    hidden = model.encode(**inputs, first_token_only=True, output_hidden_states=True)
    assert hidden.last_hidden_state.shape[1] == 11


def test_pooled_heads_train_the_same_with_and_without_it(tiny_config):
    """Gradients through the [CLS]-only path equal those of the full computation (checkpointing too)."""
    torch.manual_seed(0)
    model = randomize_(BERTForSequenceClassification(tiny_config, num_labels=3), seed=5)
    input_ids, attention_mask, token_type_ids = padded_batch()
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    labels = torch.tensor([0, 2, 1])
    loss = model.get_loss(labels, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    loss.backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    seq, _ = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    reference = model.loss_from_logits(model.classifier(model.dropout(model.bert.pooler(seq))), labels)
    reference.backward()
    torch.testing.assert_close(loss, reference)
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(fast[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)
    model.zero_grad()
    model.gradient_checkpointing_enable()
    model.train()
    torch.manual_seed(1)
    model.get_loss(labels, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).backward()


def test_multiple_choice_uses_it(tiny_config):
    model = randomize_(BERTForMultipleChoice(tiny_config), seed=2).eval()
    ids = torch.randint(5, 99, (2, 3, 7))
    logits = model(ids)
    seq, _ = model.bert(ids.view(6, 7))
    expected = model.classifier(model.bert.pooler(seq)).view(2, 3)
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=1e-5)
