"""Exports of a sparse index (bertkit.retrieval.sparse_export), checked with the engines' own client libraries and
no cluster: the Elasticsearch and OpenSearch clients' bulk helpers send exactly bulk.ndjson's lines (to a local
stand-in of the HTTP API that records them), Qdrant's request models validate the points and the collection, and
Qdrant's local mode ranks the points as SparseIndex.search does."""

import http.server
import json
import threading
import typing

import numpy as np
import pytest
import torch

from bertkit.retrieval.sparse import SparseIndexWriter, build_sparse_index
from bertkit.retrieval.sparse_export import (
    document_vectors,
    elasticsearch_actions,
    elasticsearch_query,
    export_index,
    rank_feature_names,
)

V = 23
TOKENS = ["[PAD]", ".", "%", "_x", "a b", "##ing", "", "x_", "a.b", *[f"w{i}" for i in range(14)]]


def positive_vectors(n, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, V, generator=g) * 2 + 0.01) * (torch.rand(n, V, generator=g) < 0.3)


@pytest.fixture
def index(tmp_path):
    vectors = positive_vectors(31, 0)
    vectors[4] = 0  # a document without terms
    writer = SparseIndexWriter(tmp_path / "index", V, "m", max_postings=40)
    writer.add(vectors[:20], [f"doc/{i}" for i in range(20)])
    writer.add(vectors[20:], [f"doc/{i}" for i in range(20, 31)])
    return writer.finish(), vectors


def test_document_vectors_give_back_the_documents(index):
    index, vectors = index
    seen = 0
    for positions, rows in document_vectors(index, chunk_documents=7):
        for position, (terms, weights) in zip(positions, rows):
            dense = torch.zeros(V)
            dense[torch.from_numpy(terms.astype(np.int64))] = torch.from_numpy(weights)
            assert np.all(np.diff(terms) > 0)
            torch.testing.assert_close(dense, vectors[position], rtol=0, atol=0)
            seen += 1
    assert seen == 31


def test_rank_feature_names_are_safe_and_one_to_one():
    names = rank_feature_names(TOKENS, V + 2)
    assert names[:9] == ["[PAD]", "%2E", "%25", "%5Fx", "a%20b", "##ing", "%", "x_", "a%2Eb"]
    assert names[-2:] == [f"%00{V}", f"%00{V + 1}"]
    assert len(set(names)) == len(names) and not any("." in n or not n for n in names)
    with pytest.raises(ValueError, match=r"token 'w1' twice.*--names ids"):
        rank_feature_names(["w1", "w2", "w1"])


class Recorder(http.server.BaseHTTPRequestHandler):
    """A stand-in for the engines' HTTP API: records each request and answers as a cluster does."""

    requests: typing.ClassVar[list] = []

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append((self.command, self.path.split("?")[0], body))
        if self.path.startswith("/_bulk"):
            actions = [json.loads(line) for line in body.decode().splitlines()[::2]]
            reply = {"took": 1, "errors": False, "items": [
                {"index": {**a["index"], "status": 201, "result": "created"}} for a in actions]}
        else:
            reply = {"acknowledged": True, "shards_acknowledged": True, "index": self.path.strip("/")}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_PUT = do_POST = do_GET = do_HEAD = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Recorder.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", Recorder.requests
    httpd.shutdown()


def sent_bulk_lines(requests):
    return [json.loads(line) for method, path, body in requests if path.endswith("/_bulk")
            for line in body.decode().splitlines()]


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_bulk_file_is_what_the_client_sends(index, server, tmp_path, engine):
    index, vectors = index
    url, requests = server
    names = rank_feature_names(TOKENS)
    files = export_index(index, engine, tmp_path / "out", names=names, field="splade", index_name="docs")
    mapping = json.loads((tmp_path / "out" / "mapping.json").read_text())
    assert mapping == {"mappings": {"properties": {"splade": {"type": "rank_features"}}}}
    ours = [json.loads(line) for line in (tmp_path / "out" / "bulk.ndjson").read_text().splitlines()]
    assert [f.name for f in files] == ["mapping.json", "bulk.ndjson"] and len(ours) == 2 * 31
    if engine == "elasticsearch":
        from elasticsearch import Elasticsearch, helpers

        client = Elasticsearch(url)
        client.indices.create(index="docs", mappings=mapping["mappings"])
    else:
        from opensearchpy import OpenSearch, helpers

        client = OpenSearch(url)
        client.indices.create(index="docs", body=mapping)
    assert helpers.bulk(client, elasticsearch_actions(index, "docs", names, "splade"), chunk_size=10) == (31, [])
    assert json.loads(requests[0][2]) == mapping and requests[0][:2] == ("PUT", "/docs")
    assert sent_bulk_lines(requests) == ours
    # the documents are the vectors: one feature per nonzero weight, float32-exact, names from the tokens
    source = ours[2 * 7 + 1]["splade"]
    assert ours[2 * 7] == {"index": {"_index": "docs", "_id": "doc/7"}}
    assert {names.index(n): w for n, w in source.items()} == {
        t: float(vectors[7, t]) for t in vectors[7].nonzero()[:, 0].tolist()}
    assert ours[2 * 4 + 1] == {"splade": {}}


def test_rank_feature_query_scores_the_dot_product(index):
    index, vectors = index
    names = rank_feature_names(TOKENS)
    query = positive_vectors(1, 5)[0]
    terms = query.nonzero()[:, 0].tolist()
    body = elasticsearch_query(terms, query[terms].tolist(), names, "splade")
    # a linear rank_feature query scores boost x feature value; a bool's should clauses add up
    for doc, action in enumerate(elasticsearch_actions(index, "docs", names, "splade")):
        features = action["_source"]["splade"]
        score = sum(clause["rank_feature"]["boost"] * features.get(clause["rank_feature"]["field"][7:], 0.0)
                    for clause in body["query"]["bool"]["should"])
        assert score == pytest.approx(float(query @ vectors[doc]), rel=1e-5)


def test_rank_features_refuse_a_weight_that_is_not_positive(tmp_path):
    vectors = positive_vectors(3, 1)
    vectors[1, 2] = -0.5
    index = build_sparse_index([vectors], tmp_path / "index", V, "m")
    with pytest.raises(ValueError, match=r"document '1' has the weight -0\.5: a rank_features field holds positive"):
        export_index(index, "elasticsearch", tmp_path / "out")
    assert not (tmp_path / "out" / "bulk.ndjson").exists()  # atomic: nothing half-written
    assert export_index(index, "qdrant", tmp_path / "q")  # Qdrant takes any weight


def test_qdrant_models_validate_and_local_mode_ranks_as_the_index(index, tmp_path):
    models = pytest.importorskip("qdrant_client.models")
    from qdrant_client import QdrantClient

    index, _ = index
    export_index(index, "qdrant", tmp_path / "out", field="splade")
    collection = models.CreateCollection.model_validate(json.loads((tmp_path / "out" / "collection.json").read_text()))
    assert isinstance(collection.sparse_vectors["splade"], models.SparseVectorParams)
    points = [models.PointStruct.model_validate(json.loads(line))
              for line in (tmp_path / "out" / "points.jsonl").read_text().splitlines()]
    assert isinstance(points[3].vector["splade"], models.SparseVector) and points[3].payload == {"doc_id": "doc/3"}
    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config={}, sparse_vectors_config=collection.sparse_vectors)
    client.upsert("docs", points=points)
    query = positive_vectors(1, 9)[0]
    terms = query.nonzero()[:, 0]
    hits = client.query_points("docs", query=models.SparseVector(indices=terms.tolist(), values=query[terms].tolist()),
                               using="splade", limit=5).points
    (scores, positions), = index.search(query[None], 5)
    assert [hit.id for hit in hits] == positions.tolist()
    np.testing.assert_allclose([hit.score for hit in hits], scores, rtol=1e-5)
