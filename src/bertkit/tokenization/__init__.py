"""Tokenization on the Rust ``tokenizers`` core (no torch needed).

* :class:`BERTTokenizerFast`: Google's BERT WordPiece, token for token;
* :class:`TokenizerFast`: any HF ``tokenizer.json`` (RoBERTa, XLM-RoBERTa, CamemBERT, MPNet, ModernBERT, ...),
  encoding as ``transformers.AutoTokenizer`` does;
* :func:`load_tokenizer` / :class:`AutoTokenizer`: the one loader that picks between them for a
  directory (the rule is in :mod:`bertkit.tokenization.auto`).

Both share one API (:class:`~bertkit.tokenization.base.FastTokenizerBase`) and return :class:`BatchEncoding`.
:func:`cut_texts` / :func:`cut_pairs` cut long texts, before tokenizing, to the part truncation keeps.
"""

from bertkit.tokenization.auto import AutoTokenizer, load_tokenizer, tokenizer_class_for
from bertkit.tokenization.base import FastTokenizerBase
from bertkit.tokenization.cut import cut_pairs, cut_texts
from bertkit.tokenization.encoding import BatchEncoding
from bertkit.tokenization.general import TokenizerFast
from bertkit.tokenization.tokenizer import BERTTokenizer, BERTTokenizerFast

__all__ = ["AutoTokenizer", "BERTTokenizer", "BERTTokenizerFast", "BatchEncoding", "FastTokenizerBase",
           "TokenizerFast", "cut_pairs", "cut_texts", "load_tokenizer", "tokenizer_class_for"]
