"""The fused query/key/value kernel of bf16 inference (``optimize_for_inference(dtype=torch.bfloat16)``).

Compared against the same bf16 model with its three projections run apart (the kernel changes no number on
oneDNN, whose output columns do not depend on their neighbours), against the float32 model (cosine ≥ 0.999,
the issue's bound), and: float32 inference keeps its three products (its numbers are a contract).
"""

from __future__ import annotations

import copy

import pytest
import torch

import bertkit
from bertkit.devices import native_bf16
from bertkit.inference.optimize import FusedPackedKernel
from bertkit.modeling import fast
from bertkit.modeling.layers import BERTSelfAttention

pytestmark = pytest.mark.skipif(not native_bf16("cpu") or not fast.onednn_available(),
                                reason="no native bf16 or no oneDNN on this CPU")

CONFIG = bertkit.BERTConfig(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                            intermediate_size=37)


def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 99, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0  # a third of the tokens padding: the unpadded path
    return ids, mask, torch.zeros_like(ids)


def attentions(model):
    return [m for m in model.modules() if isinstance(m, BERTSelfAttention)]


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    eager = bertkit.BERT(CONFIG).eval()
    fused = bertkit.optimize_for_inference(copy.deepcopy(eager), dtype=torch.bfloat16)
    apart = bertkit.optimize_for_inference(copy.deepcopy(eager), dtype=torch.bfloat16)
    for module in attentions(apart):
        module.fused_packed = None
    return eager, fused, apart


@pytest.mark.parametrize("padded", [False, True])
def test_fused_projections_equal_the_three_apart_and_stay_near_fp32(models, padded):
    eager, fused, apart = models
    ids, mask, types = batch()
    if not padded:
        mask = torch.ones_like(mask)
    assert all(isinstance(m.fused_packed, FusedPackedKernel) for m in attentions(fused))
    with torch.inference_mode():
        got, want, reference = fused(ids, mask, types)[0], apart(ids, mask, types)[0], eager(ids, mask, types)[0]
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    real = mask.bool()
    cosine = torch.nn.functional.cosine_similarity(got.float()[real], reference[real], dim=-1)
    assert cosine.min() >= 0.999


def test_fp32_keeps_three_products(models):
    eager, _, _ = models
    model = bertkit.optimize_for_inference(copy.deepcopy(eager))
    assert all(m.fused_packed is None for m in attentions(model))


def test_a_changed_weight_rebuilds_the_fused_kernel(models):
    _, fused, apart = models
    fused, apart = copy.deepcopy(fused), copy.deepcopy(apart)
    ids, mask, types = batch()
    with torch.inference_mode():
        before = fused(ids, mask, types)[0]
    for model in (fused, apart):
        with torch.no_grad():
            attentions(model)[0].key.weight.mul_(2)
    with torch.inference_mode():
        after, want = fused(ids, mask, types)[0], apart(ids, mask, types)[0]
    assert not torch.equal(before, after)
    torch.testing.assert_close(after, want, atol=0, rtol=0)


def test_training_takes_the_gradient_path(models):
    _, fused, _ = models
    model = copy.deepcopy(fused).train()
    ids, mask, types = batch()
    model(ids, mask, types)[0].float().sum().backward()
    assert all(m.query.weight.grad is not None and m.value.weight.grad is not None for m in attentions(model))
