"""The multi-vector indexes (bertkit.retrieval.multivector, .plaid) at given corpus sizes: the compressed PLAID index's
recall@10 against exact MaxSim, its bytes per token and query latency beside the exact index's.

Vectors made up so the sizes can grow without a model, clustered as a ColBERT's are: ``--dim``-dimensional unit
vectors around 40 random centres (three per document, ``--noise`` of spread), 8 to 40 tokens per document; queries
are 32 tokens, each a copy of a random document's tokens with noise (``paraphrase``: one document stands out) or two
centres' tokens (``topical``: many near-ties in the top 10). For each size and ``nbits`` (2, 4): the exact index
(float16) and the PLAID index built from it (centroids by the PLAID rule, 4 k-means iterations), then each query
searched alone: exact, PLAID (MaxSim on decompressed vectors), PLAID with the short list reranked on the exact vectors.

    nice python benchmarks/multivector_index.py [--sizes 5000 20000] [--json benchmarks/results/multivector-index.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)

from bertkit.retrieval.multivector import build_multivector_index
from bertkit.retrieval.plaid import build_plaid_index


def clustered(n: int, dim: int, noise: float, generator: torch.Generator, centres: torch.Tensor,
              tokens: tuple[int, int] = (8, 40), topics: int = 3) -> list[torch.Tensor]:
    """``n`` texts of unit token vectors around ``topics`` of ``centres`` each."""
    texts = []
    for _ in range(n):
        topic = torch.randint(len(centres), (topics,), generator=generator)
        count = int(torch.randint(*tokens, (1,), generator=generator))
        picks = topic[torch.randint(topics, (count,), generator=generator)]
        spread = noise * torch.randn(count, dim, generator=generator) / dim ** 0.5
        texts.append(torch.nn.functional.normalize(centres[picks] + spread, dim=1))
    return texts


def timed_search(search, queries) -> tuple[list, float]:
    """Each query searched alone; the results and the mean milliseconds per query."""
    start = time.perf_counter()
    results = [search([query])[0] for query in queries]
    return results, (time.perf_counter() - start) / len(queries) * 1000


def recall(found: list, truth: list, k: int) -> float:
    return float(np.mean([len(set(a[1].tolist()) & set(b[1].tolist())) / k for a, b in zip(found, truth)]))


def run_size(n: int, args: argparse.Namespace, work: Path) -> list[dict]:
    generator = torch.Generator().manual_seed(args.seed)
    centres = torch.nn.functional.normalize(torch.randn(40, args.dim, generator=generator), dim=1)
    docs = clustered(n, args.dim, args.noise, generator, centres)
    targets = torch.randint(n, (args.queries,), generator=generator).tolist()
    query_sets = {
        "paraphrase": [torch.nn.functional.normalize(docs[t][:32] + args.noise / 2 * torch.randn(
            min(32, len(docs[t])), args.dim, generator=generator) / args.dim ** 0.5, dim=1) for t in targets],
        "topical": clustered(args.queries, args.dim, args.noise, generator, centres, tokens=(32, 33), topics=2)}
    exact = build_multivector_index([docs[i:i + 1000] for i in range(0, n, 1000)], work / f"exact{n}", args.dim,
                                    "synthetic", dtype="float16")
    rows = []
    for nbits in args.nbits:
        start = time.perf_counter()
        plaid = build_plaid_index(exact, work / f"plaid{n}-{nbits}", nbits=nbits, iterations=4, seed=args.seed)
        build = time.perf_counter() - start
        sizes = plaid.bytes_per_token()
        for name, queries in query_sets.items():
            truth, exact_ms = timed_search(partial(exact.search, k=args.k), queries)
            short_list = partial(plaid.search, k=args.k, nprobe=args.nprobe, candidates=args.candidates)
            found, plaid_ms = timed_search(short_list, queries)
            reranked, rerank_ms = timed_search(partial(short_list, rerank=exact), queries)
            rows.append({"documents": n, "tokens": exact.tokens, "queries": name, "nbits": nbits,
                         "centroids": plaid.manifest["centroids"], "build s": round(build, 1),
                         "bytes/token (codes+residuals)": sizes["vectors"],
                         "bytes/token (all files)": round(sizes["total"], 1), "exact bytes/token": 2 * args.dim,
                         f"recall@{args.k}": round(recall(found, truth, args.k), 3),
                         f"recall@{args.k} reranked": round(recall(reranked, truth, args.k), 3),
                         "exact ms/query": round(exact_ms, 2), "plaid ms/query": round(plaid_ms, 2),
                         "reranked ms/query": round(rerank_ms, 2)})
            print(record.markdown([rows[-1]]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000])
    parser.add_argument("--nbits", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--noise", type=float, default=0.6)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--nprobe", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the table here (benchmarks/record.py's format)")
    args = parser.parse_args(argv)
    command = ["benchmarks/multivector_index.py", *(sys.argv[1:] if argv is None else argv)]
    with tempfile.TemporaryDirectory() as work:
        rows = [row for n in args.sizes for row in run_size(n, args, Path(work))]
    print(record.markdown(rows))
    if args.json:
        notes = [f"nprobe {args.nprobe}, candidates {args.candidates}; each query searched alone on the CPU; "
                 "recall against the exact index's top k (ties broken by position)"]
        record.write_result(args.json, "multivector-index", [record.table(
            "Multi-vector indexes: PLAID recall, size and latency beside exact MaxSim", rows, notes=notes)],
            title="Multi-vector index (exact and PLAID)", argv=command)
    return rows


if __name__ == "__main__":
    main()
