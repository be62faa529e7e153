"""A benchmark script (``benchmarks/NAME.py``) imported as a module for its tests: by path, since the folder is
no package (and ``data.py`` shares its name with the repository's data directory)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str, file: str):
    """``benchmarks/<file>`` as module ``name``, registered in ``sys.modules`` (a dataclass looks its module up
    there), with the folder on ``sys.path`` (the scripts import their siblings)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
