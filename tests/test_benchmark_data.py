"""benchmarks/data.py's parts that could be wrong without anyone noticing in its table: the corpus it
generates and the /proc sampler that measures the memory of a process tree. (The bertkit and HF runs
themselves are the benchmark's, not the suite's.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark

bench = load_benchmark("bench_data", "data.py")
corpus = load_benchmark("bench_data_corpus", "data_corpus.py")
meta_path, write_corpus = corpus.meta_path, corpus.write_corpus

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")


def test_corpus_is_jsonl_of_the_size_asked_and_deterministic(tmp_path):
    path = write_corpus(tmp_path / "a.jsonl", 0.2, seed=3)
    size = path.stat().st_size
    assert 180_000 <= size <= 220_000
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(texts) >= 5 and all(isinstance(t, str) and t for t in texts)
    assert all(len(t.split("\n")) <= 40 for t in texts) and all(len(t.split("\n")) >= 5 for t in texts[:-1])
    assert json.loads(meta_path(path).read_text())["bytes"] == size

    assert write_corpus(tmp_path / "b.jsonl", 0.2, seed=3).read_bytes() == path.read_bytes()
    assert write_corpus(tmp_path / "c.jsonl", 0.2, seed=4).read_bytes() != path.read_bytes()

    # the same documents in the text layout: a paragraph per line, a blank line between documents (the last
    # one cut elsewhere: JSON's escapes make each line longer)
    documents = write_corpus(tmp_path / "a.txt", 0.2, seed=3).read_text(encoding="utf-8").rstrip("\n").split("\n\n")
    assert documents[:len(texts) - 1] == texts[:-1]


def test_corpus_is_cached_by_its_side_file(tmp_path):
    path = write_corpus(tmp_path / "a.jsonl", 0.1, seed=1)
    stamp = path.stat().st_mtime_ns
    time.sleep(0.01)
    assert write_corpus(path, 0.1, seed=1).stat().st_mtime_ns == stamp  # found, not rewritten
    write_corpus(path, 0.1, seed=2)  # another seed: rewritten
    assert json.loads(meta_path(path).read_text())["seed"] == 2
    with open(path, "ab") as f:  # the file changed behind the side file's back: rewritten
        f.write(b"x")
    assert write_corpus(path, 0.1, seed=2).stat().st_size == json.loads(meta_path(path).read_text())["bytes"]


def test_sampler_sums_the_memory_of_the_whole_process_tree():
    child = "x = bytearray(200_000_000); import time; time.sleep(0.5)"
    parent = f"import subprocess, sys; y = bytearray(100_000_000); subprocess.run([sys.executable, '-c', {child!r}])"
    result = bench.measure([sys.executable, "-c", parent], interval=0.05)
    assert result["returncode"] == 0, result["stderr"]
    assert result["max_processes"] == 2
    for key in ("peak_rss_mb", "peak_pss_mb", "peak_pss_anon_mb"):
        assert 290 <= result[key] <= 450, (key, result[key])  # 300 MB of buffers and two interpreters
    assert result["wall_s"] >= 0.5 and result["cpu_s"] > 0


def test_both_ways_of_walking_the_tree_find_a_grandchild():
    process = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                                "subprocess.run([sys.executable, '-c', 'import time; time.sleep(30)'])"])
    try:
        for _ in range(200):
            found = bench.tree_pids(process.pid)
            if len(found) == 2:
                break
            time.sleep(0.02)
        assert len(found) == 2 and found[0] == process.pid
        assert sorted(bench._tree_pids_by_scan(process.pid)) == sorted(found)
    finally:
        for pid in reversed(bench.tree_pids(process.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        process.wait()
