"""Test tokenizers for tests/test_tokenizer_json.py, built here (no downloads) like each family's real one.

Each is trained with the ``tokenizers`` library on Jane Austen plus a few multilingual sentences
(tests/fixtures/tokenizers/multilingual.json, "train"), then saved as an HF directory by transformers'
own class for the family (``RobertaTokenizerFast(tokenizer_object=...).save_pretrained(...)``, ...):

* roberta:     byte-level BPE, RobertaProcessing (``<s> A </s></s> B </s>``), RobertaTokenizer;
* roberta_ps:  the same with ``add_prefix_space=True`` and ``trim_offsets=False`` in its config;
* xlmr:        SentencePiece-style Unigram (NFKC, Metaspace), ``<s> A </s></s> B </s>``, XLMRobertaTokenizer;
* camembert:   Unigram with CamemBERT's ``<s>NOTUSED`` tokens in the vocabulary, CamembertTokenizer;
* mpnet:       WordPiece + BertNormalizer with ``<s>`` / ``</s>`` / ``[UNK]``, MPNetTokenizer;
* modernbert:  byte-level BPE with ``[CLS] A [SEP] B [SEP]`` and an lstrip ``[MASK]``, the generic
               PreTrainedTokenizerFast without token_type_ids (as ModernBERT's is);
* bert / distilbert / electra: BERT's WordPiece (BertTokenizerFast / DistilBertTokenizerFast /
               ElectraTokenizerFast), which bertkit loads with BERTTokenizerFast.

Import after ``pytest.importorskip("transformers")``.
"""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertkit.resources import austen_novels

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "tokenizers" / "multilingual.json").read_text("utf-8"))
HELDOUT: list[str] = FIXTURE["heldout"]
LONG: str = FIXTURE["long"]
VOCAB_SIZE = 800

#: directory name -> the class bertkit's loader must pick
EXPECTED_CLASS = {"roberta": "TokenizerFast", "roberta_ps": "TokenizerFast", "xlmr": "TokenizerFast",
                  "camembert": "TokenizerFast", "mpnet": "TokenizerFast", "modernbert": "TokenizerFast",
                  "bert": "BERTTokenizerFast", "distilbert": "BERTTokenizerFast", "electra": "BERTTokenizerFast"}
GENERAL = [name for name, cls in EXPECTED_CLASS.items() if cls == "TokenizerFast"]


def training_texts() -> list[str]:
    lines = [line for line in austen_novels()["persuasion"].splitlines() if line.strip()][:2500]
    return lines + FIXTURE["train"] * 3


def _byte_level_bpe(texts: list[str], specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _unigram(texts: list[str], specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                                           unk_token="<unk>"))
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", bos), ("</s>", eos)])
    return tok


def _wordpiece(texts: list[str], specials: list[str], single: str, pair: str, inserted: list[str]) -> Tokenizer:
    unk = "[UNK]"
    tok = Tokenizer(models.WordPiece(unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in inserted])
    return tok


def build_directories(root: Path) -> dict[str, Path]:
    """Train the test tokenizers and save each as transformers saves it; ``{name: directory}``."""
    texts = training_texts()
    out = {name: root / name for name in EXPECTED_CLASS}

    roberta = _byte_level_bpe(texts, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    roberta.post_processor = processors.RobertaProcessing(("</s>", roberta.token_to_id("</s>")),
                                                          ("<s>", roberta.token_to_id("<s>")))
    transformers.RobertaTokenizerFast(tokenizer_object=roberta).save_pretrained(out["roberta"])
    transformers.RobertaTokenizerFast(tokenizer_object=roberta, add_prefix_space=True,
                                      trim_offsets=False).save_pretrained(out["roberta_ps"])

    xlmr = _unigram(texts, ["<s>", "<pad>", "</s>", "<unk>"])
    transformers.XLMRobertaTokenizerFast(tokenizer_object=xlmr).save_pretrained(out["xlmr"])
    camembert = _unigram(texts, ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"])
    transformers.CamembertTokenizerFast(tokenizer_object=camembert).save_pretrained(out["camembert"])

    mpnet = _wordpiece(texts, ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"], "<s> $A </s>",
                       "<s> $A </s> </s> $B </s>", ["<s>", "</s>"])
    transformers.MPNetTokenizerFast(tokenizer_object=mpnet).save_pretrained(out["mpnet"])

    modern = _byte_level_bpe(texts, ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "<|endoftext|>"])
    modern.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", modern.token_to_id("[CLS]")), ("[SEP]", modern.token_to_id("[SEP]"))])
    modern.add_special_tokens([AddedToken("[MASK]", special=True, normalized=False, lstrip=True)])
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=modern, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"], model_max_length=64,
        clean_up_tokenization_spaces=True).save_pretrained(out["modernbert"])

    bert = _wordpiece(texts, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[CLS] $A [SEP]",
                      "[CLS] $A [SEP] $B:1 [SEP]:1", ["[CLS]", "[SEP]"])
    for name, cls in (("bert", transformers.BertTokenizerFast), ("distilbert", transformers.DistilBertTokenizerFast),
                      ("electra", transformers.ElectraTokenizerFast)):
        cls(tokenizer_object=bert).save_pretrained(out[name])
    return out


def edit_json(path: Path, edit) -> None:
    """Apply ``edit`` to the parsed JSON file ``path`` and write it back."""
    data = json.loads(path.read_text("utf-8"))
    edit(data)
    path.write_text(json.dumps(data, ensure_ascii=False), "utf-8")


def plain(value):
    """Lists (of lists) of ints / [start, end] pairs, whatever container the value came in."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def rows(enc) -> int:
    ids = plain(enc["input_ids"])
    return len(ids) if ids and isinstance(ids[0], list) else 1


def assert_same(expected, actual, context: str = "") -> None:
    """Same keys and values, and per row the same tokens(), word_ids() and sequence_ids()."""
    assert set(actual) == set(expected), context
    for key in expected:
        assert plain(actual[key]) == plain(expected[key]), f"{context}: {key}"
    assert rows(actual) == rows(expected), context
    for i in range(rows(expected)):
        assert actual.tokens(i) == expected.tokens(i), f"{context}: tokens of row {i}"
        assert actual.word_ids(i) == expected.word_ids(i), f"{context}: word_ids of row {i}"
        assert actual.sequence_ids(i) == expected.sequence_ids(i), f"{context}: sequence_ids of row {i}"
