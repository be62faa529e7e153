"""benchmarks/embed_job.py's memory reading: a process tree's resident memory counts the children that any thread
started (a Dask nanny starts its worker from another thread than its main one)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from benchmark_scripts import load_benchmark


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads Linux's /proc")
def test_the_tree_counts_a_child_started_by_another_thread():
    bench = load_benchmark("embed_job_bench", "embed_job.py")
    started = []
    # a child holding 200 MB, started from a thread that is not the main one
    code = "import sys, time; block = bytearray(200 * 1024 * 1024); block[::4096] = b'x' * len(block[::4096]); " \
           "print('ready', flush=True); time.sleep(60)"
    thread = threading.Thread(target=lambda: started.append(subprocess.Popen([sys.executable, "-c", code],
                                                                                 stdout=subprocess.PIPE, text=True)))
    thread.start()
    thread.join()
    child = started[0]
    try:
        assert child.stdout.readline().strip() == "ready"
        own = bench.proc_status_kb(os.getpid(), "VmRSS")
        assert bench.tree_rss_kb(os.getpid()) >= own + 200 * 1024 * 0.9
    finally:
        child.kill()
        child.wait()
