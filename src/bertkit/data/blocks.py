"""Blocks of documents by ordinal: the units that data creation pairs, masks and writes.

Data creation runs in two stages. First each partition of the corpus (:mod:`bertkit.data.partitions`:
byte ranges, row groups, files) is read and tokenized, and its :class:`~bertkit.data.instances.TokenizedCorpus`
saved under ``tokenized/`` (:func:`save_tokenized`). Then the documents of the whole corpus, numbered in corpus
order (their *ordinals*; a document that tokenizes to nothing has none), are cut into blocks by
:func:`plan_blocks`: document ``d`` belongs to block ``tokens_before(d) // pairing_tokens``, where
``tokens_before(d)`` counts the tokens of the documents before it. A block is paired (Google's algorithm,
NSP's random B drawn within the block), masked and written as its own shards by :func:`pair_block`, with a
seed of the run's seed and the block's number.

So what is written depends on the documents, their order and the settings only: not on the input
format (text, JSON lines, Parquet, Arrow hold the same documents), the partition size, the number of
workers or where they run. A held-out split (``heldout_every``) keeps the documents whose ordinal is (or is
not) a multiple of ``heldout_every`` (:func:`kept`); blocks are then cut by the tokens of the kept ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.instances import TokenizedCorpus, create_instance_spans
from bertkit.data.writing import token_dtype, write_instances
from bertkit.io import atomic_path, atomic_write_text

TOKENIZED_DIR = "tokenized"
_ARRAYS = ("tokens", "sentences", "documents")


# ---------------------------------------------------------------------------- tokenized partitions

def tokenized_path(out: Path, partition: int, array: str) -> Path:
    return out / TOKENIZED_DIR / f"part-{partition:05d}.{array}.npy"


def save_tokenized(out: Path, partition: int, corpus: TokenizedCorpus, vocab_size: int) -> None:
    """Write partition ``partition``'s tokens, sentence and document offsets (each file atomically)."""
    arrays = {"tokens": corpus.tokens.astype(token_dtype(vocab_size)), "sentences": corpus.sentence_starts,
              "documents": corpus.document_starts}
    for name, array in arrays.items():
        with atomic_path(tokenized_path(out, partition, name)) as tmp, open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def has_tokenized(out: Path, partition: int) -> bool:
    return all(tokenized_path(out, partition, name).is_file() for name in _ARRAYS)


def _load(out: Path, partition: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.load(tokenized_path(out, partition, name), mmap_mode="r") for name in _ARRAYS)


def document_lengths(out: Path, partition: int) -> np.ndarray:
    """Tokens per document of a tokenized partition, in order."""
    _, sentences, documents = _load(out, partition)
    return np.diff(np.asarray(sentences)[np.asarray(documents)])


# ---------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Block:
    """Block ``number``: the documents of ordinals ``[first, end)``, found in ``sources``, each
    ``(partition, first document, end document)`` within that partition."""

    number: int
    first: int
    end: int
    sources: tuple[tuple[int, int, int], ...]

    def describe(self) -> str:
        return f"block {self.number} (documents {self.first}-{self.end - 1})"


def plan_blocks(counts: list[int], lengths: np.ndarray, pairing_tokens: int) -> list[Block]:
    """The blocks of a corpus whose partition ``p`` holds ``counts[p]`` documents, ``lengths`` the tokens of every
    document in corpus order (see the module doc; a document a held-out split leaves out counts 0 tokens, so a
    block holds ``pairing_tokens`` of the documents kept)."""
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, np.int64)
    number = before // pairing_tokens
    starts = np.concatenate([[0], np.nonzero(np.diff(number))[0] + 1]) if len(lengths) else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])  # partition p holds ordinals bounds[p]:bounds[p + 1]
    blocks = []
    for first, end in zip(starts.tolist(), [*starts[1:].tolist(), len(lengths)]):
        sources = []
        for p in range(int(np.searchsorted(bounds, first, side="right")) - 1, len(counts)):
            if bounds[p] >= end:
                break
            lo, hi = max(first, bounds[p]), min(end, bounds[p + 1])
            if hi > lo:
                sources.append((p, int(lo - bounds[p]), int(hi - bounds[p])))
        blocks.append(Block(int(number[first]), first, end, tuple(sources)))
    return blocks


# ---------------------------------------------------------------------------- one block (in a worker)

@dataclass(frozen=True)
class BlockJob:
    """What a worker needs to pair a block: the block, the settings (a ``CreationSettings``), the output
    directory, the fingerprint of what it writes, the tokenizer's hash."""

    block: Block
    settings: Any
    out_dir: str
    fingerprint: str
    tokenizer_sha256: str

    def describe(self) -> str:
        return self.block.describe()


def block_job(block: Block, settings: Any, tokenizer_sha256: str, out: Path,
              partition_fingerprints: list[str]) -> BlockJob:
    identity = {"settings": settings.to_dict(), "tokenizer": tokenizer_sha256, "block": block.number,
                "documents": [block.first, block.end],
                "partitions": [partition_fingerprints[p] for p, _, _ in block.sources]}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return BlockJob(block, settings, str(out), digest, tokenizer_sha256)


def block_marker_name(number: int) -> str:
    return f"block-{number:05d}.json"


def pair_block(job: BlockJob, tokenizer, mask_factory) -> dict[str, Any]:
    """Pair, mask (``mask_factory(seed)`` or None) and write one block; its marker last. Returns the marker."""
    started = time.time()
    out, settings, block = Path(job.out_dir), job.settings, job.block
    finished = read_marker(out / block_marker_name(block.number), job.fingerprint)
    if finished is not None:
        return finished
    corpus = _select(_block_corpus(out, block), block.first, settings.heldout_every, settings.heldout)
    seed = partition_seed(settings.seed, block.number)
    shards = []
    if corpus.num_documents:
        with warnings.catch_warnings():  # a single-document block: said once by the creating process
            warnings.simplefilter("ignore")
            spans = create_instance_spans(corpus, max_seq_length=settings.max_seq_length,
                                          short_seq_prob=settings.short_seq_prob, dupe_factor=settings.dupe_factor,
                                          seed=seed, random_next_prob=settings.random_next_prob)
        mask = mask_factory(seed)
        for k, lo in enumerate(range(0, len(spans), settings.shard_size)):
            shards.append(write_instances(
                out, f"shard-{block.number:05d}-{k:03d}", corpus, spans.take(slice(lo, lo + settings.shard_size)),
                cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                vocab_size=tokenizer.vocab_size, max_seq_length=settings.max_seq_length, mask=mask))
    marker = {"block": block.number, "fingerprint": job.fingerprint, "documents": [block.first, block.end],
              "num_documents": corpus.num_documents, "shards": shards,
              "host": socket.gethostname(), "pid": os.getpid(), "started": started, "seconds": time.time() - started}
    atomic_write_text(out / block_marker_name(block.number), json.dumps(marker) + "\n")
    return marker


def _block_corpus(out: Path, block: Block) -> TokenizedCorpus:
    """The block's documents, copied out of the tokenized partitions that hold them."""
    tokens, sentences, documents = [], [np.zeros(1, np.int64)], [np.zeros(1, np.int64)]
    for partition, lo, hi in block.sources:
        part_tokens, part_sentences, part_documents = _load(out, partition)
        s0, s1 = int(part_documents[lo]), int(part_documents[hi])
        t0, t1 = int(part_sentences[s0]), int(part_sentences[s1])
        documents.append(np.asarray(part_documents[lo + 1:hi + 1]) - s0 + documents[-1][-1])
        sentences.append(np.asarray(part_sentences[s0 + 1:s1 + 1]) - t0 + sentences[-1][-1])
        tokens.append(np.asarray(part_tokens[t0:t1], dtype=np.int32))
    return TokenizedCorpus(np.concatenate([np.zeros(0, np.int32), *tokens]), np.concatenate(sentences),
                           np.concatenate(documents))


def kept(ordinals: np.ndarray, every: int | None, heldout: bool) -> np.ndarray:
    """Which of the documents ``ordinals`` a run keeps: all without ``every``; else those whose ordinal is a
    multiple of ``every`` (the held-out ones) with ``heldout``, the others without."""
    if every is None:
        return np.ones(len(ordinals), bool)
    return (ordinals % every == 0) == heldout


def _select(corpus: TokenizedCorpus, first: int, every: int | None, heldout: bool) -> TokenizedCorpus:
    """The documents of ``corpus`` (ordinals from ``first``) whose ordinal is a multiple of ``every``
    (``heldout``) or is not; all of them when ``every`` is None."""
    if every is None:
        return corpus
    keep = kept(np.arange(first, first + corpus.num_documents), every, heldout)  # [D]
    sentences_per_document = np.diff(corpus.document_starts)
    keep_sentence = np.repeat(keep, sentences_per_document)  # [S]
    sentence_lengths = np.diff(corpus.sentence_starts)
    keep_token = np.repeat(keep_sentence, sentence_lengths)  # [T]
    return TokenizedCorpus(corpus.tokens[keep_token],
                           np.concatenate([[0], np.cumsum(sentence_lengths[keep_sentence])]).astype(np.int64),
                           np.concatenate([[0], np.cumsum(sentences_per_document[keep])]).astype(np.int64))


def partition_seed(seed: int, ordinal: int) -> int:
    """The seed of block (or partition) ``ordinal``: a function of the run's seed and the ordinal only."""
    return int(np.random.SeedSequence([seed, ordinal]).generate_state(1, np.uint32)[0])


def read_marker(path: Path, fingerprint: str) -> dict[str, Any] | None:
    """The marker at ``path`` if it was written with ``fingerprint`` and its shards are all there, else None."""
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if marker.get("fingerprint") != fingerprint:
        return None
    for shard in marker.get("shards", []):
        if not all((path.parent / f"{shard['name']}.{f}.npy").is_file() for f in ("tokens", "offsets", "nsp_labels")):
            return None
    return marker
