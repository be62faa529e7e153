"""Evaluation during ``finetune_embeddings`` / ``bertkit finetune embed --eval-beir / --eval-sts``.

A tiny BERT (hidden 36, dropout on) trains on pairs of the test's own words and is scored on a tiny BEIR
directory and an STS file written here. Checked: a run with evaluation ends with the weights and the training
records of the same run without it (dropout draws from the RNG evaluation must not touch); the eval records
come at step 0, every N steps and at the last step; the last one equals ``bertkit evaluate``'s
``beir_report`` / ``sts_report`` on the saved model and the first one theirs on the base model; results.json
and the model card's table hold them; bad flags are one-line errors naming the flag. The schedule itself
restores RNG and module modes around any evaluate function. (Resume: tests/test_embedding_training.py.)
"""

from __future__ import annotations

import json
import random
import types

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.sentence.eval_schedule import EvalSchedule, evaluation_table
from bertkit.sentence.evaluation.evaluate import beir_report, load_encoder, sts_report
from bertkit.sentence.training import finetune_embeddings
from bertkit.training.metrics import is_score
from test_embedding_training import COMMON, WORDS, write_base, write_pairs

TIMING = ("eval_s", "elapsed_s", "tokens_per_s", "examples_per_s")


def write_beir(directory, documents: int = 12, seed: int = 3):
    """A BEIR directory: ``documents`` texts of 5 words; query i is 3 of document i's words and one other, judged
    relevant to document i (and, for even i, to document i + 1 with relevance 2)."""
    rng = random.Random(seed)
    (directory / "qrels").mkdir(parents=True)
    docs = [rng.sample(WORDS, 5) for _ in range(documents)]
    with open(directory / "corpus.jsonl", "w") as f:
        for i, words in enumerate(docs):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": " ".join(words)}) + "\n")
    with open(directory / "queries.jsonl", "w") as f:
        for i, words in enumerate(docs):
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join([*words[:3], rng.choice(WORDS)])}) + "\n")
    rows = [f"q{i}\td{i}\t1" for i in range(documents)] + [f"q{i}\td{i + 1}\t2" for i in range(0, documents - 1, 2)]
    (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return directory


def write_sts(path, pairs: int = 10, seed: int = 4):
    """Pairs sharing 0 to 4 of 4 words, scored by the share."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(pairs):
            a, shared = rng.sample(WORDS, 4), i % 5
            b = a[:shared] + rng.sample(WORDS, 4 - shared)
            f.write(json.dumps({"sentence1": " ".join(a), "sentence2": " ".join(b), "score": shared / 4}) + "\n")
    return path


def records(run_dir, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in r.items() if k not in TIMING} for r in map(json.loads, lines) if r["split"] == split]


def same_training(plain, scored, steps: list[int]) -> list[dict]:
    """Assert that the run ``scored`` (with evaluation) trained as ``plain`` (without): the same weights bit for
    bit and training records, evaluated at ``steps``; returns its eval records."""
    from safetensors.torch import load_file

    a, b = load_file(plain.model_dir / "model.safetensors"), load_file(scored.model_dir / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=key)
    assert records(scored.output_dir, "train") == records(plain.output_dir, "train")
    assert not records(plain.output_dir, "eval") and "evaluation" not in plain.results
    evals = records(scored.output_dir, "eval")
    assert [r["step"] for r in evals] == steps
    return evals


def saved_evaluation(scored, evals: list[dict], every: int) -> None:
    """Assert that results.json (and the run's result) holds the evaluations ``evals``, every ``every`` steps."""
    saved = json.loads((scored.output_dir / "results.json").read_text())["evaluation"]
    assert saved == scored.results["evaluation"]
    assert saved["steps"] == [r["step"] for r in evals] and saved["every"] == every
    assert saved["final_step"] == evals[-1]["step"]
    assert saved["final"] == {k: v for k, v in evals[-1].items() if k not in ("split", "step", "epoch")}
    assert saved["base"] == {k: v for k, v in evals[0].items() if k not in ("split", "step", "epoch")}


def test_evaluation_leaves_training_as_it_was_and_equals_bertkit_evaluate(tmp_path):
    base = write_base(tmp_path / "base", dropout=0.1)
    train = write_pairs(tmp_path / "pairs.jsonl", 40)
    beir, sts = write_beir(tmp_path / "beir"), write_sts(tmp_path / "sts.jsonl")
    options = dict(max_steps=5, query_prompt="w1 ", document_prompt="w2 ", **COMMON)
    plain = finetune_embeddings(base, train, tmp_path / "plain", **options)
    scored = finetune_embeddings(base, train, tmp_path / "scored", eval_beir=beir, eval_sts=sts, eval_every=2,
                                 **options)

    evals = same_training(plain, scored, steps=[0, 2, 4, 5])
    final_model, _ = load_encoder(scored.model_dir, dtype="fp32")
    base_model, _ = load_encoder(base, dtype="fp32")
    base_model.prompts = {"query": "w1 ", "document": "w2 "}  # the prompts the run scored the base model with
    for record, model in ((evals[0], base_model), (evals[-1], final_model)):
        expected = {**beir_report(model, beir)["metrics"], **sts_report(model, sts)["metrics"]}
        got = {k: record[k] for k in expected}
        assert set(record) == {"split", "step", "epoch", *expected}
        torch.testing.assert_close(got, expected, msg=f"step {record['step']}")
    assert evals[-1]["ndcg@10"] != evals[0]["ndcg@10"]  # training moved the scores

    saved_evaluation(scored, evals, every=2)
    card = (scored.model_dir / "README.md").read_text()
    evaluation = card[card.index("## Evaluation"):]
    for fact in ("`beir` (BEIR, `qrels/test.tsv`): 12 judged queries, 12 documents", "`sts.jsonl`: 10 pairs",
                 "| metric | base (step 0) | step 2 | step 4 | step 5 |",
                 f"| ndcg@10 | {evals[0]['ndcg@10']:.4f} | {evals[1]['ndcg@10']:.4f} |",
                 f"| spearman_cosine | {evals[0]['spearman_cosine']:.4f} |"):
        assert fact in evaluation, fact
    assert is_score("ndcg@10") and is_score("spearman_cosine") and not is_score("ndcg@3")


def test_the_command_evaluates_every_epoch_by_default(tmp_path):
    base = write_base(tmp_path / "base", dropout=0.0)
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    beir, out = write_beir(tmp_path / "beir"), tmp_path / "out"
    assert cli(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(out), "--eval-beir",
                str(beir), "--eval-k", "1,10", "--max-steps", "5", "--batch-size", "8", "--precision", "fp32",
                "--device", "cpu", "--threads", "1"]) == 0
    evals = records(out, "eval")
    assert [r["step"] for r in evals] == [0, 2, 4, 5]  # 2 batches an epoch
    assert {k for k in evals[0] if "@" in k} == {f"{m}@{k}" for m in ("ndcg", "mrr", "map", "recall", "precision",
                                                                      "accuracy") for k in (1, 10)}


@pytest.mark.parametrize("flags, message", [
    (["--eval-beir", "{tmp}/nowhere"], "--eval-beir {tmp}/nowhere: not a directory"),
    (["--eval-sts", "{tmp}/none.tsv"], "--eval-sts {tmp}/none.tsv: no such file"),
    (["--eval-every", "3"], "--eval-every needs something to evaluate on"),
    (["--eval-sts", "{tmp}/pairs.jsonl", "--eval-every", "0"], "--eval-every must be a positive number"),
    (["--eval-sts", "{tmp}/pairs.jsonl"], "pairs.jsonl, line 1: no sentence1, sentence2, score"),
    (["--eval-beir", "{tmp}", "--eval-split", "dev"], "qrels/dev.tsv: no such file"),
])
def test_bad_evaluation_flags_are_one_line_errors_before_training(tmp_path, capsys, flags, message):
    base = write_base(tmp_path / "base", dropout=0.0)
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d", "text": "w1"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q", "text": "w1"}\n')
    capsys.readouterr()
    assert cli(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "o"),
                *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0], err
    assert not (tmp_path / "o").exists()


def test_the_schedule_restores_the_rng_and_each_modules_mode_around_any_evaluate():
    """An evaluate function that draws random numbers and a model with a submodule kept in eval mode (a frozen
    teacher): after the evaluation the random state and every module's mode are what they were; the record
    has the prefix, a NaN is written null; the history is checkpoint state."""
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Sequential(torch.nn.Dropout(0.5)))
    model.train()
    model[1].eval()
    seen = {}

    def evaluate():
        seen["training"] = [m.training for m in model.modules()]
        seen["grad"] = torch.is_grad_enabled()
        return {"score": torch.rand(()).item(), "empty": float("nan")}

    written = []
    trainer = types.SimpleNamespace(model=model, stateful={}, callbacks={},
                                    state=types.SimpleNamespace(step=4, epoch=1, elapsed_s=0.0),
                                    config=types.SimpleNamespace(max_steps=10), write_metrics=written.append,
                                    add_callback=lambda event, fn: trainer.callbacks.setdefault(event, []).append(fn))
    schedule = EvalSchedule(evaluate, prefix="rerank_")
    schedule.attach(trainer, default_every=4)
    torch.manual_seed(0)
    for fn in trainer.callbacks["on_step_end"]:
        fn(trainer)
    after = torch.rand(3)
    torch.manual_seed(0)
    torch.testing.assert_close(after, torch.rand(3))
    assert seen == {"training": [False, False, False, False], "grad": False}
    assert [m.training for m in model.modules()] == [True, True, False, False]
    assert trainer.stateful["evaluation"] is schedule and schedule.every == 4
    (record,) = written
    assert record["step"] == 4 and record["rerank_empty"] is None and 0 <= record["rerank_score"] < 1
    restored = EvalSchedule(evaluate)
    restored.load_state_dict(schedule.state_dict())
    assert restored.history[0]["step"] == 4
    table = evaluation_table(restored.history)
    assert table[0] == "| metric | step 4 |" and table[3] == "| rerank_empty | n/a |"


def test_keep_best_and_patience_keep_the_best_model_and_stop_early(tmp_path, capsys):
    """--keep-best recall@100 on a BEIR directory of 12 documents: every evaluation scores 1.0, so none after step 0
    is better; --patience 2 stops the run after the evaluations at steps 1 and 2, and the model saved is the one
    of step 0 (the base model, bit for bit), which results.json and the model card name."""
    from safetensors.torch import load_file

    base = write_base(tmp_path / "base", dropout=0.0)
    train = write_pairs(tmp_path / "pairs.jsonl", 32)
    beir, out = write_beir(tmp_path / "beir"), tmp_path / "out"
    common = ["finetune", "embed", "--model", str(base), "--train", str(train), "--batch-size", "8", "--precision",
              "fp32", "--device", "cpu", "--threads", "1", "--learning-rate", "1e-3", "--max-steps", "6"]
    assert cli([*common, "-o", str(out), "--eval-beir", str(beir), "--eval-every", "1", "--keep-best",
                "recall@100", "--patience", "2"]) == 0
    assert [r["step"] for r in records(out, "eval")] == [0, 1, 2]
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2 and results["best"] == {"metric": "recall@100", "value": 1.0, "step": 0,
                                                         "bad_evaluations": 2}
    assert "The model is the one of step 0, the best recall@100 (1.0000)." in (out / "model" / "README.md").read_text()
    kept = load_file(out / "model" / "model.safetensors")
    started = load_file(base / "model.safetensors")
    for key in started:  # the base checkpoint's names are the saved model's (a plain BertModel)
        torch.testing.assert_close(kept[key], started[key], rtol=0, atol=0, msg=key)

    capsys.readouterr()
    assert cli([*common, "-o", str(tmp_path / "none"), "--keep-best", "ndcg@10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "add --eval-beir DIR and/or --eval-sts FILE" in err[0], err
