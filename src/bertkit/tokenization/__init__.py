"""Tokenization: Google's BERT rules on the Rust ``tokenizers`` core (no torch needed)."""

from bertkit.tokenization.encoding import BatchEncoding
from bertkit.tokenization.tokenizer import BERTTokenizer, BERTTokenizerFast

__all__ = ["BERTTokenizer", "BERTTokenizerFast", "BatchEncoding"]
