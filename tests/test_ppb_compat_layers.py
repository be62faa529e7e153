"""``bertkit.compat.pytorch_pretrained_bert``'s layer classes against the real pytorch-pretrained-bert 0.6.2's.

Each class is built in both libraries from the tiny odd config (vocab 99, hidden 36, 3 heads,
inner 37, 2 layers, 40 positions, 3 token types), ppb's weights randomised and loaded into
ours with ``load_state_dict(strict=True)`` (and back); then both are called the 0.6.2 way,
with 0.6.2's additive attention mask. Ours must be the engine's classes underneath.
"""

from __future__ import annotations

import pytest
import pytorch_pretrained_bert as ppb
import pytorch_pretrained_bert.modeling as ppb_modeling
import torch
from torch import nn

import bertkit.compat.pytorch_pretrained_bert.modeling as M
from bertkit.modeling import backbone, layers
from conftest import TINY, padded_batch, randomize_
from ppb_compat_helpers import ATOL, assert_all_close, build_pair
from ppb_reference import PPB_CONFIG

B, L, H, I, V = 3, 11, TINY["hidden_size"], TINY["intermediate_size"], TINY["vocab_size"]

#: compat class -> the engine class it must be
ENGINE_CLASS = {
    "BertEmbeddings": layers.BERTEmbeddings, "BertSelfAttention": layers.BERTSelfAttention,
    "BertSelfOutput": layers.BERTSelfOutput, "BertAttention": layers.BERTAttention,
    "BertIntermediate": layers.BERTIntermediate, "BertOutput": layers.BERTOutput, "BertLayer": layers.BERTLayer,
    "BertEncoder": backbone.BERTEncoder, "BertPooler": layers.BERTPooler,
    "BertPredictionHeadTransform": layers.BERTPredictionHeadTransform,
    "BertLMPredictionHead": layers.BERTLMPredictionHead, "BertOnlyMLMHead": layers.BERTOnlyMLMHead,
    "BertOnlyNSPHead": layers.BERTOnlyNSPHead, "BertPreTrainingHeads": layers.BERTPreTrainingHeads,
    "BertLayerNorm": nn.LayerNorm,
}
TAKE_EMBEDDINGS = {"BertLMPredictionHead", "BertOnlyMLMHead", "BertPreTrainingHeads"}


def _configs(**overrides):
    args = {**PPB_CONFIG, **overrides}
    return M.BertConfig(**args), ppb.BertConfig(**args)


def _embedding_matrix(seed: int = 7) -> torch.Tensor:
    return torch.randn(V, H, generator=torch.Generator().manual_seed(seed))


def build(name: str, seed: int = 0, **overrides) -> tuple[nn.Module, nn.Module]:
    """(ours, ppb's) of layer class ``name``: ppb's randomised and loaded strictly into ours; eval mode."""
    ours_config, ppb_config = _configs(**overrides)
    if name == "BertLayerNorm":
        args_ours, args_ppb = (H,), (H,)
    elif name in TAKE_EMBEDDINGS:
        matrix = _embedding_matrix()
        args_ours, args_ppb = (ours_config, nn.Parameter(matrix.clone())), (ppb_config, nn.Parameter(matrix.clone()))
    else:
        args_ours, args_ppb = (ours_config,), (ppb_config,)
    reference = randomize_(getattr(ppb_modeling, name)(*args_ppb), seed=seed).eval()
    ours = getattr(M, name)(*args_ours).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return ours, reference


def _hidden(seed: int = 1, width: int = H) -> torch.Tensor:
    return torch.randn(B, L, width, generator=torch.Generator().manual_seed(seed))


def extended_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """0.6.2's BertModel mask: ``[B, 1, 1, S]``, 0 to attend and -10000 where masked."""
    return (1.0 - attention_mask[:, None, None, :].float()) * -10000.0


_, MASK, TOKEN_TYPES = padded_batch(vocab_size=V, type_vocab=TINY["type_vocab_size"])
INPUT_IDS = padded_batch(vocab_size=V, type_vocab=TINY["type_vocab_size"])[0]
FULLY_MASKED = MASK.clone()
FULLY_MASKED[2] = 0  # a row with no key to attend to: 0.6.2 then attends to all of them by score
MASKS = {"padded": extended_mask(MASK), "fully_masked_row": extended_mask(FULLY_MASKED),
         "none": torch.zeros(B, 1, 1, L)}

#: name -> the 0.6.2-style call arguments (ours gets the same)
CALLS = {
    "BertLayerNorm": lambda mask: (_hidden(),),
    "BertEmbeddings": lambda mask: (INPUT_IDS, TOKEN_TYPES),
    "BertSelfAttention": lambda mask: (_hidden(), mask),
    "BertSelfOutput": lambda mask: (_hidden(1), _hidden(2)),
    "BertAttention": lambda mask: (_hidden(), mask),
    "BertIntermediate": lambda mask: (_hidden(),),
    "BertOutput": lambda mask: (_hidden(1, I), _hidden(2)),
    "BertLayer": lambda mask: (_hidden(), mask),
    "BertEncoder": lambda mask: (_hidden(), mask),
    "BertPooler": lambda mask: (_hidden(),),
    "BertPredictionHeadTransform": lambda mask: (_hidden(),),
    "BertLMPredictionHead": lambda mask: (_hidden(),),
    "BertOnlyMLMHead": lambda mask: (_hidden(),),
    "BertOnlyNSPHead": lambda mask: (_hidden()[:, 0],),
    "BertPreTrainingHeads": lambda mask: (_hidden(), _hidden(3)[:, 0]),
}
MASKED = {"BertSelfAttention", "BertAttention", "BertLayer", "BertEncoder"}


@pytest.mark.parametrize("name", list(CALLS))
def test_layer_is_the_engine_class_with_ppb_state_dict(name):
    ours, reference = build(name)
    assert isinstance(ours, ENGINE_CLASS[name])
    assert list(ours.state_dict()) == list(reference.state_dict())
    type(reference)(*([H] if name == "BertLayerNorm" else [_configs()[1]])
                    + ([nn.Parameter(_embedding_matrix())] if name in TAKE_EMBEDDINGS else [])) \
        .load_state_dict(ours.state_dict(), strict=True)


@pytest.mark.parametrize("name,mask_name", [(n, m) for n in CALLS for m in (MASKS if n in MASKED else ["padded"])])
def test_layer_outputs_match_ppb(name, mask_name):
    ours, reference = build(name)
    args = CALLS[name](MASKS[mask_name])
    if mask_name == "fully_masked_row":
        # 0.6.2 adds -10000 to every score of that row, which costs float32 ~1e-3 of the scores' precision
        ours, reference = ours.double(), reference.double()
        args = tuple(a.double() if a.is_floating_point() else a for a in args)
    with torch.no_grad():
        got, want = ours(*args), reference(*args)
    assert type(got) is type(want)
    assert_all_close(got, want)


@pytest.mark.parametrize("hidden_act", ["gelu", "relu", "swish"])
@pytest.mark.parametrize("name", ["BertIntermediate", "BertPredictionHeadTransform", "BertLayer"])
def test_activations_match_ppb(name, hidden_act):
    ours, reference = build(name, hidden_act=hidden_act)
    args = CALLS[name](MASKS["padded"])
    with torch.no_grad():
        assert_all_close(ours(*args), reference(*args))


def test_callable_hidden_act_is_used():
    ours, reference = build("BertIntermediate", hidden_act=M.swish)
    x = _hidden()
    with torch.no_grad():
        assert_all_close(ours(x), reference(x))
        assert_all_close(ours(x), M.swish(ours.dense(x)))


@pytest.mark.parametrize("all_layers", [True, False])
def test_encoder_returns_ppb_list(all_layers):
    ours, reference = build("BertEncoder")
    args = CALLS["BertEncoder"](MASKS["padded"])
    with torch.no_grad():
        got = ours(*args, output_all_encoded_layers=all_layers)
        want = reference(*args, output_all_encoded_layers=all_layers)
    assert isinstance(got, list) and len(got) == (TINY["num_hidden_layers"] if all_layers else 1)
    assert_all_close(got, want)


def test_embeddings_default_token_types():
    ours, reference = build("BertEmbeddings")
    with torch.no_grad():
        assert_all_close(ours(INPUT_IDS), reference(INPUT_IDS))


def test_layer_gradients_match_ppb():
    ours, reference = build("BertLayer")
    inputs = {}
    for model in (ours, reference):
        x = _hidden().requires_grad_(True)
        (model(x, MASKS["padded"]).square().sum()).backward()
        inputs[model] = x.grad
    torch.testing.assert_close(inputs[ours], inputs[reference], atol=ATOL, rtol=1e-4)
    theirs = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=ATOL, rtol=1e-4, msg=name)


def test_lm_head_is_tied_to_the_given_embeddings():
    matrix = nn.Parameter(_embedding_matrix())
    head = M.BertLMPredictionHead(_configs()[0], matrix)
    assert head.decoder.weight is matrix and head.bias.shape == (V,)
    assert "decoder.bias" not in head.state_dict() and head.decoder.bias is head.bias
    bigger = M.BertOnlyMLMHead(_configs()[0], nn.Parameter(torch.zeros(V + 5, H)))
    assert bigger(_hidden()).shape == (B, L, V + 5)  # sized by the embedding matrix, as 0.6.2
    with pytest.raises(ValueError, match="hidden_size"):
        M.BertLMPredictionHead(_configs()[0], nn.Parameter(torch.zeros(V, H + 1)))


def test_layer_norm_is_every_layer_norm():
    norm = M.BertLayerNorm(H)
    assert norm.variance_epsilon == 1e-12 == norm.eps
    assert isinstance(nn.LayerNorm(4), M.BertLayerNorm) and not isinstance(nn.Linear(2, 2), M.BertLayerNorm)
    model = M.BertModel(_configs()[0])
    assert sum(isinstance(m, M.BertLayerNorm) for m in model.modules()) == 1 + 2 * TINY["num_hidden_layers"]

    class Sub(M.BertLayerNorm):
        pass

    assert not isinstance(nn.LayerNorm(4), Sub) and isinstance(Sub(4), M.BertLayerNorm)


def test_self_attention_checks_heads_and_names_sizes():
    ours, reference = build("BertSelfAttention")
    for attr in ("num_attention_heads", "attention_head_size", "all_head_size"):
        assert getattr(ours, attr) == getattr(reference, attr)
    with pytest.raises(ValueError, match="divisible by num_attention_heads"):
        M.BertSelfAttention(_configs(num_attention_heads=5)[0])


@pytest.mark.parametrize("name", ["gelu", "swish"])
def test_activation_functions_match_ppb(name):
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    torch.testing.assert_close(getattr(M, name)(x), getattr(ppb_modeling, name)(x))
    assert set(M.ACT2FN) == set(ppb_modeling.ACT2FN)
    for key in M.ACT2FN:
        torch.testing.assert_close(M.ACT2FN[key](x), ppb_modeling.ACT2FN[key](x))


def test_task_models_use_these_heads():
    """The LM heads of the compat models are 0.6.2's classes: ``model.cls(sequence_output, pooled_output)`` works."""
    ours, reference = build_pair("pretraining")
    assert isinstance(ours.cls, M.BertPreTrainingHeads) and isinstance(ours.cls.predictions, M.BertLMPredictionHead)
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight
    args = (_hidden(), _hidden(3)[:, 0])
    with torch.no_grad():
        assert_all_close(ours.cls(*args), reference.cls(*args))
    masked_lm, _ = build_pair("masked_lm")
    next_sentence, _ = build_pair("next_sentence")
    assert isinstance(masked_lm.cls, M.BertOnlyMLMHead) and isinstance(next_sentence.cls, M.BertOnlyNSPHead)
