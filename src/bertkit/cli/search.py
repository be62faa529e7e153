"""``bertkit search INDEX --model MODEL --query TEXT...``: the top-k documents of an index for each query.

    bertkit search INDEX --model MODEL --query "how many people live in berlin" -k 5
    bertkit search INDEX --model MODEL --queries queries.jsonl -k 100 --jsonl -o run.jsonl
    bertkit search PLAID_INDEX --model COLBERT --queries queries.jsonl --decompressed

INDEX is a directory ``bertkit sparse-index build`` or ``bertkit index build|compress`` built (its manifest
says which); MODEL must be the model that built it (the index records its directory's name and a digest of its
files; another is refused). Queries are encoded with the model's query side in one batch, then each is searched: a
sparse index exactly (every document that shares a term with it is scored), an exact multi-vector index by MaxSim
over every document, a compressed (PLAID) one by candidates from the ``--nprobe`` centroids nearest each query
token, the best ``--candidates`` of them by centroid MaxSim, then the short list by MaxSim on the exact index it
was compressed from where that is still there (or ``--rerank EXACT_INDEX``): measured, that is nearer exact and no
slower than the decompressed vectors, which ``--decompressed`` (or a missing exact index) scores instead; stderr
says which. ``--queries``: a .jsonl of ``{"_id", "text"}`` objects (BEIR's queries.jsonl) or a .txt of one query
per line. Printed: each query's ranked ``(id, score)`` list (or one JSON object per query with ``--jsonl``), and on
stderr the latency: encoding, and the search per query (mean, p50, p95), and the total.
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

# the index formats searched, by their manifests' "format" (named here: the CLI imports no index module at start)
SPARSE_FORMAT, EXACT_FORMAT, PLAID_FORMAT = "bertkit-sparse-index", "bertkit-multivector-index", "bertkit-plaid-index"


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit search", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", help="an index directory that `bertkit sparse-index build` or `bertkit index` "
                                      "built")
    parser.add_argument("--model", required=True, help="the model directory (sparse encoder, ColBERT) that built "
                                                       "the index")
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
    parser.add_argument("--nprobe", type=int, help="a compressed (PLAID) index: centroids probed per query token "
                                                   "(default 4)")
    parser.add_argument("--candidates", type=int, help="a compressed index: documents scored on their vectors after "
                                                       "the centroid ranking (default 256)")
    final = parser.add_mutually_exclusive_group()
    final.add_argument("--rerank", metavar="EXACT_INDEX", help="a compressed index: score its short list exactly on "
                                                               "this exact index (default: the one it was compressed "
                                                               "from, where it still is)")
    final.add_argument("--decompressed", action="store_true",
                       help="a compressed index: score its short list on its decompressed vectors")
    parser.add_argument("--truncate", action="store_true", help="a multi-vector index: cut a query longer than the "
                                                                "model's query length (with a warning) instead of "
                                                                "refusing it")
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


def _sparse(args: argparse.Namespace, verify: bool):
    """The sparse index, a function from query texts to each one's (terms, weights), and the search's options."""
    from bertkit.retrieval.sparse import SparseIndex, as_triples
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.sentence.sparse import SparseEncoder

    # the index first: a search with another model is refused before that model is loaded
    index = SparseIndex.load(args.index, model=model_fingerprint(args.model), verify=verify)
    encoder = SparseEncoder(args.model, device=args.device, dtype=args.dtype)

    def encode(texts: list[str]) -> list:
        row, term, weight, _ = as_triples(encoder.encode_query(texts, batch_size=args.batch_size),
                                          index.vocab_size, "the queries")
        bounds = np.searchsorted(row, np.arange(len(texts) + 1))
        return [[(term[a:b], weight[a:b])] for a, b in itertools.pairwise(bounds)]

    return index, encode, {}


def _multivector(args: argparse.Namespace, verify: bool, kind: str):
    """The exact or PLAID multi-vector index, a function from query texts to each one's token vectors, and the
    search's options (a PLAID index's)."""
    from bertkit.retrieval.multivector import MultiVectorIndex
    from bertkit.retrieval.plaid import PlaidIndex
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.sentence.multi_vector import MultiVectorEncoder

    fingerprint = model_fingerprint(args.model)
    plaid = kind == PLAID_FORMAT
    index = (PlaidIndex if plaid else MultiVectorIndex).load(args.index, model=fingerprint, verify=verify)
    options = {}
    if plaid:
        options = {"nprobe": args.nprobe or 4, "candidates": max(args.candidates or 256, args.k)}
        exact = _final_stage(args, index, fingerprint, verify)
        if exact is not None:
            options["rerank"] = exact
    encoder = MultiVectorEncoder(args.model, device=args.device, dtype=args.dtype)
    if encoder.get_sentence_embedding_dimension() != index.dim:
        raise ValueError(f"--model {args.model} makes {encoder.get_sentence_embedding_dimension()}-dimensional "
                         f"vectors; the index in {args.index!r} holds {index.dim}-dimensional ones: search it with "
                         f"the model that built it.")

    def encode(texts: list[str]) -> list:
        return [[vectors] for vectors in encoder.encode_query(texts, batch_size=args.batch_size,
                                                              truncate=args.truncate)]

    return index, encode, options


def _final_stage(args: argparse.Namespace, index, fingerprint: str, verify: bool):
    """The exact index a PLAID search scores its short list on: ``--rerank``'s, else (unless ``--decompressed``)
    the one it was compressed from, where it still is and still matches; ``None``: the decompressed vectors. Measured
    (benchmarks/colbert_index.py), the exact rerank is both nearer exact MaxSim and no slower on a CPU."""
    from bertkit.retrieval.multivector import MultiVectorIndex

    if args.rerank:
        return MultiVectorIndex.load(args.rerank, model=fingerprint, verify=verify)
    source = index.manifest.get("source")
    if args.decompressed or not source or not (Path(source) / "manifest.json").is_file():
        stage = "decompressed vectors" + ("" if args.decompressed else " (the exact index it was compressed "
                                                                          "from is not there)")
        print(f"bertkit: the short list is scored on the {stage}", file=sys.stderr)
        return None
    exact = MultiVectorIndex.load(source, model=fingerprint, verify=False)
    if (exact.documents, exact.tokens) != (index.documents, index.tokens):
        print(f"bertkit: the short list is scored on the decompressed vectors ({source} no longer holds the "
              f"documents this index holds)", file=sys.stderr)
        return None
    print(f"bertkit: the short list is scored exactly on {source} (--decompressed: on the compressed vectors)",
          file=sys.stderr)
    return exact


def search(args: argparse.Namespace) -> int:
    import torch

    from bertkit.retrieval.index_files import index_format

    torch.set_num_threads(cores())
    queries = read_queries(args.queries) if args.queries else [(str(i), q) for i, q in enumerate(args.query, 1)]
    kind = index_format(args.index, (SPARSE_FORMAT, EXACT_FORMAT, PLAID_FORMAT))
    if kind != PLAID_FORMAT and (args.nprobe, args.candidates, args.rerank, args.decompressed) != (
            None, None, None, False):
        raise ValueError(f"--nprobe, --candidates, --rerank and --decompressed apply to a compressed (PLAID) index; "
                         f"{args.index!r} "
                         f"is a {kind!r} one, searched exactly.")
    start = time.perf_counter()
    index, encode, options = (_sparse(args, not args.no_verify) if kind == SPARSE_FORMAT else
                              _multivector(args, not args.no_verify, kind))
    loaded = time.perf_counter()
    encoded = encode([text for _, text in queries])
    encoded_at = time.perf_counter()
    results, latencies = [], []
    for query in encoded:
        before = time.perf_counter()
        (scores, positions), = index.search(query, args.k, **options)
        hits = list(zip(index.ids(positions) if index.manifest.get("ids") else positions.tolist(), scores.tolist()))
        latencies.append(time.perf_counter() - before)
        results.append(hits)
    searched = time.perf_counter()
    _write(args, queries, results, latencies)
    ms = np.array(latencies) * 1000
    encode_ms = (encoded_at - loaded) * 1000
    print(f"bertkit: {len(queries)} queries over {index.documents} documents: load {(loaded - start) * 1000:.0f} ms; "
          f"encode {encode_ms:.1f} ms ({encode_ms / len(queries):.2f} ms/query); search per query mean "
          f"{ms.mean():.2f} ms, p50 "
          f"{np.percentile(ms, 50):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms; total "
          f"{(searched - encoded_at) * 1000:.1f} ms ({(searched - encoded_at) * 1000 / len(queries):.2f} ms/query)",
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
