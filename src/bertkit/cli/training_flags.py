"""The training commands' flags, declared once: ``bertkit finetune TASK``, ``finetune embed``, ``finetune rerank``
and ``pretrain`` read the same flags with the same choices, and :func:`training_config` maps them onto one
:class:`~bertkit.training.TrainingConfig`.

:data:`FLAGS` is the table: each flag once, with the TrainingConfig field it sets. Every command gets
:data:`COMMON` (optimisation, length, precision and device, threads, trackers, the evaluation during training)
and the run directory's ``--resume`` / ``--overwrite`` / ``--apply-changes``; a command adds the others it
needs (``--save-every``, ...). Each command gives its own defaults (its recipe's), so ``--help`` shows them;
a default of None leaves the value to the command (the resumed run's, the size's recipe). The choices come from
:data:`CHOICES`, read from the modules that define them. ``--metric-for-best`` and
``--early-stopping-patience`` are the old names of ``--keep-best`` and ``--patience``: still read, and said
once when used.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from bertkit.training import TrainingConfig
from bertkit.training.config import DEVICES, PRECISIONS
from bertkit.training.reporting import CHOICES as TRACKERS
from bertkit.training.reporting import parse_report_to, require
from bertkit.training.threads import parse_threads

#: every choice list of the training flags (flag field -> choices), from the module that defines it
CHOICES: dict[str, tuple[str, ...]] = {"precision": PRECISIONS, "device": DEVICES, "report_to": TRACKERS}


class _ReportTo(argparse.Action):
    """``--report-to`` names: a usage error for an unknown one; a tracker whose extra is missing is an ImportError
    saying what to install, raised while the arguments are read (before anything trains)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        try:
            names = parse_report_to(values, "--report-to")
        except ValueError as error:
            parser.error(str(error))
        require(names)
        setattr(namespace, self.dest, names)


class _OldName(argparse.Action):
    """A flag's old name: sets the new flag's value and says once that the name changed."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog}: {option_string} is the old name of {self.new}; it still works, as {self.new} does.",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


#: flag -> (TrainingConfig field, argparse keyword arguments): every training flag, once
FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--epochs": ("epochs", dict(type=float, help="passes over the training data (may be fractional)")),
    "--max-steps": ("max_steps", dict(type=int, metavar="N", help="optimizer steps to train (wins over --epochs)")),
    "--batch-size": ("batch_size", dict(type=int, help="examples (rows) per optimizer step, over all processes and "
                                                       "accumulation steps; each process trains on its share")),
    "--gradient-accumulation-steps": ("gradient_accumulation_steps", dict(
        type=int, metavar="K", help="micro-batches per step: the same batch in less memory")),
    "--learning-rate": ("learning_rate", dict(type=float, help="peak learning rate of AdamW")),
    "--warmup-ratio": ("warmup_ratio", dict(
        type=float, help="share of the steps warming the learning rate up linearly, then a linear decay")),
    "--weight-decay": ("weight_decay", dict(type=float, help="AdamW's decoupled weight decay")),
    "--precision": ("precision", dict(choices=CHOICES["precision"],
                                      help="auto: bf16 autocast where the CPU/GPU has it natively, else fp32")),
    "--seed": ("seed", dict(type=int, help="makes the run reproducible")),
    "--device": ("device", dict(choices=CHOICES["device"], help="auto: CUDA when there is a GPU, else the CPU")),
    "--threads": ("threads", dict(
        metavar="auto|N", help="CPU threads: auto times the first steps with all threads and with one and keeps the "
                               "faster (on a busy machine one can be several times faster); a number sets it. The "
                               "thread count changes the speed, never the numbers; run.json records it")),
    "--report-to": ("report_to", dict(
        nargs="+", metavar="TRACKER", action=_ReportTo,
        help=f"also report the run to {', '.join(TRACKERS[:-1])} (several: --report-to tensorboard mlflow, or a "
             "comma list; each needs its extra, e.g. pip install 'bertkit[mlflow]'): the metrics.jsonl scalars, the "
             "hyperparameters, the final metrics; a resumed run continues the same tracker runs; none: no tracker")),
    "--eval-every": ("eval_every", dict(type=int, metavar="N", help="steps between evaluations during training")),
    "--keep-best": ("keep_best", dict(
        metavar="METRIC", help="keep the model of the evaluation best on METRIC (lower is better for names ending "
                               "in 'loss', higher otherwise)")),
    "--patience": ("patience", dict(type=int, metavar="N",
                                    help="stop after N evaluations in a row without a better --keep-best metric")),
    # what some commands add
    "--eval-batch-size": ("eval_batch_size", dict(type=int, help="examples per evaluation batch")),
    "--log-every": ("log_every", dict(type=int, help="steps between lines of metrics.jsonl")),
    "--save-every": ("save_every", dict(type=int, help="steps between checkpoints")),
    "--keep-last": ("keep_last", dict(type=int, help="checkpoints kept on disk, newest first")),
    "--gradient-checkpointing": ("gradient_checkpointing", dict(
        action="store_true", default=None,
        help="recompute activations in the backward pass: less memory, about a third slower")),
}
#: the flags every training command has
COMMON = ("--epochs", "--max-steps", "--batch-size", "--gradient-accumulation-steps", "--learning-rate",
          "--warmup-ratio", "--weight-decay", "--precision", "--seed", "--device", "--threads", "--report-to",
          "--eval-every", "--keep-best", "--patience")
#: old flag -> the flag it is now
OLD_NAMES = {"--metric-for-best": "--keep-best", "--early-stopping-patience": "--patience"}
#: the run directory's flags (not TrainingConfig fields: :func:`~bertkit.training.run.run_recipe` 's arguments)
RUN_FLAGS = ("--resume", "--overwrite", "--apply-changes")


def add_training_flags(parser: argparse.ArgumentParser, defaults: Mapping[str, Any], *, extra: tuple[str, ...] = (),
                       helps: Mapping[str, str] | None = None, title: str = "training") -> None:
    """Add :data:`COMMON` and ``extra`` flags of :data:`FLAGS` to ``parser`` in a group ``title``, with the
    command's ``defaults`` (field -> value; a missing field or None: unset, left to the command) and its own
    words for some (``helps``: flag -> text after the table's), then the run directory's flags."""
    group = parser.add_argument_group(title)
    for flag in (*COMMON, *extra):
        add_flag(group, flag, defaults.get(FLAGS[flag][0]), (helps or {}).get(flag))
    for old, new in OLD_NAMES.items():
        group.add_argument(old, dest=FLAGS[new][0], action=_OldName, new=new, help=argparse.SUPPRESS,
                           type=FLAGS[new][1].get("type"))
    owner = parser.add_argument_group("the output directory")
    either = owner.add_mutually_exclusive_group()
    either.add_argument("--resume", action="store_true", help="continue the run in -o from its latest checkpoint")
    either.add_argument("--overwrite", action="store_true",
                        help="replace what -o holds (once the new run has written its first checkpoint)")
    owner.add_argument("--apply-changes", action="store_true",
                       help="with --resume: continue with changed hyperparameters (learning rate, steps, ...) "
                            "instead of refusing them")


def add_flag(group, flag: str, default: Any = None, help: str | None = None) -> None:
    """Add one flag of :data:`FLAGS` to ``group`` (a parser or an argument group) with ``default`` (None: unset)
    and ``help`` after the table's words."""
    field, options = FLAGS[flag]
    text = " ".join(part for part in (options.get("help"), help) if part)
    if default is not None and options.get("action") != "store_true":
        shown = ",".join(default) if isinstance(default, tuple) else default
        text += f" (default: {shown or 'none'})"
    group.add_argument(flag, dest=field, **{**options, "help": text, "default": default})


def check_run_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for run-directory flags that do not go together."""
    if args.apply_changes and not args.resume:
        parser.error("--apply-changes only applies with --resume")


def training_config(args: argparse.Namespace, **fields: Any) -> TrainingConfig:
    """The :class:`~bertkit.training.TrainingConfig` of the parsed training flags (those left None keep the
    config's defaults) and ``fields`` (a command's own: e.g. ``output_dir``, ``progress_bar``)."""
    given = {field: getattr(args, field) for field, _ in FLAGS.values()
             if getattr(args, field, None) is not None}
    if "threads" in given:
        given["threads"] = parse_threads(given["threads"], "--threads")
    return TrainingConfig(**{**given, **fields})


def run_options(args: argparse.Namespace) -> dict[str, bool]:
    """:func:`~bertkit.training.run.run_recipe` 's run-directory arguments from the parsed flags."""
    return {"resume": args.resume, "overwrite": args.overwrite, "apply_changes": args.apply_changes}
