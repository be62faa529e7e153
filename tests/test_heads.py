"""Task-head helpers: masking, losses, sparse MLM, predictions, accuracies, input checks.

Numbers are checked against hand computations on the dense forward outputs (HF parity
lives in test_hf_parity.py).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from bertkit import (
    BERT,
    BERTConfig,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForPreTraining,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from bertkit.modeling.backbone import build_attention_mask
from conftest import TINY, padded_batch, randomize_

SPECIAL = dict(mask_token_id=4, cls_token_id=2, sep_token_id=3, unk_token_id=1)  # pad is 0
V = TINY["vocab_size"]


def model_of(cls, seed=0, **overrides):
    config = BERTConfig(**{**TINY, **overrides}, **SPECIAL)
    return randomize_(cls(config), seed=seed).eval()


@pytest.fixture(scope="module")
def pretraining():
    return model_of(BERTForPreTraining)


@pytest.fixture(scope="module")
def batch():
    return padded_batch()


def mlm_labels_for(input_ids, attention_mask, seed=2):
    """Labels at ~40% of the real tokens of rows 0 and 1; row 2 has none."""
    g = torch.Generator().manual_seed(seed)
    pick = (torch.rand(input_ids.shape, generator=g) < 0.4) & (attention_mask == 1)
    pick[0, 0] = True
    pick[2] = False
    targets = torch.randint(0, V, input_ids.shape, generator=g)
    return torch.where(pick, targets, torch.full_like(input_ids, -100))


NSP = torch.tensor([0, 1, 1])


# ---------------------------------------------------------------------------- create_masked_lm_inputs

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


# ---------------------------------------------------------------------------- pretraining losses

def hand_losses(model, ids, mask, types, mlm_labels, nsp_labels):
    """Per-token MLM loss [B, L] (0 where ignored), validity, and per-example NSP loss [B] from dense scores."""
    with torch.no_grad():
        scores, nsp = model(ids, mask, types)
    mlm = F.cross_entropy(scores.reshape(-1, V), mlm_labels.reshape(-1), ignore_index=-100,
                          reduction="none").view(mlm_labels.shape)
    return mlm, mlm_labels != -100, F.cross_entropy(nsp, nsp_labels, reduction="none")


def test_mlm_and_nsp_losses_match_hand_computation(pretraining, batch):
    ids, mask, types = batch
    labels = mlm_labels_for(ids, mask)
    mlm, valid, nsp = hand_losses(pretraining, ids, mask, types, labels, NSP)
    with torch.no_grad():
        none = pretraining.get_mlm_loss(labels, ids, mask, types, reduction=None)
        assert none.shape == labels.shape
        assert_close(none, mlm)
        assert (none[~valid] == 0).all() and (none[valid] > 0).all()
        assert_close(pretraining.get_mlm_loss(labels, ids, mask, types), mlm.sum() / valid.sum())
        assert_close(pretraining.get_mlm_loss(labels, ids, mask, types, reduction="sum"), mlm.sum())
        nsp_none = pretraining.get_nsp_loss(NSP, ids, mask, types, reduction=None)
        assert nsp_none.shape == (3,)
        assert_close(nsp_none, nsp)
        assert_close(pretraining.get_nsp_loss(NSP, ids, mask, types), nsp.mean())
        assert_close(pretraining.get_nsp_loss(NSP, ids, mask, types, reduction="sum"), nsp.sum())


@pytest.mark.parametrize(("w_mlm", "w_nsp"), [(1.0, 1.0), (0.3, 2.5)])
def test_get_loss_reductions_and_weights(pretraining, batch, w_mlm, w_nsp):
    ids, mask, types = batch
    labels = mlm_labels_for(ids, mask)
    mlm, valid, nsp = hand_losses(pretraining, ids, mask, types, labels, NSP)
    w = dict(mlm_weight=w_mlm, nsp_weight=w_nsp)
    with torch.no_grad():
        per_example = pretraining.get_loss(labels, NSP, ids, mask, types, reduction=None, **w)
        mean = pretraining.get_loss(labels, NSP, ids, mask, types, **w)
        total = pretraining.get_loss(labels, NSP, ids, mask, types, reduction="sum", **w)
    assert per_example.shape == (3,)
    example_mlm = mlm.sum(1) / valid.sum(1).clamp(min=1)
    assert example_mlm[2] == 0  # row 2 has no labelled token
    assert_close(per_example, w_mlm * example_mlm + w_nsp * nsp)
    assert_close(per_example[2], w_nsp * nsp[2])
    assert_close(mean, w_mlm * mlm.sum() / valid.sum() + w_nsp * nsp.mean())
    assert_close(total, w_mlm * mlm.sum() + w_nsp * nsp.sum())
    with torch.no_grad():
        separate = (w_mlm * pretraining.get_mlm_loss(labels, ids, mask, types)
                    + w_nsp * pretraining.get_nsp_loss(NSP, ids, mask, types))
    assert_close(mean, separate)


def test_loss_is_differentiable_and_reduction_checked(pretraining, batch):
    ids, mask, types = batch
    labels = mlm_labels_for(ids, mask)
    loss = pretraining.get_loss(labels, NSP, ids, mask, types)
    loss.backward()
    grad = pretraining.bert.embeddings.word_embeddings.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    pretraining.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match="reduction"):
        pretraining.get_loss(labels, NSP, ids, mask, types, reduction="avg")


def test_mlm_loss_with_no_labelled_position_is_zero(pretraining, batch):
    ids, mask, types = batch
    none = torch.full_like(ids, -100)
    with torch.no_grad():
        loss = pretraining.get_mlm_loss(none, ids, mask, types)
    assert loss.item() == 0.0 and not torch.isnan(loss)


def test_custom_ignore_index(pretraining, batch):
    ids, mask, types = batch
    labels = mlm_labels_for(ids, mask)
    with torch.no_grad():
        a = pretraining.get_mlm_loss(labels, ids, mask, types, reduction=None)
        b = pretraining.get_mlm_loss(labels.masked_fill(labels == -100, -1), ids, mask, types, ignore_index=-1,
                                     reduction=None)
    assert_close(a, b)


# ---------------------------------------------------------------------------- sparse MLM

def test_sparse_pred_positions_equal_gathered_dense_scores(pretraining, batch):
    ids, mask, types = batch
    positions = torch.tensor([[0, 3, 3, 10], [1, 2, 5, 6], [0, 1, 2, 3]])
    with torch.no_grad():
        dense, nsp = pretraining(ids, mask, types)
        sparse, nsp2 = pretraining(ids, mask, types, pred_positions=positions)
    assert sparse.shape == (3, 4, V)
    assert_close(sparse, dense[torch.arange(3)[:, None], positions])
    assert_close(nsp2, nsp)
    boolean = torch.zeros_like(ids, dtype=torch.bool)
    boolean[0, [2, 7]] = True
    boolean[2, 1] = True
    with torch.no_grad():
        flat, _ = pretraining(ids, mask, types, pred_positions=boolean)
    assert flat.shape == (3, V)
    assert_close(flat, dense[boolean])
    assert_close(flat[1], dense[0, 7])


def test_sparse_masked_lm_forward_and_loss():
    model = model_of(BERTForMaskedLM)
    ids, mask, types = padded_batch()
    labels = mlm_labels_for(ids, mask)
    positions = torch.tensor([[4, 0], [9, 9], [2, 1]])
    with torch.no_grad():
        dense = model(ids, mask, types)
        assert dense.shape == (3, 11, V)
        assert_close(model(ids, mask, types, pred_positions=positions), dense[torch.arange(3)[:, None], positions])
        assert_close(model(ids, mask, types, pred_positions=labels != -100), dense[labels != -100])
        loss = model.get_loss(labels, ids, mask, types)
        per_token = model.get_loss(labels, ids, mask, types, reduction=None)
    ref = F.cross_entropy(dense.reshape(-1, V), labels.reshape(-1), ignore_index=-100, reduction="none")
    assert_close(loss, ref.sum() / (labels != -100).sum())
    assert_close(per_token, ref.view(labels.shape))
    with torch.no_grad():
        predictions = model.predict_token_ids(ids, mask, types)
    assert torch.equal(predictions, dense.argmax(-1))


def test_bad_pred_positions(pretraining, batch):
    ids, mask, types = batch
    with pytest.raises(ValueError, match="pred_positions"):
        pretraining(ids, mask, types, pred_positions=torch.tensor([[0, 11], [0, 1], [0, 1]]))
    with pytest.raises(ValueError, match="pred_positions"):
        pretraining(ids, mask, types, pred_positions=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="pred_positions"):
        pretraining(ids, mask, types, pred_positions=torch.zeros(3, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------- predictions and accuracies

def labels_hitting(predictions, mask, hits_per_row, misses_per_row):
    """MLM labels equal to ``predictions`` at the first ``hits`` real tokens, wrong at the next ``misses``."""
    labels = torch.full_like(predictions, -100)
    for b in range(predictions.shape[0]):
        real = mask[b].nonzero().squeeze(1)
        h, m = hits_per_row[b], misses_per_row[b]
        labels[b, real[:h]] = predictions[b, real[:h]]
        labels[b, real[h:h + m]] = (predictions[b, real[h:h + m]] + 1) % V
    return labels


def test_pretraining_predictions_and_accuracies(pretraining, batch):
    ids, mask, types = batch
    with torch.no_grad():
        dense, nsp_scores = pretraining(ids, mask, types)
        mlm_pred = pretraining.predict_mlm_token_ids(ids, mask, types)
        nsp_pred = pretraining.predict_nsp_labels(ids, mask, types)
    assert torch.equal(mlm_pred, dense.argmax(-1))
    assert nsp_pred.shape == (3,)
    assert torch.equal(nsp_pred, nsp_scores.argmax(-1))

    labels = labels_hitting(mlm_pred, mask, [3, 1, 0], [1, 2, 2])  # 4 right of 9
    nsp_labels = nsp_pred.clone()
    nsp_labels[0] = 1 - nsp_labels[0]  # 2 right of 3
    mlm_acc = pretraining.get_mlm_accuracy(labels, ids, mask, types)
    nsp_acc = pretraining.get_nsp_accuracy(nsp_labels, ids, mask, types)
    assert_close(mlm_acc, torch.tensor(4 / 9))
    assert_close(nsp_acc, torch.tensor(2 / 3))
    a, n, w = pretraining.get_accuracy(labels, nsp_labels, ids, mask, types)
    assert_close(a, mlm_acc)
    assert_close(n, nsp_acc)
    assert_close(w, torch.tensor((4 / 9 + 2 / 3) / 2))
    _, _, w = pretraining.get_accuracy(labels, nsp_labels, ids, mask, types, mlm_weight=1.0, nsp_weight=3.0)
    assert_close(w, torch.tensor((4 / 9 + 3 * 2 / 3) / 4))


def test_accuracy_with_no_labelled_position(pretraining, batch):
    ids, mask, types = batch
    none = torch.full_like(ids, -100)
    with torch.no_grad():
        nsp_pred = pretraining.predict_nsp_labels(ids, mask, types)
    mlm_acc = pretraining.get_mlm_accuracy(none, ids, mask, types)
    assert math.isnan(mlm_acc.item())
    a, n, w = pretraining.get_accuracy(none, nsp_pred, ids, mask, types, mlm_weight=5.0)
    assert math.isnan(a.item())
    assert n.item() == 1.0 and w.item() == 1.0  # weighted falls back to nsp_acc


def test_masked_lm_accuracy():
    model = model_of(BERTForMaskedLM)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        pred = model.predict_token_ids(ids, mask, types)
    labels = labels_hitting(pred, mask, [1, 2, 1], [3, 0, 1])  # 4 right of 8
    assert_close(model.get_accuracy(labels, ids, mask, types), torch.tensor(0.5))
    assert math.isnan(model.get_accuracy(torch.full_like(ids, -100), ids, mask, types).item())


def test_next_sentence_prediction_head(batch):
    model = model_of(BERTForNextSentencePrediction)
    ids, mask, types = batch
    with torch.no_grad():
        logits = model(ids, mask, types)
        pred = model.predict(ids, mask, types)
        loss = model.get_loss(NSP, ids, mask, types, reduction=None)
    assert logits.shape == (3, 2)
    assert torch.equal(pred, logits.argmax(-1))
    assert_close(loss, F.cross_entropy(logits, NSP, reduction="none"))
    assert_close(model.get_accuracy(pred, ids, mask, types), torch.tensor(1.0))


# ---------------------------------------------------------------------------- sequence classification

def test_sequence_classification_single_label(batch):
    model = model_of(BERTForSequenceClassification, num_labels=3)
    ids, mask, types = batch
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        logits = model(ids, mask, types)
        pred = model.predict(ids, mask, types)
        loss = model.get_loss(labels, ids, mask, types)
    assert logits.shape == (3, 3) and model.problem_type(labels) == "single_label_classification"
    assert torch.equal(pred, logits.argmax(-1))
    assert_close(loss, F.cross_entropy(logits, labels))
    gold = pred.clone()
    gold[1] = (gold[1] + 1) % 3
    assert_close(model.get_accuracy(gold, ids, mask, types), torch.tensor(2 / 3))


def test_sequence_classification_multi_label(batch):
    model = model_of(BERTForSequenceClassification, num_labels=4, problem_type="multi_label_classification")
    ids, mask, types = batch
    labels = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=torch.float)
    with torch.no_grad():
        logits = model(ids, mask, types)
        pred = model.predict(ids, mask, types)
        loss = model.get_loss(labels, ids, mask, types)
        none = model.get_loss(labels, ids, mask, types, reduction=None)
    assert pred.shape == (3, 4)
    assert set(pred.unique().tolist()) <= {0, 1}
    assert torch.equal(pred, (logits > 0).long())
    assert_close(loss, F.binary_cross_entropy_with_logits(logits, labels))
    assert none.shape == (3, 4)
    gold = pred.clone()
    gold[0, 0] = 1 - gold[0, 0]
    assert_close(model.get_accuracy(gold.float(), ids, mask, types), torch.tensor(11 / 12))


def test_sequence_classification_multi_label_inferred_from_float_labels(batch):
    model = model_of(BERTForSequenceClassification, num_labels=4)
    ids, mask, types = batch
    labels = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=torch.float)
    assert model.problem_type(labels) == "multi_label_classification"
    with torch.no_grad():
        logits = model(ids, mask, types)
        loss = model.get_loss(labels, ids, mask, types)
    assert_close(loss, F.binary_cross_entropy_with_logits(logits, labels))


def test_sequence_classification_regression(batch):
    model = model_of(BERTForSequenceClassification, num_labels=1)
    ids, mask, types = batch
    target = torch.tensor([0.5, -1.0, 2.0])
    with torch.no_grad():
        logits = model(ids, mask, types)
        pred = model.predict(ids, mask, types)
        loss = model.get_loss(target, ids, mask, types)
        none = model.get_loss(target, ids, mask, types, reduction=None)
    assert model.problem_type() == "regression"
    assert logits.shape == (3, 1) and pred.shape == (3,)
    assert_close(pred, logits.squeeze(-1))
    assert_close(loss, F.mse_loss(logits.squeeze(-1), target))
    assert_close(none, (logits.squeeze(-1) - target) ** 2)
    with pytest.raises(ValueError, match="regression"):
        model.get_accuracy(target, ids, mask, types)


def test_num_labels_argument_overrides_config(batch):
    model = BERTForSequenceClassification(BERTConfig(**TINY), num_labels=5).eval()
    assert model.config.num_labels == 5
    with torch.no_grad():
        assert model(*batch).shape == (3, 5)


# ---------------------------------------------------------------------------- token classification / MC / QA

def test_token_classification_accuracy_ignores_minus_100(batch):
    model = model_of(BERTForTokenClassification, num_labels=5)
    ids, mask, types = batch
    with torch.no_grad():
        logits = model(ids, mask, types)
        pred = model.predict(ids, mask, types)
    assert logits.shape == (3, 11, 5)
    assert torch.equal(pred, logits.argmax(-1))
    gold = pred.clone()
    gold[mask == 0] = -100
    wrong = torch.zeros_like(mask, dtype=torch.bool)
    wrong[0, [1, 4]] = True
    wrong[2, 0] = True
    gold[wrong] = (gold[wrong] + 1) % 5
    valid = (mask == 1).sum().item()
    assert_close(model.get_accuracy(gold, ids, mask, types), torch.tensor((valid - 3) / valid))
    with torch.no_grad():
        loss = model.get_loss(gold, ids, mask, types)
        none = model.get_loss(gold, ids, mask, types, reduction=None)
    ref = F.cross_entropy(logits.reshape(-1, 5), gold.reshape(-1), ignore_index=-100, reduction="none")
    assert_close(loss, ref.sum() / valid)
    assert none.shape == (3, 11) and (none[mask == 0] == 0).all()
    assert_close(none.flatten(), ref)


def test_multiple_choice():
    model = model_of(BERTForMultipleChoice)
    choices = [padded_batch(seed=s) for s in (1, 2)]  # B=3 examples, C=2 choices
    ids, mask, types = (torch.stack([c[i] for c in choices], dim=1) for i in range(3))
    assert ids.shape == (3, 2, 11)
    labels = torch.tensor([1, 0, 1])
    with torch.no_grad():
        logits = model(ids, mask, types)
        per_choice = torch.stack([model.classifier(model.bert(*c)[1]).squeeze(-1) for c in choices], dim=1)
        loss = model.get_loss(labels, ids, mask, types)
        pred = model.predict(ids, mask, types)
    assert logits.shape == (3, 2)
    assert_close(logits, per_choice)
    assert_close(loss, F.cross_entropy(logits, labels))
    assert torch.equal(pred, logits.argmax(-1))
    with pytest.raises(ValueError, match="choices"):
        model(ids[:, 0], mask[:, 0], types[:, 0])


def brute_force_span(start, end, max_len, ok):
    best, arg = -math.inf, None
    n = start.shape[0]
    for i in range(n):
        for j in range(i, min(n, i + max_len)):
            if ok[i] and ok[j] and start[i] + end[j] > best:
                best, arg = start[i] + end[j], (i, j)
    return arg


@pytest.mark.parametrize("max_answer_length", [1, 3, 30])
def test_question_answering_best_span(batch, max_answer_length):
    model = model_of(BERTForQuestionAnswering, seed=4)
    ids, mask, types = batch
    answer_mask = mask.clone()
    answer_mask[:, :2] = 0  # e.g. the question part
    with torch.no_grad():
        start_logits, end_logits = model(ids, mask, types)
        s, e = model.predict(ids, mask, types, max_answer_length=max_answer_length, answer_mask=answer_mask)
        s_default, e_default = model.predict(ids, attention_mask=mask, token_type_ids=types,
                                             max_answer_length=max_answer_length)
    assert start_logits.shape == end_logits.shape == (3, 11)
    for b in range(3):
        assert (s[b].item(), e[b].item()) == brute_force_span(start_logits[b], end_logits[b], max_answer_length,
                                                              answer_mask[b].bool())
        assert s[b] <= e[b] < s[b] + max_answer_length
        assert answer_mask[b, s[b]] and answer_mask[b, e[b]]
        # default answer mask: the attention mask
        assert (s_default[b].item(), e_default[b].item()) == brute_force_span(
            start_logits[b], end_logits[b], max_answer_length, mask[b].bool())
    with pytest.raises(ValueError, match="max_answer_length"):
        model.predict(ids, mask, types, max_answer_length=0)


def test_question_answering_loss_and_accuracy(batch):
    model = model_of(BERTForQuestionAnswering, seed=4)
    ids, mask, types = batch
    with torch.no_grad():
        start_logits, end_logits = model(ids, mask, types)
        s, e = model.predict(ids, mask, types, max_answer_length=5)
    gold_s, gold_e = s.clone(), e.clone()
    assert_close(model.get_accuracy(gold_s, gold_e, ids, mask, types, max_answer_length=5), torch.tensor(1.0))
    gold_e[2] = gold_e[2] + 1 if gold_e[2] < 10 else gold_e[2] - 1
    assert_close(model.get_accuracy(gold_s, gold_e, ids, mask, types, max_answer_length=5), torch.tensor(2 / 3))
    starts, ends = torch.tensor([1, 0, 3]), torch.tensor([4, 2, 3])
    with torch.no_grad():
        loss = model.get_loss(starts, ends, ids, mask, types)
        none = model.get_loss(starts, ends, ids, mask, types, reduction=None)
        clamped = model.get_loss(torch.tensor([1, 0, 50]), ends, ids, mask, types, reduction=None)
    ref = (F.cross_entropy(start_logits, starts, reduction="none")
           + F.cross_entropy(end_logits, ends, reduction="none")) / 2
    assert_close(none, ref)
    assert_close(loss, ref.mean())
    # an out-of-range start is ignored: only half the example's end loss remains
    assert_close(clamped[2], F.cross_entropy(end_logits[2:], ends[2:]) / 2)


# ---------------------------------------------------------------------------- input validation

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
    allowed = build_attention_mask(mask, 3, 11, 11, torch.arange(11), causal=False, device=torch.device("cpu"))
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
