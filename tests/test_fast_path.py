"""The fast path: oneDNN products (forward and gradients), unpadded execution, prepared inference kernels.

Every claim is checked against the plain PyTorch path on the same weights, and that the fast path is
really taken is checked by counting kernel calls and packings, never by timing.
"""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
import torch.nn.functional as F

import bertkit
from bertkit import devices
from bertkit.inference import Int8Kernel, PackedKernel, native_bf16, optimize_for_inference
from bertkit.modeling import fast, unpad
from bertkit.modeling.fast import Linear
from bertkit.modeling.quantization import quantize_weight, seven_bit
from conftest import padded_batch, randomize_

pytestmark = pytest.mark.skipif(not fast.onednn_available(), reason="torch built without oneDNN")


@pytest.fixture
def kernel_calls(monkeypatch):
    """Count oneDNN products (the function every fast Linear reaches)."""
    calls = []
    real = fast.onednn_linear

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(fast, "onednn_linear", spy)
    return calls


@pytest.fixture
def packings(monkeypatch):
    """Record every unpadding decision of the backbone (None = padded path)."""
    plans = []
    real = unpad.plan

    def spy(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(unpad, "plan", spy)
    return plans


def _models(cls, config, seed=0):
    return randomize_(cls(config), seed=seed, std=0.1).eval()


# ---------------------------------------------------------------------------- the dense layer

def test_row_counts_are_rounded_to_few_buckets():
    """32 row counts per octave (multiples of 8 below 256): a run whose batches vary sees few shapes."""
    counts = [fast.bucket_rows(m) for m in range(1, 70_000)]
    assert all(b >= m and b - m < max(8, m / 32) for m, b in zip(range(1, 70_000), counts, strict=True))
    assert counts == sorted(counts)
    assert len(set(counts[1999:4096])) <= 34  # the real tokens of a 32 x 128 batch, 2,000 to 4,096
    assert fast.bucket_rows(4096) == 4096 and fast.bucket_rows(4097) == 4224 and fast.bucket_rows(7) == 8


def test_onednn_sees_bucketed_row_counts_forward_and_backward(monkeypatch, tiny_config):
    """Issue 28: a kernel per row count made pretraining's resident set grow with its steps. Every product of a
    training step on batches of varying length reaches oneDNN with a bucketed row count."""
    seen = []
    real = fast._inner_product

    def spy(x, weight, bias, activation):
        seen.append((x.shape[0], weight.shape[-1]))  # rows, and the summed dimension
        return real(x, weight, bias, activation)

    monkeypatch.setattr(fast, "_inner_product", spy)
    torch.manual_seed(0)
    model = bertkit.BERTForMaskedLM(tiny_config)
    for longest in (21, 27, 33, 39, 40):
        ids = torch.randint(5, tiny_config.vocab_size, (6, 40))
        mask = (torch.arange(40) < torch.randint(longest - 15, longest, (6, 1))).long()
        labels = torch.where((torch.rand(6, 40) < 0.3) & mask.bool(), ids, -100)
        model.get_loss(labels, ids, mask).backward()
    h, i = tiny_config.hidden_size, tiny_config.intermediate_size
    fixed = {h, 3 * h, i, tiny_config.vocab_size}  # features (3h: query, key and value as one product)
    varying = {m for rows, k in seen for m in (rows, k) if m not in fixed}
    assert len(varying) > 3 and all(fast.bucket_rows(m) == m for m in varying), sorted(varying)


@pytest.mark.parametrize("shape", [(7, 36), (3, 5, 36), (2, 3, 4, 36)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_equals_f_linear_with_gradients(shape, bias, kernel_calls):
    torch.manual_seed(0)
    layer = Linear(36, 37, bias=bias)
    x = torch.randn(shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out = layer(x)
    assert len(kernel_calls) == 1, "the forward product did not run on oneDNN"
    grad = torch.randn(out.shape)
    out.backward(grad)
    assert len(kernel_calls) == 3, "the two gradient products did not run on oneDNN"
    got = (out.detach(), x.grad, layer.weight.grad, layer.bias.grad if bias else None)
    layer.zero_grad()
    ref = F.linear(x_ref, layer.weight, layer.bias)
    ref.backward(grad)
    want = (ref.detach(), x_ref.grad, layer.weight.grad, layer.bias.grad if bias else None)
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_non_contiguous_input_and_fused_gelu(kernel_calls):
    torch.manual_seed(0)
    layer = Linear(36, 50)
    x = torch.randn(4, 36, 9).transpose(1, 2)  # strided
    with torch.no_grad():
        torch.testing.assert_close(layer(x, activation="gelu"), F.gelu(F.linear(x, layer.weight, layer.bias)),
                                   atol=1e-6, rtol=1e-6)
    assert len(kernel_calls) == 1
    x.requires_grad_(True)
    layer(x, activation="gelu").sum().backward()  # the unfused form keeps the gradient right
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("case", ["plain_setting", "bf16", "autocast", "tracing", "empty"])
def test_plain_f_linear_where_the_fast_kernel_does_not_apply(case, kernel_calls):
    layer = Linear(8, 4)
    x = torch.randn(3, 8)
    if case == "plain_setting":
        with fast.fast_path(gemm="plain"):
            layer(x)
    elif case == "bf16":
        layer.to(torch.bfloat16)(x.bfloat16())
    elif case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x).dtype == torch.bfloat16
    elif case == "tracing":
        torch.jit.trace(layer, x, check_trace=False)
    else:
        assert layer(torch.randn(0, 8)).shape == (0, 4)
    assert kernel_calls == []


def test_gemm_measurement_and_settings(monkeypatch):
    m = fast.measure_gemm(64, 64, 64, repeats=2)
    assert m.plain_gflops > 0 and m.onednn_gflops > 0 and m.chosen in ("onednn", "plain")
    assert m.chosen == ("onednn" if m.onednn_gflops >= fast.MIN_GAIN * m.plain_gflops else "plain")
    with fast.fast_path(gemm="auto"):
        assert fast.gemm_backend() == fast.hardware_gemm()[0]  # a measurement is information only
    with fast.fast_path(False):
        assert fast.gemm_backend() == "plain" and not fast.settings().enabled
    assert fast.settings().enabled and fast.settings().gemm == "onednn"  # restored
    with pytest.raises(ValueError, match="gemm must be one of"):
        fast.set_fast_path(gemm="mkl")
    with pytest.raises(ValueError, match="min_padding"):
        fast.set_fast_path(min_padding=2.0)
    monkeypatch.setenv("BERTKIT_GEMM", "cublas")
    with pytest.raises(ValueError, match="BERTKIT_GEMM"):
        fast._from_environment()
    monkeypatch.setenv("BERTKIT_GEMM", "plain")
    monkeypatch.setenv("BERTKIT_FAST_PATH", "0")
    assert fast._from_environment() == fast.FastPathSettings(enabled=False, gemm="plain")


def test_every_dense_layer_of_every_model_is_the_fast_linear(tiny_config):
    for cls in (bertkit.BERTForPreTraining, bertkit.BERTForSequenceClassification,
                bertkit.BERTForTokenClassification, bertkit.BERTForQuestionAnswering, bertkit.BERTForMultipleChoice):
        model = cls(tiny_config)
        dense = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        assert dense and all(isinstance(model.get_submodule(n), Linear) for n in dense), cls.__name__


def test_query_key_value_run_as_one_product_unless_a_module_is_hooked(tiny_config, monkeypatch):
    weights = []
    real = fast.linear
    monkeypatch.setattr(fast, "linear", lambda x, w, *a, **k: weights.append(tuple(w.shape)) or real(x, w, *a, **k))
    ids, mask, types = padded_batch()
    model = _models(bertkit.BERT, tiny_config).train()
    h, layers = tiny_config.hidden_size, tiny_config.num_hidden_layers
    model(ids, mask, types)[0].sum().backward()
    assert weights.count((3 * h, h)) == layers  # one [q | k | v] product per layer ...
    fused_grads = {n: p.grad.clone() for n, p in model.named_parameters() if "attention.self" in n}
    assert len(fused_grads) == 6 * layers
    seen = []
    model.encoder.layer[0].attention.self.key.register_forward_hook(lambda *a: seen.append(1))
    model.zero_grad()
    weights.clear()
    model(ids, mask, types)[0].sum().backward()
    assert seen == [1] and weights.count((3 * h, h)) == layers - 1  # ... a hooked module runs itself
    for name, grad in fused_grads.items():  # same gradients either way
        torch.testing.assert_close(model.get_parameter(name).grad, grad, rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------------------- unpadded execution

HEADS = [bertkit.BERT, bertkit.BERTForPreTraining, bertkit.BERTForSequenceClassification,
         bertkit.BERTForTokenClassification, bertkit.BERTForMultipleChoice]


def _real_positions(out, mask):
    """Every output tensor, token-level ones at real positions only."""
    outs = out if isinstance(out, tuple) else (out,)
    return [t[mask.bool()] if t is not None and t.shape[:2] == mask.shape else t for t in outs]


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_unpadded_outputs_and_gradients_equal_the_padded_path(cls, tiny_config, packings):
    ids, mask, types = padded_batch()
    if cls is bertkit.BERTForMultipleChoice:
        ids, mask, types = (t.view(1, 3, -1) for t in (ids, mask, types))
    model = _models(cls, tiny_config)
    results = []
    for on in (True, False):
        model.zero_grad()
        with fast.fast_path(on):
            out = model(ids, mask, types)
        flat_mask = mask.view(-1, mask.shape[-1])
        real = _real_positions(out, mask if out[0].shape[:2] == mask.shape else flat_mask)
        sum(t.sum() * (i + 1) for i, t in enumerate(real) if t is not None).backward()
        results.append(([t.detach() for t in real if t is not None],
                        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    assert any(p is not None for p in packings), "the padded batch was not unpadded on the fast path"
    (fast_out, fast_grads), (plain_out, plain_grads) = results
    for a, b in zip(fast_out, plain_out):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert fast_grads.keys() == plain_grads.keys()
    for name in fast_grads:
        torch.testing.assert_close(fast_grads[name], plain_grads[name], atol=1e-5, rtol=1e-5, msg=name)


def test_padding_positions_are_zero_and_hidden_states_unpacked(tiny_config, packings):
    ids, mask, types = padded_batch()
    model = _models(bertkit.BERT, tiny_config)
    with torch.no_grad():
        out = model.encode(ids, mask, types, output_hidden_states=True)
        with fast.fast_path(False):
            ref = model.encode(ids, mask, types, output_hidden_states=True)
    packing = packings[0]
    assert packing is not None and packing.real == int(mask.sum())
    assert packing.tokens == fast.bucket_rows(packing.real)  # 22 real tokens, 2 padding rows carried along
    assert (out.last_hidden_state[~mask.bool()] == 0).all()
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-5, rtol=1e-5)


def test_when_the_padded_path_serves(tiny_config, packings):
    ids, mask, types = padded_batch()
    model = _models(bertkit.BERTForSequenceClassification, tiny_config)
    with torch.no_grad():
        model(ids)  # no mask
        model(ids, torch.ones_like(mask))  # nothing padded
        model.bert.encode(ids, mask, types, output_attentions=True)  # attention maps are [B, nh, L, L]
        with fast.fast_path(min_padding=0.5):  # 33 % padding is below the threshold
            model(ids, mask, types)
        left = mask.flip(1)  # rows that start with padding: [CLS]-only heads stay padded
        padded = model(ids, left, types)
        with fast.fast_path(False):
            torch.testing.assert_close(padded, model(ids, left, types), atol=1e-5, rtol=1e-5)
        model.bert.encode(ids, left, types)  # ... but the full sequence output unpads
    # no mask, no padding and attention maps never reach the planner; the threshold, the left padding
    # under a [CLS]-only head and the plain path say None; the full output of left padding unpads
    assert packings[:3] == [None, None, None] and len(packings) == 4
    assert packings[-1] is not None and not packings[-1].starts_real


def test_qa_and_compat_models_keep_padding_positions(tiny_config):
    import bertkit.compat.pytorch_pretrained_bert as P
    from ppb_reference import PPB_CONFIG

    assert bertkit.BERTForQuestionAnswering(tiny_config).bert.drops_padding is False
    assert P.BertModel(P.BertConfig(**PPB_CONFIG)).drops_padding is False
    assert bertkit.BERTForTokenClassification(tiny_config).bert.drops_padding is True


def test_unpadded_training_with_checkpointing_and_chunked_feed_forward(tiny_config, packings):
    ids, mask, types = padded_batch()
    config = tiny_config.replace(chunk_size_feed_forward=4)
    model = _models(bertkit.BERTForTokenClassification, config).train()
    model.bert.encoder.gradient_checkpointing = True
    grads = []
    for on in (True, False):
        model.zero_grad()
        with fast.fast_path(on):
            logits = model(ids, mask, types)
        logits[mask.bool()].square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert packings[0] is not None
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-5, msg=name)


def test_fully_padded_row_gives_no_nan(tiny_config):
    ids, mask, types = padded_batch()
    mask[2] = 0
    model = _models(bertkit.BERT, tiny_config)
    with torch.no_grad():
        out = model(ids, mask, types)[0]
    assert torch.isfinite(out).all() and (out[2] == 0).all()


# ---------------------------------------------------------------------------- optimize_for_inference

def _classifier(tiny_config):
    return _models(bertkit.BERTForSequenceClassification, tiny_config.replace(num_labels=3))


def test_optimized_float32_model_equals_the_eager_model(tiny_config, kernel_calls):
    ids, mask, types = padded_batch()
    eager = _classifier(tiny_config)
    model = optimize_for_inference(copy.deepcopy(eager).train())
    assert not model.training
    kernels = [m.packed for m in model.modules() if isinstance(m, Linear)]
    assert kernels and all(isinstance(k, PackedKernel) for k in kernels)
    with torch.no_grad():
        got = model(ids, mask, types)
        with fast.fast_path(False):
            want = eager(ids, mask, types)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(kernel_calls) >= len(kernels) - 1  # each layer ran its prepacked oneDNN kernel
    # names, state_dict and saved checkpoints are HF's; the kernels are not in them
    assert list(model.state_dict()) == list(eager.state_dict())
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    copy.deepcopy(model)


def test_prepared_weights_follow_parameter_updates(tiny_config):
    ids, mask, types = padded_batch()
    model = optimize_for_inference(_classifier(tiny_config))
    with torch.no_grad():
        before = model(ids, mask, types)
        model.load_state_dict(_classifier(tiny_config.replace(num_labels=3)).state_dict() | {
            "classifier.bias": torch.tensor([5.0, 0.0, -5.0])})
        after = model(ids, mask, types)
        with fast.fast_path(False):
            want = model(ids, mask, types)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, want, atol=1e-5, rtol=1e-5)


def test_training_after_optimizing_uses_gradients_not_the_prepared_kernel(tiny_config):
    ids, mask, types = padded_batch()
    model = optimize_for_inference(_classifier(tiny_config)).train()
    model(ids, mask, types).sum().backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "classifier" in n)


@pytest.mark.skipif(not native_bf16("cpu"), reason="no native bf16 on this CPU")
def test_bf16_by_one_flag(tiny_config):
    ids, mask, types = padded_batch()
    eager = _classifier(tiny_config)
    model = optimize_for_inference(copy.deepcopy(eager), dtype="bf16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    with torch.no_grad():
        got = model(ids, mask, types)
        want = eager(ids, mask, types)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.05)


def test_bf16_runs_on_every_cpu_emulated_with_a_warning_where_onednn_has_no_bf16_kernel(tiny_config):
    # an AVX2 CPU (no AVX-512) has no oneDNN bf16 inner product: the prepared kernel failed to build there
    ids, mask, types = padded_batch()
    eager = _classifier(tiny_config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = optimize_for_inference(copy.deepcopy(eager), dtype="bf16")
    assert any("emulated" in str(w.message) for w in caught) == (not native_bf16("cpu"))
    with torch.no_grad():
        got, want = model(ids, mask, types), eager(ids, mask, types)
    assert got.dtype == torch.bfloat16
    kernels = [m.packed for m in model.modules() if isinstance(m, Linear)]
    assert all(isinstance(k, PackedKernel) if fast.onednn_bf16_available() else k is None for k in kernels)
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.05)


def test_int8_quantization(tiny_config):
    ids, mask, types = padded_batch()
    eager = _classifier(tiny_config)
    model = optimize_for_inference(copy.deepcopy(eager), quantize="int8")
    assert all(isinstance(m.packed, Int8Kernel) for m in model.modules() if isinstance(m, Linear))
    with torch.no_grad():
        got, want = model(ids, mask, types), eager(ids, mask, types)
    assert got.dtype == torch.float32 and not torch.equal(got, want)
    torch.testing.assert_close(got, want, atol=0.1, rtol=0.1)
    assert list(model.state_dict()) == list(eager.state_dict())


def test_int8_kernel_computes_its_integer_products_exactly_without_saturating():
    # x86 without VNNI adds u8 x s8 pairs into 16 bits (saturating): there the weights get 7 bits, and the
    # kernel must equal float arithmetic on its quantized operands on every CPU (8-bit products were 0.55 off)
    g = torch.Generator().manual_seed(0)
    layer = Linear(64, 48)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(48, 64, generator=g) * 0.1)
    x = torch.randn(2, 9, 64, generator=g)
    low, high = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    step = (high - low) / 255
    zero = round(-low / step)
    x_grid = (torch.clamp(torch.round(x / step) + zero, 0, 255) - zero) * step  # fbgemm's 8-bit activations
    q, scale = quantize_weight(layer.weight)
    if devices.int8_saturates():
        q, scale = seven_bit(q, scale)
    want = F.linear(x_grid, q.float() * scale[:, None], layer.bias)
    optimize_for_inference(layer, quantize="int8")
    with torch.no_grad():
        got = layer(x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_optimize_errors_name_the_argument(tiny_config):
    model = _classifier(tiny_config)
    with pytest.raises(ValueError, match="dtype must be"):
        optimize_for_inference(model, dtype="int4")
    with pytest.raises(ValueError, match="quantize must be one of"):
        optimize_for_inference(model, quantize="int4")
    with pytest.raises(ValueError, match="float32 model"):
        optimize_for_inference(model, quantize="int8", dtype="bf16")


def test_model_method_and_root_export(tiny_config):
    model = _classifier(tiny_config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.optimize_for_inference() is model
    assert bertkit.optimize_for_inference is optimize_for_inference


# ---------------------------------------------------------------------------- dropout
def test_fast_dropout_has_dropouts_distribution_and_gradient():
    torch.manual_seed(0)
    x = torch.randn(400, 500, requires_grad=True)
    y = fast.dropout(x, 0.1, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005  # 200,000 draws: 0.9 +- ~0.0007
    q = 6554 / 65536  # 0.1 rounded to 2^-16 steps; the scale keeps the expectation exact
    torch.testing.assert_close(y[kept], x[kept] / (1 - q))
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() / (1 - q))
    assert torch.equal(fast.dropout(x, 0.1, training=False), x)
    with fast.fast_path(False):  # the plain path is torch's own dropout
        torch.manual_seed(1)
        a = fast.dropout(x, 0.3)
        torch.manual_seed(1)
        assert torch.equal(a, F.dropout(x, 0.3))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 3 / 65536])
def test_keep_mask_draws_every_lane_independently(p):
    torch.manual_seed(0)
    keep, q = fast.keep_mask(torch.Size([1001, 999]), p)  # not a multiple of 4 elements
    assert keep.shape == (1001, 999) and keep.dtype == torch.bool
    assert abs(q - p) <= 2 ** -17
    lanes = keep.flatten()[: 1000 * 996].view(-1, 4).float().mean(0)  # the four 16-bit lanes of each draw
    sd = (q * (1 - q) / 249_000) ** 0.5
    assert (lanes - (1 - q)).abs().max() < 6 * sd + 1e-9
    torch.manual_seed(0)
    assert torch.equal(fast.keep_mask(torch.Size([1001, 999]), p)[0], keep)  # torch.manual_seed governs it


def test_dropout_too_close_to_0_or_1_for_16_bits_is_torchs():
    x = torch.randn(64, 64)
    assert not fast.fast_dropout_applies(x, 1e-6, True) and not fast.fast_dropout_applies(x, 1 - 1e-6, True)
    assert fast.fast_dropout_applies(x, 0.1, True)


def test_attention_dropout_takes_the_fast_kernel(tiny_config, monkeypatch):
    calls = []
    real = fast._Dropout.apply
    monkeypatch.setattr(fast._Dropout, "apply", lambda *a: calls.append(a[0].shape) or real(*a))
    ids, mask, types = padded_batch()
    config = tiny_config.replace(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = bertkit.BERTForTokenClassification(config).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids, mask, types).float().sum().backward()
    heads, length = config.num_attention_heads, ids.shape[1]
    assert (3, heads, length, length) in calls  # attention probabilities
    assert len(calls) == 1 + 3 * config.num_hidden_layers + 1  # embeddings, 3 per layer, the classifier


def test_measuring_the_gemm_backend_leaves_the_random_state_alone():
    """The measurement draws its matrices from a generator of its own: a seeded run is the same whether or not
    the first product of the process triggered the measurement."""
    from bertkit.modeling import fast

    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    fast.measure_gemm(64, 64, 64, repeats=1)
    assert torch.equal(torch.rand(4), expected)


def test_gemm_choice_is_checkpoint_state_that_pins_auto_only():
    from bertkit.modeling import fast

    previous = fast.set_fast_path(gemm="plain")
    try:
        assert fast.GemmChoice().state_dict() == {"gemm": "plain"}
        fast.GemmChoice().load_state_dict({"gemm": "onednn"})
        assert fast.settings().gemm == "plain"  # the user's choice stays
        fast.set_fast_path(gemm="auto")
        fast.GemmChoice().load_state_dict({"gemm": "plain"})
        assert fast.settings().gemm == "plain" and fast.gemm_backend() == "plain"  # pinned, not measured
        fast.GemmChoice().load_state_dict({"gemm": None})  # a checkpoint saved before any float32 product
        assert fast.settings().gemm == "plain"
    finally:
        fast.set_fast_path(gemm=previous.gemm)
