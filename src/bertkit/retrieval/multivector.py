"""An exact multi-vector (late-interaction) index: each document's token vectors ``[n_i, d]`` on disk, searched by
MaxSim (a query's score for a document is the sum, over the query's token vectors, of their best dot product with
one of the document's), exactly, in bounded memory.

The index holds ``vectors.npy`` ``[T, d]`` (float16 or float32, every document's tokens one after the other) and
``offsets.npy`` ``[N + 1]`` (document ``i``'s tokens are ``offsets[i]:offsets[i + 1]``), ids as the sparse index
keeps them, and a manifest written last (:mod:`bertkit.retrieval.index_files`). :class:`MultiVectorIndexWriter`
builds one from documents added in chunks, holding at most ``max_tokens`` token vectors before it writes a segment;
an interrupted build resumes after its last flush. :meth:`MultiVectorIndex.search` scores a batch of queries against
the documents a slice at a time, keeping each query's best ``k``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.retrieval.index_files import (
    ID_FILES,
    IdTable,
    commit_replace,
    file_record,
    load_files,
    merge_ids,
    read_manifest,
    write_atomically,
    write_ids,
)

FORMAT = "bertkit-multivector-index"
VERSION = 1
MANIFEST = "manifest.json"
PROGRESS = "progress.json"  # in segments/: how far an unfinished build got
STAGING = "append"  # in an index: the exact index of the documents an unfinished append adds (a resumable build)
DTYPES = {"float16": np.float16, "float32": np.float32}

#: token vectors of several texts: a sequence of ``[n_i, d]`` arrays or tensors, or one ``[B, n, d]`` tensor
TokenVectors = Any


def as_token_arrays(texts: TokenVectors, dim: int, what: str) -> list[np.ndarray]:
    """``texts`` (see :data:`TokenVectors`) as float32 ``[n_i, dim]`` arrays; ``ValueError`` naming ``what`` for another
    width, a text of no tokens, or a value that is NaN or infinite."""
    arrays = []
    for i, text in enumerate(texts):
        array = np.asarray(text, dtype=np.float32) if isinstance(text, np.ndarray) else \
            np.asarray(torch.as_tensor(text).detach().to(torch.float32).cpu())  # (a read-only array stays numpy)
        if array.ndim != 2 or array.shape[1] != dim:
            raise ValueError(f"{what}[{i}]: expected token vectors [n, {dim}] (the index's dimension), got shape "
                             f"{array.shape}; encode with the model the index was built for.")
        if array.shape[0] == 0:
            raise ValueError(f"{what}[{i}] has no token vectors (e.g. a document of only skiplist tokens); drop it "
                             f"or give it at least one token.")
        if not np.isfinite(array).all():
            raise ValueError(f"{what}[{i}] holds NaN or infinity; an index needs finite vectors.")
        arrays.append(array)
    return arrays


class MultiVectorIndexWriter:
    """Builds a :class:`MultiVectorIndex` in ``directory`` (new or empty) from documents' token vectors added in chunks.

    ``dim`` is the vectors' width, ``model`` names what made them (searches check it), ``dtype`` how they are stored
    (``"float16"``: half the bytes; ``"float32"``). At most ``max_tokens`` token vectors are buffered before a segment
    is written; ``resume=True`` continues an unfinished build after its last flush (``documents`` says how many it
    holds), given the same ``dim``, ``model``, ``dtype`` and ``info``."""

    def __init__(self, directory: str | os.PathLike, dim: int, model: str, *, dtype: str = "float16",
                 max_tokens: int = 1_000_000, resume: bool = False, info: dict[str, Any] | None = None):
        if dim < 1 or max_tokens < 1:
            raise ValueError(f"dim and max_tokens must be at least 1, got {dim} and {max_tokens}.")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}.")
        self.directory = Path(directory)
        self.segments = self.directory / "segments"
        self.dim, self.model, self.dtype, self.max_tokens = dim, model, dtype, max_tokens
        self.info = json.loads(json.dumps(info or {}))  # as it reads back from progress.json
        self.documents, self.with_ids, self._segment_count = 0, None, 0
        self._buffer: list[np.ndarray] = []
        self._ids: list[str] = []
        if resume and (self.segments / PROGRESS).is_file():
            self._resume()
        elif self.directory.exists() and any(self.directory.iterdir()):
            unfinished = (self.segments / PROGRESS).is_file()
            hint = " (an unfinished build: pass resume=True to continue it)" if unfinished else ""
            raise ValueError(f"index directory {str(self.directory)!r} is not empty{hint}; pass a new or empty "
                             f"directory.")
        self.segments.mkdir(parents=True, exist_ok=True)
        if not (self.segments / PROGRESS).is_file():
            self.flush()  # a build killed before its first segment resumes from nothing, not "not empty"

    def _settings(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "dim": self.dim, "model": self.model, "dtype": self.dtype,
                "info": self.info}

    def _resume(self) -> None:
        path = self.segments / PROGRESS
        try:
            progress = json.loads(path.read_text())
            documents, segments, with_ids = int(progress["documents"]), int(progress["segments"]), progress["ids"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{str(path)!r} is corrupted ({error}); start the build again in a new directory.") \
                from None
        recorded = {key: progress.get(key) for key in self._settings()}
        if recorded != self._settings():
            raise ValueError(f"the unfinished build in {str(self.directory)!r} was started with {recorded}, not "
                             f"{self._settings()}; resume it with the same settings or pass a new directory.")
        self.documents, self._segment_count, self.with_ids = documents, segments, with_ids
        for file in self.segments.iterdir():
            number = file.name.split(".")[0]
            if number.isdigit() and int(number) >= self._segment_count:  # written after the last record
                file.unlink()

    def add(self, documents: TokenVectors, ids: Sequence[str] | None = None) -> range:
        """Adds ``documents`` (see :data:`TokenVectors`), with their ``ids`` if given (in every call or in none);
        returns their positions in the index."""
        arrays = as_token_arrays(documents, self.dim, "documents")
        if self.with_ids is None:
            self.with_ids = ids is not None
        if (ids is not None) != self.with_ids:
            raise ValueError(f"add(ids=...): the documents added before came {'with' if self.with_ids else 'without'} "
                             f"ids; give ids in every call or in none.")
        if ids is not None:
            if len(ids) != len(arrays):
                raise ValueError(f"add(ids=...): {len(ids)} ids for {len(arrays)} documents; give one id per document.")
            self._ids.extend(str(doc_id) for doc_id in ids)
        self._buffer.extend(array.astype(DTYPES[self.dtype]) for array in arrays)
        start, self.documents = self.documents, self.documents + len(arrays)
        if sum(len(array) for array in self._buffer) >= self.max_tokens:
            self.flush()
        return range(start, self.documents)

    def flush(self) -> None:
        """Writes the buffered documents as a segment (their vectors and lengths) and records the progress."""
        if self._buffer:
            name = self.segments / f"{self._segment_count:06d}"
            np.save(f"{name}.vectors.npy", np.concatenate(self._buffer))
            np.save(f"{name}.lengths.npy", np.array([len(array) for array in self._buffer], dtype=np.int64))
            if self.with_ids:
                write_ids(str(name), self._ids)
            self._buffer, self._ids = [], []
            self._segment_count += 1
        progress = {**self._settings(), "documents": self.documents, "segments": self._segment_count,
                    "ids": self.with_ids}
        write_atomically(self.segments / PROGRESS, json.dumps(progress) + "\n")

    def finish(self) -> MultiVectorIndex:
        """Concatenates the segments into the index, writes the manifest last and returns the index, loaded.
        ``ValueError`` if no document was added."""
        if self.documents == 0:
            raise ValueError("the corpus is empty: a multi-vector index needs at least one document.")
        self.flush()
        names = [self.segments / f"{i:06d}" for i in range(self._segment_count)]
        lengths = np.concatenate([np.load(f"{name}.lengths.npy") for name in names])
        offsets = np.zeros(self.documents + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        vectors = np.lib.format.open_memmap(self.directory / "vectors.npy.tmp", "w+", DTYPES[self.dtype],
                                            (int(offsets[-1]), self.dim))
        done = 0
        for name in names:  # one segment in memory at a time
            part = np.load(f"{name}.vectors.npy", mmap_mode="r")
            vectors[done:done + len(part)] = part
            done += len(part)
        vectors.flush()
        del vectors
        with open(self.directory / "offsets.npy.tmp", "wb") as f:  # a file object: np.save adds no ".npy"
            np.save(f, offsets)
        if self.with_ids:
            merge_ids(self.directory, names, self.documents)
        files = {}
        for name in ["vectors.npy", "offsets.npy"] + (list(ID_FILES) if self.with_ids else []):
            os.replace(self.directory / f"{name}.tmp", self.directory / name)
            files[name] = file_record(self.directory / name)
        manifest = {**self._settings(), "documents": self.documents, "tokens": int(offsets[-1]),
                    "ids": bool(self.with_ids), "files": files}
        write_atomically(self.directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(self.segments)
        return MultiVectorIndex.load(self.directory, verify=False)


def maxsim_block(queries: torch.Tensor, query_of_row: torch.Tensor, count: int, tokens: torch.Tensor,
                 doc_of_token: torch.Tensor, documents: int) -> torch.Tensor:
    """MaxSim ``[count, documents]`` of ``count`` queries (their token vectors stacked, ``queries [M, d]``, row ``r``
    of query ``query_of_row[r]``) against ``documents`` documents (``tokens [t, d]``, token ``j`` of document
    ``doc_of_token[j]``); float32, exact. Memory: ``M * (t + documents)`` scores."""
    return segment_maxsim(queries @ tokens.T, query_of_row, count, doc_of_token, documents)


def segment_maxsim(similarity: torch.Tensor, query_of_row: torch.Tensor, count: int, doc_of_token: torch.Tensor,
                   documents: int) -> torch.Tensor:
    """:func:`maxsim_block` from the token-pair scores ``similarity [M, t]`` (exact ones, or a compressed index's
    approximations of them). The rows are grouped by query, in order (as :func:`stack_queries` stacks them)."""
    best = torch.full((len(similarity), documents), -torch.inf, dtype=similarity.dtype)
    best.scatter_reduce_(1, doc_of_token.expand(len(similarity), -1), similarity, "amax")
    # a sum per query's block of rows: several times faster than index_add_ with its repeated indices on CPU
    return torch.stack([rows.sum(0) for rows in best.split(torch.bincount(query_of_row, minlength=count).tolist())])


def stack_queries(queries: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """The queries' token vectors stacked ``[M, d]`` and the query of each row ``[M]``."""
    rows = torch.from_numpy(np.concatenate(queries))
    owner = torch.repeat_interleave(torch.arange(len(queries)), torch.tensor([len(q) for q in queries]))
    return rows, owner


def merge_top(best: tuple[torch.Tensor, torch.Tensor], scores: torch.Tensor, positions: torch.Tensor,
              k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best ``k`` of ``best`` (scores, positions ``[q, <=k]``) and ``scores [q, n]`` at ``positions [n]``,
    best first, a tie to the lower position."""
    all_scores = torch.cat([best[0], scores], dim=1)
    all_positions = torch.cat([best[1], positions.expand(len(scores), -1)], dim=1)
    by_position = torch.argsort(all_positions, dim=1, stable=True)
    all_scores, all_positions = all_scores.gather(1, by_position), all_positions.gather(1, by_position)
    order = torch.argsort(-all_scores, dim=1, stable=True)[:, :k]
    return all_scores.gather(1, order), all_positions.gather(1, order)


class MultiVectorIndex:
    """A finished exact multi-vector index: ``vectors [T, d]`` and ``offsets [N + 1]`` (memory-mapped), ``manifest``."""

    def __init__(self, directory: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]):
        self.directory, self.manifest = directory, manifest
        self.vectors, self.offsets = arrays["vectors.npy"], arrays["offsets.npy"]
        self.dim: int = manifest["dim"]
        self.documents: int = manifest["documents"]
        self.tokens: int = manifest["tokens"]
        self.model: str = manifest["model"]
        self.ids = IdTable(directory, arrays.get("ids.bin"), arrays.get("ids.offsets.npy"))

    @classmethod
    def load(cls, directory: str | os.PathLike, *, dim: int | None = None, model: str | None = None,
             verify: bool = True) -> MultiVectorIndex:
        """The index in ``directory``; with ``dim`` / ``model``, ``ValueError`` unless it was built for them. File
        sizes are checked against the manifest, and with ``verify`` their checksums and the offsets."""
        directory = Path(directory)
        manifest = read_manifest(directory / MANIFEST, FORMAT, VERSION, ("dim", "model", "documents", "tokens",
                                                                         "files"), "multi-vector index")
        check_built_for(directory, manifest, dim, model)
        names = ["vectors.npy", "offsets.npy"] + (list(ID_FILES) if manifest.get("ids") else [])
        index = cls(directory, manifest, load_files(directory, manifest, names, verify))
        offsets = index.offsets
        problem = (f"shapes {index.vectors.shape}, {offsets.shape} are not ({index.tokens}, {index.dim}), "
                   f"({index.documents + 1},)" if index.vectors.shape != (index.tokens, index.dim)
                   or offsets.shape != (index.documents + 1,) else
                   "the offsets do not count every document's tokens" if verify and (
                       offsets[0] != 0 or offsets[-1] != index.tokens or (np.diff(offsets) < 1).any()) else
                   index.ids.problem(index.documents, verify))
        if problem:
            raise ValueError(f"the index in {str(directory)!r} is corrupted ({problem}); build it again.")
        return index

    def __len__(self) -> int:
        return self.documents

    def document(self, position: int) -> np.ndarray:
        """Document ``position``'s token vectors ``[n, d]``, as stored."""
        return np.asarray(self.vectors[self.offsets[position]:self.offsets[position + 1]])

    def slices(self, max_tokens: int) -> Iterator[tuple[int, int]]:
        """Consecutive document ranges ``(start, end)`` of at most ``max_tokens`` tokens (or one longer document)."""
        start = 0
        while start < self.documents:
            end = int(np.searchsorted(self.offsets, self.offsets[start] + max_tokens, side="right")) - 1
            end = min(max(end, start + 1), self.documents)
            yield start, end
            start = end

    def search(self, queries: TokenVectors, k: int, *,
               max_scores: int = 1 << 25) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query (see :data:`TokenVectors`, width ``dim``): ``(scores, positions)`` of its best ``k`` documents
        by MaxSim (float32, on the stored vectors), best first, a tie to the lower position. At most about
        ``max_scores`` token-pair scores are held at once (documents are scored a slice at a time)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}.")
        arrays = as_token_arrays(queries, self.dim, "queries")
        if not arrays:
            return []
        rows, owner = stack_queries(arrays)
        best = (torch.empty(len(arrays), 0), torch.empty(len(arrays), 0, dtype=torch.int64))
        for start, end in self.slices(max(1, max_scores // len(rows))):
            first, last = int(self.offsets[start]), int(self.offsets[end])
            tokens = torch.from_numpy(np.array(self.vectors[first:last], dtype=np.float32))  # a copy: writable
            lengths = torch.from_numpy(np.diff(self.offsets[start:end + 1]))
            doc_of_token = torch.repeat_interleave(torch.arange(end - start), lengths)
            scores = maxsim_block(rows, owner, len(arrays), tokens, doc_of_token, end - start)
            best = merge_top(best, scores, torch.arange(start, end), k)
        return [(s.numpy(), p.numpy()) for s, p in zip(*best)]


def check_built_for(directory: Path, manifest: dict[str, Any], dim: int | None, model: str | None) -> None:
    """``ValueError`` unless the index in ``directory`` holds vectors of width ``dim`` made by ``model`` (if given)."""
    if dim is not None and manifest["dim"] != dim:
        raise ValueError(f"the index in {str(directory)!r} holds vectors of {manifest['dim']} dimensions, not {dim}; "
                         f"search it with the model that built it ({manifest['model']!r}) or build another.")
    if model is not None and manifest["model"] != model:
        raise ValueError(f"the index in {str(directory)!r} was built by {manifest['model']!r}, not {model!r}; "
                         f"search it with that model or build another.")


def build_multivector_index(chunks: Sequence[TokenVectors], directory: str | os.PathLike, dim: int, model: str, *,
                            dtype: str = "float16", max_tokens: int = 1_000_000) -> MultiVectorIndex:
    """A :class:`MultiVectorIndex` in ``directory`` of the documents of ``chunks``, an iterable of chunks."""
    writer = MultiVectorIndexWriter(directory, dim, model, dtype=dtype, max_tokens=max_tokens)
    for chunk in chunks:
        writer.add(chunk)
    return writer.finish()


def append_staging(index: Any, *, max_tokens: int = 1_000_000,
                   info: dict[str, Any] | None = None) -> MultiVectorIndexWriter | MultiVectorIndex:
    """Where an append to the finished ``index`` (exact or PLAID) collects its new documents: a
    :class:`MultiVectorIndexWriter` in ``index.directory/append`` (an unfinished one resumed), or the staged
    documents' finished index if an earlier run got that far. (Before loading the index, call
    :func:`~bertkit.retrieval.index_files.finish_replace`: an append killed after its commit is finished by it.)"""
    staging = index.directory / STAGING
    if (staging / MANIFEST).is_file():
        return MultiVectorIndex.load(staging, dim=index.dim, model=index.model)
    return MultiVectorIndexWriter(staging, index.dim, index.model, dtype=index.manifest.get("dtype", "float32"),
                                  max_tokens=max_tokens, resume=True, info=info)


def concatenated_ids(directory: Path, old: IdTable, new: IdTable, files: dict[str, Any]) -> None:
    """``ids.bin.next`` / ``ids.offsets.npy.next`` in ``directory``: the ids of ``old`` then of ``new``."""
    with open(directory / "ids.bin.next", "wb") as blob:
        for table in (old, new):
            blob.write(memoryview(np.asarray(table.id_bytes)))
    offsets = np.concatenate([old.id_offsets, new.id_offsets[1:] + old.id_offsets[-1]])
    with open(directory / "ids.offsets.npy.next", "wb") as f:
        np.save(f, offsets)
    for name in ID_FILES:
        files[name] = file_record(directory / f"{name}.next")


def check_appendable(index: Any, new: MultiVectorIndex) -> None:
    """``ValueError`` unless the staged documents ``new`` fit ``index`` (its ids: given for all or for none)."""
    if bool(index.manifest.get("ids")) != bool(new.manifest.get("ids")):
        how = "with" if index.manifest.get("ids") else "without"
        raise ValueError(f"the index in {str(index.directory)!r} was built {how} document ids; append documents the "
                         f"same way.")


def append_multivector_index(index: MultiVectorIndex, new: MultiVectorIndex, *,
                             max_tokens: int = 1 << 20) -> MultiVectorIndex:
    """``index`` with the documents of ``new`` (the staged append, same model and width) after its own, written
    beside it and swapped in as one step (see :func:`~bertkit.retrieval.index_files.commit_replace`); the staged
    index is removed. Memory: ``max_tokens`` vectors at a time."""
    check_appendable(index, new)
    directory, dtype = index.directory, DTYPES[index.manifest["dtype"]]
    vectors = np.lib.format.open_memmap(directory / "vectors.npy.next", "w+", dtype,
                                        (index.tokens + new.tokens, index.dim))
    for at, source in ((0, index), (index.tokens, new)):
        for first in range(0, source.tokens, max_tokens):
            part = source.vectors[first:first + max_tokens]
            vectors[at + first:at + first + len(part)] = part
    vectors.flush()
    del vectors
    with open(directory / "offsets.npy.next", "wb") as f:
        np.save(f, np.concatenate([index.offsets, new.offsets[1:] + index.tokens]))
    files = dict(index.manifest["files"])
    for name in ("vectors.npy", "offsets.npy"):
        files[name] = file_record(directory / f"{name}.next")
    if index.manifest.get("ids"):
        concatenated_ids(directory, index.ids, new.ids, files)
    manifest = {**index.manifest, "documents": index.documents + new.documents,
                "tokens": index.tokens + new.tokens, "files": files}
    names = ["vectors.npy", "offsets.npy"] + (list(ID_FILES) if index.manifest.get("ids") else [])
    shutil.rmtree(new.directory)  # before the commit: a kill after it must not find these documents to add again
    commit_replace(directory, manifest, names)
    return MultiVectorIndex.load(directory, verify=False)
