"""``bertkit.compat.pytorch_pretrained_bert`` against the real pytorch-pretrained-bert 0.6.2.

Every model class is built in both libraries on the tiny odd config (vocab 99, hidden 36,
3 heads, inner 37, 2 layers, 40 positions, 3 token types), ppb's weights randomised and
copied into ours with ``load_state_dict(strict=True)``; outputs (every encoded layer,
attention probabilities), losses with ppb's label conventions and gradients must agree.
Then BertConfig round trips, BertTokenizer on Austen, BertAdam trajectories, from_pretrained
on directories and archives both libraries read, and the TF converter (on the fixture
checkpoints, when present). Nothing is downloaded.
"""

from __future__ import annotations

import io
import json
import logging
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import pytorch_pretrained_bert as ppb
import torch
from torch import nn

import bertkit
import bertkit.compat.pytorch_pretrained_bert as P
from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from conftest import TINY
from ppb_reference import HEADS, NUM_LABELS, PPB_CONFIG, build_ppb, make_batch, make_labels, write_archive

ATOL = 1e-5
CLASSES = list(HEADS)
FIXTURES_TF = Path(__file__).parent / "fixtures" / "tf"

pytestmark = pytest.mark.filterwarnings("ignore:This overload of add_ is deprecated:UserWarning")


def build_pair(head_name: str, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(ours, ppb's): the ppb model randomised, its state dict loaded strictly into ours; both in eval mode."""
    head = HEADS[head_name]
    reference = build_ppb(head, seed)
    ours = getattr(P, head.ppb_class)(P.BertConfig(**PPB_CONFIG), *head.ppb_args)
    ours.load_state_dict(reference.state_dict(), strict=True)
    return ours.eval(), reference


def tensors(out) -> list[torch.Tensor]:
    """The tensors of a (nested) output in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in tensors(item)]


def batch_args(batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return batch.input_ids, batch.token_type_ids, batch.attention_mask  # ppb's positional order


def assert_all_close(got, want, atol=ATOL):
    got, want = tensors(got), tensors(want)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, i
        torch.testing.assert_close(g, w, atol=atol, rtol=atol, msg=lambda m, i=i: f"output {i}: {m}")


# ---------------------------------------------------------------------------- models

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


def test_question_answering_all_ignored_is_zero_not_nan():
    """A documented difference: ppb's mean over no counted position is NaN, ours 0."""
    ours, reference = build_pair("question_answering")
    batch = make_batch()
    far = torch.full((3,), 100)
    with torch.no_grad():
        assert torch.isnan(reference(*batch_args(batch), far.clone(), far.clone()))
        assert ours(*batch_args(batch), far, far).item() == 0.0


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


# ---------------------------------------------------------------------------- BertConfig

def test_config_json_round_trips_match_ppb(tmp_path):
    ours, reference = P.BertConfig(**PPB_CONFIG), ppb.BertConfig(**PPB_CONFIG)
    assert ours.to_dict() == reference.to_dict()
    assert list(ours.to_dict()) == list(reference.to_dict())
    assert ours.to_json_string() == reference.to_json_string() == repr(ours)
    ours.to_json_file(tmp_path / "ours.json")
    reference.to_json_file(tmp_path / "ppb.json")
    assert (tmp_path / "ours.json").read_text() == (tmp_path / "ppb.json").read_text()
    for path in (tmp_path / "ours.json", str(tmp_path / "ppb.json")):
        for loaded in (P.BertConfig(path), P.BertConfig.from_json_file(path)):
            assert loaded.to_dict() == reference.to_dict()
        assert ppb.BertConfig(str(path)).to_dict() == ours.to_dict()


def test_config_from_dict_and_extra_keys():
    d = {"vocab_size": 30522, "hidden_size": 24, "directionality": "bidi", "pooler_type": "first_token_transform"}
    ours, reference = P.BertConfig.from_dict(d), ppb.BertConfig.from_dict(d)
    assert ours.to_dict() == reference.to_dict()
    assert ours.num_hidden_layers == 12 and ours.directionality == "bidi"
    assert ours.to_bertkit().hidden_size == 24


def test_config_vocab_size_alias():
    assert P.BertConfig(vocab_size=99, hidden_size=36).to_dict() == P.BertConfig(99, hidden_size=36).to_dict()
    with pytest.raises(ValueError, match="once"):
        P.BertConfig(99, vocab_size=99)
    with pytest.raises(ValueError, match="First argument must be either a vocabulary size"):
        P.BertConfig(3.5)


def test_config_engine_fields_read_through():
    """Fields only bertkit has are answered from the derived BERTConfig and never enter to_dict."""
    config = P.BertConfig(**PPB_CONFIG)
    assert config.layer_norm_eps == 1e-12 and config.tie_word_embedding is True and config.is_decoder is False
    assert "layer_norm_eps" not in config.to_dict()
    config.hidden_act = "relu"
    assert config.to_bertkit().hidden_act == "relu" and config.activation_name() == "relu"
    with pytest.raises(AttributeError):
        _ = config.no_such_field
    engine = bertkit.BERTConfig(**TINY, layer_norm_eps=1e-5)
    back = P.BertConfig.from_bertkit(engine)
    assert back.layer_norm_eps == 1e-5 and back.to_bertkit().layer_norm_eps == 1e-5
    without_eps = {k: v for k, v in back.to_dict().items() if k != "layer_norm_eps"}
    assert without_eps == config.to_dict() | {"hidden_act": "gelu"}


# ---------------------------------------------------------------------------- tokenizer

def austen_paragraphs(n: int = 300) -> list[str]:
    """``n`` paragraphs spread over the six novels (long and short, dialogue and narrative)."""
    paragraphs = [p for text in austen_novels().values() for p in re.split(r"\n\s*\n", text) if p.strip()]
    step = max(1, len(paragraphs) // n)
    return paragraphs[::step][:n]


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    return austen_paragraphs()


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tokenizer_matches_ppb_on_austen(paragraphs, do_lower_case):
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, do_lower_case=do_lower_case)
    reference = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), do_lower_case=do_lower_case)
    assert len(paragraphs) == 300
    for text in paragraphs:
        tokens = ours.tokenize(text)
        assert tokens == reference.tokenize(text), text[:80]
        ids = ours.convert_tokens_to_ids(tokens)
        assert ids == reference.convert_tokens_to_ids(tokens)
        assert ours.convert_ids_to_tokens(ids) == tokens
    basic, ref_basic = P.BasicTokenizer(do_lower_case), ppb.BasicTokenizer(do_lower_case)
    for text in paragraphs[:100]:
        assert basic.tokenize(text) == ref_basic.tokenize(text)


EDGE_TEXTS = [
    "[CLS] Who was Jim Henson ? [SEP] Jim Henson was a puppeteer [SEP]",
    "x[SEP]y [MASK]. [mask] [Mask]",
    "[MA\x00SK] ne\u0301e \u00c9LAN caf\u00e9 \u4e2d\u6587[UNK]\u6587 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3",
    "tab\tnew\nline\u3000ideographic\u2028sep \ufffd\x07bell " + "a" * 101 + " supercalifragilistic",
    "",
    "   ",
    "lone \ud800surrogate, [CLS] x\udfff. \ue000private",
    "lone \ud800surrogate without specials",
]


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("never_split", [None, (), ("[unused1]", "[MASK]", "hello")])
def test_tokenizer_never_split_and_edge_cases(do_lower_case, never_split):
    kwargs = {"do_lower_case": do_lower_case} | ({} if never_split is None else {"never_split": never_split})
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, **kwargs)
    reference = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), **kwargs)
    texts = [*EDGE_TEXTS, "[UNUSED1] [unused1] HELLO hello [CLS]"]
    for text in texts:
        assert ours.tokenize(text) == reference.tokenize(text), repr(text)
        assert ours.basic_tokenizer.tokenize(text) == reference.basic_tokenizer.tokenize(text), repr(text)


#: pieces whose mixtures hit every rule: specials inside and outside words, casing, accents, final sigma,
#: CJK, Unicode whitespace, controls and the categories only 0.6.2 removes (Cs surrogates, Co, Cn)
PIECES = [
    "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[unused1]", "hello", "HELLO", "\u00c9mile", "\u03a3\u0391\u03a3",
    "\u03c2", "\u4e2d\u6587", "x", ",", ".", "[", "]", " ", "  ", "\t", "\n", "\x00", "\u200b", "\ufffd", "\ue000",
    "\ud800", "\U000e0001", "\u0378", "\u3000", "\u2028", "\x85", "a\u0301", "\u0130", "\u00df", "\u01c5",
    "don't", "#", "##", "\u00e9", "\u0300",
]


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("never_split", [None, (), ("[unused1]", "hello", "[MASK]", "\u00e9mile")])
def test_tokenizer_matches_ppb_on_random_mixtures(do_lower_case, never_split):
    kwargs = {"do_lower_case": do_lower_case} | ({} if never_split is None else {"never_split": never_split})
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, **kwargs)
    reference = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), **kwargs)
    wordpiece_only = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, do_basic_tokenize=False)
    ref_wordpiece_only = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), do_basic_tokenize=False)
    rng = random.Random(f"{do_lower_case}{never_split}")
    for _ in range(400):
        text = "".join(rng.choice(PIECES) + (" " if rng.random() < 0.3 else "") for _ in range(rng.randint(0, 12)))
        assert ours.tokenize(text) == reference.tokenize(text), repr(text)
        assert ours.basic_tokenizer.tokenize(text) == reference.basic_tokenizer.tokenize(text), repr(text)
        assert wordpiece_only.tokenize(text) == ref_wordpiece_only.tokenize(text), repr(text)


def test_tokenizer_without_basic_tokenization(paragraphs):
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, do_basic_tokenize=False)
    reference = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), do_basic_tokenize=False)
    for text in [*EDGE_TEXTS, *paragraphs[:50]]:
        assert ours.tokenize(text) == reference.tokenize(text)
    vocab = ours.vocab
    assert P.WordpieceTokenizer(vocab).tokenize("unaffable [CLS] " + "x" * 150) == \
        ppb.WordpieceTokenizer(vocab).tokenize("unaffable [CLS] " + "x" * 150)


def test_tokenizer_max_len_warns_like_ppb(caplog):
    """0.6.2 warns (it does not raise) when a sequence exceeds max_len; ids are still returned."""
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB, max_len=4)
    reference = ppb.BertTokenizer(str(BERT_BASE_UNCASED_VOCAB), max_len=4)
    tokens = ours.tokenize("it is a truth universally acknowledged")
    with caplog.at_level(logging.WARNING):
        assert ours.convert_tokens_to_ids(tokens) == reference.convert_tokens_to_ids(tokens)
    messages = [(r.name.split(".")[0], r.getMessage()) for r in caplog.records]
    ours_messages = [m for lib, m in messages if lib == "bertkit"]
    assert ours_messages == [m for lib, m in messages if lib == "pytorch_pretrained_bert"]
    assert len(messages) == 2 and "(6 > 4)" in messages[0][1]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ours.convert_tokens_to_ids(tokens[:4])
    assert not caplog.records
    with pytest.raises(KeyError):
        ours.convert_tokens_to_ids(["not-a-token"])


def test_tokenizer_files_and_from_pretrained(tmp_path):
    ours = P.BertTokenizer(BERT_BASE_UNCASED_VOCAB)
    saved = ours.save_vocabulary(tmp_path)
    assert saved == str(tmp_path / "vocab.txt")
    assert Path(saved).read_bytes() == BERT_BASE_UNCASED_VOCAB.read_bytes()
    assert ours.save_vocabulary(tmp_path / "other.txt") == str(tmp_path / "other.txt")
    for source in (tmp_path, tmp_path / "vocab.txt"):
        loaded = P.BertTokenizer.from_pretrained(source, do_lower_case=False)
        reference = ppb.BertTokenizer.from_pretrained(str(source), do_lower_case=False)
        assert loaded.vocab == reference.vocab and loaded.max_len == reference.max_len == int(1e12)
        assert loaded.tokenize("Emma woodhouse") == reference.tokenize("Emma woodhouse") == ["[UNK]", "wood", "##house"]
    with pytest.raises(ValueError, match="Can't find a vocabulary file"):
        P.BertTokenizer(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError):
        P.BertTokenizer.from_pretrained(tmp_path / "missing")


def test_tokenizer_shortcut_name_uses_the_bundled_vocab(caplog):
    with caplog.at_level(logging.WARNING):
        tokenizer = P.BertTokenizer.from_pretrained("bert-base-uncased", do_lower_case=False)
    assert "uncased model" in caplog.text  # 0.6.2's rule: uncased names force do_lower_case=True
    assert tokenizer.max_len == 512 and tokenizer.basic_tokenizer.do_lower_case
    assert tokenizer.tokenize("Hello, World!") == ["hello", ",", "world", "!"]


def test_tokenizer_vocab_with_gaps_uses_the_composed_path(tmp_path):
    """A vocab.txt with a repeated line (0.6.2 keeps the last index) still tokenizes like 0.6.2."""
    lines = [*BERT_BASE_UNCASED_VOCAB.read_text(encoding="utf-8").splitlines()[:2000], "the"]
    (tmp_path / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ours = P.BertTokenizer(tmp_path / "vocab.txt")
    reference = ppb.BertTokenizer(str(tmp_path / "vocab.txt"))
    assert ours._fast is None and ours.vocab == reference.vocab
    text = "The quick brown fox, of the Bennet family."
    assert ours.tokenize(text) == reference.tokenize(text)
    assert ours.convert_tokens_to_ids(ours.tokenize(text)) == reference.convert_tokens_to_ids(reference.tokenize(text))


# ---------------------------------------------------------------------------- BertAdam

SHAPES = [(36, 37), (37,), (99, 36), (5,), (3, 4, 5)]


def _param_lists(seed: int = 0) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    g = torch.Generator().manual_seed(seed)
    values = [torch.randn(s, generator=g) for s in SHAPES]
    return [nn.Parameter(v.clone()) for v in values], [nn.Parameter(v.clone()) for v in values]


def _set_grads(step: int, ours, reference) -> None:
    """Gradients of varied size (some clipped at max_grad_norm=1, some not); parameter 3 has none at step 2."""
    g = torch.Generator().manual_seed(100 + step)
    for i, (a, b) in enumerate(zip(ours, reference)):
        grad = torch.randn(a.shape, generator=g) * (0.01 if i % 2 else 0.5 * (step + 1))
        if i == 3 and step == 2:
            a.grad = b.grad = None
        else:
            a.grad, b.grad = grad.to(a.device, copy=True), grad.to(b.device, copy=True)


def _groups(params, weight_decay):
    return [{"params": params[:3]}, {"params": params[3:], "weight_decay": 0.0, "lr": 0.05}] if weight_decay \
        else params


@pytest.mark.parametrize("weight_decay,max_grad_norm", [(0.01, 1.0), (0.0, -1)], ids=["decay_clip", "plain"])
@pytest.mark.parametrize("schedule,warmup,t_total", [
    ("warmup_linear", 0.2, 8), ("warmup_cosine", 0.3, 8), ("warmup_constant", 0.25, 8), ("warmup_linear", -1, -1),
    ("none", -1, 8), (None, 0.1, 8),
])
def test_bert_adam_trajectory_matches_ppb(schedule, warmup, t_total, weight_decay, max_grad_norm, caplog):
    ours_params, ppb_params = _param_lists()
    args = dict(lr=0.01, warmup=warmup, t_total=t_total, schedule=schedule, weight_decay=weight_decay,
                max_grad_norm=max_grad_norm)
    with caplog.at_level(logging.WARNING):
        ours = P.BertAdam(_groups(ours_params, weight_decay), **args)
        reference = ppb.BertAdam(_groups(ppb_params, weight_decay), **args)
        assert ours.get_lr() == reference.get_lr() == [0]
        initial = [p.detach().clone() for p in ours_params]
        for step in range(10):
            _set_grads(step, ours_params, ppb_params)
            ours.step()
            reference.step()
            for a, b in zip(ours_params, ppb_params):
                torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
                if b.grad is not None:  # clipping happened in place, as clip_grad_norm_ does it
                    torch.testing.assert_close(a.grad, b.grad, atol=0, rtol=0)
            assert ours.get_lr() == reference.get_lr()
            if step == 0 and warmup > 0 and t_total > 0 and schedule not in (None, "none"):  # lr 0 at step 0
                assert all(torch.equal(a, b) for a, b in zip(ours_params, initial))
    for a, b in zip(ours_params, ppb_params):
        state, ref_state = ours.state[a], reference.state[b]
        assert state.keys() == ref_state.keys() == {"step", "next_m", "next_v"}
        assert state["step"] == ref_state["step"] == (9 if a is ours_params[3] else 10)
    assert all(not torch.equal(a, b) for a, b in zip(ours_params, initial))
    # the same warnings, in the same order (t_total < 0 at construction; training beyond t_total)
    messages = [(r.name.split(".")[0], r.getMessage()) for r in caplog.records]
    ours_messages = [m for lib, m in messages if lib == "bertkit"]
    assert ours_messages == [m for lib, m in messages if lib == "pytorch_pretrained_bert"]
    assert bool(ours_messages) == (t_total < 0 or schedule in ("warmup_linear", "warmup_cosine"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bert_adam_trajectory_matches_ppb_on_cuda():
    """The fused foreach kernels on the GPU against ppb's per-parameter ops there."""
    ours_params, ppb_params = _param_lists()
    ours_params = [nn.Parameter(p.detach().cuda()) for p in ours_params]
    ppb_params = [nn.Parameter(p.detach().cuda()) for p in ppb_params]
    args = dict(lr=0.01, warmup=0.2, t_total=8, weight_decay=0.01, max_grad_norm=1.0)
    ours, reference = P.BertAdam(_groups(ours_params, 0.01), **args), ppb.BertAdam(_groups(ppb_params, 0.01), **args)
    for step in range(10):
        _set_grads(step, ours_params, ppb_params)
        ours.step()
        reference.step()
        for a, b in zip(ours_params, ppb_params):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_bert_adam_schedule_object_and_validation(caplog):
    from pytorch_pretrained_bert.optimization import WarmupLinearSchedule as PpbWarmupLinear

    from bertkit.compat.pytorch_pretrained_bert.optimization import WarmupLinearSchedule

    with caplog.at_level(logging.WARNING):
        P.BertAdam([nn.Parameter(torch.ones(2))], lr=0.1, warmup=0.1, schedule=WarmupLinearSchedule(0.1, 10))
        ppb.BertAdam([nn.Parameter(torch.ones(2))], lr=0.1, warmup=0.1, schedule=PpbWarmupLinear(0.1, 10))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and messages[0] == messages[1] and "ineffective" in messages[0]
    for bad in (dict(lr=-1), dict(lr=0.1, schedule="cyclic"), dict(lr=0.1, b1=1.0), dict(lr=0.1, b2=-0.1),
                dict(lr=0.1, e=-1), dict(lr=0.1, warmup=1.5, t_total=10)):
        with pytest.raises(ValueError) as ours_error:
            P.BertAdam([nn.Parameter(torch.ones(2))], **bad)
        with pytest.raises(ValueError) as ppb_error:
            ppb.BertAdam([nn.Parameter(torch.ones(2))], **bad)
        assert str(ours_error.value) == str(ppb_error.value)
    schedule, reference = WarmupLinearSchedule(0.2, 10), PpbWarmupLinear(0.2, 10)
    assert [schedule.get_lr(s) for s in range(13)] == [reference.get_lr(s) for s in range(13)]


def test_bert_adam_fine_tuning_matches_ppb():
    """Ten real fine-tuning steps of the tiny classifier: losses and weights stay together."""
    ours, reference = build_pair("sequence_classification")
    ours.train(), reference.train()  # dropout is 0 in the tiny config
    batch = make_batch()
    labels = torch.tensor([3, 0, 1])

    def groups(model):
        no_decay = ("bias", "LayerNorm.weight")
        named = list(model.named_parameters())
        return [{"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": 0.01},
                {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0}]

    opt = P.BertAdam(groups(ours), lr=1e-3, warmup=0.1, t_total=10)
    ref_opt = ppb.BertAdam(groups(reference), lr=1e-3, warmup=0.1, t_total=10)
    for _ in range(10):
        for model, optimizer in ((ours, opt), (reference, ref_opt)):
            optimizer.zero_grad()
            loss = model(*batch_args(batch), labels=labels)
            loss.backward()
            optimizer.step()
            model.last_loss = loss.item()
        assert ours.last_loss == pytest.approx(reference.last_loss, abs=1e-4)
    want = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p, want[name], atol=1e-4, rtol=0, msg=name)


# ---------------------------------------------------------------------------- from_pretrained

@pytest.mark.parametrize("legacy_names", [False, True], ids=["weight_bias", "gamma_beta"])
@pytest.mark.parametrize("head_name", CLASSES)
def test_from_pretrained_directory_like_ppb(head_name, legacy_names, tmp_path):
    head = HEADS[head_name]
    directory = write_archive(build_ppb(head, seed=4), tmp_path, legacy_names=legacy_names)
    want = getattr(ppb, head.ppb_class).from_pretrained(str(directory), *head.ppb_args)
    got = getattr(P, head.ppb_class).from_pretrained(directory, *head.ppb_args)
    assert got.training and want.training  # 0.6.2 returns the model in training mode
    assert got.config.to_dict() == want.config.to_dict()
    reference_state = want.state_dict()
    for key, value in got.state_dict().items():
        torch.testing.assert_close(value, reference_state[key], atol=0, rtol=0, msg=key)
    batch = make_batch(head.choices)
    with torch.no_grad():
        assert_all_close(got.eval()(*batch_args(batch)), want.eval()(*batch_args(batch)))


def test_from_pretrained_bert_config_json_and_archive(tmp_path):
    """ppb's older layout (bert_config.json) and a .tar.gz of it, read by both libraries."""
    head = HEADS["pretraining"]
    directory = write_archive(build_ppb(head, seed=5), tmp_path / "ckpt", legacy_names=True)
    (directory / "config.json").rename(directory / "bert_config.json")
    archive = tmp_path / "ckpt.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in directory.iterdir():
            tar.add(f, arcname=f.name)
    batch = make_batch()
    for source in (directory, archive):
        want = ppb.BertForPreTraining.from_pretrained(str(source)).eval()
        got = P.BertForPreTraining.from_pretrained(source).eval()
        assert got.config.to_dict() == want.config.to_dict()
        with torch.no_grad():
            assert_all_close(got(*batch_args(batch)), want(*batch_args(batch)))


def test_from_pretrained_adapts_heads_and_passes_arguments(tmp_path, caplog):
    reference = build_ppb(HEADS["pretraining"], seed=6)
    directory = write_archive(reference, tmp_path)
    batch = make_batch()
    # the backbone from a pretraining checkpoint, with output_attentions for the constructor
    model = P.BertModel.from_pretrained(directory, output_attentions=True).eval()
    with torch.no_grad():
        attentions, layers, _ = model(*batch_args(batch))
        assert len(attentions) == TINY["num_hidden_layers"]
        assert_all_close(layers, reference.bert(*batch_args(batch))[0])
    # a classifier: num_labels positional (0.6.2) and keyword; cache_dir positional (the API spec's form)
    with caplog.at_level(logging.INFO):
        calls = (((7,), {}), ((), {"num_labels": 7}), ((None, 7), {}), ((str(tmp_path),), {"num_labels": 7}))
        for args, kwargs in calls:
            classifier = P.BertForSequenceClassification.from_pretrained(directory, *args, **kwargs)
            assert classifier.num_labels == 7 and classifier.classifier.out_features == 7
    assert classifier.load_report.initialized == ["classifier.weight", "classifier.bias"]
    assert "not initialized from pretrained model" in caplog.text
    # state_dict= replaces the archive's weights
    other = build_ppb(HEADS["pretraining"], seed=7)
    replaced = P.BertForPreTraining.from_pretrained(directory, state_dict=other.state_dict())
    torch.testing.assert_close(replaced.cls.predictions.bias, other.cls.predictions.bias, atol=0, rtol=0)
    with pytest.raises(FileNotFoundError, match="not a file or directory"):
        P.BertModel.from_pretrained(tmp_path / "missing")


def test_from_pretrained_backbone_mismatch_is_an_error(tmp_path):
    directory = write_archive(build_ppb(HEADS["pretraining"]), tmp_path)
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    del state["bert.encoder.layer.1.output.dense.weight"]
    with pytest.raises(ValueError, match=r"bert\.encoder\.layer\.1\.output\.dense\.weight"):
        P.BertForPreTraining.from_pretrained(directory, state_dict=state)


def test_shortcut_names_go_through_fetch(tmp_path, monkeypatch):
    from bertkit.weights import download

    directory = write_archive(build_ppb(HEADS["model"]), tmp_path / "fetched")
    calls = []

    def fake_fetch(name, *, cache_dir=None, **kwargs):
        calls.append((name, cache_dir))
        return directory

    monkeypatch.setattr(download, "fetch", fake_fetch)
    model = P.BertModel.from_pretrained("bert-base-cased", cache_dir=tmp_path / "cache")
    assert calls == [("bert-base-cased", tmp_path / "cache")]
    assert model.config.vocab_size == TINY["vocab_size"]
    with pytest.raises(FileNotFoundError, match="nor a registered checkpoint name"):
        P.BertModel.from_pretrained("bert-base-nonexistent")


# ---------------------------------------------------------------------------- TF checkpoints and the CLI

def _tf_reader() -> None:
    try:
        from bertkit.weights import formats, tf_bundle  # noqa: F401
    except ImportError as e:
        pytest.skip(f"bertkit.weights.formats cannot read TF checkpoints yet ({e})")


def convert_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit.compat.pytorch_pretrained_bert", *args],
                          capture_output=True, text=True)


def test_convert_cli_usage():
    out = convert_cli("convert_gpt2_checkpoint", "a", "b")
    assert out.returncode == 2 and "convert_tf_checkpoint_to_pytorch TF_CHECKPOINT" in out.stderr


@pytest.fixture
def tf_checkpoint(tmp_path) -> tuple[Path, nn.Module]:
    """A Google-layout TF checkpoint (bert_config.json + bert_model.ckpt.*) of a randomised ppb
    BertForPreTraining, written by bertkit's TF writer; and that ppb model."""
    _tf_reader()
    try:
        from bertkit.weights.convert import write_tf_checkpoint
    except ImportError as e:
        pytest.skip(f"bertkit cannot write TF checkpoints yet ({e})")
    reference = build_ppb(HEADS["pretraining"], seed=8)
    engine = bertkit.BERTForPreTraining.from_pretrained(write_archive(reference, tmp_path / "ppb"))
    try:
        write_tf_checkpoint(engine, tmp_path / "tf")
    except (AttributeError, ImportError) as e:
        pytest.skip(f"bertkit's TF writer is not complete yet ({e})")
    return tmp_path / "tf" / "bert_model.ckpt", reference


def test_load_tf_weights_and_cli_match_ppb(tf_checkpoint, tmp_path):
    prefix, reference = tf_checkpoint
    config_file = prefix.parent / "bert_config.json"
    batch = make_batch()
    with torch.no_grad():
        want = reference(*batch_args(batch))
    model = P.load_tf_weights_in_bert(P.BertForPreTraining(P.BertConfig.from_json_file(config_file)), prefix)
    assert model.load_report.initialized == [] and model.load_report.resized == []
    with torch.no_grad():
        assert_all_close(model.eval()(*batch_args(batch)), want)

    dump = tmp_path / "dump" / "pytorch_model.bin"
    out = convert_cli("convert_tf_checkpoint_to_pytorch", str(prefix), str(config_file), str(dump))
    assert out.returncode == 0, out.stderr
    assert "Save PyTorch model to" in out.stdout
    loaded = ppb.BertForPreTraining(ppb.BertConfig(str(config_file)))
    loaded.load_state_dict(torch.load(dump, weights_only=True), strict=True)
    with torch.no_grad():
        assert_all_close(loaded.eval()(*batch_args(batch)), want)

    # no config beside the checkpoint: read with the model's own; a bare BertModel loads too (0.6.2 skipped all)
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in prefix.parent.glob(prefix.name + ".*"):
        (bare / f.name).write_bytes(f.read_bytes())
    backbone = P.load_tf_weights_in_bert(P.BertModel(P.BertConfig.from_json_file(config_file)), bare / prefix.name)
    with torch.no_grad():
        assert_all_close(backbone.eval()(*batch_args(batch)), reference.bert(*batch_args(batch)))

    # from_pretrained(..., from_tf=True) reads <dir>/model.ckpt, as 0.6.2 does
    directory = tmp_path / "from_tf"
    directory.mkdir()
    (directory / "bert_config.json").write_bytes(config_file.read_bytes())
    for f in prefix.parent.glob(prefix.name + ".*"):
        (directory / f.name.replace(prefix.name, "model.ckpt", 1)).write_bytes(f.read_bytes())
    from_tf = P.BertForPreTraining.from_pretrained(directory, from_tf=True)
    with torch.no_grad():
        assert_all_close(from_tf.eval()(*batch_args(batch)), want)


def test_load_tf_weights_follows_the_read_checkpoint_contract(tmp_path, monkeypatch):
    """Independent of the TF reader: what load_tf_weights_in_bert hands read_checkpoint, and what it does with
    the Checkpoint (HF names) it gets back; without a config beside the prefix it stages one."""
    from bertkit.weights import formats

    reference = build_ppb(HEADS["pretraining"], seed=9)
    seen = []

    def fake_read_checkpoint(source):
        source = Path(source)
        seen.append((source, sorted(p.name for p in source.parent.iterdir())))
        assert (source.parent / "bert_model.ckpt.index").is_file()
        config = json.loads(next(source.parent.glob("*config.json")).read_text())
        return formats.Checkpoint(bertkit.BERTConfig.from_hf_dict(config), dict(reference.state_dict()), "tf1")

    monkeypatch.setattr(formats, "read_checkpoint", fake_read_checkpoint)
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "unrelated.txt"):
        (tmp_path / name).write_bytes(b"")
    model = P.load_tf_weights_in_bert(P.BertForPreTraining(P.BertConfig(**PPB_CONFIG)), tmp_path / "bert_model.ckpt")
    staged, files = seen[-1]
    assert staged.parent != tmp_path and staged.name == "bert_model.ckpt"
    assert files == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
    assert not staged.parent.exists()  # the staging directory is gone
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, atol=0, rtol=0, msg=key)
    P.BertConfig(**PPB_CONFIG).to_json_file(tmp_path / "bert_config.json")
    P.load_tf_weights_in_bert(P.BertModel(P.BertConfig(**PPB_CONFIG)), tmp_path / "bert_model.ckpt")
    assert seen[-1][0] == tmp_path / "bert_model.ckpt"


def _fixture_checkpoints() -> list[Path]:
    return sorted(p.with_suffix("") for p in FIXTURES_TF.rglob("*.index")) if FIXTURES_TF.is_dir() else []


@pytest.mark.parametrize("index", range(4))
def test_fixture_tf_checkpoints(index, tmp_path):
    """The TF fixtures: the converted dump loads strictly in ppb and the tensors sit where Google's names say."""
    checkpoints = _fixture_checkpoints()
    if index >= len(checkpoints):
        pytest.skip(f"{len(checkpoints)} TF fixture checkpoint(s) under {FIXTURES_TF} (generated separately)")
    _tf_reader()
    from bertkit.weights.tf_bundle import read_bundle

    prefix = checkpoints[index]
    config_file = next((prefix.parent / n for n in ("bert_config.json", "config.json")
                        if (prefix.parent / n).is_file()), None)
    if config_file is None:
        pytest.skip(f"{prefix} has no bert_config.json beside it")
    raw = read_bundle(prefix)
    config = P.BertConfig.from_json_file(config_file)
    if any(k.startswith("cls/predictions") for k in raw) and any(k.startswith("cls/seq_relationship") for k in raw):
        model = P.BertForPreTraining(config)
        dump = tmp_path / "pytorch_model.bin"
        out = convert_cli("convert_tf_checkpoint_to_pytorch", str(prefix), str(config_file), str(dump))
        assert out.returncode == 0, out.stderr
        ppb.BertForPreTraining(ppb.BertConfig(str(config_file))).load_state_dict(
            torch.load(dump, weights_only=True), strict=True)
    elif any(k.startswith("cls/squad") for k in raw):
        model = P.BertForQuestionAnswering(config)
    elif "output_weights" in raw:
        model = P.BertForSequenceClassification(config, int(raw["output_weights"].shape[0]))
    else:
        model = P.BertModel(config)
    P.load_tf_weights_in_bert(model, prefix)
    assert model.load_report.initialized == [] or isinstance(model, P.BertModel)
    state = model.bert.state_dict()
    torch.testing.assert_close(state["embeddings.word_embeddings.weight"],
                               torch.as_tensor(raw["bert/embeddings/word_embeddings"]).float())
    torch.testing.assert_close(state["encoder.layer.0.attention.self.query.weight"],
                               torch.as_tensor(raw["bert/encoder/layer_0/attention/self/query/kernel"]).float().T)
    torch.testing.assert_close(state["encoder.layer.0.output.LayerNorm.weight"],
                               torch.as_tensor(raw["bert/encoder/layer_0/output/LayerNorm/gamma"]).float())


def test_converted_dump_is_written_atomically(tmp_path, monkeypatch):
    """A failing save leaves no partial dump behind (bertkit.io.atomic_write)."""
    from bertkit.compat.pytorch_pretrained_bert import modeling

    config_file = tmp_path / "bert_config.json"
    P.BertConfig(**PPB_CONFIG).to_json_file(config_file)
    monkeypatch.setattr(modeling, "load_tf_weights_in_bert", lambda model, path: model)

    def broken_save(obj, f):
        Path(f).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        modeling.convert_tf_checkpoint_to_pytorch("unused", config_file, tmp_path / "dump.bin")
    assert not (tmp_path / "dump.bin").exists() and list(tmp_path.iterdir()) == [config_file]
    monkeypatch.undo()
    modeling_out = io.StringIO()
    monkeypatch.setattr(modeling, "load_tf_weights_in_bert", lambda model, path: model)
    monkeypatch.setattr(sys, "stdout", modeling_out)
    modeling.convert_tf_checkpoint_to_pytorch("unused", config_file, tmp_path / "dump.bin")
    state = torch.load(tmp_path / "dump.bin", weights_only=True)
    reference = ppb.BertForPreTraining(ppb.BertConfig(str(config_file)))
    reference.load_state_dict(state, strict=True)
    assert "Building PyTorch model from configuration" in modeling_out.getvalue()
    assert json.loads(str(P.BertConfig.from_json_file(config_file))) == P.BertConfig(**PPB_CONFIG).to_dict()
