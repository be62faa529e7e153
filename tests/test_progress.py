"""Progress bars in a log: when stderr is not a terminal (a file, a pipe, CI) a bar writes a plain line at most
every LOG_EVERY_S seconds and its end, not a carriage-return redraw per update; on a terminal it is tqdm's own."""

from __future__ import annotations

import io

import pytest
import tqdm.std

from bertkit.inference.batching import run_sorted


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """tqdm's clock, advanced by hand: ``clock["now"] += seconds``."""
    state = {"now": 1000.0}
    monkeypatch.setattr(tqdm.std, "time", lambda: state["now"])
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)  # no monitor thread on the real clock
    return state


def _batches_taking_a_second_each(clock, stream, monkeypatch) -> str:
    """A batched inference of 100 one-row batches, each one second on tqdm's clock, its bar written to ``stream``
    as stderr: what the bar wrote."""
    monkeypatch.setattr("sys.stderr", stream)

    def run(rows):
        clock["now"] += 1.0
        return rows

    assert run_sorted(list(range(100)), [3] * 100, 1, run, progress=True, description="embedding") == list(range(100))
    return stream.getvalue()


def test_a_bar_in_a_log_writes_a_line_every_30_seconds(clock, monkeypatch):
    written = _batches_taking_a_second_each(clock, io.StringIO(), monkeypatch)
    assert "\r" not in written
    lines = written.splitlines()
    assert 3 <= len(lines) <= 6, lines  # the start, one per 30 s of 100 s, the end: not one per batch
    assert lines[0].startswith("embedding:   0%") and lines[-1].startswith("embedding: 100%")
    assert "100/100" in lines[-1]


def test_a_bar_on_a_terminal_redraws_in_place(clock, monkeypatch):
    written = _batches_taking_a_second_each(clock, _Terminal(), monkeypatch)
    assert written.count("\r") >= 100  # tqdm's own: every update redrawn on one line
