"""Running data creation's jobs: in this process, in a pool of processes or on a Dask cluster, and what a
failure says.

:func:`run_all` submits jobs (a partition to tokenize, a block to pair) to an executor from
:class:`executor_for` and returns their markers in order, holding only a window of them at once. A job's
ValueError (bad input, named) is raised as it is; a worker that dies (SIGKILL, out of memory, a crash, a Rust
panic) ends the run with one line naming what it was doing (a :class:`RunningNote` left by the dead
process) and saying that a rerun continues. ``--dask ADDRESS`` is asked who it is first, each step bounded by
:data:`DASK_TIMEOUT` seconds (:func:`probe_scheduler`).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class RunningNote:
    """``.running-NAME`` holds this process's host and id and what it does while it works on NAME: after a
    worker died, the parent names what it was doing. A pool worker that the pool terminates (SIGTERM, once
    another died) removes its note first (:func:`_worker_setup`), so only the one that died is named."""

    current: Path | None = None  # this process's note

    def __init__(self, out: Path, name: str, what: str):
        self.path, self.what = out / f".running-{name}", what

    def __enter__(self) -> None:
        self.path.write_text(f"{socket.gethostname()} {os.getpid()}\n{self.what}\n")
        RunningNote.current = self.path

    def __exit__(self, *error) -> None:
        RunningNote.current = None
        self.path.unlink(missing_ok=True)


def run_all(executor: cf.Executor, window: int, fn: Callable, jobs: Iterator, out: Path, progress: bool,
             desc: str, total: int | None, amount: Callable[[dict[str, Any]], int],
             unit: str = " blocks", words: RunWords | None = None) -> list[dict[str, Any]]:
    """Every job's marker, in job order (markers hold "partition" or "block", their number); at most ``window``
    jobs are held (planned, queued) at once; the progress bar advances by ``amount(marker)`` ``unit``, called in
    this process as each job ends. A job's ValueError is raised as it is; a worker that died (killed, out of memory,
    crashed) ends the run with an error naming what it was doing (:func:`worker_died`, in the run's ``words``)."""
    from bertkit.progress import progress_bar

    results: list[dict[str, Any]] = []
    with progress_bar(total=total, unit=unit, unit_scale=unit == "B", unit_divisor=1024, desc=desc,
                      disable=not progress) as bar:
        pending: dict[cf.Future, Any] = {}

        def collect(done: Iterable[cf.Future]) -> None:
            for future in done:
                job = pending.pop(future)
                try:
                    marker = future.result()  # a worker's error is raised here, with its message
                except (ValueError, KeyboardInterrupt):
                    raise
                except BaseException as error:  # a dead worker, MemoryError, a Rust panic
                    raise worker_died(out, job, error, words or RunWords()) from None
                results.append(marker)
                bar.update(amount(marker))
        for job in jobs:
            pending[executor.submit(fn, job)] = job
            if len(pending) >= window:
                collect(cf.wait(list(pending), return_when=cf.FIRST_COMPLETED)[0])
        collect(cf.as_completed(list(pending)))
    return sorted(results, key=lambda marker: marker.get("partition", marker.get("block")))


@dataclass(frozen=True)
class RunWords:
    """How :func:`worker_died` names a run (``task``), the flag that makes a job need less memory (``smaller``) and
    what a rerun does (``kept``)."""

    task: str = "data creation"
    smaller: str = "--partition-size"
    kept: str = ("The partitions and blocks finished so far are kept: run the same command again to continue where "
                 "it stopped.")


def worker_died(out: Path, job: Any, error: BaseException,
                words: RunWords = RunWords()) -> RuntimeError | BaseException:
    """One line for a job whose worker died or failed outside the checks: what it was doing (a dead worker's
    ``.running-*`` note names it; else the job whose result failed), why, and that a rerun continues."""
    import concurrent.futures.process

    what = job.describe()
    if isinstance(error, concurrent.futures.process.BrokenProcessPool) or type(error).__name__ == "KilledWorker":
        dead = _dead_workers_jobs(out)
        what = ", ".join(dead) if dead else what
        why = ("its worker process died (killed by a signal, or by the system for want of memory: a smaller "
               f"{words.smaller} or fewer --workers need less)")
    elif isinstance(error, MemoryError):
        why = (f"out of memory ({error}); a smaller {words.smaller} or fewer --workers need less")
    elif isinstance(error, OSError):
        return error  # a full disk or an unreadable file: its own message names the path
    else:
        why = f"{type(error).__name__}: {error}"
    return RuntimeError(f"{words.task} failed on {what}: {why}. {words.kept}")


def _dead_workers_jobs(out: Path, patience: float = 2.0) -> list[str]:
    """What the dead processes of this machine among the ``.running-*`` notes were doing. A process is seen
    dead a moment after its pipes closed (which told the pool): looked at again for up to ``patience`` s."""
    deadline = time.monotonic() + patience
    while True:
        dead = []
        for note in sorted(out.glob(".running-*")):
            try:
                where, what = note.read_text().splitlines()[:2]
                host, pid = where.split()
            except (OSError, ValueError):
                continue
            if host == socket.gethostname() and not _alive(int(pid)):
                dead.append(what)
        if dead or time.monotonic() > deadline:
            return dead
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True


class Inline(cf.Executor):
    """Runs each job at once, in this process (one worker)."""

    def submit(self, fn, /, *args, **kwargs) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # delivered by future.result(), as a pool would
            future.set_exception(error)
        return future


class executor_for:
    """``(executor, window)``: where partitions run and how many may be queued at once."""

    def __init__(self, workers: int, dask: Any):
        self.workers, self.dask = workers, dask
        self._close: list = []

    def __enter__(self) -> tuple[cf.Executor, int]:
        if self.dask is not None:
            client = _dask_client(self.dask)
            if client is not self.dask:
                self._close.append(client)
            threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
            return client.get_executor(pure=False), 2 * max(1, threads)
        if self.workers == 1:
            return Inline(), 1
        import multiprocessing

        pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_worker_setup)
        self._close.append(pool)
        return pool, 2 * self.workers

    def __exit__(self, kind, error, traceback) -> None:
        for resource in self._close:
            if isinstance(resource, cf.Executor):
                # after a job's error the jobs still running finish before the caller's lock on the output is
                # released (they write there: a retry's cleanup raced them); a broken pool's workers are gone and
                # waiting frees its semaphores; Ctrl-C reached the workers too, so nothing is waited for then
                resource.shutdown(wait=not isinstance(error, KeyboardInterrupt)
                                  or bool(getattr(resource, "_broken", False)), cancel_futures=True)
            else:
                resource.close()


def _worker_setup() -> None:
    """A pool worker tokenizes on its one core: the pool, not the tokenizer, spreads work over the cores. Ended
    by the pool (SIGTERM), it removes its ``.running-*`` note: it did not die of its own work."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, frame: Any) -> None:
    if RunningNote.current is not None:
        RunningNote.current.unlink(missing_ok=True)
    os._exit(128 + signum)


def _dask_client(dask: Any):
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("dask= (--dask) needs dask.distributed: pip install 'bertkit[dask]'.") from None
    if isinstance(dask, Client):
        return dask
    probe_scheduler(str(dask), DASK_TIMEOUT)
    try:
        return Client(dask, timeout=DASK_TIMEOUT)
    except (OSError, ValueError) as error:
        raise _unreachable(dask, error) from None


#: seconds to connect to a Dask scheduler and to hear its answer to a first question
DASK_TIMEOUT = 10.0


def probe_scheduler(address: str, timeout: float) -> None:
    """Ask ``address`` who it is, each step bounded by ``timeout`` seconds; ValueError naming ``--dask`` and the
    address unless a Dask scheduler answers. (A Client on a service that never answers waits forever, and one on
    an HTTP server reads its reply as a frame length: "Unable to allocate 3.07 EiB".)"""
    import asyncio

    from distributed.comm import connect

    async def identity() -> Any:
        comm = await asyncio.wait_for(connect(address, timeout=timeout), timeout)
        try:
            await comm.write({"op": "identity"})
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    try:
        answer = asyncio.run(identity())
    except (asyncio.TimeoutError, TimeoutError):
        raise _unreachable(address, f"no answer within {timeout:g} s") from None
    except Exception as error:  # OSError, a malformed frame (MemoryError, ValueError), a bad address
        raise _unreachable(address, f"{type(error).__name__}: {error}") from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        raise _unreachable(address, "what answers there is not a Dask scheduler")


def _unreachable(address: Any, why: Any) -> ValueError:
    return ValueError(f"--dask {address}: cannot reach a Dask scheduler there ({why}). Start one with `dask "
                      "scheduler` and workers with `dask worker ADDRESS`, and pass its tcp://HOST:8786.")
