"""ELECTRA as configuration of the one engine (``BERTConfig(family="electra")``, ``bertkit.ELECTRAConfig``).

Parity with HF transformers' ``Electra*`` classes (a test-only dependency; no network), in both directions
(:mod:`family_parity`), with embeddings narrower than the layers (``embedding_size`` 20, hidden 36): outputs, losses
and gradients at every real position of padded batches with token types, eager and SDPA, on the fast and the plain
engine path. The discriminator is :class:`bertkit.ELECTRAForPreTraining`; the generator is ``BERTForMaskedLM``.
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
from conftest import randomize_
from family_parity import (
    BATCH,
    CHOICES,
    IMPLEMENTATIONS,
    LENGTH,
    TOL,
    Case,
    FamilySetup,
    causal_labels,
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

E = 20
SIZES = dict(vocab_size=99, embedding_size=E, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
             intermediate_size=52, max_position_embeddings=40, type_vocab_size=2, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)
ELECTRA = FamilySetup("electra", transformers.ElectraConfig, ours=SIZES, hf=dict(**SIZES, pad_token_id=0),
                      type_vocab_size=2)


def replaced_labels(family, inputs) -> dict[str, torch.Tensor]:
    """0/1 per token (1 = replaced); HF's loss counts the real tokens, whatever their label."""
    g = torch.Generator().manual_seed(4)
    return dict(labels=(torch.rand(inputs["input_ids"].shape, generator=g) < 0.3).long())


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "ElectraModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("discriminator", bertkit.ELECTRAForPreTraining, "ElectraForPreTraining", token_level=(True,),
         labels=replaced_labels),
    Case("generator", bertkit.BERTForMaskedLM, "ElectraForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("causal_lm", bertkit.BERTForCausalLM, "ElectraForCausalLM", config=dict(is_decoder=True),
         hf_config=dict(is_decoder=True), token_level=(True,), labels=lambda f, x: dict(labels=causal_labels(f, x))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "ElectraForSequenceClassification",
         config=dict(num_labels=3), hf_config=dict(num_labels=3),
         labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "ElectraForSequenceClassification",
         config=dict(num_labels=1), hf_config=dict(num_labels=1),
         labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "ElectraForTokenClassification",
         config=dict(num_labels=5), hf_config=dict(num_labels=5), token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "ElectraForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "ElectraForMultipleChoice", choices=CHOICES,
         labels=lambda f, x: dict(labels=torch.tensor([1, 0, 1]))),
)}


@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_electra_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(ELECTRA, case, impl, tmp_path)
    assert ours.config.embedding_size == E and ours.bert.embeddings_project is not None


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_electra_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(ELECTRA, case, impl, tmp_path)


@pytest.mark.parametrize("case_id", ["model", "generator", "multiple_choice"])
def test_embeddings_as_wide_as_the_layers(case_id, tmp_path):
    """embedding_size == hidden_size: no projection on either side (HF writes the size, bertkit reads None)."""
    case = CASES[case_id]
    ours, hf = check_hf_checkpoint(ELECTRA, case, "sdpa", tmp_path / "hf", embedding_size=36)
    assert ours.config.embedding_size is None and ours.bert.embeddings_project is None
    assert not hasattr(hf.base_model, "embeddings_project")
    check_our_checkpoint(ELECTRA, case, "sdpa", tmp_path / "ours", embedding_size=None)


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_untied_generator_both_ways(source, tmp_path):
    """Untied, the generator_lm_head's bias is the head's one bias."""
    case = CASES["generator"]
    if source == "hf":
        ours, hf = check_hf_checkpoint(ELECTRA, case, "sdpa", tmp_path, tie_word_embeddings=False)
    else:
        ours, hf = check_our_checkpoint(ELECTRA, case, "sdpa", tmp_path, tie_word_embedding=False)
    assert not ours.config.tie_word_embedding
    assert hf.generator_lm_head.weight is not hf.electra.embeddings.word_embeddings.weight


def test_generator_head_is_berts_projecting_to_the_embedding_width():
    model = bertkit.BERTForMaskedLM(ELECTRA.our_config(CASES["generator"], "sdpa"))
    predictions = model.cls.predictions
    assert predictions.transform.dense.weight.shape == (E, 36) and predictions.decoder.weight.shape == (99, E)
    assert predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.bert.embeddings_project.weight.shape == (36, E)
    ids, mask = padded_ids(ELECTRA)
    labels = token_labels(dict(attention_mask=mask), 99)
    loss, metrics = model.training_step(dict(input_ids=ids, attention_mask=mask, mlm_labels=labels))
    loss.backward()
    assert metrics["mlm_tokens"] == int((labels != -100).sum())
    assert model.bert.embeddings_project.weight.grad.abs().sum() > 0


def test_discriminator_loss_counts_real_tokens():
    """HF's loss over the attention mask's tokens; -100 leaves a token out too; training_step is get_loss."""
    model = randomize_(bertkit.ELECTRAForPreTraining(ELECTRA.our_config(CASES["discriminator"], "sdpa")),
                       std=0.1).eval()
    inputs = inputs_for(ELECTRA)
    labels = replaced_labels(ELECTRA, inputs)["labels"]
    mask = inputs["attention_mask"].bool()
    logits = model(**inputs)
    assert logits.shape == (BATCH, LENGTH)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], labels[mask].float())
    torch.testing.assert_close(model.get_loss(labels, **inputs), expected, **TOL)
    per_token = model.get_loss(labels, **inputs, reduction=None)
    assert per_token.shape == (BATCH, LENGTH) and bool((per_token[~mask] == 0).all())
    ignored = labels.masked_fill(torch.arange(LENGTH) < 3, -100)
    keep = mask & (ignored != -100)
    torch.testing.assert_close(model.get_loss(ignored, **inputs), torch.nn.functional.binary_cross_entropy_with_logits(
        logits[keep], labels[keep].float()), **TOL)
    loss, metrics = model.training_step({**inputs, "labels": labels})
    torch.testing.assert_close(loss, expected, **TOL)
    expected_accuracy = ((logits > 0).long() == labels)[mask].float().mean()
    torch.testing.assert_close(metrics["accuracy"], expected_accuracy)
    assert torch.equal(model.predict(**inputs), (logits > 0).long())
    with pytest.raises(ValueError, match="labels holds 2, outside"):
        model.get_loss(labels + 1, **inputs)


def test_a_discriminator_checkpoint_fine_tunes(tmp_path):
    """google/electra-*-discriminator into a classifier: the discriminator head is dropped (a known head), the
    classifier new, without strict=False."""
    hf = randomize_(transformers.ElectraForPreTraining(ELECTRA.hf_config(CASES["discriminator"], "sdpa")), std=0.1)
    hf.save_pretrained(tmp_path)
    head = sorted(k for k in hf.state_dict() if k.startswith("discriminator_predictions."))
    assert len(head) == 4
    for cls, new in ((bertkit.BERTForSequenceClassification, "classifier."),
                     (bertkit.BERTForMultipleChoice, ("bert.pooler.", "classifier.")),
                     (bertkit.BERTForMaskedLM, "cls.predictions.")):
        report = cls.from_pretrained(tmp_path, warn=False).load_report
        assert sorted(report.dropped) == head
        assert report.initialized and all(k.startswith(new) for k in report.initialized), report.initialized


def test_training_dropouts_are_hfs(tmp_path):
    """Train mode, torch's dropout in HF's order: the classifier's dropouts (before dense and before out_proj)."""
    case = CASES["seq_cls"]
    hf = randomize_(transformers.ElectraForSequenceClassification(ELECTRA.hf_config(case, "eager",
                                                                                    classifier_dropout=0.3)), std=0.1)
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = inputs_for(ELECTRA)
    hf.train()
    ours.train()
    with fast.fast_path(False):
        torch.manual_seed(5)
        a = ours(**inputs)
        torch.manual_seed(5)
        b = hf(**inputs).logits
    torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs), atol=1e-3)


def test_inputs_embeds_are_embedding_size_wide(tmp_path):
    case = CASES["model"]
    hf = randomize_(transformers.ElectraModel(ELECTRA.hf_config(case, "sdpa")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    inputs = inputs_for(ELECTRA)
    embeds = hf.embeddings.word_embeddings(inputs["input_ids"]).detach()
    mask = inputs["attention_mask"]
    with torch.no_grad():
        a = ours(inputs_embeds=embeds, attention_mask=mask)[0][mask.bool()]
        b = hf(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[mask.bool()]
    torch.testing.assert_close(a, b, **TOL)
    with pytest.raises(ValueError, match=re.escape(f"inputs_embeds must be [batch, seq, {E}] (embedding_size)")):
        ours(inputs_embeds=torch.zeros(1, 4, 36))


def test_cached_decoding(tmp_path):
    model = randomize_(bertkit.BERTForCausalLM(ELECTRA.our_config(CASES["causal_lm"], "sdpa")), std=0.1).eval()
    ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(3))
    cache = bertkit.KVCache()
    with torch.no_grad():
        full = model(ids)
        first = model(ids[:, :6], past_key_values=cache, use_cache=True)
        rest = model(ids[:, 6:], past_key_values=cache, use_cache=True)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, **TOL)


# ---------------------------------------------------------------------------- configuration

def test_config_factory_and_hf_keys():
    config = bertkit.ELECTRAConfig()
    assert (config.family, config.embedding_size, config.hidden_size, config.num_hidden_layers,
            config.pooler_dropout) == ("electra", 768, 768, 12, 0.1)
    assert bertkit.models.ELECTRAConfig is bertkit.ELECTRAConfig
    small = bertkit.ELECTRAConfig(embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024)
    hf = small.to_hf_dict("BertForMultipleChoice")
    assert hf["architectures"] == ["ElectraForMultipleChoice"] and hf["model_type"] == "electra"
    assert {k: hf[k] for k in ("embedding_size", "hidden_size", "summary_type", "summary_use_proj",
                               "summary_activation", "summary_last_dropout")} == \
        dict(embedding_size=128, hidden_size=256, summary_type="first", summary_use_proj=True,
             summary_activation="gelu", summary_last_dropout=0.1)
    assert BERTConfig.from_hf_dict(hf) == small and BERTConfig.from_dict(small.to_dict()) == small
    assert bertkit.ELECTRAForPreTraining(small.replace(num_hidden_layers=1)).hf_architecture == \
        "ElectraForPreTraining"
    # a config without embedding_size writes its width (HF's default is 128)
    assert BERTConfig(family="electra", hidden_size=64, num_attention_heads=4).to_hf_dict()["embedding_size"] == 64


def test_a_released_config_reads():
    """google/electra-small-discriminator's config.json as published."""
    released = {"architectures": ["ElectraForPreTraining"], "attention_probs_dropout_prob": 0.1,
                "embedding_size": 128, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 256,
                "initializer_range": 0.02, "intermediate_size": 1024, "layer_norm_eps": 1e-12,
                "max_position_embeddings": 512, "model_type": "electra", "num_attention_heads": 4,
                "num_hidden_layers": 12, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30522}
    config = BERTConfig.from_hf_dict(released)
    assert (config.family, config.embedding_size, config.embedding_width, config.pooler_dropout) == \
        ("electra", 128, 128, 0.1)
    assert config.special_token_ids == (0, 100, 101, 102, 103)


@pytest.mark.parametrize(("key", "value"), [("summary_type", "mean"), ("summary_use_proj", False),
                                            ("summary_activation", "tanh")])
def test_sequence_summaries_bertkit_lacks_are_refused(key, value):
    hf = bertkit.ELECTRAConfig().to_hf_dict()
    with pytest.raises(ValueError, match=re.escape(f"{key}={value!r} is not supported; bertkit implements "
                                                   "electra's")):
        BERTConfig.from_hf_dict({**hf, key: value})


def test_what_electra_does_not_have_is_refused(tmp_path):
    config = ELECTRA.our_config(CASES["model"], "sdpa")
    for cls in (bertkit.BERTForPreTraining, bertkit.BERTForNextSentencePrediction):
        with pytest.raises(ValueError, match="family 'electra' does not have"):
            cls(config)
    with pytest.raises(ValueError, match="family 'bert' does not have"):
        bertkit.ELECTRAForPreTraining(BERTConfig())
    with pytest.raises(ValueError, match=r"BERTConfig\.qa_dropout=0\.1 has no equivalent in HF's Electra config"):
        bertkit.BERT(config.replace(qa_dropout=0.1)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"BERTConfig\.embedding_size must be a positive integer"):
        BERTConfig(family="electra", embedding_size=0)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_parameter_counts(case):
    config = ELECTRA.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, built.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(ELECTRA.hf_config(case, "sdpa"))
    assert count_parameters(config, built.hf_architecture) == hf.num_parameters()


@pytest.mark.parametrize("case_id", ["discriminator", "generator", "multiple_choice"])
def test_converting_keeps_it_electra(case_id, tmp_path):
    from bertkit.weights.convert import convert

    case = CASES[case_id]
    hf_class = getattr(transformers, case.hf_class)
    hf = randomize_(hf_class(ELECTRA.hf_config(case, "sdpa")), std=0.1).eval()
    hf.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [case.hf_class]
    back = hf_from_pretrained(hf_class, tmp_path / "out", "sdpa")
    inputs = inputs_for(ELECTRA, case.choices)
    with torch.no_grad():
        torch.testing.assert_close(back(**inputs).logits, hf(**inputs).logits, **TOL)
