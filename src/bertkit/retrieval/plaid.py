"""A compressed multi-vector index in the PLAID manner, built from an exact :class:`MultiVectorIndex` and searched in
three steps: candidate documents are those with a token in one of the ``nprobe`` centroids nearest each query token;
they are ranked by MaxSim over their tokens' centroids (no decompression); the best ``candidates`` of them are
decompressed and scored by exact MaxSim on the decompressed vectors.

Files: ``centroids.npy [K, d]``, ``buckets.npy [2, 2**nbits]`` (cutoffs, then bucket values; the cutoffs' last slot
unused), ``codes.npy [T]`` (each token's centroid), ``residuals.npy [T, d * nbits / 8]`` (packed buckets),
``offsets.npy [N + 1]`` and ids as the exact index has them, and ``ivf/``, the centroid -> documents lists as a
:class:`SparseIndex` (term = centroid, weight = how many of the document's tokens it holds). The manifest is written
last; an interrupted build leaves none, and ``.building`` records how far it got: built again with the same source
and arguments it goes on after its last compressed slice (otherwise it starts over). :func:`append_plaid_index` adds
documents compressed with the existing codec, the ivf remade from every token's code, swapped in at one commit
point (:func:`~bertkit.retrieval.index_files.commit_replace`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
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
    read_manifest,
    write_atomically,
)
from bertkit.retrieval.multivector import (
    MultiVectorIndex,
    TokenVectors,
    as_token_arrays,
    check_appendable,
    check_built_for,
    concatenated_ids,
    merge_top,
    segment_maxsim,
)
from bertkit.retrieval.plaid_codec import NBITS, Codec, kmeans, nearest, residual_buckets
from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter

FORMAT = "bertkit-plaid-index"
VERSION = 1
MANIFEST = "manifest.json"
BUILDING = ".building"  # present from the first file written to the manifest: the directory holds a partial build
ARRAYS = ("centroids.npy", "buckets.npy", "codes.npy", "residuals.npy", "offsets.npy")


def default_centroids(tokens: int) -> int:
    """PLAID's number of centroids for ``tokens`` token vectors: the power of two at or below ``16 * sqrt(tokens)``."""
    return 1 << math.floor(math.log2(16 * math.sqrt(tokens)))


def _resume_point(directory: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The progress of an interrupted build in ``directory`` with these ``settings`` (its codec trained: build it
    on from there), or ``None``."""
    try:
        progress = json.loads((directory / BUILDING).read_text())
    except (OSError, ValueError):
        return None
    codec_saved = all((directory / name).is_file() for name in ("centroids.npy", "buckets.npy"))
    if not isinstance(progress, dict) or progress.get("settings") != settings or not codec_saved \
            or (directory / MANIFEST).is_file():
        return None
    return progress


def _prepare(directory: Path) -> None:
    """``directory`` made ready for a build: new, empty, or a partial build (which is removed)."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / BUILDING).is_file() or (directory / MANIFEST).is_file():
            raise ValueError(f"index directory {str(directory)!r} is not empty; pass a new or empty directory.")
        shutil.rmtree(directory)  # an interrupted build of another source or settings: start over
    directory.mkdir(parents=True, exist_ok=True)
    (directory / BUILDING).write_text("{}\n")


def _sample(source: MultiVectorIndex, size: int, generator: torch.Generator) -> torch.Tensor:
    """``size`` distinct token vectors of ``source`` drawn at random (float32), in position order."""
    picks = torch.randperm(source.tokens, generator=generator)[:size].sort().values.numpy()
    return torch.from_numpy(np.array(source.vectors[picks], dtype=np.float32))


def train_codec(source: MultiVectorIndex, count: int, nbits: int, sample: int, iterations: int, seed: int) -> Codec:
    """The :class:`Codec` of ``source``: ``count`` k-means centroids of up to ``sample`` of its token vectors drawn
    with ``seed``, less the 1/20th of them held out to set the residual buckets."""
    generator = torch.Generator().manual_seed(seed)
    drawn = _sample(source, min(source.tokens, sample), generator)
    drawn = drawn[torch.randperm(len(drawn), generator=generator)]
    held = max(1, len(drawn) // 20)  # as PLAID: residual statistics from vectors the centroids were not fit to
    held_out, train = drawn[:held], drawn[held:]
    train = train if len(train) >= count else drawn
    norms = drawn.norm(dim=1)
    normalize = bool(((norms - 1).abs() < 1e-2).all())  # unit vectors (as ColBERT's): decompressed ones are too
    centres = kmeans(train, count, iterations=iterations, seed=seed, normalize=normalize)
    cutoffs, weights = residual_buckets(held_out - centres[nearest(held_out, centres)], nbits)
    return Codec(centres, cutoffs, weights, nbits, normalize)


def _save_codec(directory: Path, codec: Codec) -> None:
    np.save(directory / "centroids.npy", codec.centroids.numpy())
    np.save(directory / "buckets.npy", torch.stack([torch.cat([codec.cutoffs, torch.zeros(1)]), codec.weights]).numpy())


def _read_codec(centroids: np.ndarray, buckets: np.ndarray, nbits: int, normalize: bool) -> Codec:
    table = torch.from_numpy(np.array(buckets))
    return Codec(torch.from_numpy(np.array(centroids)), table[0, :-1], table[1], nbits, normalize)


def build_plaid_index(source: MultiVectorIndex, directory: str | os.PathLike, *, nbits: int = 2,
                      centroids: int | None = None, sample: int = 262_144, iterations: int = 8, seed: int = 0,
                      max_tokens: int = 1 << 18) -> PlaidIndex:
    """A :class:`PlaidIndex` in ``directory`` of the documents of the exact index ``source``.

    ``centroids`` (default :func:`default_centroids`) and the buckets: :func:`train_codec`. The tokens are then
    compressed ``max_tokens`` at a time (bounded memory), the progress recorded after each slice: a build killed
    after its codec was trained, run again with the same source and arguments, goes on from its last slice and
    gives the same bytes; with others it starts over."""
    if nbits not in NBITS:
        raise ValueError(f"nbits must be one of {NBITS}, got {nbits}.")
    if source.dim * nbits % 8:
        raise ValueError(f"nbits {nbits} with {source.dim}-dimensional vectors does not fill whole bytes; use a "
                         f"dimension that is a multiple of {8 // nbits}.")
    count = min(centroids or default_centroids(source.tokens), source.tokens)
    directory = Path(directory)
    settings = {"model": source.model, "documents": source.documents, "tokens": source.tokens,
                "vectors": source.manifest["files"]["vectors.npy"]["sha256"], "nbits": nbits, "centroids": count,
                "sample": sample, "iterations": iterations, "seed": seed}
    progress = _resume_point(directory, settings)
    if progress is None:
        _prepare(directory)
        codec = train_codec(source, count, nbits, sample, iterations, seed)
        _save_codec(directory, codec)
        np.save(directory / "offsets.npy", np.asarray(source.offsets))
        for name in ID_FILES if source.manifest.get("ids") else ():
            shutil.copyfile(source.directory / name, directory / name)
        code_type = np.uint16 if count <= 1 << 16 else np.int32
        np.lib.format.open_memmap(directory / "codes.npy", "w+", code_type, (source.tokens,)).flush()
        np.lib.format.open_memmap(directory / "residuals.npy", "w+", np.uint8,
                                  (source.tokens, codec.residual_bytes)).flush()
        progress = {"settings": settings, "normalize": codec.normalize, "documents": 0}
        write_atomically(directory / BUILDING, json.dumps(progress) + "\n")
    else:
        codec = _read_codec(np.load(directory / "centroids.npy"), np.load(directory / "buckets.npy"), nbits,
                            progress["normalize"])
    codes = np.load(directory / "codes.npy", mmap_mode="r+")
    packed = np.load(directory / "residuals.npy", mmap_mode="r+")

    def record(documents: int) -> None:
        codes.flush(), packed.flush()
        write_atomically(directory / BUILDING, json.dumps({**progress, "documents": documents}) + "\n")

    compress_into(source, codec, codes, packed, 0, max_tokens, start=progress["documents"], done=record)
    record(source.documents)
    write_ivf(directory / "ivf", codes, source.offsets, count, source.model, max_tokens)
    files = {name: file_record(directory / name) for name in ARRAYS + (ID_FILES if source.manifest.get("ids") else ())}
    manifest = {"format": FORMAT, "version": VERSION, "dim": source.dim, "model": source.model, "nbits": nbits,
                "centroids": count, "normalize": codec.normalize, "documents": source.documents,
                "tokens": source.tokens, "ids": bool(source.manifest.get("ids")), "seed": seed,
                "source": str(source.directory.resolve()), "info": source.manifest.get("info", {}), "files": files}
    write_atomically(directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    (directory / BUILDING).unlink()
    return PlaidIndex.load(directory, verify=False)


def compress_into(source: MultiVectorIndex, codec: Codec, codes: np.ndarray, packed: np.ndarray, at: int,
                  max_tokens: int, *, start: int = 0, done: Callable[[int], None] | None = None) -> None:
    """The tokens of ``source``'s documents from ``start`` on compressed into ``codes`` / ``packed`` from row
    ``at + offsets[start]`` on, ``max_tokens`` at a time; ``done(documents)`` after each slice."""
    for first_doc, end in source.slices(max_tokens):
        if end <= start:
            continue
        first_doc = max(first_doc, start)
        first, last = int(source.offsets[first_doc]), int(source.offsets[end])
        part_codes, part_packed = codec.compress(torch.from_numpy(np.array(source.vectors[first:last], np.float32)))
        codes[at + first:at + last], packed[at + first:at + last] = part_codes.numpy(), part_packed.numpy()
        if done is not None:
            done(end)


def write_ivf(directory: Path, codes: np.ndarray, offsets: np.ndarray, centroids: int, model: str,
              max_tokens: int) -> None:
    """The centroid -> documents lists of the documents at ``offsets`` whose tokens have ``codes``, written as a
    :class:`SparseIndex` in ``directory`` (removed first: a killed build's is remade), ``max_tokens`` at a time."""
    if directory.exists():
        shutil.rmtree(directory)
    ivf = SparseIndexWriter(directory, centroids, f"centroids of {model}")
    documents, start = len(offsets) - 1, 0
    while start < documents:
        end = int(np.searchsorted(offsets, offsets[start] + max_tokens, side="right")) - 1
        end = min(max(end, start + 1), documents)
        part = torch.from_numpy(codes[offsets[start]:offsets[end]].astype(np.int64))
        rows = torch.repeat_interleave(torch.arange(end - start), torch.from_numpy(np.diff(offsets[start:end + 1])))
        ivf.add(torch.sparse_coo_tensor(torch.stack([rows, part]), torch.ones(len(rows)), (end - start, centroids),
                                        check_invariants=False))
        start = end
    ivf.finish()


def append_plaid_index(index: PlaidIndex, new: MultiVectorIndex, *, max_tokens: int = 1 << 18) -> PlaidIndex:
    """``index`` with the documents of ``new`` (the staged append of the same model and width, see
    :func:`~bertkit.retrieval.multivector.append_staging`) after its own: compressed with the existing codec (its
    centroids and buckets are kept), the ivf remade from every token's centroid, all written beside the old files and
    swapped in as one step (:func:`~bertkit.retrieval.index_files.commit_replace`); the staged index is removed."""
    check_appendable(index, new)
    directory, tokens = index.directory, index.tokens + new.tokens
    codes = np.lib.format.open_memmap(directory / "codes.npy.next", "w+", index.codes.dtype, (tokens,))
    packed = np.lib.format.open_memmap(directory / "residuals.npy.next", "w+", np.uint8,
                                       (tokens, index.codec.residual_bytes))
    for first in range(0, index.tokens, max_tokens):
        last = min(first + max_tokens, index.tokens)
        codes[first:last], packed[first:last] = index.codes[first:last], index.residuals[first:last]
    compress_into(new, index.codec, codes, packed, index.tokens, max_tokens)
    codes.flush(), packed.flush()
    offsets = np.concatenate([index.offsets, new.offsets[1:] + index.tokens])
    with open(directory / "offsets.npy.next", "wb") as f:
        np.save(f, offsets)
    write_ivf(directory / "ivf.next", codes, offsets, len(index.codec.centroids), index.model, max_tokens)
    del codes, packed
    files = dict(index.manifest["files"])
    for name in ("codes.npy", "residuals.npy", "offsets.npy"):
        files[name] = file_record(directory / f"{name}.next")
    if index.manifest.get("ids"):
        concatenated_ids(directory, index.ids, new.ids, files)
    manifest = {**index.manifest, "documents": index.documents + new.documents, "tokens": tokens, "files": files}
    names = ["codes.npy", "residuals.npy", "offsets.npy", "ivf"] + (list(ID_FILES) if manifest.get("ids") else [])
    shutil.rmtree(new.directory)  # before the commit: a kill after it must not find these documents to add again
    commit_replace(directory, manifest, names)
    return PlaidIndex.load(directory, verify=False)


class PlaidIndex:
    """A finished PLAID index (see the module's docstring): its arrays memory-mapped, its :class:`Codec` and ivf."""

    def __init__(self, directory: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray], ivf: SparseIndex):
        self.directory, self.manifest, self.ivf = directory, manifest, ivf
        self.codes, self.residuals, self.offsets = arrays["codes.npy"], arrays["residuals.npy"], arrays["offsets.npy"]
        self.dim, self.model, self.nbits = manifest["dim"], manifest["model"], manifest["nbits"]
        self.documents, self.tokens = manifest["documents"], manifest["tokens"]
        self.codec = _read_codec(arrays["centroids.npy"], arrays["buckets.npy"], self.nbits, manifest["normalize"])
        self.ids = IdTable(directory, arrays.get("ids.bin"), arrays.get("ids.offsets.npy"))

    @classmethod
    def load(cls, directory: str | os.PathLike, *, dim: int | None = None, model: str | None = None,
             verify: bool = True) -> PlaidIndex:
        """The index in ``directory``, checked as :meth:`MultiVectorIndex.load` checks an exact one."""
        directory = Path(directory)
        manifest = read_manifest(directory / MANIFEST, FORMAT, VERSION, ("dim", "model", "nbits", "centroids",
                                                                         "normalize", "documents", "tokens", "files"),
                                 "PLAID index")
        check_built_for(directory, manifest, dim, model)
        names = ARRAYS + (ID_FILES if manifest.get("ids") else ())
        arrays = load_files(directory, manifest, names, verify)
        ivf = SparseIndex.load(directory / "ivf", vocab_size=manifest["centroids"], verify=verify)
        index = cls(directory, manifest, arrays, ivf)
        T, K = index.tokens, manifest["centroids"]
        if (index.codes.shape != (T,) or index.residuals.shape != (T, index.codec.residual_bytes)
                or index.offsets.shape != (index.documents + 1,) or index.codec.centroids.shape != (K, index.dim)
                or ivf.documents != index.documents):
            raise ValueError(f"the index in {str(directory)!r} is corrupted (its arrays' shapes disagree with the "
                             f"manifest); build it again.")
        return index

    def __len__(self) -> int:
        return self.documents

    def bytes_per_token(self) -> dict[str, float]:
        """The index's size per token vector: ``"vectors"`` (codes and residuals) and ``"total"`` (every file)."""
        files = [path for path in self.directory.rglob("*") if path.is_file()]
        vectors = self.codes.itemsize + self.residuals.shape[1]
        return {"vectors": float(vectors), "total": sum(path.stat().st_size for path in files) / self.tokens}

    def _tokens(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The token positions of the documents at ``positions``, one after the other, and each document's length."""
        starts = self.offsets[positions]
        lengths = self.offsets[positions + 1] - starts
        return np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum()), \
            lengths

    def decompress(self, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The decompressed token vectors of the documents at ``positions`` and each token's place in ``positions``."""
        tokens, lengths = self._tokens(positions)
        codes = torch.from_numpy(self.codes[tokens].astype(np.int64))
        return (self.codec.decompress(codes, torch.from_numpy(np.array(self.residuals[tokens]))),
                torch.repeat_interleave(torch.arange(len(positions)), torch.from_numpy(lengths)))

    def search(self, queries: TokenVectors, k: int, *, nprobe: int = 4, candidates: int = 256,
               rerank: MultiVectorIndex | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query: ``(scores, positions)`` of its best ``k`` documents, best first (ties to the lower
        position), by MaxSim on decompressed vectors over the ``candidates`` documents best by centroid MaxSim among
        those with a token in one of the ``nprobe`` centroids nearest a query token. Fewer than ``k`` when fewer
        documents are candidates. With ``rerank``, the exact index this one was built from, the short list is scored
        on its stored vectors instead (exact MaxSim: only the candidate generation approximates)."""
        if k < 1 or nprobe < 1 or candidates < k:
            raise ValueError(f"k and nprobe must be at least 1 and candidates at least k, got k={k}, nprobe={nprobe}, "
                             f"candidates={candidates}.")
        if rerank is not None and (rerank.model, rerank.documents, rerank.tokens) != (
                self.model, self.documents, self.tokens):
            raise ValueError(f"rerank: the exact index in {str(rerank.directory)!r} is not the one the PLAID index in "
                             f"{str(self.directory)!r} was built from (its model, documents or tokens differ).")
        return [self._search_one(torch.from_numpy(query), k, nprobe, candidates, rerank)
                for query in as_token_arrays(queries, self.dim, "queries")]

    def _search_one(self, query: torch.Tensor, k: int, nprobe: int, candidates: int,
                    rerank: MultiVectorIndex | None) -> tuple[np.ndarray, np.ndarray]:
        centroid_scores = query @ self.codec.centroids.T  # [m, K]
        cells = centroid_scores.topk(min(nprobe, len(self.codec.centroids)), dim=1).indices.unique().numpy()
        starts, ends = self.ivf.offsets[cells], self.ivf.offsets[cells + 1]
        docs = np.unique(np.concatenate([self.ivf.docs[a:b] for a, b in zip(starts, ends)])).astype(np.int64)
        rows = torch.zeros(len(query), dtype=torch.int64)
        if len(docs) > candidates:  # rank by the centroids alone (PLAID's centroid interaction) to a short list
            tokens, lengths = self._tokens(docs)
            approximate = centroid_scores[:, torch.from_numpy(self.codes[tokens].astype(np.int64))]
            owner = torch.repeat_interleave(torch.arange(len(docs)), torch.from_numpy(lengths))
            rough = segment_maxsim(approximate, rows, 1, owner, len(docs))
            _, kept = merge_top((torch.empty(1, 0), torch.empty(1, 0, dtype=torch.int64)), rough,
                                torch.arange(len(docs)), candidates)
            docs = np.sort(docs[kept[0].numpy()])
        if rerank is None:
            vectors, owner = self.decompress(docs)
        else:
            tokens, lengths = self._tokens(docs)
            vectors = torch.from_numpy(np.array(rerank.vectors[tokens], dtype=np.float32))
            owner = torch.repeat_interleave(torch.arange(len(docs)), torch.from_numpy(lengths))
        scores = segment_maxsim(query @ vectors.T, rows, 1, owner, len(docs))
        best = merge_top((torch.empty(1, 0), torch.empty(1, 0, dtype=torch.int64)), scores,
                         torch.from_numpy(docs), k)
        return best[0][0].numpy(), best[1][0].numpy()
