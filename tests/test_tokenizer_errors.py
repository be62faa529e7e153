"""Bad tokenizer inputs give clear errors: no Rust panic escapes, ids outside the vocabulary, empty
training text; and tokenizer training is deterministic (the same vocabulary in any process).

The model-level cases (``answer`` with a long question, ``fill_mask`` with a cut-off mask)
are in test_text.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.checks import cut_lengths, is_panic, no_panics
from bertkit.tokenization.pipeline import build_backend, build_normalizer

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", ",", "café", "!"]  # one token each


@pytest.fixture(scope="module")
def tok():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def words(n: int, offset: int = 0) -> str:
    return " ".join(WORDS[(offset + i) % len(WORDS)] for i in range(n))


# ---------------------------------------------------------------------------- truncation never panics

def test_only_second_stride_longer_than_the_room_left_is_a_value_error(tok):
    question, context = "who " * 300 + "is it?", "the quick brown fox " * 100
    with pytest.raises(ValueError, match=r"stride=128 is too large.*text has 303 tokens.*"
                                         r"384 - 3 special tokens - 303 = 78 .*Use stride < 78"):
        tok([question], [context], truncation="only_second", max_length=384, stride=128,
            return_overflowing_tokens=True)
    # the same question with a context that fits needs no cut, so no error
    assert len(tok(question, "short context", truncation="only_second", max_length=384, stride=128)["input_ids"]) \
        == 303 + 2 + 3


def test_pair_problems_name_the_texts_and_the_batch_index(tok):
    texts, pairs = [words(3), words(12)], [words(20), words(20)]
    with pytest.raises(ValueError, match=r"'only_second' \(pair 1 of the batch\): text has 12 tokens"):
        tok(texts, pairs, truncation="only_second", max_length=20, stride=5, return_overflowing_tokens=True)
    with pytest.raises(ValueError, match=r"text_pair has 12 tokens.*shorter text_pair"):
        tok(pairs, texts, truncation="only_first", max_length=20, stride=5)
    with pytest.raises(ValueError, match=r"stride=7 is too large for truncation='longest_first'.*windows of 6"):
        tok(words(27), words(24), truncation="longest_first", max_length=16, stride=7,
            return_overflowing_tokens=True)
    # stride 0 cannot panic, but only_second still cannot cut a pair whose first text fills max_length
    with pytest.raises(ValueError, match=r"cannot truncate to max_length=20 with truncation='only_second': text "
                                         r"alone has 30 tokens, and the 17 tokens left after 3 special tokens "
                                         r"leave no room for text_pair"):
        tok(words(30), words(5), truncation="only_second", max_length=20)


def test_argument_types_and_ranges(tok):
    with pytest.raises(TypeError, match=r"max_length must be an integer >= 1 or None \(the model's limit\), got "
                                        r"max_length='10' \(str\)"):
        tok("a b", max_length="10")
    with pytest.raises(ValueError, match="stride must be an integer >= 0, got stride=-1"):
        tok("a b", truncation=True, max_length=10, stride=-1)
    for bad in (0, -2):
        with pytest.raises(ValueError, match=rf"pad_to_multiple_of must be an integer >= 1 or None \(no rounding\), "
                                             rf"got pad_to_multiple_of={bad}"):
            tok("a b", padding=True, pad_to_multiple_of=bad)
    with pytest.raises(ValueError, match="max_length must be an integer >= 1"):
        tok("a b", padding="max_length", max_length=-1)
    with pytest.raises(ValueError, match=r"stride=9 must be <= max_length - 2 = 8 even with add_special_tokens"):
        tok(words(30), add_special_tokens=False, truncation=True, max_length=10, stride=9)


def _raw_backend():
    """The Rust pipeline without bertkit's checks, as the oracle of what tokenizers accepts."""
    tok = BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)
    return build_backend(tok.vocab, lowercase=True, strip_accents=True, tokenize_chinese_chars=True,
                         special_tokens=tok.special_tokens, max_input_chars_per_word=100)


RAW = _raw_backend()


@st.composite
def pair_cases(draw) -> dict:
    """Pairs and truncation arguments that pass the checks made on the arguments alone."""
    add_special_tokens = draw(st.booleans())
    max_length = draw(st.integers(4, 48))
    stride_limit = min(max_length - (3 if add_special_tokens else 0) - 1, max_length - 2)
    return {"n1": draw(st.integers(0, 40)), "n2": draw(st.integers(0, 40)), "add_special_tokens": add_special_tokens,
            "truncation": draw(st.sampled_from(["longest_first", "only_first", "only_second"])),
            "max_length": max_length, "stride": draw(st.integers(0, stride_limit)), "overflow": draw(st.booleans())}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=pair_cases())
def test_pairs_fail_exactly_where_tokenizers_would_and_otherwise_match_it(tok, case):
    max_length, stride = case["max_length"], case["stride"]
    a, b = words(case["n1"]), words(case["n2"], offset=5)
    RAW.enable_truncation(max_length, stride=stride, strategy=case["truncation"])
    try:
        expected = RAW.encode(a, b, add_special_tokens=case["add_special_tokens"])
    except BaseException as error:  # a panic is what is being probed
        expected = error
    try:
        got = tok(a, b, truncation=case["truncation"], max_length=max_length, stride=stride,
                  add_special_tokens=case["add_special_tokens"], return_overflowing_tokens=case["overflow"])
    except ValueError as error:
        assert isinstance(expected, BaseException), f"rejected a pair tokenizers encodes: {error}"
        assert "(it panicked" not in str(error)  # caught by the checks, not by the panic net
        return
    assert not isinstance(expected, BaseException), f"tokenizers failed ({expected!r}) where bertkit did not"
    rows = [expected, *expected.overflowing] if case["overflow"] else [expected]
    assert got["input_ids"] == ([r.ids for r in rows] if case["overflow"] else expected.ids)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n1=st.integers(0, 30), n2=st.one_of(st.none(), st.integers(0, 30)), batch=st.booleans(),
       truncation=st.sampled_from([None, True, False, "longest_first", "only_first", "only_second"]),
       max_length=st.one_of(st.none(), st.integers(-1, 40)), stride=st.integers(-1, 40),
       add_special_tokens=st.booleans(), overflow=st.booleans(),
       padding=st.sampled_from([False, True, "max_length"]), pad_to_multiple_of=st.sampled_from([None, 0, 3, 8]))
def test_no_argument_combination_lets_a_panic_escape(tok, n1, n2, batch, truncation, max_length, stride,
                                                     add_special_tokens, overflow, padding, pad_to_multiple_of):
    a, b = words(n1), None if n2 is None else words(n2, offset=3)
    if batch:
        a, b = [a, words(n1 // 2)], None if b is None else [b, words(30 - n2)]
    try:
        enc = tok(a, b, truncation=truncation, max_length=max_length, stride=stride, padding=padding,
                  add_special_tokens=add_special_tokens, return_overflowing_tokens=overflow,
                  pad_to_multiple_of=pad_to_multiple_of, return_offsets_mapping=True)
    except (ValueError, TypeError) as error:
        assert "(it panicked" not in str(error), "a panic happened (caught, but the checks should prevent it)"
        return
    except BaseException as error:
        assert not is_panic(error), f"a Rust panic escaped: {error}"
        raise
    rows = enc["input_ids"] if enc["input_ids"] and isinstance(enc["input_ids"][0], list) else [enc["input_ids"]]
    if truncation not in (None, False, "do_not_truncate") and padding != "max_length" and not pad_to_multiple_of:
        assert all(len(r) <= (max_length or tok.model_max_length) for r in rows)


def test_a_panic_the_checks_miss_becomes_a_value_error():
    RAW.enable_truncation(8, stride=4, strategy="only_second")
    expected = (r"tokenizers library rejected stride=4 \(it panicked: `stride` must be strictly less than "
                r"`max_len=2`.*\)\. Use a smaller stride\.")
    with pytest.raises(ValueError, match=expected), no_panics(lambda: "stride=4", "Use a smaller stride."):
        RAW.encode("a b c", "d e f g h i j")


def test_cut_lengths_follow_tokenizers():
    assert cut_lengths(10, 3, 8, "only_first") == (5, 3)
    assert cut_lengths(10, 3, 8, "only_second") == (10, -2)  # cannot be cut: an error, not a negative length
    assert cut_lengths(10, 3, 8, "longest_first") == (5, 3)  # only the longer text is cut
    assert cut_lengths(9, 9, 7, "longest_first") == (3, 4)  # both halves; the second keeps the odd token
    assert cut_lengths(12, 9, 7, "longest_first") == (4, 3)  # ... unless the first is the longer one


# ---------------------------------------------------------------------------- ids outside the vocabulary

def test_decode_rejects_ids_outside_the_vocabulary(tok):
    with pytest.raises(ValueError, match=r"outside the vocabulary of 30522 tokens \(valid ids are 0 to 30521\): "
                                         r"-1 \(position 0\)"):
        tok.decode([-1])
    with pytest.raises(ValueError, match=r"99999 \(position 1\)"):
        tok.decode([101, 99999])
    with pytest.raises(ValueError, match=r"30522 \(position 0\), 40000 \(position 2\)"):
        tok.convert_ids_to_tokens(np.array([30522, 5, 40000]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.convert_ids_to_tokens(torch.tensor(-3))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.batch_decode([[101, 102], [101, 31000]])


def test_ids_must_be_integers(tok):
    with pytest.raises(TypeError, match=r"position 1 holds float 2\.5"):
        tok.decode([101, 2.5])
    with pytest.raises(TypeError, match="position 0 holds str"):
        tok.convert_ids_to_tokens(["101"])
    with pytest.raises(TypeError, match="batch_decode"):
        tok.decode([[101, 102]])
    with pytest.raises(TypeError, match="float"):
        tok.decode(torch.tensor([101.0]))


def test_valid_ids_in_every_container(tok):
    ids = tok.encode("Hello, world!")
    text = tok.decode(ids)
    assert text == "[CLS] hello, world! [SEP]"
    for container in (np.array(ids), np.array(ids, dtype=np.int32), torch.tensor(ids), tuple(ids)):
        assert tok.decode(container) == text
        assert tok.convert_ids_to_tokens(container) == tok.convert_ids_to_tokens(ids)
    assert tok.convert_ids_to_tokens(101) == tok.convert_ids_to_tokens(np.int64(101)) == \
        tok.convert_ids_to_tokens(torch.tensor(101)) == "[CLS]"
    assert tok.decode(7592) == "hello"
    assert tok.batch_decode(torch.tensor([ids, ids])) == [text, text]


def test_alignment_helpers_check_their_indices(tok):
    enc = tok(["a b", "c"], ["x", "y z"])
    assert enc.char_to_token(1, 0, sequence_index=1) == 3
    with pytest.raises(IndexError, match="batch_index=2 is out of range: this BatchEncoding holds 2 rows"):
        enc.tokens(2)
    with pytest.raises(ValueError, match="sequence_index must be 0"):
        enc.char_to_token(0, 0, sequence_index=2)
    with pytest.raises(ValueError, match="char_index must be >= 0"):
        enc.char_to_token(0, -1)


# ---------------------------------------------------------------------------- training

@pytest.mark.parametrize("content", ["", "\n\n   \n\t\n", "\x00\x01\n"])
def test_training_on_no_text_names_the_files(tmp_path, content):
    empty = tmp_path / "empty.txt"
    empty.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=r"the training file .*empty\.txt holds no text to learn"):
        BERTTokenizerFast.train([empty], vocab_size=100, show_progress=False)
    with pytest.raises(ValueError, match="the training iterator's 2 strings hold no text"):
        BERTTokenizerFast.train(iter([content, " "]), vocab_size=100, show_progress=False)


def test_cli_training_on_an_empty_file_fails(tmp_path, capsys):
    from bertkit.cli import main

    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_text("", encoding="utf-8")
    blank.write_text("  \n\n", encoding="utf-8")
    assert main(["tokenizer", "train", str(empty), str(blank), "--vocab-size", "100", "-o", str(tmp_path / "t")]) == 1
    assert f"bertkit: error: {empty} is empty (0 bytes)" in capsys.readouterr().err
    assert main(["tokenizer", "train", str(blank), str(blank), "--vocab-size", "100", "-o", str(tmp_path / "t")]) == 1
    assert f"bertkit: error: the training files {blank}, {blank} hold no text to learn" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_cli_says_when_the_text_gives_fewer_tokens_than_asked(tmp_path, capsys):
    from bertkit.cli import main

    corpus = tmp_path / "tiny.txt"
    corpus.write_text("emma woodhouse, handsome, clever, and rich\n" * 5, encoding="utf-8")
    assert main(["tokenizer", "train", str(corpus), "--vocab-size", "1000", "-o", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "-token vocabulary (fewer than --vocab-size 1000: no further pair of pieces occurs --min-frequency 2 " \
           "times in the text); saved to" in out


def test_vocab_size_too_small_for_the_characters():
    with pytest.raises(ValueError, match=r"vocab_size=20 cannot hold the 38 tokens .*\(5 special tokens, 19 "
                                         r"characters, 14 '##' continuations\); use vocab_size >= 38"):
        BERTTokenizerFast.train(iter(["the quick brown fox jumps"]), vocab_size=20, show_progress=False)


SAMPLE = austen_novels()["persuasion"][:300_000]


def _train_sample(**kwargs) -> list[str]:
    tok = BERTTokenizerFast.train(iter(SAMPLE.splitlines()), vocab_size=2000, show_progress=False, **kwargs)
    return tok.convert_ids_to_tokens(list(range(tok.vocab_size)))


def test_training_is_identical_across_processes():
    code = ("import sys; from bertkit.resources import austen_novels; from bertkit.tokenization import "
            "BERTTokenizerFast as T; text = austen_novels()['persuasion'][:300_000]; "
            "t = T.train(iter(text.splitlines()), vocab_size=2000, show_progress=False); "
            "sys.stdout.write('\\n'.join(t.convert_ids_to_tokens(list(range(t.vocab_size)))))")
    runs = [subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split("\n") for seed in ("1", "2")]
    here = _train_sample()
    assert runs[0] == runs[1] == here
    assert len(here) == 2000


def test_trained_vocabulary_layout():
    tokens = _train_sample()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # every character of the normalised text, in code point order; then their ## continuations; then merges
    normalized = build_normalizer(lowercase=True, strip_accents=True).normalize_str(SAMPLE)
    characters = sorted({c for c in normalized if not c.isspace()}, key=ord)
    assert tokens[5:5 + len(characters)] == characters
    rest = tokens[5 + len(characters):]
    continuations = rest[:next(i for i, t in enumerate(rest) if not (len(t) == 3 and t.startswith("##")))]
    assert continuations == sorted(continuations, key=lambda t: ord(t[2])) and {"##e", "##s", "##t"} <= set(rest)
    assert all(t[2:] in characters for t in continuations)


def test_alphabet_limit_keeps_the_most_frequent_characters_deterministically():
    text = "aaaa bbb cc d e f g hh ii jjj kk"  # ties at the cut: d e f g (1 each), c h i k (2 each)
    limited = [BERTTokenizerFast.train(iter([text] * 3), vocab_size=60, limit_alphabet=6, min_frequency=1,
                                       show_progress=False).get_vocab() for _ in range(3)]
    assert limited[0] == limited[1] == limited[2]
    counts = Counter(text.replace(" ", ""))
    expected = sorted(sorted(counts, key=lambda c: (-counts[c], c))[:6])
    vocab = limited[0]
    assert sorted((t for t in vocab if len(t) == 1), key=vocab.get) == expected == ["a", "b", "c", "h", "i", "j"]


TRICKY = ["ab\x1ccd ef\x0bgh ij\x85kl mn\u200bop qr\u2028st uv\u00a0wx",  # whitespace that normalisation deletes
          "Café naïve e\u0301te\u0301 ΟΔΥΣΣΕΥΣ Σίσυφος 東京タワー «quoted» l'été—done.",
          "x\u0301\u0302y  \u3000 z\t\r\nÅngström İstanbul ß ﬁne ½ ²"]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_first_pass_finds_the_pieces_the_trainer_would(do_lower_case):
    """The distinct chunks of the text give the same characters and continuations as the whole text."""
    from tokenizers import Tokenizer, models, trainers

    from bertkit.tokenization.pipeline import build_pre_tokenizer
    from bertkit.tokenization.training import _base_pieces, _Corpus

    def scout():
        backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        backend.normalizer = build_normalizer(lowercase=do_lower_case, strip_accents=do_lower_case)
        backend.pre_tokenizer = build_pre_tokenizer(tokenize_chinese_chars=True)
        return backend

    corpus = _Corpus(iter(TRICKY * 2), fix_final_sigmas=do_lower_case)
    whole = scout()
    whole.train_from_iterator(iter(corpus), trainers.WordPieceTrainer(vocab_size=0, show_progress=False,
                                                                      limit_alphabet=10_000))
    characters, continuations = _base_pieces(scout(), corpus, limit_alphabet=10_000)
    assert set(characters) | set(continuations) == set(whole.get_vocab())
    assert "##c" in continuations and "##k" in continuations  # ab\x1ccd is one word "abcd"
