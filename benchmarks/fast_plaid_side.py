"""fast-plaid on the vectors of a bertkit exact multi-vector index, for ``colbert_index.py`` to set beside bertkit's
PLAID index: run with the Python of a separate environment that has ``fast-plaid`` (it pins its own torch), e.g.

    python -m venv /tmp/fastplaid-venv && /tmp/fastplaid-venv/bin/pip install fast-plaid
    /tmp/fastplaid-venv/bin/python benchmarks/fast_plaid_side.py EXACT_INDEX QUERIES.npy QUERY_OFFSETS.npy OUT.json

It reads the index's ``vectors.npy`` / ``offsets.npy`` (numpy only: no bertkit import), builds a fast-plaid index
(``--nbits``, its own k-means and centroid count), then searches each query alone on the CPU and writes, per query,
the positions of the top ``-k`` and the milliseconds, with the build time and the index's bytes on disk.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from fast_plaid import search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index")
    parser.add_argument("queries")
    parser.add_argument("query_offsets")
    parser.add_argument("output")
    parser.add_argument("--nbits", type=int, default=4)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--settings", nargs="+", default=["8:4096"],
                        help="NPROBE:CANDIDATES pairs searched in turn (fast-plaid's n_ivf_probe, n_full_scores)")
    parser.add_argument("--kmeans-iterations", type=int, default=4)
    args = parser.parse_args()
    vectors = np.load(Path(args.index) / "vectors.npy", mmap_mode="r")
    offsets = np.load(Path(args.index) / "offsets.npy")
    docs = [torch.from_numpy(np.array(vectors[a:b], dtype=np.float32)) for a, b in itertools.pairwise(offsets)]
    query_rows, query_offsets = np.load(args.queries), np.load(args.query_offsets)
    queries = [torch.from_numpy(query_rows[a:b].astype(np.float32)) for a, b in
               itertools.pairwise(query_offsets)]
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        index = search.FastPlaid(index=str(Path(work) / "fp"), device="cpu")
        index.create(documents_embeddings=docs, nbits=args.nbits, kmeans_niters=args.kmeans_iterations)
        build = time.perf_counter() - start
        size = sum(p.stat().st_size for p in (Path(work) / "fp").rglob("*") if p.is_file())
        index.search(queries_embeddings=[queries[0]], top_k=args.k, show_progress=False)  # warm
        runs = {}
        for setting in args.settings:
            nprobe, candidates = (int(x) for x in setting.split(":"))
            results, times = [], []
            for query in queries:
                before = time.perf_counter()
                found = index.search(queries_embeddings=[query], top_k=args.k, n_ivf_probe=nprobe,
                                     n_full_scores=candidates, show_progress=False)[0]
                times.append((time.perf_counter() - before) * 1000)
                results.append([int(position) for position, _ in found])
            runs[setting] = {"ms": times, "positions": results}
    Path(args.output).write_text(json.dumps({"build_s": build, "bytes": size, "tokens": int(offsets[-1]),
                                             "runs": runs, "torch": torch.__version__,
                                             "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
