"""Texts cut before tokenizing (bertkit.tokenization.cut): the tokens truncation keeps are the whole text's.

Checked on BERT's WordPiece, a byte-level BPE and a SentencePiece-style Unigram (trained here on the multilingual
fixture), on ordinary and odd text: accents that are stripped, CJK characters that become words, control
characters and zero-width joiners that vanish, Python-only whitespace (``\\x1c``), final sigmas, literal special
tokens, words past 100 characters, at both truncation sides, with a prompt and lower-casing.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from bertkit import BERTTokenizerFast
from bertkit.tokenization import TokenizerFast
from bertkit.tokenization.cut import CHARS_PER_TOKEN, FIRST_CHARS_PER_TOKEN, cut_pairs, cut_texts

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "tokenizers" / "multilingual.json").read_text("utf-8"))
SENTENCES = FIXTURE["heldout"] + FIXTURE["long"].split(". ")
ODD = ["ΣΑΣ ΟΔΟΣ", "e\u0301te\u0301", "\u3000", "\x1c", "a\u200db", "[SEP]", "<mask>", "日本語の文", "x" * 150, "  ",
       "\t\n", "\ufb01ne", "İstanbul", "😀🙂", "a.b,c", "\x00\x00", "\u00ad", "ǅ"]


@functools.cache
def wordpiece() -> BERTTokenizerFast:
    """bertkit's own BERT tokenizer (its ASCII fast path included)."""
    return BERTTokenizerFast.train(iter(FIXTURE["train"] + SENTENCES), vocab_size=800)


def _general(model, trainer, normalizer, pre_tokenizer, decoder) -> TokenizerFast:
    backend = Tokenizer(model)
    backend.normalizer, backend.pre_tokenizer, backend.decoder = normalizer, pre_tokenizer, decoder
    backend.train_from_iterator(FIXTURE["train"] + SENTENCES, trainer)
    return TokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")


@pytest.fixture(scope="module", params=["wordpiece", "bytelevel", "unigram"])
def tokenizer(request):
    if request.param == "wordpiece":
        return wordpiece()
    if request.param == "bytelevel":
        return _general(models.BPE(), trainers.BpeTrainer(vocab_size=800, special_tokens=["<unk>", "<pad>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                        None, pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel())
    return _general(models.Unigram(), trainers.UnigramTrainer(vocab_size=800, special_tokens=["<unk>", "<pad>"],
                                                              unk_token="<unk>"),
                    normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]),
                    pre_tokenizers.Metaspace(), decoders.Metaspace())


def texts(count: int = 40, seed: int = 0, most: int = 80) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = [rng.choice(SENTENCES) if rng.random() < 0.6 else rng.choice(ODD) for _ in range(rng.randint(5, most))]
        out.append(rng.choice([" ", "", "\n", "\x1c", "\u3000", "\x00 "]).join(parts))
    return out


def truncated(tokenizer, texts: list[str], limit: int, side: str, prefix: str = "", lower: bool = False):
    prepared = [(prefix + t).lower() if lower else prefix + t for t in texts]
    return tokenizer(prepared, truncation=True, max_length=limit, truncation_side=side)["input_ids"]


@pytest.mark.parametrize("limit", [6, 40])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("prefix,lower", [("", False), ("query: ", True)])
def test_the_kept_tokens_are_the_whole_texts(tokenizer, limit, side, prefix, lower):
    whole = texts()
    cut = cut_texts(tokenizer, whole, limit, side, prefix=prefix, lower=lower)
    assert truncated(tokenizer, cut, limit, side, prefix, lower) == truncated(tokenizer, whole, limit, side, prefix,
                                                                               lower)
    shortened = [c for c, t in zip(cut, whole) if len(c) < len(t)]
    assert len(shortened) > len(whole) // 2  # the test cuts something
    for c, t in zip(cut, whole):
        assert c == (t[:len(c)] if side == "right" else t[len(t) - len(c):])


@pytest.mark.parametrize("limit", [31, 40])  # an odd room gives its last token to the longer whole text
def test_pairs_keep_the_whole_pairs_tokens(tokenizer, limit):
    firsts, seconds = texts(30, seed=1, most=25), texts(30, seed=2, most=25)  # a whole pair's truncation is slow
    firsts[:4] = ["short", SENTENCES[0] * 3, firsts[5][:3000], seconds[6] + " more"]  # one cut, or both
    seconds[:4] = [seconds[9], seconds[8] + " x", seconds[7][:2000], seconds[6]]
    seconds[10:20] = SENTENCES[:10]  # long first texts with short partners: cut
    for truncation in ("longest_first", "only_second"):
        kept = ["what is this about?"] * len(firsts) if truncation == "only_second" else firsts
        a, b = cut_pairs(tokenizer, kept, seconds, limit, truncation=truncation)
        want = tokenizer(kept, seconds, truncation=truncation, max_length=limit)["input_ids"]
        assert tokenizer(a, b, truncation=truncation, max_length=limit)["input_ids"] == want, truncation
        assert sum(len(x) + len(y) < len(f) + len(t) for x, y, f, t in zip(a, b, kept, seconds)) >= 10


def test_windows_grow_past_what_gives_no_tokens_and_stop_at_the_bound():
    tokenizer = wordpiece()
    limit = 8
    sparse = ("\x00" * 40 + " word ") * 400  # 1 token per 46 characters: the first window holds too few
    (cut,) = cut_texts(tokenizer, [sparse], limit)
    assert FIRST_CHARS_PER_TOKEN * limit < len(cut) < len(sparse)
    assert truncated(tokenizer, [cut], limit, "right") == truncated(tokenizer, [sparse], limit, "right")
    nothing = "\x00" * 100_000 + " word"  # no token for 100k characters: cut at the bound, the one exception
    assert cut_texts(tokenizer, [nothing], limit) == ["\x00" * CHARS_PER_TOKEN * limit]
    short = "word " * FIRST_CHARS_PER_TOKEN
    assert cut_texts(tokenizer, [short, ""], limit)[0] is short  # short texts are never touched


def test_a_huge_text_costs_its_window():
    tokenizer = wordpiece()
    huge = "the naive facade of the elite " * 400_000  # 12 MB
    seen = []
    real = tokenizer.__class__.__call__

    def spy(self, text, *args, **kwargs):
        seen.extend(text if isinstance(text, list) else [text])
        return real(self, text, *args, **kwargs)

    tokenizer.__class__.__call__ = spy
    try:
        (cut,) = cut_texts(tokenizer, [huge], 16)
    finally:
        tokenizer.__class__.__call__ = real
    assert len(cut) <= CHARS_PER_TOKEN * 16 and max(map(len, seen)) <= CHARS_PER_TOKEN * 16


def test_bad_side_is_named():
    with pytest.raises(ValueError, match="side must be 'right' or 'left'"):
        cut_texts(None, ["x"], 8, "middle")
