"""BERTTokenizerFast's HF-style API against transformers' BertTokenizerFast: save / load round trips in both
directions, clear errors, and vocabulary training.

Encoding itself is checked in test_tokenizer_api.py; the texts, the reference tokenizers and
assert_same are in tokenizer_api_helpers.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.register_assert_rewrite("tokenizer_api_helpers")

import bertkit  # noqa: E402
from bertkit.resources import BERT_BASE_UNCASED_VOCAB  # noqa: E402
from bertkit.tokenization import BERTTokenizerFast  # noqa: E402
from tokenizer_api_helpers import (  # noqa: E402
    AUSTEN,
    CONTEXT,
    FULL,
    MIXED,
    NON_ASCII,
    NOVELS,
    QUESTION,
    SPECIALS,
    _paragraphs,
    assert_same,
    bk_fixture,  # noqa: F401  (the bk fixture)
    hf_fixture,  # noqa: F401  (the hf fixture)
    hf_tokenizer,
)

# ---------------------------------------------------------------------------- save / load

def _check_same(tok_a, tok_b) -> None:
    """Same outputs on single texts, pairs, a mixed batch and overflow windows."""
    assert_same(tok_a(MIXED, padding=True, **FULL), tok_b(MIXED, padding=True, **FULL))
    assert_same(tok_a(MIXED, MIXED[::-1], truncation="longest_first", max_length=32, stride=4,
                      return_overflowing_tokens=True, padding=True, **FULL),
                tok_b(MIXED, MIXED[::-1], truncation="longest_first", max_length=32, stride=4,
                      return_overflowing_tokens=True, padding=True, **FULL))
    assert_same(tok_a(NON_ASCII[0], AUSTEN[0], **FULL), tok_b(NON_ASCII[0], AUSTEN[0], **FULL))
    ids = tok_a.encode(NON_ASCII[3])
    assert tok_a.decode(ids, clean_up_tokenization_spaces=True) == tok_b.decode(ids, clean_up_tokenization_spaces=True)


def test_bertkit_save_loads_in_hf(hf, bk, tmp_path):
    paths = bk.save_pretrained(tmp_path)
    assert {Path(p).name for p in paths} == {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}
    loaded = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert loaded.do_lower_case and loaded.model_max_length == 512
    _check_same(hf, loaded)
    _check_same(loaded, bk)
    again = BERTTokenizerFast.from_pretrained(tmp_path)
    _check_same(again, bk)
    assert BERTTokenizerFast.from_pretrained(tmp_path / "vocab.txt").get_vocab() == bk.get_vocab()


def test_hf_save_loads_in_bertkit(hf, tmp_path):
    hf.save_pretrained(tmp_path)
    loaded = BERTTokenizerFast.from_pretrained(tmp_path)
    assert loaded.get_vocab() == hf.get_vocab()
    _check_same(hf, loaded)
    # only tokenizer.json left: the vocabulary and normaliser flags come from it
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / name).unlink(missing_ok=True)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]
    only_json = BERTTokenizerFast.from_pretrained(tmp_path)
    assert only_json.get_vocab() == hf.get_vocab()
    _check_same(hf, only_json)


@pytest.mark.parametrize("settings", [dict(do_lower_case=False), dict(do_lower_case=True, strip_accents=False),
                                      dict(do_lower_case=False, tokenize_chinese_chars=False)], ids=str)
def test_settings_survive_round_trips(cased_vocab, settings, tmp_path):
    ours = BERTTokenizerFast(vocab=cased_vocab, **settings)
    reference = hf_tokenizer(cased_vocab, **settings)
    _check_same(reference, ours)
    ours.save_pretrained(tmp_path / "bertkit")
    in_hf = transformers.BertTokenizerFast.from_pretrained(tmp_path / "bertkit")
    _check_same(reference, in_hf)
    reference.save_pretrained(tmp_path / "hf")
    in_ours = BERTTokenizerFast.from_pretrained(tmp_path / "hf")
    _check_same(reference, in_ours)
    (tmp_path / "hf" / "tokenizer_config.json").unlink()
    from_json = BERTTokenizerFast.from_pretrained(tmp_path / "hf")
    _check_same(reference, from_json)
    for loaded in (in_ours, from_json, BERTTokenizerFast.from_pretrained(tmp_path / "bertkit")):
        assert loaded.do_lower_case == settings["do_lower_case"]
        assert loaded.tokenize_chinese_chars == settings.get("tokenize_chinese_chars", True)
        assert loaded.tokenize("Élise") == ours.tokenize("Élise")
    if not settings["do_lower_case"]:
        assert "Anne" in from_json.tokenize("Anne Elliot")


def test_from_pretrained_overrides(bk, tmp_path):
    bk.save_pretrained(tmp_path)
    cased = BERTTokenizerFast.from_pretrained(tmp_path, do_lower_case=False, model_max_length=128)
    assert not cased.do_lower_case and cased.model_max_length == 128
    assert cased.tokenize("Hello") == ["[UNK]"]  # the uncased vocabulary has no "Hello"


def test_model_and_tokenizer_in_one_directory(bk, tmp_path):
    model = bertkit.bert_for_masked_lm_tiny().eval()
    model.save_pretrained(tmp_path)
    bk.save_pretrained(tmp_path)
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {
        p.name for p in tmp_path.iterdir()}
    tokenizer = BERTTokenizerFast.from_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path)
    _check_same(bk, tokenizer)
    _check_same(bk, transformers.AutoTokenizer.from_pretrained(tmp_path))
    enc = tokenizer(MIXED, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        a = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        b = loaded(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    a, b = (x[0] if isinstance(x, tuple) else x for x in (a, b))
    torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------- errors

def _vocab_file(tmp_path: Path, tokens: list[str]) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    return path


def test_vocabulary_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        BERTTokenizerFast(vocab_file=tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="is empty"):
        BERTTokenizerFast(vocab_file=_vocab_file(tmp_path, []))
    with pytest.raises(ValueError, match=r"lacks the special token.*mask_token='\[MASK\]'"):
        BERTTokenizerFast(vocab_file=_vocab_file(tmp_path, [*SPECIALS[:4], "a", "b"]))
    with pytest.raises(ValueError, match="'b' twice"):
        BERTTokenizerFast(vocab_file=_vocab_file(tmp_path, [*SPECIALS, "a", "b", "c", "b"]))
    with pytest.raises(ValueError, match="twice"):
        BERTTokenizerFast(vocab=[*SPECIALS, "a", "a"])
    with pytest.raises(ValueError, match="empty"):
        BERTTokenizerFast(vocab=[])
    with pytest.raises(ValueError, match="exactly one"):
        BERTTokenizerFast()
    with pytest.raises(ValueError, match="neither"):
        BERTTokenizerFast.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ValueError, match=r"holds no vocab.txt or tokenizer.json"):
        BERTTokenizerFast.from_pretrained(tmp_path / "empty_dir")


def test_length_errors(hf, bk):
    with pytest.raises(ValueError, match=r"max_length=2 leaves no room.*special tokens"):
        bk(CONTEXT, truncation=True, max_length=2)
    with pytest.raises(ValueError, match=r"max_length=3 leaves no room.*special tokens"):
        bk(QUESTION, CONTEXT, truncation="only_second", max_length=3)
    bk(QUESTION, CONTEXT, truncation=True, max_length=4)  # one text token fits
    # only_first cannot cut a tiny first text enough to fit a long second one (HF fails too)
    with pytest.raises(Exception, match="runcat"):
        hf("Why?", CONTEXT, truncation="only_first", max_length=64)
    with pytest.raises(ValueError, match=r"cannot truncate.*only_first"):
        bk("Why?", CONTEXT, truncation="only_first", max_length=64)
    with pytest.raises(ValueError, match="cannot truncate"):
        bk([QUESTION, NON_ASCII[0]], [CONTEXT, CONTEXT], truncation="only_first", max_length=64)
    with pytest.raises(ValueError, match=r"only_second.*text_pair"):
        bk(CONTEXT, truncation="only_second", max_length=64)
    # stride must leave each window room to advance (HF's Rust core panics here)
    with pytest.raises(ValueError, match="stride=62"):
        bk(CONTEXT, truncation=True, max_length=64, stride=62, return_overflowing_tokens=True)
    with pytest.raises(ValueError, match="stride=61"):
        bk(QUESTION, CONTEXT, truncation="only_second", max_length=64, stride=61, return_overflowing_tokens=True)
    with pytest.raises(ValueError, match="stride=-1"):
        bk(CONTEXT, truncation=True, max_length=64, stride=-1)
    assert len(bk(CONTEXT, truncation=True, max_length=64, stride=61, return_overflowing_tokens=True)["input_ids"]) > 1


def test_argument_errors(bk):
    with pytest.raises(ValueError, match="padding must be"):
        bk(MIXED, padding="bogus")
    with pytest.raises(ValueError, match="truncation must be"):
        bk(MIXED, truncation="bogus")
    with pytest.raises(ValueError, match="return_tensors must be"):
        bk(MIXED, padding=True, return_tensors="tf")
    with pytest.raises(ValueError, match="padding_side"):
        BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB, padding_side="middle")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        bk.convert_ids_to_tokens([101, 30522])


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((None,), {}, "got NoneType"),
    ((5,), {}, "got int"),
    ((3.5,), {}, "got float"),
    (([None],), {}, "text holds NoneType"),
    ((["fine", None],), {}, "text holds NoneType"),
    ((["fine", 3],), {}, "text holds int"),
    ((["fine", "also"], ["pair", 7]), {}, "text_pair holds int"),
    (("one text", ["two", "texts"]), {}, "text_pair must be a single text"),
    ((["a", "b", "c"], ["x", "y"]), {}, r"as long as text \(3\)"),
    ((["a", "b"], "x"), {}, "as long as text"),
    ((["a", "b"],), {"is_split_into_words": True, "text_pair": [["x"]]}, "single text"),
    (([["a"], ["b"]],), {"is_split_into_words": True, "text_pair": [["x"]]}, r"as long as text \(2\)"),
    (([["a"], "b"],), {"is_split_into_words": True}, "list of word strings"),
    (("a b",), {"is_split_into_words": True}, "got str"),
])
def test_input_type_errors(bk, args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bk(*args, **kwargs)


def test_encode_plus_rejects_a_batch(bk):
    with pytest.raises(ValueError, match="one text"):
        bk.encode_plus(["a", "b"])


# ---------------------------------------------------------------------------- training

@pytest.fixture(scope="module")
def novel_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("austen")
    paths = []
    for name in ("persuasion", "northangerabbey"):
        (d / f"{name}.txt").write_text(NOVELS[name], encoding="utf-8")
        paths.append(str(d / f"{name}.txt"))
    return paths


@pytest.fixture(scope="module")
def trained(novel_files):
    return BERTTokenizerFast.train(novel_files, vocab_size=2000, min_frequency=2, show_progress=False)


@pytest.fixture(scope="module")
def cased_vocab():
    """A cased 2,000-token vocabulary learned from Persuasion (tokens in id order)."""
    tok = BERTTokenizerFast.train(iter(NOVELS["persuasion"].splitlines()), vocab_size=2000, min_frequency=2,
                                  do_lower_case=False, show_progress=False)
    return {t: i for t, i in tok.get_vocab().items()}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+|[^a-z0-9\s]", text.lower())


def test_trained_vocabulary(trained, novel_files):
    vocab = trained.get_vocab()
    assert [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])[:5]] == SPECIALS  # [PAD] = 0
    assert trained.pad_token_id == 0 and len(trained) <= 2000 and len(trained) > 1500
    assert "the" in vocab and any(t.startswith("##") for t in vocab)
    assert sorted(vocab.values()) == list(range(len(vocab)))
    sentences = _paragraphs(NOVELS["persuasion"])[10:30] + _paragraphs(NOVELS["northangerabbey"])[10:20]
    enc = trained(sentences)
    for sentence, ids in zip(sentences, enc["input_ids"]):
        assert ids[0] == trained.cls_token_id and ids[-1] == trained.sep_token_id
        assert trained.unk_token_id not in ids  # the learned alphabet covers the text
        assert trained.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).split() == \
            _words(sentence)
        assert trained.convert_tokens_to_ids(trained.convert_ids_to_tokens(ids)) == ids
    # the same vocabulary in HF's tokenizer encodes identically
    _check_same(hf_tokenizer(vocab), trained)


def test_trained_tokenizer_saves_and_loads(trained, tmp_path):
    trained.save_pretrained(tmp_path)
    loaded = BERTTokenizerFast.from_pretrained(tmp_path)
    assert loaded.get_vocab() == trained.get_vocab()
    _check_same(trained, loaded)
    _check_same(trained, transformers.BertTokenizerFast.from_pretrained(tmp_path))


def test_training_from_an_iterator_matches_files(trained, novel_files):
    def lines():
        for path in novel_files:
            yield from Path(path).read_text(encoding="utf-8").splitlines(keepends=True)

    from_iterator = BERTTokenizerFast.train(lines(), vocab_size=2000, min_frequency=2, show_progress=False)
    # the same vocabulary, ids included: training is deterministic (tests/test_tokenizer_errors.py)
    assert from_iterator.get_vocab() == trained.get_vocab()
    assert from_iterator.tokenize(CONTEXT) == trained.tokenize(CONTEXT)


def test_training_errors(novel_files):
    with pytest.raises(ValueError, match="vocab_size"):
        BERTTokenizerFast.train(novel_files, vocab_size=5, show_progress=False)
    with pytest.raises(ValueError, match="min_frequency"):
        BERTTokenizerFast.train(novel_files, vocab_size=100, min_frequency=0, show_progress=False)
    with pytest.raises(ValueError, match="file paths or strings"):
        BERTTokenizerFast.train([novel_files[0], 42], vocab_size=100, show_progress=False)


def test_training_list_means_files_and_a_missing_file_is_an_error(novel_files, tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        BERTTokenizerFast.train([*novel_files, str(tmp_path / "missing.txt")], vocab_size=100, show_progress=False)
    texts = ["emma woodhouse handsome clever", "and rich with a comfortable home"] * 50
    trained = BERTTokenizerFast.train(iter(texts), vocab_size=200, min_frequency=1, show_progress=False)
    assert trained.tokenize("emma woodhouse") == ["emma", "woodhouse"]


def test_training_progress_leaves_standard_output_to_the_caller(capfd):
    """tokenizers' trainer ends each stage of its progress bar with a newline on standard output; those go to
    standard error with the bars, so a CLI's output (a file, a pipe into jq) starts with its own first line."""
    texts = ["emma woodhouse handsome clever", "and rich with a comfortable home"] * 50
    print("before")
    shown = BERTTokenizerFast.train(iter(texts), vocab_size=200, min_frequency=1, show_progress=True)
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    assert "\n" in err
    quiet = BERTTokenizerFast.train(iter(texts), vocab_size=200, min_frequency=1, show_progress=False)
    assert shown.get_vocab() == quiet.get_vocab()
