"""Shortcut names (``'bert-base-uncased'``) for ``from_pretrained``: checkpoints of bertkit's weights registry.

Shared by the models' and the tokenizer's ``from_pretrained``; no torch is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertkit.weights.registry import WeightsEntry


def fetch_registered(name: str | os.PathLike, cache_dir: str | os.PathLike | None,
                     what: str) -> tuple[WeightsEntry, Path]:
    """``(registry entry, local directory)`` of the registered checkpoint ``name``, fetched into ``cache_dir``.

    Called once ``name`` turned out not to be a local ``what`` (``"file"``, ``"vocabulary file"``);
    raises ``FileNotFoundError`` saying so when the registry is unavailable or does not know the name.
    """
    try:
        from bertkit.weights.download import fetch
        from bertkit.weights.registry import lookup
    except ImportError as e:
        raise FileNotFoundError(f"{name!r} is not a {what} or directory, and shortcut names need "
                                f"bertkit's weights registry, which is unavailable here ({e}).") from e
    try:
        entry = lookup(os.fspath(name))
    except (TypeError, ValueError) as e:
        raise FileNotFoundError(f"{name!r} is not a {what} or directory, nor a registered checkpoint "
                                f"name: {e}") from None
    return entry, Path(fetch(os.fspath(name), cache_dir=cache_dir))
