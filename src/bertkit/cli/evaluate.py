"""``bertkit evaluate MODEL_DIR --data FILE [--task T]``: a fine-tuned model's metrics on a labelled file.

MODEL_DIR is what ``bertkit finetune`` wrote (OUT/model: the task and its settings are in its
task.json, so --task may be left out), or any fine-tuned HF directory with --task.
"""

from __future__ import annotations

import argparse
import json

from bertkit.cli import ArgumentParser
from bertkit.cli.finetune import TASK_FLAGS, task_options


def parser_for(prog: str, doc: str) -> ArgumentParser:
    """The arguments ``evaluate`` and ``predict`` share (every task's flags, to override what was saved)."""
    parser = ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a fine-tuned model directory (OUT/model of bertkit finetune)")
    parser.add_argument("--task", choices=sorted(TASK_FLAGS), help="default: the one in MODEL_DIR/task.json")
    parser.add_argument("--data", required=True, help="the file to run on (same formats as finetune)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-seq-length", type=int, help="default: the fine-tuning run's")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                        help="auto (default): bf16 where the CPU/GPU has it natively, else fp32")
    seen: set[str] = set()
    for task in TASK_FLAGS:  # --encoding is shared by two tasks: add each flag once
        flags = [(flag, kwargs) for flag, kwargs in TASK_FLAGS[task] if flag not in seen]
        seen.update(flag for flag, _ in flags)
        group = parser.add_argument_group(f"{task} options (override the saved ones)")
        for flag, kwargs in flags:
            group.add_argument(flag, **kwargs)
    return parser


def options(args: argparse.Namespace) -> dict:
    """The task options set on the command line, for whichever task the model was tuned for."""
    chosen = {}
    for task in TASK_FLAGS:
        chosen.update(task_options(args, task))
    return chosen


def main(argv: list[str]) -> int:
    args = parser_for("bertkit evaluate", __doc__).parse_args(argv)
    from bertkit.tasks.finetuning import evaluate

    scores = evaluate(args.model, args.data, task=args.task, batch_size=args.batch_size,
                      max_seq_length=args.max_seq_length, precision=args.precision, **options(args))
    print(json.dumps(scores, indent=2))
    return 0



