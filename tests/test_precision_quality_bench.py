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


#: per task: (fp32's metric keys, bf16's and int8's), exactly as the library reads them
SCHEMA = {"embeddings": ({"ndcg@10"}, {"min_cosine", "mean_cosine", "top10_overlap", "ndcg@10"}),
          "text-classification": ({"accuracy"}, {"label_agreement", "accuracy"}),
          "token-classification": ({"f1"}, {"f1"}),
          "question-answering": ({"f1", "exact_match"}, {"f1", "exact_match"}),
          "fill-mask": ({"top1_accuracy"}, {"top1_agreement", "top1_accuracy"})}


def test_committed_table_has_the_schema_the_library_reads():
    table = json.loads(RESOURCE.read_text(encoding="utf-8"))
    assert set(table) == {"machine", "tasks"}
    assert {"cpu", "flags", "torch", "date"} <= set(table["machine"])
    assert set(table["machine"]["flags"]) <= set(bench.FLAGS)
    assert set(table["tasks"]) == set(SCHEMA) == set(bench.TASKS)
    for task, (reference, others) in SCHEMA.items():
        row = table["tasks"][task]
        assert isinstance(row["model"], str) and isinstance(row["data"], str)
        assert row["recipe"] is None or {"steps", "seed", "seconds"} <= set(row["recipe"])
        assert set(row["fp32"]) == reference, task
        for dtype in ("bf16", "int8"):
            assert set(row[dtype]) == others, (task, dtype)
        for dtype in bench.DTYPES:
            assert all(0.0 <= value <= 1.0 for value in row[dtype].values()), (task, dtype, row[dtype])


def test_table_prints_every_task_and_dtype():
    row = {"model": "m", "data": "d (3 rows)", "recipe": None, "fp32": {"f1": 0.9}, "bf16": {"f1": 0.9},
           "int8": {"f1": 0.5}}
    text = bench.table({"machine": {"cpu": "x"}, "tasks": {"token-classification": row}})
    assert "| token-classification | m | d (3 rows) | fp32 | f1 0.9000 |" in text
    assert "|  |  |  | int8 | f1 0.5000 |" in text
    assert text.splitlines()[-1].startswith("| token-classification | ")
