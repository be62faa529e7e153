"""NomicBERT as a family of the one engine (``BERTConfig(family="nomic_bert")``, layer variant ``"rope"``).

Parity with HF transformers' ``NomicBert*`` classes (a test-only dependency; no network), as for GTE
(tests/test_family_gte.py): random weights written by one library and read by the other; outputs, losses and
gradients at every real position of right- and left-padded batches, eager and SDPA, the fast (unpadded) and the
plain engine path. NomicBERT's layer is GTE's without any bias in attention or MLP, with separate up/gate
projections (``fc11`` / ``fc12`` in the checkpoints HF writes), token types and BERT's MLM head.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

import transformers

import bertkit
from bertkit.config import BERTConfig
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
    ours_and_hf_outputs,
    padded_ids,
    token_labels,
)
from test_family_gte import check_fill_mask_top5, fill_mask_dir

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

#: odd sizes (hidden 36 / 3 heads of 12, inner 26, vocab 99), silu (SwiGLU), a rope theta not the default
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=26,
             max_position_embeddings=64, type_vocab_size=2)
NOMIC = FamilySetup("nomic_bert", transformers.NomicBertConfig,
                    ours={**SIZES, "rope_theta": 300.0, "attention_bias": False, "hidden_act": "silu"},
                    hf={**SIZES, "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}, type_vocab_size=2,
                    hf_checkpoint_layout=True, grads_include=("mlp.gate_proj.weight", "token_type_embeddings.weight"))


def both(**fields) -> dict:
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "NomicBertModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "NomicBertForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "NomicBertForSequenceClassification",
         **both(num_labels=3), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_multi_label", bertkit.BERTForSequenceClassification, "NomicBertForSequenceClassification",
         **both(num_labels=3, problem_type="multi_label_classification"),
         labels=lambda f, x: dict(labels=torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "NomicBertForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
)}


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_nomic_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(NOMIC, case, impl, tmp_path)
    assert (ours.config.rope_theta, ours.config.attention_bias, ours.config.hidden_act) == (300.0, False, "silu")


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_nomic_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(NOMIC, case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_theta": 300.0, "rope_type": "default"}
    assert "attention_bias" not in written


def test_dynamic_rope_beyond_max_positions_matches_hf(tmp_path):
    """nomic-embed-text-v1.5's long-context setting: a dynamic NTK rope (factor 2) beyond max_position_embeddings."""
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    long = FamilySetup("nomic_bert", transformers.NomicBertConfig,
                       ours={**NOMIC.ours, "max_position_embeddings": 12, "rope_scaling": scaling},
                       hf={**NOMIC.hf, "max_position_embeddings": 12,
                           "rope_parameters": {"rope_type": "dynamic", "rope_theta": 300.0, "factor": 2.0}},
                       type_vocab_size=2, length=30, right=9, left=7, hf_checkpoint_layout=True)
    ours, _ = check_hf_checkpoint(long, CASES["model"], "sdpa", tmp_path)
    assert ours.config.rope_scaling == scaling


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls"])
def test_unpadded_execution_serves_nomic(case_id, monkeypatch):
    case = CASES[case_id]
    model = randomize_(case.ours(NOMIC.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(NOMIC)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


def test_fill_mask_top5_equals_hfs_pipeline(tmp_path):
    check_fill_mask_top5(fill_mask_dir(tmp_path, transformers.NomicBertForMaskedLM,
                                       NOMIC.hf_config(CASES["masked_lm"], "eager")))


def test_untied_nomic_mlm_head_both_ways(tmp_path):
    case = CASES["masked_lm"]
    ours = randomize_(bertkit.BERTForMaskedLM(NOMIC.our_config(case, "sdpa", tie_word_embedding=False)), std=0.1)
    ours.save_pretrained(tmp_path)
    hf = transformers.NomicBertForMaskedLM.from_pretrained(tmp_path)
    assert hf.cls.predictions.decoder.weight is not hf.nomic_bert.embeddings.word_embeddings.weight
    assert_pairs_close(ours_and_hf_outputs(NOMIC, case, ours.eval(), hf.eval()), "untied (ours writes)")


def test_configs_factories_and_names():
    config = bertkit.NomicBERTConfig()
    assert (config.family, config.vocab_size, config.max_position_embeddings, config.hidden_act, config.rope_theta,
            config.attention_bias, config.hidden_dropout_prob, config.pad_token_id) == \
        ("nomic_bert", 30528, 2048, "silu", 1000.0, False, 0.0, 0)
    assert bertkit.models.NomicBERTConfig is bertkit.NomicBERTConfig
    assert BERTConfig.from_hf_dict(transformers.NomicBertConfig().to_dict()) == config
    written = config.to_hf_dict("BertForMaskedLM")
    assert written["architectures"] == ["NomicBertForMaskedLM"] and written["model_type"] == "nomic_bert"
    assert BERTConfig.from_hf_dict(transformers.NomicBertConfig.from_dict(written).to_dict()) == config
    with pytest.raises(ValueError, match="attention_bias=True: HF's NomicBert models fix it at False"):
        config.replace(attention_bias=True).to_hf_dict()
    with pytest.raises(ValueError, match="head_dim=8 is not hidden_size / num_attention_heads"):
        BERTConfig.from_hf_dict({**written, "head_dim": 8})


def test_nomic_names_table_both_ways():
    hf_names = {"nomic_bert.encoder.layers.1.attn.Wqkv.weight": 0, "nomic_bert.encoder.layers.0.mlp.fc11.weight": 1,
                "nomic_bert.encoder.layers.0.mlp.fc12.weight": 2, "encoder.layers.0.mlp.fc2.weight": 3,
                "nomic_bert.encoder.layers.0.norm2.bias": 4, "nomic_bert.emb_ln.weight": 5, "emb_ln.bias": 6,
                "cls.predictions.transform.layer_norm.weight": 7, "cls.predictions.bias": 8,
                "nomic_bert.pooler.dense.weight": 9}
    ours = hf_family_to_bertkit(hf_names, "nomic_bert")
    assert list(ours) == ["bert.encoder.layer.1.attention.qkv_proj.weight", "bert.encoder.layer.0.mlp.up_proj.weight",
                          "bert.encoder.layer.0.mlp.gate_proj.weight", "encoder.layer.0.mlp.down_proj.weight",
                          "bert.encoder.layer.0.mlp_ln.bias", "bert.embeddings.LayerNorm.weight",
                          "embeddings.LayerNorm.bias", "cls.predictions.transform.LayerNorm.weight",
                          "cls.predictions.bias", "bert.pooler.dense.weight"]
    assert bertkit_to_hf_family(ours, "nomic_bert") == hf_names


@pytest.mark.parametrize("case_id", ["model", "masked_lm", "seq_cls", "token_cls"])
def test_parameter_count_and_hf_size(case_id):
    case = CASES[case_id]
    config = NOMIC.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, case.ours.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(NOMIC.hf_config(case, "eager"))
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hf.parameters())
