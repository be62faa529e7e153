"""Mining and deduplicating from an embedding store vs re-encoding: what reading the store saves.

One corpus of Austen sentences (benchmarks/embed.py's source; repeated sentences left out, so that the two
minings have the same candidates), embedded once by the job into a store
(all-MiniLM-L6-v2, fp32); (query, positive) pairs of consecutive sentences. Timed in this one process:

- mining by re-encoding: ``mine_hard_negatives`` encoding the corpus and the queries (what ``bertkit embed mine
  --corpus`` does);
- mining from the store: ``mine_from_store`` encoding the queries only, the corpus side read shard by shard
  (``--corpus-embeddings``); the rows must equal the re-encoding's;
- dedup: ``near_duplicates`` over the store at --threshold, and over a store of random unit vectors of --dedup-rows
  (its time grows with the square of the rows: the measured rate gives the estimate for larger ones);
- memory: the peak RSS of a process mining 100 queries from stores of random vectors at each of --memory-rows
  (its growth beyond the process after its imports), the store written by another process first.

``python benchmarks/embed_mine.py [--corpus 1500] [--pairs 100] [--dedup-rows 20000] [--json FILE]``
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from embed import minilm, sentences


def timed(function):
    start = time.perf_counter()
    out = function()
    return out, time.perf_counter() - start


def random_store(directory: pathlib.Path, rows: int, dim: int, shard_rows: int = 50_000):
    """A store of ``rows`` random unit vectors (row-number ids), shards of ``shard_rows``."""
    from bertkit.embed_job.store import open_store, shard_name, write_index, write_shard

    rng = np.random.default_rng(0)
    records = []
    for n, start in enumerate(range(0, rows, shard_rows)):
        vectors = rng.standard_normal((min(shard_rows, rows - start), dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        records.append(write_shard(directory, shard_name(n), np.arange(start, start + len(vectors)), vectors,
                                   "dense"))
    write_index(directory, {"model": {"kind": "dense", "dim": dim}, "input": {}, "shards": records,
                            "complete": True})
    return open_store(directory)


def mining_peak(directory: pathlib.Path, rows: int, dim: int = 64) -> dict:
    """Peak RSS (MiB) of a fresh process mining 100 queries from a store of ``rows`` random rows (and a corpus file
    of as many lines), beyond that process's RSS after its imports; the store is written by another process."""
    import json
    import subprocess

    here = pathlib.Path(__file__).resolve().parent
    write = (f"import sys, pathlib; sys.path.insert(0, {str(here)!r}); from embed_mine import random_store; "
             f"random_store(pathlib.Path({str(directory)!r}), {rows}, {dim}); "
             f"pathlib.Path({str(directory / 'corpus.txt')!r}).write_text(''.join(f'passage {{i}}\\n' "
             f"for i in range({rows})))")
    subprocess.run([sys.executable, "-c", write], check=True)
    child = subprocess.run([sys.executable, "-c", MINE_CHILD, str(directory), str(dim)], check=True,
                           capture_output=True, text=True)
    return json.loads(child.stdout.splitlines()[-1])


#: a process that mines from a store and prints its RSS after imports and at its peak (MiB)
MINE_CHILD = """
import json, sys
import numpy as np
from bertkit.embed_job.mine import mine_from_store
from bertkit.embed_job.store import open_store
def rss():  # VmHWM: this process's peak (ru_maxrss would keep the forking parent's across exec)
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    return int(status.split()[0]) / 1024
base = rss()
store = open_store(sys.argv[1])
corpus = lambda: enumerate(line.rstrip("\\n") for line in open(sys.argv[1] + "/corpus.txt"))
queries = [f"query {i}" for i in range(100)]
positives = [f"passage {i * 7}" for i in range(100)]
vectors = np.random.default_rng(1).standard_normal((100, int(sys.argv[2]))).astype(np.float32)
mined = mine_from_store(queries, positives, store, corpus, query_vectors=vectors, range_max=50)
print(json.dumps({"rows": len(store), "base_mib": base, "peak_mib": rss(), "mined": len(mined.rows)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=int, default=1500, help="corpus sentences (default 1500)")
    parser.add_argument("--pairs", type=int, default=100, help="(query, positive) pairs (default 100)")
    parser.add_argument("--threshold", type=float, default=0.95, help="dedup's cosine threshold (default 0.95)")
    parser.add_argument("--dedup-rows", type=int, default=20_000, help="rows of the random store deduplicated "
                                                                        "(default 20000)")
    parser.add_argument("--memory-rows", type=int, nargs="*", default=[50_000, 500_000],
                        help="store sizes of the memory measure (default 50000 500000; none: skip it)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the tables here (benchmarks/record.py)")
    args = parser.parse_args()
    from bertkit.embed_job.dedup import near_duplicates
    from bertkit.embed_job.mine import mine_from_store, store_corpus
    from bertkit.embed_job.run import JobConfig, embed_corpus
    from bertkit.embed_job.store import open_store
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.mining import mine_hard_negatives

    texts = list(dict.fromkeys(sentences(args.corpus + 1)))  # without repeats: the store keeps them, mining did not
    queries, positives, corpus = texts[:args.pairs], texts[1:args.pairs + 1], texts[1:]
    model = SentenceTransformer(minilm(), dtype="fp32")
    encode = model.encode
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file = pathlib.Path(tmp) / "corpus.txt"
        corpus_file.write_text("\n".join(corpus) + "\n")
        _, embed_s = timed(lambda: embed_corpus(JobConfig(str(minilm()), (str(corpus_file),), f"{tmp}/store",
                                                          shard_rows=1000, dtype="fp32", progress=False)))
        store = open_store(f"{tmp}/store")
        encoded, encoded_s = timed(lambda: mine_hard_negatives(queries, positives, corpus, encode))
        stored, stored_s = timed(lambda: mine_from_store(queries, positives, store, store_corpus(store), encode))
        verdicts, dedup_s = timed(lambda: list(near_duplicates(store, args.threshold)))
        big = random_store(pathlib.Path(tmp) / "random", args.dedup_rows, store.dim)
        _, big_s = timed(lambda: sum(1 for _ in near_duplicates(big, args.threshold)))
        peaks = [mining_peak(pathlib.Path(tmp) / f"memory-{rows}", rows) for rows in args.memory_rows]
    equal = stored.rows == encoded.rows
    mining = [
        {"variant": "re-encoding (--corpus)", "seconds": encoded_s, "x re-encoding": 1.0, "rows": len(encoded.rows)},
        {"variant": "from the store (--corpus-embeddings)", "seconds": stored_s, "x re-encoding": encoded_s / stored_s,
         "rows": len(stored.rows)},
        {"variant": "embedding the store once (the job, 1 worker)", "seconds": embed_s, "x re-encoding": None,
         "rows": None},
    ]
    dropped = sum(1 for v in verdicts if v.duplicate_of is not None)
    dedup = [{"store": f"Austen sentences, MiniLM ({len(store)} rows)", "seconds": dedup_s,
              "rows/s": len(store) / dedup_s, "duplicates": dropped},
             {"store": f"random unit vectors ({args.dedup_rows} x {store.dim})", "seconds": big_s,
              "rows/s": args.dedup_rows / big_s, "duplicates": None}]
    memory = [{"store rows (64 dims)": p["rows"], "RSS after imports (MiB)": p["base_mib"],
               "peak RSS (MiB)": p["peak_mib"], "growth (MiB)": p["peak_mib"] - p["base_mib"]} for p in peaks]
    notes = [f"{args.pairs} pairs, {len(corpus)} corpus sentences, all-MiniLM-L6-v2 fp32; rows equal: {equal}",
             "exact dedup compares every pair: its time grows with rows^2 "
             f"({args.dedup_rows} rows in {big_s:.1f} s: 10x the rows, about 100x the time)"]
    print(record.markdown(mining, list(mining[0])))
    print(record.markdown(dedup, list(dedup[0])))
    if memory:
        print(record.markdown(memory, list(memory[0])))
    print("\n".join(notes))
    if not equal:
        sys.exit("the rows mined from the store differ from the re-encoding's")
    if args.json:
        record.write_result(args.json, "embed-mine", [record.table("Mining hard negatives: store vs re-encoding",
                                                                   mining, notes=notes[:1]),
                                                      record.table(f"Near-duplicates (--threshold {args.threshold})",
                                                                   dedup, notes=notes[1:]),
                                                      *([record.table("Peak memory of mining from a store (100 "
                                                                      "queries, random vectors)", memory)]
                                                        if memory else [])],
                            title="Mining and dedup from an embedding store",
                            data={"rows_equal": equal, "pairs": args.pairs, "corpus": len(corpus)})


if __name__ == "__main__":
    main()
