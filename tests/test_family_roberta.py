"""RoBERTa, XLM-RoBERTa and CamemBERT as configuration of the one engine (``BERTConfig(family="roberta")``).

Parity with HF transformers' ``Roberta*`` classes (a test-only dependency; no network): random weights are
written by one library's ``save_pretrained`` and read by the other's ``from_pretrained``; outputs, losses and
gradients must agree at every real position of a padded batch (right- and left-padded rows, so the position
ids that skip padding are exercised), with eager and SDPA attention, on the fast and the plain engine path.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

pytest.importorskip("transformers")

import transformers

import bertkit
from bertkit.config import FAMILIES, BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.layers import default_position_ids
from conftest import randomize_
from family_parity import (
    BATCH,
    CHOICES,
    IMPLEMENTATIONS,
    LENGTH,
    TOL,
    Case,
    FamilySetup,
    assert_pairs_close,
    causal_labels,
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
#: odd sizes (hidden 36 / 3 heads, inner 52, vocab 99); 40 positions = 38 tokens after pad + 1
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
             max_position_embeddings=40, type_vocab_size=1, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, pad_token_id=PAD)
ROBERTA = FamilySetup("roberta", transformers.RobertaConfig, ours=SIZES,
                      hf=dict(**SIZES, bos_token_id=0, eos_token_id=2), pad=PAD)


def both(**fields) -> dict:
    """The same fields for bertkit's config and HF's (RoBERTa's names are BERT's)."""
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "RobertaModel", outputs=("last_hidden_state", "pooler_output"),
         token_level=(True, False)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "RobertaForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("causal_lm", bertkit.BERTForCausalLM, "RobertaForCausalLM", **both(is_decoder=True),
         token_level=(True,), labels=lambda f, x: dict(labels=causal_labels(f, x))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "RobertaForSequenceClassification",
         **both(num_labels=3), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "RobertaForSequenceClassification",
         **both(num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "RobertaForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "RobertaForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "RobertaForMultipleChoice", choices=CHOICES,
         labels=lambda f, x: dict(labels=torch.tensor([1, 0, 1]))),
)}


# ---------------------------------------------------------------------------- HF checkpoints in bertkit

@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_roberta_checkpoint_matches_hf(case, impl, tmp_path):
    check_hf_checkpoint(ROBERTA, case, impl, tmp_path)
    assert case.ours.from_pretrained(tmp_path).config.attn_implementation == "sdpa"  # HF writes no impl


def test_sequence_classifier_is_robertas_head_without_pooler():
    model = bertkit.BERTForSequenceClassification(ROBERTA.our_config(CASES["seq_cls"], "sdpa"))
    assert model.bert.pooler is None
    names = {n for n, _ in model.named_parameters() if not n.startswith("bert.")}
    assert names == {"classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight",
                     "classifier.out_proj.bias"}
    assert bertkit.BERTForMultipleChoice(ROBERTA.our_config(CASES["model"], "sdpa")).bert.pooler is not None
    assert bertkit.BERTForTokenClassification(ROBERTA.our_config(CASES["model"], "sdpa")).bert.pooler is None


def test_dropout_of_the_classifier_head_in_training(tmp_path):
    """Train mode: the same dropout layers (before dense and before out_proj) give the same masks from one seed."""
    case = CASES["seq_cls"]
    hf = randomize_(transformers.RobertaForSequenceClassification(
        ROBERTA.hf_config(case, "eager", classifier_dropout=0.3)), std=0.1)
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    assert ours.config.classifier_dropout == 0.3
    inputs = inputs_for(ROBERTA)
    hf.train()
    ours.train()
    with fast.fast_path(False):  # torch's own dropout draws, in HF's order
        torch.manual_seed(5)
        a = ours(**inputs)
        torch.manual_seed(5)
        b = hf(**inputs).logits
    torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs), atol=1e-3)  # the dropout really dropped


# ---------------------------------------------------------------------------- bertkit checkpoints in HF

@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_roberta_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(ROBERTA, case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert (written["pad_token_id"], written["bos_token_id"], written["eos_token_id"]) == (PAD, 0, 2)


# ---------------------------------------------------------------------------- XLM-RoBERTa and CamemBERT

@pytest.mark.parametrize(("hf_class", "config_class", "model_type"), [
    ("XLMRobertaForMaskedLM", "XLMRobertaConfig", "xlm-roberta"),
    ("CamembertForMaskedLM", "CamembertConfig", "camembert"),
])
def test_xlm_roberta_and_camembert_keep_their_model_type(hf_class, config_class, model_type, tmp_path):
    case = CASES["masked_lm"]
    config = getattr(transformers, config_class)(**SIZES, bos_token_id=5, eos_token_id=6, attn_implementation="sdpa")
    hf = randomize_(getattr(transformers, hf_class)(config), std=0.1).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path / "hf")
    assert (ours.config.family, ours.config.model_type, ours.config.hf_model_type) == ("roberta", model_type,
                                                                                       model_type)
    assert (ours.config.cls_token_id, ours.config.sep_token_id, ours.config.pad_token_id) == (5, 6, PAD)
    assert_pairs_close(ours_and_hf_outputs(ROBERTA, case, ours, hf), model_type)

    ours.save_pretrained(tmp_path / "ours")
    written = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert written["model_type"] == model_type and written["architectures"] == [hf_class]
    assert (written["bos_token_id"], written["eos_token_id"]) == (5, 6)
    auto = hf_from_pretrained(transformers.AutoModelForMaskedLM, tmp_path / "ours", "sdpa")
    assert type(auto).__name__ == hf_class
    assert_pairs_close(ours_and_hf_outputs(ROBERTA, case, ours, auto), f"{model_type} (ours -> HF)")


# ---------------------------------------------------------------------------- the family as data

def test_position_ids_skip_padding_as_hf_does():
    config = ROBERTA.our_config(CASES["model"], "sdpa")
    ids, _ = padded_ids(ROBERTA, 6)
    expected = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(
        ids, PAD)
    cache_position = torch.arange(LENGTH)
    assert torch.equal(default_position_ids(config, ids, cache_position), expected)
    after_cache = default_position_ids(config, ids, cache_position + 3)  # 3 cached tokens before these
    assert torch.equal(after_cache, expected + 3 * (ids != PAD))
    assert torch.equal(default_position_ids(config, None, cache_position), (torch.arange(LENGTH) + PAD + 1)[None])
    assert torch.equal(default_position_ids(BERTConfig(), ids, cache_position), cache_position[None])
    assert config.position_offset == PAD + 1 and config.max_tokens == SIZES["max_position_embeddings"] - 2


def test_inputs_embeds_and_explicit_position_ids_match_hf(tmp_path):
    case = CASES["model"]
    hf = randomize_(transformers.RobertaModel(ROBERTA.hf_config(case, "sdpa")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids(ROBERTA)
    embeds = hf.embeddings.word_embeddings(ids).detach()
    positions = torch.arange(LENGTH).flip(0)[None].expand(BATCH, -1) + 2
    with torch.no_grad():
        for kwargs in (dict(inputs_embeds=embeds), dict(input_ids=ids, position_ids=positions)):
            a = ours(attention_mask=mask, **kwargs)[0][mask.bool()]
            b = hf(attention_mask=mask, **kwargs).last_hidden_state[mask.bool()]
            torch.testing.assert_close(a, b, **TOL)


def test_length_limit_counts_the_position_offset():
    model = bertkit.BERT(ROBERTA.our_config(CASES["model"], "sdpa")).eval()
    longest = SIZES["max_position_embeddings"] - PAD - 1
    with torch.no_grad():
        assert model(torch.full((1, longest), 5))[0].shape == (1, longest, SIZES["hidden_size"])
        with pytest.raises(ValueError, match=f"more than this model's {longest} tokens"):
            model(torch.full((1, longest + 1), 5))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        BERTConfig(family="roberta", max_position_embeddings=2)


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls"])
def test_unpadded_execution_serves_roberta(case_id, monkeypatch):
    """The fast path drops padding for RoBERTa too (positions are computed before packing) and equals the
    padded path at every real position, left-padded rows included (the first-token classifier: right padding,
    since it keeps left-padded batches padded as BERT's pooler does), gradients too."""
    case = CASES[case_id]
    model = randomize_(case.ours(ROBERTA.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(ROBERTA)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_untied_roberta_mlm_head_both_ways(source, tmp_path):
    case = CASES["masked_lm"]
    if source == "hf":
        hf = randomize_(transformers.RobertaForMaskedLM(ROBERTA.hf_config(case, "sdpa", tie_word_embeddings=False)),
                        std=0.1)
        hf.save_pretrained(tmp_path)
        ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
        assert ours.load_report.initialized == ours.load_report.dropped == []
    else:
        ours = randomize_(bertkit.BERTForMaskedLM(ROBERTA.our_config(case, "sdpa", tie_word_embedding=False)), std=0.1)
        ours.save_pretrained(tmp_path)
        hf = hf_from_pretrained(transformers.RobertaForMaskedLM, tmp_path, "sdpa")
    assert not ours.config.tie_word_embedding
    assert hf.lm_head.decoder.weight is not hf.roberta.embeddings.word_embeddings.weight
    assert_pairs_close(ours_and_hf_outputs(ROBERTA, case, ours.eval(), hf.eval()), f"untied ({source} writes)")


def test_cached_decoding_continues_the_positions(tmp_path):
    case = CASES["causal_lm"]
    model = randomize_(bertkit.BERTForCausalLM(ROBERTA.our_config(case, "sdpa")), std=0.1).eval()
    ids = torch.randint(3, SIZES["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(3))
    cache = bertkit.KVCache()
    with torch.no_grad():
        full = model(ids)
        first = model(ids[:, :6], past_key_values=cache, use_cache=True)
        rest = model(ids[:, 6:], past_key_values=cache, use_cache=True)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, **TOL)


def test_configs_factories_and_names():
    config = bertkit.RoBERTaConfig()
    assert (config.family, config.vocab_size, config.max_position_embeddings, config.type_vocab_size) == \
        ("roberta", 50265, 514, 1)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.unk_token_id,
            config.mask_token_id) == (1, 0, 2, 3, 50264)
    assert config.max_tokens == 512 and config.special_token_ids == (0, 1, 2, 3, 50264)
    assert bertkit.models.RoBERTaConfig is bertkit.RoBERTaConfig
    xlmr = bertkit.XLMRoBERTaConfig(num_hidden_layers=1)
    assert (xlmr.model_type, xlmr.vocab_size, xlmr.mask_token_id, xlmr.num_hidden_layers) == \
        ("xlm-roberta", 250002, 250001, 1)
    assert (bertkit.CamemBERTConfig().cls_token_id, bertkit.CamemBERTConfig().sep_token_id) == (5, 6)
    # the lucid-style factories build the family from a field
    model = bertkit.bert_for_masked_lm_tiny(family="roberta", vocab_size=99, max_position_embeddings=40)
    assert model.config.family == "roberta" and model.config.pad_token_id == PAD
    assert model.bert.embeddings.position_embeddings.padding_idx == PAD
    # a bertkit dict round-trips, HF's keys too
    assert BERTConfig.from_dict(xlmr.to_dict()) == xlmr
    assert BERTConfig.from_hf_dict(xlmr.to_hf_dict("BertForMaskedLM")) == xlmr
    assert xlmr.to_hf_dict("BertLMHeadModel")["architectures"] == ["XLMRobertaForCausalLM"]
    assert BERTConfig().to_hf_dict("BertModel")["model_type"] == "bert"


@pytest.mark.parametrize(("changes", "message"), [
    (dict(family="gpt"), f"BERTConfig.family must be one of {tuple(FAMILIES)}, got 'gpt'"),
    (dict(model_type="camembert"), "BERTConfig.model_type 'camembert' is not a model type of family 'bert'"),
    (dict(family="roberta", model_type="bert"), "set family='bert'"),
])
def test_family_errors_name_the_field(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        BERTConfig(**changes)


def test_what_roberta_does_not_have_is_refused(tmp_path):
    config = ROBERTA.our_config(CASES["model"], "sdpa")
    for cls in (bertkit.BERTForPreTraining, bertkit.BERTForNextSentencePrediction):
        with pytest.raises(ValueError, match="family 'roberta' does not have"):
            cls(config)
    with pytest.raises(ValueError, match=r"Google's bert_config\.json describes BERT"):
        config.to_google_dict()
    roberta = bertkit.BERTForMaskedLM(config)
    roberta.save_pretrained(tmp_path)
    bert = bertkit.BERTForMaskedLM(BERTConfig(**{**SIZES, "pad_token_id": 0}))
    with pytest.raises(ValueError, match=r"family 'roberta'.*is family 'bert'"):
        bert.from_pretrained(tmp_path)
    assert roberta.from_pretrained(tmp_path) is roberta  # into an instance of the same family


def test_converting_a_roberta_checkpoint_keeps_it_roberta(tmp_path):
    from bertkit.weights.convert import convert

    xlmr = dataclasses.replace(ROBERTA, hf_config_class=transformers.XLMRobertaConfig)
    hf = randomize_(transformers.XLMRobertaForSequenceClassification(xlmr.hf_config(CASES["seq_cls"], "sdpa")),
                    std=0.1).eval()
    hf.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["XLMRobertaForSequenceClassification"]
    back = hf_from_pretrained(transformers.XLMRobertaForSequenceClassification, tmp_path / "out", "sdpa")
    inputs = inputs_for(ROBERTA)
    with torch.no_grad():
        torch.testing.assert_close(back(**inputs).logits, hf(**inputs).logits, **TOL)
    with pytest.raises(ValueError, match="describes BERT"):
        convert(tmp_path / "hf", tmp_path / "tf", to="tf")


def test_to_dict_round_trips_and_keeps_bert_configs_as_before():
    from bertkit import BERTConfig

    bert = BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3, num_hidden_layers=2, intermediate_size=52)
    assert "family" not in bert.to_dict() and "model_type" not in bert.to_dict()  # run.json of older runs matches
    roberta = BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3, num_hidden_layers=2,
                         intermediate_size=52, family="roberta", model_type="xlm-roberta", max_position_embeddings=40)
    again = BERTConfig.from_dict(roberta.to_dict())
    assert again == roberta and again.family == "roberta" and again.model_type == "xlm-roberta"
