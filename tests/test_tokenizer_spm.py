"""DeBERTa-v2/v3's SentencePiece tokenizer: ``spm.model`` read by bertkit without ``sentencepiece`` / ``protobuf``.

The ``spm.model`` files are trained here with the ``sentencepiece`` trainer (a test-only package) on Jane Austen
plus the multilingual training sentences, in three layouts:

* v3:      DeBERTa-v3's ids ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, [MASK] added after the pieces), nmt_nfkc, and
           microsoft/deberta-v3-base's directory (no tokenizer_class: config.json's model_type says deberta-v2);
* digits:  ``--split_digits``, byte fallback, the identity normalization rule, a control and a user-defined piece;
* options: the nfkc_cf rule and a config with do_lower_case, split_by_punct and add_prefix_space false.

bertkit's ``AutoTokenizer`` and transformers' read the same directory and must agree on the held-out multilingual
text (ids, token types, offsets, pairs, truncation, padding, decoding, saving); the reader must agree with
SentencePiece's own protobuf classes; a damaged or missing file is one line naming it.
"""

from __future__ import annotations

import io
import json
import shutil

import pytest

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
pytest.register_assert_rewrite("tokenizer_json_helpers")

from sentencepiece import sentencepiece_model_pb2  # noqa: E402

import bertkit  # noqa: E402
import bertkit.tasks.sources  # noqa: E402
from bertkit.tokenization import TokenizerFast, load_tokenizer  # noqa: E402
from bertkit.tokenization.sentencepiece import read_spm_model  # noqa: E402
from test_tokenizer_json import FULL, PAIRS_A, PAIRS_B, check_call  # noqa: E402
from tokenizer_json_helpers import HELDOUT, LONG, assert_same, training_texts  # noqa: E402

transformers.logging.set_verbosity_error()

_IDS = dict(pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
            unk_piece="[UNK]")
#: name -> (trainer options, files beside spm.model)
LAYOUTS = {
    "v3": (dict(**_IDS), {"tokenizer_config.json": {"do_lower_case": False, "vocab_type": "spm"},
                          "config.json": {"model_type": "deberta-v2"}}),
    "digits": (dict(**_IDS, split_digits=True, byte_fallback=True, normalization_rule_name="identity",
                    control_symbols=["<ctl>"], user_defined_symbols=["<ud>", "[MASK]"]),
               {"tokenizer_config.json": {"tokenizer_class": "DebertaV2Tokenizer"}}),
    "options": (dict(pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="[PAD]", unk_piece="[UNK]", bos_piece="[CLS]",
                     eos_piece="[SEP]", normalization_rule_name="nfkc_cf"),
                {"tokenizer_config.json": {"tokenizer_class": "DebertaV2TokenizerFast", "do_lower_case": True,
                                           "split_by_punct": True, "add_prefix_space": False}}),
}
#: the held-out line that writes special tokens in running text (SentencePiece itself never matches them)
SPECIALS_LINE = next(text for text in HELDOUT if "[MASK]" in text)
COMBINING_LINE = next(text for text in HELDOUT if text.startswith("Combining"))


def train(directory, options: dict, vocab_size: int = 800) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_texts()), model_writer=model,
                                   vocab_size=vocab_size, minloglevel=2, **options)
    (directory / "spm.model").write_bytes(model.getvalue())


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spm")
    for name, (options, files) in LAYOUTS.items():
        train(root / name, options)
        for file, content in files.items():
            (root / name / file).write_text(json.dumps(content))
    return {name: root / name for name in LAYOUTS}


@pytest.fixture(scope="module")
def loaded(dirs):
    return {name: (bertkit.AutoTokenizer.from_pretrained(d), transformers.AutoTokenizer.from_pretrained(d))
            for name, d in dirs.items()}


# ---------------------------------------------------------------------------- the reader

@pytest.mark.parametrize("name", list(LAYOUTS))
def test_reader_equals_sentencepiece_protobuf(dirs, name):
    ours = read_spm_model(dirs[name] / "spm.model")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((dirs[name] / "spm.model").read_bytes())
    assert [(p.text, p.score, p.kind) for p in ours.pieces] == [(p.piece, p.score, p.type) for p in proto.pieces]
    trainer, normalizer = proto.trainer_spec, proto.normalizer_spec
    for field in ("model_type", "unk_id", "bos_id", "eos_id", "pad_id", "byte_fallback", "split_digits"):
        assert getattr(ours, field) == getattr(trainer, field), field
    assert (ours.normalizer_name, ours.precompiled_charsmap) == (normalizer.name, normalizer.precompiled_charsmap)
    for field in ("add_dummy_prefix", "remove_extra_whitespaces", "escape_whitespaces"):
        assert getattr(ours, field) == getattr(normalizer, field), field


def test_negative_ids_and_defaults(tmp_path):
    """pad_id -1 (SentencePiece's default) travels as a 10-byte varint; absent fields take the proto defaults."""
    train(tmp_path / "plain", {}, vocab_size=300)
    model = read_spm_model(tmp_path / "plain" / "spm.model")
    assert (model.unk_id, model.bos_id, model.eos_id, model.pad_id) == (0, 1, 2, -1)
    assert model.normalizer_name == "nmt_nfkc" and model.add_dummy_prefix and not model.byte_fallback


# ---------------------------------------------------------------------------- equal to transformers

@pytest.mark.parametrize("name", list(LAYOUTS))
def test_loader_and_vocabulary(loaded, name):
    bk, hf = loaded[name]
    assert isinstance(bk, TokenizerFast) and bk.tokenizer_class == "DebertaV2Tokenizer"
    assert type(hf).__name__ == "DebertaV2Tokenizer"
    assert bk.get_vocab() == hf.get_vocab() and len(bk) == len(hf) and bk.vocab_size == hf.vocab_size
    assert bk.all_special_tokens == hf.all_special_tokens and bk.all_special_ids == hf.all_special_ids
    assert tuple(bk.model_input_names) == tuple(hf.model_input_names)
    assert bk.mask_token_id == hf.mask_token_id and bk.unk_token_id == hf.unk_token_id


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_single_texts_and_pairs(loaded, name):
    bk, hf = loaded[name]
    assert_same(hf(HELDOUT, **FULL), bk(HELDOUT, **FULL), name)
    for text in HELDOUT:
        assert_same(hf(text, **FULL), bk(text, **FULL), f"{name}: {text!r}")
        assert bk.tokenize(text) == hf.tokenize(text), text
    assert_same(hf(PAIRS_A, PAIRS_B, **FULL), bk(PAIRS_A, PAIRS_B, **FULL), name)
    assert_same(hf(PAIRS_A, PAIRS_B, add_special_tokens=False), bk(PAIRS_A, PAIRS_B, add_special_tokens=False))
    words = [text.split() for text in HELDOUT if text.split()]
    check_call(bk, hf, words, is_split_into_words=True, **FULL, context=name)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_truncation_and_padding(loaded, name, strategy):
    bk, hf = loaded[name]
    firsts, seconds = [LONG, HELDOUT[20], HELDOUT[2], HELDOUT[9]], [HELDOUT[5], LONG, HELDOUT[9], HELDOUT[16]]
    if strategy == "longest_first":  # a pair's rows are (windows of text) x (windows of text_pair): no LONG here
        firsts, seconds = [HELDOUT[20], HELDOUT[0], HELDOUT[2], HELDOUT[9]], [HELDOUT[5], HELDOUT[16], HELDOUT[9], ""]
    for max_length, stride in ((14, 0), (32, 3)):
        context = f"{name} {strategy} max_length={max_length} stride={stride}"
        check_call(bk, hf, firsts, seconds, truncation=strategy, max_length=max_length, stride=stride,
                   return_overflowing_tokens=True, **FULL, context=context)
        check_call(bk, hf, firsts, seconds, truncation=strategy, max_length=max_length, padding="max_length",
                   context=context + " padded")
    check_call(bk, hf, HELDOUT, padding=True, pad_to_multiple_of=8, padding_side="left", **FULL, context=name)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_decode(loaded, name):
    bk, hf = loaded[name]
    for ids in hf([*HELDOUT, LONG])["input_ids"]:
        for skip in (False, True):
            assert bk.decode(ids, skip) == hf.decode(ids, skip_special_tokens=skip), ids


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_save_round_trip(loaded, name, tmp_path):
    """bertkit saves tokenizer.json + config; transformers and bertkit read it back to the same tokenizer, and
    bertkit reads transformers' own save of the spm.model directory the same way."""
    bk, hf = loaded[name]
    bk.save_pretrained(tmp_path / "ours")
    hf.save_pretrained(tmp_path / "theirs")
    for directory in (tmp_path / "ours", tmp_path / "theirs"):
        for tok in (load_tokenizer(directory), transformers.AutoTokenizer.from_pretrained(directory)):
            assert_same(hf(PAIRS_A, PAIRS_B, **FULL), tok(PAIRS_A, PAIRS_B, **FULL), f"{name} {directory.name}")
            assert tok.all_special_tokens == hf.all_special_tokens
            assert tuple(tok.model_input_names) == tuple(hf.model_input_names)


def test_tokenizer_json_of_another_pipeline_is_rebuilt(dirs, tmp_path):
    """A tokenizer.json written with another pipeline (transformers 4's converter: the charsmap, no NFC) under
    DebertaV2Tokenizer is rebuilt as transformers 5 rebuilds it."""
    d = tmp_path / "v4"
    d.mkdir()
    as_written = TokenizerFast.from_pretrained(dirs["v3"], follow_tokenizer_class=False)
    as_written.save_pretrained(d)
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "DebertaV2Tokenizer"}))
    bk, hf = load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d)
    assert json.loads(as_written.backend_tokenizer.to_str())["normalizer"]["normalizers"][0]["type"] == "Precompiled"
    assert_same(hf(HELDOUT, **FULL), bk(HELDOUT, **FULL))
    assert_same(hf(PAIRS_A, PAIRS_B, **FULL), bk(PAIRS_A, PAIRS_B, **FULL))


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_as_written_is_sentencepiece(dirs, name):
    """``follow_tokenizer_class=False``: SentencePiece's own pipeline (its normalization rule and whitespace
    rules), equal to the sentencepiece library's ids on the held-out text but for two lines: special tokens
    written in a text, which bertkit (as every HF tokenizer) matches and SentencePiece does not; and stacked
    combining marks, which the tokenizers library's ``Precompiled`` normalizer composes otherwise."""
    ours = TokenizerFast.from_pretrained(dirs[name], follow_tokenizer_class=False)
    theirs = spm.SentencePieceProcessor(model_file=str(dirs[name] / "spm.model"))
    differ = [text for text in HELDOUT if ours(text, add_special_tokens=False)["input_ids"] != theirs.encode(text)]
    assert set(differ) <= {SPECIALS_LINE, COMBINING_LINE}, differ


def test_a_model_directory_with_only_spm_model_runs_in_the_tools(dirs, tmp_path):
    """microsoft/deberta-v3-base's layout (spm.model, its tokenizer_config.json, config.json; no tokenizer.json):
    the tools' loader takes its tokenizer from spm.model, and the pipeline equals HF's."""
    import torch

    d = shutil.copytree(dirs["v3"], tmp_path / "model")
    config = transformers.DebertaV2Config(
        vocab_size=len(transformers.AutoTokenizer.from_pretrained(d)), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=37, relative_attention=True, position_buckets=16,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
        num_labels=3)
    torch.manual_seed(0)
    transformers.DebertaV2ForSequenceClassification(config).save_pretrained(d)
    loaded = bertkit.tasks.sources.load_source(d, bertkit.BERTForSequenceClassification)
    assert loaded.tokenizer.tokenizer_class == "DebertaV2Tokenizer"
    texts = HELDOUT[:4]
    want = transformers.pipeline("text-classification", model=str(d), top_k=None)(texts)
    got = bertkit.pipeline("text-classification", model=d, top_k=None)(texts)
    for ours, theirs in zip(got, want, strict=True):
        assert [a["label"] for a in ours] == [a["label"] for a in theirs]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(ours, theirs)) < 1e-5


# ---------------------------------------------------------------------------- bad files

def _copy(dirs, tmp_path, name="digits"):
    return shutil.copytree(dirs[name], tmp_path / name)


def test_missing_spm_model(dirs, tmp_path):
    d = _copy(dirs, tmp_path)
    (d / "spm.model").unlink()
    message = (r"holds neither tokenizer\.json nor spm\.model, one of which its tokenizer class DebertaV2Tokenizer "
               r"needs \(found: tokenizer_config\.json\); copy the model's spm\.model")
    with pytest.raises(ValueError, match=message):
        bertkit.AutoTokenizer.from_pretrained(d)
    with pytest.raises(ValueError, match=message):
        TokenizerFast.from_pretrained(d)


@pytest.mark.parametrize("damage, message", [
    (lambda data: b"", r"spm\.model is empty; restore the file"),
    (lambda data: data[:len(data) // 2], r"spm\.model is not a SentencePiece model \(it ends inside a field: a "
                                         r"truncated file\?\); restore the file"),
    (lambda data: data[:7], r"not a SentencePiece model \(it ends inside a"),
    (lambda data: b'{"model": {"type": "Unigram"}}', r"not a SentencePiece model \(wire type 3 at byte 1"),
    (lambda data: b"\x20\x96\x01", r"not a SentencePiece model \(it holds no pieces\)"),
    (lambda data: b"\x08\x96\x01", r"not a SentencePiece model \(pieces is not a length-delimited field\)"),
    (lambda data: bytes(range(256)) * 4, r"not a SentencePiece model \("),
])
def test_damaged_spm_model(dirs, tmp_path, damage, message):
    d = _copy(dirs, tmp_path)
    (d / "spm.model").write_bytes(damage((d / "spm.model").read_bytes()))
    with pytest.raises(ValueError, match=message) as caught:
        bertkit.AutoTokenizer.from_pretrained(d)
    assert str(d / "spm.model") in str(caught.value) and "\n" not in str(caught.value)


def test_truncated_anywhere_is_named(dirs, tmp_path):
    """A file cut at any point is refused (or, cut between whole top-level fields, misses a part it needs)."""
    data = (dirs["digits"] / "spm.model").read_bytes()
    path = tmp_path / "spm.model"
    for end in range(1, len(data), max(1, len(data) // 97)):
        path.write_bytes(data[:end])
        with pytest.raises(ValueError, match=r"spm\.model is not a SentencePiece model"):
            read_spm_model(path)


def test_unescaped_whitespace_only_matters_as_written(dirs, tmp_path):
    """A model that keeps spaces unescaped: DebertaV2Tokenizer's recipe does not read the switch (as in
    transformers); SentencePiece's own pipeline cannot hold it, and says so."""
    d = _copy(dirs, tmp_path)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((d / "spm.model").read_bytes())
    proto.normalizer_spec.escape_whitespaces = False
    (d / "spm.model").write_bytes(proto.SerializeToString())
    assert_same(transformers.AutoTokenizer.from_pretrained(d)(HELDOUT, **FULL), load_tokenizer(d)(HELDOUT, **FULL))
    with pytest.raises(ValueError, match=r"spm\.model keeps whitespace unescaped \(normalizer_spec\.escape_whitespaces "
                                         r"is false\), which the tokenizers library cannot represent"):
        TokenizerFast.from_pretrained(d, follow_tokenizer_class=False)


def test_bpe_model_is_refused(tmp_path):
    train(tmp_path / "bpe", dict(**_IDS, model_type="bpe"), vocab_size=300)
    (tmp_path / "bpe" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
    with pytest.raises(ValueError, match=r"spm\.model holds a SentencePiece BPE model; bertkit reads Unigram models"):
        bertkit.AutoTokenizer.from_pretrained(tmp_path / "bpe")
