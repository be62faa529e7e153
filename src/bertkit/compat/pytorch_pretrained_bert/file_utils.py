"""pytorch_pretrained_bert 0.6.2's ``file_utils``: a cache of downloaded files, on bertkit's downloader.

:func:`cached_path` takes what 0.6.2's takes and returns a local path:

* an existing local path: returned as is;
* the URL of a checkpoint in bertkit's weights registry (the values of
  ``PRETRAINED_MODEL_ARCHIVE_MAP`` / ``PRETRAINED_VOCAB_ARCHIVE_MAP``): fetched and converted
  once by :func:`bertkit.weights.download.fetch` (into ``cache_dir`` as a bertkit cache
  root, default bertkit's cache), and the checkpoint's directory returned (``config.json``,
  ``model.safetensors``, ``vocab.txt``);
* any other ``http(s)://`` (or ``file://``) URL: downloaded once with
  :func:`bertkit.weights.download.download_file` (resumable, atomic) to
  ``cache_dir/url_to_filename(url)``, beside 0.6.2's metadata file ``<that>.json``
  (``{"url", "etag"}``), and that path returned.

0.6.2's errors: a missing local file is ``EnvironmentError`` (``OSError``), anything that
is neither a path nor a URL ``ValueError``. Differences from 0.6.2: no ETag request is made,
so a cached file is reused without contacting the server (as 0.6.2 itself does when it
cannot reach it, which includes files 0.6.2 downloaded into the same ``cache_dir`` under
``<hash of url>.<hash of etag>``); ``s3://`` URLs are not supported (``ValueError``); in
offline mode (``BERTKIT_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``) a file not yet cached raises
:class:`~bertkit.weights.download.WeightsNotCachedError` (a ``FileNotFoundError``) naming
the URL and where to put the file. ``PYTORCH_PRETRAINED_BERT_CACHE`` is 0.6.2's: the
environment variable of that name, else ``~/.pytorch_pretrained_bert``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
import tempfile
from hashlib import sha256
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

from bertkit.io import atomic_write_text, read_json_object
from bertkit.weights import download
from bertkit.weights.registry import entries

logger = logging.getLogger(__name__)

#: Where downloads are cached: ``$PYTORCH_PRETRAINED_BERT_CACHE``, else ``~/.pytorch_pretrained_bert``.
PYTORCH_PRETRAINED_BERT_CACHE = Path(os.getenv("PYTORCH_PRETRAINED_BERT_CACHE",
                                               Path.home() / ".pytorch_pretrained_bert"))
#: The config file of a saved model directory (``save_pretrained`` / ``from_pretrained``).
CONFIG_NAME = "config.json"
#: The weights file of a saved model directory (a ``torch.save`` state dict).
WEIGHTS_NAME = "pytorch_model.bin"

#: URL schemes downloaded here (``file`` serves local mirrors and tests).
_DOWNLOAD_SCHEMES = ("http", "https", "file")


def url_to_filename(url: str, etag: str | None = None) -> str:
    """The cache file name of ``url``: sha256 hex of the URL, then ``.`` and the sha256 hex of ``etag`` if given."""
    filename = sha256(url.encode("utf-8")).hexdigest()
    if etag:
        filename += "." + sha256(etag.encode("utf-8")).hexdigest()
    return filename


def filename_to_url(filename: str, cache_dir: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """``(url, etag)`` recorded for the cached ``filename``; ``EnvironmentError`` if it or its metadata is missing."""
    cache_path = os.path.join(_cache_root(cache_dir), filename)
    if not os.path.exists(cache_path):
        raise OSError(f"file {cache_path} not found")
    meta_path = cache_path + ".json"
    if not os.path.exists(meta_path):
        raise OSError(f"file {meta_path} not found")
    metadata = read_json_object(meta_path, "a cache entry's metadata ({\"url\": ..., \"etag\": ...})")
    return metadata["url"], metadata["etag"]


def cached_path(url_or_filename: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """A local path for ``url_or_filename``, downloading (once) if it is a URL; see the module docstring."""
    url_or_filename = os.fspath(url_or_filename)
    parsed = urlparse(url_or_filename)
    if parsed.scheme == "s3":
        raise ValueError(f"unable to fetch {url_or_filename}: s3:// URLs are not supported by bertkit (they "
                         "need boto3); use the object's https:// URL.")
    if parsed.scheme in _DOWNLOAD_SCHEMES:
        registered = {entry.url: entry for entry in entries()}.get(url_or_filename)
        if registered is not None:
            return str(download.fetch(registered, cache_dir=cache_dir))
        return get_from_cache(url_or_filename, cache_dir)
    if os.path.exists(url_or_filename):
        return url_or_filename
    if parsed.scheme == "":
        raise OSError(f"file {url_or_filename} not found")
    raise ValueError(f"unable to parse {url_or_filename} as a URL or as a local path")


def get_from_cache(url: str, cache_dir: str | os.PathLike | None = None) -> str:
    """The cached copy of ``url`` in ``cache_dir`` (default :data:`PYTORCH_PRETRAINED_BERT_CACHE`); downloads it once.

    The file is ``url_to_filename(url)`` (or one 0.6.2 stored as ``url_to_filename(url, etag)``),
    with ``{"url", "etag": null}`` in ``<file>.json``.
    """
    root = _cache_root(cache_dir)
    os.makedirs(root, exist_ok=True)
    filename = url_to_filename(url)
    cache_path = os.path.join(root, filename)
    if not os.path.exists(cache_path):
        earlier = sorted(f for f in fnmatch.filter(os.listdir(root), filename + ".*") if not f.endswith(".json"))
        if earlier:  # downloaded by 0.6.2, named after the server's ETag
            return os.path.join(root, earlier[-1])
        reason = download.offline_reason()
        if reason:
            raise download.WeightsNotCachedError(f"{url} is not cached and cannot be downloaded ({reason}); "
                                                 f"download it and save it as {cache_path}.",
                                                 [(url, Path(cache_path))])
        logger.info("%s not found in cache, downloading to %s", url, cache_path)
        download.download_file(url, cache_path)
        atomic_write_text(cache_path + ".json", json.dumps({"url": url, "etag": None}))
    return cache_path


def http_get(url: str, temp_file: IO[bytes]) -> None:
    """Write the content of ``url`` into the open binary file ``temp_file`` (with a progress bar)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = download.download_file(url, Path(tmp) / "download")
        with open(path, "rb") as downloaded:
            shutil.copyfileobj(downloaded, temp_file)


def read_set_from_file(filename: str | os.PathLike) -> set[str]:
    """The set of the lines of ``filename`` (UTF-8), each without its trailing whitespace."""
    with open(filename, encoding="utf-8") as file_:
        return {line.rstrip() for line in file_}


def get_file_extension(path: str, dot: bool = True, lower: bool = True) -> str:
    """``path``'s extension (``".txt"``; without the dot if not ``dot``; lower-cased if ``lower``)."""
    ext = os.path.splitext(path)[1]
    ext = ext if dot else ext[1:]
    return ext.lower() if lower else ext


def _cache_root(cache_dir: str | os.PathLike | None) -> str:
    return os.fspath(PYTORCH_PRETRAINED_BERT_CACHE if cache_dir is None else cache_dir)


__all__ = ["CONFIG_NAME", "PYTORCH_PRETRAINED_BERT_CACHE", "WEIGHTS_NAME", "cached_path", "filename_to_url",
           "get_file_extension", "get_from_cache", "http_get", "read_set_from_file", "url_to_filename"]
