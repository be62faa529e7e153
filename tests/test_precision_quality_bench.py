"""benchmarks/precision_quality.py's parts that could be wrong without anyone noticing in its table: the metric
functions (on hand-made arrays), the masking of the fill-mask rows, and the committed table the library reads
(its exact schema). Its ``--quick`` run takes minutes (five real models, three fine-tunes), so it is not run here."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
RESOURCE = Path(__file__).resolve().parent.parent / "src" / "bertkit" / "resources" / "precision_quality.json"


def _load():
    spec = importlib.util.spec_from_file_location("bench_precision_quality", BENCHMARKS / "precision_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_row_cosines_by_hand():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    b = np.array([[2.0, 0.0], [1.0, 1.0], [-3.0, -4.0]])
    np.testing.assert_allclose(bench.row_cosines(a, b), [1.0, 1 / math.sqrt(2), -1.0])
    with pytest.raises(ValueError, match="one shape"):
        bench.row_cosines(a, b[:2])


def test_nearest_excludes_itself_and_orders_by_cosine():
    angles = np.radians([0, 10, 25, 90, 180])
    points = np.stack([np.cos(angles), np.sin(angles)], 1)
    assert bench.nearest(points, 2).tolist() == [[1, 2], [0, 2], [1, 0], [2, 1], [3, 2]]
    with pytest.raises(ValueError, match="k must be between 1 and 4"):
        bench.nearest(points, 5)


def test_top_k_overlap_counts_shared_neighbours():
    angles = np.radians([0, 10, 25, 90, 180])
    points = np.stack([np.cos(angles), np.sin(angles)], 1)
    assert bench.top_k_overlap(points, points * 3.0, 2) == 1.0
    moved = np.radians([0, 10, 25, 90, 140])  # row 4 moves between rows 3 and 0: its order stays, row 3's changes
    other = np.stack([np.cos(moved), np.sin(moved)], 1)
    # reference: 3 -> {2, 1}; other: 3 -> {4, 2} (4 is 50 degrees away, 1 is 80): one of two shared; the rest equal
    assert bench.nearest(other, 2).tolist()[3] == [4, 2]
    assert bench.top_k_overlap(points, other, 2) == pytest.approx((4 + 0.5) / 5)


def test_ranking_overlap_counts_each_query_s_shared_documents():
    reference = {"q1": ["a", "b", "c"], "q2": ["d", "e", "f"]}
    other = {"q1": ["c", "b", "a"], "q2": ["d", "x", "y"]}
    assert bench.ranking_overlap(reference, other, 3) == pytest.approx((1 + 1 / 3) / 2)
    assert bench.ranking_overlap(reference, other, 1) == 0.5  # q1's best moved to third
    with pytest.raises(ValueError, match="same non-empty queries"):
        bench.ranking_overlap(reference, {"q1": ["a"]})


def test_measure_runs_each_variant_and_turns_bf16_off_where_it_says(monkeypatch):
    """fp32 first (the reference each other variant is scored against), bf16 and int8 as the CPU is, then int8
    again with BERTKIT_BF16=0 (restored afterwards), each placed where the library's table reads it."""
    from bertkit.devices import BF16_ENV

    monkeypatch.delenv(BF16_ENV, raising=False)
    monkeypatch.setattr(bench_devices(), "native_bf16", lambda device="cpu": True)
    seen = []

    def run(dtype):
        seen.append((dtype, bench.os.environ.get(BF16_ENV)))
        return {"fp32": 1.0, "bf16": 0.5, "int8": 0.25}[dtype]

    row = bench.measure("t", run, lambda out, ref: {"x": out} if ref is None else {"x": out, "ref": ref})
    assert seen == [("fp32", None), ("bf16", None), ("int8", None), ("int8", "0")]
    assert row == {"fp32": {"x": 1.0}, "bf16": {"x": 0.5, "ref": 1.0}, "int8": {"x": 0.25, "ref": 1.0},
                   "bf16-off": {"int8": {"x": 0.25, "ref": 1.0}}}
    assert BF16_ENV not in bench.os.environ
    monkeypatch.setattr(bench_devices(), "native_bf16", lambda device="cpu": False)
    seen.clear()  # a CPU without bf16: turning it off changes nothing, the int8 run is not repeated
    assert bench.measure("t", run, lambda out, ref: {"x": out}) == {**{d: {"x": v} for d, v in [
        ("fp32", 1.0), ("bf16", 0.5), ("int8", 0.25)]}, "bf16-off": {"int8": {"x": 0.25}}}
    assert seen == [("fp32", None), ("bf16", None), ("int8", None)]


def bench_devices():
    from bertkit import devices

    return devices


def test_agreement():
    assert bench.agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert bench.agreement(["pos", "neg"], ["pos", "neg"]) == 1.0
    with pytest.raises(ValueError, match="one length"):
        bench.agreement([1, 2], [1])
    with pytest.raises(ValueError, match="non-empty"):
        bench.agreement([], [])


def test_masked_sentences_mask_fifteen_percent_and_keep_the_answers():
    pytest.importorskip("cognition")
    from bertkit.tokenization import load_tokenizer

    tokenizer = load_tokenizer(bench.cassette_dir())
    masked, answers = bench.masked_sentences(tokenizer, 20)
    assert len(masked) == 20
    assert masked == bench.masked_sentences(tokenizer, 20)[0]  # seeded: the same rows every run
    counts = [sum(t == tokenizer.mask_token_id for t in ids) for ids in masked]
    assert counts == [max(1, round(0.15 * (len(ids) - 2))) for ids in masked]
    assert len(answers) == sum(counts) and tokenizer.mask_token_id not in answers
    assert all(ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id for ids in masked)


#: per task: (fp32's metric keys, the other formats'), exactly as the library reads them
SCHEMA = {"embeddings": ({"ndcg@10"}, {"min_cosine", "mean_cosine", "top10_overlap", "ndcg@10"}),
          "text-classification": ({"accuracy"}, {"label_agreement", "accuracy"}),
          "token-classification": ({"f1"}, {"f1"}),
          "question-answering": ({"f1", "exact_match"}, {"f1", "exact_match"}),
          "fill-mask": ({"top1_accuracy"}, {"top1_agreement", "top1_accuracy"})}


def test_committed_table_has_the_schema_the_library_reads():
    from bertkit.inference.precision import BF16_OFF, BOUNDS

    table = json.loads(RESOURCE.read_text(encoding="utf-8"))
    assert set(table) == {"machine", "tasks"}
    assert {"cpu", "flags", "torch", "date"} <= set(table["machine"])
    assert set(table["machine"]["flags"]) <= set(bench.FLAGS)
    assert set(table["tasks"]) == set(SCHEMA) == set(bench.TASKS) == set(BOUNDS)
    assert bench.BF16_OFF == BF16_OFF
    for task, (reference, others) in SCHEMA.items():
        row = table["tasks"][task]
        assert isinstance(row["model"], str) and isinstance(row["data"], str)
        assert row["recipe"] is None or {"steps", "seed", "seconds"} <= set(row["recipe"])
        assert set(row["fp32"]) == reference, task
        if "machine" in row:  # a row carried from an earlier run on another machine: it says which
            assert {"cpu", "flags", "torch", "date"} <= set(row["machine"]), task
        else:
            assert set(row[BF16_OFF]) >= set(bench.BF16_OFF_DTYPES), task
        for dtype, bf16, metrics in bench.cells(row)[1:]:
            assert set(metrics) == others, (task, dtype, bf16)
        assert {dtype for dtype, _, _ in bench.cells(row)} >= set(bench.DTYPES), task
        for _, _, metrics in bench.cells(row):
            assert all(0.0 <= value <= 1.0 for value in metrics.values()), (task, metrics)
        assert {metric for metric, _, _ in BOUNDS[task]} <= others | reference, task


def test_table_prints_every_task_dtype_and_what_auto_picks():
    row = {"model": "m", "data": "d (3 rows)", "recipe": None, "fp32": {"f1": 0.9}, "bf16": {"f1": 0.9},
           "int8": {"f1": 0.5}, "bf16-off": {"int8": {"f1": 0.897}}}
    text = bench.table({"machine": {"cpu": "x", "flags": [], "torch": "t", "date": "d"},
                        "tasks": {"token-classification": row}})
    assert "| token-classification | fp32 | as the CPU is | f1 0.9000 | (reference) |" in text
    assert "|  | int8 | as the CPU is | f1 0.5000 | no |" in text
    assert "|  | int8 | BERTKIT_BF16=0 | f1 0.8970 | yes |" in text
    assert ("| token-classification | bf16 (bf16 passes: f1 0.9000 vs fp32 0.9000 (within 0.005)) | int8 (int8 "
            "passes: f1 0.8970 vs fp32 0.9000 (within 0.005)) |") in text
    assert text.splitlines()[-1] == ("| token-classification | m | d (3 rows) | x (none of avx512_bf16/amx_bf16/"
                                     "amx_int8/avx512_vnni/avx_vnni), torch t, d |")
