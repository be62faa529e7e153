"""BatchEncoding: what the tokenizer returns — a dict of lists (or arrays / tensors) plus the Rust encodings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: keys whose values are token-aligned (padded / converted to tensors together)
TENSOR_KEYS = ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask", "offset_mapping")


class BatchEncoding(dict):
    """``{"input_ids": ..., "token_type_ids": ..., "attention_mask": ..., ...}`` with HF's helpers.

    Values are lists for one text, lists of lists for a batch, or numpy arrays / torch
    tensors with ``return_tensors``. :attr:`encodings` holds the underlying
    ``tokenizers.Encoding`` objects (one per row) for token / word / character alignment;
    ``alignment`` is that list, or a function computing it on first use.
    """

    def __init__(self, data: dict[str, Any], alignment: list | Callable[[], list] | None = None,
                 batched: bool = True):
        super().__init__(data)
        self._alignment = alignment
        self.is_batched = batched

    @property
    def encodings(self) -> list:
        if callable(self._alignment):
            self._alignment = self._alignment()
        return self._alignment or []

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def _encoding(self, batch_index: int):
        if not self.encodings:
            raise ValueError("this BatchEncoding holds no token alignment.")
        rows = len(self.encodings)
        if not -rows <= batch_index < rows:
            raise IndexError(f"batch_index={batch_index} is out of range: this BatchEncoding holds {rows} "
                             f"row{'s' if rows > 1 else ''} (0 to {rows - 1}).")
        return self.encodings[batch_index]

    def tokens(self, batch_index: int = 0) -> list[str]:
        return self._encoding(batch_index).tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The index of the word each token comes from (None for special and padding tokens)."""
        return self._encoding(batch_index).word_ids

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """0 for tokens of the first text, 1 for the second, None for special and padding tokens."""
        return self._encoding(batch_index).sequence_ids

    def char_to_token(self, batch_or_char_index: int, char_index: int | None = None,
                      sequence_index: int = 0) -> int | None:
        """The token covering a character: ``(char_index)`` for one text, ``(batch_index, char_index)``
        in a batch (HF's overloads); None where no token covers it (e.g. whitespace)."""
        if char_index is None:
            batch_or_char_index, char_index = 0, batch_or_char_index
        if char_index < 0:
            raise ValueError(f"char_index must be >= 0, got {char_index}.")
        if sequence_index not in (0, 1):
            raise ValueError(f"sequence_index must be 0 (the text) or 1 (the text_pair), got {sequence_index!r}.")
        return self._encoding(batch_or_char_index).char_to_token(char_index, sequence_index)

    def to(self, device) -> BatchEncoding:
        """Move torch tensors to ``device`` (in place); returns self."""
        for key, value in self.items():
            if hasattr(value, "to"):
                self[key] = value.to(device)
        return self


def to_tensors(data: dict[str, Any], kind: str | None) -> dict[str, Any]:
    """Convert the token-aligned lists of ``data`` to ``kind`` ("np" or "pt"); other keys as arrays too."""
    if kind is None:
        return data
    if kind not in ("np", "pt"):
        raise ValueError(f"return_tensors must be None, 'np' or 'pt', got {kind!r}.")
    lengths = {len(row) for key in TENSOR_KEYS if key in data for row in _rows(data[key])}
    if len(lengths) > 1:
        raise ValueError("the sequences have different lengths and cannot form one tensor; pass padding=True "
                         "(or padding='max_length' with max_length).")
    import numpy as np

    arrays = {key: np.asarray(value, dtype=np.int64) for key, value in data.items()}
    if kind == "np":
        return arrays
    import torch

    return {key: torch.from_numpy(value) for key, value in arrays.items()}


def _rows(value: list) -> list:
    return value if value and isinstance(value[0], list) else [value]
