"""create_masked_lm_inputs: BERT's 80/10/10 corruption, statistics and special-token rules."""

from __future__ import annotations

import pytest
import torch

from bertkit import BERTConfig, BERTForMaskedLM, BERTForPreTraining
from conftest import SPECIAL, TINY, V


@pytest.fixture(scope="module")
def mlm_model_big_vocab():
    return BERTForPreTraining(BERTConfig(**{**TINY, "vocab_size": 1000}, **SPECIAL)).eval()


def corpus(rows=720, length=240, seed=0):
    """~120k tokens: [CLS] ... [SEP] ... [SEP] with [UNK]s, [MASK]s sprinkled in and right padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (rows, length), generator=g)
    ids[:, 0] = 2
    ids[:, length // 2] = 3
    ids[:, -1] = 3
    sprinkle = torch.rand(rows, length, generator=g)
    ids[sprinkle < 0.01] = 1
    ids[(sprinkle >= 0.01) & (sprinkle < 0.02)] = 4
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ids[mask == 0] = 0
    return ids, mask


def test_masking_statistics(mlm_model_big_vocab):
    model = mlm_model_big_vocab
    ids, mask = corpus()
    special = torch.tensor(model.config.special_token_ids)
    assert special.tolist() == [0, 1, 2, 3, 4]
    masked, labels = model.create_masked_lm_inputs(ids, mask, generator=torch.Generator().manual_seed(1))
    assert masked.shape == labels.shape == ids.shape
    selected = labels != -100
    eligible = (mask == 1) & ~torch.isin(ids, special)
    assert eligible.sum() > 100_000
    # never special, never padding, labels hold the originals
    assert not selected[~eligible].any()
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected])
    frac = selected.sum().item() / eligible.sum().item()
    assert abs(frac - 0.15) < 0.01, frac
    n = selected.sum().item()
    to_mask = selected & (masked == 4)
    kept = selected & (masked == ids)
    random = selected & (masked != ids) & (masked != 4)
    assert to_mask.sum() + kept.sum() + random.sum() == n
    assert abs(to_mask.sum().item() / n - 0.8) < 0.01
    assert abs(random.sum().item() / n - 0.1) < 0.01
    assert abs(kept.sum().item() / n - 0.1) < 0.01
    # random replacements are non-special and spread over the vocabulary
    replacements = masked[random]
    assert not torch.isin(replacements, special).any()
    assert replacements.unique().numel() > 500
    # the input is not modified
    assert torch.equal(ids, corpus()[0])


def test_masking_never_touches_special_tokens_mask_positions(mlm_model_big_vocab):
    ids, mask = corpus(rows=200)
    g = torch.Generator().manual_seed(3)
    special_tokens_mask = (torch.rand(ids.shape, generator=g) < 0.3).long()
    masked, labels = mlm_model_big_vocab.create_masked_lm_inputs(
        ids, mask, special_tokens_mask, mlm_probability=0.5, generator=torch.Generator().manual_seed(4))
    selected = labels != -100
    assert selected.sum() > 5_000
    assert not selected[special_tokens_mask == 1].any()
    assert not selected[mask == 0].any()
    assert torch.equal(masked[~selected], ids[~selected])
    # with an explicit mask, flagged positions rule (an unflagged [UNK] may be selected)
    eligible = (mask == 1) & (special_tokens_mask == 0)
    assert abs(selected.sum().item() / eligible.sum().item() - 0.5) < 0.02


def test_masking_is_seeded_and_generator_matters(mlm_model_big_vocab):
    ids, mask = corpus(rows=50)
    model = mlm_model_big_vocab
    a = model.create_masked_lm_inputs(ids, mask, generator=torch.Generator().manual_seed(9))
    b = model.create_masked_lm_inputs(ids, mask, generator=torch.Generator().manual_seed(9))
    c = model.create_masked_lm_inputs(ids, mask, generator=torch.Generator().manual_seed(10))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_masking_token_id_default_and_explicit(mlm_model_big_vocab):
    ids, mask = corpus(rows=50)
    model = mlm_model_big_vocab
    only_mask = dict(mask_replace_prob=1.0, random_replace_prob=0.0)

    def masked_values(**kw):
        masked, labels = model.create_masked_lm_inputs(ids, mask, generator=torch.Generator().manual_seed(0),
                                                       **only_mask, **kw)
        return masked[labels != -100].unique().tolist()

    assert masked_values() == [4]  # config.mask_token_id
    assert masked_values(mask_token_id=7) == [7]
    assert masked_values(mask_token_id=103) == [103]  # explicitly passing the spec's default still wins


def test_masking_default_on_bert_base_vocab_is_103():
    model = BERTForMaskedLM(BERTConfig(**{**TINY, "vocab_size": 200}))
    assert model.config.mask_token_id == 103
    ids = torch.randint(110, 200, (4, 30), generator=torch.Generator().manual_seed(0))
    masked, labels = model.create_masked_lm_inputs(ids, mask_replace_prob=1.0, random_replace_prob=0.0,
                                                   mlm_probability=0.5, generator=torch.Generator().manual_seed(0))
    assert masked[labels != -100].unique().tolist() == [103]


def test_masking_without_mask_id_in_config_needs_explicit_id():
    model = BERTForMaskedLM(BERTConfig(**TINY))  # vocab 99: no default special ids
    assert model.config.mask_token_id is None
    ids = torch.randint(5, V, (2, 10))
    with pytest.raises(ValueError, match="mask_token_id"):
        model.create_masked_lm_inputs(ids)
    masked, labels = model.create_masked_lm_inputs(ids, mask_token_id=4, mlm_probability=1.0,
                                                   mask_replace_prob=1.0, random_replace_prob=0.0)
    assert (masked == 4).all() and torch.equal(labels, ids)


def test_masking_probability_validation(mlm_model_big_vocab):
    ids, _ = corpus(rows=4)
    with pytest.raises(ValueError, match="mlm_probability"):
        mlm_model_big_vocab.create_masked_lm_inputs(ids, mlm_probability=1.5)
    with pytest.raises(ValueError, match="mask_replace_prob"):
        mlm_model_big_vocab.create_masked_lm_inputs(ids, mask_replace_prob=0.95, random_replace_prob=0.1)
    with pytest.raises(ValueError, match="mask_token_id"):
        mlm_model_big_vocab.create_masked_lm_inputs(ids, mask_token_id=1000)


def test_masking_custom_ignore_index(mlm_model_big_vocab):
    ids, mask = corpus(rows=10)
    _, labels = mlm_model_big_vocab.create_masked_lm_inputs(ids, mask, ignore_index=-1,
                                                            generator=torch.Generator().manual_seed(0))
    assert (labels == -1).sum() > 0 and not (labels == -100).any()

