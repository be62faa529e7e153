"""Does ``bertkit serve`` add anything to the model's own rate? The server against the model alone, per dtype.

For each ``--dtypes`` entry (fp32, bf16, int8): ``bertkit serve MODEL --task embeddings --dtype D`` on a free
port, loaded by :func:`serve_load.fire` (the one load generator) in each ``--scenarios`` entry ``CxN``: ``C``
concurrent clients, each sending ``N`` texts per request (``48x1``: 48 clients, one text each; ``1x32``: one client
sending the model's batch), every text of the set once. Then the model alone in this process, on the same texts,
in the same dtype and thread count: ``SentenceTransformer.encode(texts, batch_size=--batch)`` (its tokenization
included), the median of ``--rounds`` runs.

Reported per row: texts/s and its share of the model alone's, p50 / p99 request latency, and CPU time per text:
the server's process CPU time (user + system of its process tree, from /proc, over the load) against this
process's over the model alone's run. CPU time is what the load generator, on the same cores, cannot bias: a
server that adds nothing spends the model's CPU time per text; one that leaves the cores idle between batches
spends no more CPU but reaches a lower rate. The machine is shared: the load average is printed with each row.

    python benchmarks/serve_speed.py [--dtypes fp32,bf16,int8] [--scenarios 48x1,1x32] [--texts 960]
        [--batch 32] [--threads 2] [--rounds 2] [--serve-args "..."] [--py-spy PATH] [--json out.json]

With py-spy (``--py-spy``, or on PATH) each scenario's server is sampled: the share of each thread's wall time in
each place of the server (:data:`PLACES`: the forward pass, tokenization, waiting for a batch, the event loop's
HTTP and request handling, the JSON answers).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from serve_load import (
    bertkit_encoder,
    fire,
    free_port,
    make_texts,
    minilm,
    model_shape,
    percentile_ms,
    process_tree,
    running,
    server_command,
)

TICKS = os.sysconf("SC_CLK_TCK")

#: a sampled stack's place in the server, by the first rule whose marker is in it: (thread kind, marker, place)
PLACES = (
    ("model", "BERT.forward", "model: forward pass"),
    ("model", "features (bertkit/sentence/model.py", "model thread: tokenization"),
    ("model", "pad (bertkit/inference/batching.py", "model thread: padding"),
    ("model", "bertkit/pipelines/", "model thread: pipeline (pooling, normalise, lists)"),
    ("model", "thread.py", "model thread: idle, waiting for a batch"),
    ("tokenize", "bertkit/serving/inputs.py", "tokenization threads: count and cut"),
    ("tokenize", "bertkit/serving/bodies.py", "tokenization threads: JSON answer"),
    ("tokenize", "bertkit/serving/gate.py", "tokenization threads: JSON body"),
    ("tokenize", "thread.py", "tokenization threads: idle"),
    ("main", "bertkit/serving/batcher.py", "event loop: batch formation"),
    ("main", "bertkit/serving/", "event loop: request handling (Gate, FastAPI, routes, validation)"),
    ("main", "h11", "event loop: HTTP (h11)"),
    ("main", "fastapi", "event loop: request handling (Gate, FastAPI, routes, validation)"),
    ("main", "starlette", "event loop: request handling (Gate, FastAPI, routes, validation)"),
)


def profile_places(raw: pathlib.Path) -> dict[str, float]:
    """py-spy's raw samples (``--threads --idle``) as each place's share of its thread kind's samples: where the
    model thread, the tokenization threads (together) and the event loop spend the wall time (``other``: none of
    :data:`PLACES`; the event loop's ``other`` is mostly uvloop waiting for its sockets)."""
    counts: collections.Counter = collections.Counter()
    per_kind: collections.Counter = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        thread = stack.split(";", 1)[0]
        kind = "model" if "bertkit-model" in thread else "tokenize" if "bertkit-tokenize" in thread else \
            "main" if "MainThread" in thread else None
        if kind is None:
            continue
        place = next((name for k, marker, name in PLACES if k == kind and marker in stack), f"{kind}: other")
        counts[kind, place] += int(n)
        per_kind[kind] += int(n)
    return {place: n / per_kind[kind] for (kind, place), n in sorted(counts.items())}


def record(pid: int, seconds: float, spy: str) -> subprocess.Popen:
    """py-spy sampling the server ``pid`` for ``seconds`` (every thread, idle ones too), into a raw file."""
    out = tempfile.NamedTemporaryFile(prefix="serve_speed_", suffix=".txt", delete=False).name  # noqa: SIM115
    process = subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "50", "--threads",
                                "--idle", "-f", "raw", "-o", out, "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process.raw = pathlib.Path(out)
    return process


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (their threads included), from /proc."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / TICKS


def scenario(text: str) -> tuple[int, int]:
    clients, _, per_request = text.partition("x")
    return int(clients), int(per_request or 1)


def served(args: argparse.Namespace, dtype: str, texts: list[tuple[str, int]], dim: int) -> list[dict]:
    """One ``bertkit serve`` in ``dtype``, loaded in every scenario: a row each."""
    args.dtype = dtype
    port = free_port()
    rows = []
    with running(server_command("bertkit", args.model, port, args), port, args, f"bertkit serve {dtype}") as server:
        asyncio.run(fire(server.url, texts[:64], 4, args.timeout, args.timeout, dim))  # warm-up, not counted
        for clients, per_request in map(scenario, args.scenarios.split(",")):
            spy = record(server.process.pid, args.profile_seconds, args.py_spy) if args.py_spy else None
            before = cpu_seconds(server.process.pid)
            outcomes, elapsed, _ = asyncio.run(
                fire(server.url, texts, clients, args.timeout, args.max_seconds, dim, per_request=per_request))
            cpu = cpu_seconds(server.process.pid) - before
            places = None
            if spy is not None:
                spy.wait()
                places = profile_places(spy.raw) if spy.raw.stat().st_size else None
                spy.raw.unlink()
            ok = [o for o in outcomes if o.status == "200"]
            if len(ok) < len(texts):
                print(f"{dtype} {clients}x{per_request}: {len(texts) - len(ok)} texts not answered 200; server "
                      f"log:\n{server.log_tail()}", file=sys.stderr)
            # one latency per request: the outcomes of a request's texts share it
            latency = [o.seconds for o in ok if o.index % per_request == 0]
            rows.append({"dtype": dtype, "run": f"bertkit serve, {clients} clients x {per_request} texts",
                         "texts": len(ok), "texts/s": len(ok) / elapsed, "CPU ms/text": 1e3 * cpu / max(len(ok), 1),
                         "p50 ms": percentile_ms(latency, 50), "p99 ms": percentile_ms(latency, 99),
                         "load": round(os.getloadavg()[0], 2), "profile": places})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def alone(args: argparse.Namespace, dtype: str, texts: list[tuple[str, int]]) -> dict:
    """The model alone on ``texts`` at ``--batch``: the medians of ``--rounds`` runs."""
    import torch

    torch.set_num_threads(args.threads)
    encoder = bertkit_encoder(args.model, dtype, args.device)
    sample = [text for text, _ in texts]
    encoder.encode(sample[:64], batch_size=args.batch, show_progress_bar=False)  # warm-up
    walls, cpus = [], []
    for _ in range(args.rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        encoder.encode(sample, batch_size=args.batch, show_progress_bar=False)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    row = {"dtype": dtype, "run": f"model alone, batch {args.batch}", "texts": len(sample),
           "texts/s": len(sample) / statistics.median(walls),
           "CPU ms/text": 1e3 * statistics.median(cpus) / len(sample), "p50 ms": None, "p99 ms": None,
           "load": round(os.getloadavg()[0], 2)}
    print(json.dumps(row), flush=True)
    return row


def compare(rows: list[dict]) -> None:
    """Each server row's rate and CPU per text as a share of the model alone's of its dtype."""
    base = {r["dtype"]: r for r in rows if r["run"].startswith("model alone")}
    for r in rows:
        b = base.get(r["dtype"])
        r["x model alone"] = r["texts/s"] / b["texts/s"] if b else None
        r["CPU x model alone"] = r["CPU ms/text"] / b["CPU ms/text"] if b else None


def markdown(rows: list[dict]) -> str:
    columns = ["dtype", "run", "texts", "texts/s", "x model alone", "CPU ms/text", "CPU x model alone", "p50 ms",
               "p99 ms", "load"]

    def cell(v: object) -> str:
        return "-" if v is None else f"{v:,.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, default=None, help="default: all-MiniLM-L6-v2 (gt package)")
    parser.add_argument("--dtypes", default="fp32,bf16,int8")
    parser.add_argument("--scenarios", default="48x1,1x32", help="CLIENTSxTEXTS_PER_REQUEST, comma-separated")
    parser.add_argument("--texts", type=int, default=960)
    parser.add_argument("--min-tokens", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32, help="the model alone's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="runs of the model alone (the median is kept)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=120, help="per request, seconds")
    parser.add_argument("--max-seconds", type=float, default=300, help="per scenario")
    parser.add_argument("--startup-timeout", type=float, default=180)
    parser.add_argument("--serve-args", default="", help="extra arguments for bertkit serve")
    parser.add_argument("--py-spy", default=shutil.which("py-spy"),
                        help="py-spy's path: each scenario's first --profile-seconds are sampled (default: on PATH)")
    parser.add_argument("--profile-seconds", type=float, default=20)
    parser.add_argument("--json", type=pathlib.Path, help="write the rows here")
    args = parser.parse_args(argv)
    args.model = (args.model or minilm()).resolve()
    for s in args.scenarios.split(","):
        try:
            scenario(s)
        except ValueError:
            parser.error(f"--scenarios: {s!r} is not CLIENTSxTEXTS (e.g. 48x1)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dim, max_len = model_shape(args.model)
    texts = make_texts(args.model, args.texts, args.min_tokens, args.max_tokens, args.seed)
    print(f"## bertkit serve against the model alone: {args.model.parent.name}, {len(texts)} texts of "
          f"{args.min_tokens}-{args.max_tokens} tokens (cut at {max_len}), {args.threads} threads, load "
          f"{os.getloadavg()[0]:.2f}\n", flush=True)
    rows = []
    for dtype in args.dtypes.split(","):
        rows += served(args, dtype, texts, dim)
        rows.append(alone(args, dtype, texts))
    compare(rows)
    print("\n" + markdown(rows))
    for r in rows:
        if r.get("profile"):
            print(f"\nWhere {r['dtype']} {r['run']} spends each thread's wall time (py-spy, first "
                  f"{args.profile_seconds:.0f} s):\n")
            print("\n".join(f"- {place}: {share:.1%}" for place, share in r["profile"].items()))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "argv": sys.argv}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
