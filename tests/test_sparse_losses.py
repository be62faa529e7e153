"""SpladeLoss and CachedSpladeLoss against sentence-transformers 6.2's, on a tiny odd-sized random SPLADE model.

Each base loss (MNRL, MarginMSE, KL distillation, CoSENT) inside the regularisers, both sides weighted, at a step
of the regulariser warm-up: the loss value and every parameter's gradient equal ST's (its SpladeLoss with the
SpladeRegularizerWeightSchedulerCallback at the same step). ST has no L1 regulariser: its SpladeLoss takes a
regulariser module, given here as the L1 norm's textbook formula.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.sparse_encoder import losses as st_losses  # noqa: E402
from sentence_transformers.sparse_encoder.callbacks.splade_callbacks import (  # noqa: E402
    SpladeRegularizerWeightSchedulerCallback,
)

import bertkit  # noqa: E402
from bertkit.sentence.batch import PairBatch  # noqa: E402
from bertkit.sentence.losses import build_sparse_loss  # noqa: E402
from bertkit.sentence.losses.sparse import RegulariserWarmup, SpladeLoss  # noqa: E402
from bertkit.sentence.sparse_training import SparseBiEncoder  # noqa: E402
from sparse_dirs import mlm_dir  # noqa: E402
from test_sparse_encoder import _sparse_dir  # noqa: E402

ANCHORS = ["how many people live in berlin", "what is the big river", "the cat", "old town", "dog sat"]
POSITIVES = ["berlin is a big city", "the river is big", "the cat sat on the mat", "the old town", "a dog sat"]
NEGATIVES = ["cats", "the mat", "new town of the dog", "what river", "people live in the city on a river"]
TOL = {"atol": 1e-5, "rtol": 1e-4}
STEP, TOTAL = 2, 12  # warm-up over int(12 / 3) = 4 steps: the weights at (2 / 4) ** 2 of their value


@pytest.fixture(scope="module")
def splade(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("splade-loss")
    return _sparse_dir(mlm_dir(root / "mlm"), root / "splade")


class L1:
    """The L1 norm regulariser in ST's regulariser form (mean over rows of the sum of |w|)."""

    def compute_loss_from_embeddings(self, embeddings):
        return embeddings.abs().sum(dim=1).mean()


def _reference(path, make_base, columns, labels, cached=None, **options):
    """ST's loss value and gradients (parameter name -> tensor) on the batch, at STEP of the warm-up."""
    model = st.SparseEncoder(path, device="cpu")
    model.train()
    base = make_base(model)
    kind = st_losses.CachedSpladeLoss if cached else st_losses.SpladeLoss
    loss = kind(model, base, **options, **({"mini_batch_size": cached} if cached else {}))
    callback = SpladeRegularizerWeightSchedulerCallback(loss)
    callback.on_train_begin(None, SimpleNamespace(max_steps=TOTAL), None)
    callback.on_step_begin(None, SimpleNamespace(global_step=STEP), None)
    features = [model.preprocess(texts) for texts in columns]
    total = sum(loss(features, labels).values())
    total.backward()
    grads = {name.removeprefix("0.model."): p.grad for name, p in model.named_parameters() if p.grad is not None}
    return total.detach(), grads, features


def _ours(path, loss, features, labels):
    """Our loss and gradients on the same batch, each column embedded as the training run embeds it
    (:class:`~bertkit.sentence.sparse_training.SparseBiEncoder`: max pooling through splade_max)."""
    model = bertkit.SparseEncoder(path, dtype="fp32", optimize=False).train()
    n = features[0]["input_ids"].shape[0]
    names = ["anchor", "positive", *(f"negative_{i}" for i in range(1, len(features) - 1))]
    inputs = [{k: v for k, v in f.items() if k in ("input_ids", "attention_mask", "token_type_ids")} |
              {"route": torch.full((n,), min(c, 1))} for c, f in enumerate(features)]
    batch = PairBatch(names, inputs, [torch.arange(n) + c * n for c in range(len(features))], labels)
    loss.step, loss.total_steps = STEP, TOTAL
    value = loss(SparseBiEncoder(model, loss).embed, batch)
    value.backward()
    grads = {name.removeprefix("routes.main.mlm."): p.grad for name, p in model.named_parameters()}
    return value.detach(), grads


def _compare(ours, reference):
    value, grads = ours
    ref_value, ref_grads, _ = reference
    torch.testing.assert_close(value, ref_value.to(value.dtype), **TOL)
    assert set(grads) <= set(ref_grads) and len(grads) > 20
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], **TOL, msg=name)


CASES = {
    "mnrl": (lambda m: st_losses.SparseMultipleNegativesRankingLoss(m), [ANCHORS, POSITIVES, NEGATIVES], None),
    "margin-mse": (lambda m: st_losses.SparseMarginMSELoss(m), [ANCHORS, POSITIVES, NEGATIVES],
                   torch.tensor([1.5, -0.5, 2.0, 0.25, 3.0])),
    "kl": (lambda m: st_losses.SparseDistillKLDivLoss(m), [ANCHORS, POSITIVES, NEGATIVES],
           torch.tensor([[3.0, 1.0], [2.0, 2.5], [0.5, -1.0], [4.0, 0.0], [1.0, 1.5]])),
    "cosent": (lambda m: st_losses.SparseCoSENTLoss(m), [ANCHORS, POSITIVES], torch.tensor([0.9, 0.1, 0.5, 0.7, 0.3])),
}


@pytest.mark.parametrize("name", CASES)
def test_each_base_loss_with_both_regularisers_equals_sentence_transformers(splade, name):
    make_base, columns, labels = CASES[name]
    reference = _reference(splade, make_base, columns, labels, document_regularizer_weight=0.3,
                           query_regularizer_weight=0.5)
    loss = build_sparse_loss(name, document_weight=0.3, query_weight=0.5, warmup=RegulariserWarmup())
    _compare(_ours(splade, loss, reference[2], labels), reference)
    assert set(loss.parts) == {"base_loss", "document_regulariser", "query_regulariser"}


def test_l1_query_regulariser_and_thresholds(splade):
    make_base, columns, labels = CASES["mnrl"]
    reference = _reference(splade, make_base, columns, labels, document_regularizer_weight=0.2,
                           query_regularizer_weight=0.01, query_regularizer=L1(), document_regularizer_threshold=40)
    loss = build_sparse_loss("mnrl", document_weight=0.2, query_weight=0.01, query_regulariser="l1",
                             document_threshold=40, warmup=RegulariserWarmup())
    _compare(_ours(splade, loss, reference[2], labels), reference)


def test_document_only_regulariser(splade):
    make_base, columns, labels = CASES["mnrl"]
    reference = _reference(splade, make_base, columns, labels, document_regularizer_weight=0.4,
                           use_document_regularizer_only=True)
    loss = build_sparse_loss("mnrl", document_weight=0.4, document_only=True, warmup=RegulariserWarmup())
    _compare(_ours(splade, loss, reference[2], labels), reference)
    assert "query_regulariser" not in loss.parts


def test_cached_form_equals_sentence_transformers_cached_loss(splade):
    make_base, columns, labels = CASES["mnrl"]
    reference = _reference(splade, make_base, columns, labels, cached=2, document_regularizer_weight=0.3,
                           query_regularizer_weight=0.5)
    loss = build_sparse_loss("mnrl", mini_batch_size=2, document_weight=0.3, query_weight=0.5,
                             warmup=RegulariserWarmup())
    _compare(_ours(splade, loss, reference[2], labels), reference)


@pytest.mark.parametrize("shape", ["quadratic", "linear"])
def test_warmup_follows_the_reference_schedule_step_by_step(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = st_losses.SpladeLoss(SimpleNamespace(), SimpleNamespace(compute_loss_from_embeddings=None),
                                   document_regularizer_weight=3e-5, query_regularizer_weight=5e-5)
    callback = SpladeRegularizerWeightSchedulerCallback(ref, scheduler_type=shape, warmup_ratio=0.3)
    callback.on_train_begin(None, SimpleNamespace(max_steps=17), None)
    ours = SpladeLoss(torch.nn.Identity(), 3e-5, 5e-5, warmup=RegulariserWarmup(0.3, shape))
    ours.total_steps = 17
    for step in range(17):
        callback.on_step_begin(None, SimpleNamespace(global_step=step), None)
        ours.step = step
        assert ours.weights() == pytest.approx((ref.query_regularizer_weight, ref.document_regularizer_weight))


def test_bad_options_name_the_flag():
    for options, flag in [({"query_regulariser": "l2"}, "--query-regulariser"),
                          ({"document_weight": -1.0}, "--document-weight"),
                          ({"warmup": None, "mini_batch_size": 0}, "--mini-batch-size")]:
        with pytest.raises(ValueError, match=flag) as info:
            build_sparse_loss("mnrl", **options)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="--regulariser-warmup"):
        RegulariserWarmup(1.5)
    with pytest.raises(ValueError, match="--loss 'triplet' is not a loss bertkit trains sparse encoders with"):
        build_sparse_loss("triplet")
    with pytest.raises(ValueError, match="--temperature does not apply to --loss mnrl"):
        build_sparse_loss("mnrl", temperature=2.0)


@pytest.mark.parametrize("chunk", [2048, 10, 1])
def test_max_logits_equal_the_masked_amax_of_the_full_logits_with_their_gradients(chunk, monkeypatch):
    """The training path's max pooling (real tokens only, chunked, a sparse backward) against the plain one,
    in float64 on rows with left and right padding."""
    from bertkit.sentence.splade_max import MaxLogits

    monkeypatch.setattr(MaxLogits, "chunk_tokens", chunk)
    torch.manual_seed(0)
    hidden = torch.randn(5, 9, 7, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(31, 7, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(31, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(5, 9, dtype=torch.long)
    mask[1, 5:], mask[3, 2:], mask[4, :3] = 0, 0, 0
    ours = MaxLogits.apply(hidden, mask, weight, bias)
    plain = (hidden @ weight.t() + bias).masked_fill(~mask.bool()[..., None], float("-inf")).amax(dim=1)
    torch.testing.assert_close(ours, plain)
    grad = torch.randn(5, 31, dtype=torch.float64)
    for mine, theirs in zip(torch.autograd.grad(ours, [hidden, weight, bias], grad),
                            torch.autograd.grad(plain, [hidden, weight, bias], grad)):
        torch.testing.assert_close(mine, theirs)


def test_max_logits_of_a_row_without_real_tokens_is_zero_after_the_activation_with_no_gradient():
    """A row that is all padding (an empty text) pools to -inf, which ReLU/log1p make 0 as sentence-transformers
    gives, and it sends no gradient anywhere; the other rows are untouched."""
    from bertkit.sentence.modules import SpladePooling
    from bertkit.sentence.splade_max import MaxLogits

    torch.manual_seed(1)
    hidden = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    pooled = SpladePooling().activate(MaxLogits.apply(hidden, mask, weight, None))
    plain = SpladePooling()(hidden @ weight.t(), mask).double()  # its forward answers float32
    assert not pooled[1].any()
    torch.testing.assert_close(pooled, plain)
    grad = torch.randn(3, 13, dtype=torch.float64)
    for mine, theirs in zip(torch.autograd.grad(pooled, [hidden, weight], grad, retain_graph=True),
                            torch.autograd.grad(plain, [hidden, weight], grad)):
        torch.testing.assert_close(mine, theirs)
    assert not torch.autograd.grad(pooled[1].sum(), hidden, allow_unused=True)[0].any()
