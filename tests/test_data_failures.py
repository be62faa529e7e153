"""How ``bertkit data create`` fails: a --dask address where no scheduler answers, a worker that dies, a
document longer than a partition, and what a failed run leaves behind."""

from __future__ import annotations

import socket
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
    from bertkit.data import create

    monkeypatch.setattr(create, "DASK_TIMEOUT", 2.0, raising=False)
    server, address = _server(answer)
    try:
        with pytest.raises(ValueError) as error:
            create_pretraining_data(corpus, BERT_BASE_UNCASED_VOCAB, tmp_path / "out", dask=address,
                                    partition_bytes=200, progress=False)
    finally:
        server.close()
    message = str(error.value)
    assert message.startswith(f"--dask {address}: cannot reach a Dask scheduler") and "\n" not in message, message
