"""The integer-argument check every layer shares (a leaf: it imports nothing).

One function, one message shape, so a bad ``batch_size``, ``stride``, ``top_k`` or
``TrainingConfig.max_steps`` is reported the same way wherever it is passed:

    batch_size must be an integer >= 1, got batch_size=0.
    max_length must be an integer >= 1, got max_length='10' (str).
"""

from __future__ import annotations

from typing import Any


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError, and a ValueError too, so ``except ValueError`` around a
    call (as the CLI and the server have) also reports it as the user's mistake."""


def check_int(name: str, value: Any, minimum: int = 1, *, none_means: str | None = None) -> Any:
    """``value`` when it is an int >= ``minimum`` (None when ``none_means`` says what None stands for).

    Raises :class:`ArgumentTypeError` for anything that is not an int (a bool or a float such as 2.0 too)
    and ValueError below ``minimum``; both name the argument as ``name`` (e.g. ``"doc_stride (--doc-stride)"``)
    and show the value given.
    """
    if value is None and none_means is not None:
        return value
    alternative = f" or None ({none_means})" if none_means else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an integer >= {minimum}{alternative}, got {_label(name)}={value!r} "
                                f"({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{alternative}, got {_label(name)}={value!r}.")
    return value


def _label(name: str) -> str:
    """The argument itself out of a described name: ``"doc_stride (--doc-stride)"`` -> ``doc_stride``."""
    return name.split(" ", 1)[0]
