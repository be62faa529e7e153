"""``bertkit serve`` beside infinity-emb: the same model, machine, texts and load, side by side (issue 42).

Every server in ``--servers`` (the rows of :data:`SERVERS`) is started in turn on 127.0.0.1 with the same thread
count, warmed up, then loaded by ``serve_load.py``'s client (:func:`serve_load.fire`, one keep-alive connection
per client) at each ``--clients`` count; each row is one server at one client count:

- ``bertkit serve MODEL --task embeddings --dtype D`` on its ``/embed`` route (fp32, bf16, int8, auto);
- infinity-emb (``infinity_emb v2``) on its OpenAI-style ``/embeddings`` route: its torch engine
  (sentence-transformers; ``--dtype float32``, ``bfloat16``, or ``int8``: torch's dynamic quantization) and its
  optimum engine (ONNX Runtime; infinity optimizes the graph itself at start) on the model exported to ONNX
  (fp32) and on that export quantized to int8 by optimum for AVX-512 VNNI (the file infinity prefers on a CPU).

infinity-emb runs from its own virtual environment (``--infinity-venv``: it pins its own transformers, optimum
and numpy, so it never shares bertkit's; set it up as docs/how-to/int8-and-serving.md, section "peers", says).
The ONNX files are made once into ``--workdir`` with that environment's ``optimum-cli``. infinity 0.0.78 with
optimum 2 needs two things: the optimum engine is started inside the model's folder with ``--model-id .`` (given
a path, it asks optimum for the file by its absolute name, which optimum 2 refuses), and its own graph
optimization at start fails (an OptimizationConfig argument optimum 2 dropped), so it serves the exported graph
as ONNX Runtime optimizes it when loading.

Measured per row: answers/s and tokens/s, p50/p99 latency, errors, and the server's CPU time per text (user +
system seconds of its process tree over the load, read from /proc, divided by the texts answered) beside the
load generator's own CPU time per text, which shares the cores. The texts are ``serve_load.make_texts``'s,
3 to 256 tokens by default: no server truncates (infinity's ONNX path would cut at 512, its torch path and
bertkit at 256). The first ``--compare`` answers of every server are compared with sentence-transformers fp32
in this process (min cosine), and each server's OpenAI-compatible route is called once with the ``openai`` SDK
(bertkit's ``/v1/embeddings``, infinity's ``/embeddings``) and compared with the load route's vectors.

    python benchmarks/serve_peers.py [--servers bertkit-fp32,infinity-torch-fp32,...] [--clients 1,48]
        [--requests 48,240] [--threads 2] [--infinity-venv /tmp/infinity-venv] [--workdir /tmp/serve-peers]
        [--json results.json]

Exit status 1 when a server answered a 200 without one vector of the model's dimension, or the openai SDK
check failed; the table is printed first.
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
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (result files; imported early, it takes the start's load)
import serve_load  # noqa: E402  (the load generator, its servers' lifecycle and its texts)
from serve_speed import cpu_seconds  # noqa: E402  (a server's process tree's CPU seconds)

OPENAI_NAME = "minilm"  # the model name both servers answer to on their OpenAI routes


@dataclasses.dataclass(frozen=True)
class Peer:
    """One server of the table: ``product`` bertkit or infinity, the ``dtype`` it is given, infinity's
    ``engine`` (torch or optimum) and, for optimum, which ONNX file (``onnx``: fp32 or int8); ``static``:
    bertkit serves its static int8 checkpoint (``bertkit convert --dtype int8``, made once in ``--workdir``)."""

    title: str
    product: str
    dtype: str
    engine: str = ""
    onnx: str = ""
    static: bool = False


SERVERS = {
    "bertkit-fp32": Peer("bertkit serve fp32", "bertkit", "fp32"),
    "bertkit-bf16": Peer("bertkit serve bf16", "bertkit", "bf16"),
    "bertkit-int8": Peer("bertkit serve int8 (dynamic)", "bertkit", "int8"),
    "bertkit-int8-static": Peer("bertkit serve int8 (static checkpoint)", "bertkit", "auto", static=True),
    "bertkit-auto": Peer("bertkit serve auto", "bertkit", "auto"),  # bf16 or int8 as the CPU and table say
    "infinity-torch-fp32": Peer("infinity torch fp32", "infinity", "float32", "torch"),
    "infinity-torch-bf16": Peer("infinity torch bf16", "infinity", "bfloat16", "torch"),
    "infinity-torch-int8": Peer("infinity torch int8 (dynamic)", "infinity", "int8", "torch"),
    "infinity-onnx-fp32": Peer("infinity ONNX Runtime fp32", "infinity", "float32", "optimum", "fp32"),
    "infinity-onnx-int8": Peer("infinity ONNX Runtime int8 (VNNI)", "infinity", "float32", "optimum", "int8"),
}
DEFAULT_SERVERS = ",".join(n for n in SERVERS if n != "bertkit-auto")  # auto: bf16 on a bf16 CPU


def openai_vectors(body: object) -> list | None:
    """The vectors of an OpenAI embeddings answer, in input order; None when it is not one."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    return [d.get("embedding") for d in sorted(data, key=lambda d: d.get("index", 0))]


def openai_body(inputs: str | list[str]) -> dict:
    return {"model": OPENAI_NAME, "input": [inputs] if isinstance(inputs, str) else inputs}


def route(peer: Peer) -> serve_load.Route:
    """The route the load is sent to: bertkit's own ``/embed``, infinity's own ``/embeddings``."""
    if peer.product == "bertkit":
        return serve_load.TEI
    return serve_load.Route("/embeddings", openai_body, openai_vectors)


def openai_base(peer: Peer, url: str) -> str:
    return url + ("/v1" if peer.product == "bertkit" else "")


# ---------------------------------------------------------------------------- the peers' files and commands
def venv_python(venv: pathlib.Path, flag: str, what: str) -> pathlib.Path:
    """``venv``'s python, or SystemExit with one line naming ``flag`` and how to make it."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{flag}: {venv} has no bin/python; make it with {what} "
                         "(docs/how-to/int8-and-serving.md, section 'peers')")
    return python


def onnx_dirs(args: argparse.Namespace) -> dict[str, pathlib.Path]:
    """The model exported to ONNX (``fp32``: model.onnx) and quantized (``int8``: model_quantized.onnx, dynamic
    int8 for AVX-512 VNNI), made with optimum-cli once into ``--workdir``. Each start of infinity optimizes the
    graph anew: the *_optimized.onnx an earlier start left beside the file is removed first."""
    cli = venv_python(args.infinity_venv, "--infinity-venv", "infinity-emb").parent / "optimum-cli"
    fp32, int8 = args.workdir / "onnx-fp32", args.workdir / "onnx-int8"
    steps = [(fp32, [str(cli), "export", "onnx", "--model", str(args.model), "--task", "feature-extraction",
                     "--library-name", "transformers"]),  # last_hidden_state out: infinity pools it
             (int8, [str(cli), "onnxruntime", "quantize", "--onnx_model", str(fp32), "--avx512_vnni", "-o"])]
    for out, command in steps:
        if not any(out.glob("*.onnx")):
            partial = out.with_name(out.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            run = subprocess.run([*command, str(partial)], capture_output=True, text=True)
            if run.returncode != 0 or not any(partial.glob("*.onnx")):
                raise RuntimeError(f"{' '.join(command)} failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
            partial.rename(out)  # complete or absent: a killed export leaves only the .partial folder
        for stale in out.glob("*_optimized.onnx"):
            stale.unlink()
    return {"fp32": fp32, "int8": int8}


def static_int8(args: argparse.Namespace) -> pathlib.Path:
    """bertkit's static int8 checkpoint of the model (calibrated on the shipped set), made once in ``--workdir``
    (convert writes it whole or not at all)."""
    out = args.workdir / "bertkit-int8"
    if not (out / "config.json").exists():
        run = subprocess.run([sys.executable, "-m", "bertkit.cli", "convert", str(args.model), "-o", str(out),
                              "--dtype", "int8", "--overwrite"], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"bertkit convert --dtype int8 failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return out


def command(peer: Peer, args: argparse.Namespace, port: int) -> list[str]:
    if peer.product == "bertkit":
        model = static_int8(args) if peer.static else args.model
        return [sys.executable, "-m", "bertkit.cli", "serve", str(model), "--task", "embeddings",
                "--host", serve_load.HOST, "--port", str(port), "--dtype", peer.dtype,
                "--served-model-name", OPENAI_NAME]
    model = "." if peer.onnx else str(args.model)  # "." : see the module's docstring; started in the folder
    infinity = venv_python(args.infinity_venv, "--infinity-venv", "infinity-emb").parent / "infinity_emb"
    return [str(infinity), "v2", "--model-id", model, "--served-model-name", OPENAI_NAME,
            "--engine", peer.engine, "--device", "cpu", "--dtype", peer.dtype, "--pooling-method", "mean",
            "--no-bettertransformer", "--no-model-warmup", "--host", serve_load.HOST, "--port", str(port),
            "--log-level", "warning"]


def infinity_environment(workdir: pathlib.Path) -> None:
    """infinity offline, without telemetry, its caches (the optimized ONNX graphs) under ``workdir``."""
    os.environ.update(HF_HOME=str(workdir / "hf"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1",
                      INFINITY_ANONYMOUS_USAGE_STATS="0")


# ---------------------------------------------------------------------------- measuring
def measure(server: serve_load.Server, peer: Peer, texts: list[tuple[str, int]], clients: int,
            args: argparse.Namespace, max_len: int, dim: int) -> tuple[dict, dict[int, list[float]]]:
    """One row: ``texts`` sent by ``clients`` clients, with the server's and this process's CPU time."""
    server_cpu, own_cpu = cpu_seconds(server.process.pid), time.process_time()
    outcomes, elapsed, vectors = asyncio.run(serve_load.fire(
        server.url, texts, clients, args.timeout, args.max_seconds, dim, keep=args.compare, route=route(peer)))
    server_cpu, own_cpu = cpu_seconds(server.process.pid) - server_cpu, time.process_time() - own_cpu
    ok = [o for o in outcomes if o.status == "200"]
    errors = collections.Counter(o.status for o in outcomes if o.status != "200")
    if len(outcomes) < len(texts):
        errors["cancelled"] = len(texts) - len(outcomes)
    if errors:
        print(f"{peer.title}, {clients} clients: errors {dict(errors)}; log:\n{server.log_tail()}", file=sys.stderr)
    seconds = [o.seconds for o in ok]
    answered = max(len(ok), 1)
    return {"server": peer.title, "clients": clients, "ok": len(ok), "requests": len(texts),
            "texts/s": len(ok) / elapsed, "tokens/s": sum(min(texts[o.index][1], max_len) for o in ok) / elapsed,
            "p50 ms": serve_load.percentile_ms(seconds, 50), "p99 ms": serve_load.percentile_ms(seconds, 99),
            "server CPU ms/text": 1000 * server_cpu / answered, "client CPU ms/text": 1000 * own_cpu / answered,
            "server CPU busy": server_cpu / elapsed / args.threads,
            "errors": serve_load.counts(dict(sorted(errors.items()))), "seconds": elapsed}, vectors


def openai_check(peer: Peer, url: str, texts: list[str], expected: dict[int, list[float]]) -> dict:
    """``texts`` through the openai SDK on the server's OpenAI route: the vectors' count and dimension, and the
    least cosine to what the load route answered for the same texts."""
    import openai

    client = openai.OpenAI(base_url=openai_base(peer, url), api_key="unused", max_retries=0, timeout=60)
    answer = client.embeddings.create(model=OPENAI_NAME, input=texts)
    vectors = [d.embedding for d in sorted(answer.data, key=lambda d: d.index)]
    same = [serve_load.cosine(vectors[i], expected[i]) for i in range(len(texts)) if i in expected]
    return {"vectors": len(vectors), "dims": sorted({len(v) for v in vectors}),
            "min cosine vs load route": min(same, default=None)}


def reference(model: pathlib.Path, texts: list[str]) -> list[list[float]]:
    """sentence-transformers fp32's normalized vectors of ``texts``: what every server's answers are held to."""
    import sentence_transformers

    encoder = sentence_transformers.SentenceTransformer(str(model), device="cpu")
    return encoder.encode(texts, normalize_embeddings=True, show_progress_bar=False).tolist()


def serve_rows(name: str, args: argparse.Namespace, texts: list[tuple[str, int]], onnx: dict[str, pathlib.Path],
               reference_vectors: list[list[float]], dim: int, max_len: int) -> tuple[list[dict], dict]:
    """Starts server ``name``, warms it up, measures it at every client count, checks its OpenAI route."""
    peer, port = SERVERS[name], serve_load.free_port()
    rows, seen = [], {}
    folder = onnx[peer.onnx] if peer.onnx else pathlib.Path.cwd()
    with contextlib.chdir(folder), serve_load.running(command(peer, args, port), port, args, peer.title) as server:
        asyncio.run(serve_load.fire(server.url, texts[:args.warmup], min(8, args.warmup), args.timeout,
                                    args.max_seconds, dim, route=route(peer)))  # warm-up, not counted
        for clients, count in zip(args.clients, args.requests):
            row, vectors = measure(server, peer, texts[:count], clients, args, max_len, dim)
            seen.update(vectors)
            rows.append(row)
            print(f"{peer.title}, {clients} client(s): {row['texts/s']:.2f} texts/s, server CPU "
                  f"{row['server CPU ms/text']:.0f} ms/text, errors: {row['errors']}", flush=True)
        try:
            check = openai_check(peer, server.url, [t for t, _ in texts[:4]], seen)
        except Exception as error:  # any failure of the SDK call is the check's answer
            check = {"error": f"{type(error).__name__}: {error}"}
    for row in rows:  # 1 - cosine: the table shows small distances in scientific notation
        row["max 1-cos vs ST fp32"] = max((1 - serve_load.cosine(v, reference_vectors[i]) for i, v in seen.items()),
                                          default=None)
    return rows, check


# ---------------------------------------------------------------------------- the table
COLUMNS = ["server", "clients", "ok", "requests", "texts/s", "x best infinity", "tokens/s", "p50 ms", "p99 ms",
           "server CPU ms/text", "client CPU ms/text", "server CPU busy", "max 1-cos vs ST fp32", "errors"]


def add_ratios(rows: list[dict]) -> dict[int, dict]:
    """Each row's texts/s over the best infinity row's at the same client count; returns those best rows."""
    best = {}
    for row in rows:
        if row["server"].startswith("infinity") and row["texts/s"] > best.get(row["clients"], {}).get("texts/s", 0):
            best[row["clients"]] = row
    for row in rows:
        top = best.get(row["clients"])
        row["x best infinity"] = row["texts/s"] / top["texts/s"] if top else None
    return best


def summary(rows: list[dict], best: dict[int, dict]) -> list[str]:
    lines = []
    for clients, top in sorted(best.items()):
        ours = max((r for r in rows if r["clients"] == clients and r["server"].startswith("bertkit")),
                   key=lambda r: r["texts/s"], default=None)
        if ours:
            lines.append(f"{clients} client(s): the best bertkit row ({ours['server']}, {ours['texts/s']:.1f} "
                         f"texts/s) is {ours['x best infinity']:.2f}x the best infinity row ({top['server']}, "
                         f"{top['texts/s']:.1f} texts/s).")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, default=None, help="default: all-MiniLM-L6-v2 (gt package)")
    parser.add_argument("--servers", default=DEFAULT_SERVERS, help=f"comma-separated, from {DEFAULT_SERVERS}")
    parser.add_argument("--clients", default="1,48", help="comma-separated client counts, one row each")
    parser.add_argument("--requests", default="48,240", help="requests per client count, in the same order")
    parser.add_argument("--warmup", type=int, default=32, help="requests sent before measuring, not counted")
    parser.add_argument("--min-tokens", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256, help="default: MiniLM's max_seq_length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120, help="per request, seconds")
    parser.add_argument("--max-seconds", type=float, default=300, help="per row; then the rest are cancelled")
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--compare", type=int, default=16, help="answers compared with sentence-transformers")
    parser.add_argument("--infinity-venv", type=pathlib.Path, default=pathlib.Path("/tmp/infinity-venv"))
    parser.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path("/tmp/serve-peers"),
                        help="the ONNX exports and infinity's caches")
    parser.add_argument("--json", type=pathlib.Path, help="write the result file here")
    args = parser.parse_args(argv)
    args.model = (args.model or serve_load.minilm()).resolve()
    names = args.servers.split(",")
    if unknown := sorted(set(names) - set(SERVERS)):
        parser.error(f"--servers: unknown {', '.join(unknown)}; choose from {DEFAULT_SERVERS}")
    try:
        args.clients, args.requests = ([int(x) for x in value.split(",")] for value in (args.clients, args.requests))
    except ValueError:
        parser.error("--clients and --requests: comma-separated whole numbers, e.g. --clients 1,48 --requests 96,480")
    if len(args.clients) != len(args.requests) or min(args.clients + args.requests) < 1:
        parser.error("--requests: one positive count per --clients entry, in the same order")
    if not 2 <= args.min_tokens <= args.max_tokens:
        parser.error("--min-tokens must be at least 2 ([CLS] and [SEP]) and at most --max-tokens")
    args.servers = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dim, max_len = serve_load.model_shape(args.model)
    args.workdir.mkdir(parents=True, exist_ok=True)
    infinity_environment(args.workdir)
    needs_onnx = any(SERVERS[n].onnx for n in args.servers)
    onnx = onnx_dirs(args) if needs_onnx else {}
    texts = serve_load.make_texts(args.model, max([*args.requests, args.warmup]), args.min_tokens, args.max_tokens,
                                  args.seed)
    reference_vectors = reference(args.model, [t for t, _ in texts[:args.compare]])
    print(f"## Peers: {args.model.parent.name}/{args.model.name} (dim {dim}), {args.threads} threads, texts of "
          f"{args.min_tokens}-{args.max_tokens} tokens (seed {args.seed}), clients {args.clients}, requests "
          f"{args.requests}; load average {os.getloadavg()[0]:.2f}\n", flush=True)
    rows, checks, failed = [], {}, False
    for name in args.servers:
        served, checks[SERVERS[name].title] = serve_rows(name, args, texts, onnx, reference_vectors, dim, max_len)
        rows += served
        failed |= any("bad body" in r["errors"] for r in served) or "error" in checks[SERVERS[name].title]
    best = add_ratios(rows)
    print(record.markdown(rows, COLUMNS))
    notes = summary(rows, best) + [f"openai SDK on {title}: {check}" for title, check in checks.items()]
    notes.append(f"load average at the end {os.getloadavg()[0]:.2f} (a shared 2-core machine)")
    print("\n" + "\n".join(notes))
    if args.json:
        tables = [record.table("bertkit serve and infinity-emb, same model, texts and load", rows, COLUMNS, notes)]
        record.write_result(args.json, "serve-peers", tables, title="Serving beside infinity-emb",
                            data={"rows": rows, "openai": checks, "versions": versions(args)})
    return 1 if failed else 0


def versions(args: argparse.Namespace) -> dict:
    """The peer's packages as its virtual environment has them (pip's metadata, read by its own python)."""
    names = ["infinity-emb", "torch", "transformers", "sentence-transformers", "optimum", "onnxruntime"]
    code = ("import importlib.metadata as m, json, sys\n"
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    run = subprocess.run([str(args.infinity_venv / "bin" / "python"), "-c", code, *names], capture_output=True,
                         text=True)
    return json.loads(run.stdout) if run.returncode == 0 else {"error": run.stderr[-500:]}


if __name__ == "__main__":
    sys.exit(main())
