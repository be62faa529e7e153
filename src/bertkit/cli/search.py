"""``bertkit search INDEX --model MODEL --query TEXT...``: the top-k documents of a sparse index for each query.

    bertkit search INDEX --model MODEL --query "how many people live in berlin" -k 5
    bertkit search INDEX --model MODEL --queries queries.jsonl -k 100 --jsonl -o run.jsonl

INDEX is a directory ``bertkit sparse-index build`` built; MODEL must be the model that built it (the index records its
directory's name and a digest of its files; another is refused). Queries are encoded with the model's query side
(``encode_query``: an inference-free model's static weights, without a forward pass) in one batch, then each is
searched exactly (every document that shares a term with it is scored). ``--queries``: a .jsonl of
``{"_id", "text"}`` objects (BEIR's queries.jsonl) or a .txt of one query per line. Printed: each query's ranked
``(id, score)`` list (or one JSON object per query with ``--jsonl``), and on stderr the latency: encoding, and
the search per query (mean, p50, p95), and the total.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from bertkit.cli import ArgumentParser, add_dtype_argument, cores
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit search", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", help="an index directory that `bertkit sparse-index build` built")
    parser.add_argument("--model", required=True, help="the sparse encoder directory that built the index")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--query", nargs="+", metavar="TEXT", help="one or more query texts")
    given.add_argument("--queries", metavar="FILE", help="a .jsonl of {\"_id\", \"text\"} (BEIR's queries.jsonl) "
                                                         "or a .txt of one query per line")
    parser.add_argument("-k", type=int, default=10, help="documents per query (default 10)")
    parser.add_argument("--jsonl", action="store_true", help="one JSON object per query: query_id, query, hits "
                                                             "[{id, score}], search_ms")
    parser.add_argument("-o", "--output", help="write the results here (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=32, help="queries per forward pass (default 32)")
    parser.add_argument("--no-verify", action="store_true", help="skip the checksums of the index files on load "
                                                                 "(their sizes are still checked)")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error(f"-k must be at least 1, got {args.k}")
    refuse_output_over_input(("-o", args.output), [("--queries", args.queries)],
                             models=[("INDEX", args.index), ("--model", args.model)])
    return search(args)


def read_queries(path: str, encoding: str = "utf-8") -> list[tuple[str, str]]:
    """``(id, text)`` of each query of a .jsonl (BEIR's queries.jsonl) or .txt file (ids: line numbers)."""
    from bertkit.retrieval.sparse_corpus import CorpusFields, read_corpus

    if Path(path).suffix.lower() == ".txt":
        try:
            lines = Path(path).read_text(encoding=encoding).splitlines()
        except UnicodeDecodeError as error:
            raise ValueError(f"--queries {path}: not {encoding} text ({error.reason}).") from None
        queries = [(str(number), line.strip()) for number, line in enumerate(lines, 1) if line.strip()]
    else:
        queries = list(read_corpus(path, CorpusFields(title=None), encoding=encoding))
    if not queries:
        raise ValueError(f"--queries {path}: no queries.")
    return queries


def search(args: argparse.Namespace) -> int:
    import torch

    from bertkit.retrieval.sparse import SparseIndex, as_triples
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.sentence.sparse import SparseEncoder

    torch.set_num_threads(cores())
    queries = read_queries(args.queries) if args.queries else [(str(i), q) for i, q in enumerate(args.query, 1)]
    start = time.perf_counter()
    # the index first: a search with another model is refused before that model is loaded
    index = SparseIndex.load(args.index, model=model_fingerprint(args.model), verify=not args.no_verify)
    encoder = SparseEncoder(args.model, device=args.device, dtype=args.dtype)
    loaded = time.perf_counter()
    vectors = encoder.encode_query([text for _, text in queries], batch_size=args.batch_size)
    row, term, weight, _ = as_triples(vectors, index.vocab_size, "the queries")
    bounds = np.searchsorted(row, np.arange(len(queries) + 1))
    encoded = time.perf_counter()
    results, latencies = [], []
    for a, b in itertools.pairwise(bounds):
        before = time.perf_counter()
        (scores, positions), = index.search([(term[a:b], weight[a:b])], args.k)
        hits = list(zip(index.ids(positions) if index.manifest.get("ids") else positions.tolist(), scores.tolist()))
        latencies.append(time.perf_counter() - before)
        results.append(hits)
    searched = time.perf_counter()
    _write(args, queries, results, latencies)
    ms = np.array(latencies) * 1000
    encode_ms = (encoded - loaded) * 1000
    print(f"bertkit: {len(queries)} queries over {index.documents} documents: load {(loaded - start) * 1000:.0f} ms; "
          f"encode {encode_ms:.1f} ms ({encode_ms / len(queries):.2f} ms/query); search per query mean "
          f"{ms.mean():.2f} ms, p50 {np.percentile(ms, 50):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms; total "
          f"{(searched - loaded) * 1000:.1f} ms ({(searched - loaded) * 1000 / len(queries):.2f} ms/query)",
          file=sys.stderr)
    return 0


def _write(args: argparse.Namespace, queries: list[tuple[str, str]], results: list, latencies: list[float]) -> None:
    lines = []
    for (query_id, text), hits, seconds in zip(queries, results, latencies):
        if args.jsonl:
            lines.append(json.dumps({"query_id": query_id, "query": text, "search_ms": round(seconds * 1000, 3),
                                     "hits": [{"id": doc, "score": score} for doc, score in hits]},
                                    ensure_ascii=False))
        else:
            lines.append(f"query {query_id}: {text}  ({seconds * 1000:.2f} ms)")
            lines.extend(f"  {rank:>3}  {score:.4f}  {doc}" for rank, (doc, score) in enumerate(hits, 1))
    text = "\n".join(lines) + "\n"
    if args.output:
        from bertkit.io import atomic_write_text

        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)
