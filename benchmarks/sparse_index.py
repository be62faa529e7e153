"""The sparse inverted index (bertkit.retrieval.sparse) at two corpus sizes, beside a plain scipy.sparse dot product.

SPLADE-like vectors, made up so the sizes can grow without a model: a vocabulary of 30522 terms (BERT's), term
frequencies Zipf-like (a few terms in most documents, most in few), ``--doc-terms`` active terms per document and
``--query-terms`` per query, positive float weights. For each corpus size:

* build: ``SparseIndexWriter`` fed the corpus in chunks of 10000 documents with their ids, ``--max-postings`` in
  memory (so it writes several segments and merges them), to the finished index on disk (manifest and checksums
  included); beside it the time scipy takes to build its CSR matrix ``[N, V]`` from the same entries;
* size: the index's files on disk, and the CSR matrix's arrays in memory;
* query latency: each of ``--queries`` queries searched alone, top ``-k``, exact (``SparseIndex.search``: mean and
  p95 per query), against scipy: the query row times the transposed CSR matrix, then the k best
  (``argpartition`` + sort), per query alone and for the batch of all queries at once (per query);
* same top-k: every query's ranked positions equal scipy's, scores to 1e-4 (checked, counted, asserted).

    nice python benchmarks/sparse_index.py [--sizes 25000 100000] [--json benchmarks/results/sparse-index.json]

With ``--model DIR`` (a SPLADE directory) a second table: ``bertkit sparse-index build``'s library call on
``--corpus-documents`` paragraphs of the bundled novels in BEIR's corpus.jsonl, its time split into the encoder's
(the forward, timed around each call) and the rest (reading the corpus, postings, segments, merge, manifest): how
much of a build is index work. The encoder's speed itself is benchmarks/sparse_encode.py's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)

from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter

V = 30522


def make_vectors(n: int, terms: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, term, weight)`` of ``n`` vectors with about ``terms`` distinct Zipf-like terms each."""
    draws = rng.zipf(1.15, size=(n, terms * 2)) % V  # duplicates removed below: about `terms` stay
    row = np.repeat(np.arange(n), draws.shape[1])
    key = np.unique(row * V + draws.ravel())
    row, term = key // V, key % V
    weight = (rng.gamma(2.0, 0.5, size=len(term)) + 0.01).astype(np.float32)
    return row, term, weight


def chunks_of(row, term, weight, n, size):
    """Pairs ``(term ids, weights)`` per document, ``size`` documents at a time."""
    bounds = np.searchsorted(row, np.arange(n + 1))
    for start in range(0, n, size):
        stop = min(start + size, n)
        yield range(start, stop), [(term[bounds[d]:bounds[d + 1]], weight[bounds[d]:bounds[d + 1]])
                                   for d in range(start, stop)]


def run_size(n: int, args: argparse.Namespace, rng: np.random.Generator) -> dict:
    import scipy.sparse as sp

    row, term, weight = make_vectors(n, args.doc_terms, rng)
    q_row, q_term, q_weight = make_vectors(args.queries, args.query_terms, rng)
    with tempfile.TemporaryDirectory(prefix="sparse-bench-") as scratch:
        start = time.perf_counter()
        writer = SparseIndexWriter(Path(scratch) / "index", V, "bench", max_postings=args.max_postings)
        for positions, pairs in chunks_of(row, term, weight, n, 10_000):
            writer.add(pairs, [f"doc-{p}" for p in positions])
        index = writer.finish()
        build_s = time.perf_counter() - start
        disk = sum(f.stat().st_size for f in (Path(scratch) / "index").iterdir())
        index = SparseIndex.load(Path(scratch) / "index")
        start = time.perf_counter()
        matrix = sp.csr_matrix((weight, (row, term)), shape=(n, V))
        scipy_build_s = time.perf_counter() - start
        matrix_t = matrix.T.tocsr()  # [V, N]: a query row times it gives the query's scores over the corpus
        queries = sp.csr_matrix((q_weight, (q_row, q_term)), shape=(args.queries, V))
        pairs = next(chunks_of(q_row, q_term, q_weight, args.queries, args.queries))[1]
        ours, scipy_alone = [], []
        same = 0
        for i, query in enumerate(pairs):
            t0 = time.perf_counter()
            (scores, positions), = index.search([query], args.k)
            t1 = time.perf_counter()
            dense = (queries[i] @ matrix_t).toarray()[0]
            best = np.argpartition(-dense, args.k)[:args.k]
            best = best[np.lexsort((best, -dense[best]))]
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            scipy_alone.append(t2 - t1)
            same += positions.tolist() == best.tolist() and np.allclose(scores, dense[best], rtol=1e-4)
        t0 = time.perf_counter()
        all_scores = (queries @ matrix_t).toarray()
        top = np.argpartition(-all_scores, args.k, axis=1)[:, :args.k]
        for r in range(len(top)):
            top[r] = top[r][np.lexsort((top[r], -all_scores[r, top[r]]))]
        scipy_batch = (time.perf_counter() - t0) / args.queries
        del index
    ms = np.array(ours) * 1000
    csr_bytes = matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes
    assert same == args.queries, f"{same} of {args.queries} queries have scipy's top {args.k}"
    return {"documents": n, "postings": len(term), "build_s": build_s, "scipy_csr_build_s": scipy_build_s,
            "index_mib": disk / 2**20, "scipy_csr_mib": csr_bytes / 2**20,
            "search_ms_mean": float(ms.mean()), "search_ms_p95": float(np.percentile(ms, 95)),
            "scipy_ms_per_query_alone": float(np.mean(scipy_alone) * 1000),
            "scipy_ms_per_query_batch": scipy_batch * 1000, "same_top_k": f"{same}/{args.queries}"}


def corpus_build(model_dir: str, documents: int) -> dict:
    """``build_sparse_corpus_index`` over ``documents`` novel paragraphs with the SPLADE model ``model_dir``: total
    seconds, the encoder's share, and the rest."""
    import json

    import torch

    from bertkit import SparseEncoder
    from bertkit.resources import austen_novels
    from bertkit.retrieval import build_sparse_corpus_index, model_fingerprint

    paragraphs = [p.strip() for text in austen_novels().values() for p in text.split("\n\n") if len(p.strip()) > 80]
    model = SparseEncoder(model_dir)
    spent = [0.0]

    def encode(texts):
        start = time.perf_counter()
        vectors = model.encode_document(texts, show_progress_bar=False)
        spent[0] += time.perf_counter() - start
        return vectors

    with tempfile.TemporaryDirectory(prefix="sparse-bench-") as scratch:
        corpus = Path(scratch) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"_id": str(i), "text": p}) + "\n"
                                  for i, p in enumerate(paragraphs[:documents])))
        start = time.perf_counter()
        index = build_sparse_corpus_index(encode, corpus, Path(scratch) / "index",
                                          vocab_size=model.get_sentence_embedding_dimension(),
                                          model=model_fingerprint(model_dir), max_postings=1_000_000, progress=False)
        total = time.perf_counter() - start
        postings = index.manifest["postings"]
    return {"documents": documents, "postings": postings, "threads": torch.get_num_threads(), "total_s": total,
            "encode_s": spent[0], "index_work_s": total - spent[0], "index_share": (total - spent[0]) / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 100_000])
    parser.add_argument("--doc-terms", type=int, default=120, help="active terms per document (about)")
    parser.add_argument("--query-terms", type=int, default=30, help="active terms per query (about)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--max-postings", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="a SPLADE directory: also time a corpus build, encoder vs index work")
    parser.add_argument("--corpus-documents", type=int, default=2000)
    parser.add_argument("--json", type=Path, help="write the table here (benchmarks/record.py's format)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for n in args.sizes:
        rows.append(run_size(n, args, rng))
        print(record.markdown([rows[-1]]), flush=True)
    notes = [f"SPLADE-like made-up vectors: V {V}, about {args.doc_terms} terms a document, {args.query_terms} a "
             f"query, Zipf-like term frequencies; top {args.k}; {args.queries} queries, each searched alone.",
             f"build: SparseIndexWriter with ids, max_postings {args.max_postings} (segments merged), manifest and "
             "checksums; scipy: csr_matrix from the same entries, in memory.",
             "scipy per query alone: the query row times the transposed CSR matrix, argpartition and sort; batch: "
             "all queries in one product, per query.", "same_top_k: ranked positions equal, scores to 1e-4."]
    tables = [record.table("Sparse index: build, size and query latency beside scipy.sparse", rows, notes=notes)]
    print(record.markdown(rows))
    data = {"rows": rows}
    if args.model:
        data["corpus_build"] = corpus_build(args.model, args.corpus_documents)
        print(record.markdown([data["corpus_build"]]))
        tables.append(record.table("Corpus build: the encoder's time and the index work's", [data["corpus_build"]],
                                   notes=[f"model {Path(args.model).name}; novel paragraphs as corpus.jsonl; "
                                          "encode_s timed around each encoder call; index_work_s the rest."]))
    if args.json:
        record.write_result(args.json, "sparse-index", tables, title="Sparse index (inverted, exact top-k)",
                            data=data)


if __name__ == "__main__":
    main()
