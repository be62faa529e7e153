"""Experiment tracking: a training run reports to TensorBoard, MLflow or trackio as well as to metrics.jsonl.

``TrainingConfig.report_to`` (CLI: ``--report-to tensorboard mlflow``) names the trackers; the
:class:`~bertkit.training.Trainer` attaches them on rank 0 through its callbacks (:func:`attach`). What each
gets, from one source of numbers:

* scalars: every record the trainer writes to ``metrics.jsonl`` (its ``on_metrics`` event), at that record's
  step, each numeric field but ``step`` named ``train/<field>`` or ``eval/<field>`` by the record's split
  (``train/loss``, ``train/lr``, ``train/tokens_per_s``, ``train/grad_norm``, ``eval/accuracy``, ...);
* hyperparameters, once, when the tracker's run is created (trackio: its config): the :class:`TrainingConfig`
  (``training.*``) and what the run directory's ``run.json`` records (model, task, data settings), flattened
  to dotted names;
* the final model's metrics (what a task writes to ``results.json`` / ``evaluation.json``), handed over by the
  task with :func:`report_final`, as ``final/<path>`` scalars at the last step.

A tracker opens at the run's first record (so a run that fails before logging anything leaves no tracker files)
and keeps the identity of its run in the run directory's ``tracking.json``, so a resumed run continues it:
TensorBoard's event files in ``<run>/tensorboard/`` are reopened with ``purge_step`` just past the resumed
checkpoint (the points an interrupted run logged after it are dropped: one continuous curve); MLflow continues
the same run id; trackio resumes its run by name. A tracker added to a run only on resume first replays the
run's ``metrics.jsonl``, so its history is the whole run's. Events are flushed at every checkpoint.

Each tracker is imported lazily, its extra and settings checked by :func:`require` before training starts.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bertkit.io import atomic_write_text, read_json_object
from bertkit.training.metrics import read_metrics
from bertkit.training.rundir import RUN_FILE, final_name

TRACKING_FILE = "tracking.json"
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DB = "mlflow.db"  # MLflow's store in the run directory: the SQLite database MLflow recommends
MLFLOW_DIR = "mlruns"  # the file store that older runs hold (MLflow 3 keeps it in maintenance mode)
MLFLOW_ARTIFACTS = "mlflow-artifacts"  # the artifact root MLflow records (bertkit logs no artifacts)
#: the MLFLOW_TRACKING_URI check gives a server one try of 10 s (MLflow's default retries for minutes)
MLFLOW_CHECK_ENVIRONMENT = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: the longest hyperparameter value passed on (a data fingerprint of many shards is long); longer ones are cut
MAX_PARAM_CHARS = 500


def parse_report_to(value: str | Iterable[str] | None, name: str = "TrainingConfig.report_to") -> tuple[str, ...]:
    """The trackers named by ``value``: None, ``"none"``, a name, a comma list (``"tensorboard,mlflow"``) or a
    sequence of those; returns them in order without repeats (``()`` for none). ``ValueError`` naming ``name``
    for an unknown tracker, or for ``none`` next to a tracker."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    names = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{name} takes tracker names ({', '.join(CHOICES)}), got {item!r}.")
        names += [part.strip().lower() for part in item.split(",") if part.strip()]
    unknown = [n for n in names if n not in CHOICES]
    if unknown:
        raise ValueError(f"{name}: unknown tracker {unknown[0]!r}; choose from {', '.join(CHOICES)} (several "
                         "allowed, e.g. 'tensorboard mlflow').")
    if "none" in names and len(set(names)) > 1:
        raise ValueError(f"{name}: 'none' means no tracker; do not combine it with {sorted(set(names) - {'none'})}.")
    return tuple(dict.fromkeys(n for n in names if n != "none"))


def require(names: Iterable[str]) -> None:
    """Check each tracker now, before training starts: its package imports (``ImportError`` with the one line
    saying which extra to install) and its settings work (``ValueError`` naming the variable, e.g.
    ``MLFLOW_TRACKING_URI``)."""
    for name in names:
        REPORTERS[name].check()


def attach(trainer: Any) -> Reporting | None:
    """Register ``trainer.config.report_to``'s trackers on ``trainer`` (rank 0 only) and return them; None when
    there are none (or on other ranks). The :class:`~bertkit.training.Trainer` calls this itself."""
    names = trainer.config.report_to
    if not names or not trainer.ctx.is_main:
        return None
    require(names)
    reporting = Reporting([REPORTERS[name]() for name in names])
    trainer.add_callback("on_train_begin", reporting.on_train_begin)
    trainer.add_callback("on_metrics", reporting.on_metrics)
    trainer.add_callback("on_save", reporting.on_save)
    trainer.add_callback("on_train_end", reporting.on_train_end)
    return reporting


def report_final(trainer: Any, metrics: Mapping[str, Any]) -> None:
    """Hand the final model's ``metrics`` (a task's results: nested dicts of numbers; other values are skipped)
    to ``trainer``'s trackers, as ``final/<key>/<key>...`` scalars at the last step. Every task calls this once
    after training, with what it writes to its results file; a no-op without trackers."""
    reporting = getattr(trainer, "reporting", None)
    if reporting is not None:
        reporting.final(trainer, metrics)


# ---------------------------------------------------------------------- what is reported
def record_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """A metrics.jsonl record's scalars: each finite number but ``step``, as ``<split>/<field>``."""
    split = record.get("split", "train")
    return {f"{split}/{key}": float(value) for key, value in record.items()
            if key not in ("split", "step") and _is_number(value) and math.isfinite(value)}


def flatten(values: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}`` (``prefix`` before every name)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, name + sep, sep)
        else:
            flat[name] = value
    return flat


def hyperparameters(trainer: Any) -> dict[str, str | int | float | bool]:
    """The run's settings as flat ``section.field`` names: ``run.json`` (what defines the run) and the
    trainer's config (``training.*``); values that are not numbers or strings become JSON text."""
    run_file = Path(trainer.output_dir) / RUN_FILE
    info: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(run_file.read_text(encoding="utf-8"))
    info = {k: v for k, v in info.items() if isinstance(v, Mapping)} | {"training": trainer.config.to_dict()}
    params = {}
    for name, value in flatten(info, sep=".").items():
        if not (_is_number(value) or isinstance(value, str | bool)):
            value = json.dumps(value)
        params[name] = value[:MAX_PARAM_CHARS] if isinstance(value, str) else value
    return params


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---------------------------------------------------------------------- the trackers of one run
class Reporting:
    """The trackers of one trainer (rank 0): opened at the first record, flushed at each checkpoint, closed when
    training ends; they follow the trainer when its run directory moves (an ``--overwrite`` run's commit)."""

    def __init__(self, reporters: list[Reporter]):
        self.reporters = reporters
        self.run_dir: Path | None = None
        self.start_step = 0
        self.unopened = set(range(len(reporters)))  # not opened since training (re)started

    def on_train_begin(self, trainer: Any) -> None:
        self.start_step = trainer.state.step  # a resumed run's checkpoint step (0: a fresh run)
        self.unopened = set(range(len(self.reporters)))

    def on_metrics(self, trainer: Any) -> None:
        record = trainer.last_record
        self._open(trainer, written=[record])
        for reporter in self.reporters:
            reporter.log_scalars(record_scalars(record), int(record["step"]))

    def on_save(self, trainer: Any) -> None:
        for reporter in self.reporters:
            if reporter.is_open:
                reporter.flush()

    def on_train_end(self, trainer: Any) -> None:
        self.close()

    def final(self, trainer: Any, metrics: Mapping[str, Any]) -> None:
        scalars = {name: float(value) for name, value in flatten(metrics, "final/").items()
                   if _is_number(value) and math.isfinite(value)}
        if not scalars:
            return
        self._open(trainer, written=[])
        for reporter in self.reporters:
            reporter.log_scalars(scalars, trainer.state.step)
        self.close()

    def close(self) -> None:
        for reporter in self.reporters:
            if reporter.is_open:
                reporter.close()

    def _open(self, trainer: Any, written: list[dict[str, Any]]) -> None:
        """Open the trackers that are not; ``written``: the records about to be logged (the end of
        metrics.jsonl), which a tracker new to a resumed run gets after the run's earlier records."""
        run_dir = Path(trainer.output_dir)
        if self.run_dir is not None and run_dir != self.run_dir:  # the run directory was moved into place
            for reporter in self.reporters:
                if reporter.is_open:
                    reporter.moved(run_dir)
        self.run_dir = run_dir
        closed = [i for i, reporter in enumerate(self.reporters) if not reporter.is_open]
        if not closed:
            return
        tracking = _read_tracking(run_dir)
        for i in closed:
            reporter, first = self.reporters[i], i in self.unopened
            self.unopened.discard(i)
            # a fresh start never continues a tracker run (one left by a run that failed before its checkpoint)
            saved = tracking.get(reporter.name) if not (first and self.start_step == 0) else None
            try:
                state = reporter.open(run_dir, saved, self.start_step if first and saved is not None else None,
                                      hyperparameters(trainer))
            except Exception as error:
                if saved is None:
                    raise
                raise ValueError(f"{run_dir / TRACKING_FILE} names the {reporter.name} run {saved}, which "
                                 f"{reporter.name} cannot continue ({error}); was its location changed (see "
                                 f"{reporter.where})? Point it back there, or delete the {reporter.name!r} entry "
                                 "of the file to start a new run (it gets the history from metrics.jsonl).") \
                    from error
            if saved is None:  # a new run on this tracker: the history it missed first
                tracking[reporter.name] = state
                atomic_write_text(run_dir / TRACKING_FILE, json.dumps(tracking, indent=2) + "\n")
                for record in read_metrics(trainer.metrics_path)[:-len(written) or None]:
                    reporter.log_scalars(record_scalars(record), int(record["step"]))


def _read_tracking(run_dir: Path) -> dict[str, Any]:
    path = run_dir / TRACKING_FILE
    if not path.exists():
        return {}
    return read_json_object(path, "the trackers' run identities bertkit writes ({\"mlflow\": {\"run_id\": ...}})")


# ---------------------------------------------------------------------- one tracker each
class Reporter:
    """One tracker. :meth:`open` starts a run on it (``saved`` None) or continues one (``saved``: what an
    earlier :meth:`open` returned, kept in tracking.json), dropping what the tracker holds past step
    ``resumed_at`` (the checkpoint a resumed run continues) where it can, and returns what identifies the run.
    ``params``: the run's hyperparameters, logged once, when the run is created (trackio's config: at each
    open, since trackio keeps the config of the run's latest ``init``)."""

    name = ""
    module = ""  # what must import; the extra of the same name installs it
    where = ""  # what decides where the tracker's runs are (named in errors)

    def __init__(self):
        self.is_open = False

    @classmethod
    def load(cls):
        try:
            return importlib.import_module(cls.module)
        except ImportError:
            raise ImportError(f"--report-to {cls.name} needs the {cls.name} extra: "
                              f"pip install 'bertkit[{cls.name}]'") from None

    @classmethod
    def check(cls) -> None:
        """Raise unless a run can be reported (by default: the package imports); :func:`require` calls it."""
        cls.load()

    def open(self, run_dir: Path, saved: dict[str, Any] | None, resumed_at: int | None,
             params: dict[str, Any] | None) -> dict[str, Any]:
        raise NotImplementedError

    def log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def moved(self, run_dir: Path) -> None:
        """The run directory was moved to ``run_dir`` (with what the tracker wrote inside): by default the
        tracker is closed, to reopen there at the next record."""
        self.close()

    def close(self) -> None:
        self.is_open = False


class TensorBoardReporter(Reporter):
    """Event files in ``<run>/tensorboard/`` (``torch.utils.tensorboard``); hyperparameters in the HPARAMS
    tab of the same run."""

    name, module, where = "tensorboard", "torch.utils.tensorboard", "the run directory"

    def open(self, run_dir, saved, resumed_at, params):
        tensorboard = self.load()
        log_dir = run_dir / TENSORBOARD_DIR
        if saved is None:  # a new run: drop whatever an earlier attempt left there
            purge = 0 if log_dir.is_dir() and any(log_dir.iterdir()) else None
        else:  # continuing: events past the checkpoint (an interrupted run's) are dropped by TensorBoard
            purge = resumed_at + 1 if resumed_at else None
        _wait_to_sort_last(log_dir)
        self.writer = tensorboard.SummaryWriter(log_dir=str(log_dir), purge_step=purge)
        self.is_open = True
        if saved is None:
            from torch.utils.tensorboard.summary import hparams

            shown = {k: v if _is_number(v) or isinstance(v, bool) else str(v) for k, v in params.items()}
            for summary in hparams(shown, {"train/loss": 0.0}):  # into this run, not a new sub-run
                self.writer.file_writer.add_summary(summary)
        return {"log_dir": TENSORBOARD_DIR}

    def log_scalars(self, scalars, step):
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()
        self.is_open = False


_EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)\.")


def _wait_to_sort_last(log_dir: Path) -> None:
    """TensorBoard reads a run's event files in name order, and a name is ``events.out.tfevents.<unix second>.
    <host>.<pid>.<counter>``: two files begun in the same second sort by pid and counter as strings (counter
    10 before 9), which would put a continued run's points before the ones they continue. So a new file is
    begun only once the clock is past the second of the newest one there (a wait under a second, met only by
    a run reopened within a second of its previous file: the move of an --overwrite run, a quick resume)."""
    if not log_dir.is_dir():
        return
    seconds = [int(m.group(1)) for p in log_dir.iterdir() if (m := _EVENT_FILE.match(p.name))]
    if seconds and (wait := max(seconds) + 1 - time.time()) > 0:
        time.sleep(wait)


class MLflowReporter(Reporter):
    """One MLflow run: at ``MLFLOW_TRACKING_URI``, else in a SQLite database ``<run>/mlflow.db`` (the store MLflow
    recommends; a run begun by an older bertkit in the file store ``<run>/mlruns`` continues there); experiment
    ``MLFLOW_EXPERIMENT_NAME``, else the run directory's name. The run id is kept in tracking.json. MLflow
    cannot delete points: after a crash, the steps between the last checkpoint and the crash are logged twice
    (the lost attempt's values and the resumed run's)."""

    name, module, where = "mlflow", "mlflow", "MLFLOW_TRACKING_URI"

    @classmethod
    def check(cls):
        """The database support the run directory's store needs, or the ``MLFLOW_TRACKING_URI`` store answering
        (one quick try): a ``ValueError`` naming the variable otherwise."""
        cls.load()
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            for module in ("sqlalchemy", "alembic"):
                try:
                    importlib.import_module(module)
                except ImportError:
                    raise ImportError(f"--report-to mlflow logs into the run directory's {MLFLOW_DB}, which needs "
                                      f"MLflow's database support ({module} is missing): pip install "
                                      "'bertkit[mlflow]' (or point MLFLOW_TRACKING_URI at a tracking server)") \
                        from None
            return
        from mlflow.tracking import MlflowClient

        try:
            with _environment_defaults(MLFLOW_CHECK_ENVIRONMENT):
                MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        except Exception as error:
            said = " ".join(str(error).split())
            file_store = " (or set MLFLOW_ALLOW_FILE_STORE=true to keep MLflow's file store)" \
                if "MLFLOW_ALLOW_FILE_STORE" in said else ""
            raise ValueError(f"MLFLOW_TRACKING_URI={uri!r} (--report-to mlflow) cannot be used: "
                             f"{said[:400]}{'...' if len(said) > 400 else ''} -- point it at a running tracking "
                             "server (http://HOST:5000) or a database (sqlite:///PATH/mlflow.db), or unset it to "
                             f"log into the run directory's {MLFLOW_DB}{file_store}.") from None

    def open(self, run_dir, saved, resumed_at, params):
        self.load()
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # an older bertkit's run continues in its file store; every new run gets the SQLite database
        self.store = MLFLOW_DIR if saved is not None and (run_dir / MLFLOW_DIR).is_dir() and \
            not (run_dir / MLFLOW_DB).exists() else MLFLOW_DB
        self.client = MlflowClient(tracking_uri=self._uri(run_dir))
        self.pending: list[Any] = []  # metrics handed to MLflow's logging thread, waited for by flush()
        if saved is not None:
            self.run_id = saved["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or final_name(run_dir)
            final_dir = run_dir.parent / final_name(run_dir)  # where the run lives (once an overwrite commits)
            found = self.client.get_experiment_by_name(experiment)
            # in the run's own database, the experiment's artifact root is the run directory's (MLflow's default
            # is ./mlruns under whatever directory the process started in); bertkit logs no artifacts
            artifacts = None if os.environ.get("MLFLOW_TRACKING_URI") else (final_dir / MLFLOW_ARTIFACTS).as_uri()
            experiment_id = found.experiment_id if found is not None else \
                self.client.create_experiment(experiment, artifact_location=artifacts)
            self.run_id = self.client.create_run(experiment_id, run_name=final_dir.name,
                                                 tags={"bertkit.run_dir": str(final_dir)}).info.run_id
        self.is_open = True
        items = [Param(mlflow_name(k), str(v)) for k, v in params.items()] if saved is None else []
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])
        return {"run_id": self.run_id}

    def moved(self, run_dir):  # the local store moved with the run directory; the run goes on there
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self._uri(run_dir))

    def _uri(self, run_dir: Path) -> str:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            return uri
        if self.store == MLFLOW_DIR:  # MLflow 3 opens its file store only on request
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            return (run_dir / MLFLOW_DIR).as_uri()
        # a connection per use: MLflow keeps one engine per database path, and a pooled connection would go on
        # writing to the file an --overwrite moved away (or deleted) from that path
        os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")
        return f"sqlite:///{(run_dir / MLFLOW_DB).absolute()}"

    def log_scalars(self, scalars, step):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_name(k), v, now, step) for k, v in scalars.items()]
        # on MLflow's logging thread: a write to SQLite costs tens of ms (several fsyncs), the training step none
        self.pending.append(self.client.log_batch(self.run_id, metrics=metrics, synchronous=False))

    def flush(self):  # at each checkpoint (before an --overwrite run's directory moves) and at the end
        pending, self.pending = self.pending, []
        for operation in pending:
            if operation is not None:
                operation.wait()

    def close(self):
        self.flush()
        self.client.set_terminated(self.run_id, "FINISHED")
        self.is_open = False


@contextlib.contextmanager
def _environment_defaults(values: Mapping[str, str]):
    """``values`` in ``os.environ`` for the block, where the user set none of them."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


class TrackioReporter(Reporter):
    """A trackio run: project the run directory's parent's name, run name the directory's, hyperparameters its
    config. trackio keeps it in its own store (``TRACKIO_DIR``, default ``~/.cache/huggingface/trackio``) and
    cannot delete points: after a crash, the steps between the last checkpoint and the crash appear twice."""

    name, module, where = "trackio", "trackio", "TRACKIO_DIR"

    def open(self, run_dir, saved, resumed_at, params):
        self.trackio = self.load()
        project, name = (saved["project"], saved["name"]) if saved is not None else \
            (final_name(run_dir.parent) or "bertkit", final_name(run_dir))
        # no dashboard in a notebook, no system metrics (where this trackio has those switches)
        quiet = {k: False for k in ("embed", "auto_log_cpu", "auto_log_gpu")
                 if k in inspect.signature(self.trackio.init).parameters}
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the command's output
            self.trackio.init(project=project, name=name, config=params, resume="must" if saved else "never",
                              **quiet)
        self.is_open = True
        return {"project": project, "name": name}

    def log_scalars(self, scalars, step):
        self.trackio.log(dict(scalars), step=step)

    def moved(self, run_dir):  # trackio's store is its own: nothing moved
        pass

    def close(self):
        with contextlib.redirect_stdout(sys.stderr):
            self.trackio.finish()
        self.is_open = False


def mlflow_name(name: str) -> str:
    """``name`` as MLflow takes it (letters, digits and ``_-. /``): ``ndcg@10`` -> ``ndcg_at_10``, any other
    character -> ``_``."""
    return re.sub(r"[^/\w.\- ]", "_", name.replace("@", "_at_"))


#: tracker name -> its reporter (``--report-to`` choices, besides ``none``)
REPORTERS: dict[str, type[Reporter]] = {"tensorboard": TensorBoardReporter, "mlflow": MLflowReporter,
                                        "trackio": TrackioReporter}
CHOICES = (*REPORTERS, "none")
