"""The docs' code-block runner itself (tests/docs_blocks.py): what counts as a block, a marker, shown output."""

from __future__ import annotations

import pytest

from docs_blocks import BlockFailed, DocsFormatError, output_matches, parse, run_page

PAGE = '''# A page

<!-- docs-setup
hidden = 41
-->

Some prose.

```python
value = hidden + 1
print("value", value)
```

```text
value 42
```

<!-- docs-test: slow -->

```python
print("slow", value)
```

```bash
echo not run
```

<!-- docs-test: requires=cuda -->
```python
import torch
torch.zeros(1, device="cuda")
```

<!-- docs-test: server -->
```python
print("http://127.0.0.1:8080/embed")
```
'''


def test_blocks_markers_and_outputs_are_found_with_their_lines():
    page = parse(PAGE, "page.md")
    setup, first, slow, cuda, server = page.blocks
    assert setup.setup and setup.code.strip() == "hidden = 41" and setup.line == 4
    assert first.line == 10 and first.output == "value 42" and not first.slow
    assert slow.slow and slow.output is None
    assert cuda.requires == "cuda" and server.server and page.has_slow


def test_a_page_runs_in_one_namespace_and_leaves_out_only_what_it_says(capsys):
    page = parse(PAGE, "page.md")
    left_out = run_page(page, server_url="http://127.0.0.1:9999", has=lambda r: False)
    assert left_out == ["page.md:30: needs cuda"]
    namespace: dict = {}
    run_page(page, namespace, slow=True, server_url="http://127.0.0.1:9999")
    assert namespace["value"] == 42


@pytest.mark.parametrize("marker", ["slwo", "skip", "requires=tpu", ""])
def test_an_unknown_marker_is_an_error_never_a_skip(marker):
    with pytest.raises(DocsFormatError, match=r"page.md:1: unknown docs-test marker"):
        parse(f"<!-- docs-test: {marker} -->\n```python\nprint(1)\n```\n", "page.md")


def test_a_marker_away_from_a_python_fence_or_an_unclosed_fence_is_an_error():
    with pytest.raises(DocsFormatError, match="right before"):
        parse("<!-- docs-test: slow -->\nprose\n```python\nx = 1\n```\n", "p.md")
    with pytest.raises(DocsFormatError, match="only apply to ```python"):
        parse("<!-- docs-test: slow -->\n```bash\nls\n```\n", "p.md")
    with pytest.raises(DocsFormatError, match=r"p.md:1: ``` is never closed"):
        parse("```python\nx = 1\n", "p.md")


def test_a_failing_block_names_the_page_and_line_and_shows_the_block():
    page = parse("text\n\n```python\nx = 1\ny = x / 0\n```\n", "/docs/p.md")
    with pytest.raises(BlockFailed) as failure:
        run_page(page)
    message = str(failure.value)
    assert message.startswith("/docs/p.md:4: the block raised") and "y = x / 0" in message
    assert "ZeroDivisionError" in message and 'line 5' in message


def test_printed_output_must_match_the_shown_output():
    page = parse("```python\nprint('a')\nprint('b')\n```\n\n```text\na\nc\n```\n", "p.md")
    with pytest.raises(BlockFailed, match="printed other than its shown output"):
        run_page(page)
    assert run_page(parse("```python\nprint('a')\n```\nprose\n```text\nnot output\n```\n")) == []


@pytest.mark.parametrize(("shown", "printed", "ok"), [
    ("a\nb", "a\nb  \n", True),
    ("a\n...\nd", "a\nb\nc\nd", True),
    ("a\n...\nd", "a\nd", True),
    ("took ... s", "took 1.25 s", True),
    ("took ... s", "took 1.25 ms!", False),
    ("a\nb", "a\nb\nc", False),
    ("a\n...", "a\nanything\nat all", True),
    ("x [1.0]", "x [1.0]", True),
    ("...\nz", "a\nb", False),
])
def test_output_wildcards(shown, printed, ok):
    assert output_matches(shown, printed) is ok


@pytest.mark.parametrize("language", ["py", "python3", "pycon"])
def test_python_under_another_fence_name_is_refused(language):
    with pytest.raises(DocsFormatError, match=f"p.md:2: a ```{language} fence: write ```python"):
        parse(f"text\n```{language}\nx = 1\n```\n", "p.md")
