"""The exact multi-vector index: built in segments, resumed, loaded with its checks, and searched by MaxSim equal to
a brute force written out here (sum over query tokens of the best dot product with one document token)."""

import json

import numpy as np
import pytest
import torch

from bertkit.retrieval.multivector import MultiVectorIndex, MultiVectorIndexWriter, build_multivector_index


def documents(n, dim, seed=0):
    generator = np.random.default_rng(seed)
    return [generator.standard_normal((int(generator.integers(1, 9)), dim)).astype(np.float32) for _ in range(n)]


def brute_force(queries, docs, k):
    results = []
    for query in queries:
        scores = torch.tensor([float((torch.as_tensor(query) @ torch.as_tensor(doc).T).max(1).values.sum())
                               for doc in docs])
        order = sorted(range(len(docs)), key=lambda i: (-scores[i].item(), i))[:k]
        results.append((scores[order], torch.tensor(order)))
    return results


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_search_equals_brute_force_maxsim(tmp_path, dtype):
    docs, dim = documents(37, 7), 7
    index = build_multivector_index([docs[:10], docs[10:11], docs[11:]], tmp_path / "idx", dim, "m", dtype=dtype,
                                    max_tokens=13)
    stored = [index.document(i).astype(np.float32) for i in range(len(index))]
    np.testing.assert_array_equal(np.concatenate(stored), np.concatenate(docs).astype(dtype).astype(np.float32))
    queries = documents(5, dim, seed=1)
    for max_scores in (1, 50, 1 << 20):  # one document per slice, a few, all at once
        for (scores, positions), (want_scores, want_positions) in zip(
                index.search(queries, 4, max_scores=max_scores), brute_force(queries, stored, 4)):
            torch.testing.assert_close(torch.from_numpy(scores), want_scores, rtol=1e-5, atol=1e-5)
            assert positions.tolist() == want_positions.tolist()


def test_ties_go_to_the_lower_position_and_k_beyond_the_corpus(tmp_path):
    doc = np.ones((2, 3), np.float32)
    index = build_multivector_index([[doc, doc * 2, doc]], tmp_path / "idx", 3, "m", dtype="float32")
    scores, positions = index.search([np.ones((1, 3), np.float32)], 10)[0]
    assert positions.tolist() == [1, 0, 2] and scores.tolist() == [6.0, 3.0, 3.0]


def test_ids_resume_and_manifest(tmp_path):
    docs = documents(12, 4)
    writer = MultiVectorIndexWriter(tmp_path / "idx", 4, "m", max_tokens=1)
    writer.add(docs[:5], ids=[f"d{i}" for i in range(5)])
    writer._buffer.append(docs[5])  # added after the last flush: lost in the crash, re-added on resume
    del writer
    writer = MultiVectorIndexWriter(tmp_path / "idx", 4, "m", max_tokens=1, resume=True)
    assert writer.documents == 5
    writer.add(docs[5:], ids=[f"d{i}" for i in range(5, 12)])
    index = writer.finish()
    assert index.ids([0, 11, 6]) == ["d0", "d11", "d6"]
    assert index.tokens == sum(len(d) for d in docs)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"vectors.npy", "offsets.npy", "ids.bin", "ids.offsets.npy"}
    assert not (tmp_path / "idx" / "segments").exists()
    np.testing.assert_array_equal(index.document(7), docs[7].astype(np.float16))


def one_line_error(match, function, *args, **kwargs):
    with pytest.raises(ValueError, match=match) as error:
        function(*args, **kwargs)
    assert "\n" not in str(error.value)


def test_bad_input_is_one_line(tmp_path):
    docs = documents(3, 4)
    build_multivector_index([docs], tmp_path / "idx", 4, "m")
    index = MultiVectorIndex.load(tmp_path / "idx")
    one_line_error("not 8; search it with the model", MultiVectorIndex.load, tmp_path / "idx", dim=8)
    one_line_error("built by 'm', not 'other'", MultiVectorIndex.load, tmp_path / "idx", model="other")
    one_line_error(r"queries\[0\]: expected token vectors \[n, 4\]", index.search, [np.ones((2, 5))], 3)
    one_line_error("is not empty", MultiVectorIndexWriter, tmp_path / "idx", 4, "m")
    one_line_error(r"documents\[1\] has no token vectors", MultiVectorIndexWriter(tmp_path / "new", 4, "m").add,
                   [docs[0], np.ones((0, 4))])
    one_line_error("the corpus is empty", MultiVectorIndexWriter(tmp_path / "empty", 4, "m").finish)
    one_line_error("NaN", MultiVectorIndexWriter(tmp_path / "nan", 4, "m").add, [np.full((1, 4), np.nan)])
    vectors = tmp_path / "idx" / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-2])
    one_line_error("vectors.npy' is .* bytes, the manifest says .*: truncated", MultiVectorIndex.load, tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").unlink()
    one_line_error("holds no manifest.json: not a finished multi-vector index", MultiVectorIndex.load,
                   tmp_path / "idx")
    writer = MultiVectorIndexWriter(tmp_path / "half", 4, "m", max_tokens=1)
    writer.add(docs)
    one_line_error("pass resume=True", MultiVectorIndexWriter, tmp_path / "half", 4, "m")
    one_line_error("was started with", MultiVectorIndexWriter, tmp_path / "half", 4, "other", resume=True)


def test_corpus_builder_names_the_document_left_without_vectors_and_the_empty_corpus(tmp_path):
    from bertkit.retrieval.multivector_corpus import build_multivector_corpus_index

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "two words"}\n{"_id": "dots", "text": "..."}\n')

    def encode(texts):  # one vector per word: "..." has none
        return [np.ones((len(t.split()) - (t == "..."), 4), np.float32) for t in texts]

    with pytest.raises(ValueError, match=r"c\.jsonl: document 'dots' has no token vectors") as error:
        build_multivector_corpus_index(encode, corpus, tmp_path / "i", dim=4, model="m", progress=False)
    assert "\n" not in str(error.value) and not (tmp_path / "i" / "manifest.json").exists()
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"e\.jsonl: no documents"):
        build_multivector_corpus_index(encode, tmp_path / "e.jsonl", tmp_path / "j", dim=4, model="m")
    index = build_multivector_corpus_index(lambda texts: [np.ones((2, 4), np.float32) for _ in texts], corpus,
                                           tmp_path / "k", dim=4, model="m", progress=False)
    assert index.ids([0, 1]) == ["a", "dots"] and index.manifest["info"]["corpus"] == "c.jsonl"


def test_a_build_killed_before_its_first_segment_resumes_from_nothing(tmp_path):
    MultiVectorIndexWriter(tmp_path / "i", 4, "m")  # started, then gone before anything was flushed
    with pytest.raises(ValueError, match="an unfinished build: pass resume=True"):
        MultiVectorIndexWriter(tmp_path / "i", 4, "m")
    writer = MultiVectorIndexWriter(tmp_path / "i", 4, "m", resume=True)
    writer.add([np.ones((3, 4), np.float32)])
    assert writer.finish().documents == 1
