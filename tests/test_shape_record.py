"""Issue 39's before/after record, checked without running a recipe: benchmarks/shape_metrics.py finds a long
function, a wide signature and the import circles of a small package (module level, lazy, type-only imports
apart), and benchmarks/shape_record.py's --compare tells equal records from different ones."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


metrics = _load("shape_metrics")
shape_record = _load("shape_record")


def _package(root: Path) -> Path:
    """pkg: a -> b -> a and a -> sub.x -> a at module level; c -> d at module level and d -> c inside a function;
    e -> a only for type checking; c.f 112 lines long, c.K.g 9 parameters besides self."""
    pkg = root / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "import os\nimport pkg.b\nimport pkg.e\nfrom pkg.sub import x\n",
        "b.py": "from . import a\n",
        "sub/__init__.py": "",
        "sub/x.py": "from .. import a\n",
        "c.py": "from pkg import d\n\n\ndef f():\n" + "    y = 1\n" * 110 + "    return y\n\n\n"
                "class K:\n    def g(self, a, b, c, /, d, e=1, *args, f, g=2, **kwargs):\n        pass\n",
        "d.py": "def h():\n    from pkg import c\n    return c\n",
        "e.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    return pkg


def test_shape_metrics_finds_the_long_function_the_wide_signature_and_the_circles(tmp_path):
    m = metrics.measure(_package(tmp_path))
    assert m["longest_functions"][0] == {"function": "pkg/c.py:f", "lines": 112}
    assert m["functions_over_100_lines"] == 1
    assert m["widest_signatures"][0] == {"function": "pkg/c.py:K.g", "parameters": 9}
    assert m["lines_per_package"]["pkg.c"] == 1 + 112 + 3 and m["lines"] == sum(m["lines_per_package"].values())
    eager = m["circles"]
    assert eager["module_cycles"] == 1 and eager["modules"][0]["members"] == ["pkg.a", "pkg.b", "pkg.sub.x"]
    assert eager["modules"][0]["example"] == ["pkg.a", "pkg.b", "pkg.a"]
    assert eager["package_cycles"] == 1 and eager["packages"][0]["members"] == ["pkg.a", "pkg.b", "pkg.sub"]
    lazy = m["circles_with_lazy"]
    assert lazy["module_cycles"] == 2 and ["pkg.c", "pkg.d"] in [c["members"] for c in lazy["modules"]]
    assert m["imports"] == {"module_level": 6, "lazy": 1}  # a->b, a->e, a->sub.x, b->a, sub.x->a, c->d; d->c lazy
    text = metrics.markdown(m)
    assert "pkg.a -> pkg.b -> pkg.a" in text and "| pkg/c.py:f | 112 |" in text


def test_shape_metrics_compare_shows_before_and_after(tmp_path):
    before = metrics.measure(_package(tmp_path))
    (tmp_path / "pkg" / "b.py").write_text("import os\n", encoding="utf-8")  # the circle a -> b -> a gone
    after = metrics.measure(tmp_path / "pkg")
    assert after["circles"]["module_cycles"] == 1 and after["circles"]["modules"][0]["members"] == ["pkg.a",
                                                                                                   "pkg.sub.x"]
    text = metrics.compare(before, after)
    assert "| circles between modules (module level) | 1 | 1 |" in text
    assert "| lazy internal imports | 1 | 1 |" in text and "| pkg.b | 1 | 1 | 0 |" in text


def _record(path: Path, loss: float = 1.25, **extra) -> Path:
    steps = {"pretrain mlm": {"weights": {"digest": "ab" * 32, "tensors": {"model/model.safetensors:w": "cd" * 32},
                                          "npz": str(path.with_suffix(".npz"))},
                              "results.json": {"loss": loss, "steps": 12, **extra}},
             "evaluate classify --data": {"answer": {"stdout": {"accuracy": 0.5}}}}
    path.write_text(json.dumps({"batch_meaning": "per-process", "wall_s": 1.0, "steps": steps}), encoding="utf-8")
    return path


def test_shape_record_compare_says_equal_for_equal_records(tmp_path, capsys):
    assert shape_record.compare(_record(tmp_path / "a.json"), _record(tmp_path / "b.json"), 0.0) == 0
    out = capsys.readouterr().out
    assert "| recipe | before | after | equal? |" in out and "2 of 2 equal" in out
    assert f"| pretrain mlm | {'ab' * 6} | {'ab' * 6} | yes |" in out


def test_shape_record_compare_fails_on_a_changed_value_or_a_lost_key(tmp_path, capsys):
    before = _record(tmp_path / "a.json")
    assert shape_record.compare(before, _record(tmp_path / "b.json", loss=1.5), 0.0) == 1
    out = capsys.readouterr().out
    assert "**no**" in out and "results.json.loss: 1.25 -> 1.5" in out and "1 of 2 equal" in out
    assert shape_record.compare(before, _record(tmp_path / "c.json", loss=1.5), 0.5) == 0  # --atol
    capsys.readouterr()
    lost = json.loads(before.read_text())
    del lost["steps"]["evaluate classify --data"]["answer"]["stdout"]["accuracy"]
    (tmp_path / "d.json").write_text(json.dumps(lost), encoding="utf-8")
    assert shape_record.compare(before, tmp_path / "d.json", 0.0) == 1
    assert "accuracy missing" in capsys.readouterr().out
    assert shape_record.compare(before, _record(tmp_path / "e.json", new_key=3), 0.0) == 0  # AFTER may add keys
    assert "after adds results.json.new_key" in capsys.readouterr().out


def test_shape_record_compare_gives_the_max_difference_of_kept_arrays(tmp_path, capsys):
    np = pytest.importorskip("numpy")
    before, after = _record(tmp_path / "a.json"), _record(tmp_path / "b.json", loss=2.0)
    np.savez(tmp_path / "a.npz", w=np.zeros(3, dtype=np.float32))
    np.savez(tmp_path / "b.npz", w=np.array([0, 0.25, 0], dtype=np.float32))
    assert shape_record.compare(before, after, 0.0) == 1
    assert "max abs difference 0.25" in capsys.readouterr().out


@pytest.mark.parametrize(("meaning", "size"), [("per-process", 8), ("per-step", 16)])
def test_the_accumulated_embed_run_asks_for_the_same_rows_in_either_meaning(meaning, size):
    assert shape_record.embed_batch(meaning, 8, 2) == ["--batch-size", size, "--gradient-accumulation-steps", 2]
    assert shape_record.embed_batch(meaning, 8) == ["--batch-size", 8]
