"""The embedding store (bertkit.embed_job.store): shards written and read back bit-equal for every model kind and
format, the index's checks, and the fingerprint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.embed_job.store import (
    FORMAT,
    model_fingerprint,
    open_store,
    read_index,
    shard_name,
    write_index,
    write_shard,
)

MODEL = {"path": "m", "fingerprint": "f", "dtype": "float32", "normalize": False, "prompt": ""}


def _store(tmp_path, kind, dim, shards, formats=("parquet",), complete=True):
    records = [write_shard(tmp_path, shard_name(n), ids, vectors, kind, formats) for n, (ids, vectors) in
               enumerate(shards)]
    write_index(tmp_path, {"model": {**MODEL, "kind": kind, "dim": dim}, "input": {"paths": ["c.txt"]},
                           "shards": records, "complete": complete})
    return open_store(tmp_path, complete=False)


@pytest.mark.parametrize("formats", [("parquet",), ("npy",), ("parquet", "npy")])
@pytest.mark.parametrize("ids", [[np.arange(5), np.arange(5, 8)], [["a:0", "a:1", "a:2", "a:3", "a:4"],
                                                                   ["b:0", "b:1", "b:2"]]])
def test_dense_round_trip(tmp_path, formats, ids):
    rng = np.random.default_rng(0)
    vectors = [rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((3, 7)).astype(np.float32)]
    store = _store(tmp_path, "dense", 7, list(zip(ids, vectors)), formats)
    assert len(store) == 8 and store.meta["rows"] == 8 and store.meta["format"] == FORMAT
    for (got_ids, got), want_ids, want in zip(store.iter_batches(), ids, vectors, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        assert got_ids.tolist() == list(want_ids)
    assert list(store.ids()) == [*ids[0], *ids[1]]
    if "npy" in formats:  # the npy files load with numpy alone, no pickle
        np.testing.assert_array_equal(np.load(tmp_path / "part-00001.npy", allow_pickle=False), vectors[1])


def test_parquet_schema(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    _store(tmp_path, "static", 4, [(np.arange(3), np.ones((3, 4)))])
    schema = pq.read_schema(tmp_path / "part-00000.parquet")
    assert str(schema.field("id").type) == "int64"
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[4]"


def test_sparse_and_multi_vector_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    sparse = [(np.array([3, 9], np.int32), np.array([0.5, 1.25], np.float32)),
              (np.zeros(0, np.int32), np.zeros(0, np.float32)), (np.array([1], np.int32), np.array([2.0], np.float32))]
    store = _store(tmp_path / "s", "sparse", 30, [(np.arange(3), sparse)])
    (ids, got), = store.iter_batches()
    for (gi, gv), (wi, wv) in zip(got, sparse, strict=True):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gv, wv)
    multi = [rng.standard_normal((n, 5)).astype(np.float32) for n in (4, 1, 6)]
    store = _store(tmp_path / "m", "multi-vector", 5, [(["x", "y", "z"], multi)])
    (ids, got), = store.iter_batches()
    assert ids.tolist() == ["x", "y", "z"]
    for g, w in zip(got, multi, strict=True):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError, match="--format npy holds one fixed-size vector"):
        write_shard(tmp_path, "p", [0], multi[:1], "multi-vector", ("npy",))


def test_empty_shard_and_incomplete_store(tmp_path):
    store = _store(tmp_path, "dense", 3, [(np.arange(2), np.ones((2, 3))), ([], np.zeros((0, 3)))], complete=False)
    assert store.shards[1] == {"name": "part-00001", "rows": 0, "files": []}
    assert [len(ids) for ids, _ in store.iter_batches()] == [2, 0]
    with pytest.raises(ValueError, match=r"has not finished.*--resume"):
        open_store(tmp_path)


def test_bad_stores_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"holds no index.json"):
        open_store(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(ValueError, match="not an embedding store's index"):
        read_index(tmp_path)
    store = _store(tmp_path, "dense", 2, [(np.arange(3), np.ones((3, 2)))])
    meta = json.loads((tmp_path / "index.json").read_text())
    meta["shards"][0]["rows"] = 4
    (tmp_path / "index.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"holds 3 rows.*says 4"):
        list(open_store(tmp_path).iter_batches())
    (tmp_path / "part-00000.parquet").unlink()
    with pytest.raises(ValueError, match=r"part-00000 that .* lists is missing"):
        list(store.ids())


def test_fingerprint_tells_models_apart(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"0" * 100)
    first = model_fingerprint(model)
    assert model_fingerprint(model) == first
    (model / "config.json").write_text('{"hidden_size": 9}')
    assert model_fingerprint(model) != first
    assert model_fingerprint("org/registered-name") != model_fingerprint("org/other-name")
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"0" * 101)
    assert model_fingerprint(model) != first
