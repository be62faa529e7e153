"""The sparse inverted index (bertkit.retrieval.sparse): exact against a brute-force dense dot product, built in
bounded memory through segments, saved and loaded with a manifest, and its one-line errors."""

import json

import numpy as np
import pytest
import torch

from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter, build_sparse_index

V = 37  # odd-sized vocabulary


def random_sparse(n, active, seed, grid=True, vocab_size=V):
    """``[n, V]`` dense vectors with about ``active`` nonzero terms each; with ``grid`` the weights are multiples of
    0.5 (sums exact, so ties are exact ties)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, vocab_size, generator=g) < active / vocab_size
    weights = (torch.randint(1, 5, (n, vocab_size), generator=g) / 2 if grid
               else torch.rand(n, vocab_size, generator=g) * 3)
    return weights * mask


def brute_force(queries, corpus, k):
    """The reference: dense dot products, documents sharing a term with the query, best first, ties to the lower
    position."""
    scores = queries @ corpus.T
    shares = (queries != 0).float() @ (corpus != 0).float().T > 0
    out = []
    for row, mask in zip(scores, shares):
        positions = mask.nonzero()[:, 0]
        order = sorted(positions.tolist(), key=lambda p: (-row[p].item(), p))[:k]
        out.append((row[order], torch.tensor(order, dtype=torch.long)))
    return out


def check_equal(got, expected):
    assert len(got) == len(expected)
    for (scores, positions), (ref_scores, ref_positions) in zip(got, expected):
        torch.testing.assert_close(torch.as_tensor(positions), ref_positions)
        torch.testing.assert_close(torch.as_tensor(scores), ref_scores)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("grid", [True, False])
def test_search_equals_dense_dot_with_segments(tmp_path, grid):
    corpus, queries = random_sparse(53, 6, 0, grid), random_sparse(9, 4, 1, grid)
    queries[3] = 0  # an empty query
    chunks = [corpus[:7].to_sparse_coo(), corpus[7:20], corpus[20:53].to_sparse_csr()]
    index = build_sparse_index(chunks, tmp_path / "idx", V, "tiny-splade", max_postings=40)  # several segments
    assert len(index) == 53 and index.manifest["postings"] == int((corpus != 0).sum())
    for k in (1, 5, 100):  # 100: more than the corpus
        got = index.search(queries.to_sparse_coo(), k)
        check_equal(got, brute_force(queries, corpus, k))
    assert len(got[3][0]) == 0
    if grid:  # the grid has ties: they go to the lower position
        assert any(len(s) > 1 and (s[:-1] == s[1:]).any() for s, _ in got)
    one_segment = build_sparse_index([corpus], tmp_path / "one", V, "tiny-splade")
    for (a, pa), (b, pb) in zip(one_segment.search(queries, 10), index.search(queries, 10)):
        assert (a == b).all() and (pa == pb).all()
        assert a.dtype == np.float32 and pa.dtype == np.int64


def test_few_postings_against_a_large_corpus(tmp_path):
    """Queries whose postings are few beside the corpus are scored by sorting them, not by an accumulator."""
    corpus, queries = random_sparse(600, 2, 4, vocab_size=401), random_sparse(12, 3, 5, vocab_size=401)
    index = build_sparse_index([corpus], tmp_path / "idx", 401, "m", max_postings=300)
    assert all(int((index.offsets[t + 1] - index.offsets[t]).sum()) * 16 < 600 for t in
               [q.nonzero()[:, 0].numpy() for q in queries])
    for k in (1, 4, 1000):
        check_equal(index.search(queries, k), brute_force(queries, corpus, k))


def test_pairs_input_and_ties_deterministic(tmp_path):
    writer = SparseIndexWriter(tmp_path / "idx", V, "m", max_postings=1)
    assert writer.add([([3, 5], [1.0, 2.0]), ([], []), ([5, 3, 3], [2.0, 0.5, 0.5])]) == range(0, 3)
    assert writer.add([(np.array([5]), torch.tensor([2.0]))]) == range(3, 4)
    index = writer.finish()
    assert not (tmp_path / "idx" / "segments").exists()
    (scores, positions), (empty_scores, _) = index.search([([3, 5], [1.0, 1.0]), ([], [])], 10)
    assert positions.tolist() == [0, 2, 3] and scores.tolist() == [3.0, 3.0, 2.0]
    assert len(empty_scores) == 0
    (scores, positions), = index.search([([5], [1.0])], 2)  # three tied at 2.0: the two lowest positions
    assert positions.tolist() == [0, 2] and scores.tolist() == [2.0, 2.0]
    blank = build_sparse_index([[([], []), ([], [])]], tmp_path / "blank", V, "m")  # documents, no postings
    assert len(blank) == 2 and [len(p) for _, p in blank.search([([5], [1.0])], 3)] == [0]
    assert len(SparseIndex.load(tmp_path / "blank")) == 2


def test_resume_after_an_interrupted_build(tmp_path):
    corpus = random_sparse(60, 6, 6)
    whole = build_sparse_index([corpus[i:i + 5] for i in range(0, 60, 5)], tmp_path / "whole", V, "m",
                               max_postings=25)
    writer = SparseIndexWriter(tmp_path / "idx", V, "m")
    for i in range(0, 25, 5):
        writer.add(corpus[i:i + 5])
    writer.flush()  # what a corpus-scale build does at a checkpoint
    writer.add(corpus[25:35])  # buffered only: lost with the process
    flushed = 25
    stray = tmp_path / "idx" / "segments" / f"{writer._segment_count:06d}.docs.npy"
    np.save(stray, np.zeros(3, np.uint32))  # a segment written as the build died, before its record
    del writer  # interrupted: the buffered documents are lost, the flushed ones kept
    one_line_error("unfinished build: pass resume=True", SparseIndexWriter, tmp_path / "idx", V, "m")
    one_line_error("is of 'm' vectors of 37 terms, not 'other' of 37", SparseIndexWriter, tmp_path / "idx", V,
                   "other", resume=True)
    resumed = SparseIndexWriter(tmp_path / "idx", V, "m", max_postings=25, resume=True)
    assert resumed.documents == flushed and not stray.exists()
    for i in range(flushed, 60, 7):
        resumed.add(corpus[i:min(i + 7, 60)])
    index = resumed.finish()
    assert index.manifest["documents"] == 60
    for array in ("offsets", "docs", "weights"):
        assert (getattr(index, array) == getattr(whole, array)).all()
    assert SparseIndexWriter(tmp_path / "fresh", V, "m", resume=True).documents == 0  # nothing to resume: new


def test_save_load_manifest(tmp_path):
    corpus = random_sparse(20, 5, 2)
    build_sparse_index([corpus], tmp_path / "idx", V, "org/tiny-splade")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["format"] == "bertkit-sparse-index" and manifest["version"] == 1
    assert (manifest["vocab_size"], manifest["model"], manifest["documents"]) == (V, "org/tiny-splade", 20)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["docs.npy", "manifest.json", "offsets.npy",
                                                                     "weights.npy"]
    index = SparseIndex.load(tmp_path / "idx", vocab_size=V, model="org/tiny-splade")
    check_equal(index.search(corpus[:4], 3), brute_force(corpus[:4], corpus, 3))


def one_line_error(match, call, *args, **kwargs):
    with pytest.raises(ValueError, match=match) as info:
        call(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_errors(tmp_path):
    corpus = random_sparse(20, 5, 3)
    build_sparse_index([corpus], tmp_path / "idx", V, "m")
    one_line_error("built for a vocabulary of 37 terms, not 30522", SparseIndex.load, tmp_path / "idx",
                   vocab_size=30522)
    one_line_error("built by 'm', not 'other'", SparseIndex.load, tmp_path / "idx", model="other")
    index = SparseIndex.load(tmp_path / "idx")
    one_line_error(r"expected sparse vectors \[n, 37\]", index.search, torch.zeros(2, 40), 3)
    one_line_error("term id 37 is outside", index.search, [([37], [1.0])], 3)
    one_line_error("one weight per term id", index.search, [([1, 2], [1.0]), ([3], [1.0, 2.0])], 3)
    one_line_error("NaN or infinity", index.search, [([1], [float("nan")])], 3)
    one_line_error("k must be at least 1", index.search, corpus[:1], 0)
    one_line_error("the corpus is empty", SparseIndexWriter(tmp_path / "empty", V, "m").finish)
    one_line_error("not empty", SparseIndexWriter, tmp_path / "idx", V, "m")

    weights = tmp_path / "idx" / "weights.npy"
    data = weights.read_bytes()
    weights.write_bytes(data[:-8])  # truncated
    one_line_error("weights.npy' is .* bytes, the manifest says .*truncated", SparseIndex.load, tmp_path / "idx")
    weights.write_bytes(data[:-4] + b"\x00\x00\xc0\x7f")  # one weight changed
    one_line_error("does not match its checksum", SparseIndex.load, tmp_path / "idx")
    weights.write_bytes(data)
    manifest = tmp_path / "idx" / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text[:30])
    one_line_error("manifest.json' is corrupted", SparseIndex.load, tmp_path / "idx")
    manifest.write_text(text.replace('"version": 1', '"version": 99'))
    one_line_error("version 99 index; this bertkit reads", SparseIndex.load, tmp_path / "idx")
    manifest.unlink()
    one_line_error("holds no manifest.json: not a finished sparse index", SparseIndex.load, tmp_path / "idx")


def test_ids_stored_beside_the_index(tmp_path):
    writer = SparseIndexWriter(tmp_path / "index", V, "m", max_postings=5)
    writer.add(random_sparse(4, 6, 0), ["a", "ü-2", "", "d"])
    with pytest.raises(ValueError, match="came with ids; give ids in every call"):
        writer.add(random_sparse(1, 6, 1))
    with pytest.raises(ValueError, match="2 ids for 3 documents"):
        writer.add(random_sparse(3, 6, 1), ["x", "y"])
    writer.add(random_sparse(3, 6, 2), ["e", "f", "g"])
    index = writer.finish()
    assert index.ids([1, 6, 2, 0]) == ["ü-2", "g", "", "a"]
    assert SparseIndex.load(tmp_path / "index").ids(np.array([4])) == ["e"]
    (tmp_path / "index" / "ids.bin").write_bytes(b"x" * (tmp_path / "index" / "ids.bin").stat().st_size)
    with pytest.raises(ValueError, match=r"ids\.bin' does not match its checksum"):
        SparseIndex.load(tmp_path / "index")
    plain = build_sparse_index([random_sparse(2, 6, 0)], tmp_path / "plain", V, "m")
    with pytest.raises(ValueError, match="built without document ids"):
        plain.ids([0])


def test_signed_weights_a_zero_sum_still_shares_a_term(tmp_path):
    """Weights of either sign (not SPLADE's): a document sharing a term is returned even when its sum is 0 or
    negative, on the accumulator path (many postings per document) and the sorted one."""
    corpus = random_sparse(40, 10, 3, grid=True) * torch.where(torch.rand(40, V) < 0.5, -1.0, 1.0)
    corpus[7] = 0
    corpus[7, [1, 2]] = torch.tensor([1.0, -1.0])  # sums to 0 against a query of 1s on terms 1 and 2
    index = build_sparse_index([corpus], tmp_path / "index", V, "m")
    queries = random_sparse(5, 8, 4, grid=True)
    queries[0] = 0
    queries[0, [1, 2]] = 1.0
    check_equal(index.search(queries, 40), brute_force(queries, corpus, 40))
    assert 7 in index.search(queries[:1], 40)[0][1].tolist()
