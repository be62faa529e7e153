"""Type checks of a config dataclass's fields, read from its annotations (private to :mod:`bertkit.config`).

:func:`type_problem` says why a value does not fit a field, in the words an error message needs: what the field
takes (``an integer``, ``a number``, ``true or false``...), what it got (``the string '0.1'``) and, when the intent
is clear, how to write it (``write the number without quotes (0.1)``). A bool is no integer here (JSON's true is
not 1) and an int is a number (0 is a fine dropout). One rule goes beyond the annotations: an ``id2label`` field's
keys must be label ids (integers, or their JSON spelling as strings). Imports nothing internal and nothing from torch.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

#: What a field annotated with each type accepts, and how an error message names it.
_KINDS: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
    dict: ("a mapping", lambda v: isinstance(v, Mapping)),
    list: ("a list", lambda v: isinstance(v, list)),
    Callable: ("a callable", callable),
}
_JSON_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "list", dict: "object",
               type(None): "null"}


@functools.cache
def _field_types(config_class: type) -> dict[str, tuple[Any, ...]]:
    """Each field's accepted types, read from the class's annotations (``int | None`` -> ``(int, None)``)."""
    hints = typing.get_type_hints(config_class)
    return {name: tuple(typing.get_origin(t) or t for t in
                        (typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)))
            for name, hint in hints.items()}


def type_problem(config_class: type, name: str, value: Any) -> str | None:
    """Why ``value`` has the wrong type for field ``name`` of the dataclass ``config_class`` (``"must be ..., got
    ..."``), or None if it fits. None fits a field annotated ``... | None``."""
    accepted = _field_types(config_class)[name]
    if (value is None and type(None) in accepted) or any(_KINDS[t][1](value) for t in accepted if t in _KINDS):
        return _id2label_problem(value) if name == "id2label" and value is not None else None
    expected = " or ".join(_KINDS[t][0] for t in accepted if t in _KINDS)
    if type(None) in accepted:
        expected += " (or null/None for the default)"
    return f"must be {expected}, got {describe(value)}{_fix_hint(accepted, value)}"


def _id2label_problem(mapping: Mapping) -> str | None:
    for key in mapping:
        if isinstance(key, bool) or not (isinstance(key, int) or (isinstance(key, str) and key.lstrip("-").isdigit())):
            return f"must map label ids (integers) to names, got the key {key!r}"
    return None


def describe(value: Any) -> str:
    """``value`` as an error message names it: ``the string '0.1'``, ``the boolean True``, ``the list [1, 2]``..."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    if value is None:
        return "None (null)"
    kind = _JSON_NAMES.get(type(value))
    return f"the {kind} {text}" if kind else f"{text} (a {type(value).__name__})"


def _fix_hint(accepted: tuple[Any, ...], value: Any) -> str:
    """How to write ``value`` so that it fits, when the intent is clear."""
    if isinstance(value, str) and (int in accepted or float in accepted):
        try:
            number = float(value)
        except ValueError:
            return ""
        return f"; write the number without quotes ({value.strip()})" if number == number else ""
    if isinstance(value, float) and int in accepted and value.is_integer():
        return f"; write it as the integer {int(value)}"
    if bool in accepted:
        flag = {"true": True, "false": False}.get(value.lower()) if isinstance(value, str) \
            else bool(value) if isinstance(value, int) and value in (0, 1) else None
        if flag is not None:
            return f"; write {str(flag).lower()} (JSON) or {flag} (Python)"
    return ""
