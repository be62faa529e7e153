"""BERTTokenizerFast's HF-style API against transformers' BertTokenizerFast, output for output.

Real text (Jane Austen) plus non-ASCII texts, mixed in the same batches: bertkit encodes
pure-ASCII texts with a separate, faster pipeline and must still pad / align the whole
batch exactly as HF does. Covered: ids / masks / offsets / alignment helpers, truncation
with overflow windows (SQuAD-style), padding, tensors, pre-split words, decoding, save /
load round trips in both directions, clear errors, and vocabulary training.

transformers 5.x note: ``BertTokenizerFast(vocab_file=path)`` silently ignores ``vocab_file``
(the v5 constructor takes ``vocab=`` a path or dict and otherwise builds a 5-token vocabulary),
so the reference is built with ``vocab=`` and checked to really use the 30,522-token vocabulary.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels  # noqa: E402
from bertkit.tokenization import BatchEncoding, BERTTokenizerFast  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _paragraphs(text: str) -> list[str]:
    return [re.sub(r"\s+", " ", p).strip() for p in text.split("\n\n") if len(p.strip()) > 40]


NOVELS = austen_novels()
PRIDE = _paragraphs(NOVELS["prideprejudice"])
AUSTEN = PRIDE[5:17]  # dialogue and narration: quotes, underscores, abbreviations ("Mr."), semicolons
CONTEXT = " ".join(PRIDE[30:42])  # ~500 tokens: longer than every window below
QUESTION = "Who is Mr. Bingley, and what does Mrs. Bennet want?"
NON_ASCII = [
    "Café déjà vu — the naïve façade of Zürich’s “quoted” élite…",
    "東京は日本の首都です。北京也是。",
    "Ünïcödé 😀 emoji\u00a0non-breaking\u200bzero-width \u3000ideographic space",
    "Mansfield Park cost £20,000 a year — “remarkable!” said Mrs. Norris.",
    "Ce n’était pas la fête à Pemberley ; Ελισάβετ και Δάρσι.",
]
#: ASCII and non-ASCII interleaved, of very different lengths (the longest is non-ASCII)
MIXED = [AUSTEN[0], NON_ASCII[0], AUSTEN[1][:60], NON_ASCII[1], AUSTEN[2], NON_ASCII[2], "Hello!", NON_ASCII[3],
         NON_ASCII[4] + " " + AUSTEN[3]]
FULL = dict(return_special_tokens_mask=True, return_offsets_mapping=True)


# ---------------------------------------------------------------------------- fixtures and helpers

def hf_tokenizer(vocab: str | Path | dict, **kwargs):
    tok = transformers.BertTokenizerFast(vocab=str(vocab) if isinstance(vocab, Path) else vocab, **kwargs)
    assert len(tok) > 5, "transformers built its placeholder vocabulary"
    return tok


@pytest.fixture(scope="module")
def hf():
    tok = hf_tokenizer(BERT_BASE_UNCASED_VOCAB)
    assert tok.convert_tokens_to_ids("hello") == 7592
    return tok


@pytest.fixture(scope="module")
def bk():
    return BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB)


def _plain(value):
    """Lists (of lists) of ints / [start, end] pairs, whatever container the value came in."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _rows(enc) -> int:
    ids = _plain(enc["input_ids"])
    return len(ids) if ids and isinstance(ids[0], list) else 1


def assert_same(expected, actual, alignment: bool = True) -> None:
    """Same keys and values; with ``alignment`` the same tokens(), word_ids() and sequence_ids() per row."""
    assert set(actual) == set(expected)
    for key in expected:
        assert _plain(actual[key]) == _plain(expected[key]), key
    if alignment:
        assert _rows(actual) == _rows(expected)
        for i in range(_rows(expected)):
            assert actual.tokens(i) == expected.tokens(i), i
            assert actual.word_ids(i) == expected.word_ids(i), i
            assert actual.sequence_ids(i) == expected.sequence_ids(i), i


def both(hf, bk, *args, alignment: bool = True, **kwargs):
    expected, actual = hf(*args, **kwargs), bk(*args, **kwargs)
    assert isinstance(actual, BatchEncoding)
    assert_same(expected, actual, alignment)
    return expected, actual


def test_texts_mix_ascii_and_non_ascii():
    assert all(t.isascii() for t in AUSTEN) and not any(t.isascii() for t in NON_ASCII)
    assert {t.isascii() for t in MIXED} == {True, False}
    assert all(len(t) > 40 for t in AUSTEN) and len(CONTEXT) > 1500


# ---------------------------------------------------------------------------- encoding

@pytest.mark.parametrize("text", AUSTEN[:4] + NON_ASCII, ids=lambda t: t[:20])
def test_single_text(hf, bk, text):
    both(hf, bk, text, **FULL)
    both(hf, bk, text, add_special_tokens=False, **FULL)


@pytest.mark.parametrize("pair", [(AUSTEN[0], AUSTEN[1]), (QUESTION, NON_ASCII[0]), (NON_ASCII[1], AUSTEN[2]),
                                  (NON_ASCII[2], NON_ASCII[4])], ids=["ascii", "ascii+non", "non+ascii", "non+non"])
def test_pair(hf, bk, pair):
    both(hf, bk, *pair, **FULL)


def test_special_tokens_written_in_text(hf, bk):
    text = "Elizabeth [MASK] Darcy[SEP]x [mask] [UNK] [CLS]"
    _, enc = both(hf, bk, text, **FULL)
    assert enc["input_ids"].count(bk.mask_token_id) == 1  # "[mask]" is lower-case text, not the token


@pytest.mark.parametrize("offsets", [True, False], ids=["offsets", "lazy"])
@pytest.mark.parametrize("padding", [False, True, "longest", "max_length"])
@pytest.mark.parametrize("pairs", [False, True])
def test_mixed_batch(hf, bk, padding, pairs, offsets):
    args = (MIXED, MIXED[::-1]) if pairs else (MIXED,)
    extra = dict(max_length=160, truncation=True) if padding == "max_length" else {}
    _, enc = both(hf, bk, *args, padding=padding, **extra, return_special_tokens_mask=True,
                  return_offsets_mapping=offsets)
    lengths = {len(row) for row in enc["input_ids"]}
    assert (len(lengths) == 1) == bool(padding)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("multiple", [None, 8, 48])
def test_mixed_batch_padding_side_and_multiple(hf, bk, side, multiple):
    _, enc = both(hf, bk, MIXED, padding=True, pad_to_multiple_of=multiple, padding_side=side, **FULL)
    length = len(enc["input_ids"][0])
    assert multiple is None or length % multiple == 0
    pad_column = 0 if side == "left" else length - 1
    assert {row[pad_column] for row in enc["input_ids"]} >= {bk.pad_token_id}


def test_padding_side_set_on_the_tokenizer(hf):
    left_hf = hf_tokenizer(BERT_BASE_UNCASED_VOCAB, padding_side="left")
    left = BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB, padding_side="left")
    both(left_hf, left, MIXED, padding=True, **FULL)
    both(left_hf, left, MIXED, padding=True, padding_side="right", **FULL)


def test_max_length_padding_without_truncation(hf, bk):
    """Rows longer than max_length stay whole (explicit truncation=False), shorter ones are padded."""
    _, enc = both(hf, bk, MIXED, padding="max_length", max_length=24, truncation=False, **FULL)
    assert min(len(r) for r in enc["input_ids"]) == 24 < max(len(r) for r in enc["input_ids"])


@pytest.mark.filterwarnings("ignore")  # HF warns that max_length alone implies truncation
def test_max_length_alone_truncates_longest_first(hf, bk):
    _, enc = both(hf, bk, MIXED, MIXED[::-1], max_length=20, **FULL)
    assert {len(r) for r in enc["input_ids"]} == {20}


def test_alignment_is_computed_lazily(hf, bk):
    """word_ids() / sequence_ids() / tokens() without return_offsets_mapping, even after other calls."""
    settings = dict(truncation="only_second", max_length=40, stride=10, return_overflowing_tokens=True,
                    padding=True, padding_side="left")
    pairs = ([QUESTION, NON_ASCII[0]], [CONTEXT, NON_ASCII[1] + " " + CONTEXT[:300]])
    expected, actual = hf(*pairs, **settings), bk(*pairs, **settings)
    assert "offset_mapping" not in actual
    bk(MIXED, padding="max_length", max_length=200)  # reconfigures the backends in between
    bk("Hello", truncation=True, max_length=4, return_overflowing_tokens=True)
    assert_same(expected, actual)
    single = bk(NON_ASCII[0])
    assert single.word_ids() == hf(NON_ASCII[0]).word_ids()


def test_greek_final_sigma_follows_python_lower(hf, bk):
    """Intended difference: bertkit lower-cases like Google's reference (Python's str.lower, with
    final sigma), HF's Rust normalizer maps every capital sigma to σ."""
    text = "ΟΔΥΣΣΕΥΣ and ΣΟΦΟΣ met ΑΣ."
    assert bk.tokenize(text) == hf.tokenize(text.lower())
    assert bk.tokenize(text) != hf.tokenize(text)
    assert bk.tokenize(text.lower()) == hf.tokenize(text.lower())


@pytest.mark.parametrize("settings", [dict(do_lower_case=False), dict(strip_accents=False),
                                      dict(do_lower_case=False, strip_accents=True),
                                      dict(tokenize_chinese_chars=False)], ids=str)
def test_normalisation_settings(bk, settings):
    hf_tok = hf_tokenizer(BERT_BASE_UNCASED_VOCAB, **settings)
    ours = BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB, **settings)
    both(hf_tok, ours, MIXED, padding=True, **FULL)
    assert ours.tokenize(NON_ASCII[0]) != bk.tokenize(NON_ASCII[0]) or settings.get("tokenize_chinese_chars") is False


# ---------------------------------------------------------------------------- truncation and overflow

TRUNCATION_CASES = {
    "single": ((CONTEXT,), [True, "longest_first", "only_first"]),
    "pair q,ctx": ((QUESTION, CONTEXT), [True, "longest_first", "only_second"]),
    "pair ctx,q": ((CONTEXT, QUESTION), ["longest_first", "only_first"]),
    "pair long,long": ((CONTEXT, NON_ASCII[4] + " " + CONTEXT), ["longest_first"]),
    "batch": (([CONTEXT, QUESTION, NON_ASCII[0] + " " + CONTEXT, NON_ASCII[1]],), ["longest_first", "only_first"]),
    "batch q,ctx": (([QUESTION, NON_ASCII[1], "Why?"], [CONTEXT, NON_ASCII[0] + " " + CONTEXT, CONTEXT[:500]]),
                    [True, "only_second"]),
    "batch ctx,q": (([CONTEXT, NON_ASCII[0] + " " + CONTEXT], [QUESTION, NON_ASCII[2]]), ["only_first"]),
}


@pytest.mark.parametrize("offsets", [True, False], ids=["offsets", "lazy"])
@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize(("case", "strategy"), [(case, s) for case, (_, strategies) in TRUNCATION_CASES.items()
                                                for s in strategies])
def test_truncation_with_overflow(hf, bk, case, strategy, padding, offsets):
    """Every window of every row (token_type_ids included) as HF's, with or without offsets."""
    args = TRUNCATION_CASES[case][0]
    _, actual = both(hf, bk, *args, truncation=strategy, max_length=64, stride=16, return_overflowing_tokens=True,
                     padding=padding, return_special_tokens_mask=True, return_offsets_mapping=offsets)
    mapping = actual["overflow_to_sample_mapping"]
    assert len(mapping) == len(actual["input_ids"]) > (1 if isinstance(args[0], str) else len(args[0]))
    assert mapping == sorted(mapping)
    assert all(len(row) <= 64 for row in actual["input_ids"])


@pytest.mark.parametrize("strategy", [True, "longest_first", "only_first", "only_second"])
def test_truncation_without_overflow(hf, bk, strategy):
    long, short = [CONTEXT, NON_ASCII[0] + " " + CONTEXT], [AUSTEN[0], NON_ASCII[1]]
    pairs = (short, long) if strategy == "only_second" else (long, short)
    _, enc = both(hf, bk, *pairs, truncation=strategy, max_length=50, **FULL)
    assert "overflow_to_sample_mapping" not in enc
    assert {len(r) for r in enc["input_ids"]} == {50}


def test_squad_preprocessing(hf, bk):
    """HF's run_qa recipe: question + long context, only_second, stride, offsets, as tensors."""
    questions = [QUESTION, "Où est Pemberley ?"]
    contexts = [CONTEXT, NON_ASCII[4] + " " + CONTEXT]
    settings = dict(truncation="only_second", max_length=96, stride=32, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding="max_length")
    expected, actual = hf(questions, contexts, **settings), bk(questions, contexts, **settings)
    assert_same(expected, actual)
    tensors = bk(questions, contexts, return_tensors="pt", **settings)
    rows = len(actual["input_ids"])
    assert tensors["input_ids"].shape == (rows, 96) and tensors["input_ids"].dtype == torch.int64
    assert tensors["offset_mapping"].shape == (rows, 96, 2)
    assert tensors["overflow_to_sample_mapping"].tolist() == actual["overflow_to_sample_mapping"]
    for i in range(rows):
        sample = actual["overflow_to_sample_mapping"][i]
        context_tokens = [j for j, s in enumerate(actual.sequence_ids(i)) if s == 1]
        offsets = actual["offset_mapping"][i]
        start, end = offsets[context_tokens[0]][0], offsets[context_tokens[-1]][1]
        window = contexts[sample][start:end]
        assert window and window in contexts[sample]
        char = offsets[context_tokens[1]][0]
        assert actual.char_to_token(i, char, 1) == expected.char_to_token(i, char, 1) == context_tokens[1]
    # consecutive windows of one sample overlap by exactly `stride` context tokens
    first_two = [i for i, s in enumerate(actual["overflow_to_sample_mapping"]) if s == 0][:2]
    ids = [[t for t, s in zip(actual["input_ids"][i], actual.sequence_ids(i)) if s == 1] for i in first_two]
    assert ids[0][-32:] == ids[1][:32]


# ---------------------------------------------------------------------------- tensors

@pytest.mark.parametrize("kind", [None, "np", "pt"])
def test_return_tensors(hf, bk, kind):
    settings = dict(return_tensors=kind, return_special_tokens_mask=True)
    for args, padding in (((MIXED,), True), ((MIXED, MIXED[::-1]), "longest"), ((NON_ASCII[0],), False),
                          ((QUESTION, AUSTEN[0]), False)):
        expected, actual = both(hf, bk, *args, padding=padding, **settings)
        if kind is not None:
            for key, value in actual.items():
                assert isinstance(value, np.ndarray if kind == "np" else torch.Tensor), key
                assert value.dtype == (np.int64 if kind == "np" else torch.int64), key
                assert tuple(value.shape) == tuple(expected[key].shape), key
                assert value.ndim == 2  # one text keeps the batch dimension, as in HF
    offsets = bk(MIXED, padding=True, return_offsets_mapping=True, return_tensors=kind)["offset_mapping"]
    if kind is not None:
        assert tuple(offsets.shape) == (len(MIXED), len(offsets[0]), 2)


def test_single_text_as_tensors_feeds_a_model(bk):
    model = bertkit.bert_for_masked_lm_tiny().eval()
    enc = bk(AUSTEN[0], return_tensors="pt")
    assert enc["input_ids"].shape == (1, len(bk.encode(AUSTEN[0])))
    with torch.no_grad():
        out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    logits = out[0] if isinstance(out, tuple) else getattr(out, "logits", out)
    assert logits.shape[:2] == enc["input_ids"].shape


@pytest.mark.parametrize("kind", ["np", "pt"])
def test_tensors_of_unequal_lengths_need_padding(bk, kind):
    with pytest.raises(ValueError, match=r"different lengths.*padding"):
        bk(MIXED, return_tensors=kind)
    with pytest.raises(ValueError, match=r"different lengths.*padding"):
        bk(CONTEXT, truncation=True, max_length=40, return_overflowing_tokens=True, return_tensors=kind)
    enc = bk(CONTEXT, truncation=True, max_length=40, return_overflowing_tokens=True, return_tensors=kind,
             padding=True)
    assert enc["input_ids"].shape[1] == 40


# ---------------------------------------------------------------------------- pre-split words (NER)

WORDS = [["Elizabeth", "Bennet", "visited", "Pemberley", "in", "Derbyshire", "."],
         ["Mr.", "Darcy", "’s", "naïve", "façade", "東京", "!"],
         ["Netherfield"], ["Mrs", ".", "Bennet", "said", ",", "\u201cNonsense\u201d", "—", "Lydia", "laughed"]]


def test_split_into_words(hf, bk):
    settings = dict(is_split_into_words=True, **FULL)
    both(hf, bk, WORDS[1], **settings)
    both(hf, bk, WORDS, padding=True, **settings)
    both(hf, bk, WORDS, WORDS[::-1], padding=True, **settings)
    both(hf, bk, WORDS, truncation=True, max_length=8, stride=2, return_overflowing_tokens=True, padding=True,
         **settings)
    _, enc = both(hf, bk, WORDS, padding=True, is_split_into_words=True)  # lazy word_ids
    # NER label alignment: every word has a first token
    for i, words in enumerate(WORDS):
        assert sorted({w for w in enc.word_ids(i) if w is not None}) == list(range(len(words)))


# ---------------------------------------------------------------------------- encode / tokenize / decode

def test_encode_and_encode_plus(hf, bk):
    for text in AUSTEN[:3] + NON_ASCII:
        assert bk.encode(text) == hf.encode(text)
        assert bk.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False)
        assert bk.encode(text, QUESTION) == hf.encode(text, QUESTION)
        assert bk.encode(text, truncation=True, max_length=12) == hf.encode(text, truncation=True, max_length=12)
    assert bk.encode(AUSTEN[0], return_tensors="pt").tolist() == hf.encode(AUSTEN[0], return_tensors="pt").tolist()
    # encode_plus / batch_encode_plus are gone from transformers 5: the reference is __call__
    assert_same(hf(AUSTEN[0], NON_ASCII[0]), bk.encode_plus(AUSTEN[0], NON_ASCII[0]))
    assert_same(hf(NON_ASCII[1], **FULL), bk.encode_plus(NON_ASCII[1], **FULL))
    assert_same(hf(MIXED, padding=True), bk.batch_encode_plus(MIXED, padding=True))
    assert_same(hf(MIXED, MIXED[::-1], padding=True),
                bk.batch_encode_plus(list(zip(MIXED, MIXED[::-1])), padding=True))


def test_tokenize_and_convert(hf, bk):
    for text in AUSTEN[:4] + NON_ASCII:
        tokens = bk.tokenize(text)
        assert tokens == hf.tokenize(text)
        assert bk.convert_tokens_to_ids(tokens) == hf.convert_tokens_to_ids(tokens)
        assert bk.convert_ids_to_tokens(hf.convert_tokens_to_ids(tokens)) == tokens
    assert bk.tokenize(AUSTEN[0], pair=QUESTION) == hf.tokenize(AUSTEN[0], pair=QUESTION)
    unknown = ["notawordpiece", "[CLS]", "hello", "##s"]
    assert bk.convert_tokens_to_ids(unknown) == hf.convert_tokens_to_ids(unknown)
    assert bk.convert_tokens_to_ids("pemberley") == hf.convert_tokens_to_ids("pemberley")
    ids = [101, 0, 7592, 1005, 102, 103, 29611, 100]
    assert bk.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert bk.convert_ids_to_tokens(ids, skip_special_tokens=True) == hf.convert_ids_to_tokens(
        ids, skip_special_tokens=True)
    assert bk.convert_ids_to_tokens(7592) == hf.convert_ids_to_tokens(7592) == "hello"
    assert bk.convert_ids_to_tokens(np.int64(7592)) == "hello"
    assert bk.vocab_size == len(bk) == hf.vocab_size == 30522
    assert bk.get_vocab() == hf.get_vocab()
    for name in ("unk", "sep", "pad", "cls", "mask"):
        assert getattr(bk, f"{name}_token") == getattr(hf, f"{name}_token")
        assert getattr(bk, f"{name}_token_id") == getattr(hf, f"{name}_token_id")
    assert sorted(bk.all_special_ids) == sorted(hf.all_special_ids)


@pytest.mark.parametrize("skip", [False, True])
def test_decode(hf, bk, skip):
    """clean_up_tokenization_spaces=True: HF's output. False: bertkit returns the plain WordPiece join
    (intended: transformers 5's Rust WordPiece decoder tidies punctuation spacing regardless of the flag)."""
    texts = AUSTEN[:4] + NON_ASCII + ["I don't know; it's Mr. Darcy's, isn't it? 'Yes' -- we've seen."]
    for text in texts:
        ids = hf.encode(text, QUESTION)
        assert bk.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=True) == hf.decode(
            ids, skip_special_tokens=skip, clean_up_tokenization_spaces=True)
        tokens = [t for t in hf.convert_ids_to_tokens(ids) if not (skip and t in SPECIALS)]
        raw = " ".join(tokens).replace(" ##", "")
        assert bk.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False) == raw
        assert bk.decode(np.asarray(ids), skip_special_tokens=skip) == bk.decode(ids, skip_special_tokens=skip)
    batch = hf(MIXED, padding=True)["input_ids"]
    assert bk.batch_decode(batch, skip_special_tokens=skip) == hf.batch_decode(
        batch, skip_special_tokens=skip, clean_up_tokenization_spaces=True)
    assert bk.batch_decode(torch.tensor(batch), skip_special_tokens=skip) == bk.batch_decode(
        batch, skip_special_tokens=skip)


def test_decode_round_trips_ascii_text(bk):
    text = "it is a truth universally acknowledged, that a single man in possession of a good fortune."
    assert bk.decode(bk.encode(text), skip_special_tokens=True) == text


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
    # the same tokens (the Rust trainer's id order among equally frequent pieces varies from run to run)
    assert set(from_iterator.get_vocab()) == set(trained.get_vocab())
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
