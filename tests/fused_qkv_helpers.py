"""What the fused query/key/value tests share (bf16 in test_fused_qkv.py, int8 in test_fused_int8_qkv.py): one
tiny odd-sized BERT, one batch with padding, the model built fused and with its three projections run apart,
and the checks both kernels must pass."""

from __future__ import annotations

import copy

import torch

import bertkit
from bertkit.modeling.layers import BERTSelfAttention

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


def eager_fused_apart(**optimize):
    """The float32 model, it prepared by ``optimize_for_inference(**optimize)`` (its projections fused), and the
    same preparation with each attention's fused kernel removed (the three products apart)."""
    torch.manual_seed(0)
    eager = bertkit.BERT(CONFIG).eval()
    fused = bertkit.optimize_for_inference(copy.deepcopy(eager), **optimize)
    apart = bertkit.optimize_for_inference(copy.deepcopy(eager), **optimize)
    for module in attentions(apart):
        module.fused_packed = None
    return eager, fused, apart


def outputs(models, padded: bool, kernel: type):
    """The fused, apart and float32 outputs on :func:`batch` (padded or not) and its mask; every attention of the
    fused model checked to hold a ``kernel``."""
    eager, fused, apart = models
    ids, mask, types = batch()
    if not padded:
        mask = torch.ones_like(mask)
    assert all(isinstance(m.fused_packed, kernel) for m in attentions(fused))
    with torch.inference_mode():
        got, want, reference = fused(ids, mask, types)[0], apart(ids, mask, types)[0], eager(ids, mask, types)[0]
    return got, want, reference, mask.bool()


def assert_a_changed_weight_rebuilds(models, projection: str) -> None:
    """Doubling the first attention's ``projection`` weight changes the fused model's output, which still equals
    the apart model's: the fused kernel is rebuilt, not kept stale."""
    _, fused, apart = models
    fused, apart = copy.deepcopy(fused), copy.deepcopy(apart)
    ids, mask, types = batch()
    with torch.inference_mode():
        before = fused(ids, mask, types)[0]
    for model in (fused, apart):
        with torch.no_grad():
            getattr(attentions(model)[0], projection).weight.mul_(2)
    with torch.inference_mode():
        after, want = fused(ids, mask, types)[0], apart(ids, mask, types)[0]
    assert not torch.equal(before, after)
    torch.testing.assert_close(after, want, atol=0, rtol=0)
