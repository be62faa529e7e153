"""MkDocs hook: the Benchmarks page (``benchmarks/index.md``), generated at build time from benchmarks/results/*.json.

The page's text comes from ``benchmarks/record.py``'s :func:`render_page` (the module the benchmark scripts write
their results with, and the one ``tests/test_docs_benchmarks.py`` checks); a malformed results file stops the
build with an error naming it. ``mkdocs serve`` rebuilds when a results file changes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

PAGE = "benchmarks/index.md"
RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "record.py"


def record():
    """``benchmarks/record.py`` as a module, loaded afresh (benchmarks/ is not a package; ``mkdocs serve`` sees
    edits)."""
    spec = importlib.util.spec_from_file_location("bertkit_benchmarks_record", RECORD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results_dir(config) -> Path:
    """The results folder of the site being built: ``benchmarks/results`` beside its mkdocs.yml."""
    return Path(config.config_file_path).resolve().parent / "benchmarks" / "results"


def on_files(files, config):
    try:
        content = record().render_page(results_dir(config))
    except ValueError as e:
        raise PluginError(f"the Benchmarks page: {e}") from None
    existing = files.get_file_from_path(PAGE)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, PAGE, content=content))
    return files


def on_serve(server, config, builder):
    server.watch(str(results_dir(config)))
    return server
