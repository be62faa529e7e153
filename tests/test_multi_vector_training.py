"""``finetune_colbert`` / ``bertkit finetune colbert``: a ColBERT trained on the one run, from a tiny random plain
encoder (the projection added) or from a ColBERT directory.

The new model is what sentence-transformers 6.2 builds from the same base; the saved directory loads in
sentence-transformers with bertkit's token vectors; evaluation during training goes through the multi-vector
evaluator and keeps the best model; the distillation losses train from teacher scores; a run cut at a checkpoint
and resumed ends bit for bit as the whole run; 2 gloo processes train as one process with the combined batch
(duplicates across ranks masked); bad settings are one line naming the flag.

Run as a script (``torchrun ... tests/test_multi_vector_training.py BASE PAIRS OUT``) it is the DDP test's worker.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from pathlib import Path

import pytest
import torch

from bertkit.sentence.multi_vector_build import ColBERTSettings, new_multi_vector_encoder
from bertkit.sentence.multi_vector_training import (
    MultiVectorEvaluation,
    MultiVectorLoss,
    finetune_colbert,
)
from bertkit.training import TrainingConfig
from test_embedding_training import WORDS, killed_and_resumed, write_base, write_pairs

COMMON = dict(batch_size=4, learning_rate=1e-3, precision="fp32", device="cpu", progress_bar=False, threads=1,
              seed=7)
TEXTS = ["w1 w2 w3", "w2 w4", "w5 w6 w2 w2 w9", "w7"]  # queries within the expansion length: none cut


def config(**fields) -> TrainingConfig:
    return TrainingConfig.from_dict({**COMMON, **fields})


def records(run_dir: Path, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == split]


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.rglob("*.safetensors"))
    return {f"{f.parent.name}/{k}": v for f in files for k, v in load_file(f).items()}


def same_vectors_in_sentence_transformers(model_dir: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    import bertkit

    ours, ref = bertkit.MultiVectorEncoder(model_dir, dtype="fp32"), st.MultiVectorEncoder(str(model_dir), device="cpu")
    for encode in ("encode_query", "encode_document"):
        for a, b in zip(getattr(ours, encode)(TEXTS), getattr(ref, encode)(TEXTS)):
            torch.testing.assert_close(a, b.float(), atol=1e-5, rtol=1e-5)


def write_scored(path: Path, n: int = 16, seed: int = 2) -> Path:
    """(query, positive, 2 negatives, teacher scores of the three) rows."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            query = rng.sample(WORDS, 3)
            row = {"query": " ".join(query), "positive": " ".join([*query, rng.choice(WORDS)]),
                   "negatives": [" ".join(rng.sample(WORDS, 4)) for _ in range(2)],
                   "label": [rng.uniform(5, 9), rng.uniform(0, 4), rng.uniform(0, 4)]}
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from test_embedding_eval_during_training import write_beir

    root = tmp_path_factory.mktemp("colbert-train")
    return {"base": write_base(root / "base", dropout=0.0), "pairs": write_pairs(root / "pairs.jsonl", 24, seed=1),
            "scored": write_scored(root / "scored.jsonl"), "beir": write_beir(root / "beir")}


def test_a_plain_encoder_trains_into_a_colbert_that_sentence_transformers_loads(data, tmp_path):
    result = finetune_colbert(data["base"], data["pairs"], tmp_path / "run",
                              config(max_steps=6, eval_every=2, keep_best="ndcg@10"),
                              colbert=ColBERTSettings(dim=16, query_expansion=8, document_length=12),
                              evaluation=MultiVectorEvaluation(beir=data["beir"], k=(1, 10)))
    train = records(result.output_dir, "train")
    assert len(train) == 6 and train[-1]["loss"] < train[0]["loss"]
    evals = records(result.output_dir, "eval")
    assert [r["step"] for r in evals] == [0, 2, 4, 6] and "ndcg@10" in evals[0] and "mrr@1" in evals[0]
    assert result.results["best"]["metric"] == "ndcg@10"
    assert result.results["best"]["value"] == max(r["ndcg@10"] for r in evals)  # the kept model is the best
    modules = json.loads((result.model_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Dense", "MultiVectorMask", "Normalize"]
    dense = json.loads((result.model_dir / "1_Dense" / "config.json").read_text())
    assert (dense["in_features"], dense["out_features"], dense["bias"]) == (36, 16, False)
    transformer = json.loads((result.model_dir / "sentence_bert_config.json").read_text())
    assert transformer["query_expansion"]["length"] == 8 and transformer["document_length"] == 12
    assert "ColBERT" in (result.model_dir / "README.md").read_text()
    same_vectors_in_sentence_transformers(result.model_dir)


def test_the_new_model_is_what_sentence_transformers_builds_from_the_same_bases(data, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    dense_dir = tmp_path / "dense"  # a sentence-transformers bi-encoder: its pooling and Normalize dropped
    transformer = Transformer(str(data["base"]), max_seq_length=24)
    st.SentenceTransformer(modules=[transformer, Pooling(36), Normalize()], device="cpu").save(str(dense_dir))
    for base in (data["base"], dense_dir):
        ours = new_multi_vector_encoder(base, tmp_path / f"ours-{base.name}")
        ref = st.MultiVectorEncoder(str(base), device="cpu")
        loaded = st.MultiVectorEncoder(str(ours), device="cpu")
        assert [type(m).__name__ for m in loaded] == [type(m).__name__ for m in ref]
        assert loaded[1].get_config_dict() == ref[1].get_config_dict()  # Dense(36, 128), no bias, identity
        assert loaded[2].get_config_dict() == ref[2].get_config_dict()  # no skiplist
        for name in ("max_seq_length", "query_length", "document_length", "query_expansion"):
            assert getattr(loaded[0], name) == getattr(ref[0], name), name
        assert loaded.prompts == ref.prompts and loaded.similarity_fn_name == ref.similarity_fn_name


@pytest.mark.parametrize("name", ["kl", "margin-mse"])
def test_distillation_from_teacher_scores_trains_a_colbert_directory(data, tmp_path, name):
    start = new_multi_vector_encoder(data["base"], tmp_path / "start", ColBERTSettings(dim=8, skiplist="punctuation"))
    result = finetune_colbert(start, data["scored"], tmp_path / "run", config(max_steps=4, learning_rate=1e-2),
                              loss=MultiVectorLoss(name, temperature=0.5 if name == "kl" else None))
    train = [r["loss"] for r in records(result.output_dir, "train")]
    assert train[-1] < train[0]
    assert json.loads((result.output_dir / "run.json").read_text())["colbert"]["new_model"] is False
    mask = json.loads((result.model_dir / "2_MultiVectorMask" / "config.json").read_text())
    assert "," in mask["skiplist_words"]  # the ColBERT's own settings kept


def test_a_run_cut_at_a_checkpoint_and_resumed_ends_bit_for_bit_as_the_whole_run(data, tmp_path):
    base = write_base(tmp_path / "base", dropout=0.1)
    options = dict(training=config(max_steps=6, save_every=3), loss=MultiVectorLoss("cached-mnrl", mini_batch_size=3),
                   colbert=ColBERTSettings(dim=8, query_expansion=8))
    whole = finetune_colbert(base, data["pairs"], tmp_path / "whole", **options)
    resumed = killed_and_resumed(functools.partial(finetune_colbert, base, data["pairs"]), tmp_path / "cut", 4,
                                 **options)
    strip = ("eval_s", "elapsed_s", "tokens_per_s", "examples_per_s")
    assert [{k: v for k, v in r.items() if k not in strip} for r in records(resumed.output_dir, "train")] == \
        [{k: v for k, v in r.items() if k not in strip} for r in records(whole.output_dir, "train")]
    a, b = weights(whole.model_dir), weights(resumed.model_dir)
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


# ---------------------------------------------------------------------- two processes against one
DDP_STEPS = 3


def ddp_runs(base: Path, pairs: Path, out: Path) -> None:
    """The runs compared (batch 8 rows a step): MNRL, and its cached form."""
    for name, loss in {"mnrl": MultiVectorLoss("mnrl", scale=2.0),
                       "cached": MultiVectorLoss("cached-mnrl", mini_batch_size=3)}.items():
        finetune_colbert(base, pairs, out / name, config(max_steps=DDP_STEPS, batch_size=8), loss=loss,
                         colbert=ColBERTSettings(dim=8, query_expansion=8))


@pytest.fixture(scope="module")
def ddp(data, tmp_path_factory):
    from conftest import run_torchrun
    from test_embedding_ddp import write_duplicated_pairs

    root = tmp_path_factory.mktemp("colbert-ddp")
    pairs = write_duplicated_pairs(root / "pairs.jsonl")  # duplicate positives across the ranks: masked
    result = run_torchrun(__file__, str(data["base"]), str(pairs), str(root / "two"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    torch.set_num_threads(1)
    ddp_runs(data["base"], pairs, root / "one")
    return root


@pytest.mark.parametrize("name", ["mnrl", "cached"])
def test_two_processes_train_as_one_with_the_combined_batch(ddp, name):
    one, two = ddp / "one" / name, ddp / "two" / name
    losses = [[r["loss"] for r in records(run, "train")] for run in (one, two)]
    assert len(losses[1]) == DDP_STEPS
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-5, atol=1e-6)
    a, b = weights(one / "model"), weights(two / "model")
    assert a.keys() == b.keys() and a
    for key in a:  # an attention key bias: a gradient of 0 but for rounding, which Adam scales up
        tolerance = {"rtol": 0, "atol": 2e-5} if key.endswith("key.bias") else {"rtol": 1e-5, "atol": 1e-6}
        torch.testing.assert_close(b[key], a[key], **tolerance, msg=key)


# ---------------------------------------------------------------------- the command and bad input
def cli_run(data, out, *flags, model=None) -> int:
    from bertkit.cli import main

    return main(["finetune", "colbert", "--model", str(model or data["base"]), "--train", str(data["pairs"]),
                 "-o", str(out), "--batch-size", "4", "--precision", "fp32", "--device", "cpu", "--threads", "1",
                 *flags])


def test_the_command_trains_a_new_colbert_with_its_flags(data, tmp_path):
    out = tmp_path / "out"
    assert cli_run(data, out, "--max-steps", "2", "--dim", "12", "--query-expansion", "12", "--skiplist",
                   "punctuation", "--query-prompt", "query: ", "--eval-beir", str(data["beir"]), "--eval-k",
                   "1,10") == 0
    run = json.loads((out / "run.json").read_text())["colbert"]
    assert run["dim"] == 12 and run["query_expansion"]["length"] == 12 and run["new_model"] and run["scale"] is None
    settings = json.loads((out / "model" / "config_sentence_transformers.json").read_text())
    assert settings["prompts"]["query"] == "query: " and settings["model_type"] == "MultiVectorEncoder"
    assert [r["step"] for r in records(out, "eval")] == [0, 2]


def test_the_command_reports_its_losses_to_tensorboard(data, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from test_report_to import assert_same_series, expected, tensorboard_scalars

    out = tmp_path / "out"
    assert cli_run(data, out, "--max-steps", "3", "--dim", "8", "--report-to", "tensorboard") == 0
    capsys.readouterr()
    want = expected(out)
    assert "train/loss" in want
    scalars, _ = tensorboard_scalars(out)
    assert_same_series(scalars, want)


@pytest.mark.parametrize("flags, message", [
    (["--loss", "triplet"], "--loss 'triplet' is not a loss bertkit trains ColBERT models with; choose one of mnrl"),
    (["--temperature", "2"], "--temperature does not apply to --loss mnrl; it applies to kl"),
    (["--dim", "0"], "--dim must be a positive integer"),
    (["--max-seq-length", "9"], "--max-seq-length does not apply to a ColBERT run"),
    (["--query-expansion", "500"], "--query-expansion 500: .* takes at most 40 tokens"),
    (["--loss", "kl"], "pairs.jsonl: --loss kl distills a teacher's scores .* \\['anchor', 'positive'\\]"),
])
def test_bad_flags_are_one_line_errors(data, tmp_path, capsys, flags, message):
    assert cli_run(data, tmp_path / "o", "--max-steps", "1", *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and __import__("re").search(message, err[0]), err
    assert not (tmp_path / "o").exists()


def test_new_model_flags_on_a_colbert_are_refused_in_one_line(data, tmp_path, capsys):
    start = new_multi_vector_encoder(data["base"], tmp_path / "start", ColBERTSettings(dim=8))
    assert cli_run(data, tmp_path / "o", "--dim", "16", model=start) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a ColBERT model already" in err[0] and "--dim" in err[0]
    assert not (tmp_path / "o").exists()


if __name__ == "__main__":  # the torchrun worker of the DDP test
    sys.path.insert(0, str(Path(__file__).parent))
    torch.set_num_threads(1)
    ddp_runs(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
