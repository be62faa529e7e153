"""The ``bertkit`` command in subprocesses: --seed makes a run bit-identical, a run SIGKILLed after a
checkpoint and resumed ends bit-identical to an uninterrupted one, --text --resume rebuilds nothing, two runs
into one directory cannot both proceed, and errors are one line with the documented exit status."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertkit.resources import austen_novels
from conftest import HANG_GUARD_S, kill_when, run_guarded

TINY = dict(vocab_size=30522, num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    book = root / "book.txt"
    book.write_text(austen_novels()["persuasion"][:120_000], encoding="utf-8")
    config = root / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    return root, book, config


def bertkit(*args, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """``python -m bertkit.cli ARGS``; its ``-o`` directory is the hang guard's heartbeat (a run that writes
    metrics and checkpoints is progressing, however slowly)."""
    env = kwargs.pop("env", None) or {k: v for k, v in os.environ.items() if k != "BERTKIT_DEBUG"}
    args = [str(a) for a in args]
    out = args[args.index("-o") + 1] if "-o" in args[:-1] else None
    result = run_guarded([sys.executable, "-m", "bertkit.cli", *args], capture_output=True, text=True,
                         env=env, heartbeat=out, **kwargs)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def pretrain_args(book: Path, config: Path, out: Path, *extra) -> list:
    return ["pretrain", "--text", book, "--model", config, "-o", out, "--vocab-size", 500, "--max-seq-length", 32,
            "--batch-size", 8, "--log-every", 5, *extra]


def weights(out: Path) -> bytes:
    return (out / "model" / "model.safetensors").read_bytes()


def test_seed_makes_a_cli_run_bit_identical(inputs):
    root, book, config = inputs
    a, b, c = root / "seed-a", root / "seed-b", root / "seed-c"
    for out, seed in ((a, 1), (b, 1), (c, 2)):
        bertkit(*pretrain_args(book, config, out, "--max-steps", 10, "--seed", seed))
    assert weights(a) == weights(b) != weights(c)
    assert (a / "model" / "vocab.txt").read_bytes() == (b / "model" / "vocab.txt").read_bytes()
    losses = [[json.loads(line).get("loss") for line in (out / "metrics.jsonl").read_text().splitlines()]
              for out in (a, b)]
    assert losses[0] == losses[1]


@pytest.mark.parametrize("preset", [False, True], ids=["odd-config", "tiny-fp32-dropout"])
def test_sigkill_after_a_checkpoint_then_resume_is_bit_identical(inputs, preset):
    """Also with the ``tiny`` preset (dropout 0.1) in fp32 on the fast path: its first float32 product used to
    measure the GEMM backend from the global random state, in the resumed process after the state was restored,
    so every later dropout mask moved (42 of 46 tensors differed)."""
    root, book, config = inputs
    if preset:
        config = "tiny"
    steps = ["--max-steps", 150, "--save-every", 5, "--seed", 3, *(["--precision", "fp32"] if preset else [])]
    whole, killed = root / f"whole-{preset}", root / f"killed-{preset}"
    bertkit(*pretrain_args(book, config, whole, *steps))

    first = killed / "checkpoints" / "step-00000005"
    kill_when([sys.executable, "-m", "bertkit.cli", *map(str, pretrain_args(book, config, killed, *steps))], first)
    assert first.exists() and not (killed / "model").exists(), "the run ended before it could be killed"
    stamps = {p: p.stat().st_mtime_ns for p in (killed / "data").rglob("*") if p.is_file()}

    resumed = bertkit(*pretrain_args(book, config, killed, *steps, "--resume"))
    assert "resumed from" in resumed.stderr
    assert weights(killed) == weights(whole)
    assert {p: p.stat().st_mtime_ns for p in (killed / "data").rglob("*") if p.is_file()} == stamps
    # the resumed run's metrics continue the interrupted ones: each logged step once, in order
    steps_logged = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()
                    if json.loads(line)["split"] == "train"]
    assert steps_logged == list(range(5, 151, 5))


def test_a_resumed_run_keeps_the_gemm_backend_its_run_used(inputs):
    """The float32 GEMM backends round differently, and a run may be resumed on a machine whose hardware picks
    the other one. The checkpoint records the run's backend and the resumed process uses it: here the run is
    forced onto the backend this machine would not pick, and the resumed process (left to its hardware's
    choice) still ends bit-identical."""
    from bertkit.modeling import fast

    root, book, _ = inputs
    other = {"onednn": "plain", "plain": "onednn"}[fast.hardware_gemm()[0]]
    if other == "onednn" and not fast.onednn_available():
        pytest.skip("this torch has no oneDNN inner product")
    forced = {**{k: v for k, v in os.environ.items() if k != "BERTKIT_DEBUG"}, "BERTKIT_GEMM": other}
    steps = ["--max-steps", 12, "--save-every", 6, "--seed", 4, "--precision", "fp32"]
    whole, resumed = root / "gemm-whole", root / "gemm-resumed"
    for out in (whole, resumed):
        bertkit(*pretrain_args(book, "tiny", out, *steps), env=forced)
    expected = weights(whole)
    # take the second half back: resume from step 6 in a process that measures for itself
    import shutil

    shutil.rmtree(resumed / "model")
    shutil.rmtree(resumed / "checkpoints" / "step-00000012")
    bertkit(*pretrain_args(book, "tiny", resumed, *steps, "--resume"))
    assert weights(resumed) == expected


def test_resume_takes_the_runs_own_settings_and_refuses_changed_ones(inputs):
    root, book, config = inputs
    out = root / "settings"
    bertkit(*pretrain_args(book, config, out, "--max-steps", 5, "--learning-rate", 3e-3))
    changed = bertkit(*pretrain_args(book, config, out, "--max-steps", 5, "--learning-rate", 1e-3, "--resume"),
                      check=False)
    assert changed.returncode == 1
    assert changed.stderr.strip().splitlines() == [
        f"bertkit: error: {out / 'checkpoints' / 'step-00000005'} was trained with other hyperparameters: "
        "learning_rate: 0.003 -> 0.001. Resume with the run's values, or pass apply_changes=True "
        "(CLI: --apply-changes) to continue with the new ones."]
    # no flags: the run's own values (3e-3, 5 steps) are used, so it resumes and has nothing left to do
    bertkit(*pretrain_args(book, config, out, "--resume"))
    bertkit(*pretrain_args(book, config, out, "--max-steps", 8, "--resume", "--apply-changes"))
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 8


def test_two_runs_into_one_directory(inputs):
    root, book, config = inputs
    out = root / "shared"
    first = subprocess.Popen([sys.executable, "-m", "bertkit.cli", *map(str, pretrain_args(
        book, config, out, "--max-steps", 2000))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not (out / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = bertkit(*pretrain_args(book, config, out, "--max-steps", 5, "--resume"), check=False)
        assert second.returncode == 1
        assert f"bertkit: error: {out} is in use by another run (pid {first.pid} on " in second.stderr
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()
        first.wait()


def test_errors_are_one_line_with_exit_status(tmp_path):
    missing = bertkit("pretrain", "--text", tmp_path / "nope.txt", "-o", tmp_path / "o", check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1].startswith("bertkit: error: no such file or directory:")
    assert "Traceback" not in missing.stderr

    usage = bertkit("pretrain", "--model", "tiny", "-o", tmp_path / "o", check=False)
    assert usage.returncode == 2
    assert usage.stderr.splitlines() == ["bertkit: error: one of the arguments --data --text is required "
                                         "(see bertkit pretrain --help)"]
    unknown = bertkit("no-such-command", check=False)
    assert unknown.returncode == 2 and unknown.stderr.startswith("bertkit: error: argument COMMAND: invalid choice")

    debug = bertkit("--debug", "pretrain", "--text", tmp_path / "nope.txt", "-o", tmp_path / "o2", check=False)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    env_debug = bertkit("pretrain", "--text", tmp_path / "nope.txt", "-o", tmp_path / "o3", check=False,
                        env={**os.environ, "BERTKIT_DEBUG": "1"})
    assert "Traceback (most recent call last)" in env_debug.stderr

    latin = tmp_path / "latin.txt"
    latin.write_bytes("Caf\xe9 au lait. Tr\xe8s bien.\n".encode("latin-1") * 50)
    bad = bertkit("pretrain", "--text", latin, "-o", tmp_path / "o4", check=False)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        f"bertkit: error: {latin} is not valid utf-8 text (at byte 3: invalid continuation byte); pass its "
        "encoding, e.g. --encoding latin-1 or --encoding cp1252 (Python: encoding=...): it looks like text in a "
        "single-byte legacy encoding (bytes above 0x7F that are not UTF-8)")


def test_make_demo_installs_the_plot_and_serve_extras():
    """metrics.png needs matplotlib; the demo ends by suggesting `bertkit serve` on its model."""
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    demo_install = makefile.split("$(VENV)/.demo-installed:")[1].split("\n\n")[0]
    assert "'.[plot,serve]'" in demo_install


def test_pretraining_learns_past_the_unigram_model_on_a_book(tmp_path):
    """The tiny recipe cut to 800 steps (under a minute on 2 quiet cores, a few on a busy or a one-core machine)
    leaves the unigram plateau on a held-out part of a ~1 MB book: its mean cross-entropy at the predicted
    positions is at least 0.2 nats below the smoothed unigram model's (seeds 1/2/3: -0.40/-0.57/-0.48; at 400
    steps -0.01 to -0.05, still on the plateau). Accuracy at [MASK] is not asserted here: at 800 steps it
    is 0.96-1.17x the unigram's on ~500 positions, noise; the full recipe's 1.5x is the slow test below."""
    book = tmp_path / "emma.txt"
    book.write_text(austen_novels()["emma"], encoding="utf-8")
    bertkit("pretrain", "--text", book, "--model", "tiny", "--max-steps", "800", "--seed", "1", "-o", tmp_path / "run")
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert evaluation["selected_positions"] >= 500, evaluation
    assert evaluation["mlm_loss_selected"] <= evaluation["unigram_loss_selected"] - 0.2, evaluation


@pytest.mark.slow
def test_the_default_recipe_learns_on_a_book(tmp_path):
    """`bertkit pretrain --text BOOK --model tiny -o DIR` with no other flag beats the unigram baseline at [MASK]
    by 1.5x or more on a ~1 MB book (Emma; 7-11 minutes on 2 quiet cores, 3,500 steps): the recipe's claim.
    In the slow lane (``make test-slow``), not in ``make test``: on a busy 2-core machine it took 30+ minutes."""
    book = tmp_path / "emma.txt"
    book.write_text(austen_novels()["emma"], encoding="utf-8")
    bertkit("pretrain", "--text", book, "--model", "tiny", "-o", tmp_path / "run")  # steps, not seconds
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert evaluation["mlm_accuracy_masked"] >= 1.5 * evaluation["unigram_accuracy_masked"], evaluation


def test_pretrain_on_data_without_eval_data_says_no_held_out_set_is_evaluated(tmp_path, monkeypatch, capsys):
    """It reported no held-out number and said nothing about it."""
    import bertkit.tasks.pretraining as pretraining
    from bertkit.cli import main

    def stop(data, output, eval_data_dir=None, **kwargs):
        raise ValueError("stopped before training")

    monkeypatch.setattr(pretraining, "pretrain", stop)
    for name in ("data", "held"):
        (tmp_path / name).mkdir()
    assert main(["pretrain", "--data", str(tmp_path / "data"), "-o", str(tmp_path / "out")]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("bertkit pretrain: no held-out set is evaluated (no --eval-data)")
    assert "--eval-data DIR (e.g. written by `bertkit data create ... --holdout 0.01`)" in first
    assert main(["pretrain", "--data", str(tmp_path / "data"), "--eval-data", str(tmp_path / "held"), "-o",
                 str(tmp_path / "out")]) == 1
    assert "held-out" not in capsys.readouterr().err
