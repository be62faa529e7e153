"""GTE as a family of the one engine (``BERTConfig(family="gte")``, layer variant ``"rope"``).

Parity with HF transformers' ``Gte*`` classes (a test-only dependency; no network): random weights are written by
one library's ``save_pretrained`` and read by the other's ``from_pretrained``; outputs, losses and gradients must
agree at every real position of a padded batch (right- and left-padded rows), with eager and SDPA attention, on
the fast (unpadded) and the plain engine path. Two shapes: gte-multilingual's (token types) and
gte-base-en-v1.5's (``type_vocab_size`` 0: no token-type table); rope-scaled configs beyond their original length.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("transformers")

import transformers

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.counting import count_parameters
from bertkit.weights.tables import bertkit_to_hf_family, hf_family_to_bertkit
from conftest import randomize_
from family_parity import (
    IMPLEMENTATIONS,
    Case,
    FamilySetup,
    assert_pairs_close,
    check_fast_and_plain_paths_agree,
    check_hf_checkpoint,
    check_our_checkpoint,
    inputs_for,
    ours_and_hf_outputs,
    padded_ids,
    token_labels,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PAD = 1
#: odd sizes (hidden 36 / 3 heads of 12, inner 26, vocab 99); a rope theta of neither family default
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=26,
             max_position_embeddings=64, pad_token_id=PAD, type_vocab_size=2, hidden_act="gelu")
ROPE = dict(rope_theta=500.0)
HF_ROPE = dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
GTE = FamilySetup("gte", transformers.GteConfig, ours={**SIZES, **ROPE}, hf={**SIZES, **HF_ROPE}, pad=PAD,
                  type_vocab_size=2, hf_checkpoint_layout=True,
                  grads_include=("mlp.down_proj.bias", "mlp.up_proj.weight", "token_type_embeddings.weight"))
#: gte-base-en-v1.5's shape: no token types, silu
GTE_EN = FamilySetup("gte", transformers.GteConfig, ours={**SIZES, **ROPE, "type_vocab_size": 0, "hidden_act": "silu"},
                     hf={**SIZES, **HF_ROPE, "type_vocab_size": 0, "hidden_act": "silu"}, pad=PAD,
                     hf_checkpoint_layout=True)


def both(**fields) -> dict:
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "GteModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "GteForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "GteForSequenceClassification",
         **both(num_labels=3), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "GteForSequenceClassification",
         **both(num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "GteForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
)}
SETUPS = {"multilingual": GTE, "en": GTE_EN}


@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("shape", SETUPS, ids=SETUPS.keys())
def test_hf_gte_checkpoint_matches_hf(shape, case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(SETUPS[shape], case, impl, tmp_path)
    assert ours.config.rope_theta == 500.0 and ours.config.rope_scaling is None
    assert (ours.bert.embeddings.token_type_embeddings is None) == (shape == "en")


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("shape", SETUPS, ids=SETUPS.keys())
def test_our_gte_checkpoint_loads_in_hf(shape, case, impl, tmp_path):
    check_our_checkpoint(SETUPS[shape], case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_theta": 500.0, "rope_type": "default"}
    assert "position_embedding_type" not in written or written["position_embedding_type"] == "absolute"


#: rope scalings at 30 tokens: dynamic beyond max_position_embeddings (16: its base grows there), yarn beyond its
#: original length (8, within max_position_embeddings 32), linear (at every length)
SCALINGS = {
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, 16),
    "linear": ({"rope_type": "linear", "factor": 3.0}, 32),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}, 32),
}


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("scaling", SCALINGS, ids=SCALINGS.keys())
def test_rope_scaled_gte_beyond_its_length_matches_hf(scaling, impl, tmp_path):
    params, positions = SCALINGS[scaling]
    long = FamilySetup("gte", transformers.GteConfig, ours={**GTE.ours, "max_position_embeddings": positions,
                                                           "rope_scaling": params},
                       hf={**GTE.hf, "max_position_embeddings": positions,
                           "rope_parameters": {**HF_ROPE["rope_parameters"], **params}},
                       pad=PAD, type_vocab_size=2, length=30, right=9, left=7, hf_checkpoint_layout=True)
    ours, _ = check_hf_checkpoint(long, CASES["masked_lm"], impl, tmp_path)
    assert ours.config.rope_scaling == params
    # the scaling matters at this length: the unscaled model differs by more than the parity tolerance
    plain = bertkit.BERTForMaskedLM(ours.config.replace(rope_scaling=None, max_position_embeddings=32))
    plain.load_state_dict(ours.state_dict())
    inputs = inputs_for(long)
    with torch.no_grad():
        assert float((plain.eval()(**inputs) - ours(**inputs)).abs().max()) > 5e-5
    written = ours.config.to_hf_dict("BertForMaskedLM")
    assert written["rope_parameters"] == {"rope_theta": 500.0, **params}
    assert BERTConfig.from_hf_dict(written) == ours.config


def test_training_mode_dropout_matches_hf(tmp_path):
    """Train mode, dropout everywhere (embeddings, attention probabilities, the gated activation, both residual
    blocks, the token classifier): the same dropout layers in HF's order give the same masks from one seed."""
    case = CASES["token_cls"]
    hf = randomize_(transformers.GteForTokenClassification(
        GTE.hf_config(case, "eager", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2)), std=0.1)
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForTokenClassification.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = inputs_for(GTE)
    mask = inputs["attention_mask"].bool()
    hf.train()
    ours.train()
    with fast.fast_path(False):
        torch.manual_seed(5)
        a = ours(**inputs)[mask]
        torch.manual_seed(5)
        b = hf(**inputs).logits[mask]
    torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs)[mask], atol=1e-3)


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls"])
def test_unpadded_execution_serves_gte(case_id, monkeypatch):
    """The fast path drops padding: norms, projections and the MLP on the packed tokens, attention in the padded
    layout of the rotary tables; equal to the padded path, gradients too (the first-token classifier: right
    padding, since it keeps left-padded batches padded)."""
    case = CASES[case_id]
    model = randomize_(case.ours(GTE.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(GTE)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


def test_first_token_only_equals_the_full_last_layer():
    model = randomize_(bertkit.BERT(GTE.our_config(CASES["model"], "sdpa"), add_pooling_layer=True), std=0.1).eval()
    ids, mask = padded_ids(GTE)
    with torch.no_grad(), fast.fast_path(False):
        full = model.encode(ids, mask)
        first = model.encode(ids, mask, first_token_only=True)
    assert first.last_hidden_state.shape[1] == 1
    torch.testing.assert_close(first.last_hidden_state[:, 0], full.last_hidden_state[:, 0], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(first.pooled_output, full.pooled_output, atol=2e-5, rtol=2e-5)


def fill_mask_dir(tmp_path, hf_class, hf_config):
    """An HF-written masked LM over a WordPiece tokenizer (BERT's special tokens, trained on Austen here)."""
    from family_dirs import _bert_vocab

    tokenizer = transformers.BertTokenizerFast(vocab=_bert_vocab())
    hf = randomize_(hf_class(hf_config.__class__(**{**hf_config.to_dict(), "vocab_size": len(tokenizer),
                                                  "pad_token_id": 0})), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def check_fill_mask_top5(directory):
    text = "she was [MASK] to see him , and the house was quite ."
    theirs = transformers.pipeline("fill-mask", model=str(directory), top_k=5)(text)
    ours = bertkit.pipeline("fill-mask", model=directory)(text, top_k=5)
    assert [r["token"] for r in ours] == [r["token"] for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=2e-5)


def test_fill_mask_top5_equals_hfs_pipeline(tmp_path):
    """bertkit's fill-mask pipeline over an HF-written GTE masked LM gives HF's pipeline's top 5."""
    check_fill_mask_top5(fill_mask_dir(tmp_path, transformers.GteForMaskedLM,
                                       GTE.hf_config(CASES["masked_lm"], "eager")))


# ---------------------------------------------------------------------------- config, names, counts

def test_configs_factories_and_names():
    config = bertkit.GTEConfig()
    assert (config.family, config.vocab_size, config.max_position_embeddings, config.type_vocab_size,
            config.rope_theta, config.attention_probs_dropout_prob, config.pad_token_id) == \
        ("gte", 250048, 8192, 1, 160_000.0, 0.0, 1)
    assert bertkit.models.GTEConfig is bertkit.GTEConfig
    hf_default = BERTConfig.from_hf_dict(transformers.GteConfig().to_dict())
    assert (hf_default.rope_theta, hf_default.vocab_size, hf_default.rope_scaling) == (160_000.0, 250048, None)
    small = bertkit.GTEConfig(num_hidden_layers=1, type_vocab_size=0, rope_scaling={"rope_type": "linear",
                                                                                     "factor": 2.0})
    assert BERTConfig.from_dict(small.to_dict()) == small
    written = small.to_hf_dict("BertForMaskedLM")
    assert written["architectures"] == ["GteForMaskedLM"] and written["model_type"] == "gte"
    assert "rope_theta" not in written and "rope_scaling" not in written
    hf = transformers.GteConfig.from_dict(written)
    assert hf.rope_parameters == {"rope_theta": 160_000.0, "rope_type": "linear", "factor": 2.0}
    assert BERTConfig.from_hf_dict(hf.to_dict()) == small
    # an older config's flat keys: rope_scaling ("type") and rope_theta
    old = BERTConfig.from_hf_dict({"model_type": "gte", "rope_theta": 10000.0,
                                   "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    assert (old.rope_theta, old.rope_scaling) == (10000.0, {"rope_type": "dynamic", "factor": 2.0})
    for ours, hf_name in (("BertModel", "GteModel"), ("BertForMaskedLM", "GteForMaskedLM"),
                          ("BertForSequenceClassification", "GteForSequenceClassification"),
                          ("BertForTokenClassification", "GteForTokenClassification")):
        assert config.hf_architecture_name(ours) == hf_name
        assert bertkit.config.bert_architecture_name(hf_name) == ours


def test_gte_names_table_both_ways():
    hf_names = {"gte.encoder.layer.1.attention.qkv_proj.weight": 0, "gte.encoder.layer.0.mlp.down_proj.bias": 1,
                "encoder.layer.0.mlp_ln.weight": 2, "gte.embeddings.word_embeddings.weight": 3,
                "gte.pooler.dense.weight": 4, "lm_head.norm.bias": 5, "lm_head.decoder.weight": 6,
                "lm_head.decoder.bias": 7, "classifier.weight": 8}
    ours = hf_family_to_bertkit(hf_names, "gte")
    assert list(ours) == ["bert.encoder.layer.1.attention.qkv_proj.weight", "bert.encoder.layer.0.mlp.down_proj.bias",
                          "encoder.layer.0.mlp_ln.weight", "bert.embeddings.word_embeddings.weight",
                          "bert.pooler.dense.weight", "cls.predictions.transform.LayerNorm.bias",
                          "cls.predictions.decoder.weight", "cls.predictions.bias", "classifier.weight"]
    assert bertkit_to_hf_family(ours, "gte") == hf_names


@pytest.mark.parametrize("shape", SETUPS, ids=SETUPS.keys())
@pytest.mark.parametrize("case_id", ["model", "masked_lm", "seq_cls", "token_cls"])
def test_parameter_count_and_hf_size(case_id, shape):
    case, setup = CASES[case_id], SETUPS[shape]
    config = setup.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, case.ours.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(setup.hf_config(case, "eager"))
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize(("make", "message"), [
    (lambda c: bertkit.BERTForPreTraining(c), "family 'gte' does not have"),
    (lambda c: c.replace(is_decoder=True), re.escape("BERTConfig.is_decoder=True: family 'gte' has no causal LM")),
    (lambda c: c.replace(rope_scaling={"rope_type": "longrope", "factor": 2.0}), "rope_type='longrope' is not"),
    (lambda c: c.replace(rope_scaling={"rope_type": "yarn"}), "needs the number 'factor'"),
    (lambda c: c.replace(type_vocab_size=-1), "type_vocab_size must be a positive integer"),
    (lambda c: BERTConfig.from_hf_dict({**c.to_hf_dict(), "rope_parameters": [1]}), "rope_parameters must be"),
])
def test_what_gte_does_not_have_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(GTE.our_config(CASES["model"], "sdpa"))


def test_type_vocab_size_zero_is_gtes_alone():
    with pytest.raises(ValueError, match="type_vocab_size must be a positive integer"):
        BERTConfig(type_vocab_size=0)
    assert bertkit.BERT(GTE_EN.our_config(CASES["model"], "sdpa")).embeddings.token_type_embeddings is None


def test_untied_gte_mlm_head_both_ways(tmp_path):
    case = CASES["masked_lm"]
    ours = randomize_(bertkit.BERTForMaskedLM(GTE.our_config(case, "sdpa", tie_word_embedding=False)), std=0.1)
    ours.save_pretrained(tmp_path)
    hf = transformers.GteForMaskedLM.from_pretrained(tmp_path)
    assert hf.lm_head.decoder.weight is not hf.gte.embeddings.word_embeddings.weight
    assert_pairs_close(ours_and_hf_outputs(GTE, case, ours.eval(), hf.eval()), "untied (ours writes)")
