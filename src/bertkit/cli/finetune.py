"""``bertkit finetune TASK``: fine-tune any BERT for classification, tagging, extractive QA or multiple choice.

    bertkit finetune classify --model SRC --train train.tsv --validation dev.tsv --test test.tsv -o OUT
    bertkit finetune classify --model SRC --glue mnli --data-dir glue/MNLI -o OUT
    bertkit finetune tag      --model SRC --train train.conll --validation dev.conll -o OUT
    bertkit finetune qa       --model SRC --train train-v2.0.json --validation dev-v2.0.json -o OUT
    bertkit finetune choice   --model SRC --train swag_train.csv --validation swag_val.csv -o OUT
    bertkit finetune embed    --model SRC --train pairs.jsonl -o OUT --loss mnrl   (see finetune embed --help)
    bertkit finetune rerank   --model SRC --train pairs.jsonl -o OUT --loss bce    (see finetune rerank --help)

SRC is anything bertkit loads: an HF directory, a Google TF1 checkpoint (directory or zip), a
pytorch_pretrained_bert archive, a registry name. OUT gets model/ (the best epoch by the
validation metric, HF format with tokenizer), results.json, predictions_<split>.jsonl,
metrics.jsonl and metrics.png. A run owns OUT: --resume continues it, --overwrite replaces it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bertkit.cli import ArgumentParser, add_report_to_argument, add_threads_argument
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
    group = parser.add_argument_group(f"{task} options")
    for flag, kwargs in TASK_FLAGS[task]:
        group.add_argument(flag, **kwargs)


def task_options(args: argparse.Namespace, task: str) -> dict[str, Any]:
    """The task's options the user set on the command line (unset ones keep the task's / saved defaults)."""
    names = [flag[2:].replace("-", "_") for flag, _ in TASK_FLAGS[task]]
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def main(argv: list[str]) -> int:
    if argv[:1] in (["embed"], ["rerank"]):  # a bi-encoder or a reranker: their own flags
        import importlib

        return importlib.import_module(f"bertkit.cli.finetune_{argv[0]}").main(argv[1:])
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
    args = parser.parse_args(argv)
    if args.train is None and args.task == "classify" and args.glue is None:
        parser.error("--train is required (or --glue NAME --data-dir DIR)")
    if args.train is None and args.task != "classify":
        parser.error("--train is required")
    if args.data_dir is not None and getattr(args, "glue", None) is None:
        parser.error("--data-dir reads a GLUE task's files; name the task with --glue")
    refuse_output_over_input(("-o", args.output), [("--train", args.train), ("--validation", args.validation),
                                                   ("--test", args.test), ("--data-dir", args.data_dir)],
                             models=[("--model", args.model)])

    from bertkit.tasks.finetuning import finetune
    from bertkit.training.threads import parse_threads

    result = finetune(args.task, args.model, args.train, validation=args.validation, test=args.test,
                      data_dir=args.data_dir, output_dir=args.output, epochs=args.epochs,
                      learning_rate=args.learning_rate, batch_size=args.batch_size, max_seq_length=args.max_seq_length,
                      warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, seed=args.seed,
                      precision=args.precision, gradient_accumulation_steps=args.gradient_accumulation_steps,
                      early_stopping_patience=args.early_stopping_patience, metric_for_best=args.metric_for_best,
                      group_by_length=args.group_by_length, eval_batch_size=args.eval_batch_size,
                      device=args.device, resume=args.resume, overwrite=args.overwrite,
                      apply_changes=args.apply_changes, strict=args.strict, **task_options(args, args.task),
                      threads=parse_threads(args.threads, "--threads"), report_to=args.report_to)
    print(json.dumps(result.results, indent=2))
    print(f"model: {result.model_dir}\nresults: {result.output_dir / 'results.json'}\nmetrics: {result.metrics_path}")
    for split, path in result.predictions.items():
        print(f"predictions ({split}): {path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    return 0


def _add_common(parser: argparse.ArgumentParser, task: str) -> None:
    defaults = {"max_seq_length": 128, "epochs": 3.0, "learning_rate": 5e-5, **TASK_DEFAULTS.get(task, {})}
    parser.add_argument("--model", required=True, help="the checkpoint to start from (see bertkit finetune --help)")
    parser.add_argument("--train", help="training file")
    parser.add_argument("--validation", help="validation file: scored every epoch, picks the best model")
    parser.add_argument("--test", help="test file: scored (when labelled) and predicted with the best model")
    parser.add_argument("--strict", action="store_true",
                        help="refuse data the readers only warn about (e.g. SQuAD answers that contradict "
                             "is_impossible) instead of training on it")
    parser.add_argument("--data-dir", help="with --glue: the GLUE task's directory (or the GLUE root)")
    parser.add_argument("-o", "--output", required=True, help="the run's directory")
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=float, default=defaults["epochs"], help="default: %(default)s")
    group.add_argument("--learning-rate", type=float, default=defaults["learning_rate"], help="default: %(default)s")
    group.add_argument("--batch-size", type=int, default=32, help="examples per optimizer step (default 32)")
    group.add_argument("--eval-batch-size", type=int, default=64, help="examples per evaluation batch (default 64)")
    group.add_argument("--max-seq-length", type=int, default=defaults["max_seq_length"], help="default: %(default)s")
    group.add_argument("--warmup-ratio", type=float, default=0.1, help="default: %(default)s")
    group.add_argument("--weight-decay", type=float, default=0.01, help="default: %(default)s")
    group.add_argument("--gradient-accumulation-steps", type=int, default=1,
                       help="micro-batches per step: the same batch in less memory (default 1)")
    group.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                       help="auto (default): bf16 autocast where the CPU/GPU has it natively, else fp32")
    group.add_argument("--seed", type=int, default=42, help="makes the run reproducible (default 42)")
    group.add_argument("--early-stopping-patience", type=int,
                       help="stop after this many epochs without a better validation metric")
    group.add_argument("--metric-for-best", help="validation metric that picks the best epoch (default: the "
                                                 "task's: accuracy, f1, ...; 'loss' is lower-is-better)")
    group.add_argument("--group-by-length", action=argparse.BooleanOptionalAction, default=False,
                       help="batches of similar length: less padding, but they learned worse on held-out NER "
                            "(default: shuffled batches, as HF's Trainer)")
    group.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "gpu"),
                       help="auto (default): CUDA when there is a GPU, else the CPU")
    add_threads_argument(group)
    add_report_to_argument(group)
    owner = parser.add_argument_group("the output directory").add_mutually_exclusive_group()
    owner.add_argument("--resume", action="store_true", help="continue the run in -o from its latest checkpoint")
    owner.add_argument("--overwrite", action="store_true", help="replace what -o holds")
    parser.add_argument("--apply-changes", action="store_true",
                        help="with --resume: continue with changed hyperparameters instead of refusing them")
