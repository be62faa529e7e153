"""The dependency direction of design.md §2, checked on every internal import.

Every ``import`` / ``from ... import`` of a bertkit module counts, at module level or inside a
function (a lazy import is still a dependency), relative ones too, as does
``importlib.import_module("bertkit....")`` with a literal name. ``from bertkit import X`` counts
as the submodule ``X`` when there is one, else as the package root, the facade that may pull in
every layer.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import torch

import bertkit

SRC = Path(bertkit.__file__).parent

#: Imports allowed everywhere: ``io.py``, the atomic-write utility every layer that writes files uses, and
#: ``checks.py``, the integer-argument check every layer shares, ``devices.py``, what the machine offers, and
#: ``progress.py``, the one progress bar every long loop shows.
UTILITIES = {"io", "checks", "devices", "progress"}
EVERYTHING = "everything"

#: design §2 as a table: top-level module or package -> the internal ones it may import (besides
#: itself and UTILITIES). A layer missing here fails the test: a new one must be placed first.
LAYERS: dict[str, set[str] | str] = {
    # leaves: they import nothing internal
    "io": set(),
    "checks": set(),
    "devices": set(),  # torch only: the GPU behind "gpu", native bf16
    "dtypes": set(),  # no torch: the inference number formats' names, which --help lists
    "progress": set(),  # tqdm only: a bar in a terminal, a sparse line in a log
    "families": set(),  # part of the config layer: the encoder families' records
    "_config_types": set(),  # part of the config layer: the fields' type checks, read from their annotations
    "_config_hf": {"families", "_config_types"},  # part of the config layer: BERTConfig's HF config.json dialect
    "config": {"families", "_config_types", "_config_hf"},
    "tokenization": set(),  # and no torch: test_tokenization_imports_no_torch
    "masking": set(),  # BERT's MLM corruption, a leaf so modeling and data share one implementation
    "hooks": set(),  # slots through which modeling's from_pretrained reaches weights, filled by the root
    "resources": set(),  # data files shipped in the package (vocabulary, demo corpus)
    "presets": {"config"},  # part of the config layer: sizes and recipes as BERTConfig data
    "modeling": {"config", "presets", "masking", "hooks"},
    # tokenization: a converted checkpoint keeps its tokenizer files (weights/convert.py)
    "weights": {"config", "modeling", "tokenization"},
    "data": {"tokenization", "masking"},
    # works on any nn.Module; the one run (training/run.py) records the numerics and keeps the float32 GEMM
    # backend on resume (modeling.numerics, modeling.fast.GemmChoice)
    "training": {"modeling"},
    # resources: static int8's default calibration set (inference.calibration)
    "inference": {"config", "modeling", "dtypes", "resources"},
    "tasks": {"config", "presets", "masking", "hooks", "resources", "tokenization", "modeling", "weights", "data",
              "training", "inference", "dtypes"},
    "models": {"config", "presets", "modeling", "tokenization"},  # mirror of lucid.models: re-exports only
    "compat": EVERYTHING,
    "cli": EVERYTHING,
    # the package root: re-exports every layer lazily and installs weights' loader in hooks
    "__init__": EVERYTHING,
}
# search over vectors, model-agnostic: no model code (inference.finite: the one check that scores are finite)
LAYERS["retrieval"] = {"inference"}
# the sentence-transformers package: the model kinds (bi-encoder, cross-encoder), their losses, evaluation, data,
# mining and recipes; below the pipelines, which wrap its models (rerank over CrossEncoder, embeddings over
# SentenceTransformer), and export, which traces them
LAYERS["sentence"] = {*LAYERS["tasks"], "tasks", "retrieval"}
LAYERS["pipelines"] = {*LAYERS["tasks"], "tasks", "sentence"}
LAYERS["export"] = {*LAYERS["tasks"], "tasks", "sentence"}
# serving reads what a model directory holds from the task table (tasks.sources.inspect_source), and searches a
# multi-vector index given at start (bertkit serve --index: retrieval's indexes, below sentence)
LAYERS["serving"] = {*LAYERS["pipelines"], "pipelines", "retrieval"}
# the old import path of bertkit.sentence's and bertkit.retrieval's training API: re-exports only
LAYERS["embedding"] = {"sentence", "retrieval"}
# embedding a corpus at scale (bertkit embed MODEL --input CORPUS -o OUT): loads models as the pipelines do, reads
# the corpus with data's partitions and runs them on its executors, writes an embedding store
LAYERS["embed_job"] = {*LAYERS["pipelines"], "pipelines", "sentence", "retrieval", "data"}

#: Imports that break the table on purpose: (importing layer, imported layer) -> why. Keep it empty.
DEVIATIONS: dict[tuple[str, str], str] = {}


def _layer(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _module_name(path: Path) -> str:
    parts = ("bertkit", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target_layer(module: str, name: str | None = None) -> str | None:
    """The layer a bertkit module (or ``from module import name``) belongs to; None outside bertkit."""
    parts = module.split(".")
    if parts[0] != "bertkit":
        return None
    if len(parts) > 1:
        return parts[1]
    if name and ((SRC / f"{name}.py").is_file() or (SRC / name / "__init__.py").is_file()):
        return name
    return "__init__"


def _imported_layers(path: Path) -> set[str]:
    """Layers of every bertkit module ``path`` imports, anywhere in the file."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_target_layer(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            found |= {_target_layer(module, a.name) for a in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(_target_layer(node.args[0].value))
    return found - {None}


def test_every_layer_is_placed():
    layers = {_layer(p) for p in SRC.rglob("*.py")}
    assert layers <= LAYERS.keys(), f"place these in LAYERS (design §2): {sorted(layers - LAYERS.keys())}"


def test_dependency_direction():
    violations = []
    for path in sorted(SRC.rglob("*.py")):
        layer = _layer(path)
        allowed = LAYERS.get(layer, set())
        if allowed == EVERYTHING:
            continue
        bad = {t for t in _imported_layers(path) - allowed - UTILITIES - {layer} if (layer, t) not in DEVIATIONS}
        if bad:
            violations.append(f"{path.relative_to(SRC)} imports {sorted(bad)}")
    assert not violations, violations


def test_deviations_are_still_needed():
    used = {(_layer(p), t) for p in SRC.rglob("*.py") for t in _imported_layers(p)}
    assert not DEVIATIONS.keys() - used, f"no longer needed: {sorted(DEVIATIONS.keys() - used)}"


def test_table_is_one_way():
    """No cycle between layers: the table itself keeps the direction."""
    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        allowed = LAYERS.get(start, set())
        if allowed == EVERYTHING or start in seen:
            return False
        return goal in allowed or any(reaches(n, goal, seen | {start}) for n in allowed)

    cycles = [(a, b) for a, deps in LAYERS.items() if deps != EVERYTHING for b in deps if reaches(b, a)]
    assert not cycles, cycles


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_engine(module: str) -> bool:
    return module.startswith("bertkit.") and not module.startswith("bertkit.compat")


def _private_engine_uses(source: str, module: object = None) -> list[str]:
    """Where ``source`` (of ``module``, when imported) relies on a ``_private`` name of bertkit outside compat.

    Caught: importing one; ``name._x`` on a name imported from the engine (a module or a class);
    and, in a class whose bases include an engine class, ``self._x`` / ``cls._x`` resolving to a
    member an engine class defines, or a method overriding one.
    """
    tree = ast.parse(source)
    engine_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _is_engine(node.module):
            for alias in node.names:
                if _is_private(alias.name) or any(map(_is_private, node.module.split("."))):
                    found.append(f"line {node.lineno}: imports {node.module}.{alias.name}")
                engine_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_engine(alias.name):
                    engine_names.add(alias.asname or alias.name.split(".")[0])
                    if any(map(_is_private, alias.name.split("."))):
                        found.append(f"line {node.lineno}: imports {alias.name}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _is_private(node.attr)
              and node.value.id in engine_names):
            found.append(f"line {node.lineno}: uses {node.value.id}.{node.attr}")
    for class_node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        klass = getattr(module, class_node.name, None)
        if not isinstance(klass, type):
            continue

        def owner(name: str, klass: type = klass) -> type | None:
            return next((k for k in klass.__mro__ if name in vars(k)), None)

        for node in ast.walk(class_node):
            if isinstance(node, ast.FunctionDef) and _is_private(node.name) and any(
                    _is_engine(k.__module__) and node.name in vars(k) for k in klass.__mro__[1:]):
                found.append(f"line {node.lineno}: {class_node.name}.{node.name} overrides an engine method")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _is_private(node.attr)
                    and node.value.id in ("self", "cls") and (k := owner(node.attr)) is not None
                    and _is_engine(k.__module__)):
                found.append(f"line {node.lineno}: uses {node.value.id}.{node.attr} of {k.__qualname__}")
    return found


def test_compat_uses_only_public_engine_names():
    uses = []
    for path in sorted((SRC / "compat").rglob("*.py")):
        module = importlib.import_module(_module_name(path)) if path.name != "__main__.py" else None
        uses += [f"{path.relative_to(SRC)} {use}" for use in _private_engine_uses(path.read_text("utf-8"), module)]
    assert not uses, uses


def test_private_name_check_catches_each_kind():
    source = ("from bertkit.modeling.heads import _hidden\n"
              "import bertkit.modeling.losses as L\n"
              "from bertkit.modeling.base import BERTPreTrainedModel\n"
              "L._secret(1)\n"
              "class M(BERTPreTrainedModel):\n"
              "    def _private_hook(self):\n"
              "        return self._engine_only()\n")
    module = types.ModuleType("sample")

    class Engine(torch.nn.Module):
        __module__ = "bertkit.modeling.sample"

        def _private_hook(self): ...

        def _engine_only(self): ...

    module.M = type("M", (Engine,), {"__module__": "bertkit.compat.sample", "_private_hook": lambda self: None})
    uses = "\n".join(_private_engine_uses(source, module))
    for expected in ("imports bertkit.modeling.heads._hidden", "uses L._secret", "M._private_hook overrides",
                     "uses self._engine_only of"):
        assert expected in uses, uses


def test_modeling_loads_checkpoints_without_importing_weights(tmp_path):
    """modeling alone, in a fresh process: from_pretrained works (through the hook the root installs)."""
    code = f"""
import sys
import torch
from bertkit.modeling import BERT
from bertkit.config import BERTConfig
assert not [m for m in sys.modules if m.split('.')[:2] == ['bertkit', 'weights']], 'modeling imported weights'
model = BERT(BERTConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=16)).eval()
model.save_pretrained({str(tmp_path)!r})
loaded = BERT.from_pretrained({str(tmp_path)!r})
ids = torch.tensor([[1, 2, 3]])
torch.testing.assert_close(loaded(ids)[0], model(ids)[0])
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def _all_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_no_runtime_dependency_on_reference_libraries():
    for path in SRC.rglob("*.py"):
        for name in _all_imports(path):
            root = name.split(".")[0]
            assert root not in {"transformers", "pytorch_pretrained_bert", "d2l"}, f"{path} imports {name}"


def test_config_needs_no_torch():
    for module in ("config.py", "_config_types.py", "_config_hf.py", "io.py", "presets.py", "hooks.py"):
        assert not any(name.startswith("torch") for name in _all_imports(SRC / module)), module


def test_tokenization_imports_no_torch():
    code = ("import sys; from bertkit.tokenization import BERTTokenizerFast; "
            "assert 'torch' not in sys.modules, 'tokenization imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)
