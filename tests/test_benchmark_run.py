"""benchmarks/run.py runs end to end (tiny model, one round) and its variants compute the same numbers.

Timings are printed by the script, never asserted here; what is asserted is what could be wrong
without anyone noticing in a table: the fast path, bf16, int8 and ONNX Runtime against HF fp32.
The fast lane runs the inference and training sections without ONNX Runtime (``quick``); the whole ``--quick``
run (HF's models exported to ONNX, every family, a fine-tuning epoch, an embedding model's training: more than 25
minutes on a busy 2-core machine) is ``make test-slow``'s, and so are the exports of HF's models to ONNX.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_guarded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def load_script(path: Path = SCRIPT, name: str = "run_bench"):
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # registered first: its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _quick_run(tmp_path_factory, *only: str, onnx: bool = True) -> tuple[str, dict]:
    """``run.py --quick`` (each of ``only`` as ``--only``; without ``onnx``, ``--no-onnx``): its stdout and rows."""
    if onnx:
        pytest.importorskip("onnxruntime")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("bench") / "rows.json"
    command = [sys.executable, str(SCRIPT), "--quick", "--json", str(out)] + ([] if onnx else ["--no-onnx"])
    for section in only:
        command += ["--only", section]
    run = run_guarded(command, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Every section, as ``run.py --quick`` runs them (the precision section has its own tests)."""
    return _quick_run(tmp_path_factory, "inference", "families", "pretraining", "finetuning", "accuracy", "embedding")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The inference and training sections, bertkit's variants (fast path, bf16, int8) against HF."""
    return _quick_run(tmp_path_factory, "inference", "pretraining", "finetuning", onnx=False)


@pytest.mark.slow
def test_every_table_is_printed(report):
    stdout, _ = report
    for title in ("## GEMM", "## Inference, BERT", "## Inference, every encoder family", "## Training steps",
                  "## Accuracy", "## Training an embedding model", "| cached-mnrl | 16 | 64 | bertkit |"):
        assert title in stdout
    assert "| 8 x 128 | bertkit fp32 |" in stdout


def _variants_agree_with_hf(rows: dict) -> set:
    """Every inference and training row within its bound of HF fp32; the (workload, variant) pairs seen."""
    inference = {(r["workload"], r["variant"]): r for r in rows["inference"]}
    for (workload, variant), row in inference.items():
        bound = 1e-4 if "fp32" in variant else 0.2  # bf16 / int8 are approximate by nature
        assert row["max diff"] <= bound, (workload, variant, row["max diff"])
    for row in rows["training"]:
        bound = 1e-4 if "fp32" in row["variant"] else 5e-2
        assert row["loss diff"] <= bound, row
    return set(inference)


def test_variants_agree_with_hf(quick):
    stdout, rows = quick
    assert "| 8 x 128 | bertkit fp32 |" in stdout
    assert ("8 x 128, 30 % padding", "bertkit int8") in _variants_agree_with_hf(rows)


@pytest.mark.slow
def test_variants_and_onnx_runtime_agree_with_hf(report):
    _, rows = report
    assert ("8 x 128, 30 % padding", "ONNX Runtime fp32") in _variants_agree_with_hf(rows)


@pytest.mark.slow
def test_every_family_bertkit_runs_has_its_rows_and_agrees_with_hf(report):
    """One row per family and variant on each family workload, bertkit and ONNX Runtime equal to HF fp32 on the
    same weights; the families this bertkit lacks are named as skipped (the table grows as families land)."""
    pytest.importorskip("onnxruntime")
    stdout, rows = report
    bench = load_script()
    present = {f for f, spec in bench.FAMILY_MODELS.items() if bench.bertkit_lacks(f, spec) is None}
    assert {"bert", "roberta", "mpnet"} <= present  # on the engine today: the check must not skip them
    by_family: dict[str, set] = {}
    for row in rows["families"]:
        by_family.setdefault(row["family"], set()).add((row["workload"], row["variant"].split(" (")[0]))
        assert row["max diff"] <= 1e-4, row
        assert row["real tokens/s"] > 0 and row["x ORT fp32"] is not None, row
    assert set(by_family) == present
    expected = {(w.name, v) for w in bench.FAMILY_WORKLOADS for v in ("HF fp32", "bertkit fp32", "ONNX Runtime fp32")}
    for family, variants in by_family.items():
        assert variants == expected, family
    for family in set(bench.FAMILY_MODELS) - present:
        assert f"- {family}: " in stdout, family
    assert "| mpnet | 8 x 128, 30 % padding | HF fp32 (eager) |" in stdout  # HF's MPNet has no SDPA
    if "deberta-v2" in present:  # nor has HF's DeBERTa-v2
        assert "| deberta-v2 | 8 x 128, 30 % padding | HF fp32 (eager) |" in stdout


@pytest.mark.parametrize("family", ["bert", "roberta", "mpnet", "distilbert", "electra", "modernbert", "deberta-v2",
                                    "gte", "nomic_bert", "jina_embeddings_v3", "eurobert"])
def test_family_table_builds_each_hf_model_at_the_benchmark_size(family):
    """Every row of the table, bertkit's support or not: HF's config takes the size dict (DistilBERT under its own
    names), the inputs are those of HF's forward (no token types for DistilBERT, MPNet, ModernBERT, EuroBERT), and HF's
    model runs on a padded batch of them."""
    pytest.importorskip("transformers")
    import torch

    bench = load_script()
    spec = bench.FAMILY_MODELS[family]
    config = bench.hf_family_config(spec, bench.TINY)
    for key, value in bench.TINY.items():  # HF's aliases; DistilBERT's hidden_dim has none
        assert getattr(config, "hidden_dim" if key == "intermediate_size" and family == "distilbert" else key) == value
    model = getattr(__import__("transformers"), spec["hf_model"])(config).eval()
    names = bench.forward_inputs(model)
    assert ("token_type_ids" in names) == (family not in ("distilbert", "mpnet", "modernbert", "eurobert"))
    inputs = bench.model_inputs(2, 12, 0.7, config.vocab_size, names, config.pad_token_id)
    assert (inputs["input_ids"][inputs["attention_mask"] == 0] == config.pad_token_id).all()
    with torch.inference_mode():
        assert model(**inputs).last_hidden_state.shape == (2, 12, bench.TINY["hidden_size"])


@pytest.mark.slow
def test_fast_variants_keep_the_fine_tuned_models_predictions(report):
    _, rows = report
    by_variant = {r["variant"]: r for r in rows["accuracy"]}
    assert by_variant["fp32"]["agreement with fp32 %"] >= 99.0
    assert by_variant["int8"]["agreement with fp32 %"] >= 80.0
    assert all(r["examples"] == by_variant["fp32"]["examples"] > 100 for r in rows["accuracy"])


def test_attention_variants_compute_the_same_attention():
    """benchmarks/attention.py compares four unpadded attentions; each must be the same function."""
    import torch

    bench = load_script(SCRIPT.parent / "attention.py", "attention_bench")
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


@pytest.mark.parametrize("onnx", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["encode", "onnx"])
def test_embedding_benchmark_runs_and_agrees_with_sentence_transformers(onnx):
    """bertkit's encode (and, in the slow lane, its ONNX export in ONNX Runtime) equal to sentence-transformers'."""
    pytest.importorskip("sentence_transformers")
    if onnx:
        pytest.importorskip("onnxruntime")
    run = run_guarded([sys.executable, str(SCRIPT.parent / "embed.py"), "--sentences", "40", "--rounds", "1",
                       "--batch-size", "8"] + (["--onnx"] if onnx else []), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| bertkit")]
    assert len(rows) == (2 if onnx else 1)  # bertkit encode, and its ONNX export in ONNX Runtime
    for row in rows:
        assert float(row[5]) >= 0.99999 and float(row[6]) < 1e-4  # min cosine, max abs diff to ST
