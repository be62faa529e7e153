import json
import subprocess
import sys

import pytest

from bertkit.cli import main


def test_help_is_instant_and_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "info" in out
    # --help must not import torch (the CLI imports subcommands lazily)
    code = "import sys; from bertkit.cli import main; main([]); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_info_on_a_size_and_a_directory(capsys, tmp_path, tiny_config):
    from bertkit import BERT

    assert main(["info", "base"]) == 0
    assert "109.5M" in capsys.readouterr().out
    BERT(tiny_config).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    assert "H=36" in capsys.readouterr().out


def test_info_without_an_argument_describes_this_machine_and_what_auto_picks(capsys, monkeypatch):
    import torch

    from bertkit import devices
    from bertkit.inference.precision import TASK_ROW
    from bertkit.training.config import describe_precision, resolve_device, resolve_precision

    monkeypatch.setenv("BERTKIT_DTYPE", "int8")  # what --dtype auto follows first: the lines say so
    monkeypatch.setattr(devices, "_cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni", "sse4_2"})
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"torch {torch.__version__}" in out and f"torch uses {torch.get_num_threads()} threads" in out
    assert "features: avx2, avx512f, avx512_vnni;" in out  # the flags that matter, not every flag
    device = resolve_device("auto")
    assert f"--device auto -> {device.type} (" in out
    assert f"training --{describe_precision('auto', resolve_precision('auto', device), device)}\n" in out
    for row in set(TASK_ROW.values()):
        assert f"  {row}: int8 (BERTKIT_DTYPE=int8; {row} quality measured against fp32: " in out
    assert ("GPU cuda:0: " in out) == torch.cuda.is_available()


def test_demo_pretrains_and_reports_against_baselines(capsys, tmp_path):
    from bertkit.cli import demo

    evaluation = demo.run(str(tmp_path / "demo"), budget_s=60, max_steps=3, precision="fp32")
    out = capsys.readouterr().out
    for line in ("s/step at batch 32; running 3 steps of 32 x 64 tokens (--max-steps)",
                 "MLM accuracy at [MASK] positions", "MLM accuracy at all selected positions",
                 "fill-mask:", "model + tokenizer:", "wall time"):
        assert line in out
    assert "NSP accuracy" not in out and "nsp_accuracy" not in evaluation  # the tiny recipe trains MLM alone
    assert 0 < evaluation["masked_positions"] < evaluation["selected_positions"]
    assert evaluation["demo"]["steps"] == 3 and evaluation["demo"]["precision"] == "fp32"
    assert (tmp_path / "demo" / "model" / "model.safetensors").is_file()
    # a budget nothing fits in: planned (not cut short), said so, and a second run never overwrites the first
    evaluation = demo.run(str(tmp_path / "demo"), budget_s=1)
    out = capsys.readouterr().out
    assert "the 1 s budget is too short to learn past the unigram baseline" in out
    assert "exceeded the 1 s budget" in out and "all planned steps were run" in out
    assert evaluation["demo"]["kind"] == "too short" and not evaluation["demo"]["within_budget"]
    saved = json.loads((tmp_path / "demo-2" / "evaluation.json").read_text())
    assert saved["demo"] == evaluation["demo"]


def test_demo_plans_cheaper_runs_for_smaller_budgets():
    from bertkit.cli.demo import describe, plan_training

    speed = {32: 0.1, 16: 0.04}  # seconds per step, as measured on some machine
    fewest = {32: 600, 16: 1000}  # steps that learn past the unigram baseline, per batch size
    assert plan_training(400, speed, min_steps=fewest) == demo_plan(3500, 32, 0.1, "recipe")  # 350 s of steps fit
    assert plan_training(100, speed, min_steps=fewest) == demo_plan(1000, 32, 0.1, "fewer steps")
    assert plan_training(50, speed, min_steps=fewest) == demo_plan(1250, 16, 0.04, "smaller batch")
    assert plan_training(5, speed, min_steps=fewest) == demo_plan(125, 16, 0.04, "too short")
    assert plan_training(100, speed) == demo_plan(1000, 32, 0.1, "too short")  # the defaults: the recipe or nothing
    asked = []
    plan_training(1000, lambda batch: asked.append(batch) or 0.1, min_steps=fewest)
    assert asked == [32]  # a plan that fits measures no other batch size
    line = describe(plan_training(100, speed, min_steps=fewest), 600, 3500, 32, 64)
    assert line == ("machine: 0.100 s/step at batch 32; the recipe's 3,500 x 32 would take about 350 s, so running "
                    "1,000 steps of 32 x 64 tokens (learning-rate schedule over these steps) to fit the 600 s budget")


def demo_plan(steps, batch_size, seconds_per_step, kind):
    from bertkit.cli.demo import Plan

    return Plan(steps, batch_size, seconds_per_step, kind)


def test_finetune_task_flags_labels_and_encoding():
    import argparse

    from bertkit.cli.finetune import add_task_flags, task_options

    for task in ("classify", "tag"):
        parser = argparse.ArgumentParser()
        add_task_flags(parser, task)
        args = parser.parse_args(["--labels", "O, B-PER,I-PER", "--encoding", "latin-1"])
        assert task_options(args, task) == {"labels": ["O", "B-PER", "I-PER"], "encoding": "latin-1"}
        with pytest.raises(SystemExit):
            parser.parse_args(["--labels", "O,,B-PER"])  # an empty name: argparse's usage error


def test_os_errors_read_as_words_not_errno_numbers():
    import errno

    from bertkit.cli import one_line

    assert one_line(OSError(errno.ENOSPC, "could not write /x/v.npy: no space left")) == \
        "could not write /x/v.npy: no space left"
    assert one_line(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y")) == \
        "/x/y: No such file or directory"
    assert one_line(OSError("a plain\nmessage")) == "a plain message"


def test_the_demo_picks_the_faster_thread_count():
    """A busy machine can make two threads slower than one: the demo measures both and keeps the faster."""
    import torch

    from bertkit.cli.demo import fastest_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        busy = {2: 1.2, 1: 0.42}  # seconds per step, as seen on a loaded 2-core machine
        assert fastest_threads(lambda: busy[torch.get_num_threads()]) == (1, 0.42, busy)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        idle = {2: 0.05, 1: 0.09}
        assert fastest_threads(lambda: idle[torch.get_num_threads()])[:2] == (2, 0.05)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_no_help_shows_rest_markup(capsys):
    """``--help`` of every subcommand (the descriptions are module docstrings) shows the names Sphinx roles point
    at, never the markup (``:func:`...```)."""
    import re

    from bertkit.cli.reference import commands

    role = re.compile(r":[a-z]+:`")
    for command in commands():
        assert not role.search(command.parser.format_help()), command.name
    with pytest.raises(SystemExit):
        main(["finetune", "embed", "--help"])
    out = capsys.readouterr().out
    assert "See bertkit.sentence.training.finetune_embeddings." in " ".join(out.split())
