"""``finetune_embeddings`` / ``finetune_reranker`` under torchrun (2 gloo processes) against one process.

``batch_size`` counts the rows of an optimizer step over all processes: a 2-process run with ``batch_size`` 2B
reads global batches of 2B rows and each rank trains on its half; the losses gather the candidates (and their
text ids) from both ranks. Checked end to end on a tiny BERT without dropout: the 2-process run logs the losses
and saves the weights of a 1-process run with the same ``batch_size`` (MNRL and cached MNRL, whose gradients the
Trainer averages itself: ``grad_sync="manual"``; the reranker with BCE), and a 2-process run cut after a checkpoint
and resumed ends as the uninterrupted one. The training file repeats a few positives, so
most global batches hold a text on rank 1 that duplicates one on rank 0: the 1-process run masks it out of the
negatives, and so must the 2-process run (ids numbered over the global batch, gathered with the embeddings).

Run as a script (``torchrun ... tests/test_embedding_ddp.py BASE CROSS PAIRS OUT``) it is the worker of the test.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

STEPS, PER_RANK = 3, 4
COMMON = dict(learning_rate=1e-3, precision="fp32", device="cpu", progress=False, threads=1, max_steps=STEPS)
RUNS = {"mnrl": {"loss": "mnrl"}, "cached": {"loss": "cached-mnrl", "mini_batch_size": 3}}


def write_duplicated_pairs(path: Path, n: int = 24) -> Path:
    """(anchor, positive) rows with distinct anchors and only 5 distinct positives: duplicates in every batch."""
    from test_embedding_training import WORDS

    rng = random.Random(0)
    positives = [" ".join(rng.sample(WORDS, 3)) for _ in range(5)]
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"anchor": f"{WORDS[i]} {WORDS[i + 30]}", "positive": positives[i % 5]}) + "\n")
    return path


def train(base: Path, cross: Path, pairs: Path, out: Path, batch_size: int) -> None:
    """The runs compared: each embedding loss, and the reranker, into ``out/NAME``."""
    from bertkit.sentence.rerank_training import finetune_reranker
    from bertkit.sentence.training import finetune_embeddings

    for name, options in RUNS.items():
        finetune_embeddings(base, pairs, out / name, batch_size=batch_size, **options, **COMMON)
    finetune_reranker(cross, pairs, out / "rerank", batch_size=batch_size, loss="bce", **COMMON)


def cut_and_resume(base: Path, pairs: Path, out: Path, batch_size: int) -> None:
    """The MNRL run into ``out/resumed``, stopped (on both ranks) after its checkpoint at step 2 and resumed."""
    from bertkit.sentence.training import finetune_embeddings
    from bertkit.training import Trainer

    original = Trainer.save_checkpoint

    def crash_after_saving(self):
        original(self)
        raise KeyboardInterrupt  # after the checkpoint's barrier: every rank stops at the same point

    options = dict(batch_size=batch_size, save_every=2, **RUNS["mnrl"], **COMMON)
    Trainer.save_checkpoint = crash_after_saving
    try:
        finetune_embeddings(base, pairs, out / "resumed", **options)
        raise AssertionError("the run was not cut")
    except KeyboardInterrupt:
        assert len(losses(out / "resumed")) == 2  # rank 0 logged both steps before the checkpoint barrier
    finally:
        Trainer.save_checkpoint = original
    finetune_embeddings(base, pairs, out / "resumed", resume=True, **options)


def losses(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r.get("split") == "train"]


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.rglob("*.safetensors"))
    return {name: tensor for file in files for name, tensor in load_file(file).items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from conftest import run_torchrun
    from test_embedding_training import write_base

    root = tmp_path_factory.mktemp("ddp")
    base = write_base(root / "base", dropout=0.0)
    cross = write_base(root / "cross", dropout=0.0)
    pairs = write_duplicated_pairs(root / "pairs.jsonl")
    result = run_torchrun(__file__, str(base), str(cross), str(pairs), str(root / "two"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    torch.set_num_threads(1)
    train(base, cross, pairs, root / "one", batch_size=2 * PER_RANK)  # the same rows per step as the two ranks
    return root


@pytest.mark.parametrize("name", [*RUNS, "rerank"])
def test_two_processes_train_as_one_with_the_combined_batch(runs, name):
    one, two = runs / "one" / name, runs / "two" / name
    assert len(losses(two)) == STEPS
    torch.testing.assert_close(torch.tensor(losses(two)), torch.tensor(losses(one)), rtol=1e-5, atol=1e-6)
    mine, theirs = weights(two / "model"), weights(one / "model")
    assert mine.keys() == theirs.keys() and mine
    for key in mine:
        torch.testing.assert_close(mine[key], theirs[key], rtol=1e-5, atol=1e-6, msg=key)
    assert json.loads((two / "results.json").read_text())["steps"] == STEPS


def test_a_run_cut_at_a_checkpoint_and_resumed_under_torchrun_ends_as_the_whole_run(runs):
    """The checkpoint holds the global stream position: the resumed ranks read on from the next global batch."""
    whole, resumed = runs / "two" / "mnrl", runs / "two" / "resumed"
    assert losses(resumed) == losses(whole)
    mine, theirs = weights(resumed / "model"), weights(whole / "model")
    for key in mine:
        torch.testing.assert_close(mine[key], theirs[key], rtol=0, atol=0, msg=key)


def test_a_file_smaller_than_one_global_batch_names_the_flag(tmp_path):
    from bertkit.sentence.training import global_batches
    from test_embedding_training import write_pairs

    pairs = write_pairs(tmp_path / "pairs.jsonl", 7)
    with pytest.raises(ValueError, match=r"has 7 rows, fewer than one whole batch of 8 .*--batch-size") as info:
        global_batches([pairs], 8, 2)
    assert "\n" not in str(info.value)


def test_the_cached_loss_declares_manual_gradient_sync():
    """The Trainer runs the cached loss outside DDP and averages its gradients itself (what makes the 2-process
    cached run above train as one process): the bi-encoder declares it, through any wrapper of the loss."""
    from bertkit.embedding.training import BiEncoder, build_loss

    net = torch.nn.Linear(1, 1)
    assert BiEncoder(net, build_loss("cached-mnrl", mini_batch_size=2)).grad_sync == "manual"
    assert BiEncoder(net, build_loss("cached-mnrl", matryoshka_dims=[8])).grad_sync == "manual"
    assert BiEncoder(net, build_loss("mnrl")).grad_sync == "ddp"


if __name__ == "__main__":
    base_dir, cross_dir, pairs_file, out_dir = map(Path, sys.argv[1:5])
    train(base_dir, cross_dir, pairs_file, out_dir, batch_size=2 * PER_RANK)  # rows per step over both processes
    cut_and_resume(base_dir, pairs_file, out_dir, batch_size=2 * PER_RANK)
