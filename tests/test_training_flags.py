"""The training flags, declared once (bertkit.cli.training_flags): every training command has the same ones with
the same choices, they map onto one TrainingConfig, and the old names still work, said once."""

from __future__ import annotations

import argparse
import json

import pytest

from bertkit.cli import finetune as finetune_cli
from bertkit.cli import main as cli
from bertkit.cli import pretrain as pretrain_cli
from bertkit.cli.training_flags import CHOICES, COMMON, FLAGS, OLD_NAMES, RUN_FLAGS, training_config
from bertkit.training import reporting
from bertkit.training.config import DEVICES, PRECISIONS
from task_helpers import model_dir


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def training_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of a command that trains with the one run's flags."""
    tasks = _subparsers(finetune_cli.build_parser())
    return {**{f"finetune {task}": tasks[task] for task in ("classify", "tag", "qa", "choice")},
            "pretrain": pretrain_cli.build_parser()}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


@pytest.mark.parametrize("command", sorted(training_parsers()))
def test_every_training_command_has_the_same_flags_and_choices(command):
    options = _options(training_parsers()[command])
    for flag in (*COMMON, *RUN_FLAGS, *OLD_NAMES):
        assert flag in options, (command, flag)
    for flag in COMMON:
        field, _ = FLAGS[flag]
        assert options[flag].dest == field  # the flag sets the TrainingConfig field of its name
        if field in CHOICES and field != "report_to":
            assert tuple(options[flag].choices) == CHOICES[field]
    assert options["--metric-for-best"].dest == "keep_best" and options["--metric-for-best"].help == argparse.SUPPRESS


def test_the_choices_come_from_their_modules():
    assert CHOICES == {"precision": PRECISIONS, "device": DEVICES, "report_to": reporting.CHOICES}
    assert CHOICES["precision"] is PRECISIONS and CHOICES["report_to"] is reporting.CHOICES


def test_the_flags_map_onto_one_config():
    parser = _subparsers(finetune_cli.build_parser())["classify"]
    args = parser.parse_args(["--model", "m", "--train", "t", "-o", "o", "--epochs", "2", "--max-steps", "9",
                              "--keep-best", "loss", "--patience", "3", "--eval-every", "5", "--threads", "2",
                              "--learning-rate", "1e-4", "--eval-batch-size", "8"])
    config = training_config(args)
    assert (config.epochs, config.max_steps, config.keep_best, config.patience, config.eval_every) == (2, 9, "loss",
                                                                                                      3, 5)
    assert (config.threads, config.learning_rate, config.eval_batch_size, config.batch_size) == (2, 1e-4, 8, 32)
    assert config.warmup_ratio == 0.1 and config.report_to == ()  # fine-tuning's defaults
    qa = _subparsers(finetune_cli.build_parser())["qa"].parse_args(["--model", "m", "--train", "t", "-o", "o"])
    assert training_config(qa).epochs == 2.0 and training_config(qa).learning_rate == 3e-5
    args = pretrain_cli.build_parser().parse_args(["--text", "t.txt", "-o", "o", "--max-steps", "4", "--keep-best",
                                                   "loss", "--gradient-checkpointing"])
    config = training_config(args, output_dir="o")
    assert (config.max_steps, config.keep_best, config.gradient_checkpointing, config.log_every) == (4, "loss", True,
                                                                                                     10)


def test_the_old_names_still_work_and_say_so(capsys):
    parser = _subparsers(finetune_cli.build_parser())["classify"]
    args = parser.parse_args(["--model", "m", "--train", "t", "-o", "o", "--metric-for-best", "f1",
                              "--early-stopping-patience", "2"])
    assert (args.keep_best, args.patience) == ("f1", 2)
    err = capsys.readouterr().err
    assert "--metric-for-best is the old name of --keep-best" in err
    assert "--early-stopping-patience is the old name of --patience" in err and len(err.splitlines()) == 2


def test_apply_changes_needs_resume(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli(["finetune", "classify", "--model", "m", "--train", "t", "-o", str(tmp_path / "o"), "--apply-changes"])
    assert "--apply-changes only applies with --resume" in capsys.readouterr().err


def test_finetune_evaluates_every_n_steps_keeps_best_and_stops(tmp_path, capsys):
    """--eval-every, --keep-best and --patience of finetune: evaluations every 2 steps, the run stopped when the
    loss did not improve (a learning rate of 1e-9 changes nothing: the second evaluation ties the first)."""
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "".join(f"{'good fine nice' if i % 2 else 'bad awful'} {i}\t{i % 2}\n"
                                               for i in range(32)), encoding="utf-8")
    out = tmp_path / "run"
    assert cli(["finetune", "classify", "--model", str(model_dir()), "--train", str(train), "--validation",
                str(train), "-o", str(out), "--epochs", "3", "--batch-size", "8", "--max-seq-length", "16",
                "--learning-rate", "1e-9", "--eval-every", "2", "--keep-best", "accuracy", "--patience", "1",
                "--threads", "1"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [2, 4]
    info = json.loads((out / "run.json").read_text())["training"]
    assert (info["eval_every"], info["keep_best"], info["patience"], info["max_steps"]) == (2, "accuracy", 1, 12)
    assert json.loads((out / "results.json").read_text())["validation"]["accuracy"] == evals[0]["accuracy"]
