"""The README's install commands work outside an index that has bertkit (it is on none): every ``pip install``
names the checkout or a wheel built from it, every extra it names exists, and the Dask recipe says how the
workers get bertkit."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
#: the extras pyproject.toml defines (read without tomllib, which Python 3.10 lacks)
EXTRAS = set(re.findall(r"^([a-z]+) = \[", PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0],
                        re.MULTILINE))


def pip_installs() -> list[str]:
    """Each ``pip install ...`` in the README, up to its line's end, comment or closing backquote."""
    return [m.group(0).strip() for m in re.finditer(r"pip install [^`#\n]*", README)]


def test_no_install_asks_an_index_for_bertkit():
    installs = pip_installs()
    assert installs
    for command in installs:
        targets = [word.strip("'\"") for word in command.split()[2:] if not word.startswith("-")]
        for target in targets:
            assert not re.match(r"bertkit(\[|$|[=<>])", target), f"{command}: no index has bertkit"
            assert (target.startswith((".", "dist/")) or re.match(r"[A-Za-z0-9_.-]+==", target)
                    ), f"{command}: install the checkout ('.[x]') or a built wheel (dist/...whl[x])"


def test_every_extra_the_readme_installs_exists():
    named = {extra for group in re.findall(r"(?:\.|\.whl)\[([a-z,]+)\]", README) for extra in group.split(",")}
    assert named and named <= EXTRAS, named - EXTRAS


def test_the_dask_recipe_says_how_workers_get_bertkit():
    recipe = README[README.index("*On a Dask cluster*"):][:1200]
    assert "pip wheel . --no-deps -w dist/" in recipe and "every machine" in recipe
    assert "dist/bertkit-0.1.0-py3-none-any.whl[dask]" in recipe
