"""A corpus on disk indexed at scale (bertkit.retrieval.sparse_corpus): JSON lines and Parquet read lazily, ids
stored beside the index, a build killed half-way resumed to the index a one-go build gives, and the one-line
errors for bad corpora."""

import json
import sys
import zlib

import numpy as np
import pytest
import torch

from bertkit.retrieval.sparse import SparseIndex
from bertkit.retrieval.sparse_corpus import CorpusFields, build_sparse_corpus_index, read_corpus
from conftest import kill_when

V = 41
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "in", "big", "old", "town", "river", "city", "berlin",
         "people", "live", "many", "new", "what", "how"]


def fake_encode(texts):
    """A deterministic sparse encoder: each word's crc32 picks a term, weight 0.5 per occurrence."""
    dense = torch.zeros(len(texts), V)
    for row, text in enumerate(texts):
        for word in text.split():
            dense[row, zlib.crc32(word.encode()) % V] += 0.5
    return dense.to_sparse_coo()


def corpus_records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"_id": f"doc-{i}", "title": "the title" if i % 3 == 0 else "",
             "text": " ".join(rng.choice(WORDS, size=int(rng.integers(0, 12))))} for i in range(n)]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def arrays(index):
    return [np.asarray(a) for a in (index.offsets, index.docs, index.weights)] + [index.ids(range(len(index)))]


def assert_same_index(a, b):
    for x, y in zip(arrays(a), arrays(b)):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_jsonl_corpus_indexed_with_ids_and_searched(tmp_path):
    records = corpus_records(101)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    index = build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="fake",
                                      chunk_documents=7, max_postings=50, batch_size=3, progress=False)
    assert index.documents == 101 and index.ids([0, 100, 5]) == ["doc-0", "doc-100", "doc-5"]
    texts = [(r["title"] + " " + r["text"]).strip() for r in records]
    dense = fake_encode(texts).to_dense()
    query = fake_encode(["the cat in berlin"])
    (scores, positions), = SparseIndex.load(tmp_path / "index").search(query, 5)
    expected = (query.to_dense() @ dense.T)[0]
    best = sorted(range(101), key=lambda p: (-expected[p].item(), p))[:5]
    assert positions.tolist() == best
    torch.testing.assert_close(torch.from_numpy(scores), expected[best])


def test_parquet_corpus_equals_jsonl(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    records = corpus_records(53, seed=1)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "corpus.parquet")
    a = build_sparse_corpus_index(fake_encode, corpus, tmp_path / "a", vocab_size=V, model="fake", progress=False)
    b = build_sparse_corpus_index(fake_encode, tmp_path / "corpus.parquet", tmp_path / "b", vocab_size=V,
                                  model="fake", chunk_documents=5, max_postings=20, progress=False)
    assert_same_index(a, b)


KILLED_BUILD = """
import sys, time, zlib, torch
sys.path[:0] = {paths!r}
from tests.test_sparse_corpus import fake_encode
from bertkit.retrieval.sparse_corpus import build_sparse_corpus_index
def slow(texts):
    time.sleep(0.01)
    return fake_encode(texts)
build_sparse_corpus_index(slow, sys.argv[1], sys.argv[2], vocab_size={V}, model="fake", chunk_documents=4,
                          max_postings=30, progress=False)
"""


def test_a_build_killed_half_way_resumes_to_the_one_go_index(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", corpus_records(400, seed=2))
    script = tmp_path / "build.py"
    script.write_text(KILLED_BUILD.format(paths=sys.path, V=V))
    kill_when([sys.executable, str(script), str(corpus), str(tmp_path / "index")],
              tmp_path / "index" / "segments" / "000012.counts.npy")
    progress = json.loads((tmp_path / "index" / "segments" / "progress.json").read_text())
    assert 0 < progress["documents"] < 400 and not (tmp_path / "index" / "manifest.json").exists()
    with pytest.raises(ValueError, match="unfinished build"):
        build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="fake", progress=False)
    resumed = build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="fake",
                                        chunk_documents=4, max_postings=30, resume=True, progress=False)
    one_go = build_sparse_corpus_index(fake_encode, corpus, tmp_path / "one", vocab_size=V, model="fake",
                                       progress=False)
    assert_same_index(resumed, one_go)
    assert SparseIndex.load(tmp_path / "index").ids([399]) == ["doc-399"]


def test_resume_refuses_another_corpus_or_model(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", corpus_records(40))
    from bertkit.retrieval.sparse import SparseIndexWriter

    writer = SparseIndexWriter(tmp_path / "index", V, "fake", max_postings=10,
                               info={"corpus": "corpus.jsonl", "corpus_bytes": 1, "fields": [None, "text", "title"]})
    writer.add(fake_encode(["a cat"]), ["x"])
    writer.flush()
    with pytest.raises(ValueError, match="was started with"):
        build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="fake", resume=True,
                                  progress=False)
    with pytest.raises(ValueError, match="is of 'fake' vectors"):
        build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="other", resume=True,
                                  progress=False)


@pytest.mark.parametrize(("content", "match"), [
    ("", r"no documents"),
    ("\n  \n", r"no documents"),
    ('{"_id": "a", "body": "x"}\n', r"corpus.jsonl:1: no 'text' field .*--text-field"),
    ('{"_id": "a", "text": "x"}\n{"text": "y"}\n', r"corpus.jsonl:2: no 'id' field .*--id-field"),
    ('{"_id": "a", "text": 3}\n', r"corpus.jsonl:1: a int in the 'text' field"),
    ('{"_id": "a", "text": "x"}\nnot json\n', r"corpus.jsonl:2: not a JSON object"),
    ('["a", "b"]\n', r"corpus.jsonl:1: expected a JSON object"),
])
def test_bad_corpus_one_line_errors(tmp_path, content, match):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(content)
    with pytest.raises(ValueError, match=match) as error:
        build_sparse_corpus_index(fake_encode, corpus, tmp_path / "index", vocab_size=V, model="fake", progress=False)
    assert "\n" not in str(error.value)


def test_wrong_encoding_and_format(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl: line 2 is not utf-8 text .*--encoding"):
        list(read_corpus(corpus))
    assert list(read_corpus(corpus, encoding="latin-1")) == [("a", "ok"), ("b", "café")]
    with pytest.raises(ValueError, match=r"--corpus .*corpus.csv: expected a .jsonl .* or .parquet"):
        list(read_corpus(tmp_path / "corpus.csv"))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    pytest.importorskip("pyarrow")
    with pytest.raises(ValueError, match=r"bad.parquet: not a readable Parquet file"):
        list(read_corpus(tmp_path / "bad.parquet"))


def test_fields_and_titles():
    records = [{"id": 7, "body": "text here", "head": "A title"}, {"id": 8, "body": " lone "}]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        corpus = write_jsonl(Path(scratch) / "c.jsonl", records)
        assert list(read_corpus(corpus, CorpusFields(text="body", title="head"))) == [("7", "A title text here"),
                                                                                     ("8", "lone")]
        assert list(read_corpus(corpus, CorpusFields(text="body", title=None), skip=1)) == [("8", "lone")]
