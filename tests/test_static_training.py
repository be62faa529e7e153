"""Training a static model (a token table) with the embedding trainer: :mod:`bertkit.sentence.static_training`.

The tables are tiny and odd-sized (61 tokens of a word-level tokenizer over the test's words x 13 columns).
Checked: a fresh table trains (the loss on its data falls) and its directory loads in sentence-transformers and
model2vec with bertkit's vectors; the Trainer's first step has the loss and gradients of sentence-transformers'
``StaticEmbedding`` with its ``MatryoshkaLoss`` over ``MultipleNegativesRankingLoss`` on the same batch and table;
a run killed after a checkpoint and an evaluation, then resumed, ends with the uninterrupted run's table, bit for
bit; what a static model cannot train with is a one-line error naming the flag.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main as cli
from bertkit.sentence.data import EmbeddingDataset
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss
from bertkit.sentence.losses.matryoshka import MatryoshkaLoss
from bertkit.sentence.static import load_static
from bertkit.sentence.static_training import StaticCollator, StaticInit, recipe_dims
from bertkit.sentence.training import finetune_embeddings
from test_embedding_eval_during_training import write_sts
from test_embedding_training import WORDS, first_step_gradients, killed_and_resumed, metrics, write_pairs

DIM = 13
COMMON = dict(batch_size=8, learning_rate=0.05, precision="fp32", device="cpu", progress=False)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A word-level tokenizer.json over the test's words (and [UNK]), split at whitespace."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(["[UNK]", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def mean_loss(module, path) -> float:
    """Matryoshka MNRL of the static ``module`` over the file's batches of 8, as the run trains it."""
    collate = StaticCollator(module.tokenize)
    loss = MatryoshkaLoss(MultipleNegativesRankingLoss(), [DIM, 8])
    with torch.no_grad():
        values = [loss(lambda x: module(dict(x))["sentence_embedding"], collate(batch))
                  for batch in EmbeddingDataset(path, 8, seed=1)]
    return float(torch.stack(values).mean())


def test_a_fresh_table_trains_and_its_directory_loads_in_sentence_transformers_and_model2vec(tokenizer_file,
                                                                                             tmp_path):
    st = pytest.importorskip("sentence_transformers")
    model2vec = pytest.importorskip("model2vec")
    train = write_pairs(tmp_path / "pairs.jsonl", 40)
    result = finetune_embeddings(StaticInit(tokenizer_file, DIM), train, tmp_path / "run", epochs=4, seed=3,
                                 matryoshka_dims=[DIM, 8], **COMMON)
    torch.manual_seed(3)  # the run's table before its first step
    before = mean_loss(StaticInit(tokenizer_file, DIM).build(), train)
    assert mean_loss(load_static(result.model_dir)[0], train) < before / 2
    assert result.results["steps"] == 20 and result.results["data"][0]["rows"] == 40

    texts = ["w3 w4 w5", "w6", "w7 w8 w9 w10 w11 w12", "w0 zzz", ""]
    module, normalize, _ = load_static(result.model_dir)
    ours = module.encode(texts, normalize=normalize)
    theirs = st.SentenceTransformer(str(result.model_dir), device="cpu").encode(texts[:3])
    np.testing.assert_allclose(theirs, ours[:3], atol=1e-6)  # sentence-transformers counts [UNK]; model2vec not
    np.testing.assert_allclose(model2vec.StaticModel.from_pretrained(result.model_dir).encode(texts), ours, atol=1e-6)
    card = (result.model_dir / "README.md").read_text()
    for fact in ("a new static table of 13 columns", "pairs.jsonl", "MatryoshkaLoss", "61 rows x 13"):
        assert fact in card
    settings = json.loads((tmp_path / "run" / "run.json").read_text())["embedding"]
    assert settings["static"] and settings["dim"] == DIM and settings["matryoshka_dims"] == [DIM, 8]


def test_a_step_has_sentence_transformers_loss_and_gradients(tokenizer_file, tmp_path):
    """The same table saved by sentence-transformers, the same first batch: the Trainer's logged loss and the
    table's gradient before the optimizer steps equal sentence-transformers' MatryoshkaLoss(MNRL) on it."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss as STMatryoshka
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss as STMNRL
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding as STStatic
    from tokenizers import Tokenizer

    torch.manual_seed(0)
    table = torch.randn(len(WORDS) + 1, DIM)
    st.SentenceTransformer(modules=[STStatic(Tokenizer.from_file(str(tokenizer_file)), embedding_weights=table)],
                           device="cpu").save(str(tmp_path / "init"))
    train = write_pairs(tmp_path / "pairs.jsonl", 40)
    seen, capture = first_step_gradients()
    finetune_embeddings(tmp_path / "init", train, tmp_path / "run", max_steps=1, max_grad_norm=None, seed=7,
                        matryoshka_dims=[DIM, 8, 3], callbacks={"on_train_begin": capture}, **COMMON)
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])

    model = st.SentenceTransformer(str(tmp_path / "init"), device="cpu")
    batch = next(iter(EmbeddingDataset(train, 8, seed=7)))
    features = [model.preprocess([row[role] for row in batch.rows]) for role in ("anchor", "positive")]
    loss = STMatryoshka(model, STMNRL(model), matryoshka_dims=[DIM, 8, 3])(features, None)
    loss.backward()
    assert logged["loss"] == pytest.approx(loss.item(), rel=1e-6)
    assert list(seen) == ["static.embedding.weight"]
    torch.testing.assert_close(seen["static.embedding.weight"], model[0].embedding.weight.grad, rtol=1e-4, atol=1e-6)


def test_a_resumed_run_ends_with_the_uninterrupted_runs_table(tokenizer_file, tmp_path):
    """8 steps over two epochs, a checkpoint at step 3, scored on an STS file every 2 steps: the run killed at step
    5 and resumed equals the whole run bit for bit, with its eval records once each."""
    files = [write_pairs(tmp_path / "a.jsonl", 24, seed=1), write_pairs(tmp_path / "b.jsonl", 16, seed=2)]
    options = dict(max_steps=8, save_every=3, matryoshka_dims=[DIM, 4], eval_sts=write_sts(tmp_path / "sts.jsonl"),
                   eval_every=2, **COMMON)
    train = functools.partial(finetune_embeddings, StaticInit(tokenizer_file, DIM), files)
    whole = train(tmp_path / "whole", **options)
    resumed = killed_and_resumed(train, tmp_path / "cut", 5, **options)

    assert [r["step"] for r in metrics(resumed) if r["split"] == "eval"] == [0, 2, 4, 6, 8]
    assert metrics(resumed) == metrics(whole)
    assert "spearman_cosine" in resumed.results["evaluation"]["final"]
    a, b = load_file(whole.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    assert a.keys() == b.keys() == {"embeddings"}
    torch.testing.assert_close(a["embeddings"], b["embeddings"], rtol=0, atol=0)


def test_the_command_trains_with_the_recipes_defaults_and_saves_the_prompts(tokenizer_file, tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    out = tmp_path / "out"
    assert cli(["finetune", "embed", "--static-from", str(tokenizer_file), "--dim", "100", "--train", str(train),
                "-o", str(out), "--max-steps", "2", "--batch-size", "8", "--device", "cpu", "--threads", "1",
                "--query-prompt", "w50 "]) == 0
    run = json.loads((out / "run.json").read_text())
    assert json.loads((out / "model" / "config_sentence_transformers.json").read_text())["prompts"]["query"] == "w50 "
    assert run["embedding"]["matryoshka_dims"] == recipe_dims(100) == [100, 64, 32]
    assert run["training"]["learning_rate"] == 0.2 and run["training"]["weight_decay"] == 0.0
    assert run["training"]["adam_epsilon"] == 1e-8 and run["training"]["batch_size"] == 8
    assert load_static(out / "model")[0].dim == 100
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["tokens_per_s"] > 0 for r in logged if r["split"] == "train")  # a flat column's tokens count


@pytest.mark.parametrize("flags, message", [
    (["--loss", "cached-mnrl"], "--loss cached-mnrl does not train a static model"),
    (["--max-seq-length", "9"], "--max-seq-length 9: a static model has no max seq length"),
    (["--pooling", "cls"], "--pooling 'cls': a static model has no pooling"),
    (["--matryoshka-dims", "64,8"], f"--matryoshka-dims 64 is above the embedding dimension {DIM}"),
    (["--dim", "0"], "--dim must be a positive integer"),
])
def test_bad_flags_are_one_line_errors(tokenizer_file, tmp_path, capsys, flags, message):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    code = cli(["finetune", "embed", "--static-from", str(tokenizer_file), "--dim", str(DIM), "--train", str(train),
                "-o", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and message in err[0], err


def test_a_model_and_a_new_table_together_are_refused(tokenizer_file, tmp_path, capsys):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    with pytest.raises(SystemExit):
        cli(["finetune", "embed", "--static-from", str(tokenizer_file), "--model", str(tmp_path), "--train",
             str(train), "-o", str(tmp_path / "o")])
    assert "give the model to train: --model DIR, or --static-from TOKENIZER" in capsys.readouterr().err


def test_a_static_from_without_a_tokenizer_is_named(tmp_path, capsys):
    train, empty = write_pairs(tmp_path / "pairs.jsonl", 16), tmp_path / "empty"
    empty.mkdir()
    assert cli(["finetune", "embed", "--static-from", str(empty), "--train", str(train), "-o",
                str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--static-from {empty}: no tokenizer.json there" in err[0]


def test_a_quantized_model2vec_directory_trains_its_clusters_and_keeps_its_mapping_and_weights(tmp_path):
    """model2vec's vocabulary-quantized directory (37 rows shared by the vocabulary through a mapping, per-token
    weights, normalised): training moves the 37 rows only, and the saved directory keeps the mapping and the
    weights, reading in model2vec and sentence-transformers with bertkit's vectors."""
    pytest.importorskip("model2vec")
    from static_dirs import PLAIN, TEXTS, model2vec_dir, peers

    source = model2vec_dir(tmp_path / "m2v", normalize=True, quantized=True)
    train = tmp_path / "pairs.jsonl"
    train.write_text("".join(json.dumps({"anchor": f"the {w} of a static model", "positive": f"{w} and words"})
                             + "\n" for w in ("token", "vector", "table", "mean", "bag", "row", "text", "query")))
    result = finetune_embeddings(source, train, tmp_path / "run", max_steps=3, **COMMON)
    before, after = load_file(source / "model.safetensors"), load_file(result.model_dir / "model.safetensors")
    assert after["embeddings"].shape == before["embeddings"].shape == (37, 13)
    assert not torch.equal(after["embeddings"], before["embeddings"])
    for kept in ("mapping", "weights"):
        torch.testing.assert_close(after[kept], before[kept].to(after[kept].dtype), rtol=0, atol=0)
    texts = [TEXTS[i] for i in PLAIN]
    ours = load_static(result.model_dir)[0].encode(texts, normalize=True)
    for name, vectors in peers(result.model_dir, texts).items():
        np.testing.assert_allclose(vectors, ours, atol=1e-6, err_msg=name)
