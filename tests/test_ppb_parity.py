"""Numeric parity with pytorch-pretrained-bert 0.6.2 (a test-only reference; nothing downloaded).

Every ppb model class is built on the tiny config, randomised, archived as ppb writes it
(``config.json`` + ``pytorch_model.bin``, also with the legacy LayerNorm ``gamma``/``beta``
names) and loaded by the matching bertkit class with ``from_pretrained``; outputs (at the
non-padded positions of a batch with mixed token types) and losses must agree to 1e-5 for
eager and SDPA attention. Builders live in ``ppb_reference.py``.
"""

from __future__ import annotations

import pytest
import pytorch_pretrained_bert
import torch

from conftest import TINY
from ppb_reference import (
    ATTN_IMPLEMENTATIONS,
    HEADS,
    LOSS_HEADS,
    at_valid,
    build_ppb,
    load_ours,
    make_batch,
    make_labels,
    max_differences,
    our_loss,
    our_outputs,
    ppb_loss,
    ppb_outputs,
    to_our_labels,
    write_archive,
)

pytestmark = pytest.mark.usefixtures("engine_path")  # the parity suite on the fast and the plain path

ATOL = 1e-5


def _layer_norm_keys(state) -> list[str]:
    return [k for k in state if ".LayerNorm." in k]


@pytest.mark.parametrize("legacy_names", [False, True], ids=["weight_bias", "gamma_beta"])
@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
@pytest.mark.parametrize("head_name", list(HEADS))
def test_outputs_match_ppb(head_name, attn, legacy_names, tmp_path):
    head = HEADS[head_name]
    reference = build_ppb(head)
    ours = load_ours(head, write_archive(reference, tmp_path, legacy_names=legacy_names), attn)
    assert type(ours) is head.ours and ours.config.attn_implementation == attn

    # every tensor of the archive was loaded; only ppb's pooler may be dropped (our head has none)
    report = ours.load_report
    assert report.initialized == [] and report.resized == []
    assert all(".pooler." in k for k in report.dropped)
    assert bool(report.dropped) == (ours.bert.pooler is None)
    ln_keys = _layer_norm_keys(reference.state_dict())
    # embeddings, two per layer, and the MLM transform's: weight and bias each
    assert len(ln_keys) == 2 * (1 + 2 * TINY["num_hidden_layers"] + ("prediction_scores" in head.outputs))
    if legacy_names:
        assert sorted(report.renamed.values()) == sorted(ln_keys)
        assert all(k.endswith((".gamma", ".beta")) for k in report.renamed)
    else:
        assert report.renamed == {}

    batch = make_batch(head.choices)
    got, want = our_outputs(head, ours, batch), ppb_outputs(head, reference, batch)
    assert len(got) == len(want) == len(head.outputs)
    for name, g, w in zip(head.outputs, got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(at_valid(head, name, g, batch), at_valid(head, name, w, batch),
                                   atol=ATOL, rtol=ATOL, msg=lambda m, name=name: f"{head_name}.{name}: {m}")


def test_bert_model_layers_are_distinct():
    """The per-layer comparison is meaningful: each layer's output differs from the next."""
    head = HEADS["model"]
    layers = ppb_outputs(head, build_ppb(head), make_batch())[:-1]
    assert len(layers) == 2
    assert (layers[0] - layers[1]).abs().max() > 0.1


@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
@pytest.mark.parametrize("head_name", LOSS_HEADS)
def test_losses_match_ppb(head_name, attn, tmp_path):
    head = HEADS[head_name]
    reference = build_ppb(head)
    ours = load_ours(head, write_archive(reference, tmp_path), attn)
    batch = make_batch(head.choices)
    labels = make_labels(head, batch)
    want = ppb_loss(head, reference, batch, labels)
    got = our_loss(head, ours, batch, to_our_labels(head, labels, batch))
    assert want.dim() == 0 and torch.isfinite(want) and want > 0
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_labels_exercise_every_convention():
    """The fixtures hold what each conversion is about, so a wrong conversion changes a loss."""
    batch = make_batch()
    mlm = make_labels(HEADS["masked_lm"], batch)["masked_lm_labels"]
    assert (mlm == -1).any() and (mlm >= 0).sum() >= 3 and not (mlm[~batch.valid] >= 0).any()
    assert (make_labels(HEADS["next_sentence"], batch)["next_sentence_label"] == -1).any()
    tokens = make_labels(HEADS["token_classification"], batch)["labels"]
    assert (tokens[~batch.valid] >= 0).any() and (tokens[batch.valid] == -100).any()
    qa = make_labels(HEADS["question_answering"], batch)
    length = batch.input_ids.shape[1]
    assert (qa["start_positions"] > length).any() and (qa["start_positions"] < 0).any()
    assert (qa["end_positions"] > length).any()


def test_token_classification_padding_is_ignored_like_ppb(tmp_path):
    """ppb 0.6.2 drops padded positions by the attention mask; without the conversion the loss differs."""
    head = HEADS["token_classification"]
    reference = build_ppb(head)
    ours = load_ours(head, write_archive(reference, tmp_path), "eager")
    batch = make_batch()
    labels = make_labels(head, batch)
    want = ppb_loss(head, reference, batch, labels)
    unconverted = our_loss(head, ours, batch, (labels["labels"],))
    assert (unconverted - want).abs() > 1e-3
    torch.testing.assert_close(our_loss(head, ours, batch, to_our_labels(head, labels, batch)), want,
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("head_name", ["pretraining", "masked_lm"])
def test_mlm_loss_with_ppb_ignore_index(head_name, tmp_path):
    """``ignore_index=-1`` takes ppb's labels as they are (MLM and NSP alike); the default -100 refuses them."""
    head = HEADS[head_name]
    reference = build_ppb(head)
    ours = load_ours(head, write_archive(reference, tmp_path), "sdpa")
    batch = make_batch()
    labels = make_labels(head, batch)
    want = ppb_loss(head, reference, batch, labels)
    raw = tuple(labels.values())
    torch.testing.assert_close(our_loss(head, ours, batch, raw, ignore_index=-1), want, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="labels holds -1"):
        our_loss(head, ours, batch, raw)


def test_question_answering_all_ignored(tmp_path):
    """Positions all past the sequence: ppb's mean over no term is NaN, bertkit's is 0."""
    head = HEADS["question_answering"]
    reference = build_ppb(head)
    ours = load_ours(head, write_archive(reference, tmp_path), "eager")
    batch = make_batch()
    far = torch.full((3,), 100)
    assert torch.isnan(ppb_loss(head, reference, batch, {"start_positions": far, "end_positions": far}))
    assert our_loss(head, ours, batch, (far, far)).item() == 0.0


@pytest.mark.parametrize("head_name", list(HEADS))
def test_legacy_archive_is_what_ppb_reads(head_name, tmp_path):
    """The gamma/beta fixture is faithful: ppb's own from_pretrained maps it back to the same weights."""
    head = HEADS[head_name]
    reference = build_ppb(head)
    write_archive(reference, tmp_path, legacy_names=True)
    archived = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    assert not [k for k in archived if k.endswith(("LayerNorm.weight", "LayerNorm.bias"))]
    assert sum(k.endswith(("LayerNorm.gamma", "LayerNorm.beta")) for k in archived) \
        == len(_layer_norm_keys(reference.state_dict()))

    reloaded = getattr(pytorch_pretrained_bert, head.ppb_class).from_pretrained(str(tmp_path), *head.ppb_args)
    want = reference.state_dict()
    got = reloaded.state_dict()
    assert list(got) == list(want)
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=0, rtol=0, msg=key)


@pytest.mark.parametrize("head_name", ["pretraining", "token_classification"])
def test_max_differences_helper(head_name, tmp_path):
    """The report script's helper runs the same comparison as the tests above."""
    diffs = max_differences(HEADS[head_name], tmp_path, "sdpa", legacy_names=True)
    assert set(diffs.outputs) == set(HEADS[head_name].outputs)
    assert all(0 <= d < ATOL for d in diffs.outputs.values())
    assert diffs.loss is not None and diffs.loss < ATOL
