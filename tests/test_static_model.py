"""The users of a static directory: ``bertkit.StaticModel`` (model2vec's class: its vectors, its names) and
``bertkit.SentenceTransformer`` on a static directory (sentence-transformers' vectors), each saving a directory that
both peers load with the same vectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bertkit
from bertkit.sentence.modules import read_layout

pytest.importorskip("model2vec")
pytest.importorskip("sentence_transformers")
from static_dirs import DIM, TEXTS, model2vec_dir, peers, st_dir


@pytest.mark.parametrize("quantized", [False, True])
def test_static_model_is_model2vec(tmp_path, quantized):
    from model2vec import StaticModel

    path = model2vec_dir(tmp_path / "m2v", normalize=True, quantized=quantized)
    model, reference = bertkit.StaticModel.from_pretrained(path), StaticModel.from_pretrained(path)
    assert (model.dim, model.normalize, model.max_length) == (DIM, True, 512)
    np.testing.assert_allclose(model.encode(TEXTS), reference.encode(TEXTS), atol=1e-6, rtol=0)
    np.testing.assert_allclose(model.encode(TEXTS[0]), reference.encode(TEXTS[0]), atol=1e-6, rtol=0)
    np.testing.assert_allclose(model.encode(TEXTS, normalize=False), reference.encode(TEXTS, normalize=False),
                               atol=1e-6, rtol=0)
    assert model.tokenize(TEXTS) == reference.tokenize(TEXTS)
    assert model.tokenizer.get_vocab_size() == reference.tokenizer.get_vocab_size()
    saved = model.save_pretrained(tmp_path / "saved")
    np.testing.assert_allclose(StaticModel.from_pretrained(saved).encode(TEXTS), reference.encode(TEXTS),
                               atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="max_length"):
        model.encode(TEXTS, max_length=7)


@pytest.mark.parametrize("make", ["st", "m2v"])
def test_sentence_transformer_on_a_static_directory(tmp_path, make):
    path = st_dir(tmp_path / "st", normalize=True, prompts={"query": "query: "}) if make == "st" else \
        model2vec_dir(tmp_path / "m2v", normalize=True, quantized=True)
    model = bertkit.SentenceTransformer(path)
    assert isinstance(model, bertkit.SentenceTransformer) and model.get_sentence_embedding_dimension() == DIM
    assert read_layout(path).static_embedding
    expected = peers(path)["sentence-transformers"]
    np.testing.assert_allclose(model.encode(TEXTS), expected, atol=1e-6, rtol=0)
    tensor = model.encode(TEXTS, convert_to_tensor=True, batch_size=2)
    torch.testing.assert_close(tensor, torch.from_numpy(expected), atol=1e-6, rtol=0)
    if make == "st":
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(path), device="cpu")
        np.testing.assert_allclose(model.encode(TEXTS, prompt_name="query"),
                                   reference.encode(TEXTS, prompt_name="query"), atol=1e-6, rtol=0)
    features = model.static.tokenize(TEXTS)
    torch.testing.assert_close(model(features["input_ids"], features["offsets"]), torch.from_numpy(expected),
                               atol=1e-6, rtol=0)
    rows = model.features(TEXTS)  # the pipelines' two steps
    assert [len(row["input_ids"]) for row in rows] == np.diff([*features["offsets"].tolist(),
                                                                len(features["input_ids"])]).tolist()
    torch.testing.assert_close(torch.stack(model.embed_features(rows)), torch.from_numpy(expected), atol=1e-6, rtol=0)
    assert model.max_seq_length == (128 if make == "st" else 512)  # the tokenizer's own truncation
    saved = model.save(tmp_path / "saved")
    assert bertkit.SentenceTransformer(saved).prompts == model.prompts
    np.testing.assert_allclose(peers(saved)["sentence-transformers"], expected, atol=1e-6, rtol=0)


def test_a_static_directory_is_refused_where_a_network_is_needed(tmp_path):
    path = st_dir(tmp_path / "st")
    with pytest.raises(ValueError, match="a static model's table runs in float32"):
        bertkit.SentenceTransformer(path, dtype="int8")
    with pytest.raises(ValueError, match="sentence embeddings only"):
        bertkit.SentenceTransformer(path).encode(TEXTS, output_value="token_embeddings")
