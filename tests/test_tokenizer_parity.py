"""Tokenizer parity: bertkit's BERTTokenizerFast against the pure-Python BERT tokenizers, token for token.

The references, all reading the same ``vocab.txt``:

* **Google**: google-research/bert ``tokenization.py``, which bertkit follows. It is not
  installable, so it is pytorch-pretrained-bert 0.6.2's ``BertTokenizer`` with its module
  function ``_is_control`` monkeypatched to Google's rule (``category in ("Cc", "Cf")``;
  ppb has ``category.startswith("C")``). Apart from that, the two BasicTokenizers differ
  only in ppb's ``never_split``: a special token that is a whole whitespace-separated
  token is kept whole by ppb (and HF, and bertkit, which recognise it anywhere) but split
  by Google, so literal special tokens here always stand between spaces. WordPiece's
  ``max_input_chars_per_word`` is 100 in ppb and in bertkit (Google's default is 200).
* **ppb**: pytorch-pretrained-bert 0.6.2 as published: it also drops private-use (Co),
  unassigned (Cn) and surrogate (Cs) characters.
* **HF legacy**: ``transformers``' ``BertTokenizerLegacy``: ppb's control rule, and
  ``unicodedata.normalize("NFC", ...)`` before splitting, visible when nothing decomposes
  the text afterwards (cased).

Cased runs use the bert-base-uncased vocabulary plus Capitalised and UPPER-CASE forms of
its tokens (:func:`write_cased_vocab`), so that cased text exercises WordPiece instead of
turning every capitalised word into [UNK].
"""

from __future__ import annotations

import functools
import re
import shutil
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytorch_pretrained_bert.tokenization as ppb_tokenization
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast

transformers.logging.set_verbosity_error()

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CASINGS = pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])


# ---------------------------------------------------------------------------- the references

def google_is_control(char: str) -> bool:
    """Google's ``_is_control`` (google-research/bert tokenization.py), verbatim in behaviour."""
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def google_tokens(ppb_tokenizer: ppb_tokenization.BertTokenizer, text: str) -> list[str]:
    """Google's tokens: ppb's tokenizer with its ``_is_control`` patched for the duration of the call."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ppb_tokenization, "_is_control", google_is_control)
        return ppb_tokenizer.tokenize(text)


def google_basic_tokens(ppb_tokenizer: ppb_tokenization.BertTokenizer, text: str) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ppb_tokenization, "_is_control", google_is_control)
        return ppb_tokenizer.basic_tokenizer.tokenize(text)


def write_cased_vocab(path: Path) -> Path:
    """bert-base-uncased's tokens, then the Capitalised and UPPER-CASE forms not already present.

    Ids of the original tokens are unchanged; every reference reads the same file.
    """
    tokens = BERT_BASE_UNCASED_VOCAB.read_text(encoding="utf-8").splitlines()
    seen = set(tokens)
    extra = []
    for token in tokens:
        if token in SPECIAL_TOKENS or token.startswith("[unused"):
            continue
        prefix, body = ("##", token[2:]) if token.startswith("##") else ("", token)
        for form in (body.capitalize(), body.upper()):
            candidate = prefix + form
            if form and candidate not in seen and candidate.split() == [candidate]:
                seen.add(candidate)
                extra.append(candidate)
    path.write_text("".join(t + "\n" for t in tokens + extra), encoding="utf-8")
    return path


@dataclass
class Side:
    """The tokenizers of one casing, all on one vocabulary file."""

    bertkit: BERTTokenizerFast
    ppb: ppb_tokenization.BertTokenizer
    hf: BertTokenizerLegacy

    def reference(self, name: str):
        return {"ppb": self.ppb, "hf_legacy": self.hf}[name]


@pytest.fixture(scope="module")
def sides(tmp_path_factory) -> dict[bool, Side]:
    """``{do_lower_case: Side}``: uncased on bert-base-uncased's vocabulary, cased on its cased extension."""
    cased_vocab = write_cased_vocab(tmp_path_factory.mktemp("cased") / "vocab.txt")
    out = {}
    for lower, path in ((True, BERT_BASE_UNCASED_VOCAB), (False, cased_vocab)):
        out[lower] = Side(BERTTokenizerFast(path, do_lower_case=lower),
                          ppb_tokenization.BertTokenizer(str(path), do_lower_case=lower),
                          BertTokenizerLegacy(str(path), do_lower_case=lower))
    return out


def describe_mismatch(name: str, text: str, ours: list[str], theirs: list[str]) -> str:
    i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"{name}: {text[:80]!r}... first difference at token {i}: bertkit {ours[max(0, i - 2):i + 3]} vs "
            f"reference {theirs[max(0, i - 2):i + 3]} (lengths {len(ours)} / {len(theirs)})")


# ---------------------------------------------------------------------------- Jane Austen's novels

#: Each reference pass over the 4 MB corpus takes ~5 s of pure Python; each is computed once.
#: Cased runs cover every paragraph too (the whole file stays well under a minute on 2 cores).
@pytest.fixture(scope="module")
def austen() -> list[str]:
    """Every paragraph of the six novels (split on blank lines)."""
    return [p for text in austen_novels().values() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


@pytest.fixture(scope="module")
def austen_bertkit(sides, austen):
    """``lower -> (tokens per paragraph, ids per paragraph)`` from one bertkit batch call, cached."""

    @functools.cache
    def encode(lower: bool) -> tuple[list[list[str]], list[list[int]]]:
        enc = sides[lower].bertkit(austen, add_special_tokens=False, return_offsets_mapping=True)
        return [enc.tokens(i) for i in range(len(austen))], enc["input_ids"]

    return encode


def test_austen_corpus_is_what_the_parity_tests_assume(austen):
    assert len(austen) > 10_000
    assert sum(map(len, austen)) > 3_900_000
    assert sum(not p.isascii() for p in austen) >= 1  # "£": one paragraph takes the full (non-ASCII) pipeline


@CASINGS
@pytest.mark.parametrize("reference", ["ppb", "hf_legacy"])
def test_austen_tokens_and_ids_match_reference(sides, austen, austen_bertkit, lower, reference):
    side = sides[lower]
    ref = side.reference(reference)
    tokens, ids = austen_bertkit(lower)
    mismatches = []
    for i, text in enumerate(austen):
        expected = ref.tokenize(text)
        if tokens[i] != expected or ids[i] != ref.convert_tokens_to_ids(expected):
            mismatches.append(describe_mismatch(f"paragraph {i}", text, tokens[i], expected))
    assert len(mismatches) == 0, f"{len(mismatches)} of {len(austen)} paragraphs differ:\n" + "\n".join(mismatches[:5])
    total = sum(map(len, tokens))
    unknown = sum(t.count("[UNK]") for t in tokens)
    assert total > 900_000 and unknown < 0.001 * total, (total, unknown)  # WordPiece really ran, cased too


# ---------------------------------------------------------------------------- a Unicode torture set

TORTURE: list[tuple[str, str]] = [
    ("empty", ""),
    ("only_whitespace", " \t\n\r \u3000\xa0 "),
    ("only_removed", "\x00\x01\ufffd\u200b\u00ad"),
    ("ascii_sentence", "The quick brown fox -- didn't he? -- jumped over 3.14 lazy dogs (and U.S.A. cats)!"),
    ("ascii_symbols", "$5 ^caret `tick ~tilde |pipe| <a href='x'>{y}</a> @user #tag 50% a&b a_b a\\b"),
    ("accents_precomposed", "Café naïve résumé Ångström Øresund façade jalapeño CAFÉ ÉCOLE"),
    ("accents_decomposed", "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m CAFE\u0301"),
    ("combining_stacked", "a\u0301\u0302\u0303b Z\u0351\u0315\u0360a\u0350l\u0352go\u0489 q\u0327\u0301"),
    ("combining_alone", "\u0301abc \u0300 x \u0301\u0302 \u20dd\u0489"),
    ("vietnamese", "Tiếng Việt có dấu: Nguyễn Trãi, Hà Nội"),
    ("cjk_basic", "中文分词测试，測試。日本語の文章です"),
    ("cjk_ext_a", "\u3400\u4db5\u4dbf\u4dc0abc"),
    ("cjk_ext_b", "x\U00020000\U00020001y\U0002a6d6\U0002a6dfz"),
    ("cjk_ext_c_d", "\U0002a700\U0002b734\U0002b738\U0002b740\U0002b81d"),
    # U+2B820..U+2B91F: Google's range starts at 0x2B820; HF's Rust BertNormalizer has 0x2B920
    ("cjk_ext_e_f", "a\U0002b820\U0002b821b\U0002b91f\U0002b920c\U0002cea1\U0002ceb0\U0002ebe0d"),
    # the blocks' unassigned tails (Cn in this Python's Unicode 14): inside Google's ranges all the same
    ("cjk_unassigned_tails", "a\U0002a6e0b\U0002b739\U0002b73fc\U0002b81fd\U0002ceafe"),
    ("cjk_ext_g", "\U00030000\U0003134a text"),
    ("cjk_compatibility", "\uf900\uf902\ufa0e\ufad9 \U0002f800\U0002fa1d \uf902x"),
    ("cjk_radicals_and_strokes", "\u2f00\u2e80\u31c0\u3005\u3007"),
    ("hangul", "안녕하세요, 세계! 한국어 텍스트입니다."),
    ("hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab"),
    ("kana", "ひらがな カタカナ ｶﾀｶﾅ ｰ ー 「括弧」"),
    ("thai", "ภาษาไทย สวัสดีครับ ๑๒๓"),
    ("arabic", "مرحبا بالعالم، كيف حالك؟ \u0627\u064e\u0644\u0652 ١٢٣"),
    ("hebrew", "שָׁלוֹם עוֹלָם"),
    ("devanagari_mc", "हिन्दी नमस्ते कि की कु क्ष ०१२"),
    ("tamil_bengali", "தமிழ் கொ বাংলা কো"),
    ("greek_final_sigma", "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ. Α'Σ ΑΣ'Α Σ ΣΑ ΑΣΑ ΑΣ ΑΣ.Β Α.Σ"),
    ("greek_sigma_neighbours", "ΑΣ中ΑΣ ΑΣ\u200bΒ ΑΣ\xad ΑΣ\u0301 Α\u0301Σ 1Σ ΑΣ1 ΑΣ-Β ΑΣ\u3000"),
    ("greek_sigma_mixed_case", "ὈΔΥΣΣΕΎΣ Ὀδυσσεύς σς ΣΣ ΑΣΣ aΣ Σa"),
    ("turkish_dotted", "İstanbul İSTANBUL ıi IŞIK i̇"),
    ("emoji", "I ❤️ pizza 🍕! 👍🏽 🇫🇷 ☺ ✓ ★"),
    ("emoji_zwj", "👨\u200d👩\u200d👧\u200d👦 👩🏽\u200d💻 🏳️\u200d🌈"),
    ("zero_width_and_soft_hyphen", "zero\u200bwidth join\u200dner non\u200cjoiner soft\xadhyphen word\u2060joiner "
                                   "bom\ufeffx lrm\u200erlm\u200fy"),
    ("tag_chars", "flag\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007fend"),
    ("ascii_controls", "a\x0bb\x0cc\x1cd\x1de\x1ef\x1fg\x7fh\x01i\x08j\x1bk"),
    ("c1_controls", "nel\x85here csi\x9bthere \x80\x9f"),
    ("nul_and_replacement", "nul\x00here repl\ufffdhere \x00 \ufffd x\x00y\ufffdz"),
    ("line_and_paragraph_separators", "line\u2028sep para\u2029sep \u2028\u2029"),
    ("unicode_spaces", "no\xa0break ideo\u3000space thin\u2009space en\u2002em\u2003x narrow\u202fnbsp "
                       "math\u205fsp ogham\u1680x hair\u200ax"),
    ("crlf_tabs", "one\r\ntwo\tthree\rfour\n\nfive"),
    ("fullwidth_ascii", "ＡＢＣ　ｄｅｆ！１２３？ ＂ｑｕｏｔｅ＂ ＜ｔａｇ＞"),
    ("ligatures_and_titlecase", "ﬁnance ﬂow ﬀ ﬃ ǅ Ǆ ǆ ß ẞ Straße"),
    ("unicode_punctuation", "«quotes» „German“ ‘single’ — dash – en … ¿Qué? ¡Hola! ‹›·‧※"),
    ("symbols_not_punctuation", "€5 £5 ¥5 ±×÷ ©®™ °C ∑∫√ ← → ♠♥ ¨´"),
    ("math_alphanumeric", "𝐀𝐁𝐂 𝔸𝔹ℂ 𝒶𝒷 𝟘𝟙"),
    ("digits_and_numbers", "١٢٣ ४५६ ①②③ ½¾ Ⅻ ²³"),
    ("mixed_scripts", "abcабв中文αβγ한국ひら"),
    ("cyrillic", "Привет, МИР! Ёлка ё й"),
    ("variation_selectors", "❤\ufe0f ❤\ufe0e 葛\U000e0100"),
    ("word_100", "ab" * 50),
    ("word_101", "ab" * 50 + "a"),
    ("word_100_and_101_in_text", "start " + "x" * 100 + " mid " + "y" * 101 + " end"),
    ("word_100_accented", "é" * 100 + " " + "é" * 101),
    ("word_decomposed_over_100", "e\u0301" * 60),
    ("word_100_cjk_split", "a" * 60 + "中" + "b" * 60),
    ("literal_special_tokens", "fill the [MASK] here [SEP] and [CLS] then [PAD] or [UNK] ."),
    ("special_lookalikes", "[mask] [ MASK ] [MASKED] MASK [unused0] [UNUSED1]"),
    ("private_use", "a\ue000b \ue001 \U000f0000 \U00100000x"),
    ("unassigned", "a\u0378b \U0001fffe \u0888? \U000e0080"),
    ("lone_surrogates", "x\udfffy \ud800 ΑΣ\ud800 \udc00\ud83d"),
]
TORTURE_NAMES = [name for name, _ in TORTURE]
assert len(set(TORTURE_NAMES)) == len(TORTURE_NAMES)


def differs_by_design(text: str, reference: str, lower: bool) -> str | None:
    """Why ``reference`` may differ from Google on ``text`` by its documented rules (None: it must not)."""
    dropped = sorted({unicodedata.category(c) for c in text} & {"Co", "Cn", "Cs"})
    if dropped:
        return f"{reference} drops {'/'.join(dropped)} characters; Google keeps them"
    if reference == "hf_legacy" and not lower and unicodedata.normalize("NFC", text) != text:
        return "HF legacy composes (NFC) before splitting"
    return None


@CASINGS
@pytest.mark.parametrize("text", [text for _, text in TORTURE], ids=TORTURE_NAMES)
def test_torture_matches_google(sides, lower, text):
    side = sides[lower]
    expected = google_tokens(side.ppb, text)
    assert side.bertkit.tokenize(text) == expected
    assert side.bertkit.encode(text, add_special_tokens=False) == side.ppb.convert_tokens_to_ids(expected)
    assert side.bertkit(text)["input_ids"] == side.ppb.convert_tokens_to_ids(["[CLS]", *expected, "[SEP]"])


@CASINGS
@pytest.mark.parametrize("reference", ["ppb", "hf_legacy"])
def test_torture_matches_ppb_and_hf_legacy_where_not_different_by_design(sides, lower, reference):
    side = sides[lower]
    ref = side.reference(reference)
    compared, mismatches = [], []
    for name, text in TORTURE:
        if differs_by_design(text, reference, lower):
            continue
        compared.append(name)
        expected = ref.tokenize(text)
        ours = side.bertkit.tokenize(text)
        if ours != expected or side.bertkit.encode(text, add_special_tokens=False) != ref.convert_tokens_to_ids(
                expected):
            mismatches.append(describe_mismatch(name, text, ours, expected))
    assert mismatches == []
    assert len(compared) >= len(TORTURE) - 12, compared  # the subset is most of the set


def test_documented_differences_from_ppb_and_hf_legacy(sides, tmp_path):
    """Where bertkit (= Google) and ppb / HF legacy part ways, by their rules."""
    uncased, cased = sides[True], sides[False]
    # private use (Co; likewise unassigned Cn): Google keeps the character, a word of its own -> [UNK];
    # ppb and HF legacy remove it as a "control" (category starts with "C")
    for side in (uncased, cased):
        text = "a \ue000 b"
        assert side.bertkit.tokenize(text) == google_tokens(side.ppb, text) == ["a", "[UNK]", "b"]
        assert side.ppb.tokenize(text) == side.hf.tokenize(text) == ["a", "b"]
        text = "a \u0378 b"  # unassigned
        assert side.bertkit.tokenize(text) == google_tokens(side.ppb, text) == ["a", "[UNK]", "b"]
        assert side.ppb.tokenize(text) == side.hf.tokenize(text) == ["a", "b"]

    # decomposed "e\u0301", cased: HF legacy composes it (NFC) to "é"; Google and bertkit keep two characters.
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, "caf", "##e", "##\u0301", "##é", "e", "\u0301", "é"]) + "\n",
                     encoding="utf-8")
    ours = BERTTokenizerFast(vocab, do_lower_case=False)
    ppb = ppb_tokenization.BertTokenizer(str(vocab), do_lower_case=False)
    hf = BertTokenizerLegacy(str(vocab), do_lower_case=False)
    text = "cafe\u0301"
    assert ours.tokenize(text) == google_tokens(ppb, text) == ppb.tokenize(text) == ["caf", "##e", "##\u0301"]
    assert hf.tokenize(text) == ["caf", "##é"]
    assert hf.basic_tokenizer.tokenize(text) == ["café"] != google_basic_tokens(ppb, text)
    # lower-cased, the accent is stripped after NFD either way: no difference
    lowered = [BERTTokenizerFast(vocab).tokenize(text), BertTokenizerLegacy(str(vocab)).tokenize(text)]
    assert lowered == [["caf", "##e"]] * 2

    # the same NFC step maps CJK compatibility ideographs to unified ones, and joins Hangul jamo, cased
    text = "\uf902"  # CJK COMPATIBILITY IDEOGRAPH-F902 -> U+8ECA 車, which the vocabulary has
    assert cased.bertkit.tokenize(text) == google_tokens(cased.ppb, text) == ["[UNK]"]
    assert cased.hf.tokenize(text) == ["車"]
    assert uncased.bertkit.tokenize(text) == uncased.hf.tokenize(text) == ["車"]  # NFD does it when lower-casing
    text = "\u1100\u1161"  # HANGUL CHOSEONG KIYEOK + JUNGSEONG A
    assert cased.bertkit.tokenize(text) == google_tokens(cased.ppb, text) == ["ᄀ", "##ᅡ"]
    assert cased.hf.tokenize(text) == ["[UNK]"]  # composed to the syllable 가, not in the vocabulary

    # U+2B820..U+2B91F (CJK extension E) are CJK for Google and bertkit; HF's fast tokenizer (the Rust
    # BertNormalizer, whose range reads 0x2B920..=0x2CEAF) leaves them inside words
    directory = tmp_path / "uncased"
    directory.mkdir()
    shutil.copy(BERT_BASE_UNCASED_VOCAB, directory / "vocab.txt")
    hf_fast = transformers.BertTokenizerFast.from_pretrained(directory)
    text = "a\U0002b820b"
    assert uncased.bertkit.tokenize(text) == google_tokens(uncased.ppb, text) == uncased.hf.tokenize(text) == [
        "a", "[UNK]", "b"]
    assert hf_fast.tokenize(text) == ["[UNK]"]
    assert hf_fast.tokenize("a\U0002b920b") == ["a", "[UNK]", "b"]

    # special tokens: recognised anywhere by bertkit and HF, by ppb only as whole whitespace tokens, never by Google
    text = "a[MASK]b"
    assert uncased.bertkit.tokenize(text) == uncased.hf.tokenize(text) == ["a", "[MASK]", "b"]
    assert uncased.ppb.tokenize(text) == google_tokens(uncased.ppb, text) == ["a", "[", "mask", "]", "b"]
    text = "a [MASK] b"
    assert uncased.bertkit.tokenize(text) == uncased.ppb.tokenize(text) == ["a", "[MASK]", "b"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(uncased.ppb.basic_tokenizer, "never_split", ())  # Google has no never_split
        assert google_tokens(uncased.ppb, text) == ["a", "[", "mask", "]", "b"]


# ---------------------------------------------------------------------------- properties

ASSIGNED = st.characters(exclude_categories=("Cn", "Cs"))  # = blacklist_categories, its older name
ANY_CHARACTER = st.characters(exclude_categories=())  # surrogates, private use and unassigned too
ASCII_WORDS = ("the", "Elizabeth", "didn't", "U.S.A.", "co-operate", "Mr.", "1,000", "x" * 100, "y" * 101,
               "ΟΔΟΣ", "naïve", "Caf\u00e9", "cafe\u0301", "İs", "中文", "ﬁne")
_word = st.one_of(
    st.sampled_from(ASCII_WORDS),
    st.text(st.characters(max_codepoint=0x7F), min_size=1, max_size=8),  # ASCII controls included
    st.text(ASSIGNED, min_size=1, max_size=4),
    st.text(st.sampled_from("ΣΑΟΔΥΩσςάΆ'.·-_"), min_size=1, max_size=6),  # Greek capitals: final sigma
    st.text(st.characters(categories=("Mn", "Mc", "Me", "Cf", "Cc", "Zs", "Zl", "Zp", "Lm", "Sk")),
            min_size=1, max_size=3),
)
_separator = st.sampled_from(["", "", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2028", "\x1c", "\x85",
                              "\u200b", "\xad", ".", "'", "中", "\U00020000"])
MIXED = st.lists(st.tuples(_word, _separator), max_size=12).map(lambda parts: "".join(w + s for w, s in parts))


def _no_special_literal(text: str) -> bool:
    return not any(token in text for token in SPECIAL_TOKENS)


TEXT = st.one_of(st.text(ASSIGNED, max_size=50), MIXED).filter(_no_special_literal)


@CASINGS
@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_arbitrary_text_matches_google(sides, lower, text):
    side = sides[lower]
    assert side.bertkit.tokenize(text) == google_tokens(side.ppb, text)


def _with_non_ascii(text: str, char: str, at: int) -> str:
    at %= len(text) + 1
    return text[:at] + char + text[at:]


NON_ASCII_TEXT = st.builds(_with_non_ascii, TEXT, st.characters(min_codepoint=0x80, exclude_categories=("Cs",)),
                           st.integers(0, 60))
ASCII_TEXT = st.one_of(st.text(st.characters(max_codepoint=0x7F), max_size=40),
                       st.lists(st.sampled_from([w for w in ASCII_WORDS if w.isascii()]), max_size=8).map(" ".join))


@CASINGS
@settings(max_examples=100, deadline=None)
@given(ascii_texts=st.lists(ASCII_TEXT, min_size=1, max_size=4),
       other_texts=st.lists(NON_ASCII_TEXT, min_size=1, max_size=4), rng=st.randoms(use_true_random=False))
def test_mixed_ascii_and_non_ascii_batch_equals_each_text_alone(sides, lower, ascii_texts, other_texts, rng):
    tok = sides[lower].bertkit
    batch = ascii_texts + other_texts
    rng.shuffle(batch)
    alone = [tok(text)["input_ids"] for text in batch]
    assert tok(batch)["input_ids"] == alone

    padded = tok(batch, padding=True, pad_to_multiple_of=8)
    width = -(-max(map(len, alone)) // 8) * 8
    for row, mask, ids in zip(padded["input_ids"], padded["attention_mask"], alone):
        assert len(row) == width
        assert row == ids + [tok.pad_token_id] * (width - len(ids))
        assert mask == [1] * len(ids) + [0] * (width - len(ids))

    seconds = batch[::-1]  # pairs mixing ASCII and non-ASCII halves
    pairs = tok(batch, seconds)
    assert pairs["input_ids"] == [tok(a, b)["input_ids"] for a, b in zip(batch, seconds)]


@CASINGS
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(ANY_CHARACTER, max_size=60), MIXED), other=st.text(ANY_CHARACTER, max_size=20))
def test_arbitrary_unicode_never_raises_and_offsets_lie_inside_the_text(sides, lower, text, other):
    tok = sides[lower].bertkit
    enc = tok(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    spans = [span for span, special in zip(enc["offset_mapping"], enc["special_tokens_mask"]) if not special]
    for start, end in spans:
        assert 0 <= start < end <= len(text), (start, end, len(text))
    assert [s for s, _ in spans] == sorted(s for s, _ in spans)
    assert [e for _, e in spans] == sorted(e for _, e in spans)
    assert len(enc.tokens()) == len(enc["input_ids"])
    tok.decode(enc["input_ids"])
    tok([text, other, ""], padding=True, truncation=True, max_length=16)
    tok(text, other, truncation=True, max_length=16)
    tok(text, truncation=True, max_length=8, stride=2, return_overflowing_tokens=True)


@pytest.fixture(scope="module")
def whole_words(sides) -> list[str]:
    """Vocabulary entries (no "##", no special / unused tokens) that Google's BasicTokenizer keeps as one word."""
    side = sides[True]
    words = [w for w in side.bertkit.vocab if not w.startswith("##") and w not in SPECIAL_TOKENS]
    return [w for w in words if google_basic_tokens(side.ppb, w) == [w]]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_decode_of_encode_joins_the_basic_tokens(sides, whole_words, data):
    side = sides[True]
    words = data.draw(st.lists(st.sampled_from(whole_words), min_size=1, max_size=24))
    separators = data.draw(st.lists(st.sampled_from([" ", "  ", "\n", "\t", " \u3000 "]), min_size=len(words),
                                    max_size=len(words)))
    text = "".join(w + s for w, s in zip(words, separators))
    basic = " ".join(google_basic_tokens(side.ppb, text))
    assert basic == " ".join(words)
    ids = side.bertkit.encode(text)
    assert side.bertkit.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == basic
    assert side.bertkit.decode(ids, clean_up_tokenization_spaces=False) == f"[CLS] {basic} [SEP]"
