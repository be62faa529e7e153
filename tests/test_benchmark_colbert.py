"""benchmarks/colbert_quality.py's parts that could be wrong without anyone noticing in its numbers: the training
subset, the flags each bertkit command gets, the mean ± sd per trainer and the merging of runs made apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark

quality = load_benchmark("bench_colbert_quality", "colbert_quality.py")


def _runs(trainer: str, values=(0.2, 0.4, 0.6)) -> list[dict]:
    return [{"trainer": trainer, "seed": s, "ndcg@10": v, "mrr@10": v / 2, "recall@10": v, "seconds": 10.0 * s}
            for s, v in zip((1, 2, 3), values)]


def test_training_file_keeps_the_first_pairs_and_refuses_more_than_there_are(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"anchor": f"q{i}", "positive": f"d{i}"}) + "\n"
                                                  for i in range(5)))
    assert quality.training_file(tmp_path, 0) == tmp_path / "train.jsonl"
    cut = quality.training_file(tmp_path, 3)
    assert [json.loads(line)["anchor"] for line in cut.read_text().splitlines()] == ["q0", "q1", "q2"]
    with pytest.raises(SystemExit, match="--train-pairs 6: the data has only 5 pairs"):
        quality.training_file(tmp_path, 6)


def test_each_command_gets_the_reference_hyperparameters_and_its_own_length_flags():
    hyper = quality.Hyper(learning_rate=1e-4, max_seq_length=64)
    colbert = quality.common_flags("colbert", hyper, 2, 1)
    dense = quality.common_flags("embed", hyper, 2, 1)

    def value(flags, flag):
        return flags[flags.index(flag) + 1]

    assert (value(colbert, "--query-length"), value(colbert, "--document-length")) == ("64", "64")
    assert "--max-seq-length" not in colbert  # a ColBERT run refuses it: its lengths are the model's
    assert value(dense, "--max-seq-length") == "64" and "--query-length" not in dense
    for flags in (colbert, dense):
        assert (value(flags, "--learning-rate"), value(flags, "--seed"), value(flags, "--loss")) == ("0.0001", "2",
                                                                                                  "mnrl")


def test_summary_is_mean_and_sample_sd_per_trainer_in_table_order():
    runs = _runs("bertkit-dense") + _runs("bertkit", (0.3, 0.3, 0.3)) + _runs("sentence-transformers")[:1]
    stats = quality.summary(runs)
    assert list(stats) == ["bertkit", "sentence-transformers", "bertkit-dense"]
    assert stats["bertkit-dense"]["ndcg@10"] == pytest.approx({"mean": 0.4, "sd": 0.2, "n": 3})
    assert stats["sentence-transformers"]["ndcg@10"] == {"mean": 0.2, "sd": 0.0, "n": 1}
    rows = quality.summary_rows(stats, runs)
    assert [(r["model"], r["trainer"], r["seeds"], r["ndcg@10"]) for r in rows] == [
        ("colbert", "bertkit", 3, "0.300 ± 0.000"), ("colbert", "sentence-transformers", 1, "0.200 ± 0.000"),
        ("dense", "bertkit-dense", 3, "0.400 ± 0.200")]
    assert rows[2]["ndcg@10 per seed"] == "0.200 / 0.400 / 0.600" and rows[2]["s/run"] == 20


def _result(tmp_path: Path, name: str, runs: list[dict], base_scores, **hyper) -> Path:
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text("{}")
    path = tmp_path / f"{name}.json"
    quality.write_results(path, base, quality.Hyper(**hyper), {"train_pairs": 9, "queries": 3, "documents": 3},
                          base_scores, runs, 1)
    return path


def test_merge_joins_runs_made_apart_and_refuses_other_settings(tmp_path):
    scores = {"dense": {"ndcg@10": 0.1}, "colbert": {"ndcg@10": 0.15}}
    parts = [_result(tmp_path, "st", _runs("sentence-transformers"), scores, train_pairs=6, learning_rate=1e-4),
             _result(tmp_path, "bk", _runs("bertkit"), None, train_pairs=6, learning_rate=1e-4)]
    stats = quality.merge(parts, tmp_path / "all.json", 1)
    assert set(stats) == {"bertkit", "sentence-transformers"}
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["base"]["scores"] == scores  # taken from the one file that scored the untrained models
    assert [r["trainer"] for r in merged["runs"]] == ["bertkit"] * 3 + ["sentence-transformers"] * 3
    assert merged["header"]["command"].endswith("--seeds 1 2 3 --learning-rate 0.0001 --train-pairs 6")
    other = _result(tmp_path, "other", _runs("bertkit-dense"), None, train_pairs=6, learning_rate=1.0)
    with pytest.raises(SystemExit, match="'hyperparameters' differ"):
        quality.merge([parts[0], other], tmp_path / "bad.json", 1)
    with pytest.raises(SystemExit, match=r"\('bertkit', 1\)"):
        quality.merge([parts[1], parts[1]], tmp_path / "bad.json", 1)
