"""``bertkit finetune embed``: fine-tune a bi-encoder (an embedding model) on pairs, triplets or scored pairs.

    bertkit finetune embed --model SRC --train pairs.jsonl [more files] -o OUT --loss mnrl
    bertkit finetune embed --model SRC --train sts.csv -o OUT --loss cosent --matryoshka-dims 256,64

SRC: a sentence-transformers directory or any BERT checkpoint bertkit loads (mean pooling unless --pooling).
Training files: JSON lines, CSV/TSV, Parquet, Arrow or a datasets.save_to_disk directory; columns by name
(anchor/query, positive, negative_1.., label/score) or by position, or named with --columns q=anchor,d=positive.
OUT gets model/ (a sentence-transformers directory with the prompts and a model card), results.json,
metrics.jsonl and metrics.png. A run owns OUT: --resume continues it exactly, --overwrite replaces it.
--eval-beir DIR / --eval-sts FILE score the model at step 0, every --eval-every steps (default: every epoch) and
at the end, as `bertkit evaluate --beir / --sts` does: eval records of metrics.jsonl and the plot, the final
scores in results.json, a before/after table in the model card; training is the same as without them.
See :func:`bertkit.sentence.training.finetune_embeddings`.
"""

from __future__ import annotations

import argparse
import json

from bertkit.cli import ArgumentParser, add_report_to_argument, add_threads_argument
from bertkit.cli.evaluate import k_list
from bertkit.io import refuse_output_over_input
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import LOSSES


def dims_list(text: str) -> list[int]:
    """``--matryoshka-dims 256,64`` -> ``[256, 64]``."""
    try:
        dims = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers; write e.g. 256,128,64") from None
    if any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be a positive integer, e.g. 256,128,64")
    return dims


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit finetune embed", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser, batch_size=32, learning_rate=5e-5)
    loss = parser.add_argument_group("loss")
    loss.add_argument("--loss", default="mnrl", help=f"one of {', '.join(LOSSES)} (default mnrl)")
    loss.add_argument("--scale", type=float, help="mnrl, cached-mnrl, cosent, angle: similarity scale (default 20); "
                                                  "gist: 1 / temperature (default 100)")
    loss.add_argument("--symmetric", action="store_true", help="mnrl, cached-mnrl: also rank anchors per positive")
    loss.add_argument("--mini-batch-size", type=int, help="cached-mnrl: rows embedded at a time (default 32)")
    loss.add_argument("--guide", metavar="MODEL", help="gist: the embedding model whose similarities drop false "
                                                       "negatives (any tokenizer; frozen, not saved)")
    loss.add_argument("--matryoshka-dims", type=dims_list, help="train the embedding truncated to these too, "
                                                                "e.g. 256,64")
    model = parser.add_argument_group("model")
    model.add_argument("--pooling", choices=("mean", "cls", "max", "lasttoken"), help="default: the model's (mean)")
    model.add_argument("--query-prompt", help="prefixed to the anchors; saved as the model's 'query' prompt")
    model.add_argument("--document-prompt", help="prefixed to positives and negatives; saved as 'document'")
    model.add_argument("--allow-repeated-queries", action="store_true",
                       help="let one query come with two different positives in a batch")
    add_evaluation_flags(parser, reranker=False)
    args = parser.parse_args(argv)

    from bertkit.sentence.training import finetune_embeddings

    if args.guide:
        refuse_output_over_input(("-o", args.output), [], models=[("--guide", args.guide)])
    result = finetune_embeddings(
        args.model, args.train, args.output, loss=args.loss, scale=args.scale, symmetric=args.symmetric,
        mini_batch_size=args.mini_batch_size, matryoshka_dims=args.matryoshka_dims, pooling=args.pooling,
        query_prompt=args.query_prompt, document_prompt=args.document_prompt,
        allow_repeated_queries=args.allow_repeated_queries, guide=args.guide, **evaluation_options(args),
        **run_options(args))
    report(result)
    return 0


def add_run_flags(parser: argparse.ArgumentParser, *, batch_size: int, learning_rate: float) -> None:
    """The flags ``finetune embed`` and ``finetune rerank`` share: model, data, training, the output directory."""
    parser.add_argument("--model", required=True, help="the checkpoint to start from")
    parser.add_argument("--train", required=True, nargs="+", help="training file(s)")
    parser.add_argument("-o", "--output", required=True, help="the run's directory")
    data = parser.add_argument_group("data")
    data.add_argument("--columns", help="COLUMN=ROLE,... e.g. q=anchor,d=positive,n1=negative,s=label")
    data.add_argument("--sampling", choices=("proportional", "round_robin"), default="proportional",
                      help="how batches of several files are mixed (default proportional)")
    data.add_argument("--encoding", default="utf-8", help="of the --train files (default utf-8), e.g. latin-1, "
                                                          "cp1252")
    group = parser.add_argument_group("training")
    group.add_argument("--max-seq-length", type=int, help="default: the model's")
    group.add_argument("--batch-size", type=int, default=batch_size,
                       help="rows per step and process (under torchrun a step reads batch size x processes rows; "
                            "default %(default)s)")
    group.add_argument("--epochs", type=float, default=1.0, help="default: %(default)s")
    group.add_argument("--max-steps", type=int, help="steps to train (default: from --epochs)")
    group.add_argument("--learning-rate", type=float, default=learning_rate, help="default: %(default)s")
    group.add_argument("--warmup-ratio", type=float, default=0.1, help="default: %(default)s")
    group.add_argument("--weight-decay", type=float, default=0.01, help="default: %(default)s")
    group.add_argument("--gradient-accumulation-steps", type=int, default=1, metavar="K",
                       help="batches per optimizer step (default 1); in-batch negatives stay each batch's own: "
                            "cached-mnrl --mini-batch-size gives a large batch's negatives in less memory")
    group.add_argument("--save-every", type=int, help="steps between checkpoints (default: every epoch)")
    group.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                       help="auto (default): bf16 autocast where the CPU/GPU has it natively, else fp32")
    group.add_argument("--seed", type=int, default=42, help="makes the run reproducible (default 42)")
    group.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "gpu"),
                       help="auto (default): CUDA when there is a GPU, else the CPU")
    add_threads_argument(group)
    add_report_to_argument(group)
    owner = parser.add_argument_group("the output directory").add_mutually_exclusive_group()
    owner.add_argument("--resume", action="store_true", help="continue the run in -o from its latest checkpoint")
    owner.add_argument("--overwrite", action="store_true", help="replace what -o holds")
    parser.add_argument("--apply-changes", action="store_true",
                        help="with --resume: continue with changed hyperparameters instead of refusing them")


def add_evaluation_flags(parser: argparse.ArgumentParser, *, reranker: bool) -> None:
    """The flags of evaluation during training that ``finetune embed`` and ``finetune rerank`` share (--eval-beir,
    --eval-every, --eval-split, --eval-k), with the bi-encoder's --eval-sts or the reranker's --eval-rerank,
    --eval-first-stage and --eval-top-k."""
    group = parser.add_argument_group("evaluation during training")
    if reranker:
        group.add_argument("--eval-rerank", metavar="FILE", help="rows of query, positive(s) and negatives (or "
                                                                 "ranked documents): MRR, NDCG and MAP")
        group.add_argument("--eval-beir", metavar="DIR", help="a BEIR directory (corpus.jsonl, queries.jsonl, "
                                                              "qrels/SPLIT.tsv): --eval-first-stage's top k reranked")
        group.add_argument("--eval-first-stage", metavar="EMBEDDER|RUN_FILE",
                           help="--eval-beir: an embedding model directory or a run file (TREC lines or .json) "
                                "giving each query its candidates, retrieved once before training")
        group.add_argument("--eval-top-k", type=int, default=100, metavar="K",
                           help="--eval-beir: the first stage's documents reranked per query (default 100)")
    else:
        group.add_argument("--eval-beir", metavar="DIR", help="a BEIR directory (corpus.jsonl, queries.jsonl, "
                                                              "qrels/SPLIT.tsv): retrieval metrics")
        group.add_argument("--eval-sts", metavar="FILE", help="pairs with gold scores (sentence1, sentence2, "
                                                              "score): similarity correlations")
    group.add_argument("--eval-every", type=int, metavar="N", help="steps between evaluations (default: every "
                                                                   "epoch); also at step 0 and at the end")
    group.add_argument("--eval-split", default="test", metavar="SPLIT",
                       help="--eval-beir: qrels/SPLIT.tsv (default test)")
    group.add_argument("--eval-k", type=k_list, default=DEFAULT_K, metavar="K,K,...",
                       help="the cut-offs (default 1,3,5,10,100)")


def evaluation_options(args: argparse.Namespace) -> dict:
    """The ``eval_*`` keyword arguments of :func:`add_evaluation_flags`' flags for the training function (after
    refusing an output directory over one of their inputs)."""
    given = {name: value for name, value in vars(args).items() if name.startswith("eval_")}
    refuse_output_over_input(("-o", args.output), [(f"--{name.replace('_', '-')}", given[name]) for name in
                                                   ("eval_beir", "eval_sts", "eval_rerank", "eval_first_stage")
                                                   if name in given])
    return given


def run_options(args: argparse.Namespace) -> dict:
    """The keyword arguments :func:`add_run_flags`' flags give the training function (after refusing an output
    directory over an input)."""
    from bertkit.sentence.data_layout import parse_columns
    from bertkit.training.threads import parse_threads

    if args.apply_changes and not args.resume:
        raise ValueError("--apply-changes only applies with --resume")
    refuse_output_over_input(("-o", args.output), [("--train", path) for path in args.train],
                             models=[("--model", args.model)])
    return dict(columns=parse_columns(args.columns) if args.columns else None, sampling=args.sampling,
                encoding=args.encoding, apply_changes=args.apply_changes,
                max_seq_length=args.max_seq_length, batch_size=args.batch_size, epochs=args.epochs,
                max_steps=args.max_steps, learning_rate=args.learning_rate, warmup_ratio=args.warmup_ratio,
                weight_decay=args.weight_decay, save_every=args.save_every, precision=args.precision,
                seed=args.seed, device=args.device, resume=args.resume, overwrite=args.overwrite,
                threads=parse_threads(args.threads, "--threads"), report_to=args.report_to,
                gradient_accumulation_steps=args.gradient_accumulation_steps)


def report(result) -> None:
    """Print the results and where the run's files are (rank 0 alone under torchrun: it wrote them)."""
    from bertkit.sentence.training import data_parallel

    if data_parallel()[0] != 0:
        return
    print(json.dumps(result.results, indent=2))
    print(f"model: {result.model_dir}\nresults: {result.output_dir / 'results.json'}\nmetrics: {result.metrics_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
