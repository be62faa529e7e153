"""The install commands of README.md and docs/getting-started/install.md work outside an index that has bertkit
(it is on none): every ``pip install`` names the checkout or a wheel built from it, every extra named exists, the
install page describes every extra pyproject.toml defines, and the Dask recipe of
docs/how-to/pretrain-a-corpus.md says how the workers get bertkit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
INSTALL_PAGES = {name: (ROOT / name).read_text(encoding="utf-8")
                 for name in ("README.md", "docs/getting-started/install.md")}
CORPUS_PAGE = ROOT / "docs" / "how-to" / "pretrain-a-corpus.md"
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
#: the extras pyproject.toml defines (read without tomllib, which Python 3.10 lacks)
EXTRAS = set(re.findall(r"^([a-z]+) = \[", PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0],
                        re.MULTILINE))


def pip_installs(text: str) -> list[str]:
    """Each ``pip install ...`` in ``text``, up to its line's end, comment or closing backquote."""
    return [m.group(0).strip() for m in re.finditer(r"pip install [^`#\n]*", text)]


@pytest.mark.parametrize("page", sorted(INSTALL_PAGES))
def test_no_install_asks_an_index_for_bertkit(page):
    installs = pip_installs(INSTALL_PAGES[page])
    assert installs, f"{page} shows no pip install"
    for command in installs:
        targets = [word.strip("'\"") for word in command.split()[2:] if not word.startswith("-")]
        for target in targets:
            assert not re.match(r"bertkit(\[|$|[=<>])", target), f"{page}: {command}: no index has bertkit"
            assert (target.startswith((".", "dist/")) or re.match(r"[A-Za-z0-9_.-]+==", target)
                    ), f"{page}: {command}: install the checkout ('.[x]') or a built wheel (dist/...whl[x])"


@pytest.mark.parametrize("page", sorted(INSTALL_PAGES))
def test_every_extra_a_page_installs_exists(page):
    text = INSTALL_PAGES[page]
    named = {extra for group in re.findall(r"(?:\.|\.whl)\[([a-z,]+)\]", text) for extra in group.split(",")}
    assert named and named <= EXTRAS, named - EXTRAS


def test_the_install_page_describes_every_extra():
    rows = set(re.findall(r"^\| `([a-z]+)` \|", INSTALL_PAGES["docs/getting-started/install.md"], re.MULTILINE))
    assert rows == EXTRAS, f"missing rows: {EXTRAS - rows}, rows of no extra: {rows - EXTRAS}"


def test_the_dask_recipe_says_how_workers_get_bertkit():
    text = CORPUS_PAGE.read_text(encoding="utf-8")
    start = text.index("## On a Dask cluster")
    recipe = text[start:][:1500]
    assert "pip wheel . --no-deps -w dist/" in recipe and "every machine" in recipe
    assert "dist/bertkit-0.1.0-py3-none-any.whl[dask]" in recipe
    assert "dask scheduler" in recipe and "dask worker" in recipe
