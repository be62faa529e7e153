"""The embedding job: a corpus's input shards embedded by workers, each output shard written atomically and recorded.

:func:`embed_corpus` plans the input shards (:mod:`bertkit.embed_job.plan`), sends those not yet done to an
executor (:class:`bertkit.data.running.executor_for`: this process, a pool of ``workers`` processes each with one
model and ``cores // workers`` torch threads, or a Dask cluster), and records each finished shard in ``index.json``
(:mod:`bertkit.embed_job.store`) as it arrives. A shard counts once recorded, so a job killed at any point (SIGKILL
included) is continued by the same command with ``resume``: recorded shards are skipped, the one that was being
written is written again whole, and every id is present once. A store of another model (its fingerprint), or a
resume with another dtype, normalisation, prompt, format, column or corpus, is refused before anything is written.

With an ``id_column`` the ids are the corpus's own, so they may repeat: each worker checks its shard and writes the
sorted 64-bit hashes of its ids beside it; at the end the hashes of all shards are compared a range of hash values
at a time (memory bounded by ``HASH_BUCKET_ROWS`` hashes, not by the corpus), and a repeat is confirmed on the ids
themselves and named with both rows.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.running import RunningNote, RunWords, executor_for, run_all
from bertkit.embed_job.encoders import ModelSpec, load_encoder, model_kind
from bertkit.embed_job.plan import (
    InputShard,
    ReadOptions,
    corpus_files,
    identity,
    plan_shards,
    shard_rows_where,
    where,
)
from bertkit.embed_job.store import FORMATS, INDEX, model_fingerprint, read_index, write_index, write_shard
from bertkit.embed_job.worker import encode_shard
from bertkit.io import lock_directory, refuse_output_over_input

#: id hashes held at once by the final duplicate check
HASH_BUCKET_ROWS = 1 << 22


@dataclass(frozen=True)
class JobConfig:
    """An embedding job: ``model`` (a directory) over ``inputs`` (files, directories, globs) into the directory
    ``out``; ``read`` says which columns hold the text and the ids; ``formats`` of the shards; at most
    ``shard_rows`` rows per shard; the model's ``dtype``, ``device``, ``batch_size``, ``normalize``,
    ``prompt_name``; ``workers`` processes here, or the Dask scheduler at ``dask``; ``resume`` a job that stopped."""

    model: str
    inputs: tuple[str, ...]
    out: str
    read: ReadOptions = field(default_factory=ReadOptions)
    formats: tuple[str, ...] = ("parquet",)
    shard_rows: int = 50_000
    dtype: str = "auto"
    device: str | None = None
    batch_size: int = 32
    normalize: bool = False
    prompt_name: str | None = None
    workers: int = 1
    dask: str | None = None
    resume: bool = False
    progress: bool = True


@dataclass(frozen=True)
class ShardTask:
    """One input shard to embed into ``out`` (what a worker receives: everything it needs, picklable)."""

    shard: InputShard
    spec: ModelSpec
    read: ReadOptions
    out: str
    formats: tuple[str, ...]

    def describe(self) -> str:
        return self.shard.describe()


def embed_corpus(config: JobConfig) -> dict[str, Any]:
    """Run the job (module doc); the store's index once complete."""
    _check_config(config)
    out = Path(config.out)
    kind = model_kind(config.model)
    if "npy" in config.formats and kind not in ("dense", "static"):
        raise ValueError(f"--format npy holds one fixed-size vector per row; MODEL {config.model} is a {kind} model, "
                         "whose vectors are written as Parquet: use --format parquet.")
    model = {"path": os.path.abspath(config.model), "fingerprint": model_fingerprint(config.model), "kind": kind,
             "dtype": config.dtype, "dim": None, "normalize": config.normalize, "prompt": config.prompt_name}
    files = corpus_files(list(config.inputs))
    source = {"paths": list(config.inputs), "files": [identity(f) for f in files], **asdict(config.read),
              "shard_rows": config.shard_rows, "formats": list(config.formats)}
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(out, "embedding job")
    try:
        existing = _existing_store(out, model, source, config.resume)
        shards = list(plan_shards(files, config.shard_rows, config.read))
        done = {record["name"]: record for record in (existing or {}).get("shards", [])
                if all((out / f).is_file() for f in record["files"])}
        if existing is not None:
            model["dim"] = existing["model"].get("dim")
        _remove_temp_files(out)
        meta = {"model": model, "input": {**source, "shards": len(shards), "lines": sum(s.rows for s in shards)},
                "shards": sorted(done.values(), key=lambda r: r["name"]), "complete": False}
        todo = [s for s in shards if s.name not in done]
        if todo or not (existing or {}).get("complete"):
            write_index(out, meta)
            _run(config, meta, todo, out)
            if config.read.id_column is not None:
                check_unique_ids(out, meta["shards"], {s.name: s for s in shards}, config.read)
            meta["complete"] = True
            write_index(out, meta)
        return read_index(out)
    finally:
        os.close(lock)


def _check_config(config: JobConfig) -> None:
    if type(config.workers) is not int or config.workers < 1:
        raise ValueError(f"--workers must be a positive integer, got {config.workers!r}.")
    if type(config.shard_rows) is not int or config.shard_rows < 1:
        raise ValueError(f"--shard-rows must be a positive integer, got {config.shard_rows!r}.")
    if config.dask is not None and config.workers != 1:
        raise ValueError("--workers and --dask exclude each other: the Dask cluster's workers do the work.")
    unknown = [f for f in config.formats if f not in FORMATS]
    if unknown or not config.formats:
        raise ValueError(f"--format must be one or more of {', '.join(FORMATS)}, got {list(config.formats)}.")
    refuse_output_over_input(("-o", config.out), [("--input", list(config.inputs))], models=[("MODEL", config.model)])
    for item in config.inputs:  # a store inside the corpus would be read back as corpus files by the next run
        if os.path.isdir(item) and _inside(config.out, item):
            raise ValueError(f"-o {config.out} lies inside the input directory --input {item}: its shards would be "
                             "read as part of the corpus; choose an -o outside it.")


def _inside(path: str, directory: str) -> bool:
    real, parent = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([real, parent]) == parent


def _existing_store(out: Path, model: dict, source: dict, resume: bool) -> dict | None:
    """The index of the store already in ``out`` when it may be continued; ValueError for anything else there."""
    if not (out / INDEX).is_file():
        others = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
        if others:
            raise ValueError(f"-o {out} holds files that are not an embedding store ({', '.join(others[:3])}); "
                             "choose a new or empty directory.")
        return None
    existing = read_index(out)
    old = existing["model"]
    if old.get("fingerprint") != model["fingerprint"]:
        raise ValueError(f"-o {out} holds the embeddings of another model ({old.get('path')}, fingerprint "
                         f"{str(old.get('fingerprint'))[:12]}) than MODEL {model['path']} (fingerprint "
                         f"{model['fingerprint'][:12]}); choose another -o, or delete it to start over.")
    state = f"{len(existing['shards'])} of {existing['input'].get('shards', '?')} shards"
    if not resume:
        state += ", complete" if existing.get("complete") else ", not finished"
        raise ValueError(f"-o {out} already holds this model's embeddings ({state}); pass --resume to continue it, "
                         "or choose another -o.")
    for key, flag in (("dtype", "--dtype"), ("normalize", "--normalize"), ("prompt", "--prompt-name")):
        if old.get(key) != model[key]:
            raise ValueError(f"--resume: {out} was embedded with {flag} {old.get(key)}, this run asks {model[key]}; "
                             f"pass {flag} {old.get(key)} to continue it, or choose another -o.")
    _check_same_input(out, existing["input"], source)
    return existing


_INPUT_FLAGS = {"text_column": "--text-column", "id_column": "--id-column", "encoding": "--encoding",
                "shard_rows": "--shard-rows", "formats": "--format"}


def _check_same_input(out: Path, old: dict, new: dict) -> None:
    for key, flag in _INPUT_FLAGS.items():
        if old.get(key) != new[key]:
            raise ValueError(f"--resume: {out} was written with {flag} {old.get(key)}, this run asks {new[key]}; "
                             f"pass {flag} {old.get(key)} to continue it, or choose another -o.")
    if old.get("files") != new["files"]:
        changed = next((f"{b['path']}" for a, b in itertools.zip_longest(old.get("files") or [], new["files"],
                                                                         fillvalue={"path": "a file"}) if a != b),
                       "the file list")
        raise ValueError(f"--resume: the corpus changed since {out} was started ({changed} differs in size, time or "
                         "presence); its row ids would not match: run on the original corpus, or choose another -o.")


def _remove_temp_files(out: Path) -> None:
    """Temp files of writes a killed job left (``atomic_path``'s ``.NAME.*.tmp``) and its ``.running-*`` notes."""
    for path in itertools.chain(out.glob(".part-*.tmp"), out.glob(f".{INDEX}.*.tmp"), out.glob(".running-*")):
        path.unlink(missing_ok=True)


def _run(config: JobConfig, meta: dict, todo: list[InputShard], out: Path) -> None:
    cores = os.cpu_count() or 1
    threads = max(1, cores // config.workers) if config.dask is None and config.workers > 1 else None
    spec = ModelSpec(config.model, meta["model"]["kind"], config.dtype, config.device, config.batch_size,
                     config.normalize, config.prompt_name, threads)
    tasks = (ShardTask(shard, spec, config.read, os.fspath(out), config.formats) for shard in todo)

    def record(marker: dict) -> int:  # the parent, as each shard arrives: recorded, so a rerun skips it
        meta["shards"] = sorted([*meta["shards"], marker["record"]], key=lambda r: r["name"])
        meta["model"]["dim"] = meta["model"]["dim"] or marker["dim"]
        write_index(out, meta)
        return marker["lines"]  # the bar counts input lines / rows, blank JSON lines included

    with executor_for(config.workers, config.dask) as (executor, window):
        run_all(executor, window, embed_shard, iter(tasks), out, config.progress, "embed",
                sum(s.rows for s in todo), record, unit=" rows", words=_WORDS)


_WORDS = RunWords("the embedding job", "--shard-rows", "The shards finished so far are kept: run the same command "
                  "again with --resume to continue where it stopped.")
_LOAD_LOCK = threading.Lock()


def embed_shard(task: ShardTask) -> dict[str, Any]:
    """Embed one input shard and write its output shard (what a worker runs); its marker for :func:`run_all`."""
    shard = task.shard
    with RunningNote(Path(task.out), shard.name, shard.describe()):
        with _LOAD_LOCK:  # a Dask worker's threads share the process's one model
            encoder = load_encoder(task.spec)
        ids: list = []
        parts: list = []
        try:  # the tokenizer one chunk ahead of the model (bertkit.embed_job.worker)
            for chunk, vectors in encode_shard(encoder, shard_rows_where(shard, task.read), text=itemgetter(1)):
                ids += [row[0] for row in chunk]
                parts.append(vectors)
        except ValueError as error:
            raise ValueError(f"{shard.describe()}: {error}") from None
        vectors = _join(parts, encoder.kind, encoder.dim)
        record = write_shard(task.out, shard.name, ids, vectors, encoder.kind, task.formats)
        if task.read.id_column is not None:
            record["id_hashes"] = _write_id_hashes(task, ids)
        record["input"] = shard.describe()
        record["dtype"] = encoder.dtype
        return {"partition": shard.ordinal, "record": record, "dim": encoder.dim, "lines": shard.rows}


def _join(parts: list, kind: str, dim: int) -> Any:
    if kind in ("dense", "static"):
        return np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)
    return [row for part in parts for row in part]


# ---------------------------------------------------------------------------- duplicate ids

def id_hash(value: Any) -> int:
    """A 64-bit hash of an id (its text), the same in every process."""
    return int.from_bytes(hashlib.blake2b(str(value).encode(), digest_size=8).digest(), "little")


def _write_id_hashes(task: ShardTask, ids: list) -> str:
    """``NAME.idhash.npy``: the sorted hashes of the shard's ids, after a repeat within the shard is refused."""
    from bertkit.io import atomic_path

    hashes = np.fromiter((id_hash(i) for i in ids), dtype=np.uint64, count=len(ids))
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    for at in np.flatnonzero(hashes[1:] == hashes[:-1]):
        a, b = int(order[at]), int(order[at + 1])
        if ids[a] == ids[b]:
            where = _rows_where(task.shard, task.read, {a, b})
            raise _duplicate(task.read.id_column, ids[a], where[a], where[b])
    name = f"{task.shard.name}.idhash.npy"
    with atomic_path(Path(task.out) / name) as tmp, open(tmp, "wb") as handle:
        np.save(handle, hashes, allow_pickle=False)
    return name


def _rows_where(shard: InputShard, read: ReadOptions, positions: set[int]) -> dict[int, str]:
    """Where the shard's rows at ``positions`` (0-based, among its rows) are: ``FILE, line N`` / ``FILE, row N``."""
    return {n: f"{shard.path}, {where(shard.kind, row[2])}" for n, row in enumerate(shard_rows_where(shard, read))
            if n in positions}


def _duplicate(column: str, value: Any, first: str, second: str) -> ValueError:
    return ValueError(f"duplicate id {value!r} in --id-column {column!r}: {first} and {second}; ids must be unique "
                      "(fix the corpus, or leave --id-column out to use row positions). The shards written so far "
                      "are kept.")


def check_unique_ids(out: Path, records: list[dict], shards: dict[str, InputShard], read: ReadOptions) -> None:
    """Refuse an id present in two shards (module doc); each shard's own repeats were refused by its worker."""
    hashed = [(r, np.load(out / r["id_hashes"], mmap_mode="r")) for r in records if r.get("id_hashes")]
    total = sum(len(h) for _, h in hashed)
    bits = max(0, int(np.ceil(np.log2(max(1, total / HASH_BUCKET_ROWS)))))
    for bucket in range(1 << bits):
        low, high = bucket << (64 - bits) if bits else 0, (bucket + 1) << (64 - bits) if bits else 1 << 64
        parts, owners = [], []
        for number, (_, hashes) in enumerate(hashed):
            a, b = _bounds(hashes, low, high)
            parts.append(np.asarray(hashes[a:b]))
            owners.append(np.full(b - a, number, dtype=np.int64))
        values, owner = np.concatenate(parts or [np.zeros(0, np.uint64)]), np.concatenate(owners or [np.zeros(0)])
        order = np.argsort(values, kind="stable")
        values, owner = values[order], owner[order]
        for at in np.flatnonzero((values[1:] == values[:-1]) & (owner[1:] != owner[:-1])):
            _confirm(int(values[at]), [hashed[int(owner[at])][0], hashed[int(owner[at + 1])][0]], shards, read)


def _bounds(hashes: np.ndarray, low: int, high: int) -> tuple[int, int]:
    a = int(np.searchsorted(hashes, np.uint64(low), side="left"))
    b = len(hashes) if high >= 1 << 64 else int(np.searchsorted(hashes, np.uint64(high), side="left"))
    return a, b


def _confirm(value: int, records: list[dict], shards: dict[str, InputShard], read: ReadOptions) -> None:
    """Raise for the id whose hash is ``value`` when the two shards really hold the same id (not a collision)."""
    found: list[tuple[Any, str]] = []
    for record in records:
        shard = shards[record["name"]]
        for row_id, _, position in shard_rows_where(shard, read):
            if id_hash(row_id) == value:
                found.append((row_id, f"{shard.path}, {where(shard.kind, position)}"))
    for (a, where_a), (b, where_b) in itertools.combinations(found, 2):
        if a == b:
            raise _duplicate(read.id_column, a, where_a, where_b)
