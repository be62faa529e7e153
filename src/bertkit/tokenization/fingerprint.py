"""What makes two tokenizers the same, as plain data (for run and data-directory fingerprints)."""

from __future__ import annotations

import hashlib
from typing import Any


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, Any]:
    """The vocabulary (size and SHA-256 of its tokens in id order) and the normalisation settings of a
    :class:`~bertkit.tokenization.BERTTokenizerFast`."""
    vocab = "\n".join(tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size))))
    return {"vocab_size": tokenizer.vocab_size, "vocab_sha256": hashlib.sha256(vocab.encode()).hexdigest(),
            "do_lower_case": tokenizer.do_lower_case, "strip_accents": tokenizer.strip_accents,
            "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars}
