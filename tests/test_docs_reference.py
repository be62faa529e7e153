"""The generated Reference section (docs/hooks/reference.py) covers everything, without a docs build:
every public name has a docstring and a page that renders it, every subcommand and option has its page,
the HTTP contract's route table is the app's, and config.md lists every field."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def public_names(hook) -> list[tuple[str, str]]:
    return [(module, name) for module in hook.public_modules() for name in hook._exports(module)]


def test_public_modules_include_the_root_and_the_subpackages(hook):
    modules = set(hook.public_modules())
    assert {"bertkit", "bertkit.sentence", "bertkit.sentence.losses", "bertkit.sentence.evaluation",
            "bertkit.retrieval", "bertkit.training", "bertkit.embedding", "bertkit.compat.d2l",
            "bertkit.compat.pytorch_pretrained_bert", "bertkit.models"} <= modules
    assert "bertkit.cli" not in modules


def test_every_public_name_has_a_docstring(hook):
    missing = [f"{module}.{name}" for module, name in public_names(hook) if not hook.docstring(module, name)]
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_name_is_rendered_on_a_page(hook):
    """Each name is rendered (a ``:::`` block, a generated row, or its own module page) on its home page, and
    every page that lists it links there."""
    pages = {module: hook.python_page(module) for module in hook.public_modules()}
    unrendered = []
    for module, name in public_names(hook):
        home, path = hook.home_pages()[module, name], hook.defined_at(module, name)
        page = pages[home]
        if path in pages:  # a module: its own page
            continue
        if f"::: {path}\n" not in page and f'<span id="{path}"></span>' not in page:
            unrendered.append(f"{module}.{name} (home {home})")
        assert f"[`{name}`]({home}.md#{path})" in pages[module] or home == module, (module, name)
    assert not unrendered, f"public names without a page that renders them: {unrendered}"


def test_every_public_module_has_a_page_in_the_index(hook):
    pages = hook.reference_pages()
    index = pages["reference/python/index.md"]
    for module in hook.public_modules():
        assert f"reference/python/{module}.md" in pages
        assert f"]({module}.md)" in index


def test_every_subcommand_and_option_is_on_its_page(hook):
    from bertkit.cli import COMMANDS
    from bertkit.cli.reference import commands, page_file

    pages = hook.cli_pages()
    found = commands()
    assert {command.top for command in found} == set(COMMANDS)
    names = {command.name for command in found}
    assert {"finetune classify", "finetune embed", "finetune rerank", "data create", "data info", "embed mine",
            "tokenizer train", "predict MODEL_DIR"} <= names
    for command in found:
        page = pages[f"reference/cli/{page_file(command.top)}"]
        assert f"`bertkit {command.name}`" in page, command.name
        assert f"](cli/{page_file(command.top)}" not in page
        section = page.split(f"`bertkit {command.name}`", 1)[1]
        for action in command.parser._actions:
            if isinstance(action, argparse._SubParsersAction):  # listed as links to the nested sections
                continue
            for flag in action.option_strings or [action.metavar or action.dest]:
                assert f"`{flag}`" in section, f"{command.name}: {flag} missing from its page"
        assert f"bertkit {command.name}" in pages["reference/cli/index.md"]


def test_a_delegated_subcommand_has_its_own_options(hook):
    """``finetune embed`` is a placeholder in finetune's parser: its page shows finetune_embed's real flags."""
    from bertkit.cli.reference import subcommand_parsers

    parsers = subcommand_parsers()
    flags = {flag for action in parsers["finetune embed"]._actions for flag in action.option_strings}
    assert {"--loss", "--matryoshka-dims"} <= flags
    assert parsers["embed mine"].prog == "bertkit embed mine"


def test_option_rows_carry_default_choices_and_help(hook):
    page = hook.cli_pages()["reference/cli/serve.md"]
    row = next(line for line in page.splitlines() if line.startswith("| `--port`"))
    assert "`8080`" in row
    row = next(line for line in page.splitlines() if line.startswith("| `--dtype`"))
    assert "`bf16`" in row and "number format" in row


def contract_routes(text: str) -> set[tuple[str, str]]:
    """(method, path) of each route in CONTRACT.md's Routes table; a path without a method takes the one
    before it (``GET /``, ``/static/*``)."""
    table = text.split("## Routes", 1)[1].split("\n## ", 1)[0]
    routes = set()
    for line in table.splitlines()[3:]:
        if not line.startswith("|"):
            continue
        method = None
        for item in re.findall(r"`([^`]+)`", line.split("|")[1]):
            parts = item.split()
            method, path = (parts[0], parts[1]) if len(parts) == 2 else (method, parts[0])
            routes.add((method, path))
    return routes


def app_routes(app) -> set[tuple[str, str]]:
    from starlette.routing import Mount

    routes = set()
    for route in app.routes:
        if isinstance(route, Mount):
            routes.add(("GET", route.path + "/*"))
        else:
            routes.update((method, route.path) for method in route.methods - {"HEAD"})
    return routes


def test_contract_route_table_is_the_apps(tmp_path, hook):
    """CONTRACT.md (reference/http.md) lists exactly the routes the app registers, method and path."""
    pytest.importorskip("fastapi")
    import bertkit
    from bertkit.serving import create_app

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    bertkit.BERTTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(tmp_path)
    config = bertkit.BERTConfig(vocab_size=7, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                                intermediate_size=37, max_position_embeddings=32)
    bertkit.BERT(config).save_pretrained(tmp_path)
    documented = contract_routes(hook.CONTRACT.read_text(encoding="utf-8"))
    registered = app_routes(create_app(tmp_path, task="embeddings"))
    assert registered - documented == set(), "routes the app has and CONTRACT.md does not"
    assert documented - registered == set(), "routes CONTRACT.md lists and the app does not have"
    assert "## Routes" in hook.http_page() and "`POST /embed`" in hook.http_page()


def test_config_page_lists_every_field(hook):
    page = hook.config_page()
    for _, spec, _ in hook.CONFIG_CLASSES:
        module, name = spec.split(":")
        cls = getattr(importlib.import_module(module), name)
        section = page.split(f"`{module}.{name}`", 1)[1].split("\n## ", 1)[0]
        for field in dataclasses.fields(cls):
            assert f"| `{field.name}` |" in section, f"{name}.{field.name} missing from config.md"


def test_config_fields_are_documented(hook):
    undocumented = [f"{spec}.{name}" for _, spec, _ in hook.CONFIG_CLASSES
                    for name, _, _, doc in hook.config_fields(spec) if not doc]
    assert not undocumented, f"config fields without documentation: {undocumented}"
