"""The embedding job's throughput, scaling and memory: ``bertkit embed MODEL --input CORPUS -o OUT`` beside the model.

Three tables, each run in fresh processes (so each loads its model as a job does), on a JSON-lines corpus of
the bundled Austen sentences (benchmarks/embed.py's, repeated to the size asked):

* **rate**: all-MiniLM-L6-v2 at fp32, the model's own ``SentenceTransformer.encode`` (one process, torch's
  threads, timed after loading) against the job on one worker (in process), on 2 workers (a process pool, one
  torch thread each) and on a Dask cluster started from its own CLI (``dask scheduler`` + 2 ``dask worker``
  processes of one thread on 127.0.0.1). Rounds alternate the variants; medians. The job's time is its whole
  run (imports, model load, planning, reading, writing the Parquet shards and the index); its start-up is the
  same job on 4 rows, and "rows/s after start-up" divides the rows by the difference (the model's start-up is
  its load, taken in its own process).
* **static** (``--static-rows N``): the same without Dask for a random 256-dimension static model over
  MiniLM's tokenizer, whose own ``encode`` (batches of 1,024 on its threads) is the rate to keep: there the
  reading, tokenizing and writing are most of the work.
* **memory**: the peak resident memory (VmRSS summed over the job's process tree and a Dask cluster's workers,
  sampled every 50 ms) of the job on one worker (one torch thread) at two corpus sizes, with a small random BERT
  (MiniLM's tokenizer, 1 layer of 32, 32 tokens a text) so that hundreds of thousands of rows finish: the job
  streams, so the peak should not grow with the corpus.

    python benchmarks/embed_job.py [--rows 2000] [--rounds 2] [--memory-rows 50000 500000]
    python benchmarks/embed_job.py --json benchmarks/results/embed-job.json   # the tables, for the docs
    python benchmarks/embed_job.py --no-rate --memory-rows --static-rows 200000 --json STATIC.json   # static
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from embed import minilm, sentences
from memory import proc_status_kb

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
DASK = pathlib.Path(sys.executable).parent / "dask"

#: the model's own rate, in a fresh process: load, one warm-up batch, then the timed encode
MODEL_RUN = """
import json, sys, time
from bertkit.sentence.model import SentenceTransformer
texts = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
start = time.perf_counter()
model = SentenceTransformer(sys.argv[1], dtype=sys.argv[3])
loaded = time.perf_counter()
model.encode(texts[:64], batch_size=int(sys.argv[4]), show_progress_bar=False)
start_encode = time.perf_counter()
model.encode(texts, batch_size=int(sys.argv[4]), show_progress_bar=False)
print(json.dumps({"seconds": time.perf_counter() - start_encode, "load_s": loaded - start}))
"""

#: a static model's own rate, in a fresh process: load, a warm-up, then its encode in batches of 1,024
STATIC_RUN = """
import json, sys, time
from bertkit.sentence.static import load_static
texts = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
start = time.perf_counter()
module, normalize, _ = load_static(sys.argv[1])
loaded = time.perf_counter()
module.encode(texts[:2048], batch_size=1024, normalize=normalize)
start_encode = time.perf_counter()
module.encode(texts, batch_size=1024, normalize=normalize)
print(json.dumps({"seconds": time.perf_counter() - start_encode, "load_s": loaded - start}))
"""

#: the job, in a fresh process, timed whole
JOB_RUN = """
import json, sys, time
from bertkit.embed_job.run import JobConfig, embed_corpus
options = json.loads(sys.argv[1])
options["inputs"] = tuple(options["inputs"])
start = time.perf_counter()
index = embed_corpus(JobConfig(**options))
print(json.dumps({"seconds": time.perf_counter() - start, "rows": index["rows"], "shards": len(index["shards"])}))
"""


def write_corpus(path: pathlib.Path, rows: int) -> pathlib.Path:
    """``rows`` sentences as JSON lines ``{"text": ...}``."""
    with path.open("w", encoding="utf-8") as handle:
        for text in sentences(rows):
            handle.write(json.dumps({"text": text}) + "\n")
    return path


def tree_rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` and every descendant (a process pool's workers), in kB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += proc_status_kb(current, "VmRSS") or 0
        for task in pathlib.Path(f"/proc/{current}/task").glob("*"):  # a child started by any thread (a nanny's)
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


def run_child(code: str, *args: str, also: tuple[int, ...] = (), env: dict | None = None,
              interval: float = 0.05) -> dict:
    """Run ``code`` in a fresh Python with ``args``; its printed JSON plus ``peak_rss_gb`` of its process tree and
    of the processes ``also`` (a Dask cluster's workers)."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], env={**ENV, **(env or {})}, stdout=subprocess.PIPE,
                             text=True)
    peak = 0
    while child.poll() is None:
        peak = max(peak, sum(tree_rss_kb(pid) for pid in (child.pid, *also)))
        time.sleep(interval)
    out = child.stdout.read()
    if child.returncode:
        raise RuntimeError(f"the benchmark's child failed ({child.returncode}): {out[-400:]}")
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_gb": peak / 1024**2}


def job(model: pathlib.Path, corpus: pathlib.Path, out: pathlib.Path, also: tuple[int, ...] = (),
        env: dict | None = None, **options) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    config = {"model": str(model), "inputs": [str(corpus)], "out": str(out), "progress": False, **options}
    return run_child(JOB_RUN, json.dumps(config), also=also, env=env)


class DaskCluster:
    """``dask scheduler`` and ``workers`` ``dask worker`` processes on 127.0.0.1, from the CLI: one Dask thread
    and one torch thread each (``OMP_NUM_THREADS=1``, as a pool worker of the job gets)."""

    def __init__(self, workers: int, workdir: pathlib.Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        log = (workdir / "dask.log").open("w")
        self.processes = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                            "--no-dashboard"], env=ENV, stdout=log, stderr=log)]
        time.sleep(3)
        self.processes += [subprocess.Popen([str(DASK), "worker", self.address, "--nthreads", "1", "--no-dashboard",
                                             "--local-directory", str(workdir / f"dask-{n}")],
                                            env={**ENV, "OMP_NUM_THREADS": "1"}, stdout=log,
                                            stderr=log) for n in range(workers)]
        self.worker_pids = tuple(p.pid for p in self.processes[1:])
        self._wait(workers)

    def _wait(self, workers: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(workers, timeout=120)

    def close(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            process.wait(timeout=30)


def tiny_model(directory: pathlib.Path) -> pathlib.Path:
    """A random BERT of 1 layer of 32 with MiniLM's tokenizer, reading at most 32 tokens of a text, saved as a
    sentence-transformers directory: the job's own costs (reading, tokenizing, writing) show beside it."""
    import bertkit

    bert = directory / "bert"
    bertkit.BERTTokenizerFast.from_pretrained(minilm()).save_pretrained(bert)
    config = bertkit.BERTConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=512)
    bertkit.BERT(config).save_pretrained(bert)
    model = bertkit.SentenceTransformer(bert, dtype="fp32")
    model.max_seq_length = 32
    return model.save(directory / "st")


def static_model(directory: pathlib.Path) -> pathlib.Path:
    """A random 256-dimension static model over MiniLM's tokenizer (its speed does not depend on the values)."""
    import torch
    from tokenizers import Tokenizer

    from bertkit.sentence.static import StaticEmbedding, save_static

    tokenizer = Tokenizer.from_file(str(minilm() / "tokenizer.json"))
    table = torch.randn(tokenizer.get_vocab_size(), 256, generator=torch.Generator().manual_seed(0))
    return save_static(StaticEmbedding(tokenizer, table), directory, normalize=True)


def rate_table(args, work: pathlib.Path, static: bool = False) -> tuple[dict, dict]:
    """The model's own rate beside the job's (module doc): all-MiniLM-L6-v2, or with ``static`` a static model
    (no Dask run)."""
    count = args.static_rows if static else args.rows
    corpus, small = write_corpus(work / "rate.jsonl", count), write_corpus(work / "startup.jsonl", 4)
    model = static_model(work / "static") if static else minilm()
    out, shard_rows = work / "out", max(1, count // 4)
    cluster = None if static else DaskCluster(2, work)

    def variants(path: pathlib.Path, rows: int) -> dict:
        common = {"dtype": "fp32", "batch_size": args.batch_size, "shard_rows": rows}
        own = (lambda: run_child(STATIC_RUN, str(model), str(path))) if static else (
            lambda: run_child(MODEL_RUN, str(model), str(path), "fp32", str(args.batch_size)))
        out_variants = {
            "model encode (1 process)": own,
            "job, 1 worker": lambda: job(model, path, out, **common),
            "job, 2 workers (process pool)": lambda: job(model, path, out, workers=2, **common),
        }
        if cluster is not None:
            out_variants["job, Dask: 2 workers x 1 thread"] = lambda: job(model, path, out, also=cluster.worker_pids,
                                                                          dask=cluster.address, **common)
        return out_variants

    try:
        # each job's fixed costs (imports, model load, planning, the index) on 4 rows in 4 shards, after one job
        # has warmed the Dask workers (a standing cluster keeps its model loaded); then the rounds
        if cluster is not None:
            variants(small, 1)["job, Dask: 2 workers x 1 thread"]()
        startup = {name: run()["seconds"] for name, run in list(variants(small, 1).items())[1:]}
        print("start-up", startup, flush=True)
        runs: dict[str, list[dict]] = {name: [] for name in variants(corpus, shard_rows)}
        for _ in range(args.rounds):
            for name, run in variants(corpus, shard_rows).items():
                runs[name].append(run())
                print(name, runs[name][-1], flush=True)
    finally:
        if cluster is not None:
            cluster.close()
    load = statistics.median(r["load_s"] for r in runs["model encode (1 process)"])
    base = count / statistics.median(r["seconds"] for r in runs["model encode (1 process)"])
    rows = []
    for name, results in runs.items():
        seconds = statistics.median(r["seconds"] for r in results)
        fixed = startup.get(name)
        steady = count / (seconds - fixed) if fixed is not None and seconds > fixed else None
        rows.append({"variant": name, "seconds": seconds, "rows/s": count / seconds,
                     "start-up s": fixed if fixed is not None else load,
                     "rows/s after start-up": steady if steady is not None else base,
                     "x model encode": (steady if steady is not None else base) / base,
                     "peak RSS GB": max(r["peak_rss_gb"] for r in results)})
    what = ("a static model (256 dimensions, MiniLM's tokenizer; its encode in batches of 1,024)" if static else
            f"all-MiniLM-L6-v2 fp32, batch size {args.batch_size}")
    title = f"{what}, {count:,} Austen sentences, {os.cpu_count()} cores, medians of {args.rounds} alternating rounds"
    notes = [f"The corpus is cut into 4 shards of {shard_rows:,} rows (--shard-rows), the same for every job.",
             "A job's seconds are its whole run: imports, model load, planning, reading, the Parquet shards, the "
             "index. Its start-up s is the same job on 4 rows; rows/s after start-up = rows / (seconds - start-up). "
             "The model's start-up is its load; its rate is timed after it.",
             "Workers of the pool and of Dask run one torch thread each; the job in process and the model run torch's "
             f"own ({os.cpu_count()} here). The Dask workers keep their model loaded between jobs, as a standing "
             "cluster does: one job warmed them before any was timed.",
             "Peak RSS: the job's processes, the Dask workers included."]
    return record.table(title, rows, notes=notes), {"runs": runs, "startup": startup}


def memory_table(args, work: pathlib.Path) -> tuple[dict, dict]:
    model = tiny_model(work / "tiny")
    runs, rows = {}, []
    for count in args.memory_rows:
        corpus = write_corpus(work / f"memory-{count}.jsonl", count)
        result = job(model, corpus, work / "memory-out", env={"OMP_NUM_THREADS": "1"}, dtype="fp32",
                     batch_size=args.batch_size)
        runs[str(count)] = result
        print(count, result, flush=True)
        rows.append({"rows": count, "corpus MB": corpus.stat().st_size / 1e6, "shards": result["shards"],
                     "seconds": result["seconds"], "rows/s": count / result["seconds"],
                     "peak RSS GB": result["peak_rss_gb"]})
        corpus.unlink()
    title = (f"Peak memory of the job on one worker (one torch thread): a random 1x32 BERT (MiniLM's tokenizer, 32 "
             f"tokens a text), batch size {args.batch_size}, default shards of 50,000 rows")
    notes = ["VmRSS of the job's process, sampled every 50 ms."]
    return record.table(title, rows, notes=notes), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="rows of the rate corpus (MiniLM)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--memory-rows", type=int, nargs="*", default=[50_000, 500_000],
                        help="corpus sizes of the memory table (none: no memory table)")
    parser.add_argument("--no-rate", action="store_true", help="no MiniLM rate table")
    parser.add_argument("--static-rows", type=int, default=0, help="rows of a static model's rate table (0: none)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the tables here (benchmarks/record.py's format)")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="embed-job-bench-"))
    tables, data = [], {}
    try:
        if not args.no_rate:
            table, data["rate_runs"] = rate_table(args, work)
            tables.append(table)
            print(f"\n{table['title']}\n" + record.markdown(table["rows"], table["columns"]) + "\n", flush=True)
        if args.static_rows:
            table, data["static_runs"] = rate_table(args, work, static=True)
            tables.append(table)
            print(f"\n{table['title']}\n" + record.markdown(table["rows"], table["columns"]) + "\n", flush=True)
        if args.memory_rows:
            table, data["memory_runs"] = memory_table(args, work)
            tables.append(table)
            print(f"\n{table['title']}\n" + record.markdown(table["rows"], table["columns"]) + "\n", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        record.write_result(args.json, args.json.stem, tables, data=data,
                            title="The embedding job: rate beside the model, scaling, Dask, memory (embed_job.py)")


if __name__ == "__main__":
    main()
