"""``--report-to tensorboard|mlflow|trackio``: each tracker read back with its own reader holds metrics.jsonl.

Tiny odd-sized models (hidden 36, 3 heads): a pretraining run from a few hundred lines of Persuasion, a
classify fine-tune, a bi-encoder and a reranker run. Checked: TensorBoard's ``EventAccumulator`` reads the scalars of
metrics.jsonl (same steps, values to float32) and the hyperparameters in the run's own directory; MLflow's
client reads, from the local file store, the same metric history, the parameters logged once and the final
metrics; a run that crashed after a checkpoint (its later points already on disk) and was resumed is one
continuous TensorBoard curve (no step twice, one event directory) and one MLflow run holding the whole history;
trackio's store, read with its own command line (``trackio get metric``), holds the history of a resumed run in
one run, and its config the settings; a missing extra and an unknown tracker are one-line errors; ``none`` writes
nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main as cli
from bertkit.cli.training_flags import CHOICES as FLAG_CHOICES
from bertkit.resources import austen_novels
from bertkit.tasks.pretraining import pretrain_from_text
from bertkit.training import TrainingConfig
from bertkit.training.reporting import CHOICES, TRACKING_FILE, mlflow_name, parse_report_to, record_scalars, require
from conftest import HANG_GUARD_S

TINY = dict(num_hidden_layers=2, hidden_size=36, num_attention_heads=3, intermediate_size=37)
WORDS = [f"w{i}" for i in range(40)]


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("book") / "book.txt"
    lines = [line for line in austen_novels()["persuasion"].splitlines() if line.strip()]
    path.write_text("\n".join(lines[:700]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def local_stores(monkeypatch):
    """MLflow's store in the run directory (as without MLFLOW_TRACKING_URI); none of MLflow's variables set (what
    a run sets for itself is undone after each test)."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE",
                 "MLFLOW_SQLALCHEMYSTORE_POOLCLASS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def pretrain(book: Path, out: Path, steps: int, report_to, callbacks=None, resume: bool = False,
             overwrite: bool = False):
    training = TrainingConfig(max_steps=steps, batch_size=8, learning_rate=1e-3, log_every=1, eval_every=2,
                              save_every=2, progress_bar=False, precision="fp32", device="cpu", threads=1,
                              report_to=report_to)
    return pretrain_from_text([book], out, vocab_size=300, max_seq_length=32, training=training,
                              model_overrides=TINY, callbacks=callbacks, resume=resume, apply_changes=resume,
                              overwrite=overwrite)


def expected(run: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as tag -> [(step, value)], the way the trackers are given it."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for tag, value in record_scalars(record).items():
            series.setdefault(tag, []).append((record["step"], value))
    return series


def tensorboard_scalars(run: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    return scalars, events


def mlflow_run(run: Path, uri: str | None = None):
    """The one MLflow run in the run directory's store (``uri``: another store)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri or f"sqlite:///{run / 'mlflow.db'}")
    experiments = client.search_experiments()
    runs = [r for e in experiments for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0]


def assert_same_series(got: dict, want: dict) -> None:
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        np.testing.assert_array_equal(np.float32([v for _, v in got[tag]]), np.float32([v for _, v in points]),
                                      err_msg=tag)


def test_a_crashed_and_resumed_pretraining_run_is_one_tensorboard_curve_and_one_mlflow_run(book, tmp_path):
    run = tmp_path / "run"

    def crash(trainer):  # after step 5's records reached the trackers' files, past the checkpoint at step 4
        if trainer.state.step == 5:
            trainer.reporting.on_save(trainer)
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        pretrain(book, run, 6, ("tensorboard", "mlflow"), callbacks={"on_step_end": crash})
    crashed, _ = tensorboard_scalars(run)
    assert max(step for step, _ in crashed["train/loss"]) == 5
    result = pretrain(book, run, 8, "tensorboard,mlflow", resume=True)

    want = expected(run)
    assert [s for s, _ in want["train/loss"]] == list(range(1, 9)) and "eval/loss" in want
    assert {"train/lr", "train/tokens_per_s", "train/examples_per_s", "train/grad_norm"} <= set(want)
    scalars, events = tensorboard_scalars(run)
    assert_same_series(scalars, want)  # step 5 once: the crashed attempt's point was purged
    final = {f"final/{k}": v for k, v in result.evaluation.items() if isinstance(v, int | float)}
    for tag, value in final.items():
        assert scalars[tag] == [(8, pytest.approx(value, rel=1e-6))]
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")
    assert all(p.is_file() for p in (run / "tensorboard").iterdir())  # one run: no sub-directories

    client, found = mlflow_run(run)
    assert found.info.run_id == json.loads((run / TRACKING_FILE).read_text())["mlflow"]["run_id"]
    assert found.info.status == "FINISHED"
    for tag, points in want.items():
        history = client.get_metric_history(found.info.run_id, mlflow_name(tag))
        latest: dict[int, float] = {}
        for metric in sorted(history, key=lambda m: m.timestamp):  # step 5: the lost attempt's, then the rerun's
            latest[metric.step] = metric.value
        assert sorted(latest) == [s for s, _ in points], tag
        np.testing.assert_array_equal(np.float32([latest[s] for s, _ in points]), np.float32([v for _, v in points]))
        assert len(history) == len(points) + (tag.startswith("train/") and 5 in latest)
    params = found.data.params
    assert params["training.batch_size"] == "8" and params["training.log_every"] == "1"
    assert params["model.hidden_size"] == "36" and params["task.name"] == "pretraining"
    for tag, value in final.items():
        assert found.data.metrics[mlflow_name(tag)] == pytest.approx(value, rel=1e-6)


def test_mlflows_own_client_opens_the_run_directorys_store_with_no_variable_set(book, tmp_path):
    """The store is a SQLite database in the run directory: a user's ``MlflowClient`` (the docs' URI, from the
    directory that holds ``runs/``) opens it without ``MLFLOW_ALLOW_FILE_STORE`` or any other MLflow variable."""
    run = tmp_path / "runs" / "emma"
    pretrain(book, run, 2, "mlflow")
    assert (run / "mlflow.db").is_file() and not (run / "mlruns").exists() and not (tmp_path / "mlruns").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    read = ("from mlflow.tracking import MlflowClient\n"
            "client = MlflowClient(tracking_uri='sqlite:///runs/emma/mlflow.db')\n"
            "run = client.search_runs([client.get_experiment_by_name('emma').experiment_id])[0]\n"
            "print(run.info.run_name, run.info.status, run.data.params['training.batch_size'])")
    done = subprocess.run([sys.executable, "-c", read], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["emma", "FINISHED", "8"], done.stderr[-2000:]


@pytest.mark.slow  # MLflow's UI server takes minutes to start on a busy 2-core machine
def test_the_docs_mlflow_ui_line_serves_the_run_as_printed(book, tmp_path):
    """The page's ``mlflow ui`` line, run as printed (plus a free port) from the directory that holds ``runs/``,
    serves the run over MLflow's REST API with no MLflow variable set."""
    import httpx

    run = tmp_path / "runs" / "emma"
    pretrain(book, run, 2, "mlflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}

    from serve_helpers import free_port

    page = (Path(__file__).parents[1] / "docs" / "how-to" / "track-experiments.md").read_text(encoding="utf-8")
    (line,) = [ln.split("#")[0].split() for ln in page.splitlines() if ln.startswith("mlflow ui ")]
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / line[0]), *line[1:], "--host", "127.0.0.1",
                               "--port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    api = f"http://127.0.0.1:{port}/api/2.0/mlflow"
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # a guard: a loaded machine starts slowly
        while True:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()[-2000:]
            try:
                experiment = httpx.get(f"{api}/experiments/get-by-name", params={"experiment_name": "emma"},
                                       timeout=10)
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert experiment.status_code == 200, experiment.text
        found = httpx.post(f"{api}/runs/search", json={"experiment_ids": [experiment.json()["experiment"]
                                                                          ["experiment_id"]]}, timeout=30).json()
        (served,) = found["runs"]
        assert served["info"]["run_name"] == "emma" and served["info"]["status"] == "FINISHED"
        assert {m["key"] for m in served["data"]["metrics"]} >= {"train/loss", "final/mlm_accuracy_masked"}
    finally:  # the UI's server runs worker processes of its own: its whole process group goes
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def test_a_run_begun_in_the_old_mlruns_file_store_resumes_there(book, tmp_path, monkeypatch):
    """A run an older bertkit logged to ``<run>/mlruns`` (MLflow's file store) goes on in that store."""
    run = tmp_path / "run"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (run / "mlruns").as_uri())  # where an older bertkit logged
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    pretrain(book, run, 3, "mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    pretrain(book, run, 5, "mlflow", resume=True)
    assert not (run / "mlflow.db").exists()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what reading a file store takes
    client, found = mlflow_run(run, (run / "mlruns").as_uri())
    assert found.info.run_id == json.loads((run / TRACKING_FILE).read_text())["mlflow"]["run_id"]
    losses = client.get_metric_history(found.info.run_id, "train/loss")
    assert sorted(m.step for m in losses) == [1, 2, 3, 4, 5] and found.info.status == "FINISHED"


@pytest.mark.parametrize("uri", ["bogus://nowhere", "http://127.0.0.1:{port}", "{tmp}/mlruns"])
def test_an_mlflow_tracking_uri_that_cannot_be_used_stops_the_command_before_anything_runs(uri, book, tmp_path,
                                                                                          monkeypatch, capsys):
    from serve_helpers import free_port

    uri = uri.format(port=free_port(), tmp=tmp_path)  # a closed port; a file store, which MLflow 3 refuses
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    run = tmp_path / "run"
    assert cli(["pretrain", "--text", str(book), "--model", "tiny", "-o", str(run), "--max-steps", "2",
                "--report-to", "mlflow"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"bertkit: error: MLFLOW_TRACKING_URI={uri!r} (--report-to mlflow) cannot be used: "), err
    assert "unset it to log into the run directory's mlflow.db" in err and len(err.splitlines()) == 1
    assert ("MLFLOW_ALLOW_FILE_STORE=true" in err) == uri.endswith("mlruns")
    assert not run.exists()  # before anything ran
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI"):
        require(["mlflow"])  # what the Trainer checks when it is built


def test_a_tracker_added_on_resume_gets_the_whole_history_and_overwrite_replaces_the_trackers_runs(book, tmp_path):
    run = tmp_path / "run"
    pretrain(book, run, 3, "tensorboard")
    pretrain(book, run, 5, ["tensorboard", "mlflow"], resume=True)
    want = expected(run)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4, 5]
    client, found = mlflow_run(run)
    history = {tag: [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, mlflow_name(tag))]
               for tag in want}
    assert_same_series(history, want)  # steps 1-3 replayed from metrics.jsonl, then 4-5 as they came
    assert_same_series(tensorboard_scalars(run)[0], want)

    # --overwrite builds the new run beside the old one and moves it into place at its first checkpoint (step
    # 2): the trackers follow it there, and the old run's tracker files go with the old run
    pretrain(book, run, 4, "mlflow,tensorboard", overwrite=True)
    want = expected(run)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4]
    assert_same_series(tensorboard_scalars(run)[0], want)
    client, found = mlflow_run(run)
    assert found.info.status == "FINISHED" and found.info.run_name == "run"
    assert found.data.tags["bertkit.run_dir"] == str(run.absolute())
    history = {tag: [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, mlflow_name(tag))]
               for tag in want}
    assert_same_series(history, want)
    assert not list(tmp_path.glob(".run.overwrite*"))


def test_a_reopened_tensorboard_run_sorts_after_its_earlier_event_file_begun_the_same_second(tmp_path):
    """TensorBoard reads event files in name order; a name begun in the same second sorts by pid and counter as
    strings. An earlier file whose name sorts late (here: host and pid fields past any name) must still be read
    first: the reporter begins its file only in a later second."""
    from torch.utils.tensorboard import SummaryWriter

    from bertkit.training.reporting import TENSORBOARD_DIR, TensorBoardReporter

    log_dir = tmp_path / TENSORBOARD_DIR
    earlier = SummaryWriter(log_dir=str(log_dir))
    for step in (1, 2):
        earlier.add_scalar("train/loss", float(step), step)
    earlier.close()
    (old,) = log_dir.iterdir()
    late = log_dir / f"events.out.tfevents.{int(time.time()):010d}.~.~.9"
    old.rename(late)
    reporter = TensorBoardReporter()
    reporter.open(tmp_path, {"log_dir": TENSORBOARD_DIR}, None, {})
    for step in (3, 4):
        reporter.log_scalars({"train/loss": float(step)}, step)
    reporter.close()
    assert sorted(p.name for p in log_dir.iterdir())[0] == late.name
    scalars, _ = tensorboard_scalars(tmp_path)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4]


def test_finetune_classify_through_the_cli_reports_its_epochs_and_results(tmp_path, capsys):
    base = write_base(tmp_path / "base")
    rng = np.random.default_rng(0)
    for split, n in (("train", 48), ("validation", 16)):
        rows = [{"text": " ".join(rng.choice(WORDS[:20] if y else WORDS[20:], 5)), "label": ["neg", "pos"][y]}
                for y in rng.integers(0, 2, n)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    assert cli(["finetune", "classify", "--model", str(base), "--train", str(tmp_path / "train.jsonl"),
                "--validation", str(tmp_path / "validation.jsonl"), "-o", str(run), "--epochs", "2",
                "--batch-size", "8", "--max-seq-length", "16", "--learning-rate", "1e-3", "--threads", "1",
                "--device", "cpu", "--precision", "fp32", "--report-to", "mlflow", "tensorboard"]) == 0
    capsys.readouterr()
    want = expected(run)
    assert [s for s, _ in want["eval/accuracy"]] == [6, 12]  # each epoch's validation (written by the task)
    scalars, _ = tensorboard_scalars(run)
    assert_same_series(scalars, want)
    results = json.loads((run / "results.json").read_text())
    assert scalars["final/validation/accuracy"] == [(12, pytest.approx(results["validation"]["accuracy"]))]
    _, found = mlflow_run(run)
    assert found.data.params["task.name"] == "classify" and found.data.params["training.report_to"] == \
        json.dumps(["mlflow", "tensorboard"])
    assert found.data.metrics["final/validation/accuracy"] == pytest.approx(results["validation"]["accuracy"])


@pytest.mark.parametrize("command", ["embed", "rerank"])
def test_the_embedding_and_reranker_trainers_report_through_the_cli(command, tmp_path, capsys):
    base = write_base(tmp_path / "base")
    rng = np.random.default_rng(1)
    rows = tmp_path / "rows.jsonl"
    with open(rows, "w") as f:
        for _ in range(24):
            query = " ".join(rng.choice(WORDS, 4))
            f.write(json.dumps({"anchor": query, "positive": f"{query} {rng.choice(WORDS)}"} if command == "embed"
                               else {"query": query, "positive": query, "negative": " ".join(rng.choice(WORDS, 5))})
                    + "\n")
    run = tmp_path / "run"
    assert cli(["finetune", command, "--model", str(base), "--train", str(rows), "-o", str(run), "--epochs", "2",
                "--batch-size", "8", "--learning-rate", "1e-3", "--precision", "fp32", "--device", "cpu",
                "--threads", "1", "--report-to", "tensorboard,mlflow"]) == 0
    capsys.readouterr()
    want = expected(run)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4, 5, 6]
    scalars, _ = tensorboard_scalars(run)
    assert_same_series(scalars, want)
    results = json.loads((run / "results.json").read_text())
    assert scalars["final/final_train_loss"] == [(6, pytest.approx(results["final_train_loss"], rel=1e-6))]
    client, found = mlflow_run(run)
    history = {tag: [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, mlflow_name(tag))]
               for tag in want}
    assert_same_series(history, want)
    section = {"embed": "embedding", "rerank": "reranker"}[command]
    assert found.data.params[f"{section}.batch_size"] == "8" and found.data.params["training.max_steps"] == "6"


def test_trackio_continues_its_run_on_resume(book, tmp_path):
    """In subprocesses: trackio reads TRACKIO_DIR when imported, and must never write to the user's home."""
    pytest.importorskip("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HOME": str(tmp_path / "hf")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1] / "src"), env.get("PYTHONPATH", "")])
    run = tmp_path / "runs" / "first"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    flags = ["--text", str(book), "--model", str(config), "-o", str(run), "--vocab-size", "300", "--max-seq-length",
             "32", "--batch-size", "8", "--log-every", "1", "--threads", "1", "--device", "cpu", "--precision",
             "fp32"]
    # `pretrain --resume` takes the run's own settings: its trackers too
    for extra in (["--max-steps", "3", "--report-to", "trackio"], ["--max-steps", "5", "--resume", "--apply-changes"]):
        done = subprocess.run([sys.executable, "-m", "bertkit.cli", "pretrain", *flags, *extra], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "* Created new run" not in done.stdout and "* Resumed" not in done.stdout  # trackio talks on stderr
    def trackio(*args) -> dict:  # trackio's own reader: its command line
        done = subprocess.run([str(Path(sys.executable).parent / "trackio"), *args, "--json"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    assert trackio("list", "runs", "--project", "runs")["runs"] == ["first"]
    assert json.loads((run / TRACKING_FILE).read_text())["trackio"] == {"project": "runs", "name": "first"}
    info = trackio("get", "run", "--project", "runs", "--run", "first")
    assert info["config"]["training.batch_size"] == 8 and info["config"]["task.name"] == "pretraining"
    assert "final/mlm_accuracy_masked" in info["metrics"]
    losses = trackio("get", "metric", "--project", "runs", "--run", "first", "--metric", "train/loss")["values"]
    want = expected(run)["train/loss"]
    assert [v["step"] for v in losses] == [s for s, _ in want] == [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(np.float32([v["value"] for v in losses]), np.float32([v for _, v in want]))
    assert any((tmp_path / "trackio").glob("runs*"))  # the store TRACKIO_DIR names


def test_a_missing_extra_and_an_unknown_tracker_are_one_line_errors(book, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if mlflow-skinny were not installed
    args = ["pretrain", "--text", str(book), "--model", "tiny", "-o", str(tmp_path / "run")]
    assert cli([*args, "--report-to", "tensorboard", "mlflow"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error: --report-to mlflow needs the mlflow extra: pip install 'bertkit[mlflow]'")
    assert len(err.splitlines()) == 1 and not (tmp_path / "run").exists()  # before anything ran
    with pytest.raises(ImportError, match=r"pip install 'bertkit\[mlflow\]'"):
        require(["tensorboard", "mlflow"])  # what the Trainer checks when it is built
    monkeypatch.delitem(sys.modules, "mlflow")
    monkeypatch.setitem(sys.modules, "alembic", None)  # mlflow-skinny alone: no database support for mlflow.db
    with pytest.raises(ImportError, match=r"run directory's mlflow.db.*alembic is missing.*'bertkit\[mlflow\]'"):
        require(["mlflow"])

    with pytest.raises(SystemExit) as usage:
        cli([*args, "--report-to", "wandb"])
    assert usage.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--report-to: unknown tracker 'wandb'; choose from tensorboard, mlflow, trackio, none" in err
    assert len(err.splitlines()) == 1
    for bad, message in (("wandb", "unknown tracker 'wandb'"), (["none", "mlflow"], "'none' means no tracker"),
                         ([3], "takes tracker names")):
        with pytest.raises(ValueError, match=rf"TrainingConfig\.report_to.*{message}"):
            TrainingConfig(max_steps=1, report_to=bad)
    assert parse_report_to(["tensorboard,mlflow", "tensorboard"]) == ("tensorboard", "mlflow")
    assert parse_report_to("none") == parse_report_to(None) == ()
    assert FLAG_CHOICES["report_to"] is CHOICES  # the training flags' choices are the reporting module's
    assert mlflow_name("eval/ndcg@10") == "eval/ndcg_at_10" and mlflow_name("eval/a+b") == "eval/a_b"


def test_the_trackers_are_imported_only_when_a_run_reports_to_them():
    code = ("import sys\nfrom bertkit.cli import main\nfrom bertkit.training import Trainer, TrainingConfig\n"
            "TrainingConfig(max_steps=1, report_to='none')\n"
            "print([m for m in ('tensorboard', 'torch.utils.tensorboard', 'mlflow', 'trackio') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert done.stdout.strip() == "[]", done.stderr[-2000:]


def test_none_writes_nothing_extra(book, tmp_path):
    pretrain(book, tmp_path / "run", 2, "none")
    written = {p.name for p in (tmp_path / "run").iterdir()}
    assert not written & {"tensorboard", "mlruns", "mlflow.db", TRACKING_FILE}


def write_base(directory: Path) -> Path:
    """A tiny HF BertModel (hidden 36, 3 heads) with a vocab.txt of :data:`WORDS`."""
    from transformers import BertConfig, BertModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), max_position_embeddings=40, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, **TINY)
    BertModel(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return directory
