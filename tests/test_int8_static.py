"""Static int8 (``bertkit.inference.int8_plan``): the kernel against a float reference of the same quantization, the
plan's round trip through tensors + JSON, the observers, the retrieval metric, the fallback search, bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit import devices
from bertkit.inference import running_dtype
from bertkit.inference.calibration import (
    BINS,
    MIN_TEXTS,
    check_texts,
    clip_range,
    grid,
    neighbour_agreement,
    smooth_vector,
)
from bertkit.inference.int8_plan import (
    METHOD_VERSION,
    CalibrationSource,
    Int8Plan,
    LayerPlan,
    Targets,
    apply,
    calibrate,
)
from bertkit.inference.optimize import StaticInt8Kernel
from bertkit.modeling.fast import Linear
from bertkit.modeling.quantization import dequantize_weight, quantize_weight, seven_bit
from bertkit.resources import calibration_texts
from conftest import model_of

SOURCE = CalibrationSource("test", "0" * 64, 10, 4)
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "where", "is", "what", "did", "see", "tea", "rain", "walk",
         "letter", "ball", "garden", "sister"]


def reference_product(x, layer, scale, zero_point, smooth=None):
    """The float reference: x on the uint8 grid, the weight (smoothed: its int8 round trip times ``smooth``)
    through quantize_weight (7-bit where int8 products saturate), float32 arithmetic."""
    w = layer.weight.detach()
    if smooth is not None:
        w = dequantize_weight(*quantize_weight(w)) * smooth
    q, s = quantize_weight(w)
    if devices.int8_saturates():
        q, s = seven_bit(q, s)
    if smooth is not None:
        x = x / smooth
    xq = (torch.clamp(torch.round(x / scale) + zero_point, 0, 255) - zero_point) * scale
    return xq @ dequantize_weight(q, s).T + layer.bias.detach()


@pytest.mark.parametrize("smoothed", [False, True])
@pytest.mark.parametrize("zero_point", [0, 97, 255])
def test_the_static_kernel_is_its_float_reference(smoothed, zero_point):
    g = torch.Generator().manual_seed(zero_point)
    layer = Linear(29, 13)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(13, 29, generator=g) * 0.1)
        layer.bias.copy_(torch.randn(13, generator=g))
    x = torch.randn(2, 17, 29, generator=g) * 2 + 0.5  # partly outside the grid: clipped
    smooth = torch.rand(29, generator=g) + 0.5 if smoothed else None
    kernel = StaticInt8Kernel("layer", 0.031, zero_point, smooth)
    torch.backends.quantized.engine = "x86"
    out = kernel(x, layer)
    assert out.shape == (2, 17, 13)
    torch.testing.assert_close(out, reference_product(x, layer, 0.031, zero_point, smooth), atol=2e-5, rtol=1e-5)


def plan_for(model, smooth_every: int = 2) -> Int8Plan:
    g = torch.Generator().manual_seed(3)
    layers = {}
    for i, (name, m) in enumerate((n, m) for n, m in model.named_modules() if isinstance(m, Linear)):
        smooth = torch.rand(m.in_features, generator=g) + 0.5 if i % smooth_every == 0 else None
        mode = "float" if i == 1 else "int8"
        layers[name] = LayerPlan(mode, 0.02 + i / 1000, 100 + i, reason=f"r{i}", smooth=smooth, impact=i / 10)
    return Int8Plan(layers, SOURCE, observer="mse", smooth_alpha=0.5, quality={"top10": 0.98})


def test_a_smoothed_kernel_prepares_the_same_weights_from_the_int8_checkpoints_weight():
    g = torch.Generator().manual_seed(7)
    layer, loaded = Linear(23, 11), Linear(23, 11)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(11, 23, generator=g))
        loaded.weight.copy_(dequantize_weight(*quantize_weight(layer.weight)))  # what an int8 checkpoint loads
        loaded.bias.copy_(layer.bias)
    smooth = torch.rand(23, generator=g) + 0.5
    x = torch.randn(5, 23, generator=g)
    torch.backends.quantized.engine = "x86"
    in_memory, from_checkpoint = (StaticInt8Kernel(n, 0.02, 128, smooth) for n in "ab")
    assert torch.equal(in_memory(x, layer), from_checkpoint(x, loaded))


def test_a_plan_round_trips_through_safetensors_and_json(tmp_path):
    plan = plan_for(model_of(bertkit.BERT))
    meta, tensors = plan.to_state()
    (tmp_path / "plan.json").write_text(json.dumps(meta))
    save_file(tensors, tmp_path / "plan.safetensors")
    back = Int8Plan.from_state(json.loads((tmp_path / "plan.json").read_text()),
                               load_file(tmp_path / "plan.safetensors"))
    assert back.calibration == plan.calibration and back.quality == plan.quality
    assert (back.observer, back.smooth_alpha, back.method_version) == ("mse", 0.5, METHOD_VERSION)
    assert list(back.layers) == list(plan.layers)
    for name, p in plan.layers.items():
        q = back.layers[name]
        assert (q.mode, q.scale, q.zero_point, q.reason, q.impact) == (p.mode, p.scale, p.zero_point, p.reason,
                                                                      p.impact)
        assert (q.smooth is None) == (p.smooth is None)
        if p.smooth is not None:
            assert torch.equal(q.smooth, p.smooth)
    assert back.fallbacks == plan.fallbacks and len(back.fallbacks) == 1


def test_a_plan_of_another_method_version_is_one_line():
    meta, tensors = plan_for(model_of(bertkit.BERT)).to_state()
    with pytest.raises(ValueError, match=r"version 99; this bertkit reads .* version 1: convert") as err:
        Int8Plan.from_state({**meta, "method_version": 99}, tensors)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"smooth.*missing"):
        Int8Plan.from_state(meta, {})


def test_layer_plans_refuse_bad_values():
    with pytest.raises(ValueError, match="mode"):
        LayerPlan("int4", 0.1, 0)
    with pytest.raises(ValueError, match="scale"):
        LayerPlan("int8", math.nan, 0)
    with pytest.raises(ValueError, match="zero_point"):
        LayerPlan("int8", 0.1, 256)
    with pytest.raises(ValueError, match="smooth"):
        LayerPlan("int8", 0.1, 0, smooth=torch.zeros(3))


def test_apply_attaches_the_plan_and_the_model_follows_the_reference_layer_by_layer():
    model = model_of(bertkit.BERT, seed=2)
    plan = plan_for(model)
    ids = torch.randint(5, 99, (3, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids)[0]
    apply(model, plan)
    kernels = {n: m.packed for n, m in model.named_modules() if isinstance(m, Linear)}
    assert all(isinstance(kernels[n], StaticInt8Kernel) == (p.mode == "int8") for n, p in plan.layers.items())
    assert running_dtype(model) == "int8"
    with torch.no_grad():
        out = model(input_ids=ids)[0]
    assert out.shape == expected.shape and 0 < float((out - expected).abs().max()) < 1.0


def test_apply_refuses_a_plan_of_another_model():
    model = model_of(bertkit.BERT)
    plan = plan_for(model)
    with pytest.raises(ValueError, match="'nope', which is not a dense layer"):
        apply(model, Int8Plan({"nope": LayerPlan("int8", 0.1, 0)}, SOURCE))
    name = next(n for n, p in plan.layers.items() if p.smooth is not None and p.mode == "int8")
    plan.layers[name].smooth = torch.ones(5)
    with pytest.raises(ValueError, match=f"smooth vector for {name} has shape"):
        apply(model, plan)


def test_observers_clip_outliers_by_their_rule():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(1_000_000, generator=g), torch.tensor([40.0, -9.0])])
    lo, hi = float(x.min()), float(x.max())
    hist = torch.histc(x, BINS, min=lo, max=hi).double()
    assert clip_range(hist, lo, hi, "minmax") == (lo, hi)
    pa, pb = clip_range(hist, lo, hi, "percentile")
    assert -4.5 < pa < -3 and 3 < pb < 4.5
    ma, mb = clip_range(hist, lo, hi, "mse")
    assert lo <= ma < 0 < mb < hi - 10  # the 40 is clipped: its squared error is below the finer steps' gain
    scale, zero_point = grid(-1.0, 3.0)
    assert scale == pytest.approx(4 / 255) and zero_point == round(1 / scale)
    assert grid(0.0, 2.0)[1] == 0 and grid(-2.0, 0.0)[1] == 255


def test_smooth_vectors_balance_activation_and_weight_ranges():
    lo, hi = torch.tensor([-8.0, -1.0, 0.0]), torch.tensor([2.0, 1.0, 0.0])
    weight = torch.tensor([[0.5, 2.0, 1.0], [-0.5, 0.1, 1.0]])
    s = smooth_vector(lo, hi, weight, 0.5)
    torch.testing.assert_close(s, torch.tensor([4.0, math.sqrt(1 / 2), 1.0]))


def test_neighbour_agreement_is_one_for_the_same_embeddings_and_drops_for_others():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(40, 8, generator=g)
    same = neighbour_agreement(e, e * 3)
    assert same["top10"] == 1 and same["ndcg10"] == pytest.approx(1) and same["min_cosine"] == pytest.approx(1)
    other = neighbour_agreement(e, torch.randn(40, 8, generator=g))
    assert other["top10"] < 0.6 and other["ndcg10"] < 0.6
    with pytest.raises(ValueError, match="more than k=10 rows"):
        neighbour_agreement(e[:10], e[:10])


def embedder(model):
    """Texts -> mean-pooled token vectors of ``model``, words hashed into the tiny vocabulary."""
    def embed(texts):
        rows = [[5 + sum(map(ord, w)) % 94 for w in t.split()][:30] for t in texts]
        length = max(map(len, rows))
        ids = torch.tensor([r + [0] * (length - len(r)) for r in rows])
        mask = (ids != 0).long()
        out = model(input_ids=ids, attention_mask=mask)[0]
        return (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return embed


def texts(n: int) -> list[str]:
    g = torch.Generator().manual_seed(1)
    return [" ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (3 + i % 9,), generator=g).tolist())
            for i in range(n)]


def test_calibrate_falls_back_the_worst_layers_until_the_targets_hold():
    model = model_of(bertkit.BERT, seed=4)
    before = {n: m.packed for n, m in model.named_modules() if isinstance(m, Linear)}
    strict = calibrate(model, texts(60), embed=embedder(model), source="words", observer="mse",
                       targets=Targets(top10=1.01, ndcg10=1.01, max_fallback_share=0.25))
    assert {n: m.packed for n, m in model.named_modules() if isinstance(m, Linear)} == before  # left as it was
    impacts = {n: p.impact for n, p in strict.layers.items()}
    assert all(0 <= v <= 1 for v in impacts.values())
    fallen = list(strict.fallbacks)
    assert len(fallen) == math.floor(0.25 * len(strict.layers)) == strict.quality["fallbacks"]
    assert fallen and min(impacts[n] for n in fallen) >= max(impacts[n] for n in strict.int8_layers)
    assert all(reason.startswith("fallback: alone in int8 it loses") for reason in strict.fallbacks.values())
    assert strict.calibration.source == "words" and strict.calibration.texts + strict.calibration.held_out == 60
    lenient = calibrate(model, texts(60), embed=embedder(model), targets=Targets(top10=0, ndcg10=0))
    assert not lenient.fallbacks and lenient.quality["top10"] == lenient.quality["all_int8_top10"]
    assert {"top10", "ndcg10", "min_cosine", "mean_cosine"} <= set(lenient.quality)


def test_smoothquant_calibration_gives_smooth_vectors_the_kernel_uses():
    model = model_of(bertkit.BERT, seed=5)
    plan = calibrate(model, texts(50), embed=embedder(model), smooth_alpha=0.5, targets=Targets(0, 0))
    assert all(p.smooth is not None and p.smooth.shape == (model.get_submodule(n).in_features,)
               for n, p in plan.layers.items())
    apply(model, plan)
    assert all(m.packed.smooth is not None for m in model.modules() if isinstance(m, Linear)
               and isinstance(m.packed, StaticInt8Kernel))


def test_calibration_input_is_checked_in_one_line():
    model = model_of(bertkit.BERT)
    with pytest.raises(ValueError, match=r"calibration texts \(f.txt\) are empty"):
        check_texts(["", " "], "f.txt")
    with pytest.raises(ValueError, match=rf"\(f.txt\): 5 texts, too few to calibrate; give at least {MIN_TEXTS}"):
        check_texts(texts(5), "f.txt")
    with pytest.raises(ValueError, match="observer must be one of"):
        calibrate(model, texts(60), embed=embedder(model), observer="kl")
    with pytest.raises(ValueError, match="is no sentence-embedding model; pass embed="):
        calibrate(model, texts(60))


def test_the_default_calibration_set_is_shipped():
    rows = calibration_texts()
    assert len(rows) >= 5 * MIN_TEXTS and len(set(rows)) == len(rows)
    assert all(0 < len(r) < 1000 for r in rows)
