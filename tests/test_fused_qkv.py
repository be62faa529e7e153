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
from fused_qkv_helpers import assert_a_changed_weight_rebuilds, attentions, batch, eager_fused_apart, outputs

pytestmark = pytest.mark.skipif(not native_bf16("cpu") or not fast.onednn_available(),
                                reason="no native bf16 or no oneDNN on this CPU")


@pytest.fixture(scope="module")
def models():
    return eager_fused_apart(dtype=torch.bfloat16)


@pytest.mark.parametrize("padded", [False, True])
def test_fused_projections_equal_the_three_apart_and_stay_near_fp32(models, padded):
    got, want, reference, real = outputs(models, padded, FusedPackedKernel)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    cosine = torch.nn.functional.cosine_similarity(got.float()[real], reference[real], dim=-1)
    assert cosine.min() >= 0.999


def test_fp32_keeps_three_products(models):
    eager, _, _ = models
    model = bertkit.optimize_for_inference(copy.deepcopy(eager))
    assert all(m.fused_packed is None for m in attentions(model))


def test_a_changed_weight_rebuilds_the_fused_kernel(models):
    assert_a_changed_weight_rebuilds(models, "key")


def test_training_takes_the_gradient_path(models):
    _, fused, _ = models
    model = copy.deepcopy(fused).train()
    ids, mask, types = batch()
    model(ids, mask, types)[0].float().sum().backward()
    assert all(m.query.weight.grad is not None and m.value.weight.grad is not None for m in attentions(model))
