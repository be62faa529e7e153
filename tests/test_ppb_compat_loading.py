"""``bertkit.compat.pytorch_pretrained_bert`` against pytorch-pretrained-bert 0.6.2: config, tokenizer, loading.

BertConfig round trips, BertTokenizer on Austen (and on edge cases and random mixtures),
from_pretrained on directories and archives both libraries read, and the TF converter (on
the fixture checkpoints, when present). The models are in ``test_ppb_compat_models.py``,
BertAdam in ``test_ppb_compat_optimizer.py``. Nothing is downloaded.
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
from ppb_compat_helpers import CLASSES, IGNORE_PPB_ADD_WARNING, assert_all_close, batch_args
from ppb_reference import HEADS, PPB_CONFIG, build_ppb, make_batch, write_archive

FIXTURES_TF = Path(__file__).parent / "fixtures" / "tf"

pytestmark = IGNORE_PPB_ADD_WARNING


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


@pytest.mark.parametrize("name", ["_is_whitespace", "_is_control", "_is_punctuation"])
def test_character_classes_match_ppb_on_every_code_point(name):
    from pytorch_pretrained_bert import tokenization as ppb_tokenization

    ours, theirs = getattr(P.tokenization, name), getattr(ppb_tokenization, name)
    differ = [hex(cp) for cp in range(0x110000) if ours(chr(cp)) != theirs(chr(cp))]
    assert not differ, differ[:20]


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
