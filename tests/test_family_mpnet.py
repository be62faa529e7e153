"""MPNet as configuration of the one engine (``BERTConfig(family="mpnet")``): BERT's layer plus a relative position
bias shared by every layer's attention (the "mpnet" layer variant).

Parity with HF transformers' ``MPNet*`` classes (a test-only dependency; no network), which attend eagerly only:
random weights are written by one library's ``save_pretrained`` and read by the other's ``from_pretrained``;
outputs, losses and gradients must agree at every real position of a padded batch (right- and left-padded rows),
with bertkit's eager and SDPA attention, on the fast and the plain engine path. Sequences are 140 tokens long, so
every one of the 32 relative-position buckets is used, the logarithmic ones and the last (distances >= 128) too.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("transformers")

import transformers
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.counting import count_parameters
from bertkit.modeling.relative_bias import relative_position_buckets
from bertkit.weights.tables import bertkit_to_hf_family, hf_family_to_bertkit
from conftest import randomize_
from family_parity import (
    BATCH,
    CHOICES,
    IMPLEMENTATIONS,
    TOL,
    Case,
    FamilySetup,
    assert_pairs_close,
    check_fast_and_plain_paths_agree,
    check_hf_checkpoint,
    check_our_checkpoint,
    hf_from_pretrained,
    inputs_for,
    ours_and_hf_outputs,
    padded_ids,
    qa_labels,
    token_labels,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PAD = 1
LENGTH = 140
#: odd sizes (hidden 36 / 3 heads, inner 52, vocab 99); positions for LENGTH tokens after pad + 1, and a few more
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
             max_position_embeddings=LENGTH + 5, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, pad_token_id=PAD)
#: rows alternately full, right-padded (20) and left-padded (30); HF's MPNet attends eagerly only (it refuses
#: ``attn_implementation="sdpa"``); every gradient check reaches the shared relative position bias
MPNET = FamilySetup("mpnet", transformers.MPNetConfig, ours=SIZES, hf=SIZES, pad=PAD, length=LENGTH, right=20,
                    left=30, qa_spans=((1, 2, 40), (4, 80, 130)), hf_impl="eager",
                    grads_include=("encoder.relative_attention_bias.weight",))


def both(**fields) -> dict:
    """The same fields for bertkit's config and HF's (MPNet's names are BERT's)."""
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "MPNetModel", outputs=("last_hidden_state", "pooler_output"),
         token_level=(True, False)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "MPNetForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "MPNetForSequenceClassification",
         **both(num_labels=3), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "MPNetForSequenceClassification",
         **both(num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "MPNetForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "MPNetForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "MPNetForMultipleChoice", choices=CHOICES,
         labels=lambda f, x: dict(labels=torch.tensor([1, 0, 1]))),
)}


# ---------------------------------------------------------------------------- HF checkpoints in bertkit

@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_mpnet_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(MPNET, case, impl, tmp_path)
    assert ours.config.relative_attention_num_buckets == 32


# ---------------------------------------------------------------------------- bertkit checkpoints in HF

@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_mpnet_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(MPNET, case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert (written["pad_token_id"], written["bos_token_id"], written["eos_token_id"]) == (PAD, 0, 2)
    assert written["relative_attention_num_buckets"] == 32


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_untied_mpnet_mlm_head_both_ways(source, tmp_path):
    case = CASES["masked_lm"]
    if source == "hf":
        hf = randomize_(transformers.MPNetForMaskedLM(MPNET.hf_config(case, "eager", tie_word_embeddings=False)),
                        std=0.1)
        hf.save_pretrained(tmp_path)
        ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
        assert ours.load_report.initialized == ours.load_report.dropped == []
    else:
        ours = randomize_(bertkit.BERTForMaskedLM(MPNET.our_config(case, "sdpa", tie_word_embedding=False)), std=0.1)
        ours.save_pretrained(tmp_path)
        hf = hf_from_pretrained(transformers.MPNetForMaskedLM, tmp_path, "eager")
    assert not ours.config.tie_word_embedding
    assert hf.lm_head.decoder.weight is not hf.mpnet.embeddings.word_embeddings.weight
    assert_pairs_close(ours_and_hf_outputs(MPNET, case, ours.eval(), hf.eval()), f"untied ({source} writes)")


def test_training_mode_dropout_matches_hf(tmp_path):
    """Train mode, dropout everywhere (embeddings, attention probabilities, both residual blocks, the token
    classifier): the same dropout layers in HF's order give the same masks from one seed (eager, torch's own
    dropout). (The sequence classifier computes its last layer at the first token alone, so its draws differ.)"""
    case = CASES["token_cls"]
    hf = randomize_(transformers.MPNetForTokenClassification(
        MPNET.hf_config(case, "eager", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2)), std=0.1)
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForTokenClassification.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = inputs_for(MPNET)
    mask = inputs["attention_mask"].bool()
    hf.train()
    ours.train()
    with fast.fast_path(False):
        torch.manual_seed(5)
        a = ours(**inputs)[mask]
        torch.manual_seed(5)
        b = hf(**inputs).logits[mask]
    torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs)[mask], atol=1e-3)  # the dropout really dropped


# ---------------------------------------------------------------------------- the relative position bias

@pytest.mark.parametrize("num_buckets", [32, 4, 10, 64])
def test_buckets_are_hfs(num_buckets):
    ours = relative_position_buckets(300, num_buckets)
    positions = torch.arange(300)
    relative = positions[None, :] - positions[:, None]  # HF: key (memory) - query (context)
    assert torch.equal(ours, MPNetEncoder.relative_position_bucket(relative, num_buckets=num_buckets))


def test_the_parity_inputs_reach_every_bucket():
    """Every bucket but 16, which would be distance 0 with the key after the query: no pair has it (in HF too)."""
    config = MPNET.our_config(CASES["model"], "sdpa")
    every = [b for b in range(32) if b != 16]
    assert relative_position_buckets(LENGTH, config.relative_attention_num_buckets).unique().tolist() == every
    real = padded_ids(MPNET)[1][1].sum()  # the right-padded row alone: its real tokens still span the far buckets
    assert relative_position_buckets(int(real), 32).unique().tolist() == every


def test_the_bias_is_one_table_shared_by_the_layers():
    model = bertkit.BERT(MPNET.our_config(CASES["model"], "sdpa"))
    table = model.encoder.relative_attention_bias
    assert table.weight.shape == (32, SIZES["num_attention_heads"])
    names = [n for n, _ in model.named_parameters() if "relative" in n]
    assert names == ["encoder.relative_attention_bias.weight"]
    bias = table(torch.zeros(2, 7, SIZES["hidden_size"]))["position_bias"]
    assert bias.shape == (1, SIZES["num_attention_heads"], 7, 7)
    torch.testing.assert_close(bias[0, :, 5, 2], table.weight[3])  # query 5, key 2: distance 3, its own bucket
    torch.testing.assert_close(bias[0, :, 2, 5], table.weight[16 + 3])  # a key after the query: the upper half


def test_inputs_embeds_and_explicit_position_ids_match_hf(tmp_path):
    """The bias counts positions 0..L-1 whatever ``position_ids`` say, as HF does; embeddings take them."""
    case = CASES["model"]
    hf = randomize_(transformers.MPNetModel(MPNET.hf_config(case, "eager")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids(MPNET)
    embeds = hf.embeddings.word_embeddings(ids).detach()
    positions = torch.arange(LENGTH).flip(0)[None].expand(BATCH, -1) + 2
    with torch.no_grad():
        for kwargs in (dict(inputs_embeds=embeds), dict(input_ids=ids, position_ids=positions)):
            a = ours(attention_mask=mask, **kwargs)[0][mask.bool()]
            b = hf(attention_mask=mask, **kwargs).last_hidden_state[mask.bool()]
            torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls"])
def test_unpadded_execution_serves_mpnet(case_id, monkeypatch):
    """The fast path drops padding for MPNet too: its attention runs in the padded layout, where the bias lives,
    and equals the padded path at every real position, gradients too (the first-token classifier: right padding,
    since it keeps left-padded batches padded)."""
    case = CASES[case_id]
    model = randomize_(case.ours(MPNET.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(MPNET)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


def test_first_token_only_equals_the_full_last_layer():
    model = randomize_(bertkit.BERT(MPNET.our_config(CASES["model"], "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(MPNET)
    with torch.no_grad(), fast.fast_path(False):
        full = model.encode(ids, mask)
        first = model.encode(ids, mask, first_token_only=True)
    assert first.last_hidden_state.shape[1] == 1
    torch.testing.assert_close(first.last_hidden_state[:, 0], full.last_hidden_state[:, 0], **TOL)
    torch.testing.assert_close(first.pooled_output, full.pooled_output, **TOL)


def test_token_type_ids_are_ignored():
    model = randomize_(bertkit.BERT(MPNET.our_config(CASES["model"], "sdpa")), std=0.1).eval()
    assert model.embeddings.token_type_embeddings is None
    ids, mask = padded_ids(MPNET)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, token_type_ids=torch.ones_like(ids))[0], model(ids, mask)[0])


# ---------------------------------------------------------------------------- config, names, counts

def test_configs_factories_and_names():
    config = bertkit.MPNetConfig()
    assert (config.family, config.vocab_size, config.max_position_embeddings, config.layer_norm_eps,
            config.relative_attention_num_buckets) == ("mpnet", 30527, 514, 1e-5, 32)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.unk_token_id,
            config.mask_token_id) == (1, 0, 2, 3, 30526)
    assert config.max_tokens == 512 and bertkit.models.MPNetConfig is bertkit.MPNetConfig
    # bertkit's dict and HF's config round-trip; HF's MPNetConfig reads what we write and we read it back
    small = bertkit.MPNetConfig(num_hidden_layers=1, relative_attention_num_buckets=16)
    assert small.to_dict()["relative_attention_num_buckets"] == 16
    assert BERTConfig.from_dict(small.to_dict()) == small
    written = small.to_hf_dict("BertForMaskedLM")
    assert written["architectures"] == ["MPNetForMaskedLM"] and written["model_type"] == "mpnet"
    assert BERTConfig.from_hf_dict(written) == small
    hf = transformers.MPNetConfig.from_dict(written)
    assert (hf.relative_attention_num_buckets, hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (16, 0, 2, 1)
    assert BERTConfig.from_hf_dict(hf.to_dict()) == small
    assert "relative_attention_num_buckets" not in config.to_dict()  # at its default, as for BERT
    assert "relative_attention_num_buckets" not in BERTConfig().to_dict()
    assert "relative_attention_num_buckets" not in BERTConfig().to_hf_dict("BertModel")
    for ours, hf_name in (("BertModel", "MPNetModel"), ("BertForMaskedLM", "MPNetForMaskedLM"),
                          ("BertForSequenceClassification", "MPNetForSequenceClassification"),
                          ("BertForTokenClassification", "MPNetForTokenClassification"),
                          ("BertForQuestionAnswering", "MPNetForQuestionAnswering"),
                          ("BertForMultipleChoice", "MPNetForMultipleChoice")):
        assert config.hf_architecture_name(ours) == hf_name
        assert bertkit.config.bert_architecture_name(hf_name) == ours
        assert hasattr(transformers, hf_name)


def test_mpnet_names_table_both_ways():
    hf_names = {"mpnet.encoder.layer.11.attention.attn.q.weight": 0, "mpnet.encoder.layer.3.attention.attn.o.bias": 1,
                "mpnet.encoder.layer.0.attention.LayerNorm.weight": 2, "encoder.layer.2.attention.attn.v.bias": 3,
                "mpnet.encoder.layer.0.output.LayerNorm.bias": 4, "mpnet.encoder.relative_attention_bias.weight": 5,
                "lm_head.layer_norm.weight": 6, "lm_head.bias": 7, "classifier.out_proj.weight": 8}
    ours = hf_family_to_bertkit(hf_names, "mpnet")
    assert list(ours) == ["bert.encoder.layer.11.attention.self.query.weight",
                          "bert.encoder.layer.3.attention.output.dense.bias",
                          "bert.encoder.layer.0.attention.output.LayerNorm.weight",
                          "encoder.layer.2.attention.self.value.bias", "bert.encoder.layer.0.output.LayerNorm.bias",
                          "bert.encoder.relative_attention_bias.weight", "cls.predictions.transform.LayerNorm.weight",
                          "cls.predictions.bias", "classifier.out_proj.weight"]
    assert bertkit_to_hf_family(ours, "mpnet") == hf_names


@pytest.mark.parametrize("cls", [c.ours for c in CASES.values() if c.id != "seq_cls_regression"],
                         ids=lambda cls: cls.hf_architecture)
def test_parameter_count_and_hf_size(cls):
    case = next(c for c in CASES.values() if c.ours is cls)
    config = MPNET.our_config(case, "sdpa")
    built = cls(config)
    assert count_parameters(config, cls.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(MPNET.hf_config(case, "eager"))
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize(("make", "message"), [
    (lambda c: bertkit.BERTForPreTraining(c), "family 'mpnet' does not have"),
    (lambda c: bertkit.BERTForNextSentencePrediction(c), "family 'mpnet' does not have"),
    (lambda c: c.replace(is_decoder=True), re.escape("BERTConfig.is_decoder=True: family 'mpnet' has no causal LM")),
    (lambda c: c.replace(relative_attention_num_buckets=2), "relative_attention_num_buckets must be at least 4"),
    (lambda c: c.replace(pad_token_id=0), "MPNet pads with id 1"),
    (lambda c: c.to_google_dict(), r"Google's bert_config\.json describes BERT"),
])
def test_what_mpnet_does_not_have_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(MPNET.our_config(CASES["model"], "sdpa"))


def test_loading_mpnet_into_a_bert_instance_is_refused(tmp_path):
    mpnet = bertkit.BERTForMaskedLM(MPNET.our_config(CASES["masked_lm"], "sdpa"))
    mpnet.save_pretrained(tmp_path)
    bert = bertkit.BERTForMaskedLM(BERTConfig(**{**SIZES, "pad_token_id": 0}))
    with pytest.raises(ValueError, match=r"family 'mpnet'.*is family 'bert'"):
        bert.from_pretrained(tmp_path)
    assert mpnet.from_pretrained(tmp_path) is mpnet
