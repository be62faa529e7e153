"""The fused query/key/value kernel of dynamic int8 inference and the gather that feeds attention unpadded.

``optimize_for_inference(quantize="int8")`` runs a self-attention's three projections as one int8 product
(:class:`~bertkit.inference.optimize.FusedInt8Kernel`): the input quantized once, each output channel its own
layer's int8 weights and scale, so the outputs equal the three products apart bit for bit. The unpadded path
spreads the packed rows to ``[B, L, ...]`` with one gather (:meth:`~bertkit.modeling.unpad.Packing.spread`);
what attention reads at real positions is what the zero-filled :meth:`~bertkit.modeling.unpad.Packing.unpack`
gave, and so is every output and gradient.
"""

from __future__ import annotations

import copy

import pytest
import torch

from bertkit.inference.optimize import FusedInt8Kernel, Int8Kernel
from bertkit.modeling import fast, unpad
from fused_qkv_helpers import CONFIG, assert_a_changed_weight_rebuilds, attentions, batch, eager_fused_apart, outputs

pytestmark = pytest.mark.skipif(
    not fast.onednn_available() or "fbgemm" not in torch.backends.quantized.supported_engines,
    reason="no oneDNN or no fbgemm int8 kernels in this torch build")


@pytest.fixture(scope="module")
def models():
    return eager_fused_apart(quantize="int8")


@pytest.mark.parametrize("padded", [False, True])
def test_fused_int8_projections_equal_the_three_apart(models, padded):
    got, want, reference, real = outputs(models, padded, FusedInt8Kernel)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    cosine = torch.nn.functional.cosine_similarity(got[real], reference[real], dim=-1)
    assert cosine.min() >= 0.99  # int8 against float32: the fusion adds nothing to int8's own error


def test_fused_int8_kernel_output_equals_each_layers_product(models):
    _, fused, _ = models
    attention = attentions(fused)[0]
    x = torch.randn(13, CONFIG.hidden_size)
    layers = (attention.query, attention.key, attention.value)
    with torch.inference_mode():
        out = attention.fused_packed(x, layers)
        apart = torch.cat([m(x) for m in layers], dim=-1)
    torch.testing.assert_close(out, apart, atol=0, rtol=0)


def test_fused_int8_kernel_steps_aside(models):
    """Where a layer's own kernel is not dynamic int8 (a static plan's, a float fallback) or the input is not a
    float32 CPU matrix, the fused kernel returns None and the layers run themselves."""
    _, fused, _ = models
    model = copy.deepcopy(fused)
    attention = attentions(model)[0]
    layers = (attention.query, attention.key, attention.value)
    x = torch.randn(5, CONFIG.hidden_size)
    assert attention.fused_packed(x.double(), layers) is None
    assert attention.fused_packed(x[0], layers) is None
    attention.key.packed = None  # the key left in float
    assert attention.fused_packed(x, layers) is None
    assert isinstance(attention.query.packed, Int8Kernel)


def test_a_changed_weight_rebuilds_the_fused_int8_kernel(models):
    assert_a_changed_weight_rebuilds(models, "value")


def packing():
    _, mask, _ = batch()
    mask = mask.bool()
    keys = mask[:, None, None, :]
    return unpad.plan(mask, keys), mask


def test_spread_equals_unpack_at_real_positions():
    plan, mask = packing()
    x = torch.randn(plan.tokens, 5)
    spread, unpacked = plan.spread(x), plan.unpack(x)
    assert spread.shape == unpacked.shape == (3, 11, 5)
    torch.testing.assert_close(spread[mask], unpacked[mask], atol=0, rtol=0)
    assert torch.isfinite(spread).all() and (unpacked[~mask] == 0).all()
    with pytest.raises(ValueError, match="spread takes the packed rows"):
        plan.spread(x[:-1])


def test_spread_gives_unpacks_attention_outputs_and_gradients():
    plan, _ = packing()
    torch.manual_seed(1)
    q, k, v = (torch.randn(plan.tokens, 6, requires_grad=True) for _ in range(3))

    def attention(place):
        heads = [place(t).view(3, 11, 2, 3).transpose(1, 2) for t in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*heads, attn_mask=plan.keys)
        return plan.pack(out.transpose(1, 2).flatten(2))

    grads = []
    for place in (plan.spread, plan.unpack):
        out = attention(place)
        out = out[: plan.real]  # the rows carried along to round the count are dropped by the model's end
        grads.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    for got, want in zip(*grads):
        torch.testing.assert_close(got[: plan.real], want[: plan.real], atol=1e-6, rtol=1e-6)
