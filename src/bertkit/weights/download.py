"""Fetching registered checkpoints: download once (resumable, verified), unpack safely, convert to HF format.

:func:`fetch` turns a :class:`~bertkit.weights.registry.WeightsEntry` (or a member / name)
into a local HF-format directory — ``config.json``, ``model.safetensors``, ``vocab.txt``,
``tokenizer_config.json`` — that ``from_pretrained`` and ``BERTTokenizerFast.from_pretrained``
read. The cache (``$BERTKIT_HOME``, else ``~/.cache/bertkit``; or ``cache_dir=``) holds::

    downloads/<name>/<file>           the published files, as published (kept: the source of truth)
    downloads/<name>/<file>.part      an interrupted download; the next call resumes it (HTTP Range)
    hf/<name>/                        the converted directory fetch returns
    hf/<name>/.bertkit-complete       written last; a directory without it is rebuilt
    locks/<name>.lock, tmp/           a per-checkpoint lock (concurrent ranks wait) and scratch space

A completed ``hf/<name>`` is returned without any network access. Offline
(``BERTKIT_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``, or ``offline=True``), or when the
download fails, :class:`WeightsNotCachedError` says which URL to download and the exact
path to put it at; the next call then uses that file. ``BERTKIT_WEIGHTS_URL_BASE``
(e.g. ``http://mirror.local/bert``) replaces the scheme and host of every URL and
prefixes its path, for mirrors.

Conversion is :func:`bertkit.weights.convert.convert` (any checkpoint directory to HF
format). Only ``urllib.request`` is used. Archives are unpacked member by member; absolute paths,
``..`` components, links and device files are refused (:class:`UnsafeArchiveError`).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import inspect
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bertkit.io import atomic_write_text, read_json_object
from bertkit.weights.archive import CHUNK_SIZE, UnsafeArchiveError, safe_extract
from bertkit.weights.registry import WeightsEntry, entries, lookup

ENV_HOME = "BERTKIT_HOME"
ENV_OFFLINE = ("BERTKIT_OFFLINE", "HF_HUB_OFFLINE")
ENV_URL_BASE = "BERTKIT_WEIGHTS_URL_BASE"
MARKER_NAME = ".bertkit-complete"
#: what a converted directory must hold
REQUIRED_FILES = ("config.json", "vocab.txt", "tokenizer_config.json")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


class WeightsNotCachedError(FileNotFoundError):
    """The checkpoint is not in the cache and could not be downloaded.

    ``missing`` lists ``(url, path)``: download ``url`` and save it as ``path``, and the
    next :func:`fetch` finds it there.
    """

    def __init__(self, message: str, missing: list[tuple[str, Path]]):
        super().__init__(message)
        self.missing = missing

    def __str__(self) -> str:
        return self.args[0]


class _IncompleteDownload(OSError):
    """The server sent fewer bytes than it announced."""


# ---------------------------------------------------------------------- settings
def cache_dir() -> Path:
    """The cache root: ``$BERTKIT_HOME`` if set, else ``~/.cache/bertkit``."""
    home = os.environ.get(ENV_HOME)
    return Path(home).expanduser() if home else Path.home() / ".cache" / "bertkit"


def _root(override: str | os.PathLike | None) -> Path:
    return Path(override).expanduser() if override is not None else cache_dir()


def offline_reason() -> str | None:
    """Which environment variable switched offline mode on, or None."""
    for name in ENV_OFFLINE:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"offline mode: {name}={os.environ[name]}"
    return None


def effective_url(url: str) -> str:
    """``url`` with ``$BERTKIT_WEIGHTS_URL_BASE``'s scheme and host (and path prefix) when it is set."""
    base = os.environ.get(ENV_URL_BASE, "").strip()
    if not base:
        return url
    b, u = urlsplit(base), urlsplit(url)
    return urlunsplit((b.scheme, b.netloc, b.path.rstrip("/") + u.path, u.query, ""))


# ---------------------------------------------------------------------- fetch
def fetch(weights: str | Enum | WeightsEntry, *, cache_dir: str | os.PathLike | None = None,
          progress: bool = True, offline: bool | None = None) -> Path:
    """The local HF-format directory of ``weights``, downloading and converting it the first time.

    Args:
        weights: a registry member (``BERT_Weights.DEFAULT``), a :class:`WeightsEntry`, or a
            name / alias (``"bert-base-uncased"``).
        cache_dir: cache root for this call (default :func:`cache_dir`).
        progress: show a tqdm progress bar per file (on stderr).
        offline: never touch the network; None reads ``BERTKIT_OFFLINE`` / ``HF_HUB_OFFLINE``.

    Returns ``<cache>/hf/<name>`` holding ``config.json``, ``model.safetensors``, ``vocab.txt``
    and ``tokenizer_config.json``. Raises :class:`WeightsNotCachedError` (offline or network
    failure: the message names the URL and where to put the file), ``ValueError`` on a sha256
    mismatch (naming the file, expected and actual digest) and :class:`UnsafeArchiveError`.
    """
    entry = lookup(weights)
    root = _root(cache_dir)
    target = root / "hf" / entry.name
    if _is_complete(target, entry):
        return target
    reason = ("offline mode: offline=True" if offline else None) if offline is not None else offline_reason()
    with _locked(root / "locks" / f"{entry.name}.lock"):
        if _is_complete(target, entry):  # another process finished it while we waited
            return target
        downloads = _ensure_downloads(entry, root / "downloads" / entry.name, progress=progress, offline=reason)
        _build(entry, downloads, target, root / "tmp")
    return target


def _ensure_downloads(entry: WeightsEntry, directory: Path, *, progress: bool, offline: str | None) -> list[Path]:
    files = [(effective_url(url), directory / name) for url, name in entry.downloads()]
    missing = [(url, path) for url, path in files if not path.is_file()]
    if missing and offline:
        raise _not_cached(entry, missing, offline)
    for i, (url, path) in enumerate(missing):
        try:
            download_file(url, path, sha256=entry.expected_sha256(path.name), progress=progress)
        except (OSError, http.client.HTTPException) as e:
            raise _not_cached(entry, missing[i:], f"download failed: {e!r}") from e
    already_there = {path for _, path in files} - {path for _, path in missing}
    for path in sorted(already_there):  # placed by hand or kept from an earlier run: verify before use
        expected = entry.expected_sha256(path.name)
        if expected is not None and (actual := sha256_of(path)) != expected:
            raise ValueError(f"{path} does not match the published sha256 of {entry.name}: expected {expected}, "
                             f"got {actual}. Delete it and fetch again (or put the right file there).")
    return [path for _, path in files]


def _not_cached(entry: WeightsEntry, missing: list[tuple[str, Path]], reason: str) -> WeightsNotCachedError:
    for _, path in missing:  # so the file can simply be dropped there
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(f"  {url}\n    -> {path}" for url, path in missing)
    return WeightsNotCachedError(
        f"{entry.name} is not in the bertkit cache and cannot be downloaded ({reason}).\n"
        f"Download {'this file' if len(missing) == 1 else 'these files'} (e.g. on a machine with network access) "
        f"and save {'it' if len(missing) == 1 else 'each'} at the path shown; the next call finds it there:\n{lines}",
        missing,
    )


# ---------------------------------------------------------------------- download
def download_file(url: str, dest: str | os.PathLike, *, sha256: str | None = None, progress: bool = True,
                  retries: int = 3, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` via ``dest.part`` (resumed with a Range request if present).

    A server that ignores Range (answers 200) restarts the file from zero. A connection that
    drops mid-file is resumed up to ``retries`` times. With ``sha256`` the finished file is
    verified; on mismatch the partial file is deleted and ``ValueError`` names the file and
    both digests. The final rename is atomic, so ``dest`` exists only complete.
    """
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    attempt = 0
    while True:
        before = part.stat().st_size if part.exists() else 0
        try:
            _download_to_part(url, part, progress=progress, timeout=timeout, desc=dest.name)
            break
        except (OSError, http.client.HTTPException):
            grew = part.exists() and part.stat().st_size > before
            attempt += 1
            if not grew or attempt > retries:
                raise
    if sha256 is not None:
        actual = sha256_of(part)
        if actual != sha256.lower():
            part.unlink()
            raise ValueError(f"sha256 mismatch for {dest.name} downloaded from {url}: expected {sha256.lower()}, "
                             f"got {actual}. The file was deleted; fetch again, and if it persists the "
                             "published file has changed or a proxy altered it.")
    os.replace(part, dest)
    return dest


def _download_to_part(url: str, part: Path, *, progress: bool, timeout: float, desc: str) -> None:
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "bertkit (weights download)"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not offset:
            raise
        total = _content_range(e.headers.get("Content-Range"))[1]
        e.close()
        if total != offset:  # the .part is not a prefix we can use: start again
            part.unlink()
            _download_to_part(url, part, progress=progress, timeout=timeout, desc=desc)
        return  # else: the .part already holds the whole file
    with response:
        status = getattr(response, "status", None) or 200
        length = response.headers.get("Content-Length")
        if offset and status == 206:
            start, total = _content_range(response.headers.get("Content-Range"))
            if start != offset:
                part.unlink()
                response.close()
                _download_to_part(url, part, progress=progress, timeout=timeout, desc=desc)
                return
            if total is None and length is not None:
                total = offset + int(length)
            mode = "ab"
        else:  # a fresh download, or a server that ignored Range and sends everything
            offset, mode = 0, "wb"
            total = int(length) if length is not None else None
        from bertkit.progress import progress_bar

        with open(part, mode) as f, progress_bar(total=total, initial=offset, unit="B", unit_scale=True,
                                                 unit_divisor=1024, desc=desc, disable=not progress,
                                                 leave=True) as bar:
            while chunk := response.read(CHUNK_SIZE):
                f.write(chunk)
                bar.update(len(chunk))
    size = part.stat().st_size
    if total is not None and size != total:
        raise _IncompleteDownload(f"{url}: received {size} of {total} bytes")


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``(first byte, total size)`` of a ``Content-Range: bytes a-b/total`` (or ``bytes */total``) header."""
    if not value or not value.strip().startswith("bytes"):
        return None, None
    spec = value.strip()[5:].strip()
    span, _, total = spec.partition("/")
    first = span.split("-", 1)[0]
    return (int(first) if first.isdigit() else None), (int(total) if total.isdigit() else None)


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------- unpack
def _checkpoint_root(directory: Path) -> Path:
    """The shallowest folder under ``directory`` that holds a checkpoint (Google zips wrap one folder)."""
    markers = ("config.json", "bert_config.json", "model.safetensors", "pytorch_model.bin", "bert_model.ckpt.index")
    found = sorted((len(p.relative_to(directory).parts), p) for p in [directory, *directory.rglob("*")]
                   if p.is_dir() and any((p / m).is_file() for m in markers))
    if not found:
        return directory
    shallowest = [p for depth, p in found if depth == found[0][0]]
    if len(shallowest) > 1:
        raise ValueError(f"The archive holds several checkpoints ({[p.name for p in shallowest]}); "
                         "a registry entry must describe one.")
    return shallowest[0]


# ---------------------------------------------------------------------- convert
def _converter():
    """The checkpoint converter, ``convert(source, dest, *, to="hf", ...)``; ImportError while there is none."""
    try:
        from bertkit.weights.convert import convert
    except ImportError:
        from bertkit.weights.formats import convert
    return convert


def _convert(source: Path, dest: Path, *, do_lower_case: bool | None = None) -> Path:
    """Write the HF-format directory ``dest`` from the checkpoint directory ``source``."""
    convert = _converter()
    if "do_lower_case" in inspect.signature(convert).parameters:
        return convert(source, dest, to="hf", do_lower_case=do_lower_case)
    return convert(source, dest, to="hf")


def _build(entry: WeightsEntry, downloads: list[Path], target: Path, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    for stale in scratch.glob(f"{entry.name}.*"):  # left by a crash; we hold this name's lock
        shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=f"{entry.name}.") as tmp:
        work = Path(tmp)
        if entry.format == "hf-dir":
            source = downloads[0].parent
        else:
            source = _checkpoint_root(safe_extract(downloads[0], work / "unpacked"))
        staging = work / "hf"
        _convert(source, staging, do_lower_case=entry.do_lower_case)
        _complete_tokenizer_files(entry, source, staging)
        problems = [f for f in REQUIRED_FILES if not (staging / f).is_file()]
        if not any((staging / f).is_file() for f in WEIGHT_FILES):
            problems.append(" or ".join(WEIGHT_FILES))
        if problems:
            raise RuntimeError(f"Converting {entry.name} produced no {', '.join(problems)} in {staging}; "
                               "the checkpoint converter did not write an HF-format directory.")
        marker = {"name": entry.name, "url": entry.url, "format": entry.format,
                  "sha256": {p.name: entry.expected_sha256(p.name) for p in downloads}}
        atomic_write_text(staging / MARKER_NAME, json.dumps(marker, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)


def _complete_tokenizer_files(entry: WeightsEntry, source: Path, staging: Path) -> None:
    """``vocab.txt`` from the source if the converter did not copy it; the entry's casing in tokenizer_config.json."""
    if not (staging / "vocab.txt").is_file() and (source / "vocab.txt").is_file():
        shutil.copyfile(source / "vocab.txt", staging / "vocab.txt")
    path = staging / "tokenizer_config.json"
    settings = read_json_object(path, "tokenizer settings") if path.is_file() else {}
    settings.update(do_lower_case=entry.do_lower_case, strip_accents=None)  # the registry knows the casing
    settings.setdefault("tokenizer_class", "BertTokenizer")
    settings.setdefault("model_max_length", int(entry.config.get("max_position_embeddings", 512)))
    atomic_write_text(path, json.dumps(settings, indent=2, sort_keys=True) + "\n")


def _is_complete(target: Path, entry: WeightsEntry) -> bool:
    try:
        marker = json.loads((target / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker.get("name") == entry.name and marker.get("url") == entry.url


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (POSIX ``flock``; no lock where that is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: concurrent fetches of one checkpoint are not serialised
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# ---------------------------------------------------------------------- from_pretrained
def _registered_name(name: str) -> WeightsEntry | None:
    """The entry whose name or alias is exactly ``name`` (member names are not accepted as paths)."""
    for entry in entries():
        if name == entry.name or name in entry.aliases:
            return entry
    return None


def missing_source(source: str | os.PathLike) -> str | None:
    """What a ``source`` that is no file or directory here and no registered name is told, when it looks like a
    Hugging Face Hub id (``org/name`` or a bare name): where bertkit looked (here and in its registry, never on
    the Hub) and how to fetch the model first. None for anything that looks like a path (the caller says what a
    checkpoint on disk is)."""
    text = os.fspath(source)
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text) or text.endswith((".safetensors", ".bin", ".pt")):
        return None
    local = text.rsplit("/", 1)[-1]
    hub_id = text if "/" in text else f"ORGANISATION/{text}"
    return (f"{text} is no file or directory here, nor a name in bertkit's registry (the checkpoints it downloads: "
            "Google's BERT releases, e.g. bert-base-uncased, google/bert_uncased_L-2_H-128_A-2); bertkit looked in "
            "both places and does not download other models from the Hugging Face Hub. Fetch the model first, on a "
            f"machine with network access: hf download {hub_id} --local-dir {local} (pip install huggingface_hub), "
            f"then pass that directory ({local}).")


def resolve_source(source: str | os.PathLike | Enum | WeightsEntry | None = None,
                   weights: str | Enum | WeightsEntry | None = None, *,
                   cache_dir: str | os.PathLike | None = None) -> str | os.PathLike:
    """What ``from_pretrained(source=None, *, weights=None)`` loads: a directory.

    Exactly one of ``source`` / ``weights``. ``weights`` (a member, entry or name) is fetched.
    A ``source`` that is a member or entry, or a string that is no existing path but a
    registered name or alias (``"bert-base-uncased"``), is fetched too; any other
    ``source`` is returned unchanged.
    """
    if (source is None) == (weights is None):
        raise TypeError("from_pretrained takes exactly one of `source` (a checkpoint directory) or `weights=` "
                        "(e.g. BERT_Weights.DEFAULT or 'bert-base-uncased')"
                        + (", not both." if source is not None else "; got neither."))
    if weights is not None:
        return fetch(weights, cache_dir=cache_dir)
    if isinstance(source, (Enum, WeightsEntry)):
        return fetch(source, cache_dir=cache_dir)
    if isinstance(source, str) and not os.path.exists(source) and (entry := _registered_name(source)) is not None:
        return fetch(entry, cache_dir=cache_dir)
    return source


__all__ = [
    "UnsafeArchiveError", "WeightsNotCachedError", "cache_dir", "download_file", "effective_url", "fetch",
    "missing_source", "offline_reason", "resolve_source", "safe_extract", "sha256_of",
]
