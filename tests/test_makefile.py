"""The Makefile's install stamps: ``make docs`` in a .venv that ``make test`` set up installs nothing (the test
extra holds the docs extra; a second ``pip install -e`` would reinstall bertkit under a running ``make test``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _planned(venv: Path, target: str) -> str:
    """The commands ``make TARGET`` would run with ``VENV=venv`` (a dry run: nothing is executed)."""
    run = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True)
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
