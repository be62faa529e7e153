"""benchmarks/sparse_data.py and sparse_quality.py's parts that could be wrong without anyone noticing in their
table: the held-out data (split by book, deterministic, a BEIR directory bertkit reads) and the mean ± sd summary.
(The training runs themselves are the benchmark's, not the suite's.)"""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark
from bertkit.sentence.evaluation.beir import load_beir

data = load_benchmark("bench_sparse_data", "sparse_data.py")
quality = load_benchmark("bench_sparse_quality", "sparse_quality.py")


def test_held_out_books_are_a_beir_directory_and_never_trained_on(tmp_path):
    counts = data.write_data(tmp_path / "a", train_books=("emma",), eval_books=("persuasion",))
    beir = load_beir(tmp_path / "a" / "beir")
    assert len(beir.queries) == len(beir.corpus) == counts["queries"] > 300
    assert all(beir.qrels[q] == {"d" + q[1:]: 1} for q in beir.queries)  # one relevant document per query
    train = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    assert len(train) == counts["train_pairs"] > 500 and set(train[0]) == {"anchor", "positive"}
    trained = {row["anchor"] for row in train} | {row["positive"] for row in train}
    assert not set(beir.corpus.values()) & trained  # no held-out paragraph is trained on
    shared_queries = set(beir.queries.values()) & trained
    assert shared_queries <= {'"Ah!', '"Oh!'}  # the novels share only interjections as a paragraph's first sentence
    query, document = train[0]["anchor"], train[0]["positive"]
    assert query not in document  # the query sentence is taken out of its paragraph


def test_the_data_are_the_same_bytes_every_time(tmp_path):
    data.write_data(tmp_path / "a", train_books=("emma",), eval_books=("persuasion",))
    data.write_data(tmp_path / "b", train_books=("emma",), eval_books=("persuasion",))
    for name in ("train.jsonl", "beir/corpus.jsonl", "beir/queries.jsonl", "beir/qrels/test.tsv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_book_both_trained_on_and_held_out_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--train-books and --eval-books share \\['emma'\\]"):
        data.write_data(tmp_path, train_books=("emma", "persuasion"), eval_books=("emma",))


def test_summary_is_mean_and_sample_sd_per_trainer_and_variant():
    runs = [{"trainer": "bertkit", "variant": "splade", "seed": s, "ndcg@10": v, "mrr@10": v, "recall@10": v,
             "query_active_dims": 10.0 * s, "corpus_active_dims": 20.0, "seconds": 1.0}
            for s, v in ((1, 0.2), (2, 0.4), (3, 0.6))]
    runs.append({**runs[0], "trainer": "sentence-transformers"})
    stats = quality.summary(runs)
    assert stats["bertkit/splade"]["ndcg@10"] == pytest.approx({"mean": 0.4, "sd": 0.2, "n": 3})
    assert stats["bertkit/splade"]["query_active_dims"]["sd"] == pytest.approx(10.0)
    assert stats["sentence-transformers/splade"]["ndcg@10"] == {"mean": 0.2, "sd": 0.0, "n": 1}
    rows = quality.summary_rows(stats)
    assert [(r["trainer"], r["seeds"], r["ndcg@10"]) for r in rows] == [
        ("bertkit", 3, "0.400 ± 0.200"), ("sentence-transformers", 1, "0.200 ± 0.000")]
    assert rows[0]["query_active_dims"] == "20.0 ± 10.0"
