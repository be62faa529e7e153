"""Model outputs are checked finite before they are written or scored: one check, one message.

A NaN or an infinity in a model's output means broken weights (a damaged checkpoint or int8 scale) or an
overflow in a low-precision number format; written as numbers, it would pass for an answer. Every command
that writes or scores model outputs (``embed``, ``embed mine``, ``predict``, ``evaluate``, the server) passes
them through :func:`check_rows` (or :func:`check_value`), which raises :class:`NonFiniteOutput` naming the
first bad row; the int8 kernel raises it too, naming the layer, when a layer's input is already non-finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")

#: what a non-finite output means and what to try, for every message that reports one
CAUSES = ("its weights are broken (a damaged checkpoint or int8 scale), or its numbers overflow in this precision "
          "(try fp32)")


class NonFiniteOutput(RuntimeError):  # not a ValueError: not the input's fault
    """The model answered NaN or infinity (a broken checkpoint, or an overflow in low precision)."""


def is_finite(value: Any) -> bool:
    """Whether every number in ``value`` is finite: a number, an array, a tensor, or dicts / lists / tuples of
    them (a pipeline's answer); anything else (text, None) counts as finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    if isinstance(value, dict):
        return all(is_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(is_finite(v) for v in value)
    return True


def first_nonfinite(rows: Any) -> int | None:
    """The index of the first of ``rows`` that holds NaN or infinity (None when all are finite): ``rows`` is an
    array or tensor ``[N, ...]`` (its rows) or a sequence of anything :func:`is_finite` reads."""
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().float().cpu().numpy()
    if isinstance(rows, np.ndarray) and rows.ndim and rows.dtype.kind in "fc":
        if not rows.size:
            return None
        bad = ~np.isfinite(rows.reshape(len(rows), -1)).all(axis=1)
        return int(bad.argmax()) if bad.any() else None
    return next((i for i, row in enumerate(rows) if not is_finite(row)), None)


def check_rows(rows: T, name: Callable[[int], str]) -> T:
    """``rows`` when every row is finite; else :class:`NonFiniteOutput` naming the first bad one as
    ``name(index)`` (``"texts.txt, line 7"``)."""
    bad = first_nonfinite(rows)
    if bad is not None:
        raise NonFiniteOutput(message(name(bad)))
    return rows


def check_value(value: T, where: str | Callable[[], str]) -> T:
    """``value`` (one row: an answer, a vector) when it is finite; else :class:`NonFiniteOutput` naming ``where``
    (or ``where()``: a place worked out only when it is needed)."""
    if not is_finite(value):
        raise NonFiniteOutput(message(where() if callable(where) else where))
    return value


def message(where: str) -> str:
    """The one line for a non-finite output at ``where``."""
    return f"the model's output for {where} is non-finite (NaN or infinity): {CAUSES}."
