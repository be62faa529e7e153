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

import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.blocks import (
    TOKENIZED_DIR,
    BlockJob,
    block_job,
    block_marker_name,
    document_lengths,
    has_tokenized,
    kept,
    pair_block,
    plan_blocks,
    read_marker,
    save_tokenized,
)
from bertkit.data.corpus import is_file
from bertkit.data.instances import tokenize_documents
from bertkit.data.partitions import Documents, Partition, ReadSettings, expand_inputs, plan_partitions
from bertkit.data.reading import partition_documents
from bertkit.data.running import RunningNote, executor_for, run_all
from bertkit.data.writing import FORMAT, INDEX_NAME, TOKENIZER_DIR, token_dtype
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
#: tokens per block of consecutive documents that are paired together (NSP's random B comes from the block)
PAIRING_TOKENS = 1 << 20


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
    pairing_tokens: int = PAIRING_TOKENS

    def __post_init__(self) -> None:
        if self.heldout_every is not None and (not isinstance(self.heldout_every, int) or self.heldout_every < 2):
            raise ValueError(f"heldout_every must be an integer >= 2 (or None), got {self.heldout_every!r}.")
        for name, low in (("shard_size", 1), ("max_predictions_per_seq", 1), ("partition_bytes", 1),
                          ("dupe_factor", 1), ("max_seq_length", 5),
                          ("pairing_tokens", 1)):
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

    def describe(self) -> str:
        return self.partition.describe()


def create_pretraining_data(files_or_texts: Any, tokenizer: BERTTokenizerFast | str | os.PathLike,
                            out_dir: str | os.PathLike, *, max_seq_length: int = 128, short_seq_prob: float = 0.1,
                            dupe_factor: int = 1, masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
                            whole_word: bool = False, static_masking: bool = False, seed: int = 12345,
                            shard_size: int = 100_000, format: str = "auto", encoding: str = "utf-8",
                            random_next_prob: float = 0.5, text_field: str = "text",
                            partition_bytes: int | None = None, workers: int = 1, dask: Any = None,
                            heldout_every: int | None = None, heldout: bool = False,
                            pairing_tokens: int = PAIRING_TOKENS, overwrite: bool = False,
                            progress: bool = True) -> Path:
    """Read, tokenize, pair (Google's algorithm), optionally mask, and write shards to ``out_dir``.

    ``files_or_texts``: files, directories, glob patterns, texts in memory and
    :class:`~bertkit.data.partitions.Documents` (see :func:`~bertkit.data.partitions.expand_inputs`): text
    in Google's one-sentence-per-line format, prose or paragraphs (``format``, ``encoding``; possibly
    compressed), ``.jsonl``, ``.parquet`` or ``.arrow`` (``text_field``). ``tokenizer``: a tokenizer or its
    directory. With ``static_masking`` the masks are drawn here, once per ``dupe_factor`` copy, as Google
    does; otherwise the collator masks each batch afresh and ``masked_lm_prob`` /
    ``max_predictions_per_seq`` / ``whole_word`` are recorded as its defaults. ``random_next_prob``: share
    of pairs whose B is a random other document (NSP label 1); 0 makes contiguous text, for training
    without NSP. ``partition_bytes``: input bytes per partition (memory per worker grows with it; a line
    longer than it is refused); None: :func:`default_partition_bytes` of the input's size.
    ``pairing_tokens``: tokens per block of consecutive documents, within which NSP's random B is drawn.
    ``workers``: processes on this machine (from a script, keep the call under ``if __name__ ==
    "__main__":``, as for any process pool); ``dask``: a ``dask.distributed`` scheduler address or
    ``Client`` instead, whose workers must see ``out_dir`` at the same path.
    ``heldout_every``: keep only the held-out documents (``heldout``: those whose ordinal in the corpus is a
    multiple of ``heldout_every``) or only the others, so one corpus gives a training and a held-out directory.
    The same documents, arguments and ``seed`` give byte-identical files, whatever the input format,
    ``partition_bytes``, ``workers`` or ``dask``; a run killed half-way and started again with them continues
    (see the module doc). Returns ``out_dir``.
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
                                pairing_tokens=pairing_tokens,
                                read=ReadSettings(format=format, encoding=encoding, text_field=text_field))
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}.")
    if not isinstance(tokenizer, BERTTokenizerFast):
        tokenizer = BERTTokenizerFast.from_pretrained(tokenizer)
    out = Path(out_dir)
    refuse_output_among_inputs(out, files_or_texts, sources)
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_directory(out, "data creation")  # a second run into the directory is refused at once
    try:
        claim = _claim(settings, tokenizer, sources)
        if _check_claim(out, claim, overwrite):
            return out  # complete, with these very arguments: nothing to do
        (out / INDEX_NAME).unlink(missing_ok=True)  # an old index must not describe half-rewritten shards
        for temp in [*out.glob(".*.tmp"), *out.glob(f"{TOKENIZED_DIR}/.*.tmp"), *out.glob(".running-*")]:
            temp.unlink(missing_ok=True)  # what a killed run was writing
        tokenizer.save_pretrained(out / TOKENIZER_DIR)
        digest = hashlib.sha256(json.dumps(tokenizer_fingerprint(tokenizer), sort_keys=True).encode()).hexdigest()
        _TOKENIZERS.clear()
        _TOKENIZERS[(str(out), digest)] = tokenizer  # one worker runs here: no second load
        jobs = (_job(partition, settings, digest, out) for partition in plan_partitions(
            sources, settings.partition_bytes, settings.read, max_line_bytes=settings.partition_bytes))
        if sized and total <= settings.partition_bytes:
            workers = 1  # one partition: a pool would only add its start-up (the output is the same)
        with executor_for(workers, dask) as (executor, window):
            partitions = run_all(executor, window, tokenize_partition, jobs, out, progress, "reading",
                                  total if sized else None, lambda marker: marker["bytes"], unit="B")
            atomic_write_text(out / CLAIM_NAME, json.dumps(claim, indent=2) + "\n")  # the inputs were readable
            blocks = _plan_blocks(out, partitions, settings)
            fingerprints = [m["fingerprint"] for m in partitions]
            block_jobs = (block_job(block, settings, digest, out, fingerprints) for block in blocks)
            paired = run_all(executor, window, run_block, block_jobs, out, progress, "pairing", len(blocks),
                              lambda marker: 1)
        return _write_index(out, settings, tokenizer, partitions, paired)
    finally:
        os.close(lock)


def _plan_blocks(out: Path, partitions: list[dict[str, Any]], settings: CreationSettings) -> list:
    """The blocks of the tokenized partitions (their markers ``partitions``, in order): cut by the tokens of the
    documents this run keeps (all, or one side of the held-out split)."""
    lengths = [document_lengths(out, m["partition"]) for m in partitions]
    tokens = np.concatenate([np.zeros(0, np.int64), *lengths])  # [D] tokens of every document, in corpus order
    tokens = np.where(kept(np.arange(len(tokens)), settings.heldout_every, settings.heldout), tokens, 0)
    return plan_blocks([len(x) for x in lengths], tokens, settings.pairing_tokens)


def refuse_output_among_inputs(out: Path, inputs: Any, sources: list) -> None:
    """ValueError when an input file lies inside ``out`` (the data written there would mix with the corpus) or
    ``out`` lies inside a directory given as input (or the root of a ``**`` pattern): a rerun would read the
    data written there (its tokenizer's vocab.txt, say) as corpus. Checked before anything is written."""
    target = out.resolve()
    inside = [s for s in sources if is_file(s) and Path(s).resolve().is_relative_to(target)]
    if inside:
        raise ValueError(f"the input {inside[0]} lies inside the output directory {out} (-o): the data written there "
                         "(a tokenizer's vocab.txt among it) would mix with the corpus; choose an -o outside the "
                         "inputs.")
    items = [inputs] if isinstance(inputs, (str, os.PathLike, Documents)) else list(inputs)
    roots = [Path(item) for item in items if isinstance(item, (str, os.PathLike)) and os.path.isdir(item)]
    roots += [Path(item.split("**", 1)[0] or ".") for item in items if isinstance(item, str) and "**" in item
              and "\n" not in item]
    around = [root for root in roots if target.is_relative_to(root.resolve())]
    if around:
        raise ValueError(f"the output directory {out} (-o) lies inside {os.fspath(around[0])}, a directory given as "
                         "input: a rerun would read the data written there as corpus; choose an -o outside it.")


def _job(partition: Partition, settings: CreationSettings, tokenizer_sha256: str, out: Path) -> PartitionJob:
    identity = {"read": asdict(settings.read), "tokenizer": tokenizer_sha256, "partition": partition.ordinal,
                "pieces": [piece.identity() for piece in partition.pieces],
                "partition_bytes": settings.partition_bytes}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return PartitionJob(partition, settings, str(out), digest, tokenizer_sha256)


# ---------------------------------------------------------------------------- in a worker

#: (output directory, tokenizer hash) -> the tokenizer, loaded once per worker process
_TOKENIZERS: dict[tuple[str, str], BERTTokenizerFast] = {}

#: a test's way to kill the worker process that starts this partition (SIGKILL), as the system would
KILL_PARTITION_VARIABLE = "BERTKIT_DATA_KILL_PARTITION"


def _tokenizer(out_dir: str, tokenizer_sha256: str) -> BERTTokenizerFast:
    key = (out_dir, tokenizer_sha256)
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = BERTTokenizerFast.from_pretrained(Path(out_dir) / TOKENIZER_DIR)
    return _TOKENIZERS[key]


def tokenize_partition(job: PartitionJob) -> dict[str, Any]:
    """Read and tokenize one partition into ``tokenized/``; write its marker last. Returns the marker's content."""
    started = time.time()
    out, settings, ordinal = Path(job.out_dir), job.settings, job.partition.ordinal
    finished = read_marker(out / marker_name(ordinal), job.fingerprint)
    if finished is not None and has_tokenized(out, ordinal):
        return finished
    with RunningNote(out, marker_name(ordinal), job.describe()):
        if os.environ.get(KILL_PARTITION_VARIABLE) == str(ordinal):
            os.kill(os.getpid(), signal.SIGKILL)
        tokenizer = _tokenizer(job.out_dir, job.tokenizer_sha256)
        documents = partition_documents(job.partition, settings.read, max_line_bytes=settings.partition_bytes)
        corpus = tokenize_documents(documents, tokenizer)
        save_tokenized(out, ordinal, corpus, tokenizer.vocab_size)
        marker = {"partition": ordinal, "fingerprint": job.fingerprint, "bytes": job.partition.size,
                  "num_documents": corpus.num_documents, "num_sentences": len(corpus.sentence_starts) - 1,
                  "inputs": sorted({piece.path or "documents" for piece in job.partition.pieces}),
                  # where and when it ran: for the curious (and the benchmark), not in the index
                  "host": socket.gethostname(), "pid": os.getpid(), "started": started,
                  "seconds": time.time() - started}
        atomic_write_text(out / marker_name(ordinal), json.dumps(marker) + "\n")
    return marker


def run_block(job: BlockJob) -> dict[str, Any]:
    """:func:`~bertkit.data.blocks.pair_block` with this worker's tokenizer and static masking."""
    out, settings = Path(job.out_dir), job.settings
    with RunningNote(out, block_marker_name(job.block.number), job.describe()):
        tokenizer = _tokenizer(job.out_dir, job.tokenizer_sha256)
        return pair_block(job, tokenizer, lambda seed: _static_masking(tokenizer, settings, seed)
                          if settings.static_masking else None)


def marker_name(ordinal: int) -> str:
    return f"part-{ordinal:05d}.json"


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


# ---------------------------------------------------------------------------- the directory

def _claim(settings: CreationSettings, tokenizer: BERTTokenizerFast, sources: list) -> dict[str, Any]:
    """What ``creation.json`` records: the settings, the tokenizer and the inputs."""
    return {"format": FORMAT, "settings": settings.to_dict(), "tokenizer": tokenizer_fingerprint(tokenizer),
            "inputs": [_input_identity(s) for s in sources]}


def _check_claim(out: Path, claim: dict[str, Any], overwrite: bool) -> bool:
    """Refuse a directory that another creation (other settings, tokenizer or inputs, named) owns, unless
    ``overwrite`` (which removes what it wrote). True when ``out`` is complete with this very ``claim``."""
    path = out / CLAIM_NAME
    if path.is_file() and not overwrite:
        changed = _differences(read_json_object(path, "a data creation record"), claim)
        if changed:
            raise ValueError(f"{out} holds data created with other arguments ({'; '.join(changed)}); pass the same "
                             "arguments to continue or redo it, --overwrite (Python: overwrite=True) to replace it, "
                             "or another output directory.")
        return _complete(out)
    if overwrite:
        for stale in [*out.glob("shard-*.npy"), *out.glob("part-*.json"), *out.glob("block-*.json"),
                      *out.glob(f"{TOKENIZED_DIR}/*"), out / INDEX_NAME, path]:
            stale.unlink(missing_ok=True)
    return False


def _complete(out: Path) -> bool:
    """Whether ``out`` holds an index and every shard it lists."""
    try:
        shards = read_json_object(out / INDEX_NAME, "a pretraining data index")["shards"]
    except (ValueError, KeyError, OSError):
        return False
    return all((out / f"{s['name']}.{f}.npy").is_file() for s in shards for f in ("tokens", "offsets", "nsp_labels"))


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
        gone, added = [s for s in before if s not in after], [s for s in after if s not in before]
        modified = [i["source"] for i in new["inputs"] if i["source"] in before and i not in old.get("inputs", [])]
        if gone or added:
            changed.append("other inputs (" + "; ".join(
                [f"{len(before)} then, {len(after)} now"] + ([f"no longer: {', '.join(gone[:3])}"] if gone else [])
                + ([f"new: {', '.join(added[:3])}"] if added else [])) + ")")
        if modified:
            changed.append(f"inputs changed since ({', '.join(modified[:3])})")
        if not (gone or added or modified):
            changed.append("the inputs in another order")
    return changed


def _write_index(out: Path, settings: CreationSettings, tokenizer: BERTTokenizerFast,
                 partitions: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> Path:
    documents = sum(m["num_documents"] for m in blocks)
    if documents == 0:
        (out / CLAIM_NAME).unlink(missing_ok=True)  # nothing was made: nothing for a corrected run to refuse
        raise ValueError("the corpus holds no words after tokenization (empty files, or only white space and "
                         "control characters): there is nothing to build instances from.")
    lonely = [m for m in blocks if m["num_documents"] == 1]
    if lonely:
        warnings.warn(f"{len(lonely)} block(s) of documents hold a single document (documents "
                      f"{lonely[0]['documents'][0]}-{lonely[0]['documents'][1] - 1}{', ...' if len(lonely) > 1 else ''}"
                      "), so their random-next segments (NSP label 1) come from that same document; give the corpus "
                      "more documents.", stacklevel=3)
    shards = [shard for m in blocks for shard in m["shards"]]
    index = {
        "format": FORMAT, "version": 3, "num_instances": sum(s["num_instances"] for s in shards),
        "num_documents": documents, "num_tokens": sum(s["num_tokens"] for s in shards),
        "num_partitions": len(partitions), "num_blocks": len(blocks),
        "input_bytes": sum(m["bytes"] for m in partitions),
        "max_seq_length": settings.max_seq_length, "vocab_size": tokenizer.vocab_size,
        "token_dtype": np.dtype(token_dtype(tokenizer.vocab_size)).name,
        "static_masking": settings.static_masking, "whole_word_masking": settings.whole_word,
        "masked_lm_prob": settings.masked_lm_prob, "max_predictions_per_seq": settings.max_predictions_per_seq,
        "short_seq_prob": settings.short_seq_prob, "dupe_factor": settings.dupe_factor, "seed": settings.seed,
        "random_next_prob": settings.random_next_prob, "partition_bytes": settings.partition_bytes,
        "pairing_tokens": settings.pairing_tokens,
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
                        "num_documents": m["num_documents"]} for m in partitions],
        "blocks": [{"block": m["block"], "documents": m["documents"], "num_documents": m["num_documents"],
                    "shards": [s["name"] for s in m["shards"]]} for m in blocks],
        "shards": shards,
    }
    atomic_write_text(out / INDEX_NAME, json.dumps(index, indent=2) + "\n")
    current = {s["name"] for s in shards}
    for path in out.glob("shard-*.npy"):  # shards of an earlier run in the same directory
        if path.name.split(".", 1)[0] not in current:
            path.unlink()
    for path in out.glob("part-*.json"):
        if int(path.stem.split("-")[1]) >= len(partitions):
            path.unlink()
    numbers = {m["block"] for m in blocks}
    for path in out.glob("block-*.json"):
        if int(path.stem.split("-")[1]) not in numbers:
            path.unlink()
    shutil.rmtree(out / TOKENIZED_DIR, ignore_errors=True)  # the shards hold what is needed now
    return out
