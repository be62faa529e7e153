"""Pretraining-data creation: ``bertkit data create`` vs HF's ``run_mlm.py`` recipe, on the same JSONL corpus.

The corpus (``benchmarks/data_corpus.py``): documents of 5 to 40 paragraphs of the bundled Austen novels,
drawn with a fixed seed, one ``{"text": ...}`` object per line, ``--sizes`` MB each (10^6 bytes), written
once into ``--corpus-dir`` and reused while its side file says it is the same corpus.

For each size and worker count (``--workers``), each library runs as a subprocess, one after the other:

* bertkit: ``python -m bertkit.cli data create CORPUS --tokenizer VOCAB -o OUT --max-seq-length 128
  --workers N --quiet`` (NSP pairs, per-batch masking: bertkit's defaults); instances and tokens are read
  from ``OUT/index.json``.
* HF: what most users copy from transformers' ``examples/pytorch/language-modeling/run_mlm.py`` without
  ``--line_by_line``: ``datasets.load_dataset("json", data_files=CORPUS, split="train")``, then
  ``.map(tokenize_function, batched=True, num_proc=N, remove_columns=["text"])`` with a
  ``BertTokenizerFast`` loaded ``from_pretrained`` from a directory holding bert-base-uncased's vocab
  (``return_special_tokens_mask=True``), then ``.map(group_texts, batched=True, num_proc=N)``: the
  token lists concatenated and cut into blocks of 128 (the remainder of each batch dropped, as there).
  It is this script in a hidden mode (``--_run-hf``), with a fresh datasets cache in a temporary
  directory (``cache_dir`` and ``HF_DATASETS_CACHE``; nothing is reused between runs); the time runs
  until the final dataset's Arrow cache files are written (checked to exist; instances: its rows).
  With ``num_proc`` ≥ 1 datasets maps in a pool of that many forked processes (one included, plus a
  manager process) and sets ``TOKENIZERS_PARALLELISM=false`` in them, so each worker tokenizes on one
  thread; run_mlm's default (no ``--preprocessing_num_workers``) would map in-process instead.

"N workers" means N CPU cores for both: unless ``--no-pin``, each run's whole process tree is pinned to
N of the cores this script may use (``sched_setaffinity``), so the tokenizer's own threads (the Rust
``tokenizers`` library sizes its pool by the cores it sees) get no more than the N cores either.

Measured per run: wall time from start to exit; MB/s = corpus bytes / wall time; CPU seconds of the
whole tree (user + system, from the exited children's rusage); peak memory of the whole process tree,
sampled every ``--interval`` s (default 0.05) from ``/proc``: the tree is walked through
``/proc/PID/task/*/children``, and for each process ``/proc/PID/smaps_rollup`` gives RSS and PSS. The
peaks are of the sums over the tree. PSS splits a page shared by k processes (pages of a parent shared by
its forked workers, a common file mapping) into k parts, so its sum counts each page once where RSS
counts it in every process; "PSS anon" is the anonymous (heap) part of PSS, without file pages (a
memory-mapped Arrow or shard file counts in RSS and PSS while it is read, though the kernel may drop
those pages at will). A process that lives less than one sampling interval may be missed. Memory is in
MB of 10^6 bytes.

With ``--repeats`` > 1 the runs are interleaved (bertkit, HF, bertkit, ...) and the table gives the
median wall time and the largest peaks. The corpus is read from the page cache by both (it was just
written or read). Every run's numbers go to ``--out`` as a JSON line (``"kind": "run"``), the targets as
one more line (``"kind": "targets"``). Targets (bertkit's; PASS / FAIL printed, never asserted):
bertkit ≥ 1.5x HF's MB/s at equal workers; bertkit with 2 workers ≥ 1.8x its 1-worker MB/s; bertkit's
peak RSS and PSS ≤ 1.5 GB at the largest size and within 10 % of the smallest size's.

    python benchmarks/data.py                                  # 200 MB, 1 and 2 workers
    python benchmarks/data.py --sizes 200 1000 --workers 1 2 --repeats 3 --out data-results.jsonl
    python benchmarks/data.py --sizes 10 --skip-hf            # a quick look at bertkit alone

Needs the test extras (``datasets``, ``transformers``; ``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bertkit.resources import BERT_BASE_UNCASED_VOCAB  # a path: imports neither torch nor numpy

BLOCK = 128  # --max-seq-length of both
MB = 1e6
TARGET_SPEEDUP = 1.5  # bertkit / HF MB/s at equal workers
TARGET_SCALING = 1.8  # bertkit 2 workers / 1 worker
TARGET_PEAK_MB = 1500.0  # at the largest size
TARGET_GROWTH = 0.10  # largest size's peak over the smallest's


# ---------------------------------------------------------------------------- /proc sampling
_HAS_CHILDREN_FILES = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants alive now (``/proc/PID/task/*/children``, else every ``/proc/*/stat``)."""
    if not _HAS_CHILDREN_FILES:
        return _tree_pids_by_scan(root)
    pids, i = [root], 0
    while i < len(pids):
        for children in glob.glob(f"/proc/{pids[i]}/task/*/children"):
            with contextlib.suppress(OSError):
                pids.extend(int(pid) for pid in Path(children).read_text().split())
        i += 1
    return pids


def _tree_pids_by_scan(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = Path(stat).read_text()
            fields = text[text.rindex(")") + 2:].split()  # after "(comm)", which may hold spaces
            parents.setdefault(int(fields[1]), []).append(int(text.split(maxsplit=1)[0]))
    pids, i = [root], 0
    while i < len(pids):
        pids.extend(parents.get(pids[i], []))
        i += 1
    return pids


def process_memory(pid: int) -> dict[str, int]:
    """``{"rss", "pss", "pss_anon"}`` of one process in bytes (zeros for one gone or not readable)."""
    memory = {"rss": 0, "pss": 0, "pss_anon": 0}
    keys = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_anon"}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(" ")
            if key in keys:
                memory[keys[key]] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        with contextlib.suppress(OSError, ValueError, IndexError):  # no smaps_rollup: RSS alone
            memory["rss"] = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return memory


class TreeSampler(threading.Thread):
    """Samples the summed memory of a process tree every ``interval`` s until :meth:`stop`; keeps the peaks."""

    def __init__(self, root: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak = {"rss": 0, "pss": 0, "pss_anon": 0}
        self.samples, self.max_processes = 0, 0
        self._done = threading.Event()

    def sample(self) -> None:
        pids = tree_pids(self.root)
        total = {"rss": 0, "pss": 0, "pss_anon": 0}
        for pid in pids:
            for key, value in process_memory(pid).items():
                total[key] += value
        for key, value in total.items():
            self.peak[key] = max(self.peak[key], value)
        self.samples += 1
        self.max_processes = max(self.max_processes, len(pids))

    def run(self) -> None:
        while not self._done.is_set():
            start = time.perf_counter()
            self.sample()
            self._done.wait(max(0.0, self.interval - (time.perf_counter() - start)))

    def stop(self) -> None:
        self._done.set()
        self.join()


def measure(command: list[str], env: dict | None = None, cpus: set[int] | None = None,
            interval: float = 0.05, timeout: float | None = None) -> dict:
    """Run ``command`` to its end; its wall seconds, exit status, output, CPU seconds (its tree, user + system)
    and peak memory of its process tree in MB (``peak_rss_mb``, ``peak_pss_mb``, ``peak_pss_anon_mb``).
    ``cpus``: pin the tree to these cores."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        sampler = TreeSampler(process.pid, interval)
        sampler.start()
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        wall = time.perf_counter() - start
        sampler.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"returncode": returncode, "wall_s": wall, "cpu_s": cpu, "stdout": stdout, "stderr": stderr,
            "samples": sampler.samples, "max_processes": sampler.max_processes,
            **{f"peak_{key}_mb": value / MB for key, value in sampler.peak.items()}}


def directory_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / MB


# ---------------------------------------------------------------------------- HF: run_mlm.py's recipe
def run_hf(corpus: str, num_proc: int, cache_dir: str) -> None:
    """run_mlm.py's data preparation (without --line_by_line), in this process; prints a JSON line of counts."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    tokenizer_dir = Path(cache_dir) / "tokenizer"
    tokenizer_dir.mkdir(parents=True)
    shutil.copy(BERT_BASE_UNCASED_VOCAB, tokenizer_dir / "vocab.txt")
    # from_pretrained on a directory, as run_mlm (AutoTokenizer); transformers 5 ignores BertTokenizerFast(vocab_file=)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tokenizer_dir)
    assert tokenizer.vocab_size == 30522, tokenizer.vocab_size

    raw = datasets.load_dataset("json", data_files=corpus, split="train", cache_dir=cache_dir)

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize_function, batched=True, num_proc=num_proc, remove_columns=["text"],
                        desc="Running tokenizer on every text in dataset")

    def group_texts(examples):
        concatenated = {k: [t for row in examples[k] for t in row] for k in examples}  # list(chain(*...))
        total_length = len(concatenated[next(iter(examples))]) // BLOCK * BLOCK
        return {k: [t[i:i + BLOCK] for i in range(0, total_length, BLOCK)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc,
                            desc=f"Grouping texts in chunks of {BLOCK}")
    files = [f["filename"] for f in grouped.cache_files]
    assert files and all(Path(f).is_file() for f in files), f"no Arrow cache files: {grouped.cache_files}"
    print(json.dumps({"instances": len(grouped), "tokens": len(grouped) * BLOCK, "arrow_files": len(files),
                      "datasets": datasets.__version__, "transformers": transformers.__version__}))


# ---------------------------------------------------------------------------- one run of each
def _cpus(workers: int, pin: bool) -> set[int] | None:
    if not pin:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if workers > len(allowed):
        print(f"note: {workers} workers, only {len(allowed)} cores allowed: not pinned")
        return None
    return set(allowed[:workers])


def bertkit_run(corpus: Path, workers: int, workdir: Path, args) -> dict:
    out = workdir / "bertkit-out"
    command = [sys.executable, "-m", "bertkit.cli", "data", "create", str(corpus), "--tokenizer",
               str(BERT_BASE_UNCASED_VOCAB), "-o", str(out), "--max-seq-length", str(BLOCK),
               "--workers", str(workers), "--quiet"]
    result = measure(command, cpus=_cpus(workers, args.pin), interval=args.interval)
    if result["returncode"] == 0:
        index = json.loads((out / "index.json").read_text())
        result |= {"instances": index["num_instances"], "tokens": index["num_tokens"], "output_mb": directory_mb(out)}
    return result


def hf_run(corpus: Path, workers: int, workdir: Path, args) -> dict:
    cache = workdir / "hf-cache"
    cache.mkdir()
    env = os.environ | {"HF_DATASETS_CACHE": str(cache), "HF_HOME": str(cache / "home"), "HF_HUB_OFFLINE": "1",
                        "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, __file__, "--_run-hf", str(corpus), "--workers", str(workers),
               "--_cache-dir", str(cache)]
    result = measure(command, env=env, cpus=_cpus(workers, args.pin), interval=args.interval)
    if result["returncode"] == 0:
        result |= json.loads(result["stdout"].strip().splitlines()[-1])
        result["output_mb"] = directory_mb(cache / "json")  # the loaded corpus and both maps' Arrow files
    return result


# ---------------------------------------------------------------------------- report
def markdown(rows: list[dict], columns: list[str]) -> str:
    def cell(v):
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def summarize(runs: list[dict]) -> dict | None:
    """Median wall time (and its MB/s), the largest peaks, of the successful runs of one library at one setting."""
    ok = [r for r in runs if r["returncode"] == 0]
    if not ok:
        return None
    wall = statistics.median(r["wall_s"] for r in ok)
    return {"wall_s": wall, "mb_per_s": ok[0]["corpus_mb"] / wall, "cpu_s": statistics.median(r["cpu_s"] for r in ok),
            **{k: max(r[k] for r in ok) for k in ("peak_rss_mb", "peak_pss_mb", "peak_pss_anon_mb")},
            **{k: ok[0].get(k) for k in ("instances", "tokens", "output_mb")}}


def scaling(summary: dict, size: float) -> float | None:
    """bertkit's MB/s with 2 workers over its MB/s with 1, at ``size``."""
    one, two = summary.get(("bertkit", size, 1)), summary.get(("bertkit", size, 2))
    return two["mb_per_s"] / one["mb_per_s"] if one and two else None


def _check(ok: bool | None, text: str) -> dict:
    verdict = "n/a " if ok is None else "PASS" if ok else "FAIL"
    print(f"{verdict}  {text}")
    return {"target": text, "pass": ok}


def targets(summary: dict, sizes: list[float], workers: list[int]) -> list[dict]:
    """PASS / FAIL lines for bertkit's targets (``summary``: (library, size, workers) -> summary or None)."""
    checks = []
    for size in sizes:
        for w in workers:
            ours, hf = summary.get(("bertkit", size, w)), summary.get(("HF", size, w))
            ratio = ours["mb_per_s"] / hf["mb_per_s"] if ours and hf else None
            checks.append(_check(None if ratio is None else ratio >= TARGET_SPEEDUP,
                                 f"bertkit ≥ {TARGET_SPEEDUP}x HF MB/s, {size:g} MB, {w} worker(s): "
                                 + (f"{ratio:.2f}x" if ratio else "no pair of runs")))
        if 1 in workers and 2 in workers:
            x = scaling(summary, size)
            checks.append(_check(None if x is None else x >= TARGET_SCALING,
                                 f"bertkit 2 workers ≥ {TARGET_SCALING}x 1 worker, {size:g} MB: "
                                 + (f"{x:.2f}x" if x else "no pair of runs")))
    small, large = min(sizes), max(sizes)
    for w in workers:
        s, g = summary.get(("bertkit", small, w)), summary.get(("bertkit", large, w))
        for key, name in (("peak_rss_mb", "RSS"), ("peak_pss_mb", "PSS")):
            checks.append(_check(None if g is None else g[key] <= TARGET_PEAK_MB,
                                 f"bertkit peak {name} ≤ {TARGET_PEAK_MB:g} MB at {large:g} MB, {w} worker(s): "
                                 + (f"{g[key]:,.0f} MB" if g else "no run")))
            if large != small:
                growth = g[key] / s[key] - 1 if g and s else None
                checks.append(_check(None if growth is None else growth <= TARGET_GROWTH,
                                     f"bertkit peak {name} at {large:g} MB within {100 * TARGET_GROWTH:g} % of "
                                     f"{small:g} MB's, {w} worker(s): "
                                     + (f"{g[key]:,.0f} vs {s[key]:,.0f} MB ({100 * growth:+.1f} %)"
                                        if growth is not None else "no pair of runs")))
    return checks


def run_all(args, corpora: dict[float, Path], out) -> dict[tuple, list[dict]]:
    """Every run, interleaved: (library, size, workers) -> its runs' results; each written to ``out`` if given."""
    libraries = {"bertkit": bertkit_run} | ({} if args.skip_hf else {"HF": hf_run})
    runs: dict[tuple, list[dict]] = {}
    for repeat in range(args.repeats):
        for size in args.sizes:
            for w in args.workers:
                for library, run in libraries.items():
                    with tempfile.TemporaryDirectory(prefix="bench-data-", dir=args.corpus_dir) as d:
                        result = run(corpora[size], w, Path(d), args)
                    corpus_mb = corpora[size].stat().st_size / MB
                    result |= {"kind": "run", "library": library, "size_mb": size, "corpus_mb": corpus_mb,
                               "workers": w, "repeat": repeat, "pinned": args.pin,
                               "mb_per_s": corpus_mb / result["wall_s"]}
                    error = "" if result["returncode"] == 0 else "".join(result["stderr"].strip().splitlines()[-1:])
                    print(f"  {library:8} {size:g} MB, {w} worker(s), run {repeat + 1}: "
                          f"{result['wall_s']:.1f} s, {result['mb_per_s']:.2f} MB/s, "
                          f"peak RSS {result['peak_rss_mb']:,.0f} MB, PSS {result['peak_pss_mb']:,.0f} MB"
                          + (f"  FAILED (exit {result['returncode']}): {error}" if error else ""), flush=True)
                    result["stderr"] = result["stderr"][-2000:] if error else ""
                    result["stdout"] = result["stdout"][-2000:]
                    runs.setdefault((library, size, w), []).append(result)
                    if out:
                        out.write(json.dumps(result) + "\n")
                        out.flush()
    return runs


def _get(summary: dict | None, key: str):
    return summary[key] if summary else None


def report(summary: dict, args) -> None:
    """The tables: MB/s, ratios and peaks per size and worker count, then each library's details."""
    rows, details = [], []
    for size in args.sizes:
        for w in args.workers:
            ours, hf = summary.get(("bertkit", size, w)), summary.get(("HF", size, w))
            rows.append({"size MB": f"{size:g}", "workers": w, "bertkit MB/s": _get(ours, "mb_per_s"),
                         "HF MB/s": _get(hf, "mb_per_s"),
                         "bertkit / HF": ours["mb_per_s"] / hf["mb_per_s"] if ours and hf else None,
                         "bertkit peak RSS MB": _get(ours, "peak_rss_mb"),
                         "bertkit peak PSS MB": _get(ours, "peak_pss_mb"),
                         "HF peak RSS MB": _get(hf, "peak_rss_mb"), "HF peak PSS MB": _get(hf, "peak_pss_mb")})
            details += [{"size MB": f"{size:g}", "workers": w, "library": library, **s,
                         "cores busy": s["cpu_s"] / s["wall_s"]} for library, s in (("bertkit", ours), ("HF", hf)) if s]
    print(f"\n## Pretraining data from a JSONL corpus, {BLOCK} tokens per instance "
          f"(median of {args.repeats} run(s); peaks: the largest)\n")
    print(markdown(rows, list(rows[0])))
    print("\n## Details (seconds, MB)\n")
    print(markdown(details, ["size MB", "workers", "library", "wall_s", "cpu_s", "cores busy", "peak_pss_anon_mb",
                             "instances", "tokens", "output_mb"]))
    if not args.skip_hf:
        print("\n(bertkit's instances are NSP pairs with [CLS] and [SEP]s, a tenth of them shorter (short_seq_prob "
              f"0.1); HF's are full blocks of {BLOCK} tokens of the concatenated texts.)")
    if 1 in args.workers and 2 in args.workers:
        print("\nbertkit 2 workers / 1 worker: " + ", ".join(
            f"{size:g} MB " + (f"{x:.2f}x" if (x := scaling(summary, size)) else "—") for size in args.sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[200.0], help="corpus sizes, MB")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-hf", action="store_true", help="bertkit alone")
    parser.add_argument("--out", type=Path, help="append a JSON line per run (and one of the targets) here")
    parser.add_argument("--corpus-dir", type=Path, default=Path(tempfile.gettempdir()) / "bertkit-bench-data",
                        help="where the corpora are written and kept, and the outputs written (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="of the corpus")
    parser.add_argument("--interval", type=float, default=0.05, help="memory sampling period, s")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin a run to N cores")
    parser.add_argument("--_run-hf", dest="run_hf", help=argparse.SUPPRESS)
    parser.add_argument("--_cache-dir", dest="cache_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_hf:
        return run_hf(args.run_hf, args.workers[0], args.cache_dir)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from data_corpus import write_corpus  # the benchmark's sibling, not a package (imports torch: not in --_run-hf)

    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in
                         ("bertkit", *(() if args.skip_hf else ("datasets", "transformers", "tokenizers"))))
    print(f"python {platform.python_version()}, {versions}, {os.cpu_count()} CPUs "
          f"({len(os.sched_getaffinity(0))} allowed), pinned: {args.pin}, memory sampled every {args.interval} s")
    corpora = {}
    for size in args.sizes:
        start = time.perf_counter()
        corpora[size] = write_corpus(args.corpus_dir / f"austen-{size:g}MB-seed{args.seed}.jsonl", size, args.seed)
        print(f"corpus {corpora[size]}: {corpora[size].stat().st_size / MB:,.1f} MB "
              f"(ready in {time.perf_counter() - start:.1f} s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") if args.out else contextlib.nullcontext() as out:
        runs = run_all(args, corpora, out)
        summary = {key: summarize(rs) for key, rs in runs.items()}
        report(summary, args)
        print("\n## Targets\n")
        checks = targets(summary, args.sizes, args.workers)
        if out:
            out.write(json.dumps({"kind": "targets", "checks": checks}) + "\n")
            print(f"\nwrote {sum(len(r) for r in runs.values())} runs and the targets to {args.out}")


if __name__ == "__main__":
    main()
