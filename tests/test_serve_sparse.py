"""``bertkit serve`` on learned-sparse models, against a live server on 127.0.0.1: directories that
sentence-transformers 6.2 writes (SPLADE, an inference-free Router, CSR) and a BGE-M3 directory.

``/embed_sparse`` answers TEI's ``[[{index, value}]]`` equal (1e-5) to sentence-transformers' ``encode_query`` /
``encode_document`` (``"task": "query"`` / ``"document"``; the Router's query side runs no model) and to
``BGEM3Lexical.encode``; ``/embed`` answers TEI's vocabulary-sized vector with ``"normalize": false`` and TEI's
refusal without; the OpenAI route refuses a sparse model with TEI's message through the ``openai`` SDK;
``/info`` and ``/tokenize`` say which kind and side it is; concurrent requests, an empty input and a huge one.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit.sentence.bge_m3 import BGEM3Lexical  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from serve_helpers import error_of, serving  # noqa: E402
from sparse_dirs import sparse_dirs  # noqa: E402

QUERIES = ["how many people live in berlin", "what is the big river", "the cat", "the the cat cat", ""]
DOCS = ["berlin is a big city on a river", "the cat sat on the mat", "many dogs live in the new town", "",
        "the old town of berlin is big and the river is old and the people are many " * 2]
TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return sparse_dirs(tmp_path_factory.mktemp("sparse-serve"))


@pytest.fixture(scope="module", params=["splade", "inference-free", "csr"])
def encoder(request, dirs):
    """``(kind, base URL, sentence-transformers' SparseEncoder)`` of one sparse encoder directory, served."""
    path = dirs[request.param]
    with serving(create_app(path, dtype="fp32", max_client_batch_size=8)) as (url, _):
        yield request.param, url, st.SparseEncoder(path, device="cpu")


def dense(answer: list[list[dict]], size: int) -> np.ndarray:
    """TEI's sparse answer as a dense ``[N, size]`` matrix (indices ascending, values non-zero)."""
    out = np.zeros((len(answer), size), dtype=np.float32)
    for row, entries in zip(out, answer):
        indices = [e["index"] for e in entries]
        assert indices == sorted(set(indices)) and all(e["value"] != 0 for e in entries)
        row[indices] = [e["value"] for e in entries]
    return out


def size_of(ref) -> int:
    """The size of the reference's vectors (the vocabulary; CSR: its latents)."""
    return ref.encode(["x"], convert_to_sparse_tensor=False).shape[-1]


def post(url: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}{route}", json=body, timeout=60)


def test_embed_sparse_equals_encode_query_and_encode_document(encoder):
    _, url, ref = encoder
    size = size_of(ref)
    for task, method, texts in (("query", ref.encode_query, QUERIES), ("document", ref.encode_document, DOCS),
                                (None, ref.encode, DOCS)):
        response = post(url, "/embed_sparse", {"inputs": texts, **({"task": task} if task else {})})
        assert response.status_code == 200, response.text
        want = method(texts, convert_to_sparse_tensor=False).numpy()
        assert (want != 0).sum() > 2 * len(texts)  # a real comparison
        np.testing.assert_allclose(dense(response.json(), size), want, **TOL)
    (single,) = post(url, "/embed_sparse", {"inputs": "the cat", "task": "query"}).json()
    np.testing.assert_allclose(dense([single], size)[0], ref.encode_query("the cat").to_dense().numpy(), **TOL)
    assert post(url, "/", {"inputs": "the cat"}).json() == post(url, "/embed_sparse", {"inputs": "the cat"}).json()
    ids = [t["id"] for t in post(url, "/tokenize", {"inputs": "the cat"}).json()[0]]  # token ids: no prompt added
    answer = post(url, "/embed_sparse", {"inputs": [ids, "the cat"]}).json()
    np.testing.assert_allclose(dense(answer, size), ref.encode(["the cat"] * 2, convert_to_sparse_tensor=False), **TOL)


def test_embed_answers_as_tei_answers_a_splade_model(encoder):
    _, url, ref = encoder
    size = size_of(ref)
    (vector,) = post(url, "/embed", {"inputs": DOCS[0], "normalize": False}).json()
    np.testing.assert_allclose(vector, ref.encode(DOCS[0]).to_dense().numpy(), **TOL)
    assert len(vector) == size
    assert post(url, "/embed", {"inputs": DOCS[0], "normalize": False, "dimensions": 7}).json() == [vector[:7]]
    error_of(post(url, "/embed", {"inputs": "x", "normalize": False, "dimensions": size + 1}), 422, "Validation")
    message = error_of(post(url, "/embed", {"inputs": "x"}), 424, "Backend")  # normalize is true by default
    assert message.startswith("Backend error: `normalize` is not available for SPLADE models")
    error_of(post(url, "/embed_all", {"inputs": "x"}), 424, "Backend")


def test_the_openai_route_refuses_a_sparse_model_with_teis_message(encoder):
    _, url, _ = encoder
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.embeddings.create(model="sparse", input=["the cat"])
    assert raised.value.status_code == 424
    assert raised.value.body["message"].startswith("Backend error: `normalize` is not available for SPLADE models")
    assert raised.value.body["type"] == "server_error" and "/embed_sparse" in raised.value.message


def test_info_and_tokenize_say_which_kind_and_side(encoder):
    kind, url, ref = encoder
    info = httpx.get(f"{url}/info").json()
    assert info["task"] == "embeddings"
    assert info["model_type"] == {"embedding": {"pooling": "csr" if kind == "csr" else "splade"}}
    sparse = info["sparse"]
    assert (sparse["kind"], sparse["dimensions"]) == (kind, size_of(ref))
    assert sparse["max_active_dims"] == (5 if kind == "csr" else None)
    routed = kind == "inference-free"
    assert sparse["routes"] == (["document", "query"] if routed else None)
    assert sparse["static_routes"] == (["query"] if routed else [])
    (query,) = post(url, "/tokenize", {"inputs": "the cat", "task": "query"}).json()
    (document,) = post(url, "/tokenize", {"inputs": "the cat", "task": "document"}).json()
    words = [t["text"] for t in query if not t["special"]]
    prompt = ["query", ":"] if ref.prompts.get("query") else []  # the query prompt, as encode_query puts it
    assert words == [*prompt, "the", "cat"] and document[0]["special"]
    assert any(t["special"] for t in query) != routed  # the static query side weighs no special token
    if routed:
        assert "has no route" in error_of(post(url, "/embed_sparse", {"inputs": "x", "task": "passage"}), 422)
        assert "has no route" in error_of(post(url, "/tokenize", {"inputs": "x", "task": "passage"}), 422)


def test_concurrent_requests_get_their_own_answers(encoder):
    _, url, ref = encoder
    size = size_of(ref)
    jobs = [(task, text) for text in QUERIES[:4] + DOCS[:3] for task in ("query", "document")] * 2

    def ask(job):
        task, text = job
        return post(url, "/embed_sparse", {"inputs": [text], "task": task}).json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, jobs))
    for (task, text), answer in zip(jobs, answers):
        method = ref.encode_query if task == "query" else ref.encode_document
        np.testing.assert_allclose(dense(answer, size)[0], method(text).to_dense().numpy(), **TOL)


def test_empty_and_huge_inputs_as_for_dense_models(encoder):
    _, url, ref = encoder
    size = size_of(ref)
    assert error_of(post(url, "/embed_sparse", {"inputs": []}), 400, "Empty")
    error_of(post(url, "/embed_sparse", {"inputs": ["x"] * 9}), 413)  # --max-client-batch-size 8
    huge = "berlin is a big city on a river " * 400
    message = error_of(post(url, "/embed_sparse", {"inputs": huge, "task": "document"}), 422, "Validation")
    assert "inputs[0]" in message and "max_input_length" in message
    cut = post(url, "/embed_sparse", {"inputs": huge, "task": "document", "truncate": True}).json()
    np.testing.assert_allclose(dense(cut, size)[0], ref.encode_document(huge).to_dense().numpy(), **TOL)
    error_of(post(url, "/embed_sparse", {"inputs": "x", "truncation_direction": "left"}), 422)


def test_bge_m3_serves_lexical_weights_beside_dense_vectors(dirs):
    assert bertkit.BGEM3Lexical is BGEM3Lexical and bertkit.lexical_matching_score  # the root exports them
    model = BGEM3Lexical(dirs["bge-m3"], dtype="fp32")
    texts = ["Anne Elliot walked the the the walk.", "Persuasion ☃", "", "Captain Wentworth had no fortune. " * 3]
    with serving(create_app(dirs["bge-m3"], dtype="fp32")) as (url, _):
        info = httpx.get(f"{url}/info").json()
        assert info["sparse"]["kind"] == "bge-m3" and info["task"] == "embeddings"
        answer = post(url, "/embed_sparse", {"inputs": texts}).json()
        for got, want in zip(answer, model.encode(texts)):
            assert [e["index"] for e in got] == sorted(int(k) for k in want)
            np.testing.assert_allclose([e["value"] for e in got], [want[str(e["index"])] for e in got], **TOL)
        assert answer[2] == []
        (vector,) = post(url, "/embed", {"inputs": texts[0]}).json()  # the dense side is served as before
        assert len(vector) == model.bert.config.hidden_size
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        assert len(client.embeddings.create(model="m3", input=texts[:1]).data[0].embedding) == len(vector)
        (tokens,) = post(url, "/tokenize", {"inputs": "Persuasion", "task": "query"}).json()  # one side for both
        assert tokens[0]["special"] and tokens[-1]["special"]


def test_task_and_pooling_are_refused_where_they_mean_nothing(dirs):
    with pytest.raises(ValueError, match=r"--pooling: .* sparse encoder"):
        create_app(dirs["splade"], pooling="mean")
    with pytest.raises(ValueError, match=r"--pooling splade: .* BGE-M3"):
        create_app(dirs["bge-m3"], pooling="splade")
    with serving(create_app(dirs["mlm"], task="embeddings", dtype="fp32")) as (url, _):  # a dense model
        assert "picks a side of a sparse model" in error_of(post(url, "/tokenize", {"inputs": "x", "task": "query"}),
                                                            422)
        assert "embedding" in error_of(post(url, "/embed_sparse", {"inputs": "x"}), 424, "Backend")
