"""MkDocs hook: the Reference section, generated from the code at build time so it cannot drift.

Pages it adds (virtual files; nothing is written under docs/):

- ``reference/index.md``: what the reference holds.
- ``reference/python/index.md`` and ``reference/python/<module>.md`` for ``bertkit`` and every public module
  (:func:`public_modules`): a table of the module's ``__all__`` and, for each name whose home this page is
  (:func:`home_pages`), a mkdocstrings block ``::: <where it is defined>``; names generated at run time
  (the ``bert_for_<task>_<size>`` factories), which static analysis cannot see, get a table row from their
  runtime docstring instead.
- ``reference/cli/index.md`` and ``reference/cli/<subcommand>.md`` from the real argparse parsers
  (:mod:`bertkit.cli.reference`).
- ``reference/http.md``: ``src/bertkit/serving/CONTRACT.md``, included as it stands at build time.
- ``reference/config.md``: the fields of the dataclasses users set (:data:`CONFIG_CLASSES`).

The page functions (:func:`reference_pages` and the ones it calls) need no MkDocs, so the tests call them too.
:class:`SphinxComments` is a griffe extension (named in mkdocs.yml) that gives mkdocstrings what Sphinx
would show: ``#:`` comments as the docstrings of the attributes they precede, and ``:role:`target``` as
code.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import importlib
import inspect
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
if str(SRC) not in sys.path:  # document the code of this checkout
    sys.path.insert(0, str(SRC))

import griffe  # noqa: E402

from bertkit.cli.reference import roles_as_code  # noqa: E402

#: the dataclasses of reference/config.md: (title, "module:Class", what it configures)
CONFIG_CLASSES = [
    ("Model: BERTConfig", "bertkit.config:BERTConfig",
     "Architecture of a model of any family: `BERTConfig(...)`, a preset (`bertkit.preset_config`) or a "
     "family's config factory (`bertkit.RoBERTaConfig(...)` etc., which return a `BERTConfig`). Saved as the "
     "checkpoint's `config.json`."),
    ("Training: TrainingConfig", "bertkit.training.config:TrainingConfig",
     "Optimisation, schedule, precision and bookkeeping of the one `Trainer` (pretraining, fine-tuning, "
     "embedding and reranker training). Recorded in the run directory's `run.json` under `training`."),
    ("Serving: ServeSettings", "bertkit.serving.settings:ServeSettings",
     "The settings of `bertkit serve` (each field is the flag of the same name) and of "
     "`bertkit.serving.create_app(model, **settings)`."),
]

HEADER = "<!-- generated at build time by docs/hooks/reference.py; edit the code, not this page -->"


# --- griffe ------------------------------------------------------------------------------------------------------


class SphinxComments(griffe.Extension):
    """``#: text`` lines right above an attribute become its docstring (Sphinx's convention, which the code
    uses); ``:class:`~a.b.C``` and the other roles become code spans (``C``; the full target without ``~``)."""

    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            lines = agent.lines_collection[agent.filepath]
        except (AttributeError, KeyError):  # inspected, not visited: no source lines
            return
        comment = []
        index = attr.lineno - 2
        while 0 <= index < len(lines) and lines[index].strip().startswith("#:"):
            comment.insert(0, lines[index].strip()[2:].strip())
            index -= 1
        if comment:
            attr.docstring = griffe.Docstring("\n".join(comment), parent=attr)

    def on_object(self, *, obj, loader, **kwargs) -> None:  # once the tree is built: the ``#:`` ones too
        if obj.docstring is not None:
            obj.docstring.value = roles_as_code(obj.docstring.value)

    def on_package(self, *, pkg, loader, **kwargs) -> None:  # the top package is no on_object
        self.on_object(obj=pkg, loader=loader)


@functools.lru_cache(maxsize=1)
def _griffe_package() -> griffe.Module:
    return griffe.load("bertkit", search_paths=[str(SRC)], resolve_aliases=False,
                       extensions=griffe.load_extensions(SphinxComments))


def griffe_object(path: str) -> griffe.Object | None:
    """The statically analysed object at dotted ``path`` (``bertkit.config.BERTConfig``), aliases followed;
    None where static analysis does not see it (a name made at run time)."""
    try:
        found = _griffe_package()[path.removeprefix("bertkit").lstrip(".")] if path != "bertkit" else \
            _griffe_package()
        return found.final_target if found.is_alias else found
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


# --- the Python API ----------------------------------------------------------------------------------------------


def _exports(module: str) -> list[str]:
    return list(getattr(importlib.import_module(module), "__all__", None) or [])


@functools.lru_cache(maxsize=1)
def public_modules() -> tuple[str, ...]:
    """``bertkit`` and the modules users import by their own path: every package with an ``__all__``, the
    modules a public module's ``__all__`` names, and the modules with an ``__all__`` in a package without one
    (``bertkit.compat.d2l``). Packages without ``__all__`` (``bertkit.cli``) are not API."""
    found = ["bertkit"]
    for path in sorted((SRC / "bertkit").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if any(part.startswith("_") for part in parts[:-1]) or (parts[-1].startswith("_") and
                                                                 parts[-1] != "__init__"):
            continue
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        if name == "bertkit" or "__all__" not in path.read_text(encoding="utf-8"):
            continue
        parent = name.rsplit(".", 1)[0]
        parent_all = (SRC / Path(*parent.split(".")) / "__init__.py").read_text(encoding="utf-8")
        if package or "__all__" not in parent_all:
            found.append(name)
    for module in list(found):
        found += [f"{module}.{name}" for name in _exports(module)
                  if inspect.ismodule(getattr(importlib.import_module(module), name))]
    return tuple(sorted(dict.fromkeys(found), key=lambda name: (name != "bertkit", name)))


def defined_at(module: str, name: str) -> str:
    """Where ``module.name`` is defined: ``bertkit.config.BERTConfig`` for ``bertkit.BERTConfig``; a
    module's own name for a module."""
    obj = getattr(importlib.import_module(module), name)
    if inspect.ismodule(obj):
        return obj.__name__
    if (inspect.isclass(obj) or inspect.isroutine(obj)) and (obj.__module__ or "").startswith("bertkit"):
        return f"{obj.__module__}.{obj.__qualname__}"
    for candidate in sorted(m for m in sys.modules if m == "bertkit" or m.startswith("bertkit.")):
        if vars(sys.modules[candidate]).get(name) is obj:
            found = griffe_object(candidate)
            member = found.members.get(name) if found is not None else None
            if member is not None and not member.is_alias:
                return f"{candidate}.{name}"
    return f"{module}.{name}"


def docstring(module: str, name: str) -> str:
    """The documentation of ``module.name`` as the reference shows it: the static docstring (a ``#:`` comment
    for a constant), else the runtime one of a class or function made at run time; "" if none."""
    found = griffe_object(defined_at(module, name))
    if found is not None:
        return found.docstring.value.strip() if found.docstring else ""
    obj = getattr(importlib.import_module(module), name)
    return (inspect.getdoc(obj) or "") if inspect.isclass(obj) or inspect.isroutine(obj) else ""


@functools.lru_cache(maxsize=1)
def home_pages() -> dict[tuple[str, str], str]:
    """(module, name) -> the public module whose page renders it. Each object is rendered once: on the page
    of the deepest listing module that contains its definition (``bertkit.modeling`` for ``BERT``, ``bertkit``
    for ``BERTConfig``), else on the first listing page; a module's home is its own page."""
    listed: dict[str, list[str]] = {}
    for module in public_modules():
        for name in _exports(module):
            listed.setdefault(defined_at(module, name), []).append(module)
    homes = {}
    for path, modules in listed.items():
        if path in public_modules():
            home = path
        else:
            containing = [m for m in modules if path.startswith(m + ".")]
            home = max(containing, key=len) if containing else modules[0]
        for module in modules:
            homes[module, path] = home
    return {(module, name): homes[module, defined_at(module, name)]
            for module in public_modules() for name in _exports(module)}


def page_path(module: str) -> str:
    """``reference/python/<module>.md``."""
    return f"reference/python/{module}.md"


def _summary(text: str) -> str:
    first = roles_as_code(text).strip().split("\n\n")[0]
    return html.escape(" ".join(first.split()), quote=False).replace("|", r"\|")


def _kind(module: str, name: str) -> str:
    obj = getattr(importlib.import_module(module), name)
    return ("module" if inspect.ismodule(obj) else "class" if inspect.isclass(obj)
            else "function" if inspect.isroutine(obj) else "constant")


def python_page(module: str) -> str:
    """The page of public module ``module``: its docstring, a table of every name in its ``__all__`` (linked
    to where it is rendered), then the names this page is home to, each as a mkdocstrings block (or, made at
    run time, as a row with its runtime signature and docstring)."""
    homes = home_pages()
    names = _exports(module)
    parts = [HEADER, f"# `{module}`"]
    found = griffe_object(module)
    if found is not None and found.docstring:
        parts.append(f"::: {module}\n    options:\n      show_root_heading: false\n      members: false")
    rows = ["| Name | Kind | Summary |", "| --- | --- | --- |"]
    for name in names:
        home, path = homes[module, name], defined_at(module, name)
        anchor = "" if home == path else f"#{path}"
        link = f"[`{name}`]({Path(page_path(home)).name}{anchor})"
        rows.append(f"| {link} | {_kind(module, name)} | {_summary(docstring(module, name))} |")
    parts.append("\n".join(rows))
    static, generated = [], []
    for name in names:
        path = defined_at(module, name)
        if homes[module, name] != module or path in public_modules():
            continue
        (static if griffe_object(path) is not None else generated).append((name, path))
    for _, path in static:
        parts.append(f"::: {path}\n    options:\n      show_root_full_path: false\n      heading_level: 2")
    if generated:
        rows = ["| Function | Summary |", "| --- | --- |"]
        for name, path in generated:
            obj = getattr(importlib.import_module(module), name)
            try:
                signature = html.escape(f"{name}{inspect.signature(obj)}", quote=False)
            except (TypeError, ValueError):  # a builtin without one
                signature = name
            rows.append(f'| <span id="{path}"></span>`{signature}` | {_summary(inspect.getdoc(obj) or "")} |')
        parts.append("## Generated functions\n\nMade at import time from a table; each is a plain function.\n\n"
                     + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def rendered_names(module: str) -> set[str]:
    """The names of ``module.__all__`` that :func:`python_page` of ``module`` renders (its home names)."""
    return {name for name in _exports(module) if home_pages()[module, name] == module
            and defined_at(module, name) not in public_modules()}


def python_index() -> str:
    rows = ["| Module | Summary |", "| --- | --- |"]
    for module in public_modules():
        found = griffe_object(module)
        summary = _summary(found.docstring.value) if found is not None and found.docstring else ""
        rows.append(f"| [`{module}`]({module}.md) | {summary} |")
    return "\n\n".join([HEADER, "# Python API", (
        "Every public name of bertkit, from its docstring. `import bertkit` gives the models, configs, "
        "tokenizers, pipelines and sentence embeddings; the subpackages below hold the rest. Each module's page "
        "lists its `__all__`; a name is shown in full on one page and linked from the others."), "\n".join(rows)])


# --- the command line --------------------------------------------------------------------------------------------


def cli_pages() -> dict[str, str]:
    """``reference/cli/index.md`` and ``reference/cli/<subcommand>.md`` for every top-level subcommand."""
    from bertkit.cli import COMMANDS
    from bertkit.cli.reference import command_page, commands, page_file

    found = commands()
    pages = {f"reference/cli/{page_file(name)}": command_page(name, found) + "\n" for name in COMMANDS}
    rows = ["| Command | What it does |", "| --- | --- |"]
    for command in found:
        page = page_file(command.top) + ("" if command.name == command.top else f"#{_anchor(command.name)}")
        rows.append(f"| [`bertkit {command.name}`]({page}) | {html.escape(command.help, quote=False)} |")
    pages["reference/cli/index.md"] = "\n\n".join([HEADER, "# Command line", (
        "`bertkit COMMAND --help` prints the same as these pages: they are generated from the parsers. "
        "Errors are one line on stderr, `bertkit: error: ...`, with exit status 2 for a usage error and 1 for "
        "anything that goes wrong while running; `--debug` (anywhere on the command line) or `BERTKIT_DEBUG=1` "
        "shows the traceback instead."), "\n".join(rows)]) + "\n"
    return pages


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# --- HTTP and config ---------------------------------------------------------------------------------------------

CONTRACT = SRC / "bertkit" / "serving" / "CONTRACT.md"


def http_page() -> str:
    """The serving contract (``src/bertkit/serving/CONTRACT.md``) as it stands: the table the server is
    tested against (tests/test_docs_reference.py)."""
    text = CONTRACT.read_text(encoding="utf-8")
    _, _, body = text.partition("\n")  # its own title gives way to the page's; its ## sections stay
    return "\n\n".join([HEADER, "# HTTP API", (
        "What `bertkit serve MODEL` answers, route by route, and where it differs from text-embeddings-inference "
        "(TEI) and OpenAI. This page is the server's contract file, `src/bertkit/serving/CONTRACT.md`, included "
        "at build time; the test suite checks its route table against the routes the app registers. See "
        "[Serve](../how-to/serve.md) for recipes."), body.strip()]) + "\n"


def config_fields(spec: str) -> list[tuple[str, str, str, str]]:
    """(name, type, default, documentation) of each field of the dataclass ``"module:Class"``. The
    documentation is the field's own docstring or ``#:`` comment, else the sentences of the class docstring
    that name it (````name````)."""
    module, cls_name = spec.split(":")
    cls = getattr(importlib.import_module(module), cls_name)
    static = griffe_object(f"{module}.{cls_name}")
    class_doc = static.docstring.value if static is not None and static.docstring else ""
    sentences = re.split(r"(?<=[.;:])\s+(?=[A-Z`*(])|\n\s*\n|\n\s*\* ", class_doc)
    hints = typing.get_type_hints(cls)
    rows = []
    for field in dataclasses.fields(cls):
        member = static.members.get(field.name) if static is not None else None
        if member is not None and member.docstring:
            doc = member.docstring.value
        else:
            doc = " ".join(s.strip() for s in sentences if f"``{field.name}``" in s or f"`{field.name}`" in s)
        annotation = str(member.annotation) if member is not None and member.annotation else \
            _type_name(hints.get(field.name, field.type))
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        else:
            default = "required"
        rows.append((field.name, annotation, default, " ".join(doc.split())))
    return rows


def _type_name(annotation) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def config_page() -> str:
    parts = [HEADER, "# Config fields", (
        "The fields of the dataclasses you set: their type, default and meaning. Each class validates itself "
        "and raises a `ValueError` naming the field and the allowed values. The full class references are in "
        "the [Python API](python/index.md).")]
    for title, spec, what in CONFIG_CLASSES:
        rows = ["| Field | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
        for name, annotation, default, doc in config_fields(spec):
            cells = [f"`{name}`", f"`{annotation}`", "required" if default == "required" else f"`{default}`",
                     _cell(doc)]
            rows.append("| " + " | ".join(cell.replace("|", r"\|") if i < 3 else cell
                                          for i, cell in enumerate(cells)) + " |")
        parts.append(f"## {title}\n\n{what} (`{spec.replace(':', '.')}`)\n\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _cell(text: str) -> str:
    """A docstring fragment in a table cell: code spans kept, HTML escaped outside them, pipes escaped."""
    parts = re.split(r"(``.+?``|`[^`]+`)", text)
    return "".join(part if index % 2 else html.escape(part, quote=False) for index, part in
                   enumerate(parts)).replace("|", r"\|")


# --- all pages ---------------------------------------------------------------------------------------------------


def reference_index() -> str:
    return "\n\n".join([HEADER, "# Reference", "Generated from the code at every build, so it says what the code "
                        "does:", "\n".join([
                            "- [Python API](python/index.md): every public name of `bertkit` and its subpackages, "
                            "from the docstrings.",
                            "- [Command line](cli/index.md): every `bertkit` subcommand and its options, from the "
                            "argparse parsers.",
                            "- [HTTP API](http.md): the routes, fields and errors of `bertkit serve`, and how they "
                            "differ from TEI and OpenAI: the contract the server is tested against.",
                            "- [Config fields](config.md): `BERTConfig`, `TrainingConfig` and `ServeSettings`, "
                            "field by field.",
                            "- [File formats](file-formats.md): run directories, data directories, "
                            "`metrics.jsonl`, `task.json`."])]) + "\n"


def reference_pages() -> dict[str, str]:
    """Every generated page: path under docs/ -> Markdown."""
    pages = {"reference/index.md": reference_index(), "reference/python/index.md": python_index(),
             "reference/http.md": http_page(), "reference/config.md": config_page()}
    pages.update({page_path(module): python_page(module) for module in public_modules()})
    pages.update(cli_pages())
    return pages


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, markdown in reference_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=markdown))
    return files
