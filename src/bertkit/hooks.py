"""Slots that a lower layer calls and a higher layer fills, so imports stay one-way (design §2).

Checkpoint loading and saving: ``from_pretrained`` / ``save_pretrained`` are methods of
the model classes (lucid's API), but reading and writing checkpoints is
:mod:`bertkit.weights`' work, and ``modeling`` must not import ``weights``. The model
methods call :func:`load_pretrained` / :func:`save_pretrained` here; the package root
(``bertkit/__init__.py``, which Python runs before any ``bertkit.*`` module) installs
``bertkit.weights``' implementation with :func:`install_checkpoint_io`. Its functions import
``bertkit.weights`` on first call, so ``import bertkit`` stays torch-free.

Likewise ``model.optimize_for_inference(...)`` calls :func:`optimize_for_inference` here, which
the root fills with :mod:`bertkit.inference`' function (``inference`` sits above ``modeling``).

A leaf like :mod:`bertkit.io`: this module imports nothing (not even torch).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: ``load(model_or_cls, source, weights, config_overrides) -> model``, as ``from_pretrained`` documents it.
CheckpointLoader = Callable[[Any, Any, Any, dict[str, Any]], Any]
#: ``save(model, directory, **options) -> None``, as ``save_pretrained`` documents it.
CheckpointSaver = Callable[..., None]

_loader: CheckpointLoader | None = None
_saver: CheckpointSaver | None = None


def install_checkpoint_io(load: CheckpointLoader, save: CheckpointSaver) -> None:
    """Make ``load`` / ``save`` the implementation of every model's ``from_pretrained`` / ``save_pretrained``.

    Replaces what was installed before (the package root installs :mod:`bertkit.weights`').
    """
    global _loader, _saver
    _loader, _saver = load, save


def load_pretrained(model_or_cls: Any, source: str | os.PathLike | Any | None, weights: Any,
                    config_overrides: dict[str, Any]) -> Any:
    """Call the installed loader; ``RuntimeError`` if none is installed."""
    if _loader is None:
        raise RuntimeError("no checkpoint loader is installed; `import bertkit` installs bertkit.weights' one.")
    return _loader(model_or_cls, source, weights, config_overrides)


def save_pretrained(model: Any, directory: str | os.PathLike, **options: Any) -> None:
    """Call the installed saver; ``RuntimeError`` if none is installed."""
    if _saver is None:
        raise RuntimeError("no checkpoint saver is installed; `import bertkit` installs bertkit.weights' one.")
    _saver(model, directory, **options)


_optimizer: Callable[..., Any] | None = None


def install_inference(optimize: Callable[..., Any]) -> None:
    """Make ``optimize(model, **options)`` the implementation of every model's ``optimize_for_inference``."""
    global _optimizer
    _optimizer = optimize


def optimize_for_inference(model: Any, **options: Any) -> Any:
    """Call the installed optimizer; ``RuntimeError`` if none is installed."""
    if _optimizer is None:
        raise RuntimeError("no inference optimizer is installed; `import bertkit` installs bertkit.inference's.")
    return _optimizer(model, **options)
