"""Run directories: a run owns its output directory, and a resumed run is the same run.

:class:`RunDirectory` is opened (a context manager) before anything is written:

* it takes an exclusive lock (``.lock``, an OS file lock released even when the process is
  killed): a second run into the same directory fails at once, naming the holder;
* a directory that holds a run (``run.json``, checkpoints, a saved model or metrics) is
  never written to unless ``resume`` (continue it) or ``overwrite`` (replace it) is given;
  a non-empty directory holding something else is refused the same way, and left exactly as it was
  (no ``.lock`` stays behind). A run that never trained (it failed, or was killed, before its first
  step: no checkpoint, no model, no training record in ``metrics.jsonl``) claims nothing: the next
  run takes its directory as if it were empty, and ``--resume`` starts it afresh;
* ``overwrite`` builds the new run in a hidden sibling (``.NAME.overwrite``) and swaps it
  into place only when :meth:`commit` is called — after the new run's first checkpoint —
  so a run that fails early leaves the old directory exactly as it was;
* ``run.json`` stores fingerprints of what defines the run (model config, tokenizer, data,
  source text, settings); :meth:`check` records one and, on a resumed run, refuses a
  different one with a message naming each difference (which input, then and now).

Locking uses ``fcntl.flock`` (POSIX) or ``msvcrt.locking`` (Windows).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bertkit.io import DirectoryInUse, atomic_write_text, lock_directory

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
#: the suffix of the hidden sibling an ``overwrite`` run is built in (:func:`staging_path`)
STAGING_SUFFIX = ".overwrite"
METRICS_FILE = "metrics.jsonl"
#: what marks a directory as holding a run (older runs have no run.json)
RUN_MARKERS = (RUN_FILE, "checkpoints", "model", METRICS_FILE)
#: what only a run that trained writes: a checkpoint, or the saved model
TRAINED_MARKERS = ("checkpoints", "model")


class RunDirectoryError(ValueError):
    """The output directory cannot be used as asked (in use, holds another run, or differs on resume)."""


class RunDirectory:
    """The directory a run writes to; see the module docstring. ``path`` is where to write *now*."""

    def __init__(self, path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False):
        if resume and overwrite:
            raise RunDirectoryError("resume and overwrite are alternatives: --resume continues the run in the "
                                    "directory, --overwrite replaces it; pass one.")
        self.final = Path(path).absolute()
        self.path = self.final
        self.resume, self.overwrite = resume, overwrite
        self.resumed = False
        self.info: dict[str, Any] = {}
        self._locks: list[int] = []
        self._staging: Path | None = None
        #: a ``.lock`` this run created in a directory it did not take (refused, or an uncommitted overwrite)
        self._borrowed_lock: Path | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RunDirectory:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> RunDirectory:
        """Lock the directory and decide where the run writes (see the module docstring)."""
        try:
            return self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> RunDirectory:
        final = self.final
        if final.exists() and not final.is_dir():
            raise RunDirectoryError(f"{final} is a file; the output must be a directory.")
        if final.is_dir() and not _unstarted(final):
            if not (final / LOCK_FILE).exists():  # the user's files (or an old run's): leave them as they were
                self._borrowed_lock = final / LOCK_FILE
            self._locks.append(_lock(final))
            if holds_run(final) and self.resume:
                self.resumed, self._borrowed_lock = True, None  # the run's own directory: its lock stays
                self.info = read_run_info(final)
            elif self.overwrite:
                self._staging = staging_path(final)
                shutil.rmtree(self._staging, ignore_errors=True)  # left by an overwrite that never committed
                self._staging.mkdir(parents=True)
                self._locks.append(_lock(self._staging))
                self.path = self._staging
            elif holds_run(final):
                raise RunDirectoryError(f"{final} already holds a run{describe_run(final)}; pass --resume to "
                                        "continue it (Python: resume=True) or --overwrite to replace it "
                                        "(overwrite=True), or choose another output directory.")
            else:
                raise RunDirectoryError(f"{final} is not empty and holds no bertkit run; choose an empty or new "
                                        "directory, or pass --overwrite (overwrite=True) to replace its contents.")
        else:
            final.mkdir(parents=True, exist_ok=True)
            self._locks.append(_lock(final))
        self.info.setdefault("format", "bertkit-run")
        self.info.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        return self

    def commit(self) -> None:
        """Put an ``overwrite`` run in place of the old directory (a no-op otherwise); ``path`` becomes ``final``."""
        if self._staging is None or self.path == self.final:
            return
        replaced = self.final.parent / f".{self.final.name}.replaced"
        shutil.rmtree(replaced, ignore_errors=True)
        os.replace(self.final, replaced)
        os.replace(self._staging, self.final)
        shutil.rmtree(replaced, ignore_errors=True)
        self.path, self._staging, self._borrowed_lock = self.final, None, None

    def close(self) -> None:
        """Release the locks; an ``overwrite`` run that never committed is removed (the old one stays, without
        a ``.lock`` it did not have: so does a refused directory)."""
        if self._borrowed_lock is not None:
            self._borrowed_lock.unlink(missing_ok=True)  # while still held: no other run can take it meanwhile
            self._borrowed_lock = None
        for fd in self._locks:
            os.close(fd)  # closing releases the lock
        self._locks.clear()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    # ------------------------------------------------------------------ fingerprints
    def check(self, section: str, value: Mapping[str, Any]) -> None:
        """Record ``value`` (JSON-able) as ``section`` of run.json; on a resumed run that recorded a different
        one, raise :class:`RunDirectoryError` listing each difference."""
        value = json.loads(json.dumps(value))
        stored = self.info.get(section)
        if self.resumed and stored is not None and stored != value:
            raise RunDirectoryError(f"cannot resume {self.final}: its {section} differs from this one's (then -> "
                                    f"now): "
                                    f"{'; '.join(differences(stored, value))}. Resume with the run's own "
                                    f"{section}, or start a new run (another -o, or --overwrite).")
        self.info[section] = value

    def record(self, section: str, value: Mapping[str, Any]) -> None:
        """Store ``value`` as ``section`` of run.json without comparing (what was checked elsewhere)."""
        self.info[section] = json.loads(json.dumps(value))

    def save(self) -> None:
        """Write run.json (atomically)."""
        atomic_write_text(self.path / RUN_FILE, json.dumps(self.info, indent=2, sort_keys=True) + "\n")


def open_run(path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False):
    """The run directory as a context manager: a :class:`RunDirectory` on the main process; under torchrun
    the other ranks get a :class:`FollowerRun` (rank 0 checks and locks; they only write where it says)."""
    import contextlib

    from bertkit.training.distributed import launched_by_torchrun

    if launched_by_torchrun() and int(os.environ["RANK"]) != 0:
        return contextlib.nullcontext(FollowerRun(Path(path).absolute(), resume))
    return RunDirectory(path, resume=resume, overwrite=overwrite)


class FollowerRun:
    """What a non-main DDP rank knows of the run directory: where it is and whether the run resumes."""

    def __init__(self, path: Path, resumed: bool):
        self.path, self.final, self.resumed, self.info = path, path, resumed, {}

    def check(self, section: str, value: Any) -> None:
        pass

    def record(self, section: str, value: Any) -> None:
        pass

    def save(self) -> None:
        pass

    def commit(self) -> None:
        pass


def staging_path(final: Path) -> Path:
    """Where an ``overwrite`` run is built before it replaces ``final``: the hidden sibling ``.NAME.overwrite``."""
    return final.parent / f".{final.name}{STAGING_SUFFIX}"


def final_name(path: Path) -> str:
    """The name of the run directory ``path`` is or becomes (a staging directory's: the one it replaces)."""
    name = path.name
    if name.startswith(".") and name.endswith(STAGING_SUFFIX):
        return name[1:-len(STAGING_SUFFIX)]
    return name


def holds_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a bertkit run (see :data:`RUN_MARKERS`); a run that never trained (it failed or was
    killed before its first step) is none."""
    return any((Path(path) / marker).exists() for marker in RUN_MARKERS) and not _unstarted(Path(path))


def _unstarted(directory: Path) -> bool:
    """Whether ``directory`` holds no run to continue or protect: nothing but a ``.lock``, or a bertkit run that
    never trained (its run.json, and no checkpoint, model or training record: what a run writes before its first
    step, such as a step-0 evaluation in metrics.jsonl, is no training)."""
    names = {p.name for p in directory.iterdir()}
    if names <= {LOCK_FILE}:
        return True
    if RUN_FILE not in names or any(marker in names for marker in TRAINED_MARKERS):
        return False
    try:
        if read_run_info(directory).get("format") != "bertkit-run":
            return False
    except RunDirectoryError:
        return False
    return not _trained_steps(directory / METRICS_FILE)


def _trained_steps(metrics: Path) -> bool:
    """Whether ``metrics`` (a metrics.jsonl) records a training step (an unreadable line counts as one)."""
    if not metrics.exists():
        return False
    with open(metrics, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return True  # not what a run writes before its first step: keep the directory
            if not isinstance(record, dict) or record.get("split") != "eval":
                return True
    return False


def read_run_info(path: str | os.PathLike) -> dict[str, Any]:
    """``run.json`` of a run directory ({} for runs older than run.json); a damaged file is an error."""
    file = Path(path) / RUN_FILE
    if not file.exists():
        return {}
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunDirectoryError(f"{file} is damaged ({error}); restore it or start a new run.") from None
    if not isinstance(info, dict):
        raise RunDirectoryError(f"{file} is damaged (not a JSON object); restore it or start a new run.")
    return info


def describe_run(path: Path) -> str:
    """`` (task, created ...)`` from run.json, or ``""``."""
    try:
        info = read_run_info(path)
    except RunDirectoryError:
        return " (run.json is damaged)"
    task = info.get("task")
    parts = [str(task.get("name", task) if isinstance(task, dict) else task)] if task else []
    parts += [f"created {info['created']}"] if "created" in info else []
    return f" ({', '.join(parts)})" if parts else ""


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``"key: old -> new"`` for each leaf that differs between two JSON-like values; lists of one length are
    compared item by item (``data.train[0].sha256: ...``), an item that names itself (``"name"``, a file's) named
    too (``data.train[0] (train.tsv).bytes: ...``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in old:
                found.append(f"{name}: (absent) -> {new[key]!r}")
            elif key not in new:
                found.append(f"{name}: {old[key]!r} -> (absent)")
            else:
                found += differences(old[key], new[key], name)
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for i, (a, b) in enumerate(zip(old, new)):
            named = a.get("name") if isinstance(a, dict) and isinstance(b, dict) and a.get("name") == b.get("name") \
                else None
            found += differences(a, b, f"{prefix}[{i}]" + (f" ({named})" if named else ""))
        return found
    return [] if old == new else [f"{prefix or 'value'}: {old!r} -> {new!r}"]


def file_fingerprint(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Name, size and sha256 of each file, in order (what a run was built from)."""
    found = []
    for path in paths:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        found.append({"name": Path(path).name, "bytes": os.path.getsize(path), "sha256": digest.hexdigest()})
    return found


# ---------------------------------------------------------------------- locking
def _lock(directory: Path) -> int:
    """An exclusive, non-blocking lock on ``directory/.lock`` (:func:`bertkit.io.lock_directory`)."""
    try:
        return lock_directory(directory, "run")
    except DirectoryInUse as error:
        raise RunDirectoryError(str(error)) from None
