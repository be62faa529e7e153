"""The embedding store: a directory of shards (ids beside vectors) and the ``index.json`` that says what they are.

``OUT/index.json``::

    {"format": "bertkit-embeddings", "version": 1,
     "model": {"path", "fingerprint", "kind": "dense" | "static" | "sparse" | "multi-vector", "dtype", "dim",
               "normalize", "prompt"},
     "input": {...what was embedded...},
     "shards": [{"name": "part-00000", "rows": N, "files": ["part-00000.parquet", ...], ...}, ...],
     "rows": total, "complete": true | false}

A shard ``part-NNNNN.parquet`` has an ``id`` column (int64 or string) and, by kind: ``embedding``
``fixed_size_list<float32>[dim]`` (dense, static); ``indices`` ``list<int32>`` + ``values`` ``list<float32>``
(sparse); ``embedding`` ``list<fixed_size_list<float32>[dim]>`` (multi-vector: one vector per token). The npy form
(dense and static only) is ``part-NNNNN.npy`` (float32 ``[rows, dim]``) + ``part-NNNNN.ids.npy`` (int64 or a
fixed-width unicode array: loads without pickle). Every file is written atomically; a shard counts once its
record is in ``index.json``, which is rewritten atomically after each one. pyarrow (the ``embed`` extra) is
imported only where Parquet is read or written.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.io import atomic_path, atomic_write_text, read_json_object

FORMAT = "bertkit-embeddings"
VERSION = 1
INDEX = "index.json"
#: the model kinds a store holds, and the vectors each one gives
KINDS = ("dense", "static", "sparse", "multi-vector")
#: the shard file formats; npy holds one fixed-size vector per row, so dense and static models only
FORMATS = ("parquet", "npy")
_FLAT_KINDS = ("dense", "static")
#: files whose bytes make a model's fingerprint (its configuration); every other file counts by name and size
_CONFIG_SUFFIXES = (".json", ".txt", ".model")
_CONFIG_LIMIT = 16 << 20


def shard_name(ordinal: int) -> str:
    """``part-00007`` for shard 7."""
    return f"part-{ordinal:05d}"


def model_fingerprint(path: str | os.PathLike) -> str:
    """sha256 of a model directory's configuration (the bytes of its JSON / vocabulary files) and of the names and
    sizes of its other files (weights): what tells two models apart without reading gigabytes. A path that is no
    directory (a single weights file) counts by its name and size; a name that is no path (a registered model) by
    the name."""
    digest = hashlib.sha256()
    root = Path(path)
    if not root.exists():  # a registered name: it stands for itself
        return hashlib.sha256(os.fspath(path).encode()).hexdigest()
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    for file in files:
        name = file.relative_to(root).as_posix() if root.is_dir() else file.name
        if name.startswith(".") or "/." in name:
            continue
        size = file.stat().st_size
        digest.update(f"{name}\0{size}\0".encode())
        if file.suffix in _CONFIG_SUFFIXES and size <= _CONFIG_LIMIT:
            digest.update(file.read_bytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------- writing

def write_shard(out: str | os.PathLike, name: str, ids: Sequence, vectors: Any, kind: str,
                formats: Sequence[str] = ("parquet",)) -> dict[str, Any]:
    """Write one shard ``name`` of ``kind`` into ``out`` in each of ``formats``, every file atomically; its record
    for ``index.json`` (``name``, ``rows``, ``files``). ``vectors``: a float ``[rows, dim]`` array (dense, static),
    a list of ``(indices, values)`` pairs (sparse), a list of ``[tokens, dim]`` arrays (multi-vector)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--format must be one or more of {FORMATS}, got {list(formats)}.")
    if "npy" in formats and kind not in _FLAT_KINDS:
        raise ValueError(f"--format npy holds one fixed-size vector per row; a {kind} model's vectors are written "
                         "as Parquet: use --format parquet.")
    ids = _id_array(ids)
    if len(vectors) != len(ids):
        raise ValueError(f"shard {name}: {len(ids)} ids for {len(vectors)} vectors.")
    files: list[str] = []
    if not len(ids):  # an input range without rows: recorded, no file
        return {"name": name, "rows": 0, "files": files}
    if "parquet" in formats:
        files.append(f"{name}.parquet")
        _write_parquet(Path(out) / files[-1], ids, vectors, kind)
    if "npy" in formats:
        files += [f"{name}.npy", f"{name}.ids.npy"]
        for file, array in ((files[-2], _flat(vectors)), (files[-1], ids)):
            with atomic_path(Path(out) / file) as tmp, open(tmp, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
    return {"name": name, "rows": len(ids), "files": files}


def _id_array(ids: Sequence) -> np.ndarray:
    array = np.asarray(ids)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "U" or len(array) == 0:
        return array.astype(str) if len(array) else np.zeros(0, dtype=np.int64)
    return np.asarray([str(i) for i in ids])


def _flat(vectors: Any) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"dense vectors must form a [rows, dim] array, got shape {array.shape}.")
    return np.ascontiguousarray(array)


def _write_parquet(path: Path, ids: np.ndarray, vectors: Any, kind: str) -> None:
    pa, pq = _pyarrow(path)
    columns = {"id": pa.array(ids, type=pa.int64() if ids.dtype.kind == "i" else pa.string())}
    if kind in _FLAT_KINDS:
        flat = _flat(vectors)
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])
    elif kind == "sparse":
        indices, values = zip(*vectors) if len(vectors) else ((), ())
        columns["indices"] = _lists(pa, [np.asarray(i, dtype=np.int32) for i in indices], pa.int32())
        columns["values"] = _lists(pa, [np.asarray(v, dtype=np.float32) for v in values], pa.float32())
    else:
        tokens = [np.asarray(m, dtype=np.float32) for m in vectors]
        dim = tokens[0].shape[1] if tokens else 0
        flat = np.concatenate([t.reshape(-1, dim) for t in tokens]) if tokens else np.zeros((0, 0), np.float32)
        inner = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), dim)
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int32)
        columns["embedding"] = pa.ListArray.from_arrays(pa.array(offsets), inner)
    with atomic_path(path) as tmp:
        # vectors' floats rarely repeat: a dictionary page of them is written, then dropped, for nothing
        pq.write_table(pa.table(columns), tmp, use_dictionary=["id", "indices"])


def _lists(pa: Any, arrays: list[np.ndarray], type_: Any) -> Any:
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
    flat = np.concatenate(arrays) if arrays else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=type_))


def write_index(out: str | os.PathLike, meta: dict[str, Any]) -> None:
    """``out/index.json``, atomically: ``meta`` (model, input, shards, complete) with the format, version and row
    total filled in."""
    record = {"format": FORMAT, "version": VERSION, **meta,
              "rows": sum(shard["rows"] for shard in meta.get("shards", []))}
    atomic_write_text(Path(out) / INDEX, json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def read_index(out: str | os.PathLike) -> dict[str, Any]:
    """``out/index.json``, checked to be a bertkit embedding store of a version this bertkit reads."""
    path = Path(out) / INDEX
    if not path.is_file():
        raise ValueError(f"{out} holds no {INDEX}: not an embedding store written by `bertkit embed MODEL --input "
                         "CORPUS -o OUT`; pass such a directory.")
    meta = read_json_object(path, "an embedding store's index")
    if meta.get("format") != FORMAT or not isinstance(meta.get("version"), int):
        raise ValueError(f"{path} is not an embedding store's index (format {meta.get('format')!r}, expected "
                         f"{FORMAT!r}); pass a directory written by `bertkit embed ... -o OUT`.")
    if meta["version"] > VERSION:
        raise ValueError(f"{path} is version {meta['version']} of the embedding store; this bertkit reads version "
                         f"{VERSION}: upgrade bertkit.")
    return meta


# ---------------------------------------------------------------------------- reading

@dataclass
class EmbeddingStore:
    """An embedding store read shard by shard: ``meta`` (``index.json``), ``len()`` rows, ``iter_batches()`` one
    ``(ids, vectors)`` pair per shard (memory bounded by one shard), ``ids()`` every id in order."""

    path: Path
    meta: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.meta["model"]["kind"]

    @property
    def dim(self) -> int:
        return self.meta["model"]["dim"]

    @property
    def shards(self) -> list[dict[str, Any]]:
        return self.meta["shards"]

    def __len__(self) -> int:
        return sum(shard["rows"] for shard in self.shards)

    def iter_batches(self) -> Iterator[tuple[np.ndarray, Any]]:
        """``(ids, vectors)`` per shard, in order: ids an int64 or str array; vectors a float32 ``[rows, dim]``
        array (dense, static), a list of ``(indices int32, values float32)`` pairs (sparse), a list of float32
        ``[tokens, dim]`` arrays (multi-vector)."""
        for shard in self.shards:
            yield self._read(shard, vectors=True)

    def ids(self) -> Iterator[Any]:
        """Every id, shard after shard (only the id columns are read)."""
        for shard in self.shards:
            yield from self._read(shard, vectors=False)[0].tolist()

    def _read(self, shard: dict[str, Any], vectors: bool) -> tuple[np.ndarray, Any]:
        if not shard["files"]:
            empty = np.zeros((0, self.dim), np.float32) if self.kind in _FLAT_KINDS else []
            return np.zeros(0, dtype=np.int64), empty if vectors else None
        parquet = [f for f in shard["files"] if f.endswith(".parquet")]
        path = self.path / (parquet[0] if parquet else shard["files"][0])
        if not path.is_file():
            raise ValueError(f"{path}: the shard {shard['name']} that {self.path / INDEX} lists is missing; run the "
                             "job again with --resume to write it.")
        ids, data = (_read_parquet(path, self.kind, vectors) if parquet
                     else _read_npy(self.path, shard["name"], vectors))
        if len(ids) != shard["rows"]:
            raise ValueError(f"{path} holds {len(ids)} rows, {self.path / INDEX} says {shard['rows']}: the shard was "
                             "changed after it was written; delete it and run the job again with --resume.")
        return ids, data


def _read_parquet(path: Path, kind: str, vectors: bool) -> tuple[np.ndarray, Any]:
    _, pq = _pyarrow(path)
    columns = ["id"] + ([] if not vectors else ["indices", "values"] if kind == "sparse" else ["embedding"])
    table = pq.read_table(path, columns=columns)
    ids = table.column("id").to_numpy(zero_copy_only=False)
    ids = ids.astype(str) if ids.dtype == object else ids
    if not vectors:
        return ids, None
    if kind == "sparse":
        return ids, list(zip(_split(table.column("indices"), np.int32), _split(table.column("values"), np.float32)))
    column = table.column("embedding").combine_chunks()
    if kind in _FLAT_KINDS:
        return ids, column.flatten().to_numpy().astype(np.float32, copy=False).reshape(len(ids), -1)
    inner = column.flatten()
    flat = inner.flatten().to_numpy().astype(np.float32, copy=False).reshape(len(inner), -1)
    offsets = column.offsets.to_numpy()
    return ids, [flat[a:b] for a, b in itertools.pairwise(offsets)]


def _split(column: Any, dtype: Any) -> list[np.ndarray]:
    column = column.combine_chunks()
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    offsets = column.offsets.to_numpy()
    return [flat[a:b] for a, b in itertools.pairwise(offsets)]


def _read_npy(out: Path, name: str, vectors: bool) -> tuple[np.ndarray, Any]:
    ids = np.load(out / f"{name}.ids.npy", allow_pickle=False)
    return ids, (np.load(out / f"{name}.npy", allow_pickle=False) if vectors else None)


def open_store(path: str | os.PathLike, *, complete: bool = True) -> EmbeddingStore:
    """The store in directory ``path``; one that its job has not finished is refused unless ``complete=False``
    (then only its finished shards are read)."""
    meta = read_index(path)
    if complete and not meta.get("complete"):
        raise ValueError(f"{path}: the embedding job writing it has not finished ({len(meta['shards'])} shards so "
                         "far); run the same `bertkit embed` command again with --resume to complete it.")
    return EmbeddingStore(Path(path), meta)


def _pyarrow(path: Path) -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ValueError(f"{path}: Parquet shards need pyarrow: pip install 'bertkit[embed]' (or pyarrow), or "
                         "write --format npy.") from None
    return pyarrow, pyarrow.parquet
