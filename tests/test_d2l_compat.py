"""bertkit.compat.d2l against the real d2l 1.0.3, weights copied across, plus the engine options it uses.

Outputs, gradients and three Adam training steps match d2l's; d2l's state dicts load with
``load_state_dict`` (ours have d2l's keys, in d2l's order); d2l's attribute names are views
of the engine's modules.

d2l.torch imports vision and plotting packages at its top (torchvision, PIL, pandas,
IPython, matplotlib) that its text models never use; the ones not installed are stubbed
in ``sys.modules`` for that import only and removed again.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types

import pytest
import torch

from bertkit import BERT, BERTConfig
from bertkit.compat import d2l as ours
from conftest import randomize_

pytestmark = pytest.mark.usefixtures("engine_path")  # the parity suite on the fast and the plain path

#: Packages d2l.torch imports at module level, with the submodules it takes from them.
_D2L_IMPORT_ONLY = {"torchvision": ("transforms",), "PIL": ("Image",), "pandas": (), "IPython": ("display",),
                    "matplotlib": ("pyplot",), "matplotlib_inline": ("backend_inline",)}


def _import_d2l() -> types.ModuleType:
    added = []
    for root, submodules in _D2L_IMPORT_ONLY.items():
        if root in sys.modules or importlib.util.find_spec(root) is not None:
            continue
        for name in (root, *(f"{root}.{sub}" for sub in submodules)):
            sys.modules[name] = stub = types.ModuleType(name)
            added.append(name)
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, stub)
    try:
        from d2l import torch as d2l_torch
    finally:
        for name in added:
            del sys.modules[name]
    return d2l_torch


if importlib.util.find_spec("d2l") is None:
    pytest.skip("the reference needs `pip install d2l==1.0.3 --no-deps` (its pins conflict with ours, so it is "
                "not in the test extra)", allow_module_level=True)
d2l = _import_d2l()

V, H, FFN, HEADS, BLKS, MAX_LEN = 97, 36, 37, 3, 2, 40
SIZES = (V, H, FFN, HEADS, BLKS, 0.1)
B, L, P = 3, 11, 4
ATOL = dict(atol=1e-5, rtol=1e-5)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, L), generator=g)
    segments = torch.randint(0, 2, (B, L), generator=g)
    pred_positions = torch.randint(0, L, (B, P), generator=g)
    return tokens, segments, pred_positions


#: None, per-sequence lengths with padding (int and float, as d2l's data pipeline gives), per-query lengths.
VALID_LENS = {
    "none": None,
    "per_sequence": torch.tensor([L, 7, 4]),
    "per_sequence_float": torch.tensor([L, 7.0, 4.0]),
    "per_query": torch.randint(1, L + 1, (B, L), generator=torch.Generator().manual_seed(3)),
}


def _materialise(d2l_model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Randomise every parameter of a d2l model whose LazyLinears have seen an input; eval mode."""
    return randomize_(d2l_model, seed=seed).eval()


@pytest.fixture(scope="module")
def encoders():
    tokens, segments, _ = _inputs()
    reference = d2l.BERTEncoder(*SIZES, max_len=MAX_LEN)
    reference(tokens, segments, None)
    reference = _materialise(reference, seed=1)
    return reference, ours.load_d2l_state_dict(ours.BERTEncoder(*SIZES, max_len=MAX_LEN), reference).eval()


@pytest.fixture(scope="module")
def models():
    tokens, segments, pred_positions = _inputs()
    reference = d2l.BERTModel(*SIZES, max_len=MAX_LEN)
    reference(tokens, segments, None, pred_positions)
    reference = _materialise(reference, seed=2)
    return reference, ours.load_d2l_state_dict(ours.BERTModel(*SIZES, max_len=MAX_LEN), reference.state_dict()).eval()


# ---------------------------------------------------------------------------- parity

@pytest.mark.parametrize("valid_lens", VALID_LENS.values(), ids=VALID_LENS.keys())
def test_encoder_matches_d2l(encoders, valid_lens):
    reference, model = encoders
    tokens, segments, _ = _inputs()
    with torch.no_grad():
        expected, got = reference(tokens, segments, valid_lens), model(tokens, segments, valid_lens)
    assert got.shape == (B, L, H)
    torch.testing.assert_close(got, expected, **ATOL)


@pytest.mark.parametrize("with_positions", [True, False], ids=["pred_positions", "no_positions"])
@pytest.mark.parametrize("valid_lens", VALID_LENS.values(), ids=VALID_LENS.keys())
def test_bert_model_matches_d2l(models, valid_lens, with_positions):
    reference, model = models
    tokens, segments, pred_positions = _inputs(seed=5)
    positions = pred_positions if with_positions else None
    with torch.no_grad():
        expected = reference(tokens, segments, valid_lens, positions)
        got = model(tokens, segments, valid_lens, positions)
    torch.testing.assert_close(got[0], expected[0], **ATOL)
    torch.testing.assert_close(got[2], expected[2], **ATOL)
    assert got[2].shape == (B, 2)
    if with_positions:
        assert got[1].shape == (B, P, V)
        torch.testing.assert_close(got[1], expected[1], **ATOL)
    else:
        assert got[1] is None and expected[1] is None
    # d2l's fine-tuning chapters reuse the parts: bert.encoder(...) and bert.hidden(encoded_X[:, 0, :])
    with torch.no_grad():
        torch.testing.assert_close(model.hidden(got[0][:, 0, :]), reference.hidden(expected[0][:, 0, :]), **ATOL)


@pytest.mark.parametrize("num_hiddens,num_inputs", [(H, None), (20, None), (20, H), (H, H)])
def test_mask_lm_matches_d2l(num_hiddens, num_inputs):
    g = torch.Generator().manual_seed(7)
    X = torch.randn(B, L, H, generator=g)
    _, _, pred_positions = _inputs()
    reference = d2l.MaskLM(V, num_hiddens)
    reference(X, pred_positions)
    reference = _materialise(reference, seed=8)
    model = ours.load_d2l_state_dict(ours.MaskLM(V, num_hiddens, num_inputs=num_inputs), reference).eval()
    with torch.no_grad():
        got = model(X, pred_positions)
        torch.testing.assert_close(got, reference(X, pred_positions), **ATOL)
    assert got.shape == (B, P, V)
    assert model.mlp.decoder.bias is model.mlp.bias


@pytest.mark.parametrize("num_inputs", [None, H])
def test_next_sentence_pred_matches_d2l(num_inputs):
    X = torch.randn(B, H, generator=torch.Generator().manual_seed(9))
    reference = d2l.NextSentencePred()
    reference(X)
    reference = _materialise(reference, seed=10)
    model = ours.load_d2l_state_dict(ours.NextSentencePred(num_inputs), reference)
    torch.testing.assert_close(model(X), reference(X), **ATOL)


def test_gradients_match_d2l_in_training_mode():
    """Without dropout, training-mode gradients agree too (every token row trains, as in d2l)."""
    tokens, segments, pred_positions = _inputs(seed=11)
    tokens[:, -2:] = 0  # d2l's id 0 is '<unk>', an ordinary row; the engine's default padding row is 0
    sizes = (V, H, FFN, HEADS, BLKS, 0.0)
    reference = d2l.BERTModel(*sizes, max_len=MAX_LEN)
    reference(tokens, segments, None, pred_positions)
    reference = randomize_(reference, seed=12).train()
    model = ours.load_d2l_state_dict(ours.BERTModel(*sizes, max_len=MAX_LEN), reference).train()
    valid_lens = torch.tensor([L, 8, 5])
    for net in (reference, model):
        encoded, mlm, nsp = net(tokens, segments, valid_lens, pred_positions)
        (encoded.square().mean() + mlm.logsumexp(-1).mean() + nsp.square().mean()).backward()
    theirs, mine = reference.encoder, model.encoder.bert
    pairs = [(theirs.token_embedding.weight.grad, mine.embeddings.word_embeddings.weight.grad),
             (theirs.pos_embedding.grad[0], mine.embeddings.position_embeddings.weight.grad),
             (theirs.blks[0].attention.W_q.weight.grad, mine.encoder.layer[0].attention.self.query.weight.grad),
             (theirs.blks[1].addnorm2.ln.bias.grad, mine.encoder.layer[1].output.LayerNorm.bias.grad),
             (reference.mlm.mlp[3].bias.grad, model.mlm.mlp.bias.grad)]
    for expected, got in pairs:
        torch.testing.assert_close(got, expected, **ATOL)
    assert model.encoder.bert.embeddings.word_embeddings.weight.grad[0].abs().sum() > 0


def test_state_dict_round_trip_into_d2l(models):
    reference, model = models
    fresh = d2l.BERTModel(*SIZES, max_len=MAX_LEN)
    fresh.load_state_dict(ours.to_d2l_state_dict(model), strict=True)
    assert list(ours.to_d2l_state_dict(model)) == list(reference.state_dict())
    fresh.eval()
    tokens, segments, pred_positions = _inputs(seed=13)
    valid_lens = VALID_LENS["per_sequence"]
    with torch.no_grad():
        for a, b in zip(fresh(tokens, segments, valid_lens, pred_positions),
                        reference(tokens, segments, valid_lens, pred_positions)):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def _fresh_pair(seed: int, dropout: float = 0.1, dtype=torch.float32):
    """(d2l's BERTModel randomised, ours loaded from its state dict with load_state_dict), train mode."""
    sizes = (V, H, FFN, HEADS, BLKS, dropout)
    tokens, segments, pred_positions = _inputs(seed=seed)
    reference = d2l.BERTModel(*sizes, max_len=MAX_LEN)
    reference(tokens, segments, None, pred_positions)  # materialise its LazyLinears
    reference = randomize_(reference, seed=seed + 1).to(dtype)
    model = ours.BERTModel(*sizes, max_len=MAX_LEN).to(dtype)
    model.load_state_dict(reference.state_dict(), strict=True)
    return reference, model


@pytest.mark.parametrize("cls", ["BERTModel", "BERTEncoder", "MaskLM", "NextSentencePred"])
def test_d2l_state_dicts_load_directly_both_ways(cls):
    """``load_state_dict`` of d2l's state dict, strictly; ours has d2l's keys in d2l's order, and loads in d2l."""
    reference, model = _fresh_pair(seed=31)
    reference, model = ({"BERTModel": lambda m: m, "BERTEncoder": lambda m: m.encoder, "MaskLM": lambda m: m.mlm,
                         "NextSentencePred": lambda m: m.nsp}[cls](m) for m in (reference, model))
    assert list(model.state_dict()) == list(reference.state_dict())
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, reference.state_dict()[key], atol=0, rtol=0)
    missing, unexpected = type(reference).load_state_dict(reference, model.state_dict(), strict=True)
    assert not missing and not unexpected


def test_engine_named_state_dict_loads_too():
    reference, model = _fresh_pair(seed=33)
    engine = {**{f"encoder.bert.{k}": v for k, v in model.encoder.bert.state_dict().items()},
              **{f"hidden.{k}": v for k, v in model.hidden.state_dict().items()},
              **{f"mlm.mlp.{k}": v for k, v in model.mlm.mlp.state_dict().items()},
              **{f"nsp.{k}": v for k, v in model.nsp.state_dict().items()}}
    assert {"mlm.mlp.transform.dense.weight", "encoder.bert.encoder.layer.0.attention.self.key.bias"} <= set(engine)
    again = ours.BERTModel(V, H, FFN, HEADS, BLKS, 0.0, max_len=MAX_LEN)
    again.load_state_dict(engine, strict=True)
    for key, value in again.state_dict().items():
        torch.testing.assert_close(value, reference.state_dict()[key], atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="Missing key"):
        again.load_state_dict({k: v for k, v in reference.state_dict().items() if "blks.1" not in k})


def test_d2l_names_inside_a_fine_tuning_model():
    """d2l's fine-tuning chapters keep bert.encoder and bert.hidden in a new module: its state dict is d2l's too."""

    class Classifier(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.encoder, self.hidden, self.output = bert.encoder, bert.hidden, torch.nn.Linear(H, 3)

    reference, model = _fresh_pair(seed=35)
    theirs, mine = Classifier(reference), Classifier(model)
    mine.output.load_state_dict(theirs.output.state_dict())
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(mine.state_dict(), strict=True)


def test_d2l_attributes_are_views_of_the_engine():
    reference, model = _fresh_pair(seed=37)
    for theirs, mine in ((reference, model), (reference.encoder, model.encoder), (reference.mlm, model.mlm),
                         (reference.nsp, model.nsp)):
        for name in [*theirs._modules, *theirs._parameters]:  # everything d2l's module holds
            assert hasattr(mine, name), f"{type(mine).__name__}.{name}"
    encoder, bert = model.encoder, model.encoder.bert
    assert encoder.token_embedding is bert.embeddings.word_embeddings
    assert encoder.segment_embedding is bert.embeddings.token_type_embeddings
    assert encoder.blks is bert.encoder.layer and len(encoder.blks) == len(reference.encoder.blks) == BLKS
    pos = encoder.pos_embedding
    assert pos.shape == reference.encoder.pos_embedding.shape == (1, MAX_LEN, H)
    assert pos.data_ptr() == bert.embeddings.position_embeddings.weight.data_ptr()
    torch.testing.assert_close(pos, reference.encoder.pos_embedding, atol=0, rtol=0)
    with torch.no_grad():
        encoder.pos_embedding[0, 3].fill_(7.0)  # a view: writing through it changes the engine's table
    assert bool((bert.embeddings.position_embeddings.weight[3] == 7.0).all())
    assert model.mlm.mlp.decoder.weight.shape == reference.mlm.mlp[3].weight.shape
    assert model.nsp.output.weight.shape == reference.nsp.output.weight.shape
    with pytest.raises(AttributeError, match="read-only view"):
        encoder.pos_embedding = torch.zeros(1, MAX_LEN, H)


def test_mask_lm_keeps_the_chapters_default():
    assert inspect.signature(ours.MaskLM).parameters["num_inputs"].default == 768
    X = torch.randn(B, L, 20)
    _, _, pred_positions = _inputs()
    assert ours.MaskLM(V, 36)(X, pred_positions).shape == (B, P, V)  # the width comes from the input, as in 1.0.3
    explicit = ours.MaskLM(V, 36, 768)
    assert explicit.mlp.transform.dense.in_features == 768
    assert explicit(torch.randn(B, L, 768), pred_positions).shape == (B, P, V)
    with pytest.raises(RuntimeError):
        explicit(X, pred_positions)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_adam_training_steps_match_d2l(dtype):
    """Three Adam steps (lr 0.01) on d2l's own pretraining loss, from the same weights, without dropout.

    In float64 losses and every parameter agree to ~1e-12. In float32 the attention key biases
    differ by up to ~2e-3 (depending on the CPU): their gradient is exactly 0 in exact arithmetic
    (softmax ignores a shift shared by all keys), so both libraries feed Adam rounding noise, which
    its normalisation turns into steps of up to the learning rate.
    """
    reference, model = _fresh_pair(seed=21, dropout=0.0, dtype=dtype)
    tokens, segments, pred_positions = _inputs(seed=21)
    g = torch.Generator().manual_seed(23)
    valid_lens = torch.tensor([L, 8, 5], dtype=torch.float32)  # d2l's data pipeline gives float lengths
    mlm_weights = torch.ones(B, P, dtype=dtype)
    mlm_weights[2, -1] = 0  # a padded prediction slot
    mlm_Y, nsp_y = torch.randint(0, V, (B, P), generator=g), torch.tensor([0, 1, 1])
    loss = torch.nn.CrossEntropyLoss()
    losses = {}
    for net in (reference, model):
        net.train()
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        losses[net] = []
        for _ in range(3):
            optimizer.zero_grad()
            *_, total = d2l._get_batch_loss_bert(net, loss, V, tokens, segments, valid_lens, pred_positions,
                                                 mlm_weights, mlm_Y, nsp_y)
            total.backward()
            optimizer.step()
            losses[net].append(total.detach())
    tight = dict(atol=1e-10, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(losses[model]), torch.stack(losses[reference]), **tight)
    assert losses[model][-1] < losses[model][0]
    theirs = reference.state_dict()
    for key, value in model.state_dict().items():
        # float32 key biases follow each library's rounding noise (see above): Adam moves each by at most lr per
        # step, so after 3 steps the two can be 2 x 3 x lr apart, however the CPU's products round (5e-4 on an
        # EPYC, 1.7e-3 on a Xeon with AMX); everything else must agree closely
        tolerance = dict(atol=2 * 3 * 0.01, rtol=0) if dtype == torch.float32 and "W_k.bias" in key else (
            tight if dtype == torch.float64 else dict(atol=1e-4, rtol=1e-4))
        torch.testing.assert_close(value, theirs[key], **tolerance, msg=lambda m, key=key: f"{key}: {m}")


# ---------------------------------------------------------------------------- loading errors

def test_unknown_and_missing_keys_are_named(encoders):
    reference, _ = encoders
    state = reference.state_dict()
    with pytest.raises(ValueError, match=r"blks\.0\.surprise\.weight"):
        ours.load_d2l_state_dict(ours.BERTEncoder(*SIZES, max_len=MAX_LEN), {**state, "blks.0.surprise.weight": 0})
    with pytest.raises(ValueError, match=r"blks\.9\.ffn\.dense1\.weight"):  # a block this model lacks
        ours.load_d2l_state_dict(ours.BERTEncoder(*SIZES, max_len=MAX_LEN),
                                 {**state, "blks.9.ffn.dense1.weight": state["blks.0.ffn.dense1.weight"]})
    del state["blks.1.addnorm2.ln.bias"]
    with pytest.raises(ValueError, match=r"lacks \['blks\.1\.addnorm2\.ln\.bias'\]"):
        ours.load_d2l_state_dict(ours.BERTEncoder(*SIZES, max_len=MAX_LEN), state)


def test_shape_mismatch_and_lazy_weights_raise(encoders):
    reference, _ = encoders
    with pytest.raises(ValueError, match=r"pos_embedding: \(1, 40, 36\) vs \(1, 41, 36\)"):
        ours.load_d2l_state_dict(ours.BERTEncoder(*SIZES, max_len=MAX_LEN + 1), reference)
    with pytest.raises(ValueError, match="forward pass"):
        ours.load_d2l_state_dict(ours.NextSentencePred(), d2l.NextSentencePred())
    with pytest.raises(TypeError, match="BERTEncoder"):
        ours.load_d2l_state_dict(torch.nn.Linear(2, 2), {})


# ---------------------------------------------------------------------------- API and the spec's examples

def _parameters(cls) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(cls).parameters.values() if p.kind != p.VAR_KEYWORD]


@pytest.mark.parametrize("name", ["BERTEncoder", "BERTModel", "MaskLM", "NextSentencePred"])
def test_constructor_signatures_extend_d2l(name):
    theirs, mine = _parameters(getattr(d2l, name)), _parameters(getattr(ours, name))
    assert mine[:len(theirs)] == theirs
    assert all(default is not inspect.Parameter.empty for _, default in mine[len(theirs):])


def test_spec_examples_shapes():
    vocab_size, num_hiddens, ffn_num_hiddens, num_heads = 10000, 768, 1024, 4
    norm_shape, ffn_num_input, num_layers, dropout = [768], 768, 2, 0.2
    encoder = ours.BERTEncoder(vocab_size, num_hiddens, norm_shape, ffn_num_input,
                               ffn_num_hiddens, num_heads, num_layers, dropout)
    assert encoder.config.num_hidden_layers == 2 and encoder.config.intermediate_size == 1024
    tokens = torch.randint(0, vocab_size, (2, 8))
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        encoded_X = encoder(tokens, segments, None)
        assert encoded_X.shape == (2, 8, 768)
        mlm = ours.MaskLM(vocab_size, num_hiddens)
        mlm_Y_hat = mlm(encoded_X, torch.tensor([[1, 5, 2], [6, 1, 5]]))
        assert mlm_Y_hat.shape == (2, 3, 10000)
        mlm_l = torch.nn.CrossEntropyLoss(reduction="none")(mlm_Y_hat.reshape((-1, vocab_size)),
                                                             torch.tensor([[7, 8, 9], [10, 20, 30]]).reshape(-1))
        assert mlm_l.shape == (6,)
        flat = torch.flatten(encoded_X, start_dim=1)
        assert ours.NextSentencePred(flat.shape[-1])(flat).shape == (2, 2)
        assert ours.NextSentencePred()(flat).shape == (2, 2)
    assert ours.BERTEncoder(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers,
                            dropout).config.hidden_size == 768


def test_pre_1_0_keyword_form_of_bert_model():
    """d2l 0.17's pretraining chapter builds BERTModel with these keywords."""
    net = ours.BERTModel(V, num_hiddens=32, norm_shape=[32], ffn_num_input=32, ffn_num_hiddens=64, num_heads=2,
                         num_layers=2, dropout=0.2, key_size=32, query_size=32, value_size=32,
                         hid_in_features=32, mlm_in_features=32, nsp_in_features=32).eval()
    tokens, segments, pred_positions = _inputs()
    encoded, mlm, nsp = net(tokens, segments, torch.tensor([L, 5, 3]), pred_positions)
    assert encoded.shape == (B, L, 32) and mlm.shape == (B, P, V) and nsp.shape == (B, 2)
    assert ours.BERTEncoder(V, num_hiddens=32, ffn_num_hiddens=64, num_heads=2, num_layers=3,
                            dropout=0.1).config.num_hidden_layers == 3
    with pytest.raises(ValueError, match="key_size"):
        ours.BERTEncoder(V, 32, 64, 2, 2, 0.1, key_size=768)
    with pytest.raises(TypeError, match="num_blks"):
        ours.BERTEncoder(V, 32, 64, 2, 2, 0.1, num_layers=2)
    with pytest.raises(TypeError, match="hid_in_features"):
        ours.BERTEncoder(V, 32, 64, 2, 2, 0.1, hid_in_features=32)


def test_initialisation_follows_d2l():
    """PyTorch's defaults, as d2l: N(0, 1) embeddings and position table, no zeroed padding row."""
    encoder = ours.BERTEncoder(1000, 64, 96, 4, 1, 0.1, max_len=200)
    embeddings = encoder.bert.embeddings
    for table in (embeddings.word_embeddings.weight, embeddings.position_embeddings.weight):
        assert 0.9 < float(table.detach().std()) < 1.1
    assert embeddings.word_embeddings.padding_idx is None and embeddings.word_embeddings.weight[0].abs().sum() > 0


@pytest.mark.parametrize("a,b", [(["hello", "world"], None), (["a"], ["b", "c", "d"]), ([], [])])
def test_get_tokens_and_segments_matches_d2l(a, b):
    assert ours.get_tokens_and_segments(a, b) == d2l.get_tokens_and_segments(a, b)


# ---------------------------------------------------------------------------- the engine options d2l needs

def test_engine_options_drop_modules_and_default_to_bert(tiny_config):
    plain = set(BERT(tiny_config).state_dict())
    assert "embeddings.LayerNorm.weight" in plain and "encoder.layer.0.attention.self.query.bias" in plain
    no_ln = set(BERT(tiny_config.replace(embedding_layer_norm=False)).state_dict())
    assert plain - no_ln == {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"}
    no_bias = set(BERT(tiny_config.replace(attention_bias=False)).state_dict())
    assert plain - no_bias == {f"encoder.layer.{i}.attention.{part}.bias" for i in range(2)
                               for part in ("self.query", "self.key", "self.value", "output.dense")}
    assert "embeddings.LayerNorm.weight" not in ours.BERTEncoder(*SIZES).state_dict()


def test_engine_options_validate_and_stay_out_of_hf_configs(tiny_config):
    assert "attention_bias" not in tiny_config.to_hf_dict()
    assert tiny_config.to_dict()["embedding_layer_norm"] is True
    for name in ("embedding_layer_norm", "attention_bias"):
        with pytest.raises(ValueError, match=name):
            tiny_config.replace(**{name: False}).to_hf_dict()
        with pytest.raises(ValueError, match=name):
            BERTConfig(**{name: "no"})
    config = BERTConfig(attention_bias=False, embedding_layer_norm=False)
    assert BERTConfig.from_dict(config.to_dict()) == config
