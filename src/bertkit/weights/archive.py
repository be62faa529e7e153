"""Unpacking .zip / .tar(.gz) archives safely: nothing is written outside the target directory.

Absolute paths, drive letters, ``..`` components, links and device files are refused
(:class:`UnsafeArchiveError`) before anything is written; a corrupt archive is a
``ValueError`` naming the file.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO

CHUNK_SIZE = 1 << 20


class UnsafeArchiveError(ValueError):
    """An archive member would land outside the target directory, or is a link / special file."""


def safe_extract(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack ``archive`` (zip or tar, compressed or not) into ``dest``; returns ``dest``."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                _unpack(archive, dest, _zip_members(archive, zf))
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive, "r:*") as tf:
                _unpack(archive, dest, _tar_members(archive, tf))
        else:
            raise ValueError(f"{archive} is neither a zip nor a tar archive; was the download an HTML error page?")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
        raise ValueError(f"{archive} is not a readable archive ({e}); it may be truncated or corrupt.") from e
    return dest


#: a member: (its name, whether it is a directory, a function opening its contents)
Member = tuple[str, bool, Callable[[], IO[bytes]]]


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> list[Member]:
    members = []
    for info in zf.infolist():
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise UnsafeArchiveError(f"Refusing to unpack {archive.name}: member {info.filename!r} is a "
                                     "symbolic link.")
        members.append((info.filename, info.is_dir(), lambda info=info: zf.open(info)))
    return members


def _tar_members(archive: Path, tf: tarfile.TarFile) -> list[Member]:
    members = []
    for m in tf.getmembers():
        if not (m.isfile() or m.isdir()):
            raise UnsafeArchiveError(f"Refusing to unpack {archive.name}: member {m.name!r} is a link or "
                                     "special file.")
        members.append((m.name, m.isdir(), lambda m=m: tf.extractfile(m)))
    return members


def _unpack(archive: Path, dest: Path, members: list[Member]) -> None:
    for name, _, _ in members:  # check every member before writing any
        _check_member(archive, name)
    for name, is_dir, open_member in members:
        out = dest.joinpath(*_parts(name))
        if is_dir:
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        with open_member() as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK_SIZE)


def _parts(name: str) -> list[str]:
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def _check_member(archive: Path, name: str) -> None:
    normalized = name.replace("\\", "/")
    if (normalized.startswith("/") or PurePosixPath(normalized).is_absolute()
            or (len(normalized) > 1 and normalized[1] == ":") or ".." in normalized.split("/")):
        raise UnsafeArchiveError(f"Refusing to unpack {archive.name}: member {name!r} would be written outside "
                                 "the target directory (absolute path or '..'); the archive is corrupt or malicious.")


__all__ = ["UnsafeArchiveError", "safe_extract"]
