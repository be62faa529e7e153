"""``bertkit distill static``: the token rows are the teacher's own pooled outputs (as transformers computes them),
PCA equals an SVD's, the SIF / Zipf weights follow their formulas, added words are read whole, and the output
loads in model2vec and sentence-transformers with bertkit's vectors; bad input is one line naming the flag."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.sentence.distill import (
    DistillSettings,
    corpus_words,
    distill_static,
    distill_table,
    load_teacher,
    pca,
    token_vectors,
    token_weights,
    with_words,
)
from bertkit.sentence.static import load_static
from test_embedding_eval import WORDS, tiny_sentence_transformer

TEXTS = ["the single man in possession of a good fortune", "truth universally acknowledged", "", "want wife wife"]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return tiny_sentence_transformer(tmp_path_factory.mktemp("teacher") / "st")


def hf_rows(teacher_dir: pathlib.Path, ids: list[list[int]]) -> np.ndarray:
    """Mean of transformers' BertModel hidden states over each id row: model2vec's recipe, the reference."""
    transformers = pytest.importorskip("transformers")
    bert = transformers.BertModel.from_pretrained(teacher_dir.parent / f"{teacher_dir.name}-bert").eval()
    with torch.no_grad():
        return np.stack([bert(torch.tensor([row])).last_hidden_state[0].mean(0).numpy() for row in ids])


def test_token_rows_are_the_teachers_mean_pooled_outputs(teacher_dir):
    teacher = load_teacher(teacher_dir)
    vocab = teacher.tokenizer.backend_tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    ours = token_vectors(teacher, tokens, len(tokens), batch_size=7, progress=False)
    expected = hf_rows(teacher_dir, [[cls, i, sep] for i in range(len(tokens))])
    torch.testing.assert_close(torch.from_numpy(ours), torch.from_numpy(expected), atol=1e-5, rtol=1e-5)


def test_pca_equals_an_svd_and_is_deterministic():
    data = np.random.default_rng(0).normal(size=(53, 11)) @ np.diag(np.linspace(3, 0.1, 11))
    ours, explained = pca(data, 5)
    centred = data - data.mean(0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    reference = u[:, :5] * s[:5]
    np.testing.assert_allclose(np.abs(ours), np.abs(reference), atol=1e-9)  # each axis up to its sign
    assert explained == pytest.approx((s[:5] ** 2).sum() / (s ** 2).sum())
    np.testing.assert_array_equal(pca(data.copy(), 5)[0], ours)


def test_pca_fits_on_the_chosen_rows_and_projects_all():
    data = np.random.default_rng(1).normal(size=(40, 6))
    fit = np.arange(40) % 4 != 0
    ours, _ = pca(data, 3, fit_rows=fit)
    alone, _ = pca(data[fit], 3)
    np.testing.assert_allclose(ours[fit], alone, atol=1e-9)


def test_weights_follow_their_formulas():
    real = np.array([True, False, True, True, True])  # row 1 is an [unusedN] slot: no rank
    ranks = np.array([1, 0, 2, 3, 4])
    zipf = np.log1p(ranks)
    np.testing.assert_allclose(token_weights(real, DistillSettings(weighting="zipf")), zipf)
    p = np.array([1 / 2, 0, 1 / 3, 1 / 4, 1 / 5]) / (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5)
    np.testing.assert_allclose(token_weights(real, DistillSettings(weighting="sif", sif_coefficient=0.01)),
                               0.01 / (0.01 + p))
    np.testing.assert_array_equal(token_weights(real, DistillSettings(weighting="none")), np.ones(5))


def test_output_loads_in_model2vec_and_sentence_transformers_with_bertkits_vectors(teacher_dir, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    st = pytest.importorskip("sentence_transformers")
    out = distill_static(teacher_dir, tmp_path / "static", DistillSettings(dim=8, batch_size=5))
    module, normalize, meta = load_static(out)
    assert normalize and module.dim == 8 and meta["config"]["apply_pca"] == 8
    as_st, _, _ = load_static(out, like="sentence-transformers")  # it averages [UNK] in, model2vec leaves it out
    for theirs, ours in ((model2vec.StaticModel.from_pretrained(out).encode(TEXTS), module),
                         (st.SentenceTransformer(str(out), device="cpu").encode(TEXTS), as_st)):
        expected = torch.from_numpy(ours.encode(TEXTS, normalize=True))
        torch.testing.assert_close(torch.from_numpy(theirs), expected, atol=1e-6, rtol=1e-6)


def test_a_text_is_the_weighted_mean_of_its_tokens_rows(teacher_dir):
    table = distill_table(load_teacher(teacher_dir), DistillSettings(dim=None, pca=False, weighting="zipf"))
    ids = table.tokenizer.encode("good fortune", add_special_tokens=False).ids
    teacher_rows = hf_rows(teacher_dir, [[2, i, 3] for i in ids])  # [CLS] = 2, [SEP] = 3 in the tiny vocabulary
    ranks = np.array(ids) + 1  # no [unusedN] rows: a token's rank is its id + 1
    np.testing.assert_allclose(table.vectors[ids], teacher_rows * np.log1p(ranks)[:, None], atol=1e-5)


def test_added_words_are_read_whole_and_embedded_through_the_teacher(teacher_dir):
    teacher = load_teacher(teacher_dir)
    backend = teacher.tokenizer.backend_tokenizer
    size = backend.get_vocab_size()
    tokenizer, added = with_words(backend, ["Goodfortune", "truth", "two words", "wifeman"])
    assert added == ["goodfortune", "wifeman"]  # lower-cased as the tokenizer does; known and multi-word skipped
    assert tokenizer.encode("GoodFortune", add_special_tokens=False).ids == [size]
    table = distill_table(teacher, DistillSettings(dim=None, pca=False, weighting="none", words=("wifeman",)))
    expected = teacher.pooling(*_hidden(teacher, "wifeman")).numpy()[0]
    np.testing.assert_allclose(table.vectors[size], expected, atol=1e-5)


def _hidden(teacher, text: str):
    row = teacher.features([text])[0]
    ids, mask = torch.tensor([row["input_ids"]]), torch.tensor([row["attention_mask"]])
    with torch.inference_mode():
        return teacher.bert(ids, mask, torch.zeros_like(ids))[0], mask


def test_corpus_words_are_the_most_frequent_new_ones(teacher_dir):
    backend = load_teacher(teacher_dir).tokenizer.backend_tokenizer
    documents = [["Netherfield Netherfield netherfield, Longbourn longbourn truth truth truth"], ["once 42 42"]]
    assert corpus_words(backend, documents, limit=5) == ["netherfield", "longbourn"]
    assert corpus_words(backend, documents, limit=1) == ["netherfield"]


def test_cli_distils_with_a_corpus(teacher_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Netherfield is let at last.\nNetherfield Park.\n")  # one new word seen twice
    out = tmp_path / "static"
    assert main(["distill", "static", str(teacher_dir), "-o", str(out), "--dim", "6", "--weighting", "zipf",
                 "--corpus", str(corpus)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["weighting"] == "zipf" and config["added_words"] == 1 and config["hidden_dim"] == 6
    module, _, _ = load_static(out)
    assert module.token_ids(["netherfield"])[0].tolist() == [5 + len(WORDS)]


@pytest.mark.parametrize("flags, message", [
    (["--dim", "99"], "--dim 99 is larger than the teacher's 36 dimensions"),
    (["--no-pca", "--dim", "8"], "--dim 8 needs PCA"),
    (["--weighting", "tfidf"], "invalid choice: 'tfidf'"),
])
def test_bad_flags_are_one_line(teacher_dir, tmp_path, capsys, flags, message):
    try:
        status = main(["distill", "static", str(teacher_dir), "-o", str(tmp_path / "out"), *flags])
    except SystemExit as usage:  # argparse's own checks: exit status 2
        status = usage.code
    assert status in (1, 2)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertkit: error:")]
    assert len(errors) == 1 and message in errors[0] and not (tmp_path / "out").exists()


def test_output_over_the_teacher_is_refused(teacher_dir, capsys):
    before = sorted(p.name for p in teacher_dir.iterdir())
    assert main(["distill", "static", str(teacher_dir), "-o", str(teacher_dir)]) == 1
    assert "-o" in capsys.readouterr().err
    assert sorted(p.name for p in teacher_dir.iterdir()) == before


def test_a_teacher_that_is_no_embedding_model_is_refused(teacher_dir, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    classifier = tmp_path / "classifier"
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=36, num_hidden_layers=1,
                                     num_attention_heads=3, intermediate_size=37, num_labels=3)
    transformers.BertForSequenceClassification(config).save_pretrained(classifier)
    transformers.BertTokenizerFast(vocab=str(teacher_dir.parent / f"{teacher_dir.name}-bert" / "vocab.txt")
                                   ).save_pretrained(classifier)
    assert main(["distill", "static", str(classifier), "-o", str(tmp_path / "a")]) == 1
    assert "not an embedding model" in capsys.readouterr().err
    static = distill_static(teacher_dir, tmp_path / "static", DistillSettings(dim=4))
    assert main(["distill", "static", str(static), "-o", str(tmp_path / "b")]) == 1
    assert "is a static model already" in capsys.readouterr().err


def test_a_folder_that_holds_files_is_refused_and_kept(teacher_dir, tmp_path, capsys):
    out = tmp_path / "another-model"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the user's own weights")
    assert main(["distill", "static", str(teacher_dir), "-o", str(out)]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertkit: error:")]
    assert len(errors) == 1 and "-o" in errors[0] and "is not empty (it holds model.safetensors)" in errors[0]
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == b"the user's own weights"
