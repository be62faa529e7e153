"""Resident memory of ``bertkit pretrain`` over its steps: is it flat, or does it grow with the run?

Each run is ``python -m bertkit.cli pretrain --text BOOK --model tiny --max-seq-length 128 --batch-size 32
--precision fp32 --max-steps N --log-every 1 --save-every N`` in a child process (a fresh output directory
in a temporary folder; BOOK is *Emma* from the bundled Austen novels unless ``--text``). This script samples
the child's ``VmRSS`` from ``/proc/PID/status`` every ``--interval`` s (default 0.05) and reads the last
step written to ``metrics.jsonl``; the RSS at a step is the first sample taken after that step was logged.
Peak is the child's ``VmHWM`` (its high-water mark, data preparation included), read just before it exits;
"peak by step 1" is the mark when the first step is seen (preparing the data: vocabulary, tokenizing, pairing).

``--allocator default`` runs the child with ``BERTKIT_MALLOC=default``: no ``malloc_trim`` in the Trainer,
the behaviour before :mod:`bertkit.training.allocator`; ``--allocator tuned`` (the default) leaves it on. glibc's
own variables (``MALLOC_MMAP_THRESHOLD_=65536``, ``MALLOC_ARENA_MAX=1``) pass through to the child from this
script's environment.

    python benchmarks/memory.py                                  # 100 and 400 steps, tuned allocator
    python benchmarks/memory.py --steps 100 400 --allocator default tuned --json memory.jsonl

Linux only (``/proc``). Memory is in GB of 10^9 bytes. The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: steps at which the table shows the RSS (those past a run's end are left out)
SHOWN = (5, 25, 50, 100, 200, 300, 400, 550, 800)


def proc_status_kb(pid: int, field: str) -> int | None:
    """``field`` (e.g. ``VmRSS``) of ``/proc/PID/status`` in kB, or None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def last_step(metrics: Path) -> int:
    """The last train step logged in ``metrics`` (0 before the first)."""
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if record.get("split") == "train":
            return record["step"]
    return 0


def measure(book: Path, steps: int, allocator: str, interval: float, extra: list[str]) -> dict:
    """One pretraining run of ``steps`` steps; returns ``{"rss_gb": {step: GB}, "peak_gb": GB, ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "bertkit.cli", "pretrain", "--text", str(book), "--model", "tiny",
                   "--max-seq-length", "128", "--batch-size", "32", "--precision", "fp32", "--max-steps",
                   str(steps), "--log-every", "1", "--save-every", str(steps), "-o", str(out), *extra]
        env = {**os.environ, "BERTKIT_MALLOC": allocator}
        started = time.monotonic()
        log_path = Path(tmp) / "stderr.txt"  # a pipe would fill (tqdm) and stop the child
        with open(log_path, "w", encoding="utf-8") as log:
            child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        rss, peak, seen, first_step_at, setup_peak = {}, 0, 0, None, None
        while child.poll() is None:
            step = last_step(out / "metrics.jsonl")
            kb = proc_status_kb(child.pid, "VmRSS")
            hwm = proc_status_kb(child.pid, "VmHWM")
            peak = max(peak, hwm or 0)
            if step > seen and kb is not None:
                if first_step_at is None:
                    first_step_at, setup_peak = time.monotonic(), hwm

                rss[step], seen = kb / 1e6, step
            time.sleep(interval)
        stderr = log_path.read_text(encoding="utf-8", errors="replace")
        if child.returncode != 0:
            raise SystemExit(f"pretrain failed ({child.returncode}): {stderr[-2000:]}")
        ended = time.monotonic()
    s_per_step = (ended - first_step_at) / max(seen - 1, 1) if first_step_at else float("nan")
    return {"steps": steps, "allocator": allocator, "rss_gb": rss, "peak_gb": peak / 1e6,
            "setup_peak_gb": (setup_peak or 0) / 1e6,
            "wall_s": round(ended - started, 1), "s_per_step": round(s_per_step, 3)}


def at(rss: dict[int, float], step: int) -> float | None:
    """RSS at the first sampled step >= ``step`` (steps can pass between two samples)."""
    later = [s for s in rss if s >= step]
    return rss[min(later)] if later else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 400], help="run lengths (default 100 400)")
    parser.add_argument("--allocator", nargs="+", choices=["tuned", "default"], default=["tuned"],
                        help="tuned: the Trainer trims malloc; default: it does not (BERTKIT_MALLOC=default)")
    parser.add_argument("--text", type=Path, help="the book to pretrain on (default: Emma, bundled)")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--json", type=Path, help="append each run's numbers here as a JSON line")
    parser.add_argument("extra", nargs="*", help="more pretrain flags, after --")
    args = parser.parse_args(argv)
    book = args.text
    tmp = None
    if book is None:
        from bertkit.resources import austen_novels

        tmp = tempfile.TemporaryDirectory()
        book = Path(tmp.name) / "emma.txt"
        book.write_text(austen_novels()["emma"], encoding="utf-8")
    print("| allocator | steps | " + " | ".join(f"step {s}" for s in SHOWN) + " | peak by step 1 | peak | s/step |")
    print("|---|---|" + "---|" * len(SHOWN) + "---|---|---|")
    for allocator in args.allocator:
        for steps in args.steps:
            result = measure(book, steps, allocator, args.interval, args.extra)
            cells = [at(result["rss_gb"], s) if s <= steps else None for s in SHOWN]
            print(f"| {allocator} | {steps} | " + " | ".join("" if c is None else f"{c:.2f}" for c in cells)
                  + f" | {result['setup_peak_gb']:.2f} | {result['peak_gb']:.2f} | {result['s_per_step']:.2f} |",
                  flush=True)
            if args.json:
                with open(args.json, "a", encoding="utf-8") as f:
                    f.write(json.dumps(result) + "\n")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
