"""Creating pretraining data: partitions of the corpus, each tokenized, paired, masked and written on its own.

:func:`create_pretraining_data` plans the corpus into partitions (:mod:`bertkit.data.partitions`) and
runs :func:`build_partition` on each: in this process (``workers=1``), in a pool of ``workers``
processes, or on a Dask cluster (``dask=ADDRESS``). A partition is read, tokenized, paired by
Google's algorithm (NSP's random B drawn within the partition, as Google's per-file runs do) and
written as its own shard(s) before the next is held, so memory is set by the partition size and
the number of workers, not by the corpus. A partition's seed comes from the run's seed and the
partition's ordinal, so the shards do not depend on the number of workers nor on where they ran.

Each finished partition leaves a marker (``part-NNNNN.json``, written after its shards) holding its
fingerprint: a killed run, run again with the same arguments, skips what is finished and never uses
a half-written shard (shards are renamed into place whole). ``creation.json`` records the settings
when a run starts: another run into the directory with other settings, tokenizer or inputs is refused,
naming what changed, unless ``overwrite``. ``index.json`` is written last: its presence means the
directory is complete.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import logging
import os
import socket
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.corpus import is_file
from bertkit.data.instances import create_instance_spans, tokenize_documents
from bertkit.data.partitions import Documents, Partition, ReadSettings, expand_inputs, plan_partitions
from bertkit.data.reading import partition_documents, select_documents
from bertkit.data.writing import FORMAT, INDEX_NAME, TOKENIZER_DIR, token_dtype, write_instances
from bertkit.io import atomic_write_text, lock_directory, read_json_object
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.files import tokenizer_fingerprint

logger = logging.getLogger("bertkit.data")

CLAIM_NAME = "creation.json"
#: the largest default partition (input bytes): a worker holds about 5 bytes per byte of its partition's text,
#: besides its ~130 MB of code and tokenizer
PARTITION_BYTES = 8 << 20
#: a smaller corpus gets partitions of a sixteenth of its size (no less than this), so every worker gets work
MIN_PARTITION_BYTES = 1 << 20


def default_partition_bytes(input_bytes: int | None) -> int:
    """Partition size for a corpus of ``input_bytes`` (None: unknown, a stream): a sixteenth of it, within
    [:data:`MIN_PARTITION_BYTES`, :data:`PARTITION_BYTES`]. A function of the input alone, never of the workers."""
    if input_bytes is None:
        return PARTITION_BYTES
    return min(PARTITION_BYTES, max(MIN_PARTITION_BYTES, input_bytes // 16))


@dataclass(frozen=True)
class CreationSettings:
    """Everything that decides the bytes written (the number of workers and where they run do not)."""

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    dupe_factor: int = 1
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word: bool = False
    static_masking: bool = False
    seed: int = 12345
    shard_size: int = 100_000
    random_next_prob: float = 0.5
    partition_bytes: int = PARTITION_BYTES
    read: ReadSettings = field(default_factory=ReadSettings)
    heldout_every: int | None = None
    heldout: bool = False

    def __post_init__(self) -> None:
        if self.heldout_every is not None and (not isinstance(self.heldout_every, int) or self.heldout_every < 2):
            raise ValueError(f"heldout_every must be an integer >= 2 (or None), got {self.heldout_every!r}.")
        for name, low in (("shard_size", 1), ("max_predictions_per_seq", 1), ("partition_bytes", 1),
                          ("dupe_factor", 1), ("max_seq_length", 5)):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {getattr(self, name)!r}.")
        for name in ("short_seq_prob", "masked_lm_prob", "random_next_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PartitionJob:
    """What a worker needs: the partition, the settings, the output directory (shared by all workers)."""

    partition: Partition
    settings: CreationSettings
    out_dir: str
    fingerprint: str
    tokenizer_sha256: str  # of the tokenizer's fingerprint: a long-lived (Dask) worker reloads another one


def create_pretraining_data(files_or_texts: Any, tokenizer: BERTTokenizerFast | str | os.PathLike,
                            out_dir: str | os.PathLike, *, max_seq_length: int = 128, short_seq_prob: float = 0.1,
                            dupe_factor: int = 1, masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
                            whole_word: bool = False, static_masking: bool = False, seed: int = 12345,
                            shard_size: int = 100_000, format: str = "auto", encoding: str = "utf-8",
                            random_next_prob: float = 0.5, text_field: str = "text",
                            partition_bytes: int | None = None, workers: int = 1, dask: Any = None,
                            heldout_every: int | None = None, heldout: bool = False,
                            overwrite: bool = False, progress: bool = True) -> Path:
    """Read, tokenize, pair (Google's algorithm), optionally mask, and write shards to ``out_dir``.

    ``files_or_texts``: files, directories, glob patterns, texts in memory and
    :class:`~bertkit.data.partitions.Documents` (see :func:`~bertkit.data.partitions.expand_inputs`): text
    in Google's one-sentence-per-line format, prose or paragraphs (``format``, ``encoding``; possibly
    compressed), ``.jsonl``, ``.parquet`` or ``.arrow`` (``text_field``). ``tokenizer``: a tokenizer or its
    directory. With ``static_masking`` the masks are drawn here, once per ``dupe_factor`` copy, as Google
    does; otherwise the collator masks each batch afresh and ``masked_lm_prob`` /
    ``max_predictions_per_seq`` / ``whole_word`` are recorded as its defaults. ``random_next_prob``: share
    of pairs whose B is a random other document (NSP label 1); 0 makes contiguous text, for training
    without NSP. ``partition_bytes``: input bytes per partition (memory per worker grows with it; the
    pairing sees one partition at a time); None: :func:`default_partition_bytes` of the input's size.
    ``workers``: processes on this machine (from a script, keep the call under ``if __name__ ==
    "__main__":``, as for any process pool); ``dask``: a ``dask.distributed`` scheduler address or
    ``Client`` instead, whose workers must see ``out_dir`` at the same path.
    ``heldout_every``: keep only the held-out documents (``heldout``: every ``heldout_every``-th of each
    partition, its 0th first) or only the others, so one corpus gives a training and a held-out directory.
    The same arguments and ``seed`` give byte-identical files, whatever ``workers`` or ``dask``; a run
    killed half-way and started again with them continues (see the module doc). Returns ``out_dir``.
    """
    sources = expand_inputs(files_or_texts)
    total = sum(os.path.getsize(s) for s in sources if is_file(s))
    sized = all(is_file(s) for s in sources)
    if partition_bytes is None:
        partition_bytes = default_partition_bytes(total if sized else None)
    settings = CreationSettings(max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, dupe_factor=dupe_factor,
                                masked_lm_prob=masked_lm_prob, max_predictions_per_seq=max_predictions_per_seq,
                                whole_word=whole_word, static_masking=static_masking, seed=seed,
                                shard_size=shard_size, random_next_prob=random_next_prob,
                                partition_bytes=partition_bytes, heldout_every=heldout_every, heldout=heldout,
                                read=ReadSettings(format=format, encoding=encoding, text_field=text_field))
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}.")
    if not isinstance(tokenizer, BERTTokenizerFast):
        tokenizer = BERTTokenizerFast.from_pretrained(tokenizer)
    out = Path(out_dir)
    inside = [s for s in sources if is_file(s) and Path(s).resolve().is_relative_to(out.resolve())]
    if inside:
        raise ValueError(f"the input {inside[0]} lies inside the output directory {out} (-o): the data written there "
                         "(a tokenizer's vocab.txt among it) would mix with the corpus; choose an -o outside the "
                         "inputs.")
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(out, "data creation")  # a second run into the directory is refused at once
    try:
        _claim(out, settings, tokenizer, sources, overwrite)
        (out / INDEX_NAME).unlink(missing_ok=True)  # an old index must not describe half-rewritten shards
        for temp in out.glob(".*.tmp"):  # what a killed run was writing
            temp.unlink()
        tokenizer.save_pretrained(out / TOKENIZER_DIR)
        digest = hashlib.sha256(json.dumps(tokenizer_fingerprint(tokenizer), sort_keys=True).encode()).hexdigest()
        _TOKENIZERS.clear()
        _TOKENIZERS[(str(out), digest)] = tokenizer  # one worker runs here: no second load
        jobs = (_job(partition, settings, digest, out) for partition in plan_partitions(
            sources, settings.partition_bytes, settings.read))
        if sized and total <= settings.partition_bytes:
            workers = 1  # one partition: a pool would only add its start-up (the output is the same)
        results = _run_all(jobs, workers, dask, total if sized else None, progress)
        return _write_index(out, settings, tokenizer, results)
    finally:
        os.close(lock)



def _job(partition: Partition, settings: CreationSettings, tokenizer_sha256: str, out: Path) -> PartitionJob:
    identity = {"settings": settings.to_dict(), "tokenizer": tokenizer_sha256, "partition": partition.ordinal,
                "pieces": [piece.identity() for piece in partition.pieces]}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return PartitionJob(partition, settings, str(out), digest, tokenizer_sha256)


# ---------------------------------------------------------------------------- one partition (in a worker)

#: (output directory, tokenizer hash) -> the tokenizer, loaded once per worker process
_TOKENIZERS: dict[tuple[str, str], BERTTokenizerFast] = {}


def build_partition(job: PartitionJob) -> dict[str, Any]:
    """Read, tokenize, pair and write one partition; write its marker last. Returns the marker's content."""
    started = time.time()
    out, settings, ordinal = Path(job.out_dir), job.settings, job.partition.ordinal
    finished = finished_partition(out, ordinal, job.fingerprint)
    if finished is not None:
        return finished
    key = (job.out_dir, job.tokenizer_sha256)
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = BERTTokenizerFast.from_pretrained(out / TOKENIZER_DIR)
    tokenizer = _TOKENIZERS[key]
    documents = select_documents(partition_documents(job.partition, settings.read), settings.heldout_every,
                                 settings.heldout)
    corpus = tokenize_documents(documents, tokenizer)
    seed = partition_seed(settings.seed, ordinal)
    shards = []
    if corpus.num_documents:
        with warnings.catch_warnings():  # a single-document partition: said once by the creating process
            warnings.simplefilter("ignore")
            spans = create_instance_spans(corpus, max_seq_length=settings.max_seq_length,
                                          short_seq_prob=settings.short_seq_prob, dupe_factor=settings.dupe_factor,
                                          seed=seed, random_next_prob=settings.random_next_prob)
        mask = _static_masking(tokenizer, settings, seed) if settings.static_masking else None
        for k, lo in enumerate(range(0, len(spans), settings.shard_size)):
            shards.append(write_instances(
                out, f"shard-{ordinal:05d}-{k:03d}", corpus, spans.take(slice(lo, lo + settings.shard_size)),
                cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                vocab_size=tokenizer.vocab_size, max_seq_length=settings.max_seq_length, mask=mask))
    marker = {"partition": ordinal, "fingerprint": job.fingerprint, "bytes": job.partition.size,
              "num_documents": corpus.num_documents, "num_sentences": len(corpus.sentence_starts) - 1,
              "inputs": sorted({piece.path or "documents" for piece in job.partition.pieces}), "shards": shards,
              # where and when it ran: for the curious (and the benchmark), not in the index
              "host": socket.gethostname(), "pid": os.getpid(), "started": started, "seconds": time.time() - started}
    atomic_write_text(out / marker_name(ordinal), json.dumps(marker) + "\n")
    return marker


def partition_seed(seed: int, ordinal: int) -> int:
    """The seed of partition ``ordinal``: a function of the run's seed and the ordinal only."""
    return int(np.random.SeedSequence([seed, ordinal]).generate_state(1, np.uint32)[0])


def marker_name(ordinal: int) -> str:
    return f"part-{ordinal:05d}.json"


def finished_partition(out: Path, ordinal: int, fingerprint: str) -> dict[str, Any] | None:
    """The marker of partition ``ordinal`` if it was finished with ``fingerprint`` and its shards are all there."""
    path = out / marker_name(ordinal)
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if marker.get("fingerprint") != fingerprint:
        return None
    for shard in marker["shards"]:
        if not all((out / f"{shard['name']}.{f}.npy").is_file() for f in ("tokens", "offsets", "nsp_labels")):
            return None
    return marker


def _static_masking(tokenizer: BERTTokenizerFast, settings: CreationSettings, seed: int):
    import torch

    from bertkit.data.instances import mask_statically
    from bertkit.masking import continuation_table

    continuation = continuation_table(tokenizer.vocab) if settings.whole_word else None
    generator = torch.Generator().manual_seed(seed)

    def mask(batch):
        return mask_statically(batch, vocab_size=tokenizer.vocab_size, mask_token_id=tokenizer.mask_token_id,
                               special_token_ids=tokenizer.all_special_ids, masked_lm_prob=settings.masked_lm_prob,
                               max_predictions_per_seq=settings.max_predictions_per_seq,
                               continuation=continuation, generator=generator)
    return mask


# ---------------------------------------------------------------------------- running the partitions

def _run_all(jobs: Iterator[PartitionJob], workers: int, dask: Any, total: int | None,
             progress: bool) -> list[dict[str, Any]]:
    """Every job's marker, in partition order; at most a few partitions are held (planned, queued) at once."""
    from tqdm.auto import tqdm

    results: dict[int, dict[str, Any]] = {}
    with _executor(workers, dask) as (executor, window), tqdm(
            total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="creating data",
            disable=not progress) as bar:
        pending: set[cf.Future] = set()
        documents = 0

        def collect(done: Iterable[cf.Future]) -> None:
            nonlocal documents
            for future in done:
                marker = future.result()  # a worker's error is raised here, with its message
                results[marker["partition"]] = marker
                documents += marker["num_documents"]
                bar.update(marker["bytes"])
                bar.set_postfix(partitions=len(results), documents=documents, refresh=False)
        for job in jobs:
            pending.add(executor.submit(build_partition, job))
            if len(pending) >= window:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                collect(done)
        collect(cf.as_completed(pending))
    return [results[k] for k in sorted(results)]


class _Inline(cf.Executor):
    """Runs each job at once, in this process (one worker)."""

    def submit(self, fn, /, *args, **kwargs) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # delivered by future.result(), as a pool would
            future.set_exception(error)
        return future


class _executor:
    """``(executor, window)``: where partitions run and how many may be queued at once."""

    def __init__(self, workers: int, dask: Any):
        self.workers, self.dask = workers, dask
        self._close: list = []

    def __enter__(self) -> tuple[cf.Executor, int]:
        if self.dask is not None:
            client = _dask_client(self.dask)
            if client is not self.dask:
                self._close.append(client)
            threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
            return client.get_executor(pure=False), 2 * max(1, threads)
        if self.workers == 1:
            return _Inline(), 1
        import multiprocessing

        pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_worker_setup)
        self._close.append(pool)
        return pool, 2 * self.workers

    def __exit__(self, kind, error, traceback) -> None:
        for resource in self._close:
            if isinstance(resource, cf.Executor):
                resource.shutdown(wait=error is None, cancel_futures=True)
            else:
                resource.close()


def _worker_setup() -> None:
    """A pool worker tokenizes on its one core: the pool, not the tokenizer, spreads work over the cores."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _dask_client(dask: Any):
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("dask= (--dask) needs dask.distributed: pip install 'bertkit[dask]'.") from None
    if isinstance(dask, Client):
        return dask
    _probe_scheduler(str(dask), DASK_TIMEOUT)
    try:
        return Client(dask, timeout=DASK_TIMEOUT)
    except (OSError, ValueError) as error:
        raise _unreachable(dask, error) from None


#: seconds to connect to a Dask scheduler and to hear its answer to a first question
DASK_TIMEOUT = 10.0


def _probe_scheduler(address: str, timeout: float) -> None:
    """Ask ``address`` who it is, each step bounded by ``timeout`` seconds; ValueError naming ``--dask`` and the
    address unless a Dask scheduler answers. (A Client on a service that never answers waits forever, and one on
    an HTTP server reads its reply as a frame length: "Unable to allocate 3.07 EiB".)"""
    import asyncio

    from distributed.comm import connect

    async def identity() -> Any:
        comm = await asyncio.wait_for(connect(address, timeout=timeout), timeout)
        try:
            await comm.write({"op": "identity"})
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    try:
        answer = asyncio.run(identity())
    except (asyncio.TimeoutError, TimeoutError):
        raise _unreachable(address, f"no answer within {timeout:g} s") from None
    except Exception as error:  # OSError, a malformed frame (MemoryError, ValueError), a bad address
        raise _unreachable(address, f"{type(error).__name__}: {error}") from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        raise _unreachable(address, "what answers there is not a Dask scheduler")


def _unreachable(address: Any, why: Any) -> ValueError:
    return ValueError(f"--dask {address}: cannot reach a Dask scheduler there ({why}). Start one with `dask "
                      "scheduler` and workers with `dask worker ADDRESS`, and pass its tcp://HOST:8786.")


# ---------------------------------------------------------------------------- the directory

def _claim(out: Path, settings: CreationSettings, tokenizer: BERTTokenizerFast, sources: list,
           overwrite: bool) -> None:
    """Record this run's settings in ``creation.json``; refuse a directory that another creation (other settings,
    tokenizer or inputs) owns, unless ``overwrite`` (which removes its shards and markers first)."""
    claim = {"format": FORMAT, "settings": settings.to_dict(), "tokenizer": tokenizer_fingerprint(tokenizer),
             "inputs": [_input_identity(s) for s in sources]}
    path = out / CLAIM_NAME
    if path.is_file() and not overwrite:
        old = read_json_object(path, "a data creation record")
        changed = _differences(old, claim)
        if changed:
            raise ValueError(f"{out} holds data created with other arguments ({'; '.join(changed)}); pass the same "
                             "arguments to continue or redo it, --overwrite (Python: overwrite=True) to replace it, "
                             "or another output directory.")
    if overwrite:
        for stale in [*out.glob("shard-*.npy"), *out.glob("part-*.json"), out / INDEX_NAME]:
            stale.unlink(missing_ok=True)
    atomic_write_text(path, json.dumps(claim, indent=2) + "\n")


def _input_identity(source: Any) -> dict[str, Any]:
    """``{"source": name, ...}``: a file's path, size and modification time; a text's hash; Documents' name."""
    if isinstance(source, Documents):
        return {"source": source.name}
    if not is_file(source):
        return {"source": "text in memory", "sha256": hashlib.sha256(source.encode()).hexdigest()}
    stat = os.stat(source)
    return {"source": os.path.abspath(source), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changed = [f"{key} {old['settings'].get(key)!r} then, {value!r} now" for key, value in new["settings"].items()
               if old.get("settings", {}).get(key) != value]
    if old.get("tokenizer") != new["tokenizer"]:
        changed.append("another tokenizer")
    if old.get("inputs") != new["inputs"]:
        before = [i.get("source") for i in old.get("inputs", [])]
        after = [i["source"] for i in new["inputs"]]
        modified = [i["source"] for i in new["inputs"] if i not in old.get("inputs", [])]
        changed.append(f"other inputs ({len(before)} then, {len(after)} now)" if before != after else
                       f"inputs changed since ({', '.join(modified[:3])})")
    return changed


def _write_index(out: Path, settings: CreationSettings, tokenizer: BERTTokenizerFast,
                 markers: list[dict[str, Any]]) -> Path:
    documents = sum(m["num_documents"] for m in markers)
    if documents == 0:
        raise ValueError("the corpus holds no words after tokenization (empty files, or only white space and "
                         "control characters): there is nothing to build instances from.")
    lonely = [m for m in markers if m["num_documents"] == 1]
    if lonely:
        warnings.warn(f"{len(lonely)} partition(s) hold a single document ({', '.join(lonely[0]['inputs'])}"
                      f"{', ...' if len(lonely) > 1 else ''}), so their random-next segments (NSP label 1) come "
                      "from that same document; give them several documents.", stacklevel=3)
    shards = [shard for m in markers for shard in m["shards"]]
    index = {
        "format": FORMAT, "version": 2, "num_instances": sum(s["num_instances"] for s in shards),
        "num_documents": documents, "num_tokens": sum(s["num_tokens"] for s in shards),
        "num_partitions": len(markers), "input_bytes": sum(m["bytes"] for m in markers),
        "max_seq_length": settings.max_seq_length, "vocab_size": tokenizer.vocab_size,
        "token_dtype": np.dtype(token_dtype(tokenizer.vocab_size)).name,
        "static_masking": settings.static_masking, "whole_word_masking": settings.whole_word,
        "masked_lm_prob": settings.masked_lm_prob, "max_predictions_per_seq": settings.max_predictions_per_seq,
        "short_seq_prob": settings.short_seq_prob, "dupe_factor": settings.dupe_factor, "seed": settings.seed,
        "random_next_prob": settings.random_next_prob, "partition_bytes": settings.partition_bytes,
        "heldout_every": settings.heldout_every, "heldout": settings.heldout,
        "read": asdict(settings.read),
        "tokenizer": {"dir": TOKENIZER_DIR, "do_lower_case": tokenizer.do_lower_case,
                      "strip_accents": tokenizer.strip_accents,
                      "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars,
                      "special_tokens": dict(tokenizer.special_tokens),
                      "special_token_ids": {name: tokenizer.vocab[token]
                                            for name, token in tokenizer.special_tokens.items()}},
        "inputs": read_json_object(out / CLAIM_NAME)["inputs"],
        "partitions": [{"partition": m["partition"], "inputs": m["inputs"], "bytes": m["bytes"],
                        "num_documents": m["num_documents"], "shards": [s["name"] for s in m["shards"]]}
                       for m in markers],
        "shards": shards,
    }
    atomic_write_text(out / INDEX_NAME, json.dumps(index, indent=2) + "\n")
    current = {s["name"] for s in shards}
    for path in out.glob("shard-*.npy"):  # shards of an earlier, larger run in the same directory
        if path.name.split(".", 1)[0] not in current:
            path.unlink()
    for path in out.glob("part-*.json"):
        if int(path.stem.split("-")[1]) >= len(markers):
            path.unlink()
    return out
