"""Progress bars, one kind for every loop that shows one (training, batched inference, tokenizing, data creation,
downloads): tqdm's own on a terminal and in a notebook. When stderr is a log (a file, a pipe, CI) tqdm would
redraw its bar with a carriage return up to ten times a second, each redraw a line of the log; there the bar
writes one plain line at most every :data:`LOG_EVERY_S` seconds, and its last state when it ends.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm

#: seconds between two lines of a bar written to a log (not a terminal)
LOG_EVERY_S = 30.0


def progress_bar(iterable: Iterable | None = None, **kwargs: Any) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on stderr; on a stderr that is not a terminal, a line per
    :data:`LOG_EVERY_S` seconds and one at the end (see the module docstring)."""
    if not kwargs.get("disable") and not _interactive(sys.stderr):
        kwargs = {**kwargs, "file": _Lines(sys.stderr), "mininterval": LOG_EVERY_S, "dynamic_ncols": False}
    return tqdm(iterable, **kwargs)


def _interactive(stream: TextIO) -> bool:
    """Whether a bar on ``stream`` redraws in place: a terminal, or a notebook (tqdm.auto draws a widget there)."""
    if any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Lines:
    """The stream tqdm writes to in a log: each redraw (``"\\r"`` + the bar + padding) becomes one line; the
    carriage returns and blank writes that only clear a terminal's line are left out."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()
