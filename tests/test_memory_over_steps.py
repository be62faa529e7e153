"""Issue 28: pretraining's resident set grew with its steps (a tiny model at batch 32 x 128: 1.2 GB over steps
1-50, 2.3 GB over steps 550-600, still climbing). Each step's tensors had that batch's own sizes (the number of
real tokens after unpadding, of masked positions), which fragmented malloc's arenas and built a oneDNN kernel
per new row count; row counts are now rounded to a few sizes (``bertkit.modeling.fast.bucket_rows``).

The run is ``benchmarks/memory.py``'s (``bertkit pretrain`` in a child, its ``VmRSS`` sampled at each step)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bertkit.resources import austen_novels

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _benchmark():
    path = Path(__file__).parents[1] / "benchmarks" / "memory.py"
    spec = importlib.util.spec_from_file_location("bertkit_memory_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_resident_set_of_a_pretraining_run_is_flat_over_its_steps(tmp_path):
    """The most resident memory over steps 200-250 is within 0.2 GB of that over steps 50-100 (before: +0.5 GB
    by step 250 and +1.1 GB by step 600; after: +0.03 GB by step 250, +0.09 GB by step 600)."""
    book = tmp_path / "emma.txt"
    book.write_text(austen_novels()["emma"], encoding="utf-8")
    result = _benchmark().measure(book, 250, "tuned", 0.02, [])
    rss = result["rss_gb"]

    def most(first: int, last: int) -> float:
        window = [gb for step, gb in rss.items() if first <= step <= last]
        assert len(window) >= 10, f"too few samples of steps {first}-{last}: {sorted(rss)}"
        return max(window)

    early, late = most(50, 100), most(200, 250)
    assert late <= early + 0.2, f"resident set grew from {early:.2f} GB (steps 50-100) to {late:.2f} GB (200-250)"
