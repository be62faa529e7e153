"""The shape of a source tree, for issue 39's closing note: lines, the longest functions, the widest signatures and
the import graph's circles.

    python benchmarks/shape_metrics.py                          # src/bertkit: Markdown on stdout
    python benchmarks/shape_metrics.py --json benchmarks/results/shape_metrics_before.json
    python benchmarks/shape_metrics.py --compare benchmarks/results/shape_metrics_before.json AFTER.json

Read from the files' syntax trees (nothing is imported):

* lines: non-blank lines of every ``*.py``, in all and per package (a package is what follows the root: the
  subpackage ``bertkit.tasks`` or the top-level module ``bertkit.config``, as tests/test_layout.py's layers);
* the 15 longest functions (first line to last, decorators excluded; methods and nested functions too, named
  ``file:Class.method`` / ``file:outer.inner``) and the 15 widest signatures (parameters, ``self`` / ``cls`` of
  a method not counted, ``*args`` and ``**kwargs`` counted);
* the import graph: an edge for every ``import`` / ``from ... import`` of a module of the tree (relative ones
  resolved; ``from P import X`` is the module ``P.X`` when there is one, else ``P``). *Module level*: run when the
  module is imported (``if TYPE_CHECKING:`` blocks left out); *lazy*: inside a function. The circles are the
  strongly connected components with more than one member, between modules (each with one shortest cycle) and
  between packages, of the module-level graph and of the graph with the lazy imports added.

``--compare BEFORE AFTER`` prints the two side by side (Markdown).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # benchmarks/record.py: the results files' format

ROOT = Path(__file__).resolve().parent.parent
TOP = 15


# ---------------------------------------------------------------------------- reading the tree
def modules(tree: Path) -> dict[str, Path]:
    """Every module of the package at ``tree``, by dotted name (``__init__.py`` as its package)."""
    found = {}
    for path in sorted(tree.rglob("*.py")):
        parts = path.relative_to(tree.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def package_of(module: str, root: str) -> str:
    """``root.X`` for a module under ``root.X`` (``root`` itself for the root's ``__init__``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else root


def _functions(node: ast.AST, prefix: str = ""):
    """(qualname, function node) of every function under ``node``, methods and nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            yield name, child, isinstance(node, ast.ClassDef)
            yield from _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> int:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [p.arg for p in (a.vararg, a.kwarg) if p]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static and names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(node: ast.AST, lazy: bool = False):
    """(imported name, names taken from it, lazy?) of every import under ``node``; ``if TYPE_CHECKING:`` skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for orelse in child.orelse:
                yield from imports(ast.Module(body=[orelse], type_ignores=[]), lazy)
            continue
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield alias.name, (), 0, lazy
        elif isinstance(child, ast.ImportFrom):
            yield child.module or "", tuple(a.name for a in child.names), child.level, lazy
        else:
            yield from imports(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _resolve(module: str, is_package: bool, name: str, level: int) -> str:
    if not level:
        return name
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def edges(found: dict[str, Path]) -> tuple[set, set]:
    """(module-level edges, lazy edges) between the tree's modules; an edge to oneself is dropped."""
    eager, lazy = set(), set()
    for module, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, taken, level, is_lazy in imports(tree):
            target = _resolve(module, path.name == "__init__.py", name, level)
            targets = [f"{target}.{t}" if f"{target}.{t}" in found else target for t in taken] or [target]
            for t in targets:
                while t and t not in found:  # import a.b.c of a module that is not ours: its nearest package
                    t = t.rpartition(".")[0]
                if t and t != module:
                    (lazy if is_lazy else eager).add((module, t))
    return eager, lazy - eager


# ---------------------------------------------------------------------------- circles
def components(nodes: list[str], graph: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's, iterative), sorted."""
    succ = {n: sorted({b for a, b in graph if a == n}) for n in nodes}
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter[0]
                counter[0] += 1
                stack.append(node)
                on.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                member = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    member.append(w)
                    if w == node:
                        break
                if len(member) > 1:
                    found.append(sorted(member))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found, key=lambda c: (-len(c), c))


def shortest_cycle(members: list[str], graph: set[tuple[str, str]]) -> list[str]:
    """One shortest cycle through the component's first member (breadth first), closed: [a, ..., a]."""
    inside = set(members)
    succ = {n: sorted(b for a, b in graph if a == n and b in inside) for n in members}
    start = members[0]
    parent, queue = {start: None}, deque([start])
    while queue:
        node = queue.popleft()
        for nxt in succ[node]:
            if nxt == start:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return []


def circles(found: dict[str, Path], graph: set, root: str) -> dict:
    between_modules = components(sorted(found), graph)
    packages = sorted({package_of(m, root) for m in found})
    package_graph = {(package_of(a, root), package_of(b, root)) for a, b in graph} - {(p, p) for p in packages}
    between_packages = components(packages, package_graph)
    return {"module_cycles": len(between_modules),
            "modules": [{"members": c, "example": shortest_cycle(c, graph)} for c in between_modules],
            "package_cycles": len(between_packages),
            "packages": [{"members": c, "example": shortest_cycle(c, package_graph)} for c in between_packages]}


# ---------------------------------------------------------------------------- the metrics
def measure(tree: Path) -> dict:
    """Every metric of the module doc for the package at ``tree`` (a directory holding ``__init__.py``)."""
    root = tree.name
    found = modules(tree)
    lines, functions = {}, []
    for module, path in found.items():
        text = path.read_text(encoding="utf-8")
        package = package_of(module, root)
        lines[package] = lines.get(package, 0) + sum(1 for line in text.splitlines() if line.strip())
        relative = path.relative_to(tree.parent).as_posix()
        for qualname, node, method in _functions(ast.parse(text, str(path))):
            first = node.lineno
            functions.append({"function": f"{relative}:{qualname}", "lines": node.end_lineno - first + 1,
                              "parameters": parameter_count(node, method)})
    eager, lazy = edges(found)
    longest = sorted(functions, key=lambda f: (-f["lines"], f["function"]))
    widest = sorted(functions, key=lambda f: (-f["parameters"], f["function"]))
    return {"tree": tree.as_posix(), "modules": len(found), "functions": len(functions),
            "lines": sum(lines.values()), "lines_per_package": dict(sorted(lines.items(), key=lambda kv: -kv[1])),
            "functions_over_100_lines": sum(f["lines"] > 100 for f in functions),
            "longest_functions": [{k: f[k] for k in ("function", "lines")} for f in longest[:TOP]],
            "widest_signatures": [{k: f[k] for k in ("function", "parameters")} for f in widest[:TOP]],
            "imports": {"module_level": len(eager), "lazy": len(lazy)},
            "circles": circles(found, eager, root),
            "circles_with_lazy": circles(found, eager | lazy, root)}


# ---------------------------------------------------------------------------- printing
def _cycles_text(c: dict) -> list[str]:
    out = [f"- between packages: {c['package_cycles']}"]
    out += [f"  - {' -> '.join(p['example'])} (members: {', '.join(p['members'])})" for p in c["packages"]]
    out += [f"- between modules: {c['module_cycles']}"]
    out += [f"  - {' -> '.join(m['example'])}" + (f" (+{len(m['members']) - len(m['example']) + 1} more members)"
                                                 if len(m["members"]) > len(m["example"]) - 1 else "")
            for m in c["modules"]]
    return out


def markdown(m: dict) -> str:
    parts = [f"# Shape of {m['tree']}",
             f"{m['lines']:,} non-blank lines in {m['modules']} modules, {m['functions']} functions "
             f"({m['functions_over_100_lines']} over 100 lines); {m['imports']['module_level']} module-level and "
             f"{m['imports']['lazy']} lazy internal imports.",
             "## Lines per package", record.markdown([{"package": k, "lines": v}
                                                      for k, v in m["lines_per_package"].items()]),
             f"## The {TOP} longest functions", record.markdown(m["longest_functions"]),
             f"## The {TOP} widest signatures", record.markdown(m["widest_signatures"]),
             "## Import circles (module level)", "\n".join(_cycles_text(m["circles"])),
             "## Import circles (lazy imports included)", "\n".join(_cycles_text(m["circles_with_lazy"]))]
    return "\n\n".join(parts) + "\n"


def _side_by_side(before: list[dict], after: list[dict], key: str, value: str) -> str:
    rows = [{f"before: {key}": b.get(key) if b else None, value: b.get(value) if b else None,
             f"after: {key}": a.get(key) if a else None, f"{value} ": a.get(value) if a else None}
            for b, a in zip(before + [None] * (len(after) - len(before)), after + [None] * (len(before) - len(after)))]
    return record.markdown(rows)


def compare(before: dict, after: dict) -> str:
    b_lines, a_lines = before["lines_per_package"], after["lines_per_package"]
    totals = [{"": name, "before": f(before), "after": f(after)} for name, f in (
        ("non-blank lines", lambda m: m["lines"]), ("modules", lambda m: m["modules"]),
        ("functions", lambda m: m["functions"]), ("functions over 100 lines", lambda m: m["functions_over_100_lines"]),
        ("module-level internal imports", lambda m: m["imports"]["module_level"]),
        ("lazy internal imports", lambda m: m["imports"]["lazy"]),
        ("circles between packages (module level)", lambda m: m["circles"]["package_cycles"]),
        ("circles between modules (module level)", lambda m: m["circles"]["module_cycles"]),
        ("circles between packages (lazy included)", lambda m: m["circles_with_lazy"]["package_cycles"]),
        ("circles between modules (lazy included)", lambda m: m["circles_with_lazy"]["module_cycles"]))]
    packages = [{"package": p, "before": b_lines.get(p), "after": a_lines.get(p),
                 "change": (a_lines.get(p) or 0) - (b_lines.get(p) or 0)}
                for p in sorted({*b_lines, *a_lines}, key=lambda p: -max(b_lines.get(p, 0), a_lines.get(p, 0)))]
    parts = [f"# Shape: {before['tree']} before and after", record.markdown(totals),
             "## Lines per package", record.markdown(packages),
             f"## The {TOP} longest functions",
             _side_by_side(before["longest_functions"], after["longest_functions"], "function", "lines"),
             f"## The {TOP} widest signatures",
             _side_by_side(before["widest_signatures"], after["widest_signatures"], "function", "parameters")]
    for title, key in (("module level", "circles"), ("lazy imports included", "circles_with_lazy")):
        parts += [f"## Import circles ({title})", "Before:\n\n" + "\n".join(_cycles_text(before[key])),
                  "After:\n\n" + "\n".join(_cycles_text(after[key]))]
    return "\n\n".join(parts) + "\n"


def _load(path: Path) -> dict:
    data = json.loads(path.read_text())
    return data.get("metrics", data)  # a results file keeps the metrics under "metrics"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, default=ROOT / "src" / "bertkit",
                        help="the package directory (default: src/bertkit)")
    parser.add_argument("--json", type=Path, help="also write the metrics here (a benchmarks/results file)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="print two --json files side by side")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(*(_load(p) for p in args.compare)), end="")
        return 0
    if not (args.tree / "__init__.py").exists():
        parser.error(f"{args.tree} is not a package directory (no __init__.py); give the package, e.g. src/bertkit")
    metrics = measure(args.tree.resolve())
    metrics["tree"] = (args.tree.resolve().relative_to(ROOT).as_posix() if args.tree.resolve().is_relative_to(ROOT)
                       else args.tree.as_posix())
    print(markdown(metrics), end="")
    if args.json:
        sys.path.insert(0, str(ROOT / "src"))  # record.write_result writes with bertkit.io
        tables = [record.table("Size", [{"non-blank lines": metrics["lines"], "modules": metrics["modules"],
                                         "functions": metrics["functions"],
                                         "over 100 lines": metrics["functions_over_100_lines"],
                                         "package circles": metrics["circles"]["package_cycles"],
                                         "module circles": metrics["circles"]["module_cycles"],
                                         "module circles (lazy too)": metrics["circles_with_lazy"]["module_cycles"]}]),
                  record.table(f"The {TOP} longest functions", metrics["longest_functions"]),
                  record.table(f"The {TOP} widest signatures", metrics["widest_signatures"])]
        record.write_result(args.json, args.json.stem, tables, title=f"Source shape ({args.json.stem})",
                            data={"metrics": metrics})
    return 0


if __name__ == "__main__":
    sys.exit(main())
