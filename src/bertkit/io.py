"""Atomic file writes (a temp file in the target's directory, fsync, then rename), and JSON files read with
errors that name the file, line and column (:func:`read_json`).

A crash mid-write leaves the previous file (or none) in place, never a torn one. Files
and directories get the permissions the user's umask gives (``0o666 & ~umask`` and
``0o777 & ~umask``), not the private ``0o600`` / ``0o700`` of :mod:`tempfile`. A write
that fails for lack of space (``ENOSPC``, or the C++ stream error torch reports for it)
becomes an :class:`OSError` naming the target path and the free space left. :func:`refuse_output_over_input`
is the check every writing command makes first: its output must not be, nor hold, one of its inputs, nor lie
inside a model directory it reads.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process's current umask. Linux reports it in ``/proc/self/status``, read without touching it (so a
    thread creating a file meanwhile is unaffected); elsewhere it is set and restored at once, under a lock."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def apply_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (a file or a directory) the permissions a plain ``open`` / ``mkdir`` would have."""
    full = 0o777 if os.path.isdir(path) else 0o666
    os.chmod(path, full & ~umask())


def make_temp_dir(parent: str | os.PathLike, prefix: str) -> str:
    """A new hidden-by-prefix directory in ``parent`` with umask permissions (``tempfile.mkdtemp`` gives 0700)."""
    os.makedirs(parent, exist_ok=True)
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    apply_umask(path)
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    On failure ``path`` is untouched and the temporary file removed; running out of disk
    space raises ``OSError(ENOSPC)`` naming ``path`` (see :func:`disk_full_error`). A ``path``
    that is a directory is refused at once: ``IsADirectoryError`` naming it (not the temporary file).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"cannot write {path}: it is a directory, not a file; give the path "
                                              "of a file to write (inside it or elsewhere)")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        try:
            yield tmp
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        except Exception as error:  # only a full disk is translated; anything else is re-raised as it is
            if is_disk_full(error):
                raise disk_full_error(path, error) from error
            raise
        apply_umask(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` and move the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        write(tmp)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


#: how writers report a full disk without an errno: torch's C++ stream ("basic_ios::clear: iostream error",
#: "unexpected pos N vs M" from its zip writer) and safetensors' Rust I/O error ("os error 28")
_DISK_FULL_MARKERS = ("iostream error", "unexpected pos", "No space left", "os error 28", "os error 122")


def is_disk_full(error: BaseException) -> bool:
    """True for ``ENOSPC`` / ``EDQUOT`` and for the errno-less messages torch and safetensors give on a full disk."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return True
    return any(marker in str(error) for marker in _DISK_FULL_MARKERS)


def disk_full_error(path: str | os.PathLike, cause: BaseException) -> OSError:
    """An ``OSError(ENOSPC)`` that names ``path`` and the free space of its file system."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        free = f"{shutil.disk_usage(directory).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    return OSError(errno.ENOSPC, f"could not write {os.fspath(path)}: no space left on the device ({free}; "
                                 f"{type(cause).__name__}: {cause}). Free some space and run again")


def refuse_output_over_input(output: tuple[str, str | os.PathLike | None],
                             inputs: list[tuple[str, str | os.PathLike | list | tuple | None]],
                             models: list[tuple[str, str | os.PathLike | None]] = ()) -> None:
    """Raise ``ValueError`` if writing ``output`` would replace or remove one of ``inputs`` or ``models``, or
    write into one of ``models``; call before any work: every writing command's one guard.

    ``output`` is ``(option, path)``, ``inputs`` a list of ``(option, path or paths)``; options name the
    command-line flags (``"-o"``, ``"--data"``) for the message, and a None path is skipped. A conflict is an
    output that is an input (the same file or directory, however reached: relative or absolute path, a symlink,
    a hard link), or an output directory holding an input (a file or directory anywhere beneath it). An input
    that does not exist (a registry name) is skipped, except a TensorFlow checkpoint prefix, whose ``.index`` /
    ``.data-*`` files are checked. An output that does not exist yet conflicts with no input.

    ``models`` are the inputs read as a model, tokenizer or run directory (``(option, path)``): besides the
    conflicts above, an output inside one of those directories (``-o MODEL/config.json``, existing or not, at
    any depth) is refused, since the file written there would replace or join the model's own files. An input
    directory of data (``--data``, ``--text``) may hold the output.
    """
    out_flag, out_path = output
    if out_path is None:
        return
    for flag, path in models:
        if path is not None and os.path.isdir(path) and _lies_inside(out_path, path):
            raise ValueError(f"{out_flag} {os.fspath(out_path)} ({os.path.realpath(out_path)}) lies inside the "
                             f"directory {flag} {os.fspath(path)}, which this command reads as a model: writing "
                             f"there could replace the model's files; choose an {out_flag} path outside it.")
    try:
        out_stat = os.stat(out_path)
    except OSError:
        return
    for flag, paths in [*inputs, *models]:
        for path in [paths] if isinstance(paths, str | os.PathLike) else (paths or []):
            for existing in _existing_files(os.fspath(path)):
                how = _overlap(out_stat, existing)
                if how:
                    raise ValueError(_conflict_message(out_flag, os.fspath(out_path), flag, os.fspath(path), how))


def refuse_nonempty_folder(flag: str, path: str | os.PathLike, writes: str) -> None:
    """Raise ``ValueError`` if ``path`` is a file, or a folder that holds anything: a command that writes a new
    model folder (``writes``, e.g. "the static model") would replace or mix with what is there. Call before any
    work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file; {writes} is a folder: choose a new or empty folder path.")
    held = sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []
    if held:
        shown = ", ".join(held[:5]) + (f" ... ({len(held)} entries)" if len(held) > 5 else "")
        raise ValueError(f"{flag} {path} is not empty (it holds {shown}); writing {writes} there would replace or mix "
                         "with those files: choose a new or empty folder, or remove it first.")


def _lies_inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether ``path`` (existing or not, symlinks resolved) lies somewhere beneath ``directory``."""
    target = os.stat(directory)
    for parent in Path(os.path.realpath(path)).parents:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.stat(parent), target):
                return True
    return False


def _existing_files(path: str) -> list[str]:
    """``path`` itself if it exists, else a TF checkpoint prefix's files, else nothing."""
    if os.path.exists(path):
        return [path]
    index = path + ".index"
    return [index, *glob.glob(glob.escape(path) + ".data-*")] if os.path.isfile(index) else []


def _overlap(out_stat: os.stat_result, path: str) -> str | None:
    """``"is"`` if ``path`` is the output, ``"holds"`` if it lies inside the output directory, else None."""
    if os.path.samestat(os.stat(path), out_stat):
        return "is"
    if stat.S_ISDIR(out_stat.st_mode):
        for parent in Path(os.path.realpath(path)).parents:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.stat(parent), out_stat):
                    return "holds"
    return None


def _conflict_message(out_flag: str, out_path: str, flag: str, path: str, how: str) -> str:
    where = f"{out_flag} {out_path} ({os.path.realpath(out_path)})"
    if how == "is":
        return (f"{where} is the input {flag} {path}: writing it would destroy the input; choose another "
                f"{out_flag} path.")
    return (f"{where} is a directory holding the input {flag} {path}: writing into it could replace or remove "
            f"the input; choose another {out_flag} directory, or move the input out of it.")


def read_json(path: str | os.PathLike, what: str = "JSON") -> Any:
    """The parsed content of the JSON file ``path``; ``what`` says what it should hold (``"the model's
    config"``), for the error.

    Raises ``ValueError`` naming ``path`` for text that is not UTF-8 (the byte) or not JSON (the line and
    column), and for a directory; a missing file is ``FileNotFoundError`` (``OSError``) naming it.
    """
    if os.path.isdir(path):
        raise ValueError(f"{os.fspath(path)} is a directory, not a file holding {what}.")
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{os.fspath(path)} is not UTF-8 text (at byte {error.start}: {error.reason}), so not "
                         f"{what}; restore the file or write it as UTF-8 JSON.") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{os.fspath(path)} is not valid JSON ({error.msg}: line {error.lineno}, column "
                         f"{error.colno}); it should hold {what}: fix or restore the file.") from None


def read_json_object(path: str | os.PathLike, what: str = "a JSON object") -> dict[str, Any]:
    """:func:`read_json` for a file that must hold a JSON object (``{...}``); anything else is a
    ``ValueError`` naming ``path`` and what it holds instead."""
    value = read_json(path, what)
    if not isinstance(value, dict):
        raise ValueError(f"{os.fspath(path)} holds a JSON {_JSON_TYPES.get(type(value), type(value).__name__)}, "
                         f"not a JSON object; it should hold {what}: fix or restore the file.")
    return value


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def check_link(path: str | os.PathLike) -> None:
    """Nothing when ``path`` is not a symbolic link or resolves; for a link that does not resolve an
    ``OSError`` naming it: ``ELOOP`` for a link loop (it leads back to itself), ``FileNotFoundError``
    for a dangling link (its target, named, does not exist)."""
    if not os.path.islink(path):
        return
    try:
        os.stat(path)
    except OSError as error:
        target = os.readlink(path)
        if error.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{os.fspath(path)} is a symbolic link that cannot be resolved: it leads back "
                                       f"to itself (a link loop, via {target!r}); replace it with the file it "
                                       "should be, or a link to that file") from None
        raise FileNotFoundError(errno.ENOENT, f"{os.fspath(path)} is a symbolic link to {target!r}, which does not "
                                              "exist; restore the target or replace the link") from None


class DirectoryInUse(ValueError):
    """Another process holds the directory's lock."""


def lock_directory(directory: str | os.PathLike, user: str) -> int:
    """An exclusive, non-blocking lock on ``directory/.lock``; returns the open descriptor that holds it (closing
    it releases the lock; so does the process's end, however it ends). The file says who holds it; a second
    ``user`` (e.g. "run") is refused at once with :class:`DirectoryInUse` naming the holder."""
    path = os.path.join(directory, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _try_lock(fd)
    except OSError:
        try:
            holder = Path(path).read_text(encoding="utf-8").strip() or "an unknown process"
        except OSError:
            holder = "an unknown process"
        os.close(fd)
        raise DirectoryInUse(f"{directory} is in use by another {user} ({holder}); wait for it to finish, stop it, "
                             "or choose another output directory.") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    return fd


def _try_lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
