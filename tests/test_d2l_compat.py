"""bertkit.compat.d2l against the real d2l 1.0.3, weights copied across, plus the engine options it uses.

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
    fresh.eval()
    tokens, segments, pred_positions = _inputs(seed=13)
    valid_lens = VALID_LENS["per_sequence"]
    with torch.no_grad():
        for a, b in zip(fresh(tokens, segments, valid_lens, pred_positions),
                        reference(tokens, segments, valid_lens, pred_positions)):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


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
    with pytest.raises(ValueError, match=r"pos_embedding -> .*position_embeddings\.weight: \(40, 36\) vs \(41, 36\)"):
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
