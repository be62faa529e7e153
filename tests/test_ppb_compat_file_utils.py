"""``bertkit.compat.pytorch_pretrained_bert.file_utils`` and the archive maps, against pytorch-pretrained-bert 0.6.2.

``cached_path`` resolves local paths as 0.6.2 does and downloads URLs through bertkit's
downloader: the tests use ``file://`` URLs and files placed in the cache by hand, and
replace ``bertkit.weights.download.fetch`` for registered checkpoints. Nothing touches the network.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import pytorch_pretrained_bert as ppb
import pytorch_pretrained_bert.file_utils as ppb_files
import pytorch_pretrained_bert.modeling as ppb_modeling
import pytorch_pretrained_bert.tokenization as ppb_tokenization

import bertkit.compat.pytorch_pretrained_bert as P
from bertkit.compat.pytorch_pretrained_bert import file_utils as F
from bertkit.weights import download
from bertkit.weights.registry import lookup
from ppb_compat_helpers import IGNORE_PPB_ADD_WARNING
from ppb_reference import HEADS, build_ppb, write_archive

pytestmark = IGNORE_PPB_ADD_WARNING

HTTP_URL = "https://example.invalid/bert/vocab.txt"


@pytest.fixture
def no_downloads(monkeypatch):
    """Any download attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"unexpected download {args}")

    monkeypatch.setattr(download, "download_file", refuse)
    monkeypatch.setattr(download, "fetch", refuse)


def test_archive_maps_are_ppb_names_with_registry_urls():
    for ours, theirs in ((P.modeling.PRETRAINED_MODEL_ARCHIVE_MAP, ppb_modeling.PRETRAINED_MODEL_ARCHIVE_MAP),
                         (P.tokenization.PRETRAINED_VOCAB_ARCHIVE_MAP, ppb_tokenization.PRETRAINED_VOCAB_ARCHIVE_MAP)):
        assert list(ours) == list(theirs)
        assert all(url == lookup(name).url for name, url in ours.items())
    assert (P.tokenization.PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP
            == ppb_tokenization.PRETRAINED_VOCAB_POSITIONAL_EMBEDDINGS_SIZE_MAP)


def test_constants_are_ppb_constants():
    assert P.PYTORCH_PRETRAINED_BERT_CACHE == ppb.PYTORCH_PRETRAINED_BERT_CACHE
    assert (P.CONFIG_NAME, P.WEIGHTS_NAME) == (ppb.CONFIG_NAME, ppb.WEIGHTS_NAME)
    assert P.modeling.cached_path is P.tokenization.cached_path is P.cached_path is F.cached_path


def test_local_paths_and_errors_as_ppb(tmp_path, no_downloads):
    existing = tmp_path / "vocab.txt"
    existing.write_text("[PAD]\n", encoding="utf-8")
    assert F.cached_path(existing) == ppb_files.cached_path(existing) == str(existing)
    missing = str(tmp_path / "nope.txt")
    for fn in (F.cached_path, ppb_files.cached_path):
        with pytest.raises(OSError, match="not found"):
            fn(missing)
        with pytest.raises(ValueError, match="unable to parse"):
            fn("ftp://host/file")
    with pytest.raises(ValueError, match="s3://"):
        F.cached_path("s3://bucket/key")


def test_url_to_filename_is_ppb_naming():
    for etag in (None, '"abc-123"'):
        assert F.url_to_filename(HTTP_URL, etag) == ppb_files.url_to_filename(HTTP_URL, etag)


def test_url_is_downloaded_once_with_ppb_metadata(tmp_path, monkeypatch):
    source = tmp_path / "served.txt"
    source.write_text("hello\nworld\n", encoding="utf-8")
    url = source.as_uri()
    cache = tmp_path / "cache"
    path = F.cached_path(url, cache_dir=cache)
    assert path == str(cache / F.url_to_filename(url)) and Path(path).read_text(encoding="utf-8") == "hello\nworld\n"
    assert json.loads(Path(path + ".json").read_text(encoding="utf-8")) == {"url": url, "etag": None}
    assert F.filename_to_url(F.url_to_filename(url), cache_dir=cache) == ppb_files.filename_to_url(
        F.url_to_filename(url), cache_dir=str(cache)) == (url, None)
    source.unlink()
    monkeypatch.setattr(download, "download_file", lambda *a, **k: pytest.fail("downloaded twice"))
    assert F.cached_path(url, cache_dir=cache) == path
    with pytest.raises(OSError, match="not found"):
        F.filename_to_url("0" * 64, cache_dir=cache)


def test_a_file_ppb_downloaded_is_reused(tmp_path, no_downloads):
    """0.6.2 named a download after the server's ETag; without asking the server, that file is found."""
    name = ppb_files.url_to_filename(HTTP_URL, '"etag-1"')
    (tmp_path / name).write_text("[UNK]\n", encoding="utf-8")
    (tmp_path / (name + ".json")).write_text(json.dumps({"url": HTTP_URL, "etag": '"etag-1"'}), encoding="utf-8")
    assert F.cached_path(HTTP_URL, cache_dir=tmp_path) == str(tmp_path / name)


def test_offline_names_url_and_path(tmp_path, monkeypatch, no_downloads):
    monkeypatch.setenv("BERTKIT_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=F.url_to_filename(HTTP_URL)) as error:
        F.cached_path(HTTP_URL, cache_dir=tmp_path)
    assert error.value.missing == [(HTTP_URL, tmp_path / F.url_to_filename(HTTP_URL))]


def test_registered_urls_fetch_the_checkpoint(tmp_path, monkeypatch):
    directory = write_archive(build_ppb(HEADS["model"]), tmp_path / "fetched")
    (directory / "vocab.txt").write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                                    "hello"]), encoding="utf-8")
    calls = []

    def fake_fetch(entry, *, cache_dir=None, **kwargs):
        calls.append((entry.name, cache_dir))
        return directory

    monkeypatch.setattr(download, "fetch", fake_fetch)
    url = P.modeling.PRETRAINED_MODEL_ARCHIVE_MAP["bert-base-cased"]
    assert F.cached_path(url, cache_dir=tmp_path / "c") == str(directory)
    model = P.BertModel.from_pretrained(url)
    tokenizer = P.BertTokenizer.from_pretrained(P.tokenization.PRETRAINED_VOCAB_ARCHIVE_MAP["bert-base-cased"])
    assert calls == [("bert-base-cased", tmp_path / "c"), ("bert-base-cased", None), ("bert-base-cased", None)]
    assert model.config.vocab_size == 99 and tokenizer.tokenize("hello") == ["hello"]


def test_tokenizer_from_a_vocab_url(tmp_path):
    vocab = tmp_path / "served-vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##want"]),
                     encoding="utf-8")
    tokenizer = P.BertTokenizer.from_pretrained(vocab.as_uri(), cache_dir=tmp_path / "cache")
    assert tokenizer.tokenize("unwant") == ["un", "##want"]


def test_http_get_and_small_helpers_match_ppb(tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("b\na  \nb\n", encoding="utf-8")
    buffer = io.BytesIO()
    F.http_get(source.as_uri(), buffer)
    assert buffer.getvalue() == source.read_bytes()
    assert F.read_set_from_file(source) == ppb_files.read_set_from_file(str(source)) == {"a", "b"}
    for path in ("x/Model.TAR.GZ", "vocab.txt", "noext"):
        for dot in (True, False):
            for lower in (True, False):
                assert F.get_file_extension(path, dot, lower) == ppb_files.get_file_extension(path, dot, lower)
