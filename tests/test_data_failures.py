"""How ``bertkit data create`` fails: a --dask address where no scheduler answers, a worker that dies, a
document longer than a partition, and what a failed run leaves behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from bertkit.data.create import create_pretraining_data
from bertkit.resources import BERT_BASE_UNCASED_VOCAB


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(f"Sentence {i} of a document.\nAnother one, number {i}." for i in range(40)) + "\n")
    return path


def _server(answer: bytes | None) -> tuple[socket.socket, str]:
    """A TCP server on 127.0.0.1 that never answers (``answer`` None) or answers ``answer`` to what it reads."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.recv(1 << 16)
                conn.sendall(answer)
    threading.Thread(target=serve, daemon=True).start()
    return server, f"tcp://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"],
                         ids=["silent", "http"])
def test_dask_address_without_a_scheduler_fails_naming_it(tmp_path, corpus, monkeypatch, answer):
    from bertkit.data import running

    monkeypatch.setattr(running, "DASK_TIMEOUT", 2.0)
    server, address = _server(answer)
    try:
        with pytest.raises(ValueError) as error:
            create_pretraining_data(corpus, BERT_BASE_UNCASED_VOCAB, tmp_path / "out", dask=address,
                                    partition_bytes=200, progress=False)
    finally:
        server.close()
    message = str(error.value)
    assert message.startswith(f"--dask {address}: cannot reach a Dask scheduler") and "\n" not in message, message


# ---------------------------------------------------------------------------- a worker that dies, an over-long line

CLI = [sys.executable, "-m", "bertkit.cli"]


def _create(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "data", "create", *args, "--tokenizer", str(BERT_BASE_UNCASED_VOCAB), "--quiet"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_a_killed_worker_ends_the_run_naming_its_partition_and_a_rerun_continues(tmp_path, corpus):
    from bertkit.data.create import KILL_PARTITION_VARIABLE

    out = tmp_path / "out"
    args = [str(corpus), "-o", str(out), "--partition-size", "0.0005", "--workers", "2", "--seed", "3"]
    killed = _create(*args, env={KILL_PARTITION_VARIABLE: "2"})
    assert killed.returncode == 1
    # less the log line, and Python's resource tracker on the semaphore the killed process held
    lines = [line for line in killed.stderr.splitlines()
             if not any(s in line for s in ("one sentence per line", "resource_tracker", "warnings.warn"))]
    assert len(lines) == 1 and lines[0].startswith("bertkit: error: "), killed.stderr
    assert f"data creation failed on partition 2 ({corpus} bytes " in lines[0], lines[0]
    assert "worker process died" in lines[0] and "run the same command again to continue" in lines[0]
    assert "terminated abruptly" not in killed.stderr
    rerun = _create(*args)
    assert rerun.returncode == 0, rerun.stderr
    made = {p: p.stat().st_mtime_ns for p in out.glob("shard-*.npy")}
    again = _create(*args)  # complete with these arguments: nothing is redone
    assert again.returncode == 0 and {p: p.stat().st_mtime_ns for p in out.glob("shard-*.npy")} == made
    whole = _create(str(corpus), "-o", str(tmp_path / "whole"), "--seed", "3", "--workers", "1")
    assert whole.returncode == 0, whole.stderr
    assert {p.name: p.read_bytes() for p in out.glob("shard-*.npy")} == {
        p.name: p.read_bytes() for p in (tmp_path / "whole").glob("shard-*.npy")}


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_line_longer_than_the_partition_size_is_refused_naming_file_line_and_size(tmp_path, suffix):
    words = " ".join(f"word{i}" for i in range(60_000))  # ~530 KB on one line
    path = tmp_path / f"long{suffix}"
    if suffix == ".jsonl":
        path.write_text(json.dumps({"text": "A short one."}) + "\n" + json.dumps({"text": words}) + "\n")
    else:
        path.write_text("A short one.\nAnd another.\n\n" + words + "\n\nThe end.\n")
    for size in ("0.1", "100"):  # a byte range of the file, and the whole file in one partition
        result = _create(str(path), "-o", str(tmp_path / f"out{size}"), "--partition-size", size, "--workers", "1")
        if size == "100":
            assert result.returncode == 0, result.stderr
            continue
        line = 2 if suffix == ".jsonl" else 4
        lines = [line for line in result.stderr.splitlines() if "one sentence per line" not in line]
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert f"{path}, line {line}: a line of {path.read_bytes().splitlines()[line - 1].__len__():,} bytes" \
            in result.stderr, result.stderr
        assert "--partition-size" in result.stderr


# ---------------------------------------------------------------------------- careless users

def test_a_run_that_failed_on_its_inputs_leaves_nothing_to_refuse(tmp_path, corpus):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    failed = _create(str(empty), "-o", str(out))
    assert failed.returncode == 1 and "empty.txt is empty" in failed.stderr
    latin = tmp_path / "latin.txt"
    latin.write_bytes(corpus.read_bytes().replace(b"Another one", "Anoth\u00e9r one".encode("latin-1")))
    undecodable = _create(str(latin), "-o", str(out), "--workers", "1")
    assert undecodable.returncode == 1 and "--encoding" in undecodable.stderr
    fixed = _create(str(latin), "-o", str(out), "--encoding", "latin-1", "--workers", "1")
    assert fixed.returncode == 0, fixed.stderr
    other = _create(str(corpus), "-o", str(out), "--encoding", "latin-1", "--workers", "1")
    assert other.returncode == 1
    assert f"other inputs (1 then, 1 now; no longer: {latin}; new: {corpus})" in other.stderr, other.stderr


def test_an_output_inside_an_input_directory_is_refused_the_first_time(tmp_path, corpus):
    result = _create(str(tmp_path), "-o", str(tmp_path / "data"))
    assert result.returncode == 1
    assert f"the output directory {tmp_path / 'data'} (-o) lies inside {tmp_path}, a directory given as input" \
        in result.stderr, result.stderr
    assert not (tmp_path / "data").exists()


def test_random_bytes_named_txt_are_not_text_in_any_encoding(tmp_path):
    import random

    from bertkit.data.encodings import encoding_advice

    rng = random.Random(5)
    noise = tmp_path / "noise.txt"
    noise.write_bytes(bytes(rng.randrange(1, 256) for _ in range(200_000)))  # no NUL byte
    for encoding in (None, "cp1252", "latin-1"):
        result = _create(str(noise), "-o", str(tmp_path / f"out-{encoding}"),
                         *(["--encoding", encoding] if encoding else []))
        assert result.returncode == 1, (encoding, result.stderr)
        assert f"{noise} is not text: its bytes do not look like text in any encoding" in result.stderr, result.stderr
        assert "--encoding cp1252" not in result.stderr and not (tmp_path / f"out-{encoding}" / "index.json").exists()
    # met half-way through a file, the decoding error says so too, instead of advising an encoding
    advice = encoding_advice(b"plain text\n" * 30, "utf-8", noise.read_bytes()[:4096])
    assert advice.startswith("its bytes do not look like text in any encoding") and "cp1252" not in advice.split(
        "read as")[0]


class _Job:
    def describe(self) -> str:
        return "partition 7 (c.jsonl bytes 0-99)"


def _out_of_memory(job):
    raise MemoryError("Unable to allocate 5.8 GiB")


class _Panic(BaseException):  # as pyo3's PanicException: a BaseException from the Rust tokenizer
    pass


def _panic(job):
    raise _Panic("PyObject pointer is null")


@pytest.mark.parametrize("fn, says", [(_out_of_memory, "out of memory (Unable to allocate 5.8 GiB)"),
                                      (_panic, "_Panic: PyObject pointer is null")])
def test_a_worker_failing_outside_the_checks_names_its_partition(tmp_path, fn, says):
    from bertkit.data.running import Inline, run_all

    with pytest.raises(RuntimeError) as error:
        run_all(Inline(), 1, fn, iter([_Job()]), tmp_path, False, "reading", None, lambda m: 0)
    message = str(error.value)
    assert message.startswith("data creation failed on partition 7 (c.jsonl bytes 0-99): " + says), message
    assert message.endswith("run the same command again to continue where it stopped.")
