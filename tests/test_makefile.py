"""The Makefile: ``make docs`` in a .venv that ``make test`` set up installs nothing (the test extra holds the docs
extra; a second ``pip install -e`` would reinstall bertkit under a running ``make test``), and ``make test`` shows
each test file on its line with its time."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _planned(venv: Path, target: str) -> str:
    """The commands ``make TARGET`` would run with ``VENV=venv`` (a dry run: nothing is executed)."""
    run = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={venv}"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _venv(tmp_path: Path, *stamps: str) -> Path:
    """A .venv as far as make can tell: its python, and ``stamps`` newer than pyproject.toml."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    newer = (ROOT / "pyproject.toml").stat().st_mtime + 10
    for stamp in stamps:
        (venv / stamp).touch()
        os.utime(venv / stamp, (newer, newer))
    return venv


def test_docs_in_the_test_venv_installs_nothing(tmp_path):
    planned = _planned(_venv(tmp_path, ".test-installed"), "docs")
    assert "pip install" not in planned, planned
    assert "mkdocs build --strict" in planned


def test_docs_in_a_fresh_venv_installs_its_extra(tmp_path):
    planned = _planned(_venv(tmp_path), "docs")
    assert "pip install -q -e '.[docs]'" in planned and "mkdocs build --strict" in planned


def test_make_test_spreads_files_over_the_cores_and_shows_the_slowest(tmp_path):
    """``make test``'s pytest command, run on two small test files: it runs them on pytest-xdist workers (a file
    to a worker) and its log ends with the slowest tests' times, so a log shows where the suite's time went."""
    command = shlex.split(_planned(_venv(tmp_path, ".test-installed"), "test").strip().splitlines()[-1])
    assert command[1:3] == ["-m", "pytest"], command
    assert "--dist" in command and command[command.index("--dist") + 1] == "loadfile", command
    for name in ("test_first.py", "test_second.py"):
        (tmp_path / name).write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    run = subprocess.run([sys.executable, *command[1:], "-p", "no:cacheprovider", "test_first.py",
                          "test_second.py"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^created: \d+/\d+ workers?$", run.stdout, re.MULTILINE), run.stdout
    assert "slowest 25 durations" in run.stdout and "4 passed" in run.stdout, run.stdout
