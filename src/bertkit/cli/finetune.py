"""``bertkit finetune TASK``: fine-tune any BERT for classification, tagging, extractive QA or multiple choice.

    bertkit finetune classify --model SRC --train train.tsv --validation dev.tsv --test test.tsv -o OUT
    bertkit finetune classify --model SRC --glue mnli --data-dir glue/MNLI -o OUT
    bertkit finetune tag      --model SRC --train train.conll --validation dev.conll -o OUT
    bertkit finetune qa       --model SRC --train train-v2.0.json --validation dev-v2.0.json -o OUT
    bertkit finetune choice   --model SRC --train swag_train.csv --validation swag_val.csv -o OUT
    bertkit finetune embed    --model SRC --train pairs.jsonl -o OUT --loss mnrl   (see finetune embed --help)
    bertkit finetune rerank   --model SRC --train pairs.jsonl -o OUT --loss bce    (see finetune rerank --help)
    bertkit finetune sparse   --model MLM --train pairs.jsonl -o OUT               (see finetune sparse --help)
    bertkit finetune colbert  --model SRC --train pairs.jsonl -o OUT               (see finetune colbert --help)

SRC is anything bertkit loads: an HF directory, a Google TF1 checkpoint (directory or zip), a
pytorch_pretrained_bert archive, a registry name. OUT gets model/ (the best epoch by the
validation metric, HF format with tokenizer), results.json, predictions_<split>.jsonl,
metrics.jsonl and metrics.png. A run owns OUT: --resume continues it, --overwrite replaces it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bertkit.cli import ArgumentParser, add_flags
from bertkit.cli.training_flags import add_training_flags, check_run_flags, run_options, training_config
from bertkit.io import refuse_output_over_input


def label_list(text: str) -> list[str]:
    """``--labels A,B,C`` -> ``["A", "B", "C"]``."""
    labels = [label.strip() for label in text.split(",")]
    if not all(labels):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty label; write the names separated by commas, "
                                         "e.g. O,B-PER,I-PER")
    return labels


ENCODING = ("--encoding", dict(help="of the data files (default utf-8)"))
LABELS = ("--labels", dict(type=label_list, help="comma-separated label names in id order, e.g. to keep a label "
                                                 "the training set lacks (default: the training set's, sorted)"))
#: task -> its own flags: (flag, argparse keyword arguments); the option name is the flag's
TASK_FLAGS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "classify": [
        ("--text-column", dict(help="column holding the text (default: text, sentence, sentence1, ...)")),
        ("--text-pair-column", dict(help="column holding the second text of a pair")),
        ("--label-column", dict(help="column holding the label (default: label)")),
        ("--problem-type", dict(choices=("single_label_classification", "multi_label_classification",
                                         "regression"), help="default: inferred from the training labels")),
        ("--glue", dict(choices=("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"),
                        help="read a GLUE task's original TSV files from --data-dir and score it as GLUE does")),
        LABELS,
        ENCODING,
    ],
    "tag": [
        ("--tag-column", dict(type=int, help="CoNLL column holding the tag (default -1: the last)")),
        ("--label-all-pieces", dict(action="store_true", default=None,
                                    help="label every word piece, not only a word's first")),
        ("--scheme", dict(choices=("IOB2", "IOB1", "IOBES", "BIO", "BIOES"),
                          help="score entities strictly under this scheme (default: conlleval's lenient rule)")),
        LABELS,
        ENCODING,
    ],
    "qa": [
        ("--doc-stride", dict(type=int, help="context tokens consecutive windows share (default 128)")),
        ("--max-query-length", dict(type=int, help="question tokens kept (default 64)")),
        ("--n-best-size", dict(type=int, help="candidate starts and ends per window (default 20)")),
        ("--max-answer-length", dict(type=int, help="longest answer in tokens (default 30)")),
        ("--null-score-diff-threshold", dict(type=float,
                                             help="SQuAD v2: answer nothing when the null score beats the best span "
                                                  "by more than this (default: tuned on the validation set)")),
        ENCODING,
    ],
    "choice": [ENCODING],
}
#: per task: the defaults that differ from the common ones
TASK_DEFAULTS = {"qa": {"max_seq_length": 384, "epochs": 2.0, "learning_rate": 3e-5}}


def add_task_flags(parser: argparse.ArgumentParser, task: str) -> None:
    add_flags(parser.add_argument_group(f"{task} options"), TASK_FLAGS[task])


def task_options(args: argparse.Namespace, task: str) -> dict[str, Any]:
    """The task's options the user set on the command line (unset ones keep the task's / saved defaults)."""
    names = [flag[2:].replace("-", "_") for flag, _ in TASK_FLAGS[task]]
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def main(argv: list[str]) -> int:
    if argv[:1] in (["embed"], ["rerank"], ["sparse"], ["colbert"]):  # bi-encoder, reranker, sparse, ColBERT: own flags
        import importlib

        return importlib.import_module(f"bertkit.cli.finetune_{argv[0]}").main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)

    from bertkit.tasks.finetuning import finetune

    result = finetune(args.task, args.model, args.train, validation=args.validation, test=args.test,
                      data_dir=args.data_dir, output_dir=args.output, training=training_config(args),
                      max_seq_length=args.max_seq_length, group_by_length=args.group_by_length, strict=args.strict,
                      **run_options(args), **task_options(args, args.task))
    report(result)
    return 0


def build_parser() -> ArgumentParser:
    """``bertkit finetune``'s parser: a subcommand per task with the common flags and the task's own."""
    parser = ArgumentParser(prog="bertkit finetune", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    for task, help_text in (("classify", "sentence (pair) classification or regression; GLUE"),
                            ("tag", "token classification: NER, POS, chunking"),
                            ("qa", "extractive question answering: SQuAD v1.1 / v2.0"),
                            ("choice", "multiple choice: SWAG and JSONL")):
        sub = tasks.add_parser(task, help=help_text, description=f"{help_text}. {__doc__.splitlines()[0]}")
        _add_common(sub, task)
        add_task_flags(sub, task)
    tasks.add_parser("embed", help="a bi-encoder (embedding model): MNRL, CoSENT, Matryoshka, ... "
                                   "(bertkit finetune embed --help)", add_help=False)
    tasks.add_parser("rerank", help="a cross-encoder (reranker): BCE, ListNet, LambdaLoss, MNRL "
                                    "(bertkit finetune rerank --help)", add_help=False)
    tasks.add_parser("sparse", help="a learned-sparse encoder: SPLADE or inference-free SPLADE "
                                    "(bertkit finetune sparse --help)", add_help=False)
    tasks.add_parser("colbert", help="a multi-vector (ColBERT) model: MNRL over MaxSim, MarginMSE, KL distillation "
                                     "(bertkit finetune colbert --help)", add_help=False)
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors for flags that do not go together, and an output directory over an input."""
    if args.train is None and args.task == "classify" and args.glue is None:
        parser.error("--train is required (or --glue NAME --data-dir DIR)")
    if args.train is None and args.task != "classify":
        parser.error("--train is required")
    if args.data_dir is not None and getattr(args, "glue", None) is None:
        parser.error("--data-dir reads a GLUE task's files; name the task with --glue")
    check_run_flags(parser, args)
    refuse_output_over_input(("-o", args.output), [("--train", args.train), ("--validation", args.validation),
                                                   ("--test", args.test), ("--data-dir", args.data_dir)],
                             models=[("--model", args.model)])


def report(result) -> None:
    """Print the results and where the run's files are."""
    print(json.dumps(result.results, indent=2))
    print(f"model: {result.model_dir}\nresults: {result.output_dir / 'results.json'}\nmetrics: {result.metrics_path}")
    for split, path in result.predictions.items():
        print(f"predictions ({split}): {path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")


def _add_common(parser: argparse.ArgumentParser, task: str) -> None:
    from bertkit.tasks.finetuning import FINETUNE_TRAINING

    defaults = {**FINETUNE_TRAINING, "gradient_accumulation_steps": 1, "precision": "auto", "seed": 42,
                "device": "auto", "threads": "auto", "report_to": (), "max_seq_length": 128,
                **TASK_DEFAULTS.get(task, {})}
    parser.add_argument("--model", required=True, help="the checkpoint to start from (see bertkit finetune --help)")
    parser.add_argument("--train", help="training file")
    parser.add_argument("--validation", help="validation file: scored every epoch, picks the best model")
    parser.add_argument("--test", help="test file: scored (when labelled) and predicted with the best model")
    parser.add_argument("--strict", action="store_true",
                        help="refuse data the readers only warn about (e.g. SQuAD answers that contradict "
                             "is_impossible) instead of training on it")
    parser.add_argument("--data-dir", help="with --glue: the GLUE task's directory (or the GLUE root)")
    parser.add_argument("-o", "--output", required=True, help="the run's directory")
    add_training_flags(parser, defaults, extra=("--eval-batch-size",), helps={
        "--eval-every": "of the --validation set (default: every epoch)",
        "--keep-best": "of the --validation set (default: the task's own: accuracy, f1, ...)"})
    group = parser.add_argument_group("data")
    group.add_argument("--max-seq-length", type=int, default=defaults["max_seq_length"], help="default: %(default)s")
    group.add_argument("--group-by-length", action=argparse.BooleanOptionalAction, default=False,
                       help="batches of similar length: less padding, but they learned worse on held-out NER "
                            "(default: shuffled batches, as HF's Trainer)")
