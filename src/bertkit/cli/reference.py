"""The command line's reference, read from the real parsers, so the docs cannot drift from ``--help``.

Each subcommand builds its parser inside its ``main(argv)``. :func:`commands` runs every ``main`` with
parsing stopped: :class:`~bertkit.cli.ArgumentParser`'s ``parse_known_args`` (which ``parse_args`` calls)
raises instead of parsing, carrying the parser it was called on, so nothing runs past the parser's
construction. Nested subcommands are the parsers' own subparsers (``data create``, ``finetune classify``)
and the forms a ``main`` hands to another module (``finetune embed``, ``embed mine``, ``predict``'s two
forms, listed in :data:`FORMS`). :func:`command_page` renders one top-level subcommand as Markdown: usage,
description, and a table per argument group with every option's flags, value, default and help.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from bertkit.cli import COMMANDS, ArgumentParser, without_roles

#: the usage lines are wrapped at this width, whatever the terminal
WIDTH = 88

#: forms a subcommand's ``main`` dispatches on its argv before argparse sees it:
#: top-level name -> [(nested name, the argv that selects it, one-line help)]. The empty argv is the plain form.
FORMS = {
    "embed": [("mine", ["mine"], "hard negatives for (query, positive) pairs, mined with an embedding model"),
              ("dedup", ["dedup"], "the rows of an embedding store left once its near-duplicates are dropped")],
    "predict": [("MODEL_DIR", [], "the fine-tuned form: a fine-tuned model's predictions on a file in its task's "
                                  "training format")],
}
#: the argv that selects the plain form where it is not the empty one (predict's pipeline form takes a TASK)
PLAIN_ARGV = {"predict": ["fill-mask"]}


@dataclass(frozen=True)
class Command:
    """One parser of the ``bertkit`` command: ``name`` is its words after ``bertkit`` (``"finetune classify"``),
    ``help`` its one-line summary, ``parser`` the parser ``main`` builds."""

    name: str
    help: str
    parser: argparse.ArgumentParser

    @property
    def top(self) -> str:
        """The top-level subcommand this one belongs to (its page)."""
        return self.name.split()[0]


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def _parsing_stopped() -> Iterator[None]:
    original = ArgumentParser.parse_known_args

    def stop(self, args=None, namespace=None):
        raise _Captured(self)

    ArgumentParser.parse_known_args = stop
    try:
        yield
    finally:
        ArgumentParser.parse_known_args = original


def capture(module: str, argv: list[str]) -> argparse.ArgumentParser:
    """The parser ``bertkit.cli.<module>.main(argv)`` parses with; RuntimeError if it returns without parsing."""
    main = importlib.import_module(f"bertkit.cli.{module}").main
    with _parsing_stopped():
        try:
            main(list(argv))
        except _Captured as captured:
            return captured.parser
    raise RuntimeError(f"bertkit.cli.{module}.main({argv!r}) returned without parsing its arguments")


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each argparse subcommand of ``parser``, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _delegated(parser: argparse.ArgumentParser) -> bool:
    """A subparser with no arguments of its own: a placeholder whose ``main`` hands its argv to another module."""
    return not parser._actions


def commands() -> list[Command]:
    """Every ``bertkit`` subcommand and nested subcommand, each parent before its children, in
    :data:`~bertkit.cli.COMMANDS` order."""
    found = []
    for name, (module, help_text) in COMMANDS.items():
        parser = capture(module, PLAIN_ARGV.get(name, []))
        found.append(Command(name, help_text, parser))
        for sub_name, sub_help, sub in _subparsers(parser):
            if _delegated(sub):
                sub = capture(module, [sub_name])
            found.append(Command(f"{name} {sub_name}", sub_help, sub))
        for form, argv, form_help in FORMS.get(name, []):
            found.append(Command(f"{name} {form}", form_help, capture(module, argv)))
    return found


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"pretrain": parser, "finetune classify": parser, ...}``: :func:`commands` as a mapping."""
    return {command.name: command.parser for command in commands()}


# --- Markdown ---------------------------------------------------------------------------------------------------


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage lines, as ``--help`` prints them on a terminal :data:`WIDTH` columns wide."""
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def prose(text: str) -> str:
    """A docstring-style description as Markdown: paragraphs stay paragraphs; an indented paragraph (command
    examples) becomes a code block; ``<`` / ``>`` / ``&`` outside code spans are escaped."""
    blocks = []
    for paragraph in re.split(r"\n\s*\n", roles_as_code(text).strip("\n")):
        lines = paragraph.split("\n")
        if all(line.startswith("    ") or not line.strip() for line in lines):
            body = "\n".join(line[4:] for line in lines)
            blocks.append(f"```text\n{body}\n```")
        else:
            blocks.append(_escape(" ".join(line.strip() for line in lines)))
    return "\n\n".join(blocks)


def roles_as_code(text: str) -> str:
    """``:class:`~bertkit.x.C``` -> ```C```, ``:func:`f``` -> ```f```: Sphinx roles as Markdown code spans."""
    return without_roles(text, quote="`")


def _escape(text: str) -> str:
    """Escape HTML and Markdown-table pipes outside backtick code spans."""
    parts = re.split(r"(``.+?``|`[^`]+`)", text)
    return "".join(part if index % 2 else html.escape(part, quote=False).replace("*", r"\*")
                   for index, part in enumerate(parts))


def _cell(text: str) -> str:
    return _escape(" ".join(text.split())).replace("|", r"\|")


def _flags(action: argparse.Action) -> str:
    if action.option_strings:
        return ", ".join(f"`{flag}`" for flag in action.option_strings)
    return f"`{action.metavar or action.dest}`"


def _value(action: argparse.Action) -> str:
    """What the option takes: its choices, its metavar, or nothing for a switch."""
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    if not action.option_strings:
        count = {"+": "one or more", "*": "any number", "?": "optional"}.get(action.nargs, "")
        return count
    metavar = action.metavar or action.dest.upper()
    return f"`{metavar}`" + (" ..." if action.nargs in ("+", "*") else "")


def _default(action: argparse.Action) -> str:
    optional_positional = not action.option_strings and action.nargs in ("?", "*")
    if action.required and not optional_positional:  # argparse marks a "*" positional required
        return "required"
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.nargs == 0 or default == []:
        return ""
    return f"`{default}`"


def options_tables(parser: argparse.ArgumentParser) -> str:
    """A table per argument group (positional arguments, options, the parser's own groups) of every action
    but the subcommand list: flags, value, default, help."""
    formatter = parser._get_formatter()
    tables = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        rows = ["| Argument | Value | Default | Description |", "| --- | --- | --- | --- |"]
        for action in actions:
            help_text = "" if action.help in (None, argparse.SUPPRESS) else formatter._expand_help(action)
            rows.append(f"| {_flags(action)} | {_value(action)} | {_default(action)} | {_cell(help_text)} |")
        title = (group.title or "arguments").capitalize()
        description = f"{_escape(group.description)}\n\n" if group.description else ""
        tables.append(f"**{_escape(title)}**\n\n{description}" + "\n".join(rows))
    return "\n\n".join(tables)


def section(command: Command, level: int, shown: str | None = None) -> str:
    """One parser's reference: heading, usage, description (unless it is ``shown`` already, as the parent's),
    the subcommands it has, its options."""
    parser = command.parser
    parts = [f"{'#' * level} `bertkit {command.name}` {{ #{_anchor(command.name)} }}", _escape(command.help),
             f"```text\n{usage(parser)}\n```"]
    if parser.description and parser.description != shown:
        parts.append(prose(parser.description))
    subcommands = _subparsers(parser)
    if subcommands:
        rows = [f"- [`{name}`](#{_anchor(f'{command.name} {name}')}): {_escape(text)}"
                for name, text, _ in subcommands]
        parts.append("**Subcommands**\n\n" + "\n".join(rows))
    parts.append(options_tables(parser))
    return "\n\n".join(part for part in parts if part)


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def page_file(name: str) -> str:
    """The file name of top-level subcommand ``name``'s page under ``reference/cli/``: ``<name>.md``, except
    ``index``'s, since ``index.md`` is the directory's own page (the list of commands)."""
    return "index-command.md" if name == "index" else f"{name}.md"


def command_page(name: str, found: list[Command] | None = None) -> str:
    """The Markdown page of top-level subcommand ``name``: its section, then one per nested subcommand."""
    found = commands() if found is None else found
    own = [command for command in found if command.top == name]
    if not own:
        raise ValueError(f"no bertkit subcommand {name!r}; subcommands: {', '.join(COMMANDS)}")
    header = ("<!-- generated from the argparse parsers by docs/hooks/reference.py "
              "(bertkit.cli.reference); edit the parsers, not this page -->")
    shown = own[0].parser.description
    sections = [section(own[0], 1)] + [section(command, 2, shown) for command in own[1:]]
    return "\n\n".join([header, *sections])
