"""Fetching registry weights: download, verify, resume, unpack, convert, cache; from_pretrained(weights=...).

Downloads go to a local ``http.server`` on 127.0.0.1 (port 0) only; the entries used for
them are built here, never the real Google ones. Most tests replace the conversion step
with a fake that copies the (already HF-format) checkpoint, so they test fetch alone; the
end-to-end test at the bottom uses the real converter (skipped when it cannot be imported).
The registry's own contents are checked in test_registry.py.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import shutil
import socket
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
import torch

from bertkit import BERTConfig, BERTForPreTraining, BERTTokenizerFast
from bertkit.weights import download
from bertkit.weights.download import UnsafeArchiveError, WeightsNotCachedError, fetch, safe_extract
from bertkit.weights.registry import BERT_Weights, WeightsEntry
from conftest import SPECIAL, TINY, randomize_


# ====================================================================== a local HTTP server
class LocalServer:
    """Serves ``files`` (URL path -> bytes) on 127.0.0.1 and records every request.

    ``honour_range``: answer ``Range: bytes=N-`` with 206 (else ignore it, as some servers do).
    ``fail_after``: the first response announces the full length but sends only that many bytes.
    """

    def __init__(self, files: dict[str, bytes], *, honour_range: bool = True, fail_after: int | None = None):
        self.files, self.honour_range, self.fail_after = dict(files), honour_range, fail_after
        self.requests: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                record = {"path": self.path, "range": self.headers.get("Range"), "status": None, "sent": 0}
                server.requests.append(record)
                body = server.files.get(self.path)
                if body is None:
                    record["status"] = 404
                    self.send_error(404)
                    return
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and server.honour_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        record["status"] = 416
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                chunk = body[start:]
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(chunk)))
                self.end_headers()
                if server.fail_after is not None:  # drop the connection part-way, once
                    chunk, server.fail_after = chunk[:server.fail_after], None
                    self.close_connection = True
                self.wfile.write(chunk)
                record.update(status=status, sent=len(chunk))

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers: list[LocalServer] = []

    def start(files, **options) -> LocalServer:
        servers.append(LocalServer(files, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


# ====================================================================== fixture checkpoints
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s", "."]
VOCAB += [f"w{i}" for i in range(TINY["vocab_size"] - len(VOCAB))]


def tiny_model() -> BERTForPreTraining:
    return randomize_(BERTForPreTraining(BERTConfig(**TINY, **SPECIAL)), seed=3).eval()


def write_hf_dir(directory: Path, model: torch.nn.Module | None = None) -> Path:
    """An HF-format checkpoint directory (what the fake converter passes through)."""
    (model or tiny_model()).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return directory


def zip_dir(directory: Path, top: str = "tiny_L-2_H-36") -> bytes:
    """A zip of ``directory`` wrapped in one folder, as Google's zips are."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(directory.iterdir()):
            zf.write(path, f"{top}/{path.name}")
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_entry(url: str, *, sha256=None, name: str = "test-tiny", fmt: str = "zip", **extra) -> WeightsEntry:
    return WeightsEntry(name=name, url=url, sha256=sha256, config={**TINY, **SPECIAL}, do_lower_case=True,
                        format=fmt, aliases=(f"{name}-alias",), **extra)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    return zip_dir(write_hf_dir(tmp_path_factory.mktemp("ckpt")))


@pytest.fixture
def converts(monkeypatch):
    """Replace the converter with a copy (the fixture checkpoints are HF-format already); count calls."""
    calls: list[tuple[Path, Path]] = []

    def fake_convert(source: Path, dest: Path, **options) -> Path:
        calls.append((Path(source), Path(dest)))
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("*.part"))
        return Path(dest)

    monkeypatch.setattr(download, "_convert", fake_convert)
    return calls


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in ("BERTKIT_OFFLINE", "HF_HUB_OFFLINE", "BERTKIT_WEIGHTS_URL_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BERTKIT_HOME", str(tmp_path / "home"))


PATH = "/bert_models/test/tiny_L-2_H-36.zip"


# ====================================================================== fetch
def test_cache_dir_follows_bertkit_home(monkeypatch, tmp_path):
    assert download.cache_dir() == tmp_path / "home"
    monkeypatch.delenv("BERTKIT_HOME")
    assert download.cache_dir() == Path.home() / ".cache" / "bertkit"


def test_fetch_downloads_verifies_converts_and_shows_progress(serve, archive, converts, tmp_path, capsys):
    server = serve({PATH: archive})
    entry = make_entry(server.url(PATH), sha256=sha(archive))
    out = fetch(entry, cache_dir=tmp_path / "cache")
    assert out == tmp_path / "cache" / "hf" / "test-tiny"
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", ".bertkit-complete"):
        assert (out / name).is_file(), name
    download_path = tmp_path / "cache" / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip"
    assert download_path.read_bytes() == archive and not download_path.with_suffix(".zip.part").exists()
    assert converts[0][0].name == "tiny_L-2_H-36"  # the folder inside the zip, not the extraction root
    err = capsys.readouterr().err
    assert "tiny_L-2_H-36.zip" in err and "100%" in err  # the tqdm bar
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True
    loaded = BERTForPreTraining.from_pretrained(out)
    torch.testing.assert_close(loaded.state_dict(), tiny_model().state_dict())
    assert BERTTokenizerFast.from_pretrained(out).tokenize("The cats") == ["the", "cat", "##s"]
    assert not list((tmp_path / "cache" / "tmp").iterdir())  # scratch space cleaned up


def test_progress_false_is_silent(serve, archive, converts, tmp_path, capsys):
    server = serve({PATH: archive})
    fetch(make_entry(server.url(PATH)), cache_dir=tmp_path, progress=False)
    assert capsys.readouterr().err == ""


def test_sha256_mismatch_is_rejected_and_the_file_removed(serve, archive, converts, tmp_path):
    server = serve({PATH: archive})
    wrong = "0" * 64
    with pytest.raises(ValueError) as info:
        fetch(make_entry(server.url(PATH), sha256=wrong), cache_dir=tmp_path, progress=False)
    message = str(info.value)
    assert "tiny_L-2_H-36.zip" in message and wrong in message and sha(archive) in message
    folder = tmp_path / "downloads" / "test-tiny"
    assert list(folder.iterdir()) == []  # neither the .part nor the file survives
    assert not (tmp_path / "hf" / "test-tiny").exists() and not converts


@pytest.mark.parametrize("honour_range", [True, False], ids=["server-resumes", "server-ignores-range"])
def test_partial_download_is_resumed(serve, archive, converts, tmp_path, honour_range):
    server = serve({PATH: archive}, honour_range=honour_range)
    part = tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip.part"
    part.parent.mkdir(parents=True)
    n = len(archive) // 3
    part.write_bytes(archive[:n])
    fetch(make_entry(server.url(PATH), sha256=sha(archive)), cache_dir=tmp_path, progress=False)
    [request] = server.requests
    assert request["range"] == f"bytes={n}-"
    if honour_range:
        assert (request["status"], request["sent"]) == (206, len(archive) - n)
    else:  # 200 with the whole file: start again rather than append
        assert (request["status"], request["sent"]) == (200, len(archive))
    assert (tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip").read_bytes() == archive


def test_dropped_connection_is_resumed(serve, archive, converts, tmp_path):
    n = len(archive) // 2
    server = serve({PATH: archive}, fail_after=n)
    fetch(make_entry(server.url(PATH), sha256=sha(archive)), cache_dir=tmp_path, progress=False)
    assert [(r["range"], r["status"]) for r in server.requests] == [(None, 200), (f"bytes={n}-", 206)]
    assert (tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip").read_bytes() == archive


def test_complete_part_file_answered_416_is_kept(serve, archive, converts, tmp_path):
    server = serve({PATH: archive})
    part = tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(archive)
    fetch(make_entry(server.url(PATH), sha256=sha(archive)), cache_dir=tmp_path, progress=False)
    assert [r["status"] for r in server.requests] == [416]


def test_cache_is_reused_without_network(serve, archive, converts, tmp_path):
    server = serve({PATH: archive})
    entry = make_entry(server.url(PATH))
    first = fetch(entry, cache_dir=tmp_path, progress=False)
    assert len(server.requests) == 1 and len(converts) == 1
    server.close()  # no network at all now
    assert fetch(entry, cache_dir=tmp_path, progress=False) == first
    assert len(server.requests) == 1 and len(converts) == 1


def test_crash_mid_conversion_is_redone_from_the_kept_download(serve, archive, tmp_path, monkeypatch):
    server = serve({PATH: archive})
    entry = make_entry(server.url(PATH))

    def crash(source, dest, **options):
        Path(dest).mkdir(parents=True)
        (Path(dest) / "config.json").write_text("{")  # a torn write
        raise KeyboardInterrupt

    monkeypatch.setattr(download, "_convert", crash)
    with pytest.raises(KeyboardInterrupt):
        fetch(entry, cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "hf" / "test-tiny").exists()
    # an older, unfinished conversion (no marker) at the target is rebuilt, not trusted
    write_hf_dir(tmp_path / "hf" / "test-tiny")
    calls = []
    monkeypatch.setattr(download, "_convert", lambda s, d, **o: calls.append(1) or shutil.copytree(s, d))
    out = fetch(entry, cache_dir=tmp_path, progress=False)
    assert calls == [1] and (out / ".bertkit-complete").is_file()
    assert len(server.requests) == 1  # the download was kept
    BERTForPreTraining.from_pretrained(out)


@pytest.mark.parametrize("env", ["BERTKIT_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_error_names_the_path_and_a_placed_file_is_used(serve, archive, converts, tmp_path, monkeypatch,
                                                                 env):
    server = serve({PATH: archive})
    monkeypatch.setenv(env, "1")
    entry = make_entry(server.url(PATH), sha256=sha(archive))
    with pytest.raises(WeightsNotCachedError) as info:
        fetch(entry, cache_dir=tmp_path)
    expected_path = tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip"
    message = str(info.value)
    assert server.url(PATH) in message and str(expected_path) in message and env in message
    assert info.value.missing == [(server.url(PATH), expected_path)]
    assert server.requests == []
    expected_path.write_bytes(archive)  # what the message asks for
    out = fetch(entry, cache_dir=tmp_path)
    assert (out / "model.safetensors").is_file() and server.requests == []


def test_network_error_names_the_path(archive, converts, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    entry = make_entry(f"http://127.0.0.1:{port}{PATH}")
    with pytest.raises(WeightsNotCachedError, match="download failed") as info:
        fetch(entry, cache_dir=tmp_path, progress=False)
    target = tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip"
    assert str(target) in str(info.value)
    target.write_bytes(archive)
    assert (fetch(entry, cache_dir=tmp_path) / "config.json").is_file()


def test_placed_file_with_wrong_hash_is_refused(archive, converts, tmp_path):
    entry = make_entry("http://127.0.0.1:9/x/tiny_L-2_H-36.zip", sha256=sha(archive))
    target = tmp_path / "downloads" / "test-tiny" / "tiny_L-2_H-36.zip"
    target.parent.mkdir(parents=True)
    target.write_bytes(archive + b"junk")
    with pytest.raises(ValueError, match=sha(archive)):
        fetch(entry, cache_dir=tmp_path, offline=True)


def test_url_base_override(serve, archive, converts, tmp_path, monkeypatch):
    server = serve({PATH: archive})
    monkeypatch.setenv("BERTKIT_WEIGHTS_URL_BASE", server.url(""))
    entry = make_entry(f"https://storage.googleapis.com{PATH}")  # the published address, served by the mirror
    fetch(entry, cache_dir=tmp_path, progress=False)
    assert [r["path"] for r in server.requests] == [PATH]


def test_hf_dir_entry_fetches_each_file(serve, converts, tmp_path):
    ckpt = write_hf_dir(tmp_path / "src")
    files = {f"/repo/resolve/main/{name}": (ckpt / name).read_bytes()
             for name in ("config.json", "model.safetensors", "vocab.txt")}
    server = serve(files)
    entry = make_entry(server.url("/repo/resolve/main/"), fmt="hf-dir", name="test-hf",
                       files=("config.json", "model.safetensors", "vocab.txt"),
                       sha256={"model.safetensors": sha(files["/repo/resolve/main/model.safetensors"])})
    out = fetch(entry, cache_dir=tmp_path / "cache", progress=False)
    assert sorted(r["path"] for r in server.requests) == sorted(files)
    torch.testing.assert_close(BERTForPreTraining.from_pretrained(out).state_dict(), tiny_model().state_dict())


# ====================================================================== unsafe archives
def _zip_with(name: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ok/config.json", "{}")
        zf.writestr(zipfile.ZipInfo(name), b"owned")
    return buf.getvalue()


def _tar_with(member: tarfile.TarInfo, data: bytes = b"owned") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        member.size = len(data) if member.isfile() else 0
        tf.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return buf.getvalue()


def test_zip_slip_is_rejected_by_fetch(serve, converts, tmp_path):
    evil = "../../../evil.txt"
    server = serve({PATH: _zip_with(evil)})
    with pytest.raises(UnsafeArchiveError, match=r"\.\."):
        fetch(make_entry(server.url(PATH)), cache_dir=tmp_path / "c", progress=False)
    assert not list(tmp_path.rglob("evil.txt")) and not converts


@pytest.mark.parametrize("name", ["../evil.txt", "a/../../evil.txt", "/tmp/evil.txt", "C:/evil.txt", "..\\evil.txt"])
def test_zip_members_outside_the_target_are_rejected(tmp_path, name):
    archive = tmp_path / "a.zip"
    archive.write_bytes(_zip_with(name))
    with pytest.raises(UnsafeArchiveError):
        safe_extract(archive, tmp_path / "out")
    assert not list(tmp_path.rglob("evil.txt")) and not (tmp_path / "out" / "ok").exists()


def test_tar_slip_and_links_are_rejected(tmp_path):
    link = tarfile.TarInfo("ckpt/vocab.txt")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    for member in (tarfile.TarInfo("../evil.txt"), tarfile.TarInfo("/evil.txt"), link):
        archive = tmp_path / "a.tar.gz"
        archive.write_bytes(_tar_with(member))
        with pytest.raises(UnsafeArchiveError):
            safe_extract(archive, tmp_path / "out")
    assert not list(tmp_path.rglob("evil.txt")) and not (tmp_path / "out" / "ckpt").exists()


def test_tar_gz_archive_is_unpacked(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("ckpt/config.json")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"{}"))
    (tmp_path / "a.tar.gz").write_bytes(buf.getvalue())
    safe_extract(tmp_path / "a.tar.gz", tmp_path / "out")
    assert (tmp_path / "out" / "ckpt" / "config.json").read_text() == "{}"


# ====================================================================== from_pretrained(weights=...)
def test_from_pretrained_with_weights(serve, archive, converts, tmp_path):
    server = serve({PATH: archive})
    entry = make_entry(server.url(PATH))
    reference = tiny_model().state_dict()
    model = BERTForPreTraining.from_pretrained(weights=entry)  # the class builds from the checkpoint's config
    torch.testing.assert_close(model.state_dict(), reference)
    assert (tmp_path / "home" / "hf" / "test-tiny" / ".bertkit-complete").is_file()  # $BERTKIT_HOME
    # lucid's flow: build from the registry's config, then load into the instance
    fresh = BERTForPreTraining(BERTConfig(**entry.config))
    assert fresh.from_pretrained(weights=entry) is fresh
    torch.testing.assert_close(fresh.state_dict(), reference)
    assert len(server.requests) == 1


def test_from_pretrained_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="exactly one"):
        BERTForPreTraining.from_pretrained()
    with pytest.raises(TypeError, match="not both"):
        BERTForPreTraining.from_pretrained(tmp_path, weights=BERT_Weights.DEFAULT)
    with pytest.raises(FileNotFoundError, match="no-such-model") as info:  # neither a path nor a registered name
        BERTForPreTraining.from_pretrained(str(tmp_path / "no-such-model"))
    assert not isinstance(info.value, WeightsNotCachedError)


def test_from_pretrained_shortcut_name_goes_through_fetch(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_OFFLINE", "1")  # never touch the real network: expect the offline message
    with pytest.raises(WeightsNotCachedError) as info:
        BERTForPreTraining.from_pretrained("bert-base-uncased")
    expected = tmp_path / "home" / "downloads" / "bert-base-uncased" / "uncased_L-12_H-768_A-12.zip"
    assert str(expected) in str(info.value)
    assert "https://storage.googleapis.com/bert_models/2018_10_18/uncased_L-12_H-768_A-12.zip" in str(info.value)
    with pytest.raises(WeightsNotCachedError):
        BERTForPreTraining.from_pretrained(weights=BERT_Weights.DEFAULT)


# ====================================================================== end to end with the real converter
def test_end_to_end_with_real_convert(serve, tmp_path):
    try:
        download._converter()
    except ImportError:
        pytest.skip("no checkpoint converter (bertkit.weights.convert.convert) yet; fetch's conversion step needs it")
    import bertkit

    original = bertkit.bert_for_pre_training_tiny(vocab_size=len(VOCAB), **SPECIAL).eval()
    ckpt = write_hf_dir(tmp_path / "ckpt", original)
    archive = zip_dir(ckpt, top="bert_tiny_hf")
    server = serve({PATH: archive})
    entry = WeightsEntry(name="test-e2e", url=server.url(PATH), sha256=sha(archive),
                         config={**original.config.to_dict()}, do_lower_case=True, format="zip")
    model = bertkit.BERTForPreTraining.from_pretrained(weights=entry)
    torch.testing.assert_close(model.state_dict(), original.state_dict())
    out = tmp_path / "home" / "hf" / "test-e2e"
    tokenizer = BERTTokenizerFast.from_pretrained(out)
    ids = tokenizer("the cat sat", return_tensors="pt")
    with torch.no_grad():
        scores, nsp = model(ids["input_ids"])
        ref_scores, ref_nsp = original(ids["input_ids"])
    torch.testing.assert_close(scores, ref_scores)
    torch.testing.assert_close(nsp, ref_nsp)
    assert len(server.requests) == 1


def test_end_to_end_google_shaped_tf1_zip(serve, tmp_path):
    """A zip laid out as Google's releases (one folder: bert_config.json, bert_model.ckpt.*, vocab.txt)."""
    try:
        convert = download._converter()
    except ImportError:
        pytest.skip("no checkpoint converter (bertkit.weights.convert.convert) yet; fetch's conversion step needs it")
    original = tiny_model()
    tf_dir = tmp_path / "uncased_L-2_H-36_A-3"
    try:
        convert(write_hf_dir(tmp_path / "hf_src", original), tf_dir, to="tf")
    except ModuleNotFoundError as e:  # the TF1 writer builds the fixture; fetch itself only reads
        pytest.skip(f"cannot write a TF1 checkpoint to serve yet ({e})")
    assert (tf_dir / "bert_config.json").is_file() and (tf_dir / "bert_model.ckpt.index").is_file()
    archive = zip_dir(tf_dir, top="uncased_L-2_H-36_A-3")
    server = serve({PATH: archive})
    entry = WeightsEntry(name="test-tf1", url=server.url(PATH), sha256=sha(archive), config={**TINY, **SPECIAL},
                         do_lower_case=False, format="tf1-zip")  # the registry's casing wins over the name's
    model = BERTForPreTraining(BERTConfig(**entry.config)).from_pretrained(weights=entry)
    torch.testing.assert_close(model.state_dict(), original.state_dict())
    out = tmp_path / "home" / "hf" / "test-tf1"
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert BERTTokenizerFast.from_pretrained(out).do_lower_case is False
