"""benchmarks/run.py runs end to end (tiny model, one round) and its variants compute the same numbers.

Timings are printed by the script, never asserted here; what is asserted is what could be wrong
without anyone noticing in a table: the fast path, bf16, int8 and ONNX Runtime against HF fp32.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("bench") / "rows.json"
    run = run_guarded([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


def test_every_table_is_printed(report):
    stdout, _ = report
    for title in ("## GEMM", "## Inference", "## Training steps", "## Accuracy"):
        assert title in stdout
    assert "| 8 x 128 | bertkit fp32 |" in stdout


def test_variants_agree_with_hf(report):
    _, rows = report
    inference = {(r["workload"], r["variant"]): r for r in rows["inference"]}
    for (workload, variant), row in inference.items():
        bound = 1e-4 if "fp32" in variant else 0.2  # bf16 / int8 are approximate by nature
        assert row["max diff"] <= bound, (workload, variant, row["max diff"])
    assert ("8 x 128, 30 % padding", "ONNX Runtime fp32") in inference
    for row in rows["training"]:
        bound = 1e-4 if "fp32" in row["variant"] else 5e-2
        assert row["loss diff"] <= bound, row


def test_fast_variants_keep_the_fine_tuned_models_predictions(report):
    _, rows = report
    by_variant = {r["variant"]: r for r in rows["accuracy"]}
    assert by_variant["fp32"]["agreement with fp32 %"] >= 99.0
    assert by_variant["int8"]["agreement with fp32 %"] >= 80.0
    assert all(r["examples"] == by_variant["fp32"]["examples"] > 100 for r in rows["accuracy"])


def test_attention_variants_compute_the_same_attention():
    """benchmarks/attention.py compares four unpadded attentions; each must be the same function."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("attention_bench", SCRIPT.parent / "attention.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    qkv, lengths = bench.batch(5, 16, 0.7, seed=3)
    assert lengths.max() <= 16 and lengths.min() >= 1 and len(set(lengths.tolist())) > 1
    reference = bench.padded(qkv, lengths)
    assert reference.shape == qkv.shape[1:]
    for name in ("per-length buckets", "block-diagonal mask"):
        torch.testing.assert_close(bench.VARIANTS[name](qkv, lengths), reference, msg=name)
    # one sequence alone is plain attention
    q, k, v = qkv[:, : lengths[0]].transpose(1, 2)
    alone = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1)
    torch.testing.assert_close(reference[: lengths[0]], alone)


def test_embedding_benchmark_runs_and_agrees_with_sentence_transformers():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    run = run_guarded([sys.executable, str(SCRIPT.parent / "embed.py"), "--sentences", "40", "--rounds", "1",
                       "--batch-size", "8", "--onnx"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| bertkit")]
    assert len(rows) == 2  # bertkit encode, and its ONNX export in ONNX Runtime
    for row in rows:
        assert float(row[5]) >= 0.99999 and float(row[6]) < 1e-4  # min cosine, max abs diff to ST
