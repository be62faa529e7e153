"""Runs that would train nothing say so (issue 38): settings and data that leave a ranking loss nothing to rank are
refused before the run directory exists; steps that keep giving an exactly zero gradient warn once (log and
metrics.jsonl); a run none of whose steps changed the model says so in its results; a one-step run does not warm
up to a rate of 0; the embedding and reranking runs report their real tokens per second."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from bertkit.cli import main as cli
from bertkit.sentence.rerank_training import finetune_reranker
from bertkit.sentence.training import finetune_embeddings
from bertkit.training import Trainer, TrainingConfig
from test_embedding_training import COMMON, write_base, write_pairs
from test_rerank_training import write_rows


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_base(tmp_path_factory.mktemp("base"), dropout=0.0)


def refused(argv, capsys) -> str:
    """The one line a refused command writes to stderr (exit status 1)."""
    assert cli(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ---------------------------------------------------------------------- refused before the run directory
def test_embed_batch_size_1_without_hard_negatives_is_refused(base, tmp_path, capsys):
    train = write_pairs(tmp_path / "pairs.jsonl", 8)
    line = refused(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "run"),
                    "--batch-size", "1", "--device", "cpu"], capsys)
    assert "--batch-size 1" in line and "hard negatives" in line and "--batch-size 2" in line
    assert not (tmp_path / "run").exists()


def test_embed_batch_size_1_with_hard_negatives_trains(base, tmp_path):
    rows = [{"anchor": f"w{i} w{i + 1}", "positive": f"w{i} w{i + 1} w{i + 2}", "negative": f"w{i + 20}"}
            for i in range(4)]
    result = finetune_embeddings(base, write_jsonl(tmp_path / "t.jsonl", rows), tmp_path / "run",
                                 **{**COMMON, "batch_size": 1}, max_steps=2)
    assert result.results["steps"] == 2 and "warnings" not in result.results


@pytest.mark.parametrize("loss", ["mnrl", "cached-mnrl"])
def test_identical_pairs_are_refused(base, tmp_path, capsys, loss):
    train = write_jsonl(tmp_path / "same.jsonl", [{"anchor": "w1 w2", "positive": "w1 w2 w3"}] * 16)
    line = refused(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "run"),
                    "--loss", loss, "--device", "cpu"], capsys)
    assert str(train) in line and "copies of its own anchor or positive" in line
    assert not (tmp_path / "run").exists()


def test_cosent_on_one_score_is_refused(base, tmp_path):
    rows = [{"sentence1": f"w{i}", "sentence2": f"w{i + 1}", "score": 0.5} for i in range(8)]
    with pytest.raises(ValueError, match="every row has the same score, so --loss cosent has no pair to order"):
        finetune_embeddings(base, write_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "run", loss="cosent",
                            **COMMON)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("loss", ["lambda", "listnet"])
def test_rerank_list_losses_on_one_passage_rows_are_refused(base, tmp_path, capsys, loss):
    train = write_rows(tmp_path / "rows.jsonl", 8, labelled=True)  # (query, passage, label): one passage each
    line = refused(["finetune", "rerank", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "run"),
                    "--loss", loss, "--device", "cpu"], capsys)
    assert str(train) in line and f"--loss {loss}" in line and "--loss bce" in line
    assert not (tmp_path / "run").exists()


def test_rerank_mnrl_without_negatives_and_num_negatives_0_is_refused(base, tmp_path, capsys):
    rows = [{"query": f"w{i} w{i + 1}", "positive": f"w{i} w{i + 1} w{i + 2}"} for i in range(8)]
    train = write_jsonl(tmp_path / "pairs.jsonl", rows)
    line = refused(["finetune", "rerank", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "run"),
                    "--loss", "mnrl", "--num-negatives", "0", "--device", "cpu"], capsys)
    assert "--num-negatives 0" in line and "no hard negatives" in line
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------- the Trainer's warnings
class Frozen(nn.Module):
    """A model whose loss does not depend on its weights: every gradient is exactly zero."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 3))

    def training_step(self, batch):
        return (self.weight * 0).sum() + batch["x"].float().mean(), {}


def test_zero_gradients_warn_once_in_the_log_and_metrics_and_the_run_says_it_trained_nothing(tmp_path, caplog):
    config = TrainingConfig(max_steps=6, batch_size=2, learning_rate=1e-2, output_dir=str(tmp_path), device="cpu",
                            progress_bar=False, log_every=1, precision="fp32", max_grad_norm=None)
    trainer = Trainer(Frozen(), [{"x": torch.tensor([i])} for i in range(8)], config=config)
    with caplog.at_level(logging.WARNING, logger="bertkit.training"):
        trainer.train()
    zero = [r.message for r in caplog.records if r.message.startswith("zero gradient")]
    assert len(zero) == 1 and "steps 1-3" in zero[0]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    warned = [r for r in records if "warning" in r]
    assert [r["step"] for r in warned] == [3] and warned[0]["warning"] == zero[0]
    nothing = [r.message for r in caplog.records if r.message.startswith("trained nothing")]
    assert len(nothing) == 1 and "6 with an exactly zero gradient" in nothing[0]
    assert trainer.warnings == [zero[0], nothing[0]]


def test_a_run_that_learns_does_not_warn(tmp_path, caplog):
    model = nn.Linear(2, 1)
    model.training_step = lambda batch: (((model(batch["x"]) - 1) ** 2).mean(), {})
    config = TrainingConfig(max_steps=4, batch_size=2, learning_rate=1e-2, warmup_steps=2, output_dir=str(tmp_path),
                            device="cpu", progress_bar=False, precision="fp32")
    trainer = Trainer(model, [{"x": torch.randn(2)} for _ in range(8)], config=config)
    trainer.train()
    assert trainer.warnings == [] and trainer.state.zero_lr_steps == 1 and trainer.state.idle_steps == 1


# ---------------------------------------------------------------------- one step at a rate above 0
def test_a_one_step_run_changes_the_model(base, tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 8)
    result = finetune_embeddings(base, train, tmp_path / "run", **COMMON, warmup_ratio=0.1)  # 8 rows: one step
    assert result.results["steps"] == 1 and "warnings" not in result.results
    record = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    assert record["lr"] == COMMON["learning_rate"]
    start, end = load_file(base / "model.safetensors"), load_file(result.model_dir / "model.safetensors")
    changed = [k for k in end if k in start and not torch.equal(start[k], end[k])]
    assert changed


def test_the_warm_up_keeps_the_schedules_first_step_at_0_in_longer_runs():
    config = TrainingConfig(max_steps=10, warmup_ratio=0.1, learning_rate=1e-3)
    assert config.num_warmup_steps == 1  # HF's get_linear_schedule_with_warmup: the first step at rate 0
    assert TrainingConfig(max_steps=1, warmup_ratio=0.1, learning_rate=1e-3).num_warmup_steps == 0
    assert TrainingConfig(max_steps=1, warmup_steps=3, learning_rate=1e-3).num_warmup_steps == 0


# ---------------------------------------------------------------------- tokens per second
def test_embedding_and_reranking_runs_count_their_real_tokens(base, tmp_path):
    pairs = write_pairs(tmp_path / "pairs.jsonl", 16)
    finetune_embeddings(base, pairs, tmp_path / "embed", **COMMON, max_steps=2)
    rows = write_rows(tmp_path / "rows.jsonl", 16)
    finetune_reranker(base, rows, tmp_path / "rerank", loss="lambda", **COMMON, max_steps=2)
    for run in ("embed", "rerank"):
        train = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
                 if '"train"' in line]
        assert train and all(r["tokens_per_s"] > 0 for r in train), (run, train)
