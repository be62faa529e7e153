"""``bertkit finetune rerank`` / :func:`finetune_reranker`: a cross-encoder trained through the one Trainer.

A tiny HF BertForSequenceClassification (one label) is the base. Checked: BCE training lowers the loss on its
data and sentence-transformers 6.2.0's ``CrossEncoder`` loads the output with bertkit's scores; a run cut
after a checkpoint and resumed (mnrl: random in-batch negatives, dropout on) ends with the uninterrupted
run's weights bit for bit; bad flags are one-line errors.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertkit.cli import main as cli
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.data import EmbeddingDataset
from bertkit.sentence.losses.rerank import BinaryCrossEntropyLoss
from bertkit.sentence.rerank_training import RerankCollator, finetune_reranker
from bertkit.training import Trainer
from test_embedding_training import first_step_gradients

WORDS = [f"w{i}" for i in range(60)]
COMMON = dict(batch_size=8, learning_rate=1e-3, precision="fp32", device="cpu", progress=False)


def write_base(directory, dropout: float):
    from transformers import BertConfig, BertForSequenceClassification

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, max_position_embeddings=40, num_labels=1,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    BertForSequenceClassification(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return directory


def write_rows(path, n: int, seed: int = 0, labelled: bool = False):
    """(query, positive, negative) rows, or with ``labelled`` (query, passage, label) rows, half relevant; a
    relevant passage repeats the query (a signal a tiny model learns in a few steps)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            query = " ".join(rng.sample(WORDS, 4))
            relevant, other = query, " ".join(rng.sample(WORDS, 5))
            row = {"query": query, "passage": relevant if i % 2 else other, "label": i % 2} if labelled else \
                {"query": query, "positive": relevant, "negative": other}
            f.write(json.dumps(row) + "\n")
    return path


def mean_bce(model_dir, path) -> float:
    cross = CrossEncoder(model_dir)
    collate, loss = RerankCollator(cross.tokenize, labelled=True), BinaryCrossEntropyLoss()
    with torch.no_grad():
        values = [loss(cross.score, collate(batch)["rerank"]) for batch in EmbeddingDataset(path, 8, seed=1)]
    return float(torch.stack(values).mean())


def test_bce_lowers_the_loss_and_sentence_transformers_loads_the_reranker(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    base = write_base(tmp_path / "base", dropout=0.0)
    train = write_rows(tmp_path / "pairs.jsonl", 40, labelled=True)
    result = finetune_reranker(base, train, tmp_path / "run", loss="bce", epochs=8,
                               **{**COMMON, "learning_rate": 3e-3})
    assert mean_bce(result.model_dir, train) < mean_bce(base, train) - 0.05
    assert result.results["steps"] == 40 and (tmp_path / "run" / "results.json").exists()
    card = (result.model_dir / "README.md").read_text()
    for fact in ("cross-encoder", str(base), "pairs.jsonl", "40 rows", "BinaryCrossEntropyLoss", "40 (8.00 epochs)",
                 f"{result.results['final_train_loss']:.4f}"):
        assert fact in card
    pairs = [("w1 w2 w3", "w1 w2 w3 w4"), ("w5", "w6 w7 w8"), ("w9 w10", "w0 w9 w10 w11 w12")]
    ref = st.CrossEncoder(str(result.model_dir), device="cpu")
    np.testing.assert_allclose(ref.predict(pairs), CrossEncoder(result.model_dir).predict(pairs), atol=1e-5)


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    base = write_base(tmp_path / "base", dropout=0.1)
    files = [write_rows(tmp_path / "a.jsonl", 24, seed=1), write_rows(tmp_path / "b.jsonl", 16, seed=2)]
    options = dict(loss="mnrl", num_negatives=2, max_steps=7, save_every=3, **COMMON)
    whole = finetune_reranker(base, files, tmp_path / "whole", **options)

    class Stop(Exception):
        pass

    original = Trainer.save_checkpoint

    def crash_after_first(self):
        original(self)
        raise Stop()

    monkeypatch.setattr(Trainer, "save_checkpoint", crash_after_first)
    with pytest.raises(Stop):
        finetune_reranker(base, files, tmp_path / "cut", **options)
    monkeypatch.setattr(Trainer, "save_checkpoint", original)
    resumed = finetune_reranker(base, files, tmp_path / "cut", resume=True, **options)

    assert resumed.results == whole.results
    a, b = load_file(whole.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("flags, message", [
    (["--loss", "softmax"], "--loss 'softmax' is not a loss bertkit trains rerankers with; choose one of bce"),
    (["--loss", "bce", "--num-negatives", "3"], "--num-negatives does not apply to --loss bce"),
])
def test_bad_flags_are_one_line_errors(tmp_path, capsys, flags, message):
    train = write_rows(tmp_path / "rows.jsonl", 8)
    assert cli(["finetune", "rerank", "--model", str(tmp_path / "none"), "--train", str(train), "-o",
                str(tmp_path / "o"), *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_label_count_that_does_not_match_the_passages_is_named(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"query": "w1", "positive": "w2", "negative": "w3", "label": [1, 0, 0]}) + "\n")
    batch = next(iter(EmbeddingDataset(path, 1)))
    with pytest.raises(ValueError, match=r"t.jsonl, line 1: 3 label\(s\) for 2 passage\(s\)"):
        RerankCollator(lambda pairs: {}, labelled=True)(batch)


def test_a_step_is_the_loss_called_directly_on_the_same_batch(tmp_path):
    """The Trainer's first step (listnet on (query, positive, negative) rows labelled 1, 0) has the loss and the
    gradients of ListNetLoss called on the dataset's first batch with the base model: the adapter adds nothing."""
    from bertkit.sentence.losses.rerank import ListNetLoss, RerankBatch

    base = write_base(tmp_path / "base", dropout=0.0)
    train = write_rows(tmp_path / "rows.jsonl", 24)
    seen, capture = first_step_gradients()

    finetune_reranker(base, train, tmp_path / "run", loss="listnet", max_steps=1, max_grad_norm=None, seed=5,
                      callbacks={"on_train_begin": capture}, **COMMON)
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])

    torch.manual_seed(5)  # as the run seeds before loading (the base has its head already)
    cross = CrossEncoder(base, num_labels=1)
    cross.model.train()
    rows = next(iter(EmbeddingDataset(train, 8, seed=5))).rows
    batch = RerankBatch([r["anchor"] for r in rows], [[r["positive"], r["negative_1"]] for r in rows],
                        cross.tokenize, [[1.0, 0.0]] * len(rows))
    loss = ListNetLoss()(cross.score, batch)
    loss.backward()
    assert logged["loss"] == pytest.approx(loss.item(), rel=1e-6)
    for name, p in cross.model.named_parameters():
        if p.grad is None:
            assert seen[name] is None, name
        else:
            torch.testing.assert_close(seen[name], p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_workers_are_refused_in_one_line(tmp_path):
    """A reranker's batches are tokenized in its loss: DataLoader workers would have nothing to do."""
    from bertkit.training import TrainingConfig

    with pytest.raises(ValueError, match=r"num_workers=2: a reranker's batches are tokenized in its loss") as info:
        finetune_reranker(tmp_path / "cross", tmp_path / "rows.jsonl", tmp_path / "run",
                          TrainingConfig(max_steps=1, num_workers=2))
    assert "\n" not in str(info.value) and not (tmp_path / "run").exists()
