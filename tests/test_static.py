"""Static embeddings (bertkit.sentence.static): the vectors of model2vec's and sentence-transformers' own directories
equal those libraries' encode on the same directory; bertkit's save loads in both with the same vectors."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch

from bertkit.sentence.static import StaticEmbedding, is_static_directory, load_static, save_static

pytest.importorskip("model2vec")
pytest.importorskip("sentence_transformers")
from static_dirs import PLAIN, TEXTS, model2vec_dir, peers, st_dir, table, tokenizer


def ours(path: pathlib.Path, like: str | None = None) -> np.ndarray:
    module, normalize, _ = load_static(path, like=like)
    return module.encode(TEXTS, batch_size=3, normalize=normalize)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("quantized", [False, True])
def test_model2vec_directory_equals_both_peers(tmp_path, normalize, quantized):
    path = model2vec_dir(tmp_path / "m2v", normalize, quantized)
    assert is_static_directory(path)
    expected = peers(path)
    np.testing.assert_allclose(ours(path), expected["model2vec"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(ours(path, like="model2vec"), expected["model2vec"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(ours(path, like="sentence-transformers"), expected["sentence-transformers"],
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("normalize", [False, True])
def test_sentence_transformers_directory_equals_both_peers(tmp_path, normalize):
    path = st_dir(tmp_path / "st", normalize)
    assert is_static_directory(path)
    expected = peers(path)
    _, read_normalize, meta = load_static(path)
    assert (read_normalize, meta["format"], meta["like"]) == (normalize, "sentence-transformers",
                                                              "sentence-transformers")
    np.testing.assert_allclose(ours(path), expected["sentence-transformers"], atol=1e-6, rtol=0)
    # model2vec reads no Normalize module from an ST directory (only its own config flag): compare unnormalised
    raw, _, _ = load_static(path, like="model2vec")
    from model2vec import StaticModel

    np.testing.assert_allclose(raw.encode(TEXTS), StaticModel.from_pretrained(path, normalize=False)
                               .encode(TEXTS), atol=1e-6, rtol=0)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("quantized", [False, True])
def test_saved_directory_loads_in_both_peers_with_equal_vectors(tmp_path, normalize, quantized):
    source = model2vec_dir(tmp_path / "m2v", normalize, quantized)
    for like in ("model2vec", "sentence-transformers"):
        module, read_normalize, _ = load_static(source, like=like)
        saved = save_static(module, tmp_path / f"ours-{like}", normalize=read_normalize, config={"source": "test"})
        assert json.loads((saved / "config.json").read_text())["source"] == "test"
        expected = peers(saved)
        np.testing.assert_allclose(ours(saved, like), expected[like], atol=1e-6, rtol=0)
        np.testing.assert_allclose(ours(saved, like), ours(source, like), atol=1e-6, rtol=0)
    # written the same way, the two peers only differ where they read a directory differently (unknown tokens,
    # text cut): the texts without those agree
    np.testing.assert_allclose(expected["model2vec"][PLAIN], expected["sentence-transformers"][PLAIN], atol=1e-6)


def test_forward_takes_sentence_transformers_features_and_trains():
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding as STStatic

    weights = table(tokenizer().get_vocab_size(), 3)
    module = StaticEmbedding(tokenizer(), weights)
    reference = STStatic(tokenizer(), embedding_weights=weights)
    texts = TEXTS[:4]
    features = module.tokenize(texts)
    expected = reference.preprocess(texts)
    torch.testing.assert_close(features["input_ids"], expected["input_ids"])
    torch.testing.assert_close(features["offsets"], expected["offsets"])
    out = module(dict(features))["sentence_embedding"]
    torch.testing.assert_close(out, reference(dict(expected))["sentence_embedding"])
    out.pow(2).sum().backward()
    assert module.embedding.weight.grad is not None and module.embedding.weight.grad.abs().sum() > 0
    np.testing.assert_allclose(module.encode(texts), out.detach().numpy(), atol=1e-6)
    serial = module.encode(TEXTS, batch_size=2, threads=1, normalize=True)  # the threaded path: same rows, in order
    np.testing.assert_array_equal(module.encode(TEXTS, batch_size=2, threads=3, normalize=True), serial)
    np.testing.assert_array_equal(module.encode(TEXTS[3], normalize=True), serial[3])
    assert module.encode([]).shape == (0, module.dim)


def test_vocabulary_that_does_not_match_the_table_is_one_line(tmp_path):
    path = model2vec_dir(tmp_path / "m2v", False, False)
    tok = tokenizer()
    tok.add_tokens(["brandnewtoken"])
    tok.save(str(path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer\.json: the tokenizer has 30523 tokens but the table has "
                                         r"30522 rows") as caught:
        load_static(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("damage", ["no_tokenizer", "bad_tokenizer", "bad_weights", "no_weights", "bad_config"])
def test_missing_or_damaged_files_name_the_file(tmp_path, damage):
    path = model2vec_dir(tmp_path / "m2v", False, False)
    name = {"no_tokenizer": "tokenizer.json", "bad_tokenizer": "tokenizer.json", "bad_weights": "model.safetensors",
            "no_weights": "model.safetensors", "bad_config": "config.json"}[damage]
    if damage.startswith("no_"):
        (path / name).unlink()
    else:
        (path / name).write_text("{ damaged")
    with pytest.raises(ValueError, match=name):
        load_static(path)
