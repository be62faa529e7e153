"""DistilBERT as configuration of the one engine (``BERTConfig(family="distilbert")``, ``bertkit.DistilBERTConfig``).

Parity with HF transformers' ``DistilBert*`` classes (a test-only dependency; no network), in both directions
(:mod:`family_parity`): outputs, losses and gradients at every real position of padded batches, eager and SDPA,
on the fast and the plain engine path; sinusoidal position tables; the configuration's own keys.
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
from bertkit.modeling import fast, unpad
from bertkit.modeling.counting import count_parameters
from bertkit.modeling.layers import sinusoidal_table
from conftest import randomize_
from family_parity import (
    CHOICES,
    IMPLEMENTATIONS,
    TOL,
    Case,
    FamilySetup,
    check_hf_checkpoint,
    check_our_checkpoint,
    hf_from_pretrained,
    inputs_for,
    padded_ids,
    qa_labels,
    token_labels,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

#: odd sizes (hidden 36 / 3 heads, inner 52, vocab 99), 40 positions
DISTILBERT = FamilySetup(
    "distilbert", transformers.DistilBertConfig,
    ours=dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
              max_position_embeddings=40, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    hf=dict(vocab_size=99, dim=36, n_layers=2, n_heads=3, hidden_dim=52, max_position_embeddings=40, dropout=0.0,
            attention_dropout=0.0, pad_token_id=0))

CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "DistilBertModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "DistilBertForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "DistilBertForSequenceClassification",
         config=dict(num_labels=3), hf_config=dict(num_labels=3),
         labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "DistilBertForSequenceClassification",
         config=dict(num_labels=1), hf_config=dict(num_labels=1),
         labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "DistilBertForTokenClassification",
         config=dict(num_labels=5), hf_config=dict(num_labels=5), token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "DistilBertForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "DistilBertForMultipleChoice", choices=CHOICES,
         labels=lambda f, x: dict(labels=torch.tensor([1, 0, 1]))),
)}


@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_distilbert_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(DISTILBERT, case, impl, tmp_path)
    assert ours.config.pooler_dropout == 0.2 and ours.config.qa_dropout == 0.1  # HF's seq_classif / qa dropout


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_distilbert_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(DISTILBERT, case, impl, tmp_path)


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_sinusoidal_positions_both_ways(source, tmp_path):
    case = CASES["masked_lm"]
    if source == "hf":
        ours, hf = check_hf_checkpoint(DISTILBERT, case, "sdpa", tmp_path, sinusoidal_pos_embds=True)
    else:
        ours, hf = check_our_checkpoint(DISTILBERT, case, "sdpa", tmp_path, sinusoidal_pos_embds=True)
    assert ours.config.sinusoidal_pos_embds and hf.config.sinusoidal_pos_embds


def test_sinusoidal_table_is_hfs():
    """A fresh model's position table is HF's sinusoidal one (and trained, as HF 5 leaves it)."""
    from transformers.models.distilbert.modeling_distilbert import _create_sinusoidal_embeddings

    ours = bertkit.BERT(DISTILBERT.our_config(CASES["model"], "sdpa", sinusoidal_pos_embds=True))
    table = ours.embeddings.position_embeddings.weight
    expected = _create_sinusoidal_embeddings(40, 36, torch.empty(40, 36))
    torch.testing.assert_close(table.detach(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(sinusoidal_table(7, 5), _create_sinusoidal_embeddings(7, 5, torch.empty(7, 5)),
                               atol=1e-6, rtol=0)  # an odd width too
    assert table.requires_grad
    hf = transformers.DistilBertModel(DISTILBERT.hf_config(CASES["model"], "sdpa", sinusoidal_pos_embds=True))
    torch.testing.assert_close(hf.embeddings.position_embeddings.weight.detach(), expected, atol=1e-6, rtol=0)
    assert not torch.allclose(bertkit.BERT(DISTILBERT.our_config(CASES["model"], "sdpa")).embeddings
                              .position_embeddings.weight, table)


@pytest.mark.parametrize(("case_id", "hf_dropouts", "ours"), [
    ("token_cls", dict(dropout=0.2, attention_dropout=0.15), dict(hidden_dropout_prob=0.2)),
    ("seq_cls", dict(seq_classif_dropout=0.3), dict(pooler_dropout=0.3)),
    ("qa", dict(qa_dropout=0.25), dict(qa_dropout=0.25)),
])
def test_training_dropouts_are_hfs(case_id, hf_dropouts, ours, tmp_path):
    """Train mode, torch's dropout in HF's order: the same masks from one seed, so the dropouts are HF's: the
    layer's (none on the attention output, unlike BERT), the classifier's (``seq_classif_dropout``) and QA's."""
    case = CASES[case_id]
    hf = randomize_(getattr(transformers, case.hf_class)(DISTILBERT.hf_config(case, "eager", **hf_dropouts)), std=0.1)
    hf.save_pretrained(tmp_path)
    model = case.ours.from_pretrained(tmp_path, attn_implementation="eager")
    assert all(getattr(model.config, k) == v for k, v in ours.items())
    inputs = inputs_for(DISTILBERT)
    hf.train()
    model.train()
    with fast.fast_path(False):  # torch's own dropout draws
        torch.manual_seed(5)
        a = model(**inputs)
        torch.manual_seed(5)
        b = hf(**inputs)
    a = a if isinstance(a, tuple) else (a,)
    for name, got in zip(case.outputs, a, strict=True):
        torch.testing.assert_close(got, getattr(b, name), **TOL)
    with torch.no_grad():
        evaluated = model.eval()(**inputs)
    assert not torch.allclose(a[0], evaluated[0] if case_id == "qa" else evaluated, atol=1e-3)  # it really dropped


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_untied_mlm_head_both_ways(source, tmp_path):
    """Untied, the projector's bias is still the head's one bias (HF's vocab_projector has no other)."""
    case = CASES["masked_lm"]
    if source == "hf":
        ours, hf = check_hf_checkpoint(DISTILBERT, case, "sdpa", tmp_path, tie_word_embeddings=False)
    else:
        ours, hf = check_our_checkpoint(DISTILBERT, case, "sdpa", tmp_path, tie_word_embedding=False)
    assert not ours.config.tie_word_embedding
    assert hf.vocab_projector.weight is not hf.distilbert.embeddings.word_embeddings.weight


def test_heads_are_berts_under_distilberts_names(tmp_path):
    """pre_classifier is the pooler (relu), the MLM head BERT's; bare DistilBertModel has no pooler."""
    config = DISTILBERT.our_config(CASES["model"], "sdpa")
    assert bertkit.BERT(config).pooler is None and bertkit.BERT(config, add_pooling_layer=True).pooler is not None
    seq = bertkit.BERTForSequenceClassification(config)
    assert seq.bert.pooler is not None and seq.dropout.p == 0.2
    assert bertkit.BERTForTokenClassification(config).dropout.p == 0.0  # HF's: config.dropout
    assert bertkit.BERTForQuestionAnswering(config).dropout.p == 0.1
    assert bertkit.BERTForMultipleChoice(config).dropout.p == 0.2
    assert bertkit.BERT(config).embeddings.token_type_embeddings is None
    layer = bertkit.BERT(config).encoder.layer[0]
    assert layer.attention.output.dropout.p == 0.0 and layer.output.dropout.p == 0.0  # dropouts of 0 in SIZES
    # an MLM checkpoint in a classifier: the pooler (pre_classifier) and classifier are new, the MLM head dropped
    randomize_(bertkit.BERTForMaskedLM(config)).save_pretrained(tmp_path)
    clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, warn=False)
    assert sorted(clf.load_report.initialized) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                                   "classifier.bias", "classifier.weight"]
    assert all(k.startswith("cls.predictions.") for k in clf.load_report.dropped)


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls"])
def test_unpadded_execution_serves_distilbert(case_id, monkeypatch):
    """The fast path drops padding here too and equals the padded path at every real position."""
    plans = []
    real_plan = unpad.plan
    monkeypatch.setattr(unpad, "plan", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    case = CASES[case_id]
    model = randomize_(case.ours(DISTILBERT.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(DISTILBERT)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]  # right padding: the first token stays a real one
    results = []
    for on in (True, False):
        with fast.fast_path(on), torch.no_grad():
            out = model(ids, mask)
        results.append(out[mask.bool()] if out.dim() == 3 else out)
    assert plans[0] is not None and plans[0].real == int(mask.sum()) and plans[1] is None
    torch.testing.assert_close(results[0], results[1], **TOL)


def test_inputs_embeds_match_hf(tmp_path):
    case = CASES["model"]
    hf = randomize_(transformers.DistilBertModel(DISTILBERT.hf_config(case, "sdpa")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids(DISTILBERT)
    embeds = hf.embeddings.word_embeddings(ids).detach()
    with torch.no_grad():
        a = ours(inputs_embeds=embeds, attention_mask=mask)[0][mask.bool()]
        b = hf(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[mask.bool()]
    torch.testing.assert_close(a, b, **TOL)


# ---------------------------------------------------------------------------- configuration

def test_config_factory_and_hf_keys():
    config = bertkit.DistilBERTConfig()
    assert (config.family, config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.vocab_size) == ("distilbert", 6, 768, 12, 3072, 30522)
    assert (config.pooler_dropout, config.qa_dropout, config.sinusoidal_pos_embds) == (0.2, 0.1, False)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.mask_token_id) == (0, 101, 102, 103)
    assert bertkit.models.DistilBERTConfig is bertkit.DistilBERTConfig
    hf = config.to_hf_dict("BertForQuestionAnswering")
    assert hf["architectures"] == ["DistilBertForQuestionAnswering"] and hf["model_type"] == "distilbert"
    assert {k: hf[k] for k in ("dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout",
                               "attention_dropout", "seq_classif_dropout", "qa_dropout", "sinusoidal_pos_embds")} == \
        dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072, activation="gelu", dropout=0.1, attention_dropout=0.1,
             seq_classif_dropout=0.2, qa_dropout=0.1, sinusoidal_pos_embds=False)
    assert not {"hidden_size", "num_hidden_layers", "intermediate_size", "hidden_act", "layer_norm_eps"} & set(hf)
    assert BERTConfig.from_hf_dict(hf) == config
    assert BERTConfig.from_dict(config.to_dict()) == config
    # HF's own config class reads what we write
    hf_config = transformers.DistilBertConfig.from_dict(hf)
    assert (hf_config.dim, hf_config.n_layers, hf_config.seq_classif_dropout) == (768, 6, 0.2)


def test_a_released_config_reads():
    """distilbert-base-uncased's config.json as published (2019: tie_weights_, no tie_word_embeddings)."""
    released = {"activation": "gelu", "architectures": ["DistilBertForMaskedLM"], "attention_dropout": 0.1,
                "dim": 768, "dropout": 0.1, "hidden_dim": 3072, "initializer_range": 0.02,
                "max_position_embeddings": 512, "model_type": "distilbert", "n_heads": 12, "n_layers": 6,
                "pad_token_id": 0, "qa_dropout": 0.1, "seq_classif_dropout": 0.2, "sinusoidal_pos_embds": False,
                "tie_weights_": True, "transformers_version": "4.10.0.dev0", "vocab_size": 30522}
    assert BERTConfig.from_hf_dict(released) == bertkit.DistilBERTConfig()
    assert not BERTConfig.from_hf_dict({**released, "tie_weights_": False}).tie_word_embedding
    with pytest.raises(ValueError, match="tie_weights_=False and tie_word_embeddings=True both give"):
        BERTConfig.from_hf_dict({**released, "tie_weights_": False, "tie_word_embeddings": True})


@pytest.mark.parametrize(("changes", "message"), [
    (dict(layer_norm_eps=1e-5), "BERTConfig.layer_norm_eps=1e-05: HF's DistilBert models fix it at 1e-12"),
    (dict(is_decoder=True), "BERTConfig.is_decoder=True: HF's DistilBert models fix it at False"),
    (dict(embedding_size=20), "BERTConfig.embedding_size=20 has no equivalent in HF's DistilBert config"),
])
def test_what_hf_distilbert_cannot_hold_is_refused_on_saving(changes, message, tmp_path):
    config = bertkit.DistilBERTConfig(**DISTILBERT.ours, **changes)
    model = bertkit.BERT(config)  # builds and runs
    with pytest.raises(ValueError, match=re.escape(message)):
        model.save_pretrained(tmp_path)


def test_family_fields_stay_out_of_bert_configs():
    bert = BERTConfig()
    assert not {"embedding_size", "sinusoidal_pos_embds", "pooler_dropout", "qa_dropout"} & set(bert.to_dict())
    assert not {"embedding_size", "sinusoidal_pos_embds", "seq_classif_dropout"} & set(bert.to_hf_dict())
    with pytest.raises(ValueError, match=r"BERTConfig\.sinusoidal_pos_embds=True has no equivalent in HF's Bert"):
        BERTConfig(sinusoidal_pos_embds=True).to_hf_dict()
    with pytest.raises(ValueError, match=r"BERTConfig\.qa_dropout must lie in \[0, 1\)"):
        BERTConfig(qa_dropout=1.5)


def test_what_distilbert_does_not_have_is_refused():
    config = DISTILBERT.our_config(CASES["model"], "sdpa")
    for cls in (bertkit.BERTForPreTraining, bertkit.BERTForNextSentencePrediction):
        with pytest.raises(ValueError, match="family 'distilbert' does not have"):
            cls(config)
    with pytest.raises(ValueError, match="family 'distilbert' does not have"):
        bertkit.ELECTRAForPreTraining(config)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_parameter_counts(case):
    config = DISTILBERT.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, built.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(DISTILBERT.hf_config(case, "sdpa"))
    assert count_parameters(config, built.hf_architecture) == hf.num_parameters()


def test_converting_keeps_it_distilbert(tmp_path):
    from bertkit.weights.convert import convert

    case = CASES["seq_cls"]
    hf = randomize_(transformers.DistilBertForSequenceClassification(DISTILBERT.hf_config(case, "sdpa")),
                    std=0.1).eval()
    hf.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == \
        ["DistilBertForSequenceClassification"]
    back = hf_from_pretrained(transformers.DistilBertForSequenceClassification, tmp_path / "out", "sdpa")
    inputs = inputs_for(DISTILBERT)
    with torch.no_grad():
        torch.testing.assert_close(back(**inputs).logits, hf(**inputs).logits, **TOL)
