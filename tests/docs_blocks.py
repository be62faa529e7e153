"""The docs' Python code blocks: found in Markdown (:func:`parse`) and run as a page (:func:`run_page`).

The conventions every page of ``docs/`` and ``README.md`` follows (tests/test_docs_examples.py runs them all):

* every fenced ```` ```python ```` block runs; the blocks of one page run in order in one namespace (as a notebook),
  in a fresh temporary working directory holding the fixtures ``all-MiniLM-L6-v2/``, ``bert-mlm/`` and ``emma.txt``
  (see the test module), with ``BERTKIT_DTYPE=fp32``, on the CPU, without network;
* ``<!-- docs-setup`` ... ``-->`` (an HTML comment, invisible on the site) holds Python run before the page's
  blocks, in the same namespace and directory;
* an HTML comment right before a fence (blank lines between are allowed) marks the block:
  ``<!-- docs-test: slow -->`` (minutes: only in the slow lane, ``make test-slow``, which runs the whole page),
  ``<!-- docs-test: server -->`` (a live ``bertkit serve all-MiniLM-L6-v2``; ``http://127.0.0.1:8080`` in the block
  becomes its address), ``<!-- docs-test: requires=cuda -->`` (skipped, with that reason, without a GPU). Any other
  marker is an error: a typo must never skip a block;
* a ```` ```text ```` block directly after a Python block (blank lines only between) is that block's printed output:
  stdout must match it line by line (trailing spaces ignored; a line ``...`` matches any number of lines, ``...``
  inside a line matches any text).

A failure names the page and the block's first line, shows the block and the traceback (whose line numbers are the
page's: each block is compiled at its own line of the Markdown file).
"""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: the markers a block may carry; ``requires=`` takes a name of :data:`REQUIREMENTS`
MARKERS = ("slow", "server")
REQUIREMENTS = ("cuda",)
SERVER_URL = "http://127.0.0.1:8080"
#: other names of Python a fence could use to slip past the runner: refused, with the fix
NOT_PYTHON = ("py", "python3", "pycon", "ipython", "py3")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)\s*(?P<info>[^\n`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<value>.*?)\s*-->\s*$")
_SETUP_START = re.compile(r"^\s*<!--\s*docs-setup\s*$")


class DocsFormatError(ValueError):
    """A page breaks the conventions (an unknown marker, an unclosed fence or comment, output without code)."""


@dataclass
class Block:
    """One Python block: its code (dedented), the page line of its first code line, and how it is run."""

    code: str
    line: int
    slow: bool = False
    server: bool = False
    requires: str | None = None
    output: str | None = None  # the ```text block after it: expected stdout
    setup: bool = False  # hidden <!-- docs-setup --> code


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def has_slow(self) -> bool:
        return any(b.slow for b in self.blocks)


def parse(text: str, path: Path | str = "<page>") -> Page:
    """The page's setup code and Python blocks, in order, with their markers and shown outputs."""
    page = Page(Path(path))
    lines = text.splitlines()
    pending: list[str] = []  # markers waiting for the next fence
    last_python: Block | None = None  # a ```text block right after it is its output
    i = 0
    while i < len(lines):
        line = lines[i]
        if _SETUP_START.match(line):
            end = _closing(lines, i + 1, lambda s: s.strip() == "-->", path, i, "<!-- docs-setup")
            page.blocks.append(Block(textwrap.dedent("\n".join(lines[i + 1:end])), i + 2, setup=True))
            i, last_python = end + 1, None
            continue
        marker = _MARKER.match(line)
        if marker:
            pending.append(_checked_marker(marker["value"], path, i + 1))
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            indent, mark = fence["indent"], fence["fence"]
            language = fence["info"].split()[0].lower() if fence["info"].strip() else ""
            end = _closing(lines, i + 1, lambda s, m=mark: s.strip().startswith(m) and not s.strip()[len(m):].strip(),
                           path, i, mark)
            body = "\n".join(s[len(indent):] if s.startswith(indent) else s.lstrip() for s in lines[i + 1:end])
            if language in NOT_PYTHON:
                raise DocsFormatError(f"{path}:{i + 1}: a ```{language} fence: write ```python, so the block runs "
                                      "in the tests (or ```text / ```bash for what is not Python)")
            if language == "python":
                block = Block(body, i + 2)
                for value in pending:
                    if value.startswith("requires="):
                        block.requires = value.split("=", 1)[1]
                    else:
                        setattr(block, value, True)
                page.blocks.append(block)
                last_python = block
            elif language == "text" and last_python is not None and not pending:
                last_python.output = body
                last_python = None
            else:
                if pending:
                    raise DocsFormatError(f"{path}:{i + 1}: docs-test markers {pending} stand before a ```{language} "
                                          "block; they only apply to ```python blocks")
                last_python = None
            pending = []
            i = end + 1
            continue
        if line.strip():
            if pending:
                raise DocsFormatError(f"{path}:{i + 1}: docs-test markers {pending} must stand right before a "
                                      "```python fence (blank lines only between)")
            last_python = None
        i += 1
    if pending:
        raise DocsFormatError(f"{path}: docs-test markers {pending} at the end of the page, before no block")
    return page


def _closing(lines: list[str], start: int, is_end: Callable[[str], bool], path, opened: int, what: str) -> int:
    for j in range(start, len(lines)):
        if is_end(lines[j]):
            return j
    raise DocsFormatError(f"{path}:{opened + 1}: {what} is never closed")


def _checked_marker(value: str, path, line: int) -> str:
    if value in MARKERS:
        return value
    if value.startswith("requires=") and value.split("=", 1)[1] in REQUIREMENTS:
        return value
    raise DocsFormatError(f"{path}:{line}: unknown docs-test marker {value!r}; use one of "
                          f"{', '.join(MARKERS)}, requires=({'|'.join(REQUIREMENTS)})")


# --------------------------------------------------------------------------------------------- shown output

def output_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` stdout matches the shown ``expected`` (trailing spaces and blank edges ignored; a line
    ``...`` matches any number of lines, ``...`` inside a line any text)."""
    want = [s.rstrip() for s in expected.strip("\n").splitlines()]
    got = [s.rstrip() for s in actual.strip("\n").splitlines()]
    patterns = [None if s.strip() == "..." else re.compile(".*".join(map(re.escape, s.split("..."))) + r"\Z")
                for s in want]
    reachable = {0}  # positions in got after matching a prefix of the patterns
    for pattern in patterns:
        if pattern is None:
            reachable = set(range(min(reachable), len(got) + 1)) if reachable else set()
        else:
            reachable = {j + 1 for j in reachable if j < len(got) and pattern.match(got[j])}
        if not reachable:
            return False
    return len(got) in reachable


# --------------------------------------------------------------------------------------------- running

class BlockFailed(AssertionError):
    """A block raised, or printed other than its shown output."""


def run_page(page: Page, namespace: dict | None = None, *, slow: bool = False, server_url: str | None = None,
             has: Callable[[str], bool] = lambda requirement: False) -> list[str]:
    """Run the page's setup and blocks in order in one namespace (in the current directory); the slow blocks only
    with ``slow``. Returns what was left out and why (``requires=`` not met); raises :class:`BlockFailed`."""
    namespace = {"__name__": "__docs__"} if namespace is None else namespace
    left_out = []
    for block in page.blocks:
        if block.slow and not slow:
            continue
        if block.requires and not has(block.requires):
            left_out.append(f"{page.path}:{block.line}: needs {block.requires}")
            continue
        code = block.code
        if block.server:
            if server_url is None:
                raise BlockFailed(f"{page.path}:{block.line}: a server block, but no server was started")
            code = code.replace(SERVER_URL, server_url)
        stdout = io.StringIO()
        try:
            compiled = compile("\n" * (block.line - 1) + code, str(page.path), "exec")
            with contextlib.redirect_stdout(stdout):
                exec(compiled, namespace)
        except Exception:
            raise BlockFailed(_report(page, block, "raised", traceback.format_exc(), stdout.getvalue())) from None
        if block.output is not None and not output_matches(block.output, stdout.getvalue()):
            raise BlockFailed(_report(page, block, "printed other than its shown output",
                                      f"shown:\n{block.output}\n\nprinted:\n{stdout.getvalue()}", ""))
    return left_out


def _report(page: Page, block: Block, what: str, detail: str, printed: str) -> str:
    kind = "docs-setup code" if block.setup else "block"
    shown = textwrap.indent(block.code, "    ")
    printed = f"\nit printed:\n{printed}" if printed else ""
    return f"{page.path}:{block.line}: the {kind} {what}:\n{shown}\n\n{detail}{printed}"
