"""The on-disk pieces every bertkit index shares (sparse, multi-vector, compressed): a manifest written last and
atomically (an index without one is unfinished), each file's size and sha256 recorded in it and checked on load,
arrays memory-mapped, never unpickled, and document ids stored as UTF-8 bytes plus offsets.

:func:`file_record` / :func:`read_manifest` / :func:`load_files` are the manifest's two sides; :func:`write_ids`,
:func:`merge_ids` and :class:`IdTable` the ids' (a build writes each flush's ids beside its segment, the finish
merges them in document order).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: the documents' ids, when they were added with ids: their UTF-8 bytes one after the other, and the offsets [N + 1]
#: of each id's bytes (memory-mapped like the arrays: an id is read only when a result names it)
ID_FILES = ("ids.bin", "ids.offsets.npy")


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, never a part: written aside, then renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def doc_dtype(documents: int) -> type:
    """The narrowest integer type that numbers ``documents`` documents (or tokens)."""
    return np.uint32 if documents <= np.iinfo(np.uint32).max else np.int64


def file_record(path: Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of ``path``, as the manifest records it (read in 16 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def read_manifest(path: Path, fmt: str, version: int, keys: Sequence[str], what: str) -> dict[str, Any]:
    """The manifest at ``path`` of a ``fmt`` index, version ``version``, holding ``keys``; ``ValueError`` naming the
    file when it is missing (``what`` names the index and how to build it), corrupted, or another format."""
    if not path.is_file() and (path.parent / NEXT_MANIFEST).is_file():
        raise ValueError(f"{str(path.parent)!r}: an append to this {what} was interrupted while its files were "
                         f"swapped in; run the same append again to finish it.")
    if not path.is_file():
        raise ValueError(f"{str(path.parent)!r} holds no {path.name}: not a finished {what} (an interrupted build "
                         f"leaves none); build it again.")
    try:
        manifest = json.loads(path.read_text())
        found, found_version = manifest["format"], manifest["version"]
        for key in keys:
            manifest[key]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{str(path)!r} is corrupted ({error}); build the index again.") from None
    if found != fmt or found_version != version:
        raise ValueError(f"{str(path)!r} is a {found!r} version {found_version} index; this bertkit reads {fmt!r} "
                         f"version {version} here: build the index again (or load it with its own class).")
    return manifest


def index_format(directory: str | os.PathLike, formats: Sequence[str]) -> str:
    """The format of the finished index in ``directory`` (its manifest's ``"format"``), one of ``formats``;
    ``ValueError`` naming the directory otherwise."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        read_manifest(path, "", 0, (), "index")  # raises: no manifest (an unfinished build or append), said once
    try:
        manifest = json.loads(path.read_text())
        found = manifest["format"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{str(path)!r} is corrupted ({error}); build the index again.") from None
    if found not in formats:
        raise ValueError(f"{str(directory)!r} holds a {found!r} index; expected one of {list(formats)}.")
    return found


def load_files(directory: Path, manifest: dict[str, Any], names: Sequence[str], verify: bool) -> dict[str, np.ndarray]:
    """The files ``names`` of ``directory``, memory-mapped (``.npy`` as arrays, others as bytes), each checked against
    the manifest's size (a truncated file is refused) and, with ``verify``, its sha256 (reads every byte)."""
    arrays = {}
    for name in names:
        file = directory / name
        record = manifest["files"].get(name, {})
        size = file.stat().st_size if file.is_file() else None
        if size != record.get("bytes"):
            raise ValueError(f"index file {str(file)!r} is {'missing' if size is None else f'{size} bytes'}, the "
                             f"manifest says {record.get('bytes')}: truncated or corrupted; build the index again.")
        if verify and file_record(file)["sha256"] != record.get("sha256"):
            raise ValueError(f"index file {str(file)!r} does not match its checksum in the manifest: corrupted; "
                             f"build the index again.")
        try:
            arrays[name] = (np.load(file, mmap_mode="r", allow_pickle=False) if name.endswith(".npy") else
                            np.memmap(file, np.uint8, "r") if size else np.empty(0, np.uint8))
        except (ValueError, OSError) as error:
            raise ValueError(f"index file {str(file)!r} is corrupted ({error}); build the index again.") from None
    return arrays


def write_ids(prefix: str, ids: Sequence[str]) -> None:
    """One flush's ids beside its segment: ``{prefix}.ids.bin`` and ``{prefix}.idlengths.npy``."""
    encoded = [doc_id.encode("utf-8") for doc_id in ids]
    Path(f"{prefix}.ids.bin").write_bytes(b"".join(encoded))
    np.save(f"{prefix}.idlengths.npy", np.array([len(b) for b in encoded], dtype=np.int64))


def merge_ids(directory: Path, prefixes: Sequence[str | Path], documents: int) -> None:
    """The segments' ids, in document order, into ``directory``'s ``ids.bin.tmp`` and ``ids.offsets.npy.tmp``."""
    offsets = np.zeros(documents + 1, np.int64)
    done = 0
    with open(directory / "ids.bin.tmp", "wb") as blob:
        for prefix in prefixes:
            lengths = np.load(f"{prefix}.idlengths.npy")
            np.cumsum(lengths, out=offsets[done + 1:done + 1 + len(lengths)])
            offsets[done + 1:done + 1 + len(lengths)] += offsets[done]
            done += len(lengths)
            with open(f"{prefix}.ids.bin", "rb") as part:
                shutil.copyfileobj(part, blob)
    if done != documents:
        raise ValueError(f"the segments of {str(directory)!r} hold {done} ids for {documents} documents: "
                         f"corrupted; build the index again.")
    with open(directory / "ids.offsets.npy.tmp", "wb") as f:  # a file object: np.save adds no ".npy"
        np.save(f, offsets)


class IdTable:
    """The ids of a finished index's documents, read from the memory-mapped :data:`ID_FILES` on demand."""

    def __init__(self, directory: Path, id_bytes: np.ndarray | None, id_offsets: np.ndarray | None):
        self.directory, self.id_bytes, self.id_offsets = directory, id_bytes, id_offsets

    def problem(self, documents: int, full: bool) -> str | None:
        """Why the id files do not hold one id per document, or ``None`` (also when the index has no ids)."""
        if self.id_offsets is not None and (
                self.id_offsets.shape != (documents + 1,) or self.id_offsets[-1] != len(self.id_bytes)
                or (full and (np.diff(self.id_offsets) < 0).any())):
            return "the ids' offsets do not cover ids.bin, one id per document"
        return None

    def __call__(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        if self.id_offsets is None:
            raise ValueError(f"the index in {str(self.directory)!r} was built without document ids; its results are "
                             f"positions in the corpus (build it with ids to have them named).")
        positions = np.asarray(positions, dtype=np.int64)
        starts, ends = self.id_offsets[positions], self.id_offsets[positions + 1]
        return [bytes(self.id_bytes[a:b]).decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist())]


#: an append's manifest, written once every new file is in place beside the old one as ``NAME.next``: from then on
#: the append is committed, and :func:`finish_replace` (idempotent) swaps the files in and renames it manifest.json
NEXT_MANIFEST = "manifest.next.json"


def commit_replace(directory: Path, manifest: dict[str, Any], names: Sequence[str]) -> None:
    """Replaces ``directory``'s files (or sub-directories) ``names`` by their ``NAME.next`` and its manifest by
    ``manifest``, as one step for a reader: the old index loads until the commit, the new one after it, and a kill
    in between leaves no manifest.json (nothing loads) until :func:`finish_replace` runs again."""
    write_atomically(directory / NEXT_MANIFEST, json.dumps({**manifest, "replacing": list(names)}, indent=2) + "\n")
    finish_replace(directory)


def finish_replace(directory: Path) -> bool:
    """Completes a committed :func:`commit_replace` in ``directory`` (a no-op without one); ``True`` if there was."""
    pending = directory / NEXT_MANIFEST
    if not pending.is_file():
        return False
    manifest = json.loads(pending.read_text())
    (directory / "manifest.json").unlink(missing_ok=True)
    for name in manifest.pop("replacing"):
        new, old = directory / f"{name}.next", directory / f"{name}.old"
        if new.is_dir():  # a directory cannot be renamed over a full one: the old one goes aside first
            if (directory / name).exists():
                os.replace(directory / name, old)
            os.replace(new, directory / name)
        elif new.exists():
            os.replace(new, directory / name)
        if old.is_dir():
            shutil.rmtree(old)
    write_atomically(pending, json.dumps(manifest, indent=2) + "\n")
    os.replace(pending, directory / "manifest.json")
    return True
