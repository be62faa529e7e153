"""Model sizes as data: Google's BERT table (L layers, H hidden, A heads, intermediate 4H).

``tiny``..``medium`` are the sizes of Google's 24 small BERTs ("Well-Read Students
Learn Better"); ``base`` and ``large`` are the original BERT paper's.
"""

from __future__ import annotations

from typing import Any

from bertkit.config import BERTConfig

#: name -> (num_hidden_layers, hidden_size, num_attention_heads)
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def preset_fields(size: str) -> dict[str, int]:
    """The BERTConfig fields that define ``size``; raises ``ValueError`` for an unknown size."""
    try:
        layers, hidden, heads = SIZES[size]
    except KeyError:
        raise ValueError(f"Unknown model size {size!r}; choose one of {list(SIZES)}.") from None
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden}


def preset_config(size: str, **overrides: Any) -> BERTConfig:
    """``BERTConfig`` of a preset size with ``overrides`` applied (validated)."""
    return BERTConfig(**{**preset_fields(size), **overrides})
