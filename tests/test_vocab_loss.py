"""The fused vocabulary cross-entropy equals ``F.cross_entropy(F.linear(...))``: losses, argmax, gradients."""

import pytest
import torch
import torch.nn.functional as F

import bertkit
from bertkit.modeling import fast, vocab_loss
from bertkit.modeling.vocab_loss import linear_cross_entropy


def operands(n=37, h=24, v=1001, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, h, generator=g) * scale).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.3).requires_grad_()
    b = (torch.randn(v, generator=g) * 0.1).requires_grad_()
    return x, w, b, torch.randint(0, v, (n,), generator=g)


def reference(x, w, b, targets, upstream):
    scores = F.linear(x, w, b).float()
    losses = F.cross_entropy(scores, targets, reduction="none")
    (losses * upstream).sum().backward()
    return losses.detach(), scores.argmax(-1)


def grads(*tensors):
    out = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out


@pytest.mark.parametrize("gemm", ["onednn", "plain"])
@pytest.mark.parametrize("scale", [1.0, 300.0])  # 300: scores in the thousands, exp overflows without the max
def test_fused_equals_unfused_float32(gemm, scale, monkeypatch):
    calls = []
    real = vocab_loss._LinearCrossEntropy.apply
    monkeypatch.setattr(vocab_loss._LinearCrossEntropy, "apply", lambda *a: calls.append(1) or real(*a))
    x, w, b, targets = operands(scale=scale)
    upstream = torch.rand(x.shape[0])  # any per-row weights, not only a mean
    with fast.fast_path(True, gemm=gemm):
        losses, predictions = linear_cross_entropy(x, w, b, targets)
        (losses * upstream).sum().backward()
    assert calls == [1]
    ours = grads(x, w, b)
    want_losses, want_predictions = reference(x, w, b, targets, upstream)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-4 * scale)
    assert torch.equal(predictions, want_predictions)
    for got, want in zip(ours, grads(x, w, b)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert ours[1].is_contiguous()  # the tied embedding's gradient sum reads dense memory


def test_fused_under_bf16_autocast_matches_autocast():
    x, w, b, targets = operands()
    upstream = torch.full((x.shape[0],), 1 / x.shape[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert vocab_loss._compute_dtype(x, w) == torch.bfloat16
        losses, _ = linear_cross_entropy(x, w, b, targets)
        (losses * upstream).sum().backward()
        ours = grads(x, w, b)
        with fast.fast_path(False):  # the unfused expression, autocast as usual
            want_losses, _ = reference(x, w, b, targets, upstream)
    assert losses.dtype == torch.float32 and all(g.dtype == torch.float32 for g in ours)
    torch.testing.assert_close(losses, want_losses, rtol=2e-2, atol=2e-2)
    for got, want in zip(ours, grads(x, w, b)):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=2e-3)


def test_unfused_where_graphs_or_the_fast_path_off_or_nothing_to_score():
    x, w, b, targets = operands()
    with fast.fast_path(False):
        assert vocab_loss._compute_dtype(x, w) is None
    assert vocab_loss._compute_dtype(x[:0], w) is None
    assert vocab_loss._compute_dtype(x.double(), w.double()) is None
    losses, predictions = linear_cross_entropy(x[:0], w, b, targets[:0])
    assert losses.shape == (0,) and predictions.shape == (0,)


def test_pretraining_step_gradients_equal_the_unfused_loss(tiny_config):
    """The whole MLM + NSP step, tied decoder and embeddings, fused vs the fast path off."""
    torch.manual_seed(0)
    model = bertkit.BERTForPreTraining(tiny_config).eval()  # no dropout: both runs see the same network
    ids = torch.randint(0, tiny_config.vocab_size, (3, 11))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids, "mlm_labels": labels, "nsp_labels": torch.tensor([0, 1, 1])}
    results = []
    for enabled in (True, False):
        with fast.fast_path(enabled):
            model.zero_grad()
            loss, metrics = model.training_step(batch)
            loss.backward()
        results.append((loss.detach(), metrics["mlm_accuracy"],
                        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (fused, acc, g1), (plain, acc2, g2) = results
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(acc, acc2)
    assert g1.keys() == g2.keys() and "bert.embeddings.word_embeddings.weight" in g1
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], rtol=1e-4, atol=1e-6, msg=name)
