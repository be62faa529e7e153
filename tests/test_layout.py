"""The dependency direction of design.md §2, checked on module-level imports.

Function-level (lazy) imports are allowed to point back: ``from_pretrained`` lives on the
model classes but its implementation is in ``bertkit.weights``.
"""

import ast
from pathlib import Path

import bertkit

SRC = Path(bertkit.__file__).parent

#: package -> internal packages its modules may import at module level
ALLOWED = {
    "config": {"config", "io"},
    "io": {"io"},
    "presets": {"presets", "config"},
    "tokenization": {"tokenization", "io"},
    "resources": {"resources"},
    "data": {"data", "tokenization", "io", "modeling"},
    "training": {"training", "io"},
    "modeling": {"modeling", "config", "presets", "io"},
    "weights": {"weights", "config", "modeling", "io", "tokenization"},
}


def _top_level_internal_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:  # module level only
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bertkit."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bertkit.")}
    return found


def test_dependency_direction():
    violations = []
    for path in SRC.rglob("*.py"):
        part = path.relative_to(SRC).parts[0].removesuffix(".py")
        if part not in ALLOWED:
            continue
        bad = _top_level_internal_imports(path) - ALLOWED[part]
        if bad:
            violations.append(f"{path.relative_to(SRC)} imports {sorted(bad)}")
    assert not violations, violations


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
    for module in ("config.py", "io.py", "presets.py"):
        assert not any(name.startswith("torch") for name in _all_imports(SRC / module)), module


def test_tokenization_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from bertkit.tokenization import BERTTokenizerFast; "
            "assert 'torch' not in sys.modules, 'tokenization imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)
