"""The suite's hang guard (conftest.run_guarded) judges progress, not wall time: a command that keeps writing its
heartbeat runs to its end however long that takes; one that writes nothing for the guard's span is called hung."""

import sys

import pytest

import conftest
from conftest import run_guarded

#: a child that appends a line to argv[1] every 0.2 s, 25 times (5 s or more), then prints "done"
BEATING = ("import sys, time\n"
           "for i in range(25):\n"
           "    open(sys.argv[1], 'a').write(f'{i}\\n')\n"
           "    time.sleep(0.2)\n"
           "print('done')\n")


@pytest.fixture
def short_guard(monkeypatch):
    """A 3 s guard: far above the child's 0.2 s between two beats, below its whole run."""
    monkeypatch.setattr(conftest, "HANG_GUARD_S", 3)
    monkeypatch.setattr(conftest, "GUARD_POLL_S", 0.1, raising=False)


def test_a_command_that_keeps_beating_is_not_hung_however_long_it_runs(tmp_path, short_guard):
    beat = tmp_path / "metrics.jsonl"
    done = run_guarded([sys.executable, "-c", BEATING, str(beat)], heartbeat=beat, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "done\n"
    assert len(beat.read_text().splitlines()) == 25


def test_a_command_without_progress_is_hung(tmp_path, short_guard):
    quiet = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(pytest.fail.Exception, match=r"hung: .*no change in .*quiet for the 3 s hang guard"):
        run_guarded(quiet, heartbeat=tmp_path / "quiet", capture_output=True, text=True)


def test_run_guarded_passes_input_and_check_through(tmp_path):
    echoed = run_guarded([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input="abc",
                         capture_output=True, text=True, check=True)
    assert echoed.stdout == "ABC\n"
