"""``bertkit serve`` on late-interaction models, against a live server on 127.0.0.1 (httpx, huggingface_hub's
``InferenceClient``): ColBERT directories that sentence-transformers 6.2 writes (and the PyLate and Stanford layouts
of tests/test_multi_vector.py), and a BGE-M3 directory with ``colbert_linear.pt``.

``/embed_all`` answers the token vectors of sentence-transformers' ``encode_query`` / ``encode_document`` (1e-5);
``/rerank`` its MaxSim, best first; ``/search`` the best documents of an exact or PLAID index given with
``--index``, as the index answers them in Python; ``/tokenize`` the tokens each side scores; ``/info`` the kind,
widths and index. Refused: an index of another model or width and a truncated one (at start, one line), a query
past its width without truncation, token ids, too many inputs, a missing key.
"""

from __future__ import annotations

import string

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
huggingface_hub = pytest.importorskip("huggingface_hub")
st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.base.modules import Normalize, Transformer  # noqa: E402
from sentence_transformers.base.modules.dense import Dense  # noqa: E402
from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask  # noqa: E402

import bertkit  # noqa: E402
from bertkit.retrieval.multivector import MultiVectorIndexWriter  # noqa: E402
from bertkit.retrieval.plaid import build_plaid_index  # noqa: E402
from bertkit.retrieval.sparse_corpus import model_fingerprint  # noqa: E402
from bertkit.sentence.bge_m3 import BGEM3, colbert_score  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from bertkit.tasks.sources import inspect_source  # noqa: E402
from family_dirs import family_dir  # noqa: E402
from serve_helpers import error_of, serving  # noqa: E402
from test_multi_vector import bert_dir, colbert_dir, pylate_dir, stanford_dir  # noqa: E402

QUERIES = ["how many people live in berlin?", "what is the big river", "cat"]
DOCS = ["berlin is a big city on a river.", "the cat sat on the mat, the dog sat on the cat.",
        "many dogs live in the new town", "what river?", "the old town of berlin is big", "cats"]
TOL = {"atol": 1e-5, "rtol": 1e-5}


def post(url: str, route: str, body: dict, **options) -> httpx.Response:
    return httpx.post(f"{url}{route}", json=body, timeout=60, **options)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("colbert-serve")
    (root / "bert").mkdir()
    base = bert_dir(root / "bert")
    colbert_dir(base, root / "fixed", "fixed")
    colbert_dir(base, root / "min-attend", "min-attend")
    pylate_dir(base, root / "pylate")
    stanford_dir(base, root / "stanford")
    torch.manual_seed(4)  # 16 dimensions: a PLAID index packs 2-bit residuals of them in whole bytes
    modules = [Transformer(base, document_length=24, query_expansion={"strategy": "fixed", "length": 10}),
               Dense(36, 16, bias=False, activation_function=torch.nn.Identity(),
                     module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(root / "wide"))
    torch.manual_seed(4)  # a skiplist with the special tokens: a text of punctuation leaves no vector
    modules = [Transformer(base), Dense(36, 8, bias=False, activation_function=torch.nn.Identity(),
                                        module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=["[CLS]", "[SEP]", ".", "!"])]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(root / "bare"))
    return {name: str(root / name) for name in ("bert", "fixed", "min-attend", "pylate", "stanford", "wide", "bare")}


@pytest.fixture(scope="module", params=["fixed", "pylate", "stanford"])
def layout(request, dirs):
    """``(base URL, sentence-transformers' MultiVectorEncoder)`` of one ColBERT layout, served."""
    with serving(create_app(dirs[request.param], dtype="fp32", max_client_batch_size=8)) as (url, _):
        yield url, st.MultiVectorEncoder(dirs[request.param], device="cpu")


def test_inspect_source_names_each_colbert_layout(dirs, tmp_path):
    for name, kind in (("fixed", "sentence-transformers"), ("pylate", "pylate"), ("stanford", "stanford")):
        info = inspect_source(dirs[name])
        assert (info.multi_vector, info.task) == (kind, "multi-vector"), name
        assert info.model == "bertkit.sentence.multi_vector:MultiVectorEncoder" and "multi-vector" in info.describe()
    assert inspect_source(dirs["bert"]).multi_vector is None
    m3 = family_dir(tmp_path, "xlm-roberta", "AutoModel", seed=3)
    torch.save(torch.nn.Linear(36, 7).state_dict(), m3 / "colbert_linear.pt")
    assert (inspect_source(m3).multi_vector, inspect_source(m3).task) == ("bge-m3", "embeddings")
    (m3 / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": '
                                     '"sentence_transformers.models.Transformer"}]')  # as BAAI/bge-m3 has one
    assert (inspect_source(m3).multi_vector, inspect_source(m3).task) == ("bge-m3", "embeddings")


def test_the_pipeline_fits_texts_exactly_at_either_end(dirs):
    pipe = bertkit.pipeline("colbert", model=dirs["stanford"], dtype="fp32")
    long = "the old town, the new town, the city of berlin is big and the river is old " * 3
    for task in ("query", "document"):
        prefix, width = pipe.prompt(None, task), pipe.width(task)
        (_,), (count,) = pipe.fit([long], prefix, task)
        assert count > width
        for side in ("right", "left"):
            (kept,), (n,) = pipe.fit([long], prefix, task, side, truncate=True)
            assert n == width and (long.startswith(kept) if side == "right" else long.endswith(kept))
            assert pipe.fit([kept], prefix, task)[1] == [width]  # exactly the width, not a token less
            row = pipe.model.features([kept], prefix, task)[0]
            assert sum(row["attention_mask"]) == width  # the model cuts nothing more
    vectors = pipe(["cat", "the dog"], task="query")
    assert [len(v) for v in vectors] == [pipe.width("query")] * 2
    with pytest.raises(ValueError, match="no multi-vector model"):
        bertkit.pipeline("colbert", model=dirs["bert"])


def test_embed_all_equals_encode_query_and_encode_document(layout):
    url, ref = layout
    for task, method, texts in (("query", ref.encode_query, QUERIES), ("document", ref.encode_document, DOCS),
                                (None, ref.encode_document, DOCS)):
        response = post(url, "/embed_all", {"inputs": texts, **({"task": task} if task else {}), "truncate": True})
        assert response.status_code == 200, response.text
        for got, want in zip(response.json(), method(texts)):
            np.testing.assert_allclose(np.array(got), want.numpy(), **TOL)
    (single,) = post(url, "/embed_all", {"inputs": "cat", "task": "query"}).json()
    np.testing.assert_allclose(np.array(single), ref.encode_query("cat").numpy(), **TOL)


def test_rerank_is_maxsim_best_first(layout):
    url, ref = layout
    response = post(url, "/rerank", {"query": QUERIES[0], "texts": DOCS, "return_text": True, "truncate": True})
    assert response.status_code == 200, response.text
    want = ref.similarity(ref.encode_query([QUERIES[0]]), ref.encode_document(DOCS))[0]
    ranked = response.json()
    assert [r["index"] for r in ranked] == torch.argsort(want, descending=True, stable=True).tolist()
    np.testing.assert_allclose([r["score"] for r in ranked], want.sort(descending=True).values.numpy(), **TOL)
    assert all(r["text"] == DOCS[r["index"]] for r in ranked)
    (best, _) = post(url, "/", {"query": QUERIES[0], "texts": DOCS[:2], "truncate": True}).json()  # TEI's POST /
    assert best["score"] == pytest.approx(float(want[:2].max()), abs=1e-5)


def test_tokenize_shows_each_side_and_which_tokens_are_scored(layout):
    url, _ = layout
    for task, text in (("query", "cat, dog!"), ("document", "the cat, the dog!")):
        (tokens,) = post(url, "/tokenize", {"inputs": text, "task": task}).json()
        (vectors,) = post(url, "/embed_all", {"inputs": text, "task": task}).json()
        assert sum(t["scored"] for t in tokens) == len(vectors)  # one vector per scored token
        words = [t["text"] for t in tokens if not t["special"] and t["start"] is not None]
        assert "cat" in words and "dog" in words
        if task == "document":  # the skiplist drops punctuation from documents
            assert not any(t["scored"] for t in tokens if t["text"] in (",", "!"))


def test_info_says_what_is_served(layout, dirs):
    url, ref = layout
    info = httpx.get(f"{url}/info").json()
    assert info["task"] == "colbert" and info["model_type"] == {"embedding": {"pooling": "colbert"}}
    multi = info["multi_vector"]
    assert multi["dimensions"] == ref.encode_query("cat").shape[1]
    assert multi["routes"] == ["/embed_all", "/rerank", "/search"] and multi["index"] is None
    assert multi["query_length"] == len(ref.encode_query("cat"))  # every query is expanded to its width


def test_inference_client_feature_extraction_reads_the_token_vectors(layout):
    url, ref = layout
    got = huggingface_hub.InferenceClient(model=url).feature_extraction(DOCS[0])
    np.testing.assert_allclose(got[0], ref.encode_document(DOCS[0]).numpy(), **TOL)


def test_long_queries_are_refused_or_cut_exactly_at_either_end(layout):
    url, ref = layout
    long = "the old town, the new town, the city of berlin is big and the river is old"
    message = error_of(post(url, "/embed_all", {"inputs": ["cat", long], "task": "query"}), 422, "Validation")
    assert message.startswith("inputs[1] has ") and "query width" in message and "truncate" in message
    for side in ("right", "left"):
        response = post(url, "/embed_all", {"inputs": long, "task": "query", "truncate": True,
                                            "truncation_direction": side})
        (tokens,) = post(url, "/tokenize", {"inputs": long, "task": "query"}).json()
        assert response.status_code == 200, response.text
        assert len(response.json()[0]) == len(tokens)  # the full width, no expansion left
    cut = post(url, "/embed_all", {"inputs": long, "task": "query", "truncate": True}).json()[0]
    np.testing.assert_allclose(np.array(cut), ref.encode_query(long).numpy(), **TOL)  # its cut is at the right end


def test_bad_requests_are_one_line_each(layout):
    url, _ = layout
    assert "token ids" in error_of(post(url, "/embed_all", {"inputs": [5, 6, 7]}), 422)
    assert "query" in error_of(post(url, "/embed_all", {"inputs": "cat", "task": "passage"}), 422)
    assert "--max-client-batch-size" in error_of(post(url, "/embed_all", {"inputs": ["cat"] * 9}), 413)
    assert error_of(post(url, "/rerank", {"query": "cat", "texts": []}), 400, "Empty")
    assert "embeddings" in error_of(post(url, "/embed", {"inputs": "cat"}), 424, "Backend")
    assert "--index" in error_of(post(url, "/search", {"inputs": "cat"}), 424, "Backend")


def test_a_min_expansion_query_and_a_text_that_leaves_no_vector(dirs):
    ref = st.MultiVectorEncoder(dirs["min-attend"], device="cpu")
    with serving(create_app(dirs["min-attend"], dtype="fp32")) as (url, _):
        for got, want in zip(post(url, "/embed_all", {"inputs": QUERIES, "task": "query"}).json(),
                             ref.encode_query(QUERIES)):  # padded to 8, longer ones kept up to the query length
            np.testing.assert_allclose(np.array(got), want.numpy(), **TOL)
    with serving(create_app(dirs["bare"], dtype="fp32")) as (url, _):
        message = error_of(post(url, "/embed_all", {"inputs": ["the cat", "!.!"]}), 422)
        assert "'!.!' leaves no token vector" in message and "\n" not in message
        assert "'.'" in error_of(post(url, "/rerank", {"query": "cat", "texts": ["the cat", "."]}), 422)
        assert len(post(url, "/embed_all", {"inputs": "the cat"}).json()[0]) == 2


# ------------------------------------------------------------------------------------------------- /search
def _index(directory, model: str, vectors: list, *, built_by: str | None = None):
    writer = MultiVectorIndexWriter(directory, vectors[0].shape[1], model_fingerprint(built_by or model),
                                    dtype="float32")
    writer.add(vectors, ids=[f"doc-{i}" for i in range(len(vectors))])
    return writer.finish()


@pytest.fixture(scope="module")
def indexes(dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("colbert-indexes")
    model = bertkit.MultiVectorEncoder(dirs["wide"], dtype="fp32")
    docs = DOCS * 6  # 36 documents: more than the centroids a PLAID index of them has
    exact = _index(root / "exact", dirs["wide"], model.encode_document(docs))
    build_plaid_index(exact, root / "plaid", nbits=2, centroids=8)
    return {"exact": str(root / "exact"), "plaid": str(root / "plaid"), "docs": docs, "model": model}


@pytest.mark.parametrize("kind", ["exact", "plaid"])
def test_search_answers_what_the_index_answers(dirs, indexes, kind):
    from bertkit.retrieval.multivector import MultiVectorIndex
    from bertkit.retrieval.plaid import PlaidIndex

    index = (MultiVectorIndex if kind == "exact" else PlaidIndex).load(indexes[kind])
    queries = indexes["model"].encode_query(QUERIES)
    options = {"nprobe": 2, "candidates": 12} if kind == "plaid" else {}
    with serving(create_app(dirs["wide"], dtype="fp32", index=indexes[kind])) as (url, _):
        response = post(url, "/search", {"inputs": QUERIES, "k": 5, **options})
        assert response.status_code == 200, response.text
        for hits, (scores, positions) in zip(response.json(), index.search(queries, 5, **options)):
            assert [h["id"] for h in hits] == index.ids(positions)
            np.testing.assert_allclose([h["score"] for h in hits], scores, **TOL)
        info = httpx.get(f"{url}/info").json()["multi_vector"]["index"]
        assert (info["documents"], info["dim"], info["ids"]) == (36, 16, True)
        if kind == "exact":
            assert "PLAID" in error_of(post(url, "/search", {"inputs": "cat", "nprobe": 2}), 422)
            want = bertkit.sentence.maxsim.maxsim_rank(queries[2], indexes["model"].encode_document(indexes["docs"]),
                                                       top_k=3)
            hits = post(url, "/search", {"inputs": "cat", "k": 3}).json()[0]
            np.testing.assert_allclose([h["score"] for h in hits], [w["score"] for w in want], **TOL)


def test_search_is_behind_the_key_like_every_route(dirs, indexes):
    with serving(create_app(dirs["wide"], dtype="fp32", index=indexes["exact"], api_key="sk-test")) as (url, _):
        for route, body in (("/search", {"inputs": "cat"}), ("/embed_all", {"inputs": "cat"}),
                            ("/rerank", {"query": "cat", "texts": ["cat"]})):
            error_of(post(url, route, body), 401)
            assert post(url, route, body, headers={"Authorization": "Bearer sk-test"}).status_code == 200


def test_an_index_of_another_model_width_or_a_truncated_one_is_refused_at_start(dirs, indexes, tmp_path):
    model = indexes["model"]
    other = _index(tmp_path / "other", dirs["wide"], model.encode_document(DOCS), built_by=dirs["fixed"])
    with pytest.raises(ValueError, match=r"^--index: .* was built by 'fixed sha256:") as raised:
        create_app(dirs["wide"], dtype="fp32", index=other.directory)
    assert "\n" not in str(raised.value)
    narrow = _index(tmp_path / "narrow", dirs["fixed"], bertkit.MultiVectorEncoder(dirs["fixed"]).encode_document(DOCS))
    with pytest.raises(ValueError, match=r"^--index: .* 13 dimensions, not 16"):
        create_app(dirs["wide"], dtype="fp32", index=narrow.directory)
    cut = _index(tmp_path / "cut", dirs["wide"], model.encode_document(DOCS))
    vectors = cut.directory / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-64])
    with pytest.raises(ValueError, match=r"^--index: .*vectors\.npy"):
        create_app(dirs["wide"], dtype="fp32", index=cut.directory)
    with pytest.raises(ValueError, match=r"^--index .*no manifest\.json"):
        create_app(dirs["wide"], index=tmp_path)
    with pytest.raises(ValueError, match=r"^--index: .* served as embeddings"):
        create_app(dirs["bert"], index=indexes["exact"])


# ------------------------------------------------------------------------------------------------- BGE-M3
def test_bge_m3_embed_all_gives_its_colbert_vecs(tmp_path):
    m3 = family_dir(tmp_path, "xlm-roberta", "AutoModel", seed=3)
    torch.manual_seed(5)
    torch.save(torch.nn.Linear(36, 1).state_dict(), m3 / "sparse_linear.pt")
    torch.save(torch.nn.Linear(36, 23).state_dict(), m3 / "colbert_linear.pt")
    texts = ["Anne Elliot walked the walk.", "Persuasion", "Captain Wentworth had no fortune. " * 3]
    want = BGEM3(m3, dtype="fp32").encode(texts)
    with serving(create_app(m3, dtype="fp32")) as (url, _):
        info = httpx.get(f"{url}/info").json()
        assert info["task"] == "embeddings" and info["multi_vector"]["kind"] == "bge-m3"
        assert info["multi_vector"]["dimensions"] == 23 and info["multi_vector"]["routes"] == ["/embed_all"]
        got = post(url, "/embed_all", {"inputs": texts}).json()
        for g, w in zip(got, want["colbert_vecs"]):
            np.testing.assert_allclose(np.array(g), w, **TOL)
        dense = post(url, "/embed", {"inputs": texts}).json()  # the dense vectors still answer
        assert np.array(dense).shape == want["dense_vecs"].shape
        assert post(url, "/embed_sparse", {"inputs": texts}).status_code == 200
        assert error_of(post(url, "/rerank", {"query": "a", "texts": ["b"]}), 424, "Backend")
    with serving(create_app(m3, task="colbert", dtype="fp32")) as (url, _):  # served as a ColBERT: its score
        ranked = post(url, "/rerank", {"query": texts[0], "texts": texts[1:]}).json()
        vecs = want["colbert_vecs"]
        for r in ranked:
            assert r["score"] == pytest.approx(colbert_score(vecs[0], vecs[1 + r["index"]]), abs=1e-5)
