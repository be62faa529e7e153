"""ELECTRA's pretraining objective (``ELECTRAForPretrainingRTD``): a generator's samples replace the masked tokens,
the discriminator detects them; ``loss = mlm_loss + 50 * discriminator_loss``, embeddings shared."""

from __future__ import annotations

import re

import pytest
import torch

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling.electra import ELECTRAForPretrainingRTD, generator_config, sample_tokens
from conftest import randomize_

MASK, PAD, CLS, SEP = 4, 0, 2, 3
#: discriminator: hidden 36 over embeddings 20; the generator a third as wide (12, one head)
DISCRIMINATOR = BERTConfig(family="electra", vocab_size=99, embedding_size=20, hidden_size=36, num_hidden_layers=2,
                           num_attention_heads=3, intermediate_size=52, max_position_embeddings=40,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, mask_token_id=MASK,
                           cls_token_id=CLS, sep_token_id=SEP, unk_token_id=1)


def batch(rows: int = 4, length: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (rows, length), generator=g)
    ids[:, 0], mask = CLS, torch.ones(rows, length, dtype=torch.long)
    mask[1, 10:] = 0
    ids[mask == 0] = PAD
    ids[torch.arange(rows), mask.sum(1) - 1] = SEP
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))


def rtd(seed: int = 0, **options) -> ELECTRAForPretrainingRTD:
    torch.manual_seed(seed)
    return ELECTRAForPretrainingRTD(DISCRIMINATOR, generator_config(DISCRIMINATOR, 1 / 3), **options)


def test_generator_config_follows_the_paper():
    g = generator_config(DISCRIMINATOR, 1 / 3)
    assert (g.hidden_size, g.intermediate_size, g.num_attention_heads, g.embedding_width) == (12, 48, 1, 20)
    base = generator_config(bertkit.ELECTRAConfig(), 1 / 3)  # electra-base's generator: 256 wide, 4 heads
    assert (base.hidden_size, base.num_attention_heads, base.intermediate_size, base.embedding_size) == \
        (256, 4, 1024, 768)
    assert generator_config(DISCRIMINATOR).hidden_size == 9  # a quarter
    with pytest.raises(ValueError, match="hidden_ratio must lie in"):
        generator_config(DISCRIMINATOR, 0)


def test_embeddings_are_shared():
    model = rtd()
    g, d = model.generator, model.discriminator
    assert model.shares_embeddings and g.bert.embeddings is d.bert.embeddings
    assert g.cls.predictions.decoder.weight is d.bert.embeddings.word_embeddings.weight  # tied output layer
    assert g.bert.embeddings_project.weight.shape == (12, 20) and d.bert.embeddings_project.weight.shape == (36, 20)
    assert sum(p.numel() for p in model.parameters()) == \
        g.num_parameters() + d.num_parameters() - sum(p.numel() for p in d.bert.embeddings.parameters())
    apart = rtd(share_embeddings=False)
    assert not apart.shares_embeddings


def test_loss_is_mlm_plus_fifty_times_the_discriminators():
    model = rtd()
    out = model(**batch(), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(out.loss, out.mlm_loss + 50 * out.discriminator_loss)
    assert rtd(discriminator_weight=1.0).discriminator_weight == 1.0
    # each part is the separate model's own loss on the same tensors
    torch.testing.assert_close(out.mlm_loss, model.generator.get_loss(out.mlm_labels, out.masked_ids,
                                                                      batch()["attention_mask"]))
    torch.testing.assert_close(out.discriminator_loss, model.discriminator.get_loss(
        out.replaced, out.corrupted_ids, batch()["attention_mask"]))


def test_sampled_replacements():
    """Only masked tokens change; a sample equal to the original counts as original; padding is never masked."""
    model = rtd()
    inputs = batch()
    out = model(**inputs, generator=torch.Generator().manual_seed(3))
    masked = out.mlm_labels != -100
    real = inputs["attention_mask"].bool()
    assert masked.any() and not (masked & ~real).any()
    assert not torch.isin(inputs["input_ids"][masked], torch.tensor([CLS, SEP])).any()  # specials never masked
    assert torch.equal(out.corrupted_ids[~masked], inputs["input_ids"][~masked])
    assert torch.equal(out.mlm_labels[masked], inputs["input_ids"][masked])
    assert torch.equal(out.replaced, (out.corrupted_ids != inputs["input_ids"]).long())
    assert not out.replaced[~masked].any()
    # ELECTRA's masking: the mask token or the original, never a random token
    assert bool(((out.masked_ids[masked] == MASK) | (out.masked_ids[masked] == inputs["input_ids"][masked])).all())
    # the same seed draws the same masks and samples
    again = model(**inputs, generator=torch.Generator().manual_seed(3))
    assert torch.equal(again.corrupted_ids, out.corrupted_ids)


def test_samples_follow_the_generators_distribution():
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]]).expand(40_000, -1)
    draws = sample_tokens(logits, generator=torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=4).float() / draws.numel()
    torch.testing.assert_close(frequencies, logits[0].softmax(-1), atol=0.01, rtol=0)
    cold = sample_tokens(logits, temperature=0.05, generator=torch.Generator().manual_seed(0))
    assert bool((cold == 0).all())
    assert sample_tokens(torch.zeros(0, 4)).shape == (0,)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample_tokens(logits, temperature=0.0)


def test_a_sure_generator_replaces_every_masked_token_with_its_choice():
    model = rtd()
    with torch.no_grad():
        model.generator.cls.predictions.bias[:] = -1e4
        model.generator.cls.predictions.bias[7] = 1e4
    inputs = batch()
    out = model(**inputs, generator=torch.Generator().manual_seed(2))
    masked = out.mlm_labels != -100
    assert bool((out.corrupted_ids[masked] == 7).all())
    assert torch.equal(out.replaced[masked], (inputs["input_ids"][masked] != 7).long())


def test_gradients_flow_as_electras():
    """Every parameter gets a gradient; the generator's layers only from the MLM loss (none through the samples);
    the shared embeddings from both losses: grad = grad(mlm) + 50 * grad(discriminator)."""
    model = rtd()
    inputs = batch()
    out = model(**inputs, generator=torch.Generator().manual_seed(5))
    params = dict(model.named_parameters())
    grads = dict(zip(params, torch.autograd.grad(out.loss, list(params.values()), retain_graph=True,
                                                 allow_unused=True), strict=True))
    missing = [n for n, g in grads.items() if g is None or not g.abs().sum() > 0]
    assert missing == [], missing
    from_disc = dict(zip(params, torch.autograd.grad(out.discriminator_loss, list(params.values()),
                                                     retain_graph=True, allow_unused=True), strict=True))
    from_mlm = dict(zip(params, torch.autograd.grad(out.mlm_loss, list(params.values()), retain_graph=True,
                                                    allow_unused=True), strict=True))
    generator_only = [n for n in params if n.startswith("generator.") and n not in (
        "generator.bert.embeddings.word_embeddings.weight",)]
    assert generator_only and all(from_disc[n] is None for n in generator_only)
    assert all(from_mlm[n] is None for n in params if n.startswith("discriminator.") and ".embeddings." not in n)
    shared = "discriminator.bert.embeddings.word_embeddings.weight"
    torch.testing.assert_close(grads[shared], from_mlm[shared] + 50 * from_disc[shared])
    assert from_mlm[shared].abs().sum() > 0 and from_disc[shared].abs().sum() > 0


def test_training_step_on_a_masked_batch_and_learning():
    """Batches masked beforehand (bertkit's collator: mlm_labels) work; a few steps lower the loss."""
    model = rtd().train()
    inputs = batch(rows=8)
    masked_ids, mlm_labels = model.mask(inputs["input_ids"], inputs["attention_mask"],
                                        generator=torch.Generator().manual_seed(0))
    fixed = {**inputs, "input_ids": masked_ids, "mlm_labels": mlm_labels}
    loss, metrics = model.training_step(fixed)
    assert set(metrics) == {"loss", "mlm_loss", "mlm_accuracy", "discriminator_loss", "discriminator_accuracy",
                            "replaced_share"}
    assert 0 <= float(metrics["replaced_share"]) <= 1 and not metrics["loss"].requires_grad
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    first = None
    for _ in range(25):
        optimizer.zero_grad()
        loss, metrics = model.training_step(fixed)
        loss.backward()
        optimizer.step()
        first = first if first is not None else metrics
    assert metrics["mlm_loss"] < first["mlm_loss"] and metrics["discriminator_loss"] < first["discriminator_loss"]


def test_save_and_load_as_two_hf_checkpoints(tmp_path):
    model = randomize_(rtd(), std=0.1).eval()
    model.save_pretrained(tmp_path)
    again = ELECTRAForPretrainingRTD.from_pretrained(tmp_path)
    assert again.shares_embeddings and not again.training
    inputs = batch()
    with torch.no_grad():
        a = model(**inputs, generator=torch.Generator().manual_seed(1))
        b = again(**inputs, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a.loss, b.loss)
    assert torch.equal(a.corrupted_ids, b.corrupted_ids)
    transformers = pytest.importorskip("transformers")
    hf = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "discriminator")
    real = inputs["attention_mask"].bool()  # (padding positions' outputs carry no meaning)
    with torch.no_grad():
        torch.testing.assert_close(hf(**inputs).logits[real], model.discriminator(**inputs)[real], atol=2e-5,
                                   rtol=2e-5)
    assert type(transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")).__name__ == \
        "ElectraForMaskedLM"


def test_mismatched_pairs_are_refused():
    with pytest.raises(ValueError, match=re.escape("the generator's vocab_size (98) differs from the "
                                                   "discriminator's (99)")):
        ELECTRAForPretrainingRTD(DISCRIMINATOR, generator_config(DISCRIMINATOR).replace(vocab_size=98))
    with pytest.raises(ValueError, match="generator's embedding_width"):
        ELECTRAForPretrainingRTD(DISCRIMINATOR, generator_config(DISCRIMINATOR).replace(embedding_size=12))
    with pytest.raises(ValueError, match="family 'bert' does not have"):
        ELECTRAForPretrainingRTD(BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3))
    torch.manual_seed(0)
    trained = bertkit.BERTForMaskedLM(generator_config(DISCRIMINATOR))
    with pytest.raises(ValueError, match="share_embeddings=False to keep both tables"):
        ELECTRAForPretrainingRTD(DISCRIMINATOR, trained)
    assert not ELECTRAForPretrainingRTD(DISCRIMINATOR, trained, share_embeddings=False).shares_embeddings
    with pytest.raises(ValueError, match="discriminator_weight must be >= 0"):
        rtd(discriminator_weight=-1)
