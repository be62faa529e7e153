"""``bertkit evaluate MODEL_DIR --data FILE [--task T]``: a fine-tuned model's metrics on a labelled file.
``bertkit evaluate MODEL_DIR --beir DIR [--split test] [--k 1,3,5,10,100]``: an embedding model's retrieval.
``bertkit evaluate SPARSE_DIR --beir DIR [--max-active-dims N]``: a sparse encoder's retrieval (SPLADE, ...).
``bertkit evaluate COLBERT_DIR --beir DIR [--index INDEX_DIR]``: a multi-vector (ColBERT) model's retrieval by MaxSim.
``bertkit evaluate MODEL_DIR --beir DIR --sparse-model SPARSE_DIR [--fusion rrf|weighted-sum]``: hybrid retrieval,
the dense model, the sparse model and their fusion side by side.
``bertkit evaluate MODEL_DIR --sts FILE``: an embedding model's similarity correlations.
``bertkit evaluate RERANKER --beir DIR --first-stage EMBEDDER_DIR|RUN_FILE [--top-k 100]``: a cross-encoder
reranking a first stage's top k.
``bertkit evaluate RERANKER --rerank FILE``: a cross-encoder ranking each row's positives and negatives.

--data: MODEL_DIR is what ``bertkit finetune`` wrote (OUT/model: the task and its settings are in its
task.json, so --task may be left out), or any fine-tuned HF directory with --task.

--beir / --sts: MODEL_DIR is a sentence-transformers directory (or a BERT, mean-pooled). --beir DIR is the BEIR
layout (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv); the corpus is encoded once, ranked for every judged query,
and NDCG, MRR, MAP, Recall, Precision and Accuracy (hit rate) at each --k are computed as trec_eval does.
--sts FILE is a CSV/TSV/JSONL of sentence1, sentence2, score: Pearson and Spearman of cosine and dot. The
means are printed as JSON; the report, with every query's metrics for --beir, is written to -o FILE
(default: evaluation_beir.json / evaluation_sts.json in the current directory, never inside MODEL_DIR).

A sparse encoder (a sentence-transformers SPARSE_DIR: SPLADE, an inference-free Router, CSR; what
bertkit.SparseEncoder loads) is recognised by its modules.json: with --beir its corpus is encoded once into an
inverted index (exact top k, memory bounded by --chunk-size texts at a time), and the report adds the mean active
dimensions of a query and of a document, their sparsity ratios and avg_flops (the expected multiplications of a
query-document dot product), as sentence-transformers' SparseInformationRetrievalEvaluator reports them.
--max-active-dims N keeps each vector's N largest weights (default: the model's own).

A ColBERT (a sentence-transformers 6 MultiVectorEncoder, PyLate or Stanford directory; what
bertkit.MultiVectorEncoder loads) on --beir alone: its queries and documents are encoded with their own sides
(markers, query expansion, skiplist), the corpus --chunk-size texts at a time (at most 4096) into an exact index,
and every judged query is ranked by exact MaxSim over the whole corpus; --save-index DIR keeps that index.
--index DIR searches a kept index of the corpus instead (only the queries are encoded): an exact one by exact
MaxSim, a PLAID one by its candidate generation (--nprobe centroids per query token, --candidates documents) and
MaxSim on its decompressed vectors, or on --exact-index DIR's stored ones. The index must be built by MODEL_DIR
(its manifest names the model's files' digest) from the BEIR corpus, with its ids. The report says how the corpus
was searched ("search") and how long it took. With --first-stage a ColBERT reranks that stage's candidates by
MaxSim instead, reported as a cross-encoder's.

Hybrid: MODEL_DIR a dense embedding model and --sparse-model SPARSE_DIR. Each model retrieves max(--top-k, the
largest --k) documents per query (default --top-k 100), the two lists are fused per query -- --fusion rrf
(reciprocal-rank fusion, score sum of w / (--rrf-k + rank); the default) or weighted-sum (each list's scores
min-max normalised to [0, 1], weighted and summed) with --fusion-weights W_DENSE,W_SPARSE (default 1,1) -- and
the report holds the metrics of "dense", "sparse" and "fused" side by side (also printed as a table on stderr).

A cross-encoder (a sequence classifier with one label, as bertkit.CrossEncoder saves one) takes --beir with
--first-stage (an embedding model directory, or a run file of TREC lines 'qid Q0 docid rank score tag' or JSON
{qid: {docid: score}}): each judged query's --top-k documents are reranked by the cross-encoder, and the
metrics of the first stage and of the reranked list are reported side by side. Only the top k is reranked, so
recall@k cannot rise above the first stage's recall@top-k; a relevant document the first stage missed is a
miss, unless --always-rerank-positives adds it to the candidates (the reranker alone, an upper bound).
--rerank FILE: rows of query, positive (a text or a list) and negatives (negative_1.. or a list) or a ranked
'documents' list: MRR@k, NDCG@k and MAP of each row's candidates, as sentence-transformers'
CrossEncoderRerankingEvaluator computes them. The report goes to -o (default evaluation_rerank.json).
The cross-encoder runs in fp32 (--dtype applies to an embedding first stage), its pairs cut at
--max-seq-length if given.

--dtype: the number format of the prepared model, resolved and prepared as serve, embed and the pipelines do
(one inference path: the same model answers the same numbers here and in serve). --precision is its old name
here (said so when used); --precision belongs to the training commands.
"""

from __future__ import annotations

import argparse
import json

from bertkit.cli import ArgumentParser, add_dtype_argument, add_flags
from bertkit.cli.evaluate_multivector import add_multivector_arguments, multivector_main, wants_multivector
from bertkit.cli.evaluate_sparse import add_sparse_arguments, sparse_main, wants_sparse
from bertkit.cli.finetune import TASK_FLAGS, task_options


def parser_for(prog: str, doc: str, embedding: bool = False) -> ArgumentParser:
    """The arguments ``evaluate`` and ``predict`` share (every task's flags, to override what was saved); with
    ``embedding``, evaluate's --beir / --sts inputs and their options too."""
    parser = ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a fine-tuned model directory (OUT/model of bertkit finetune)"
                        + (", an embedding model with --beir / --sts, a ColBERT with --beir, or a cross-encoder "
                           "with --rerank / --beir --first-stage" if embedding else ""))
    parser.add_argument("--task", choices=sorted(TASK_FLAGS), help="default: the one in MODEL_DIR/task.json")
    data_help = "the file to run on (same formats as finetune)"
    if embedding:  # exactly one of --data, --beir, --sts
        inputs = parser.add_mutually_exclusive_group(required=True)
        inputs.add_argument("--data", help=data_help)
        add_embedding_arguments(parser, inputs)
    else:
        parser.add_argument("--data", required=True, help=data_help)
    parser.add_argument("--batch-size", type=int, default=64, help="inputs per forward pass (default 64)")
    parser.add_argument("--max-seq-length", type=int, help="default: the fine-tuning run's (--beir, --sts: the "
                                                           "model's max_seq_length)")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    add_dtype_argument(parser, old_precision=True)
    seen: set[str] = set()
    for task in TASK_FLAGS:  # --encoding is shared by two tasks: add each flag once
        flags = [(flag, kwargs) for flag, kwargs in TASK_FLAGS[task] if flag not in seen]
        seen.update(flag for flag, _ in flags)
        add_flags(parser.add_argument_group(f"{task} options (override the saved ones)"), flags)
    return parser


def add_embedding_arguments(parser: ArgumentParser, inputs) -> None:
    inputs.add_argument("--beir", metavar="DIR", help="a BEIR directory: retrieval metrics of an embedding model")
    inputs.add_argument("--sts", metavar="FILE", help="pairs with gold scores (sentence1, sentence2, score): "
                                                      "Pearson / Spearman of an embedding model's cosine and dot")
    inputs.add_argument("--rerank", metavar="FILE", help="rows of (query, positive(s), negatives or ranked "
                                                         "documents): MRR, NDCG and MAP of a cross-encoder")
    group = parser.add_argument_group("embedding model options (--beir, --sts)")
    group.add_argument("--split", default="test", help="--beir: the qrels file, qrels/SPLIT.tsv (default test)")
    group.add_argument("--k", type=k_list, default=(1, 3, 5, 10, 100), metavar="K,K,...",
                       help="--beir: the cut-offs (default 1,3,5,10,100)")
    group.add_argument("--similarity", choices=("cosine", "dot", "euclidean", "manhattan"),
                       help="--beir: how documents are scored (default: the model's own, cosine unless it says)")
    group.add_argument("--chunk-size", type=int, default=50_000,
                       help="--beir: documents scored at once per block of queries (bounds memory; default 50000)")
    group.add_argument("--ignore-identical-ids", action="store_true",
                       help="--beir: never retrieve a document whose id is the query's (BEIR's option, for ArguAna "
                            "and Quora, whose queries are also documents)")
    group.add_argument("-o", "--output", metavar="FILE",
                       help="where the JSON report is written (default evaluation_beir.json / evaluation_sts.json "
                            "/ evaluation_rerank.json in the current directory)")
    add_sparse_arguments(parser)
    add_multivector_arguments(parser)
    add_flags(parser.add_argument_group("cross-encoder options (--rerank, --beir with --first-stage)"),
              CROSS_ENCODER_FLAGS)


#: the options of a cross-encoder's evaluation (--rerank, --beir with --first-stage)
CROSS_ENCODER_FLAGS = (
    ("--first-stage", dict(metavar="EMBEDDER_DIR|RUN_FILE",
                           help="--beir with a cross-encoder: what gives each query its candidates, an embedding "
                                "model directory or a run file (TREC 'qid Q0 docid rank score tag' lines, or .json)")),
    ("--top-k", dict(type=int, default=100,
                     help="--first-stage: the documents reranked per query; --sparse-model: the documents each run "
                          "gives the fusion (default 100)")),
    ("--always-rerank-positives", dict(action="store_true",
                                       help="--first-stage: add the relevant documents the first stage missed to the "
                                            "candidates (the reranker alone); --rerank with 'documents': always on "
                                            "unless --rerank-documents-only")),
    ("--rerank-documents-only", dict(action="store_true",
                                     help="--rerank rows of 'documents': rank those alone, a positive they lack being "
                                          "a miss")),
)


def k_list(value: str) -> tuple[int, ...]:
    """``"1,3,10"`` -> ``(1, 3, 10)``; ArgumentTypeError unless every item is a positive whole number."""
    try:
        values = tuple(int(item) for item in value.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: write positive whole numbers separated by commas, e.g. 1,10,100")
    return values


def options(args: argparse.Namespace) -> dict:
    """The task options set on the command line, for whichever task the model was tuned for."""
    chosen = {}
    for task in TASK_FLAGS:
        chosen.update(task_options(args, task))
    return chosen


def main(argv: list[str]) -> int:
    args = parser_for("bertkit evaluate", __doc__, embedding=True).parse_args(argv)
    if args.data is None:
        return embedding_main(args)
    if args.output is not None:
        raise ValueError("-o/--output writes the report of --beir or --sts; --data prints its metrics only.")
    from bertkit.tasks.predicting import evaluate

    scores = evaluate(args.model, args.data, task=args.task, batch_size=args.batch_size, dtype=args.dtype,
                      device=args.device, max_seq_length=args.max_seq_length, **options(args))
    print(json.dumps(scores, indent=2))
    return 0


def embedding_main(args: argparse.Namespace) -> int:
    """--beir / --sts / --rerank: the report's means on stdout, the whole report written atomically to -o."""
    from bertkit.sentence.cross_encoder import is_cross_encoder

    if wants_multivector(args):
        return multivector_main(args)
    if args.rerank is not None or is_cross_encoder(args.model) or args.first_stage is not None:
        return rerank_main(args)
    if wants_sparse(args):
        return sparse_main(args)
    flag, source = ("--beir", args.beir) if args.beir is not None else ("--sts", args.sts)
    output = args.output or f"evaluation_{flag[2:]}.json"
    from bertkit.io import atomic_write_text, refuse_output_over_input

    refuse_output_over_input(("-o", output), [(flag, source)], models=[("MODEL_DIR", args.model)])
    from bertkit.sentence.evaluation.evaluate import beir_report, load_encoder, sts_report

    model, dtype = load_encoder(args.model, dtype=args.dtype, max_seq_length=args.max_seq_length,
                                device=args.device)
    if args.beir is not None:
        report = beir_report(model, args.beir, split=args.split, k_values=args.k, batch_size=args.batch_size,
                             chunk_size=args.chunk_size, similarity=args.similarity,
                             ignore_identical_ids=args.ignore_identical_ids)
    else:
        report = sts_report(model, args.sts, batch_size=args.batch_size)
    report = {"model": args.model, "dtype": dtype, **report}
    atomic_write_text(output, json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: value for key, value in report.items() if key != "per_query"}, indent=2))
    return 0


def rerank_main(args: argparse.Namespace) -> int:
    """A cross-encoder's --rerank rows or --beir with --first-stage; refuses a model or flags of the other kind."""
    from bertkit.sentence.colbert_layouts import is_colbert_directory
    from bertkit.sentence.cross_encoder import is_cross_encoder

    colbert = is_colbert_directory(args.model)  # a late-interaction reranker: MaxSim in place of a classifier
    if not colbert and not is_cross_encoder(args.model):
        flag = "--rerank" if args.rerank is not None else "--first-stage"
        raise ValueError(f"{flag} evaluates a cross-encoder, but MODEL_DIR {args.model} is an embedding model (not a "
                         "sequence classifier); give a reranker directory, or evaluate this model with --beir alone.")
    if args.sts is not None:
        raise ValueError(f"MODEL_DIR {args.model} is a cross-encoder: --sts evaluates an embedding model; use "
                         "--rerank FILE or --beir DIR --first-stage EMBEDDER_DIR|RUN_FILE.")
    if args.beir is not None and args.first_stage is None:
        raise ValueError(f"MODEL_DIR {args.model} is a cross-encoder: --beir needs --first-stage EMBEDDER_DIR|RUN_FILE "
                         "to give each query the documents it reranks.")
    if args.rerank is not None and args.first_stage is not None:
        raise ValueError("--first-stage goes with --beir; --rerank rows carry their own candidates.")
    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1 (the first stage's documents reranked per query), got "
                         f"{args.top_k}.")
    flag, source = ("--rerank", args.rerank) if args.rerank is not None else ("--beir", args.beir)
    output = args.output or "evaluation_rerank.json"
    from bertkit.io import atomic_write_text, refuse_output_over_input

    refuse_output_over_input(("-o", output), [(flag, source), ("--first-stage", args.first_stage)],
                             models=[("MODEL_DIR", args.model), ("--first-stage", args.first_stage)])
    import bertkit
    from bertkit.inference.precision import DtypeChoice
    from bertkit.sentence.evaluation.reranking import BeirRerankEvaluator, RowsRerankEvaluator

    fp32 = DtypeChoice("fp32", "fp32", "evaluate scores a cross-encoder in fp32; --dtype applies to an embedding "
                                       "first stage")
    reranker = bertkit.MultiVectorEncoder(args.model, dtype="fp32") if colbert else \
        bertkit.CrossEncoder(args.model, max_length=args.max_seq_length, dtype=fp32)
    if args.rerank is not None:
        evaluator = RowsRerankEvaluator(args.rerank, k_values=args.k, batch_size=args.batch_size,
                                        always_rerank_positives=not args.rerank_documents_only)
    else:
        evaluator = BeirRerankEvaluator(args.beir, args.first_stage, split=args.split, top_k=args.top_k,
                                        k_values=args.k, batch_size=args.batch_size, chunk_size=args.chunk_size,
                                        always_rerank_positives=args.always_rerank_positives,
                                        ignore_identical_ids=args.ignore_identical_ids, precision=args.dtype)
    report = {"model": args.model, **evaluator.report(reranker)}
    atomic_write_text(output, json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: value for key, value in report.items() if key != "per_query"}, indent=2))
    return 0
