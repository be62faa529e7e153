"""Benchmark result files: what a run measured, on which machine, when, at which commit; and their Markdown.

A benchmark script writes its results with :func:`write_result` into one JSON object (committed ones live in
``benchmarks/results/<name>.json``)::

    {"benchmark": "run-inference",          # the name (the file's stem for committed results)
     "title": "Inference: ...",             # the heading of its section on the docs' Benchmarks page
     "header": {"machine": {...}, "date": "2026-11-28T09:01:02Z", "finished": "...", "commit": "6a61bbc",
                "command": "python benchmarks/run.py --only inference --json ...", "load": [1.31, 2.95]},
     "tables": [{"title": ..., "columns": [...], "rows": [{...}, ...], "notes": ["...", ...]}, ...],
     ...}                                   # the script's own keys beside these (its tests read them)

``header.machine``: the CPU model, the flags that decide the fast precisions (avx512_bf16, AMX, VNNI), the cores
this process may use and the CPU's, the threads torch uses, RAM, the torch version and the device. ``load`` is
the one-minute load average when this module was imported (a script imports it at its start) and when the file
was written: these machines are shared, and a high load means noisier times (the ratios, measured interleaved,
suffer less than the absolute times).

The docs site renders every ``benchmarks/results/*.json`` with :func:`render_page` (``docs/hooks/benchmarks.py``);
a table's cells are formatted by :func:`cell`, the function the scripts print theirs with, so the page shows the
numbers as the run printed them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FLAGS = ("avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
_STARTED = (datetime.now(timezone.utc), round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None)


# ---------------------------------------------------------------------------- the machine
def cpu() -> dict:
    """The CPU's model name and which of :data:`FLAGS` it has (Linux's /proc/cpuinfo; "unknown" and None
    elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {"model": "unknown", "flags": {f: None for f in FLAGS}}
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"), "flags": {f: f in flags for f in FLAGS}}


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def machine(device: str = "cpu") -> dict:
    """This machine as a result's header shows it: CPU, flags, cores (usable / in the machine), torch's threads,
    RAM in GB, torch's version and ``device`` (a CUDA device is named by its model)."""
    import torch

    info = cpu()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if device.startswith("cuda") and torch.cuda.is_available():
        device = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return {"cpu": info["model"], "flags": info["flags"], "cores": usable, "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(), "ram_gb": _ram_gb(), "torch": torch.__version__, "device": device}


def commit() -> str | None:
    """The repository's short commit, with ``+dirty`` when tracked files differ from it; None outside git."""
    try:
        run = dict(cwd=ROOT, capture_output=True, text=True, check=True, timeout=30)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def command(argv: Sequence[str] | None = None) -> str:
    """The command line that ran (``sys.argv``), the script's path relative to the repository when inside it."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv and argv[0] else None
    if script is not None and script.is_relative_to(ROOT):
        argv[0] = script.relative_to(ROOT).as_posix()
    return shlex.join(["python", *argv])


def _utc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------- writing
def table(title: str, rows: list[dict], columns: Sequence[str] | None = None, notes: Iterable[str] = ()) -> dict:
    """One table of a result: its rows (dicts), the columns shown in that order (default: the first row's keys)
    and notes printed under it."""
    columns = list(columns if columns is not None else (rows[0] if rows else []))
    return {"title": title, "columns": columns, "rows": rows, "notes": list(notes)}


def write_result(path: str | os.PathLike, name: str, tables: list[dict], *, title: str | None = None,
                 data: dict | None = None, device: str = "cpu", argv: Sequence[str] | None = None) -> dict:
    """Write a result file to ``path`` (atomically; its folder is created) and return what was written:
    ``name``, ``title`` (default: the name), the header (machine on ``device``, start date and load taken at this
    module's import, end date and load now, commit, command line ``argv``: default ``sys.argv``), ``tables``
    (made with :func:`table`) and ``data``'s keys (the script's raw results) beside them."""
    data = dict(data or {})
    clash = {"benchmark", "title", "header", "tables"} & set(data)
    if clash:
        raise ValueError(f"write_result: data must not have the keys {sorted(clash)}: they are the file's own")
    started, load_start = _STARTED
    load_end = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    finished = datetime.now(timezone.utc)
    result = {"benchmark": name, "title": title or name,
              "header": {"machine": machine(device), "date": _utc(started), "finished": _utc(finished),
                         "commit": commit(), "command": command(argv), "load": [load_start, load_end]},
              "tables": tables, **data}
    from bertkit.io import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=1, default=str) + "\n")
    return result


# ---------------------------------------------------------------------------- reading and rendering
def cell(v) -> str:
    """A table cell as the benchmarks print it: — for missing, floats to 2 decimals (3 significant digits in
    scientific notation below 0.01, thousands separators and no decimals from 100)."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2e}" if 0 < abs(v) < 1e-2 else f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v).replace("|", "\\|")


def markdown(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """``rows`` as a Markdown table of ``columns`` (default: every row's keys, in order of first appearance; a row
    without a column shows —)."""
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def load_result(path: str | os.PathLike) -> dict:
    """A result file, checked: ValueError naming ``path`` and what is wrong when it is not JSON or lacks the
    header's machine, date, commit, command or load, or a table's title, columns or rows."""
    path = Path(path)

    def bad(what: str) -> ValueError:
        return ValueError(f"{path}: {what}; rewrite it with benchmarks/record.py's write_result (run the benchmark "
                          f"again with --json {path})")

    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"not a readable JSON file ({e})") from None
    if not isinstance(result, dict):
        raise bad("not a JSON object")
    header = result.get("header")
    if not isinstance(result.get("benchmark"), str) or not isinstance(header, dict):
        raise bad("no 'benchmark' name or no 'header' object")
    missing = [k for k in ("machine", "date", "commit", "command", "load") if k not in header]
    if missing or not isinstance(header["machine"], dict) or "cpu" not in header["machine"]:
        raise bad(f"the header lacks {missing or ['machine.cpu']}")
    if not (isinstance(header["load"], list) and len(header["load"]) == 2):
        raise bad("the header's 'load' is not [at start, at end]")
    tables = result.get("tables")
    if not isinstance(tables, list) or not tables:
        raise bad("no 'tables' list (or an empty one)")
    for i, t in enumerate(tables):
        if not (isinstance(t, dict) and isinstance(t.get("title"), str) and isinstance(t.get("columns"), list)
                and isinstance(t.get("rows"), list) and all(isinstance(r, dict) for r in t["rows"])):
            raise bad(f"table {i} needs a 'title' string, a 'columns' list and a 'rows' list of objects")
    return result


def _load(value) -> str:
    return "?" if value is None else f"{value:.2f}"


def header_line(header: dict) -> str:
    """The lines under a result's heading: machine, date, commit, command, load; a warning admonition when the load
    average passed the core count by more than one (more threads wanted the cores than there were)."""
    m = header["machine"]
    flags = ", ".join(f"{f} {'yes' if v else 'no'}" for f, v in m.get("flags", {}).items() if v is not None)
    total = m.get("cpu_count") or m.get("cores") or 1
    cores = f"{m.get('cores', '?')} cores" + (f" of {total}" if total != m.get("cores") else "")
    ram = f", {m['ram_gb']:g} GB RAM" if m.get("ram_gb") else ""
    start, end = header["load"]
    date = header["date"][:16].replace("T", " ") + " UTC"
    busy = max((x for x in (start, end) if x is not None), default=0) > total + 1
    warning = ("\n\n!!! warning \"A busy machine\"\n    The load average passed the core count by more than one in "
               "this run: more threads wanted the cores than there were (other jobs', or the benchmark's own "
               "servers and clients), so the times are inflated and even the ratios less reliable than on a quiet "
               "machine.") if busy else ""
    return (f"**Machine:** {m['cpu']}, {cores} ({m.get('threads', '?')} torch threads){ram}"
            + (f"; {flags}" if flags else "") + f"; torch {m.get('torch', '?')} on {m.get('device', 'cpu')}.  \n"
            f"**Date:** {date} · **commit** `{header['commit'] or 'unknown'}` · "
            f"**load average** {_load(start)} at start, {_load(end)} at end.  \n"
            f"**Command:** `{header['command']}`" + warning)


def render_result(result: dict) -> str:
    """One result as a section of the Benchmarks page: heading, the header line, then each table and its notes."""
    parts = [f"## {result.get('title') or result['benchmark']}", header_line(result["header"])]
    for t in result["tables"]:
        parts += [f"### {t['title']}", markdown(t["rows"], t["columns"])]
        parts += [note for note in t.get("notes", [])]
    return "\n\n".join(parts)


#: the order of the Benchmarks page (other results follow by name)
ORDER = ("run-inference", "run-families", "run-pretraining", "run-finetuning", "run-accuracy", "precision-speed",
         "tokenizer", "embed")

INTRO = """# Benchmarks

Every table on this page is generated when the site is built, from the JSON files in `benchmarks/results/`
that the scripts in `benchmarks/` write with `--json`. So each number is the one a run printed, shown with the
machine it ran on, the date (UTC), the commit and the exact command.

How to read them: the variants of a table are timed in one process, interleaved round by round (times are
medians), so the ratios (`x HF fp32`, `x ST fp32`, `vs HF __call__`) survive a busy machine much better than
the absolute times do. The load average at the start and end of each run says how busy the machine was: the
committed runs were made on a shared 2-core machine while other jobs ran, so their milliseconds are
pessimistic. For your hardware, run them yourself (below)."""


def reproduce(results: list[dict]) -> str:
    """The page's last section: how to rerun each result (its own command) and rebuild the page."""
    commands = "\n".join(dict.fromkeys(r["header"]["command"] for r in results))
    return f"""## Reproduce

From a clone with the test extras (`pip install -e '.[test]'`: transformers, sentence-transformers, ONNX
Runtime), each result above comes from its command:

```bash
{commands}
```

`make bench` runs every section of `benchmarks/run.py` (BERT-base, about 10 minutes on 2 cores) and prints the
tables; `python benchmarks/run.py --only SECTION --json benchmarks/results/run-SECTION.json` measures one
(`inference`, `families`, `pretraining`, `finetuning`, `accuracy`, `embedding`, `precision`) and writes its file.
`--quick` checks that a script runs (tiny model, one round): its numbers are not measurements. `make docs` then
rebuilds this page from every `benchmarks/results/*.json`."""


def render_page(results_dir: str | os.PathLike = RESULTS, order: Sequence[str] = ORDER) -> str:
    """The Benchmarks page (Markdown): the introduction, every ``*.json`` of ``results_dir`` checked
    (:func:`load_result`, whose ValueError names a bad file) and rendered, those named in ``order`` first in that
    order and the others by name, then how to reproduce them. ValueError when the folder holds no result."""
    paths = sorted(Path(results_dir).glob("*.json"))
    if not paths:
        raise ValueError(f"{results_dir}: no benchmark results (*.json); write one with a benchmark's --json")
    results = [load_result(p) for p in paths]
    rank = {name: i for i, name in enumerate(order)}
    results.sort(key=lambda r: (rank.get(r["benchmark"], len(rank)), r["benchmark"]))
    return "\n\n".join([INTRO, *(render_result(r) for r in results), reproduce(results)]) + "\n"
