"""benchmarks/serve_peers.py's parts that could be wrong without anyone noticing in its numbers: the load
generator sending another server's route and reading its answers, the CPU time of a server's process tree, the
OpenAI answers read in input order, the openai SDK check, and the one-line refusals of bad options.

infinity-emb itself is not installed here (it lives in its own virtual environment): a small asyncio server
answers as infinity's OpenAI-style ``/embeddings`` does.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from benchmark_scripts import load_benchmark

DIM = 5




peers = load_benchmark("bench_serve_peers", "serve_peers.py")


def _vector(text: str) -> list[float]:
    return [float(len(text))] + [1.0] * (DIM - 1)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[dict]) -> None:
    """An OpenAI-style /embeddings on keep-alive HTTP/1.1: each input's vector is its length then ones; the data
    is sent in reverse order (the index says where each belongs); base64 float32 when the request asks."""
    import numpy as np

    while True:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        except asyncio.IncompleteReadError:
            break
        headers = dict(line.lower().split(":", 1) for line in head.split("\r\n")[1:] if ":" in line)
        length = int(headers["content-length"])
        request = json.loads(await reader.readexactly(length))
        seen.append(request)
        data = []
        for index, text in reversed(list(enumerate(request["input"]))):
            vector = _vector(text)
            if request.get("encoding_format") == "base64":
                vector = base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        body = json.dumps({"object": "list", "data": data, "model": request["model"],
                           "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
    writer.close()


def test_the_load_generator_sends_an_infinity_route_and_reads_its_vectors():
    peer = peers.SERVERS["infinity-torch-fp32"]
    texts = [(f"text {'x' * i}", i + 3) for i in range(12)]
    seen: list[dict] = []

    async def run():
        server = await asyncio.start_server(lambda r, w: _answer(r, w, seen), "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server:
            return await peers.serve_load.fire(url, texts, 3, 10, 30, DIM, keep=4, route=peers.route(peer))

    outcomes, _, vectors = asyncio.run(run())
    assert sorted(o.index for o in outcomes) == list(range(12))
    assert {o.status for o in outcomes} == {"200"}
    assert {r["model"] for r in seen} == {peers.OPENAI_NAME} and sorted(len(r["input"]) for r in seen) == [1] * 12
    assert vectors == {i: _vector(texts[i][0]) for i in range(4)}


def test_a_wrong_answer_is_a_bad_body_not_a_vector():
    assert peers.openai_vectors({"data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]}) \
        == [[1.0], [2.0]]
    for body in ([[1.0]], {"data": "x"}, {"data": [1, 2]}, None):
        assert peers.openai_vectors(body) is None
    assert peers.route(peers.SERVERS["bertkit-fp32"]) is peers.serve_load.TEI  # bertkit keeps its own /embed


def test_openai_sdk_check_reads_the_vectors_in_input_order():
    pytest.importorskip("openai", reason="the openai SDK (test extra) is not installed")
    loop = asyncio.new_event_loop()
    seen: list[dict] = []
    server = loop.run_until_complete(asyncio.start_server(lambda r, w: _answer(r, w, seen), "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        texts = ["a", "bbb", "cc"]
        expected = {i: _vector(t) for i, t in enumerate(texts)}
        check = peers.openai_check(peers.SERVERS["infinity-onnx-int8"], url, texts, expected)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert check["vectors"] == 3 and check["dims"] == [DIM]
    assert check["min cosine vs load route"] == pytest.approx(1.0)


def test_cpu_seconds_count_the_children_of_a_server():
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\n"
                               f"subprocess.Popen([sys.executable, '-c', {busy!r}])\ntime.sleep(30)"],
                              start_new_session=True)
    try:
        for _ in range(100):
            if peers.cpu_seconds(parent.pid) >= 0.3:
                break
            time.sleep(0.1)
        assert len(peers.serve_load.process_tree(parent.pid)) == 2
        assert peers.cpu_seconds(parent.pid) >= 0.3  # the child's busy loop, not the sleeping parent's
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(10)


@pytest.mark.parametrize("options, message", [
    (["--servers", "bertkit-fp32,tei"], "--servers: unknown tei"),
    (["--clients", "1,48", "--requests", "10"], "--requests: one positive count per --clients entry"),
    (["--clients", "one"], "--clients and --requests: comma-separated whole numbers"),
])
def test_bad_options_are_one_line(options, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        peers.parse_args(["--model", str(tmp_path), *options])
    assert message in capsys.readouterr().err


def test_a_missing_infinity_environment_names_the_flag(tmp_path):
    with pytest.raises(SystemExit, match=r"--infinity-venv: .* has no bin/python; make it with infinity-emb"):
        peers.venv_python(tmp_path / "absent", "--infinity-venv", "infinity-emb")
