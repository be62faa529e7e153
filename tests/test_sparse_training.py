"""``finetune_sparse``: SPLADE and inference-free SPLADE trained on the one run, from a tiny odd-sized random MLM.

The saved directories load in sentence-transformers 6.2 with bertkit's vectors; the regulariser weights warm up
as logged; evaluation during training goes through the sparse index and keeps the best model; the inference-free
query side starts from the IDF of the training documents and learns at its own rate; a run cut at a checkpoint and
resumed ends bit for bit as the whole run; 2 gloo processes train as one process with the combined batch.

Run as a script (``torchrun ... tests/test_sparse_training.py MLM PAIRS OUT``) it is the DDP test's worker.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

from bertkit.sentence.sparse_training import SparseEvaluation, SparseLoss, SparseModel, finetune_sparse
from bertkit.sentence.training import TrainingFiles
from bertkit.training import TrainingConfig
from test_embedding_training import killed_and_resumed

COMMON = dict(batch_size=4, learning_rate=1e-3, precision="fp32", device="cpu", progress_bar=False, threads=1,
              seed=7)
TEXTS = ["w1 w2 w3", "w2 w4", "w5 w6 w2 w2", "w7"]


def write_mlm(directory: Path, dropout: float = 0.0) -> Path:
    """A tiny random BertForMaskedLM (hidden 36, 3 heads, intermediate 37) with test_embedding_training's vocab."""
    from transformers import BertConfig, BertForMaskedLM

    from test_embedding_training import WORDS

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, max_position_embeddings=40, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, initializer_range=0.2)
    BertForMaskedLM(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return directory


def config(**fields) -> TrainingConfig:
    return TrainingConfig.from_dict({**COMMON, **fields})


def records(run_dir: Path, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == split]


def same_vectors_in_sentence_transformers(model_dir: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    import bertkit

    ours, ref = bertkit.SparseEncoder(model_dir, dtype="fp32"), st.SparseEncoder(str(model_dir), device="cpu")
    for encode in ("encode_query", "encode_document"):
        torch.testing.assert_close(getattr(ours, encode)(TEXTS).to_dense(), getattr(ref, encode)(TEXTS).to_dense(),
                                   atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from test_embedding_eval_during_training import write_beir
    from test_embedding_training import write_pairs

    root = tmp_path_factory.mktemp("sparse-train")
    return {"mlm": write_mlm(root / "mlm"), "pairs": write_pairs(root / "pairs.jsonl", 24, seed=1),
            "beir": write_beir(root / "beir")}


def test_splade_trains_evaluates_keeps_the_best_and_loads_in_sentence_transformers(data, tmp_path):
    result = finetune_sparse(data["mlm"], data["pairs"], tmp_path / "run",
                             config(max_steps=6, eval_every=2, keep_best="ndcg@10"),
                             loss=SparseLoss("mnrl", document_weight=0.01, query_weight=0.02),
                             sparse=SparseModel(max_active_dims=9),
                             evaluation=SparseEvaluation(beir=data["beir"]))
    train = records(result.output_dir, "train")
    weights = [r["document_regulariser_weight"] for r in train]
    assert weights[0] == 0.0 and weights[-1] == pytest.approx(0.01)  # warmed up over int(6 / 3) = 2 steps
    assert {"base_loss", "query_regulariser", "document_regulariser"} <= set(train[-1])
    evals = records(result.output_dir, "eval")
    assert [r["step"] for r in evals] == [0, 2, 4, 6] and "ndcg@10" in evals[0]
    assert any("active_dims" in key for key in evals[0])
    assert result.results["best"]["metric"] == "ndcg@10"
    settings = json.loads((result.model_dir / "config_sentence_transformers.json").read_text())
    assert settings["max_active_dims"] == 9 and settings["model_type"] == "SparseEncoder"
    same_vectors_in_sentence_transformers(result.model_dir)


def test_inference_free_query_side_starts_from_idf_and_learns_at_its_own_rate(data, tmp_path):
    import bertkit
    from bertkit.sentence.sparse_build import idf_weights, new_sparse_encoder
    from bertkit.sentence.sparse_training import SparseRecipe

    recipe = SparseRecipe(data["mlm"], data["pairs"], config(max_steps=3), loss=SparseLoss(),
                          sparse=SparseModel(inference_free=True), data=TrainingFiles(),
                          evaluation=SparseEvaluation())
    documents = recipe.documents()
    start = new_sparse_encoder(data["mlm"], tmp_path / "start", inference_free=True, documents=documents)
    initial = bertkit.SparseEncoder(start, dtype="fp32").route("query").weight.detach().clone()
    tokenizer = bertkit.SparseEncoder(start).route("query").tokenizer
    torch.testing.assert_close(initial, idf_weights(documents, tokenizer, len(initial)))
    token = tokenizer.convert_tokens_to_ids(["w3"])[0]
    df = sum(token in tokenizer(d, add_special_tokens=False)["input_ids"] for d in documents)
    assert initial[token].item() == pytest.approx(torch.log1p(torch.tensor((len(documents) - df + 0.5) /
                                                                           (df + 0.5))).item(), rel=1e-6)

    result = finetune_sparse(data["mlm"], data["pairs"], tmp_path / "run", config(max_steps=3, learning_rate=1e-6),
                             sparse=SparseModel(inference_free=True, static_learning_rate=1e-2))
    trained = bertkit.SparseEncoder(result.model_dir, dtype="fp32")
    moved = (trained.route("query").weight - initial).abs().max().item()
    assert 5e-3 < moved <= 3 * 1e-2 * 1.01  # Adam moves a weight by about its learning rate a step
    first = records(result.output_dir, "train")[0]
    assert first["query_regulariser_weight"] == 0 and "query_regulariser" not in first  # none on the static side
    same_vectors_in_sentence_transformers(result.model_dir)



def test_an_inference_free_query_side_cuts_queries_where_its_document_side_does(data, tmp_path):
    """The saved static query side truncates at the training --max-seq-length, as sentence-transformers' Router
    saves its one tokenizer, in bertkit and in sentence-transformers alike."""
    st = pytest.importorskip("sentence_transformers")
    import bertkit
    from bertkit.sentence.sparse_build import new_sparse_encoder

    start = new_sparse_encoder(data["mlm"], tmp_path / "start", inference_free=True, documents=TEXTS,
                               max_seq_length=5)
    long_query = " ".join(f"w{i}" for i in range(1, 8))  # 7 tokens: w6 and w7 fall past 5
    ours = bertkit.SparseEncoder(start, dtype="fp32").encode_query([long_query], convert_to_tensor=True)
    ref = st.SparseEncoder(str(start), device="cpu").encode_query([long_query], convert_to_tensor=True)
    torch.testing.assert_close(ours.to_dense(), ref.to_dense())
    assert int((ours.to_dense() > 0).sum()) == 5


@pytest.mark.parametrize("inference_free", [False, True])
def test_a_run_cut_at_a_checkpoint_and_resumed_ends_bit_for_bit_as_the_whole_run(data, tmp_path, inference_free):
    from safetensors.torch import load_file

    mlm = write_mlm(tmp_path / "mlm", dropout=0.1)
    options = dict(training=config(max_steps=6, save_every=3), sparse=SparseModel(inference_free=inference_free),
                   loss=SparseLoss("mnrl", mini_batch_size=3, document_weight=0.01))
    whole = finetune_sparse(mlm, data["pairs"], tmp_path / "whole", **options)
    resumed = killed_and_resumed(functools.partial(finetune_sparse, mlm, data["pairs"]), tmp_path / "cut", 4,
                                 **options)
    strip = ("eval_s", "elapsed_s", "tokens_per_s", "examples_per_s")
    assert [{k: v for k, v in r.items() if k not in strip} for r in records(resumed.output_dir, "train")] == \
        [{k: v for k, v in r.items() if k not in strip} for r in records(whole.output_dir, "train")]
    a = {k: v for f in sorted(whole.model_dir.rglob("*.safetensors")) for k, v in load_file(f).items()}
    b = {k: v for f in sorted(resumed.model_dir.rglob("*.safetensors")) for k, v in load_file(f).items()}
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


# ---------------------------------------------------------------------- two processes against one
DDP_STEPS = 3


def ddp_runs(mlm: Path, pairs: Path, out: Path) -> None:
    """The runs compared (batch 8 rows a step): SPLADE with MNRL, and inference-free with the cached loss."""
    runs = {"splade": dict(loss=SparseLoss("mnrl", document_weight=0.05, query_weight=0.05)),
            "free": dict(loss=SparseLoss("mnrl", mini_batch_size=3, document_weight=0.05),
                         sparse=SparseModel(inference_free=True))}
    for name, options in runs.items():
        finetune_sparse(mlm, pairs, out / name, config(max_steps=DDP_STEPS, batch_size=8), **options)


@pytest.fixture(scope="module")
def ddp(data, tmp_path_factory):
    from conftest import run_torchrun
    from test_embedding_ddp import write_duplicated_pairs

    root = tmp_path_factory.mktemp("sparse-ddp")
    pairs = write_duplicated_pairs(root / "pairs.jsonl")
    result = run_torchrun(__file__, str(data["mlm"]), str(pairs), str(root / "two"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    torch.set_num_threads(1)
    ddp_runs(data["mlm"], pairs, root / "one")
    return root


@pytest.mark.parametrize("name", ["splade", "free"])
def test_two_processes_train_as_one_with_the_combined_batch(ddp, name):
    from safetensors.torch import load_file

    one, two = ddp / "one" / name, ddp / "two" / name
    losses = [[r["loss"] for r in records(run, "train")] for run in (one, two)]
    assert len(losses[1]) == DDP_STEPS
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-5, atol=1e-6)
    a = {k: v for f in sorted((one / "model").rglob("*.safetensors")) for k, v in load_file(f).items()}
    b = {k: v for f in sorted((two / "model").rglob("*.safetensors")) for k, v in load_file(f).items()}
    assert a.keys() == b.keys() and a
    for key in a:
        # an attention key bias shifts every score of a query alike: its gradient is 0 but for rounding, which the
        # two runs round differently (the gathered sums add in another order) and Adam scales up
        tolerance = {"rtol": 0, "atol": 2e-5} if key.endswith("key.bias") else {"rtol": 1e-5, "atol": 1e-6}
        torch.testing.assert_close(b[key], a[key], **tolerance, msg=key)


# ---------------------------------------------------------------------- bad input
def test_bad_input_is_one_line_naming_the_argument(data, tmp_path):
    from bertkit.sentence.batch import PairBatch
    from bertkit.sentence.losses.sparse import SpladeLoss
    from test_embedding_training import write_base

    cases = [
        (dict(sparse=SparseModel(max_active_dims=0)), data["mlm"], "--max-active-dims must be a positive integer"),
        ({}, write_base(tmp_path / "encoder", dropout=0.0), "has no masked-LM head .* pass a checkpoint with its MLM"),
    ]
    for options, model, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            finetune_sparse(model, data["pairs"], tmp_path / "out", config(max_steps=1), **options)
        assert "\n" not in str(info.value)

    loss = SpladeLoss(torch.nn.Identity())
    batch = PairBatch(["anchor", "positive"], [{"x": torch.zeros(2, 1)}, {"x": torch.zeros(2, 1)}],
                      [torch.arange(2), torch.arange(2, 4)])
    with pytest.raises(ValueError, match="query vectors have 50 dimensions and the document vectors \\[65\\]"):
        loss.from_embeddings([torch.rand(2, 50), torch.rand(2, 65)], batch)


def test_an_inference_free_model_whose_query_side_has_another_tokenizer_is_refused(data, tmp_path):
    from bertkit.sentence.sparse_build import new_sparse_encoder

    model = new_sparse_encoder(data["mlm"], tmp_path / "free", inference_free=True, documents=["w1 w2"])
    vocab = model / "query_0_SparseStaticEmbedding" / "vocab.txt"
    words = vocab.read_text().splitlines()
    vocab.write_text("\n".join([*words[:5], *reversed(words[5:])]) + "\n")  # same size, other ids
    (model / "query_0_SparseStaticEmbedding" / "tokenizer.json").unlink(missing_ok=True)
    with pytest.raises(ValueError, match=r"--model .*the query side's tokenizer is not the document side's") as info:
        finetune_sparse(model, data["pairs"], tmp_path / "out", config(max_steps=1))
    assert "\n" not in str(info.value)



# ---------------------------------------------------------------------- the command
def cli_run(data, out, *flags) -> int:
    from bertkit.cli import main

    return main(["finetune", "sparse", "--model", str(data["mlm"]), "--train", str(data["pairs"]), "-o", str(out),
                 "--batch-size", "4", "--precision", "fp32", "--device", "cpu", "--threads", "1", *flags])


def test_the_command_trains_an_inference_free_model_with_its_flags(data, tmp_path):
    out = tmp_path / "out"
    assert cli_run(data, out, "--max-steps", "2", "--inference-free", "--static-learning-rate", "0.01",
                   "--document-regulariser", "l1", "--document-weight", "0.001", "--max-active-dims", "7",
                   "--eval-beir", str(data["beir"]), "--eval-k", "1,10", "--query-prompt", "query: ") == 0
    run = json.loads((out / "run.json").read_text())["sparse"]
    assert run["inference_free"] and run["document_regulariser"] == "l1" and run["max_active_dims"] == 7
    assert run["static_learning_rate"] == 0.01 and run["query_weight"] == 0.0
    assert "inference-free SPLADE" in (out / "model" / "README.md").read_text()
    settings = json.loads((out / "model" / "config_sentence_transformers.json").read_text())
    assert settings["prompts"]["query"] == "query: " and settings["max_active_dims"] == 7
    assert [r["step"] for r in records(out, "eval")] == [0, 2]



def test_the_command_reports_the_loss_parts_and_regulariser_weights_to_tensorboard(data, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from test_report_to import assert_same_series, expected, tensorboard_scalars

    out = tmp_path / "out"
    assert cli_run(data, out, "--max-steps", "3", "--report-to", "tensorboard") == 0
    capsys.readouterr()
    want = expected(out)
    assert {"train/base_loss", "train/document_regulariser", "train/document_regulariser_weight"} <= set(want)
    scalars, _ = tensorboard_scalars(out)
    assert_same_series(scalars, want)


@pytest.mark.parametrize("flags, message", [
    (["--max-active-dims", "0"], "--max-active-dims must be a positive integer"),
    (["--loss", "triplet"], "--loss 'triplet' is not a loss bertkit trains sparse encoders with; choose one of mnrl"),
    (["--temperature", "2"], "--temperature does not apply to --loss mnrl; it applies to kl"),
    (["--document-weight", "-1"], "--document-weight must be a non-negative number"),
    (["--regulariser-warmup", "2"], "--regulariser-warmup must be between 0 and 1"),
])
def test_bad_flags_are_one_line_errors(data, tmp_path, capsys, flags, message):
    assert cli_run(data, tmp_path / "o", *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "o").exists()


if __name__ == "__main__":  # the torchrun worker of the DDP test
    sys.path.insert(0, str(Path(__file__).parent))
    torch.set_num_threads(1)
    ddp_runs(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
