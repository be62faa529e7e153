"""Near-duplicates of an embedding store (bertkit.embed_job.dedup, ``bertkit embed dedup``): the verdicts equal
the full similarity matrix's, whatever the shards and blocks; the files and the refusals."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from bertkit.embed_job.dedup import near_duplicates
from bertkit.embed_job.store import open_store, shard_name, write_index, write_shard


def planted(seed: int = 0, rows: int = 61, dim: int = 9) -> tuple[list, np.ndarray]:
    """Random rows with near-copies of earlier rows planted among them, and string ids."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, dim)).astype(np.float32)
    for i in rng.choice(np.arange(5, rows), size=rows // 3, replace=False):
        vectors[i] = vectors[rng.integers(0, i)] * rng.uniform(0.5, 2) + rng.normal(0, 0.05, dim)  # scale: cosine
    return [f"doc-{i}" for i in range(rows)], vectors


def write_store(directory, ids, vectors, cuts=(0, 7, 8, 30), kind="dense"):
    bounds = [*cuts, len(ids)]
    records = [write_shard(directory, shard_name(n), ids[a:b], vectors[a:b], kind)
               for n, (a, b) in enumerate(itertools.pairwise(bounds))]
    write_index(directory, {"model": {"kind": kind, "dim": 9}, "input": {}, "shards": records, "complete": True})
    return directory


def brute_force(ids, vectors, threshold):
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = np.tril(unit @ unit.T, k=-1) + np.triu(np.full((len(ids), len(ids)), -np.inf))  # earlier rows only
    best, at = scores.max(axis=1), scores.argmax(axis=1)
    return [(ids[i], ids[at[i]] if best[i] >= threshold else None) for i in range(len(ids))], best


@pytest.mark.parametrize("threshold", [0.9, 0.99, 0.5])
def test_the_verdicts_equal_the_full_matrix(tmp_path, threshold):
    ids, vectors = planted()
    want, best = brute_force(ids, vectors, threshold)
    store = open_store(write_store(tmp_path, ids, vectors))
    for block_rows in (1, 5, 4096):
        verdicts = list(near_duplicates(store, threshold, block_rows))
        assert [(v.id, v.duplicate_of) for v in verdicts] == want, block_rows
        assert verdicts[0].similarity is None
        np.testing.assert_allclose([v.similarity for v in verdicts[1:]], best[1:], rtol=1e-5, atol=1e-6)
    dropped = sum(1 for _, other in want if other is not None)
    assert (0 < dropped < len(ids)) if threshold < 0.99 else dropped > 0


def test_cli_writes_the_kept_ids_and_the_duplicates(tmp_path, capsys):
    from bertkit.cli import main

    ids, vectors = planted(seed=3)
    store = write_store(tmp_path / "store", ids, vectors)
    want, _best = brute_force(ids, vectors, 0.95)
    argv = ["embed", "dedup", str(store), "--threshold", "0.95", "-o", str(tmp_path / "keep.jsonl"),
            "--duplicates", str(tmp_path / "drop.jsonl"), "--chunk-size", "6"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    kept = [json.loads(line) for line in (tmp_path / "keep.jsonl").read_text().splitlines()]
    dropped = [json.loads(line) for line in (tmp_path / "drop.jsonl").read_text().splitlines()]
    assert kept == [{"id": i} for i, other in want if other is None]
    assert [(d["id"], d["duplicate_of"]) for d in dropped] == [(i, o) for i, o in want if o is not None]
    assert all(d["similarity"] >= 0.95 for d in dropped)
    assert summary == {"rows": len(ids), "kept": len(kept), "duplicates": len(dropped), "threshold": 0.95}


@pytest.mark.parametrize("flags, message", [
    (["--threshold", "1.5"], "--threshold 1.5: a cosine similarity"),
    (["--chunk-size", "0"], "--chunk-size must be at least 1"),
])
def test_cli_refusals_leave_no_file(tmp_path, capsys, flags, message):
    from bertkit.cli import main

    ids, vectors = planted()
    store = write_store(tmp_path / "store", ids, vectors)
    assert main(["embed", "dedup", str(store), "-o", str(tmp_path / "keep.jsonl"), *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "keep.jsonl").exists()


def test_a_sparse_store_and_an_output_inside_the_store_are_refused(tmp_path, capsys):
    from bertkit.cli import main

    sparse = [(np.array([1], np.int32), np.array([1.0], np.float32))] * 3
    store = write_store(tmp_path / "sparse", [0, 1, 2], sparse, cuts=(0,), kind="sparse")
    assert main(["embed", "dedup", str(store), "-o", str(tmp_path / "keep.jsonl")]) == 1
    assert "holds a sparse model's embeddings" in capsys.readouterr().err
    ids, vectors = planted()
    dense = write_store(tmp_path / "dense", ids, vectors)
    assert main(["embed", "dedup", str(dense), "-o", str(dense / "keep.jsonl")]) == 1
    assert "OUTDIR" in capsys.readouterr().err and not (dense / "keep.jsonl").exists()
