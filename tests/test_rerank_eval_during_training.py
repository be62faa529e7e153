"""Evaluation during ``finetune_reranker`` / ``bertkit finetune rerank --eval-rerank / --eval-beir``.

The tiny one-label BertForSequenceClassification of tests/test_rerank_training.py (hidden 36, dropout on)
trains on (query, positive, negative) rows and is scored on held-out rows and on the tiny BEIR directory of
tests/test_embedding_eval_during_training.py, reranking a run file's or an embedding model's top k. Checked: a
run with evaluation ends with the weights and the training records of the same run without it; the eval records
come at step 0, every N steps and at the last step; the first equals the evaluator on the base model and the
last equals ``bertkit evaluate RERANKER --rerank FILE`` (and ``--beir --first-stage``) on the saved model;
results.json and the model card's table hold them; bad flags are one-line errors naming the flag, before
training.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.evaluation.reranking import RowsRerankEvaluator
from bertkit.sentence.rerank_training import finetune_reranker
from test_embedding_eval_during_training import records, same_training, saved_evaluation, write_beir
from test_embedding_training import killed_and_resumed, metrics
from test_embedding_training import write_base as write_embedder
from test_rerank_training import COMMON, write_base, write_rows

STEP = ("split", "step", "epoch")


def evaluate_cli(model_dir, out, flags, capsys) -> dict:
    """``bertkit evaluate model_dir FLAGS -o out``'s report."""
    capsys.readouterr()
    assert cli(["evaluate", str(model_dir), *flags, "-o", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def test_evaluation_leaves_training_as_it_was_and_equals_bertkit_evaluate(tmp_path, capsys):
    base = write_base(tmp_path / "base", dropout=0.1)
    train = write_rows(tmp_path / "train.jsonl", 40, seed=1)
    held = write_rows(tmp_path / "held.jsonl", 12, seed=2)
    options = dict(loss="bce", max_steps=5, seed=3, **{**COMMON, "learning_rate": 3e-3})
    plain = finetune_reranker(base, train, tmp_path / "plain", **options)
    scored = finetune_reranker(base, train, tmp_path / "scored", eval_rerank=held, eval_every=2, **options)

    evals = same_training(plain, scored, steps=[0, 2, 4, 5])
    final = evaluate_cli(scored.model_dir, tmp_path / "final.json", ["--rerank", str(held)], capsys)["metrics"]
    torch.manual_seed(3)  # the run's seed: the same base head
    base_scores = RowsRerankEvaluator(held, k_values=(1, 3, 5, 10, 100))(CrossEncoder(base, num_labels=1))
    for record, expected in ((evals[0], base_scores), (evals[-1], final)):
        assert set(record) == {*STEP, *expected}
        torch.testing.assert_close({k: record[k] for k in expected}, expected, msg=f"step {record['step']}")
    assert evals[-1]["mrr@10"] != evals[0]["mrr@10"]  # training moved the scores

    saved_evaluation(scored, evals, every=2)
    card = (scored.model_dir / "README.md").read_text()
    evaluation = card[card.index("## Evaluation"):]
    for fact in ("reranking: `held.jsonl`: 12 rows", "| metric | base (step 0) | step 2 | step 4 | step 5 |",
                 f"| mrr@10 | {evals[0]['mrr@10']:.4f} | {evals[1]['mrr@10']:.4f} |"):
        assert fact in evaluation, fact


def test_the_command_reranks_a_first_stage_and_rows_every_epoch_by_default(tmp_path, capsys):
    """--eval-rerank and --eval-beir with an embedding model as first stage: both prefixed, every epoch; the last
    BEIR record equals ``bertkit evaluate --beir --first-stage`` on the saved model."""
    base = write_base(tmp_path / "base", dropout=0.0)
    embedder = write_embedder(tmp_path / "embedder", dropout=0.0)
    train, held = write_rows(tmp_path / "train.jsonl", 16, seed=1), write_rows(tmp_path / "held.jsonl", 6, seed=2)
    beir, out = write_beir(tmp_path / "beir"), tmp_path / "out"
    assert cli(["finetune", "rerank", "--model", str(base), "--train", str(train), "-o", str(out), "--eval-rerank",
                str(held), "--eval-beir", str(beir), "--eval-first-stage", str(embedder), "--eval-top-k", "5",
                "--eval-k", "1,10", "--max-steps", "5", "--batch-size", "8", "--precision", "fp32", "--device",
                "cpu", "--threads", "1"]) == 0
    evals = records(out, "eval")
    assert [r["step"] for r in evals] == [0, 2, 4, 5]  # 2 batches an epoch
    assert {k for k in evals[0] if k.startswith("rerank_")} == {"rerank_map", "rerank_mrr@1", "rerank_mrr@10",
                                                                "rerank_ndcg@1", "rerank_ndcg@10"}
    want = evaluate_cli(out / "model", tmp_path / "beir.json", ["--beir", str(beir), "--first-stage", str(embedder),
                                                                "--top-k", "5", "--k", "1,10", "--dtype", "fp32"],
                        capsys)["reranked"]
    torch.testing.assert_close({k: evals[-1][f"beir_{k}"] for k in want}, want)
    card = (out / "model" / "README.md").read_text()
    assert "reranking the top 5 of `embedder` on `beir` (BEIR, `qrels/test.tsv`): 12 judged queries" in card


@pytest.mark.parametrize("flags, message", [
    (["--eval-rerank", "{tmp}/none.jsonl"], "--eval-rerank {tmp}/none.jsonl: no such file"),
    (["--eval-beir", "{tmp}/beir"], "--eval-beir DIR and --eval-first-stage EMBEDDER|RUN_FILE go together"),
    (["--eval-first-stage", "{tmp}/run.trec"], "--eval-beir DIR and --eval-first-stage EMBEDDER|RUN_FILE go"),
    (["--eval-beir", "{tmp}/nowhere", "--eval-first-stage", "{tmp}/run.trec"], "--eval-beir {tmp}/nowhere: not a"),
    (["--eval-beir", "{tmp}/beir", "--eval-first-stage", "{tmp}/none"], "--eval-first-stage {tmp}/none: no such"),
    (["--eval-beir", "{tmp}/beir", "--eval-first-stage", "{tmp}/run.trec", "--eval-top-k", "0"],
     "--eval-top-k must be a whole number of at least 1"),
    (["--eval-rerank", "{tmp}/bad.jsonl"], "bad.jsonl, line 1: the positive holds ''"),
    (["--eval-every", "3"], "--eval-every needs something to evaluate on: add --eval-rerank FILE"),
    (["--eval-rerank", "{tmp}/rows.jsonl", "--eval-every", "0"], "--eval-every must be a positive number"),
    (["--eval-beir", "{tmp}/beir", "--eval-first-stage", "{tmp}/run.trec"], "run.trec, line 1: query id 'q99'"),
])
def test_bad_evaluation_flags_are_one_line_errors_before_training(tmp_path, capsys, flags, message):
    base = write_base(tmp_path / "base", dropout=0.0)
    write_rows(tmp_path / "rows.jsonl", 8)
    write_beir(tmp_path / "beir")
    (tmp_path / "run.trec").write_text("q99 Q0 d1 1 0.5 run\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"query": "w1", "positive": "", "negative": "w2"}) + "\n")
    capsys.readouterr()
    assert cli(["finetune", "rerank", "--model", str(base), "--train", str(tmp_path / "rows.jsonl"), "-o",
                str(tmp_path / "o"), *[flag.format(tmp=tmp_path) for flag in flags]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0], err
    assert not (tmp_path / "o").exists()


def test_a_resumed_run_keeps_the_uninterrupted_runs_evaluations(tmp_path):
    """mnrl (random in-batch negatives) with dropout, a checkpoint at step 3, evaluated every 2 steps: killed at
    step 5 (after the evaluation at step 4, which the checkpoint does not hold) and resumed, the run ends with
    the whole run's metrics.jsonl (each evaluation once), results and weights."""
    from safetensors.torch import load_file

    base = write_base(tmp_path / "base", dropout=0.1)
    train, held = write_rows(tmp_path / "train.jsonl", 32, seed=1), write_rows(tmp_path / "held.jsonl", 6, seed=2)
    options = dict(loss="mnrl", num_negatives=2, max_steps=7, save_every=3, eval_rerank=held, eval_every=2, **COMMON)
    whole = finetune_reranker(base, train, tmp_path / "whole", **options)
    resumed = killed_and_resumed(functools.partial(finetune_reranker, base, train), tmp_path / "cut", 5, **options)

    assert [r["step"] for r in metrics(resumed) if r["split"] == "eval"] == [0, 2, 4, 6, 7]
    assert metrics(resumed) == metrics(whole) and resumed.results == whole.results
    a, b = load_file(whole.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=key)
