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


def test_demo_pretrains_and_reports_against_baselines(capsys, tmp_path):
    from bertkit.cli import demo

    evaluation = demo.run(str(tmp_path / "demo"), budget_s=60, max_steps=3)
    out = capsys.readouterr().out
    for line in ("MLM accuracy at [MASK] positions", "MLM accuracy at all selected positions",
                 "fill-mask:", "model + tokenizer:"):
        assert line in out
    assert "NSP accuracy" not in out and "nsp_accuracy" not in evaluation  # the tiny recipe trains MLM alone
    assert 0 < evaluation["masked_positions"] < evaluation["selected_positions"]
    assert (tmp_path / "demo" / "model" / "model.safetensors").is_file()
    demo.run(str(tmp_path / "demo"), budget_s=60, max_steps=1)  # a second run never overwrites the first
    assert (tmp_path / "demo-2" / "model" / "model.safetensors").is_file()


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
