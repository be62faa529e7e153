"""BERTTokenizerFast's HF-style API against transformers' BertTokenizerFast, output for output: encoding.

Real text (Jane Austen) plus non-ASCII texts, mixed in the same batches: bertkit encodes
pure-ASCII texts with a separate, faster pipeline and must still pad / align the whole
batch exactly as HF does. Covered: ids / masks / offsets / alignment helpers, truncation
with overflow windows (SQuAD-style), padding, tensors, pre-split words, decoding.
Save / load round trips, clear errors and vocabulary training: test_tokenizer_api_persistence.py.
The texts, the reference tokenizers and assert_same: tokenizer_api_helpers.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.register_assert_rewrite("tokenizer_api_helpers")

import bertkit  # noqa: E402
from bertkit.resources import BERT_BASE_UNCASED_VOCAB  # noqa: E402
from bertkit.tokenization import BatchEncoding, BERTTokenizerFast  # noqa: E402
from tokenizer_api_helpers import (  # noqa: E402
    AUSTEN,
    CONTEXT,
    FULL,
    MIXED,
    NON_ASCII,
    QUESTION,
    SPECIALS,
    assert_same,
    bk_fixture,  # noqa: F401  (the bk fixture)
    hf_fixture,  # noqa: F401  (the hf fixture)
    hf_tokenizer,
)

# ---------------------------------------------------------------------------- helpers

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


# ---------------------------------------------------------------------------- truncation side, threads
@pytest.mark.parametrize("pair", [False, True])
def test_left_truncation_matches_hf(hf, bk, pair):
    """``truncation_side="left"`` keeps each text's end, as HF's tokenizer attribute of the same name does."""
    texts, pairs = AUSTEN[:6], AUSTEN[6:12] if pair else None
    hf.truncation_side = "left"
    try:
        expected = hf(texts, pairs, truncation=True, max_length=24)
    finally:
        hf.truncation_side = "right"
    actual = bk(texts, pairs, truncation=True, max_length=24, truncation_side="left")
    assert actual["input_ids"] == expected["input_ids"]
    assert actual["token_type_ids"] == expected["token_type_ids"]
    with pytest.raises(ValueError, match="truncation_side must be 'right' or 'left'"):
        bk(texts, truncation=True, max_length=24, truncation_side="start")


def test_concurrent_calls_keep_their_own_truncation(bk):
    """One tokenizer shared by threads (a server's tokenization pool and its model thread): each call's
    truncation and padding hold, though the Rust backend keeps one configuration at a time."""
    from concurrent.futures import ThreadPoolExecutor

    texts = AUSTEN[:16]
    calls = [dict(), dict(truncation=True, max_length=12), dict(truncation=True, max_length=20, truncation_side="left"),
             dict(padding="max_length", max_length=200, truncation=True)]
    expected = [bk(texts, **kwargs)["input_ids"] for kwargs in calls]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: (i % 4, bk(texts, **calls[i % 4])["input_ids"]), range(400)))
    assert all(ids == expected[k] for k, ids in results)
