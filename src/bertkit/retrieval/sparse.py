"""Sparse retrieval: an inverted index over sparse vectors (term id -> weight), exact dot-product search.

Whatever made the vectors (SPLADE, an inference-free query side, BM25-like weights), the index holds, for each
term id of a vocabulary of ``vocab_size``, a posting list: the documents whose vector has that term and their
weights, in compact numpy arrays (``offsets [V + 1]``, ``docs [P]``, ``weights [P]``; term ``t``'s postings are
``offsets[t]:offsets[t + 1]``, by ascending document).

:class:`SparseIndexWriter` builds one in bounded memory: documents are added in chunks, their postings buffered
up to ``max_postings`` and then flushed to a segment on disk; :meth:`~SparseIndexWriter.finish` merges the
segments into the index one segment at a time, writes the manifest last (atomically: an index without one is
unfinished) and removes the segments. Each flush records how many documents the segments hold, so an
interrupted build resumes (``resume=True``) after the last flush. :meth:`SparseIndex.load` memory-maps the
arrays and checks them against the manifest; :meth:`SparseIndex.search` scores a batch of queries term at a
time, exactly, and returns each query's best ``k`` documents that share a term with it, best first, a tie to
the lower document position.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.retrieval.index_files import (
    ID_FILES,
    IdTable,
    doc_dtype,
    file_record,
    load_files,
    merge_ids,
    read_manifest,
    write_atomically,
    write_ids,
)

FORMAT = "bertkit-sparse-index"
VERSION = 1
MANIFEST = "manifest.json"
PROGRESS = "progress.json"  # in segments/: how far an unfinished build got
ARRAYS = ("offsets", "docs", "weights")

#: sparse vectors, one per row: a torch sparse (COO or CSR) or dense ``[n, vocab_size]`` tensor, a dense numpy
#: array, or a sequence of ``(term ids, weights)`` pairs
SparseRows = Any


def as_triples(rows: SparseRows, vocab_size: int, what: str = "rows") -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(row, term, weight, n)``: the nonzero entries of ``rows`` (see :data:`SparseRows`), sorted by row then
    term, with duplicate (row, term) entries summed (as torch's ``coalesce``); ``n`` the number of rows.
    ``ValueError`` naming ``what`` for a term id outside ``[0, vocab_size)``, a width other than ``vocab_size``,
    or a weight that is NaN or infinite."""
    if isinstance(rows, (torch.Tensor, np.ndarray)):
        tensor = torch.as_tensor(rows)
        if tensor.ndim != 2 or tensor.shape[1] != vocab_size:
            raise ValueError(f"{what}: expected sparse vectors [n, {vocab_size}] (the index's vocab_size), got "
                             f"shape {tuple(tensor.shape)}; encode with the model the index was built for.")
        coo = (tensor if tensor.layout == torch.sparse_coo else tensor.to_sparse_coo()).coalesce()
        row, term = coo.indices().cpu().numpy()
        weight = coo.values().detach().to(torch.float32).cpu().numpy()
        n = tensor.shape[0]
    else:
        pairs = [(np.atleast_1d(np.asarray(terms, dtype=np.int64)),
                  np.atleast_1d(np.asarray(torch.as_tensor(values).detach().cpu(), dtype=np.float32)))
                 for terms, values in rows]
        if any(terms.shape != values.shape or terms.ndim != 1 for terms, values in pairs):
            raise ValueError(f"{what}: each (term ids, weights) pair needs one weight per term id, both 1-d.")
        n = len(pairs)
        row = np.repeat(np.arange(n, dtype=np.int64), [len(terms) for terms, _ in pairs])
        term = np.concatenate([terms for terms, _ in pairs] or [np.empty(0, np.int64)])
        weight = np.concatenate([values for _, values in pairs] or [np.empty(0, np.float32)])
        if len(term) and (term.min() < 0 or term.max() >= vocab_size):
            bad = int(term.min() if term.min() < 0 else term.max())
            raise ValueError(f"{what}: term id {bad} is outside the index's vocabulary [0, {vocab_size}); encode with "
                             f"the model the index was built for.")
        order = np.lexsort((term, row))
        row, term, weight = row[order], term[order], weight[order]
        if len(term) > 1:  # sum duplicates of one (row, term)
            first = np.r_[True, (row[1:] != row[:-1]) | (term[1:] != term[:-1])]
            starts = np.flatnonzero(first)
            weight = np.add.reduceat(weight, starts).astype(np.float32)
            row, term = row[starts], term[starts]
    if not np.isfinite(weight).all():
        bad = int(row[~np.isfinite(weight)][0])
        raise ValueError(f"{what}: vector {bad} holds NaN or infinity; a sparse index needs finite weights.")
    keep = weight != 0
    return row[keep].astype(np.int64), term[keep].astype(np.int64), weight[keep], n


class SparseIndexWriter:
    """Builds a :class:`SparseIndex` in ``directory`` (new or empty) from document vectors added in chunks.

    ``vocab_size`` is the width of the vectors; ``model`` names what made them (recorded in the manifest, so that
    an index is searched with queries of the same model). At most ``max_postings`` postings (20 bytes each, twice that
    while they are sorted into a segment) are held in memory; beyond that they go to a segment on disk, and the
    merge holds one segment at a time. ``info`` (JSON) is recorded in the manifest as ``"info"``; a resumed build
    must be given the same (e.g. what the corpus was), or it is refused."""

    def __init__(self, directory: str | os.PathLike, vocab_size: int, model: str, *, max_postings: int = 10_000_000,
                 resume: bool = False, info: dict[str, Any] | None = None):
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1, got {vocab_size}.")
        if max_postings < 1:
            raise ValueError(f"max_postings must be at least 1, got {max_postings}.")
        self.directory = Path(directory)
        self.segments = self.directory / "segments"
        self.vocab_size, self.model, self.max_postings = vocab_size, model, max_postings
        self.info = json.loads(json.dumps(info or {}))  # as it reads back from progress.json
        self.documents = 0
        self._buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._ids: list[str] = []
        self.with_ids: bool | None = None  # set by the first add: every add gives ids, or none does
        self._buffered = 0
        self._segment_count = 0
        if resume and (self.segments / PROGRESS).is_file():
            self._resume()
        elif self.directory.exists() and any(self.directory.iterdir()):
            unfinished = (self.segments / PROGRESS).is_file()
            hint = " (an unfinished build: pass resume=True, or --resume, to continue it)" if unfinished else ""
            raise ValueError(f"index directory {str(self.directory)!r} is not empty{hint}; pass a new or empty "
                             f"directory.")
        self.segments.mkdir(parents=True, exist_ok=True)

    def _resume(self) -> None:
        """Continues the unfinished build in ``directory`` from its last flush: ``documents`` says how many of the
        corpus's documents it holds (add the rest); a segment written after the last record is dropped."""
        path = self.segments / PROGRESS
        try:
            progress = json.loads(path.read_text())
            recorded = (progress["vocab_size"], progress["model"], int(progress["documents"]),
                        int(progress["segments"]), progress.get("info", {}), progress.get("ids"))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{str(path)!r} is corrupted ({error}); start the build again in a new directory.") \
                from None
        if recorded[:2] != (self.vocab_size, self.model):
            raise ValueError(f"the unfinished build in {str(self.directory)!r} is of {recorded[1]!r} vectors of "
                             f"{recorded[0]} terms, not {self.model!r} of {self.vocab_size}; resume it with those or "
                             f"pass a new directory.")
        if recorded[4] != self.info:
            raise ValueError(f"the unfinished build in {str(self.directory)!r} was started with {recorded[4]}, not "
                             f"{self.info}; resume it with the same input or pass a new directory.")
        self.documents, self._segment_count, self.with_ids = recorded[2], recorded[3], recorded[5]
        for file in self.segments.iterdir():
            number = file.name.split(".")[0]
            if number.isdigit() and int(number) >= self._segment_count:  # written after the last record
                file.unlink()

    def add(self, rows: SparseRows, ids: Sequence[str] | None = None) -> range:
        """Adds the documents of ``rows`` (see :data:`SparseRows`), with their ``ids`` (strings, stored beside the
        index: :meth:`SparseIndex.ids`) if given, in every call or in none; returns their positions in the index."""
        row, term, weight, n = as_triples(rows, self.vocab_size, "documents")
        if self.with_ids is None:
            self.with_ids = ids is not None
        if (ids is not None) != self.with_ids:
            raise ValueError(f"add(ids=...): the documents added before came {'with' if self.with_ids else 'without'} "
                             f"ids; give ids in every call or in none.")
        if ids is not None:
            if len(ids) != n:
                raise ValueError(f"add(ids=...): {len(ids)} ids for {n} documents; give one id per document.")
            self._ids.extend(str(doc_id) for doc_id in ids)
        self._buffer.append((term, row + self.documents, weight))
        self._buffered += len(term)
        start, self.documents = self.documents, self.documents + n
        if self._buffered >= self.max_postings:
            self.flush()
        return range(start, self.documents)

    def flush(self) -> None:
        """Writes the buffered postings as a segment (its per-term counts and its postings by (term, doc)) and
        records the progress: a build resumed later (``resume=True``) starts after the documents added so far."""
        if self._buffer:
            term, doc, weight = (np.concatenate(parts) for parts in zip(*self._buffer))
            self._buffer, self._buffered = [], 0
            order = np.lexsort((doc, term))
            name = self.segments / f"{self._segment_count:06d}"
            np.save(f"{name}.counts.npy", np.bincount(term, minlength=self.vocab_size).astype(np.int64))
            np.save(f"{name}.docs.npy", doc[order].astype(doc_dtype(self.documents)))
            np.save(f"{name}.weights.npy", weight[order])
            if self.with_ids:
                write_ids(str(name), self._ids)
                self._ids = []
            self._segment_count += 1
        progress = {"format": FORMAT, "version": VERSION, "vocab_size": self.vocab_size, "model": self.model,
                    "documents": self.documents, "segments": self._segment_count, "info": self.info,
                    "ids": self.with_ids}
        write_atomically(self.segments / PROGRESS, json.dumps(progress) + "\n")

    def finish(self) -> SparseIndex:
        """Merges the segments into the index, writes the manifest and returns the index, loaded.
        ``ValueError`` if no document was added."""
        if self.documents == 0:
            raise ValueError("the corpus is empty: a sparse index needs at least one document.")
        self.flush()
        names = [self.segments / f"{i:06d}" for i in range(self._segment_count)]
        total = np.zeros(self.vocab_size, np.int64)
        for name in names:  # one [V] count at a time: thousands of segments must not hold thousands of counts
            total += np.load(f"{name}.counts.npy")
        offsets = np.zeros(self.vocab_size + 1, np.int64)
        np.cumsum(total, out=offsets[1:])
        postings = int(offsets[-1])
        docs = np.lib.format.open_memmap(self.directory / "docs.npy.tmp", "w+", doc_dtype(self.documents),
                                         (postings,))
        weights = np.lib.format.open_memmap(self.directory / "weights.npy.tmp", "w+", np.float32, (postings,))
        # segments hold ascending documents, one after the other: appending each segment's postings of a term
        # after the earlier segments' keeps every posting list in document order
        cursor = offsets[:-1].copy()
        for name in names:
            count = np.load(f"{name}.counts.npy")
            seg_docs = np.load(f"{name}.docs.npy", mmap_mode="r")
            seg_starts = np.repeat(cursor - np.concatenate([[0], np.cumsum(count)[:-1]]), count)
            targets = seg_starts + np.arange(len(seg_docs))
            docs[targets] = seg_docs
            weights[targets] = np.load(f"{name}.weights.npy", mmap_mode="r")
            cursor += count
        docs.flush()
        weights.flush()
        del docs, weights
        with open(self.directory / "offsets.npy.tmp", "wb") as f:  # a file object: np.save adds no ".npy"
            np.save(f, offsets)
        if self.with_ids:
            merge_ids(self.directory, names, self.documents)
        files = {}
        for name in [f"{array}.npy" for array in ARRAYS] + (list(ID_FILES) if self.with_ids else []):
            os.replace(self.directory / f"{name}.tmp", self.directory / name)
            files[name] = file_record(self.directory / name)
        manifest = {"format": FORMAT, "version": VERSION, "vocab_size": self.vocab_size, "model": self.model,
                    "documents": self.documents, "postings": postings, "ids": bool(self.with_ids),
                    "info": self.info, "files": files}
        write_atomically(self.directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(self.segments)
        return SparseIndex.load(self.directory, vocab_size=self.vocab_size, verify=False)




class SparseIndex:
    """A finished sparse index: ``offsets``, ``docs`` and ``weights`` (memory-mapped) and its ``manifest``."""

    def __init__(self, directory: Path, manifest: dict[str, Any], offsets: np.ndarray, docs: np.ndarray,
                 weights: np.ndarray):
        self.directory, self.manifest = directory, manifest
        self.offsets, self.docs, self.weights = offsets, docs, weights
        self.vocab_size: int = manifest["vocab_size"]
        self.documents: int = manifest["documents"]
        self.model: str = manifest["model"]
        self._ids = IdTable(directory, None, None)

    @classmethod
    def load(cls, directory: str | os.PathLike, *, vocab_size: int | None = None, model: str | None = None,
             verify: bool = True) -> SparseIndex:
        """The index in ``directory``. With ``vocab_size`` / ``model``, ``ValueError`` unless the index was built
        for them. Each file's size is checked against the manifest (a truncated file is refused); with
        ``verify`` also its checksum and the posting lists' structure (reads every byte once)."""
        directory = Path(directory)
        manifest = read_manifest(directory / MANIFEST, FORMAT, VERSION, ("vocab_size", "documents", "postings",
                                                                         "files"), "sparse index")
        if vocab_size is not None and manifest["vocab_size"] != vocab_size:
            raise ValueError(f"the index in {str(directory)!r} was built for a vocabulary of {manifest['vocab_size']} "
                             f"terms, not {vocab_size}; search it with the model that built it "
                             f"({manifest['model']!r}) or build another.")
        if model is not None and manifest["model"] != model:
            raise ValueError(f"the index in {str(directory)!r} was built by {manifest['model']!r}, not {model!r}; "
                             f"search it with that model or build another.")
        names = [f"{array}.npy" for array in ARRAYS] + (list(ID_FILES) if manifest.get("ids") else [])
        arrays = load_files(directory, manifest, names, verify)
        index = cls(directory, manifest, arrays["offsets.npy"], arrays["docs.npy"], arrays["weights.npy"])
        index._ids = IdTable(directory, arrays.get("ids.bin"), arrays.get("ids.offsets.npy"))
        index._check(verify)
        return index

    def _check(self, full: bool) -> None:
        """``ValueError`` unless the arrays have the manifest's shapes (and, if ``full``, consistent contents)."""
        V, P = self.vocab_size, self.manifest["postings"]
        problem = None
        if self.offsets.shape != (V + 1,) or self.docs.shape != (P,) or self.weights.shape != (P,):
            problem = (f"shapes {self.offsets.shape}, {self.docs.shape}, {self.weights.shape} are not ({V + 1},), "
                       f"({P},), ({P},)")
        elif full and (self.offsets[0] != 0 or self.offsets[-1] != P or (np.diff(self.offsets) < 0).any()):
            problem = "the offsets are not a cumulative count of the postings"
        elif full and P and int(self.docs.max()) >= self.documents:
            problem = f"a posting names a document beyond the {self.documents} documents"
        else:
            problem = self._ids.problem(self.documents, full)
        if problem:
            raise ValueError(f"the index in {str(self.directory)!r} is corrupted ({problem}); build it again.")

    def __len__(self) -> int:
        return self.documents

    def ids(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        """The ids of the documents at ``positions`` (as :meth:`search` returns them); ``ValueError`` for an index
        built without ids."""
        return self._ids(positions)

    def search(self, queries: SparseRows, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query of ``queries`` (see :data:`SparseRows`; width ``vocab_size``): ``(scores, positions)``,
        the best ``k`` of the documents that share a term with it, by dot product, best first, a tie to the lower
        position; fewer when fewer documents share a term (none for an empty query). Scores are float32 sums
        accumulated in float64, so they equal a dense dot product up to float32 rounding."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}.")
        row, term, weight, n = as_triples(queries, self.vocab_size, "queries")
        bounds = np.searchsorted(row, np.arange(n + 1))
        return [self._search_one(term[a:b], weight[a:b], k) for a, b in itertools.pairwise(bounds)]

    def _search_one(self, terms: np.ndarray, query_weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = self.offsets[terms].tolist(), self.offsets[terms + 1].tolist()
        spans = [(a, b, w) for a, b, w in zip(starts, ends, query_weights.tolist()) if b > a]
        if not spans:
            return np.empty(0, np.float32), np.empty(0, np.int64)
        # the posting lists of the query's terms, copied as contiguous slices into one list (cheaper than
        # gathering them by position), each weighted by the query's weight in float64
        docs_view, weights_view = self.docs.view(np.ndarray), self.weights.view(np.ndarray)  # no memmap overhead
        docs = np.concatenate([docs_view[a:b] for a, b, _ in spans]).astype(np.intp)
        contributions = np.concatenate([weights_view[a:b] for a, b, _ in spans]) * \
            np.repeat(np.array([w for _, _, w in spans], dtype=np.float64), [b - a for a, b, _ in spans])
        if len(docs) * 16 < self.documents:  # few postings against a large corpus: sort them
            matched, inverse = np.unique(docs, return_inverse=True)  # ascending positions
            scores = np.bincount(inverse, weights=contributions, minlength=len(matched)).astype(np.float32)
        else:  # an accumulator over the corpus: vectorised passes, cheaper than sorting many postings
            totals = np.bincount(docs, weights=contributions, minlength=self.documents)
            if contributions.min() > 0:  # (SPLADE's weights) a document shares a term exactly when its sum is > 0
                matched = np.flatnonzero(totals > 0)
            else:
                shares = np.zeros(self.documents, bool)
                shares[docs] = True
                matched = np.flatnonzero(shares)  # ascending positions
            scores = totals[matched].astype(np.float32)
        matched = matched.astype(np.int64, copy=False)
        if len(matched) > k:  # keep the k best and everything tied with the k-th, then order those exactly
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            keep = scores >= kth
            matched, scores = matched[keep], scores[keep]
        order = np.lexsort((matched, -scores))[:k]
        return scores[order], matched[order]


def build_sparse_index(vectors: Sequence[SparseRows], directory: str | os.PathLike, vocab_size: int, model: str, *,
          max_postings: int = 10_000_000) -> SparseIndex:
    """A :class:`SparseIndex` in ``directory`` of the documents of ``vectors``, an iterable of chunks."""
    writer = SparseIndexWriter(directory, vocab_size, model, max_postings=max_postings)
    for chunk in vectors:
        writer.add(chunk)
    return writer.finish()
