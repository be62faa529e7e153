"""``bertkit.compat.pytorch_pretrained_bert``'s models against the real pytorch-pretrained-bert 0.6.2.

Every model class is built in both libraries on the tiny odd config (vocab 99, hidden 36,
3 heads, inner 37, 2 layers, 40 positions, 3 token types), ppb's weights randomised and
copied into ours with ``load_state_dict(strict=True)``; outputs (every encoded layer,
attention probabilities), losses with ppb's label conventions and gradients must agree.
BertAdam is in ``test_ppb_compat_optimizer.py``; BertConfig, BertTokenizer, from_pretrained
and the TF converter in ``test_ppb_compat_loading.py``. Nothing is downloaded.
"""

from __future__ import annotations

import pytest
import pytorch_pretrained_bert as ppb
import torch
from torch import nn

import bertkit
import bertkit.compat.pytorch_pretrained_bert as P
from conftest import TINY
from ppb_compat_helpers import ATOL, CLASSES, IGNORE_PPB_ADD_WARNING, assert_all_close, batch_args, build_pair
from ppb_reference import HEADS, NUM_LABELS, PPB_CONFIG, build_ppb, make_batch, make_labels, write_archive

pytestmark = [IGNORE_PPB_ADD_WARNING, pytest.mark.usefixtures("engine_path")]  # fast and plain path


@pytest.mark.parametrize("head_name", CLASSES)
def test_state_dict_names_are_ppb_names(head_name):
    """Same keys in the same order; each library loads the other's state dict strictly."""
    ours, reference = build_pair(head_name)
    assert list(ours.state_dict()) == list(reference.state_dict())
    getattr(ppb, HEADS[head_name].ppb_class)(ppb.BertConfig(**PPB_CONFIG), *HEADS[head_name].ppb_args) \
        .load_state_dict(ours.state_dict(), strict=True)
    assert isinstance(ours, P.BertPreTrainedModel) and isinstance(ours.bert, P.BertModel)
    assert isinstance(ours.config, P.BertConfig)


@pytest.mark.parametrize("head_name", CLASSES)
def test_outputs_match_ppb(head_name):
    ours, reference = build_pair(head_name)
    batch = make_batch(HEADS[head_name].choices)
    with torch.no_grad():
        got, want = ours(*batch_args(batch)), reference(*batch_args(batch))
    assert type(got) is type(want)
    assert_all_close(got, want)


@pytest.mark.parametrize("all_layers", [True, False])
def test_bert_model_encoded_layers(all_layers):
    ours, reference = build_pair("model")
    batch = make_batch()
    with torch.no_grad():
        got = ours(*batch_args(batch), output_all_encoded_layers=all_layers)
        want = reference(*batch_args(batch), output_all_encoded_layers=all_layers)
    if all_layers:
        assert isinstance(got[0], list) and len(got[0]) == TINY["num_hidden_layers"]
        assert (got[0][0] - got[0][1]).abs().max() > 0.1  # the layers are distinct
    else:
        assert isinstance(got[0], torch.Tensor)
    assert_all_close(got, want)


def test_bert_model_output_attentions():
    """(all_attentions, encoded_layers, pooled); ppb's probabilities read where its dropout sees them."""
    _, reference = build_pair("model")
    ours = P.BertModel(P.BertConfig(**PPB_CONFIG), output_attentions=True).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    captured = []
    hooks = [layer.attention.self.dropout.register_forward_hook(lambda m, i, o: captured.append(o))
             for layer in reference.encoder.layer]
    batch = make_batch()
    with torch.no_grad():
        attentions, layers, pooled = ours(*batch_args(batch))
        want_layers, want_pooled = reference(*batch_args(batch))
    for h in hooks:
        h.remove()
    assert len(attentions) == TINY["num_hidden_layers"]
    assert attentions[0].shape == (3, TINY["num_attention_heads"], 11, 11)
    assert_all_close((attentions, layers, pooled), (captured, want_layers, want_pooled))
    with torch.no_grad():
        last = ours(*batch_args(batch), output_all_encoded_layers=False)
    assert len(last) == 3 and isinstance(last[1], torch.Tensor)


def test_task_model_bert_takes_ppb_argument_order():
    """``model.bert`` is a BertModel: (input_ids, token_type_ids, attention_mask) positionally."""
    ours, reference = build_pair("sequence_classification")
    batch = make_batch()
    with torch.no_grad():
        assert_all_close(ours.bert(*batch_args(batch), output_all_encoded_layers=False),
                         reference.bert(*batch_args(batch), output_all_encoded_layers=False))


@pytest.mark.parametrize("head_name", [n for n in CLASSES if HEADS[n].labels])
def test_losses_match_ppb(head_name):
    """ppb's labels as they are (-1 ignored for MLM/NSP, -100 for classifiers, QA out of range)."""
    ours, reference = build_pair(head_name)
    batch = make_batch(HEADS[head_name].choices)
    labels = make_labels(HEADS[head_name], batch)
    before = {k: v.clone() for k, v in labels.items()}
    with torch.no_grad():
        want = reference(*batch_args(batch), **{k: v.clone() for k, v in labels.items()})
        got = ours(*batch_args(batch), **labels)
    assert got.dim() == 0 and torch.isfinite(want) and want > 0
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    for k in labels:  # ppb's QA head clamps the caller's tensors in place; ours leaves them alone
        assert torch.equal(labels[k], before[k])


@pytest.mark.parametrize("head_name", [n for n in CLASSES if HEADS[n].labels])
def test_gradients_match_ppb(head_name):
    ours, reference = build_pair(head_name)
    batch = make_batch(HEADS[head_name].choices)
    labels = make_labels(HEADS[head_name], batch)
    ours(*batch_args(batch), **labels).backward()
    reference(*batch_args(batch), **{k: v.clone() for k, v in labels.items()}).backward()
    got, want = dict(ours.named_parameters()), dict(reference.named_parameters())
    assert set(got) == set(want)
    for name in want:
        g, w = got[name].grad, want[name].grad
        assert (g is None) == (w is None), name
        if w is not None:
            torch.testing.assert_close(g, w, atol=ATOL, rtol=1e-4, msg=name)


def test_pretraining_returns_scores_unless_both_labels_given():
    ours, reference = build_pair("pretraining")
    batch = make_batch()
    labels = make_labels(HEADS["pretraining"], batch)
    with torch.no_grad():
        for given in ("masked_lm_labels", "next_sentence_label"):
            got = ours(*batch_args(batch), **{given: labels[given]})
            want = reference(*batch_args(batch), **{given: labels[given]})
            assert isinstance(got, tuple) and len(got) == 2
            assert_all_close(got, want)


def test_token_classification_without_mask_counts_every_position():
    ours, reference = build_pair("token_classification")
    batch = make_batch()
    labels = torch.randint(0, NUM_LABELS, batch.input_ids.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = ours(batch.input_ids, batch.token_type_ids, labels=labels)
        want = reference(batch.input_ids, batch.token_type_ids, labels=labels)
        masked = ours(*batch_args(batch), labels=labels)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert (got - masked).abs() > 1e-4


def test_multiple_choice_without_optional_inputs():
    ours, reference = build_pair("multiple_choice")
    batch = make_batch(HEADS["multiple_choice"].choices)
    with torch.no_grad():
        assert_all_close(ours(batch.input_ids), reference(batch.input_ids))


def _ignored_like(labels: torch.Tensor, value: int) -> torch.Tensor:
    return torch.full_like(labels, value)


#: head -> cases of labels where a mean has no counted label: {label argument: how to replace ppb's label}
NOTHING_COUNTED = {
    "pretraining": [{"masked_lm_labels": -1, "next_sentence_label": -1}, {"masked_lm_labels": -1},
                    {"next_sentence_label": -1}],
    "masked_lm": [{"masked_lm_labels": -1}],
    "next_sentence": [{"next_sentence_label": -1}],
    "sequence_classification": [{"labels": -100}],
    "multiple_choice": [{"labels": -100}],
    "token_classification": [{"labels": -100}],
    "question_answering": [{"start_positions": 100, "end_positions": 100}, {"start_positions": 100}],
}


@pytest.mark.parametrize("head_name,case", [(h, i) for h, cases in NOTHING_COUNTED.items() for i in range(len(cases))])
def test_losses_over_no_counted_label_are_nan_as_in_ppb(head_name, case):
    """0.6.2's CrossEntropyLoss means over no counted label: NaN, with zero gradients from that part."""
    ours, reference = build_pair(head_name)
    batch = make_batch(HEADS[head_name].choices)
    labels = make_labels(HEADS[head_name], batch)
    labels.update({k: _ignored_like(labels[k], v) for k, v in NOTHING_COUNTED[head_name][case].items()})
    want = reference(*batch_args(batch), **{k: v.clone() for k, v in labels.items()})
    got = ours(*batch_args(batch), **labels)
    assert torch.isnan(want) and torch.isnan(got) and got.dim() == 0
    want.backward()
    got.backward()
    theirs = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=ATOL, rtol=1e-4, msg=name)


def test_token_classification_with_every_position_masked_is_nan_as_in_ppb():
    ours, reference = build_pair("token_classification")
    batch = make_batch()
    labels = torch.randint(0, NUM_LABELS, batch.input_ids.shape, generator=torch.Generator().manual_seed(4))
    mask = torch.zeros_like(batch.attention_mask)
    with torch.no_grad():
        want = reference(batch.input_ids, batch.token_type_ids, mask, labels=labels)
        got = ours(batch.input_ids, batch.token_type_ids, mask, labels=labels)
    assert torch.isnan(want) and torch.isnan(got)


def test_label_errors_are_clear():
    ours, _ = build_pair("masked_lm")
    batch = make_batch()
    with pytest.raises(ValueError, match=r"masked_lm_labels|mlm_labels"):
        ours(*batch_args(batch), masked_lm_labels=torch.full_like(batch.input_ids, -100))


def test_config_type_is_checked():
    with pytest.raises(ValueError, match="should be an instance of class `BertConfig`"):
        P.BertModel({"vocab_size": 99})
    model = P.BertModel(bertkit.BERTConfig(**TINY))  # a bertkit config is converted
    assert isinstance(model.config, P.BertConfig) and model.config.vocab_size == 99


def test_custom_head_subclass_like_ppb(tmp_path):
    """The ppb recipe for a custom head: subclass BertPreTrainedModel, build BertModel, init_bert_weights."""

    class Regressor(P.BertPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.bert = P.BertModel(config)
            self.head = nn.Linear(config.hidden_size, 1)
            self.apply(self.init_bert_weights)

        def forward(self, input_ids, token_type_ids=None, attention_mask=None):
            _, pooled = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
            return self.head(pooled)

    reference = build_ppb(HEADS["pretraining"])
    model = Regressor.from_pretrained(write_archive(reference, tmp_path))
    assert model.load_report.initialized == ["head.weight", "head.bias"]
    assert all(k.startswith("cls.") for k in model.load_report.dropped)
    want = reference.bert.state_dict()
    for key, value in model.bert.state_dict().items():
        torch.testing.assert_close(value, want[key], atol=0, rtol=0)


def test_save_pretrained_loads_in_bertkit(tmp_path):
    ours, _ = build_pair("sequence_classification")
    ours.save_pretrained(tmp_path)
    engine = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path)
    assert engine.config.num_labels == NUM_LABELS and isinstance(ours.config, P.BertConfig)
    batch = make_batch()
    with torch.no_grad():
        torch.testing.assert_close(engine(batch.input_ids, batch.attention_mask, batch.token_type_ids),
                                   ours(*batch_args(batch)), atol=ATOL, rtol=ATOL)


def test_resize_token_embeddings_keeps_a_ppb_config():
    ours, _ = build_pair("masked_lm")
    ours.resize_token_embeddings(120)
    assert isinstance(ours.config, P.BertConfig) and ours.config.vocab_size == 120
    assert ours.bert.config is ours.config
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight
    assert "cls.predictions.decoder.bias" not in ours.state_dict()
    with torch.no_grad():
        assert ours(torch.tensor([[119, 5]])).shape == (1, 2, 120)
