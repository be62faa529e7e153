"""Evaluation of embedding models: retrieval metrics equal pytrec_eval's, BEIR directories, chunked retrieval
equals brute force, STS correlations equal scipy's, and ``bertkit evaluate --beir / --sts`` end to end."""

from __future__ import annotations

import random

import pytest

from bertkit.embedding.ir_metrics import evaluate_run, rank

pytrec_eval = pytest.importorskip("pytrec_eval")

K_VALUES = (1, 3, 5, 10, 100)


def _random_run_and_qrels(seed: int = 0, queries: int = 50, docs: int = 150):
    rng = random.Random(seed)
    doc_ids = [f"d{i}" for i in range(docs)]  # d9 > d10 > d1 as strings: the tie order is not numeric
    run, qrels = {}, {}
    for q in range(queries):
        retrieved = rng.sample(doc_ids, rng.randint(5, 130))
        run[f"q{q}"] = {d: rng.randint(0, 12) / 4 for d in retrieved}  # few distinct scores: many ties
        judged = rng.sample(doc_ids, rng.randint(1, 12))
        qrels[f"q{q}"] = {d: rng.choice([-1, 0, 0, 1, 1, 2, 3]) for d in judged}
    qrels["q0"] = {d: 0 for d in qrels["q0"]}  # a query without a relevant document
    return run, qrels


def test_pytrec_eval_breaks_ties_by_greater_doc_id():
    run = {"q": {"a": 1.0, "c": 1.0, "b": 1.0, "z": 0.5}}
    for relevant, expected_rank in (("c", 1), ("b", 2), ("a", 3)):
        got = pytrec_eval.RelevanceEvaluator({"q": {relevant: 1}}, {"recip_rank"}).evaluate(run)
        assert got["q"]["recip_rank"] == pytest.approx(1 / expected_rank)
    assert rank(run["q"]) == ["c", "b", "a", "z"]
    assert rank(run["q"], depth=2) == ["c", "b"]


def test_metrics_equal_pytrec_eval_per_query():
    run, qrels = _random_run_and_qrels()
    ours = evaluate_run(run, qrels, K_VALUES)
    measures = {"ndcg_cut", "map_cut", "recall", "P", "success"}
    cuts = ",".join(map(str, K_VALUES))
    reference = pytrec_eval.RelevanceEvaluator(qrels, {f"{m}.{cuts}" for m in measures}).evaluate(run)
    names = {"ndcg": "ndcg_cut_{}", "map": "map_cut_{}", "recall": "recall_{}", "precision": "P_{}",
             "accuracy": "success_{}"}
    assert ours["queries"] == len(qrels) == len(reference)
    for query, values in reference.items():
        for k in K_VALUES:
            for metric, theirs in names.items():
                assert ours["per_query"][query][f"{metric}@{k}"] == pytest.approx(values[theirs.format(k)], abs=1e-9), (
                    query, metric, k)
            # pytrec_eval's recip_rank has no cut-off: MRR@k is its recip_rank of the run cut to the top k
            cut = {query: {d: run[query][d] for d in rank(run[query], k)}}
            mrr = pytrec_eval.RelevanceEvaluator({query: qrels[query]}, {"recip_rank"}).evaluate(cut)
            assert ours["per_query"][query][f"mrr@{k}"] == pytest.approx(mrr[query]["recip_rank"], abs=1e-9)
    for name, mean in ours["metrics"].items():
        assert mean == pytest.approx(sum(v[name] for v in ours["per_query"].values()) / len(qrels), abs=1e-12)


def test_a_query_missing_from_the_run_scores_zero_and_extra_run_queries_are_ignored():
    got = evaluate_run({"q1": {"a": 1.0}, "other": {"a": 1.0}}, {"q1": {"a": 1}, "q2": {"a": 2}}, (1,))
    assert got["queries"] == 2 and got["per_query"]["q2"]["ndcg@1"] == 0.0
    assert got["metrics"]["ndcg@1"] == 0.5 and "other" not in got["per_query"]
    with pytest.raises(ValueError, match="k_values must be positive"):
        evaluate_run({}, {}, (0, 3))
