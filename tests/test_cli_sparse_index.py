"""``bertkit sparse-index build`` and ``bertkit search`` with a tiny SPLADE directory that sentence-transformers writes:
a build killed half-way and resumed equals a one-go build, search returns the ids and scores of a brute-force dot
product of bertkit.SparseEncoder's vectors, and bad input gets one line naming the file or argument."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("sentence_transformers")

import bertkit
from bertkit.cli import main
from bertkit.retrieval.sparse import SparseIndex
from conftest import kill_when
from sparse_dirs import WORDS, mlm_dir
from test_sparse_encoder import _sparse_dir

QUERIES = ["how many people live in berlin", "the cat sat", "old river town"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-sparse")
    model = _sparse_dir(mlm_dir(root / "mlm"), root / "splade")
    rng = np.random.default_rng(0)
    words = WORDS[5:]
    records = [{"_id": f"d{i}", "title": "berlin" if i % 5 == 0 else "",
                "text": " ".join(rng.choice(words, size=int(rng.integers(1, 20))))} for i in range(240)]
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    return root, model, corpus, records


def index_args(model, corpus, out, *extra):
    return ["sparse-index", "build", str(model), "--corpus", str(corpus), "-o", str(out), "--dtype", "fp32", "--quiet",
            "--chunk-documents", "8", "--max-postings", "300", *extra]


def test_build_killed_half_way_resumes_to_the_one_go_index(setup):
    root, model, corpus, _ = setup
    out = root / "killed"
    kill_when([sys.executable, "-m", "bertkit.cli", *index_args(model, corpus, out)],
              out / "segments" / "000004.counts.npy")
    assert not (out / "manifest.json").exists()
    assert main(index_args(model, corpus, out, "--resume")) == 0
    assert main(index_args(model, corpus, root / "one-go")) == 0
    a, b = SparseIndex.load(out), SparseIndex.load(root / "one-go")
    for x, y in [(a.offsets, b.offsets), (a.docs, b.docs), (a.weights, b.weights)]:
        assert np.array_equal(x, y)
    assert a.ids(range(240)) == b.ids(range(240)) == [f"d{i}" for i in range(240)]


def test_search_returns_ids_and_scores_of_a_dense_dot(setup, capsys, tmp_path):
    root, model, corpus, records = setup
    assert main(index_args(model, corpus, root / "searched")) == 0
    capsys.readouterr()
    assert main(["search", str(root / "searched"), "--model", str(model), "--query", *QUERIES, "-k", "4",
                 "--jsonl", "--dtype", "fp32"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert "search per query mean" in err and "total" in err and "encode" in err
    encoder = bertkit.SparseEncoder(model, dtype="fp32")
    docs = encoder.encode_document([(r["title"] + " " + r["text"]).strip() for r in records]).to_dense()
    queries = encoder.encode_query(QUERIES).to_dense()
    scores = queries @ docs.T
    for line, text, row in zip(lines, QUERIES, scores):
        assert line["query"] == text and line["search_ms"] >= 0
        best = sorted(range(len(records)), key=lambda p: (-row[p].item(), p))[:4]
        assert [hit["id"] for hit in line["hits"]] == [records[p]["_id"] for p in best]
        torch.testing.assert_close(torch.tensor([hit["score"] for hit in line["hits"]]), row[best])
    queries_file = tmp_path / "q.txt"
    queries_file.write_text("\n".join(QUERIES) + "\n")
    assert main(["search", str(root / "searched"), "--model", str(model), "--queries", str(queries_file),
                 "-o", str(tmp_path / "run.txt"), "--dtype", "fp32"]) == 0
    text = (tmp_path / "run.txt").read_text()
    assert f"query 1: {QUERIES[0]}" in text and f"  {lines[0]['hits'][0]['id']}" in text


def one_line_error(capsys, argv, *parts):
    capsys.readouterr()
    assert main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("bertkit: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], lines
    err = errors[0]
    for part in parts:
        assert part in err, err


def test_bad_input_one_line_errors(setup, capsys, tmp_path):
    root, model, corpus, _ = setup
    index = root / "bad"
    assert main(index_args(model, corpus, index)) == 0
    other = _sparse_dir(mlm_dir(tmp_path / "mlm2"), tmp_path / "other", strategy="sum")
    one_line_error(capsys, ["search", str(index), "--model", other, "--query", "x"], "was built by", "splade sha256:",
                   "other sha256:")
    manifest = json.loads((index / "manifest.json").read_text())
    (index / "manifest.json").write_text(json.dumps({**manifest, "version": 99}))
    one_line_error(capsys, ["search", str(index), "--model", model, "--query", "x"], "version 99")
    (index / "manifest.json").write_text(json.dumps(manifest))
    weights = index / "weights.npy"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    one_line_error(capsys, ["search", str(index), "--model", model, "--query", "x"], str(weights), "checksum")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    one_line_error(capsys, index_args(model, empty, tmp_path / "i1"), "--corpus", "empty.jsonl", "no documents")
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"_id": "a", "body": "x"}\n')
    one_line_error(capsys, index_args(model, missing, tmp_path / "i2"), "missing.jsonl:1", "'text'")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"_id": "a", "text": "caf\xe9"}\n')
    one_line_error(capsys, index_args(model, latin, tmp_path / "i3"), "latin.jsonl: line 1", "--encoding")
    one_line_error(capsys, index_args(model, corpus, corpus), "-o", "is the input --corpus")
    one_line_error(capsys, index_args(model, corpus, f"{model}/index"), "inside the directory MODEL")
    one_line_error(capsys, index_args(model, corpus, index), "bad", "is not empty")
    queries = tmp_path / "q.txt"
    queries.write_text("cat\n")
    one_line_error(capsys, ["search", str(index), "--model", model, "--queries", str(queries), "-o", str(queries)],
                   "is the input --queries")
    one_line_error(capsys, ["sparse-index", "export", str(index), "--model", model, "--to", "qdrant", "-o",
                            str(index / "out")], "inside the directory INDEX")


def test_help_lists_the_commands():
    result = subprocess.run([sys.executable, "-m", "bertkit.cli", "--help"], capture_output=True, text=True)
    assert "index" in result.stdout and "search" in result.stdout


def test_export_names_features_by_the_models_tokens(setup, tmp_path):
    _, model, corpus, records = setup
    assert main(index_args(model, corpus, tmp_path / "index")) == 0
    assert main(["sparse-index", "export", str(tmp_path / "index"), "--model", str(model), "--to", "opensearch",
                 "-o", str(tmp_path / "os")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "os" / "bulk.ndjson").read_text().splitlines()]
    assert lines[0] == {"index": {"_index": "documents", "_id": "d0"}}
    encoder = bertkit.SparseEncoder(model, dtype="fp32")
    expected = dict(encoder.decode(encoder.encode_document([(records[0]["title"] + " " + records[0]["text"])])[0]))
    assert lines[1]["sparse"].keys() == {t.replace(".", "%2E") for t in expected}
    for token, weight in expected.items():
        assert lines[1]["sparse"][token] == pytest.approx(weight, rel=1e-6)
    assert main(["sparse-index", "export", str(tmp_path / "index"), "--model", str(model), "--to", "qdrant",
                 "-o", str(tmp_path / "q"), "--field", "splade"]) == 0
    point = json.loads((tmp_path / "q" / "points.jsonl").read_text().splitlines()[0])
    assert point["id"] == 0 and point["payload"] == {"doc_id": "d0"} and len(point["vector"]["splade"]["indices"])
