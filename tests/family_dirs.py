"""Tiny checkpoints of each encoder family, written by HF transformers itself (a test-only dependency): the
directories a user downloads from the hub, with the family's own tokenizer kind trained here on Jane Austen.

``family_dir(root, family, head)`` -> a directory holding ``config.json``, ``model.safetensors`` and the HF
fast tokenizer files of that family: byte-level BPE (RoBERTa, ModernBERT), SentencePiece-style Unigram
(XLM-RoBERTa, Jina v3), WordPiece with ``<s>``/``</s>`` (MPNet), BERT's WordPiece with ``[CLS]``/``[SEP]``
(DistilBERT, ELECTRA, GTE-v1.5, NomicBERT), Unigram + Metaspace with ``[CLS]``/``[SEP]`` (DeBERTa-v3's
``tokenizer.json``), Llama-3-style byte-level BPE with ``<|begin_of_text|>``/``<|end_of_text|>`` (EuroBERT).
Random weights (seeded), odd sizes.

:data:`NEW_FAMILIES` are the encoders of issue 44; :data:`MISSING_HEADS` says which task heads HF lacks for a
family (the tools are checked against HF only where it has the head).
"""

from __future__ import annotations

import functools
import json
import lzma
import pathlib

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

RESOURCES = pathlib.Path(__file__).resolve().parents[1] / "src" / "bertkit" / "resources" / "austen"
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3 as fairseq's dictionary; <mask> is added last
SIZES = dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52)
FAMILIES = ("roberta", "xlm-roberta", "mpnet", "modernbert")
#: the newer encoders (HF ``model_type``s): DeBERTa-v2/v3, GTE, NomicBERT, Jina embeddings v3, EuroBERT
NEW_FAMILIES = ("deberta-v2", "gte", "nomic_bert", "jina_embeddings_v3", "eurobert")
#: every family a checkpoint directory can be made of (those above, BERT's WordPiece ones and the newer encoders)
ALL_FAMILIES = (*FAMILIES, "distilbert", "electra", *NEW_FAMILIES)
#: the families that are used as embedders (sentence-transformers directories, embedding / reranker training)
EMBEDDERS = ("gte", "nomic_bert", "jina_embeddings_v3")
#: family -> the heads HF lacks for it (every other family has all of MaskedLM, SequenceClassification,
#: TokenClassification, QuestionAnswering and MultipleChoice)
MISSING_HEADS = {"gte": ("AutoModelForQuestionAnswering", "AutoModelForMultipleChoice"),
                 "nomic_bert": ("AutoModelForQuestionAnswering", "AutoModelForMultipleChoice"),
                 "eurobert": ("AutoModelForQuestionAnswering", "AutoModelForMultipleChoice"),
                 "jina_embeddings_v3": ("AutoModelForMultipleChoice",)}
#: EuroBERT's special tokens (Llama 3's names; it pads with its end-of-text token, as the released tokenizer does)
EUROBERT_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
#: Llama 3's pre-tokenizer split (before byte-level mapping): contractions, words, 1-3 digits, punctuation, spaces
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def has_head(family: str, head: str) -> bool:
    """Whether HF transformers has ``head`` (an ``AutoModelFor...`` name) for ``family``."""
    return head not in MISSING_HEADS.get(family, ())


def families_with(head: str) -> tuple[str, ...]:
    return tuple(family for family in ALL_FAMILIES if has_head(family, head))


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


def _deberta_unigram(vocab_size: int = 300) -> list[tuple[str, float]]:
    """DeBERTa-v3's vocabulary layout: ``[PAD]`` 0, ``[CLS]`` 1, ``[SEP]`` 2, ``[UNK]`` 3, the pieces, ``[MASK]``
    last; (piece, score) pairs of a Unigram model trained here."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]"],
                                      unk_token="[UNK]")
    tok.train_from_iterator(austen_lines(), trainer)
    return [(piece, score) for piece, score in json.loads(tok.to_str())["model"]["vocab"]] + [("[MASK]", 0.0)]


def _llama3_bpe(vocab_size: int = 400) -> Tokenizer:
    """EuroBERT's tokenizer kind: Llama 3's regex split then byte-level BPE, no normalizer, its special tokens
    last, ``<|begin_of_text|> A <|end_of_text|>`` (pairs: ``... A <|end_of_text|> B <|end_of_text|>``)."""
    from tokenizers import Regex

    tok = Tokenizer(models.BPE(unk_token=None, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(austen_lines(), trainer)
    tok.add_special_tokens(EUROBERT_SPECIALS)
    bos, eos = EUROBERT_SPECIALS[:2]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A:0 {eos}", pair=f"{bos} $A:0 {eos} $B:1 {eos}:1",
                                      special_tokens=[(t, tok.token_to_id(t)) for t in (bos, eos)])])
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
    if family in ("gte", "nomic_bert"):  # gte-*-en-v1.5 and nomic-embed: BERT's uncased WordPiece
        return transformers.BertTokenizerFast(vocab=_bert_vocab())
    if family == "jina_embeddings_v3":
        return transformers.XLMRobertaTokenizerFast(tokenizer_object=_unigram(), **special)
    if family == "deberta-v2":
        return transformers.DebertaV2Tokenizer(vocab=_deberta_unigram())
    if family == "eurobert":
        bos, eos, mask = EUROBERT_SPECIALS
        return transformers.PreTrainedTokenizerFast(tokenizer_object=_llama3_bpe(), bos_token=bos, eos_token=eos,
                                                    cls_token=bos, sep_token=eos, pad_token=eos, mask_token=mask)
    raise ValueError(family)


def hf_config(family: str, vocab_size: int, **overrides):
    import transformers

    if family in NEW_FAMILIES:
        return _new_family_config(family, vocab_size, **overrides)

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


def _new_family_config(family: str, vocab_size: int, **overrides):
    """The configs of :data:`NEW_FAMILIES`, each with its released checkpoints' switches (DeBERTa-v3's relative
    attention with log buckets, GTE-v1.5 without token types, Nomic's SwiGLU, ...) at the tiny sizes."""
    import transformers

    rope = dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if family == "deberta-v2":  # deberta-v3-base's switches; [PAD] 0, [CLS] 1, [SEP] 2
        return transformers.DebertaV2Config(
            vocab_size=vocab_size, max_position_embeddings=64, type_vocab_size=0, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, relative_attention=True, max_relative_positions=-1, position_buckets=16,
            norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
            layer_norm_eps=1e-7, **SIZES, **overrides)
    if family == "gte":  # gte-base-en-v1.5: no token types, GeGLU ("gelu"), [PAD] 0
        return transformers.GteConfig(vocab_size=vocab_size, max_position_embeddings=64, type_vocab_size=0,
                                      pad_token_id=0, **rope, **SIZES, **overrides)
    if family == "nomic_bert":  # nomic-embed-text-v1.5: SwiGLU ("silu"), two token types, [PAD] 0
        return transformers.NomicBertConfig(vocab_size=vocab_size, max_position_embeddings=64, type_vocab_size=2,
                                            pad_token_id=0, hidden_act="silu", **rope, **SIZES, **overrides)
    if family == "jina_embeddings_v3":  # XLM-R's ids: <s> 0, <pad> 1, </s> 2
        return transformers.JinaEmbeddingsV3Config(vocab_size=vocab_size, max_position_embeddings=66,
                                                   type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                                                   eos_token_id=2, **rope, **SIZES, **overrides)
    if family == "eurobert":  # ids of the tokenizer's specials, appended after the BPE vocabulary
        first = vocab_size - len(EUROBERT_SPECIALS)
        return transformers.EuroBertConfig(vocab_size=vocab_size, max_position_embeddings=64,
                                           bos_token_id=first, eos_token_id=first + 1, pad_token_id=first + 1,
                                           mask_token_id=first + 2, num_key_value_heads=3, **rope, **SIZES,
                                           **overrides)
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
