"""Tiny checkpoints of each encoder family, written by HF transformers itself (a test-only dependency): the
directories a user downloads from the hub, with the family's own tokenizer kind trained here on Jane Austen.

``family_dir(root, family, head)`` -> a directory holding ``config.json``, ``model.safetensors`` and the HF
fast tokenizer files of that family: byte-level BPE (RoBERTa, ModernBERT), SentencePiece-style Unigram
(XLM-RoBERTa), WordPiece with ``<s>``/``</s>`` (MPNet), BERT's WordPiece with ``[CLS]``/``[SEP]`` (DistilBERT,
ELECTRA). Random weights (seeded), odd sizes.
"""

from __future__ import annotations

import functools
import lzma
import pathlib

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

RESOURCES = pathlib.Path(__file__).resolve().parents[1] / "src" / "bertkit" / "resources" / "austen"
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3 as fairseq's dictionary; <mask> is added last
SIZES = dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52)
FAMILIES = ("roberta", "xlm-roberta", "mpnet", "modernbert")
#: every family a checkpoint directory can be made of (those above, and BERT's WordPiece ones)
ALL_FAMILIES = (*FAMILIES, "distilbert", "electra")


@functools.cache
def austen_lines(limit: int = 3000) -> tuple[str, ...]:
    with lzma.open(RESOURCES / "persuasion.txt.xz", "rt", encoding="utf-8") as f:
        text = f.read()
    return tuple(line for line in text.splitlines() if line.strip())[:limit]


def _byte_level_bpe(vocab_size: int = 400) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(austen_lines(), trainer)
    tok.add_special_tokens(["<mask>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    return tok


def _unigram(vocab_size: int = 300) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS, unk_token="<unk>")
    tok.train_from_iterator(austen_lines(), trainer)
    tok.add_special_tokens(["<mask>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def _mpnet_wordpiece(vocab_size: int = 300) -> Tokenizer:
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(austen_lines(), trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    tok.add_special_tokens(["<mask>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


@functools.cache
def _bert_vocab(vocab_size: int = 300) -> dict[str, int]:
    """A lower-cased WordPiece vocabulary with BERT's special tokens (``[PAD]`` id 0), trained here."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(austen_lines(), trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    return tok.get_vocab()


def hf_tokenizer(family: str):
    """The family's HF fast tokenizer (transformers' own class) over a tokenizer trained here."""
    import transformers

    special = dict(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                   pad_token="<pad>", mask_token="<mask>")
    if family == "roberta":
        return transformers.RobertaTokenizerFast(tokenizer_object=_byte_level_bpe(), **special)
    if family == "xlm-roberta":
        return transformers.XLMRobertaTokenizerFast(tokenizer_object=_unigram(), **special)
    if family == "mpnet":
        return transformers.MPNetTokenizerFast(tokenizer_object=_mpnet_wordpiece(), **special)
    if family == "modernbert":
        return transformers.PreTrainedTokenizerFast(tokenizer_object=_byte_level_bpe(), **special)
    if family == "distilbert":
        return transformers.DistilBertTokenizerFast(vocab=_bert_vocab())
    if family == "electra":
        return transformers.ElectraTokenizerFast(vocab=_bert_vocab())
    raise ValueError(family)


def hf_config(family: str, vocab_size: int, **overrides):
    import transformers

    ids = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    if family == "roberta":
        return transformers.RobertaConfig(vocab_size=vocab_size, max_position_embeddings=66, type_vocab_size=1,
                                          **ids, **SIZES, **overrides)
    if family == "xlm-roberta":
        return transformers.XLMRobertaConfig(vocab_size=vocab_size, max_position_embeddings=66, type_vocab_size=1,
                                             **ids, **SIZES, **overrides)
    if family == "mpnet":
        return transformers.MPNetConfig(vocab_size=vocab_size, max_position_embeddings=66, **ids, **SIZES,
                                        **overrides)
    if family == "modernbert":
        return transformers.ModernBertConfig(vocab_size=vocab_size, max_position_embeddings=64, pad_token_id=1,
                                             bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2,
                                             global_attn_every_n_layers=2, local_attention=8, **SIZES, **overrides)
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab_size, max_position_embeddings=64, pad_token_id=0,
                                             dim=SIZES["hidden_size"], n_layers=SIZES["num_hidden_layers"],
                                             n_heads=SIZES["num_attention_heads"],
                                             hidden_dim=SIZES["intermediate_size"], **overrides)
    if family == "electra":
        return transformers.ElectraConfig(vocab_size=vocab_size, max_position_embeddings=64, pad_token_id=0,
                                          embedding_size=20, **SIZES, **overrides)
    raise ValueError(family)


def family_dir(root: pathlib.Path, family: str, head: str = "AutoModelForMaskedLM", seed: int = 0,
               **config) -> pathlib.Path:
    """``root/<family>-<head>``: an HF checkpoint of ``family`` with ``head`` (an ``AutoModelFor...`` name, or
    ``AutoModel``) and its tokenizer, written by transformers."""
    import transformers

    directory = root / f"{family}-{head}"
    if directory.exists():
        return directory
    tokenizer = hf_tokenizer(family)
    torch.manual_seed(seed)
    model = getattr(transformers, head).from_config(hf_config(family, len(tokenizer), **config))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
