"""Shared by test_tokenizer_api.py and test_tokenizer_api_persistence.py: texts, reference tokenizers, comparisons.

Real text (Jane Austen) plus non-ASCII texts, mixed in the same batches: bertkit encodes
pure-ASCII texts with a separate, faster pipeline and must still pad / align the whole
batch exactly as HF does.

transformers 5.x note: ``BertTokenizerFast(vocab_file=path)`` silently ignores ``vocab_file``
(the v5 constructor takes ``vocab=`` a path or dict and otherwise builds a 5-token vocabulary),
so the reference is built with ``vocab=`` and checked to really use the 30,522-token vocabulary.

Import this only after ``pytest.importorskip("transformers")``, and after
``pytest.register_assert_rewrite("tokenizer_api_helpers")`` so that the asserts below report
as they would in a test module. The fixtures are named ``hf`` and ``bk``; import
``hf_fixture`` / ``bk_fixture`` into a test module to use them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import transformers

from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast

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


def hf_tokenizer(vocab: str | Path | dict, **kwargs):
    tok = transformers.BertTokenizerFast(vocab=str(vocab) if isinstance(vocab, Path) else vocab, **kwargs)
    assert len(tok) > 5, "transformers built its placeholder vocabulary"
    return tok


@pytest.fixture(scope="module", name="hf")
def hf_fixture():
    tok = hf_tokenizer(BERT_BASE_UNCASED_VOCAB)
    assert tok.convert_tokens_to_ids("hello") == 7592
    return tok


@pytest.fixture(scope="module", name="bk")
def bk_fixture():
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
