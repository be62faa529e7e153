"""Task-head helpers: losses, sparse MLM, predictions and accuracies of every head.

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
    BERTConfig,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from conftest import NSP, TINY, V, mlm_labels_for, model_of, padded_batch

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


def test_multiple_choice_absent_choices_are_left_out():
    """Examples with 2 and 3 choices in one batch: the padded (all-masked) choice is never picked, and the
    present choices' logits, softmax and loss equal those of the example run with its own choices alone."""
    model = model_of(BERTForMultipleChoice)
    choices = [padded_batch(seed=s) for s in (1, 2, 3)]
    ids, mask, types = (torch.stack([c[i] for c in choices], dim=1) for i in range(3))  # [3, 3, 11]
    mask = mask.clone()
    mask[0, 2] = 0  # example 0 has two choices
    labels = torch.tensor([1, 2, 0])
    with torch.no_grad():
        logits = model(ids, mask, types)
        alone = model(ids[:1, :2], mask[:1, :2], types[:1, :2])
        loss = model.get_loss(labels, ids, mask, types, reduction=None)
        alone_loss = model.get_loss(labels[:1], ids[:1, :2], mask[:1, :2], types[:1, :2], reduction=None)
    assert logits[0, 2] == torch.finfo(logits.dtype).min and torch.isfinite(logits[1:]).all()
    assert_close(logits[0, :2], alone[0])
    assert_close(logits.softmax(-1)[0, :2], alone.softmax(-1)[0])
    assert_close(loss[0], alone_loss[0])
    assert torch.isfinite(loss).all() and logits.argmax(-1)[0] != 2


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


def test_multi_label_accuracy_from_float_labels_alone():
    """No problem_type in the config: float [B, C] labels make it multi-label, as for the loss."""
    import bertkit

    config = bertkit.BERTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=20, num_labels=3)
    model = bertkit.BERTForSequenceClassification(config).eval()
    ids = torch.randint(5, 50, (4, 7), generator=torch.Generator().manual_seed(0))
    predicted = (model(ids) > 0).float()
    labels = predicted.clone()
    labels[0, 0] = 1 - labels[0, 0]  # one label of one example wrong
    assert model.get_accuracy(labels, ids).item() == pytest.approx(11 / 12)  # of every label of every example
    assert model.get_accuracy(predicted, ids).item() == 1.0
