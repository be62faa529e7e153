"""Shortcut names (``'bert-base-uncased'``) for ``from_pretrained``: checkpoints of bertkit's weights registry.

Shared by the models' and the tokenizer's ``from_pretrained``; no torch is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertkit.weights.registry import WeightsEntry

#: The shortcut names 0.6.2 knew (the keys of its archive maps); bertkit's weights registry knows each.
PPB_SHORTCUT_NAMES = (
    "bert-base-uncased", "bert-large-uncased", "bert-base-cased", "bert-large-cased",
    "bert-base-multilingual-uncased", "bert-base-multilingual-cased", "bert-base-chinese",
)


def archive_map() -> dict[str, str]:
    """``{0.6.2 shortcut name: URL of that checkpoint in bertkit's weights registry}``.

    0.6.2 pointed at per-file copies on S3 (``<name>.tar.gz``, ``<name>-vocab.txt``); the
    registry's URLs are the publisher's archives, which hold weights, config and vocabulary.
    ``cached_path`` of such a URL returns the fetched checkpoint's directory.
    """
    from bertkit.weights.registry import lookup

    return {name: lookup(name).url for name in PPB_SHORTCUT_NAMES}


def max_positions_map() -> dict[str, int]:
    """``{0.6.2 shortcut name: max_position_embeddings of that checkpoint}`` (the registry's configs)."""
    from bertkit.weights.registry import lookup

    return {name: lookup(name).config["max_position_embeddings"] for name in PPB_SHORTCUT_NAMES}


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
