"""Which column of a training file is the anchor, the positive, the negatives and the label; rows checked.

A file's columns take roles by name (:data:`ALIASES`, case-insensitive; ``negative_1``, ``neg2``,
``hard_negative_3``, ... number the negatives; a ``negatives`` column holding lists is a list of negatives)
or, when no name is a role's, by position as sentence-transformers does: the first column is the anchor,
the second the positive, the rest negatives, and a last column holding numbers is the label. A layout that
could be read two ways is refused (:func:`resolve_columns`), naming each column and the role it would take;
the caller then renames the columns or passes ``columns={"anchor": "q", "positive": "d", ...}``
(CLI ``--columns q=anchor,d=positive``, :func:`parse_columns`).

A row (:func:`check_row`) becomes ``{role: value}``: ``"anchor"``, ``"positive"`` and ``"negative_i"`` hold
non-blank text, ``"negatives"`` a list of such texts, ``"label"`` a finite float (or a list of them: teacher
scores). Anything else is a one-line ``ValueError`` naming the file and row. A loss that needs more of its
labels (0 or 1, within [0, 1]) checks every row as it is read with a :class:`LabelRule`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the names each role is known by (compared lower-cased)
ALIASES = {
    "anchor": ("anchor", "query", "sentence1", "text1", "question"),
    "positive": ("positive", "pos", "document", "passage", "sentence2", "text2", "answer"),
    "negative": ("negative", "neg", "hard_negative", "negatives", "hard_negatives"),
    "label": ("label", "labels", "score", "scores"),
}
_NUMBERED_NEGATIVE = re.compile(r"(?:negative|neg|hard_negative)_?(\d+)")
_TEXT_ROLES = ("anchor", "positive")
#: how a caller settles an ambiguous layout, the end of every refusal
_FIX = ("rename the columns (anchor, positive, negative_1.., label) or name the roles: "
        "columns={'anchor': 'q', 'positive': 'd', ...} (CLI --columns q=anchor,d=positive,...)")


@dataclass(frozen=True)
class ColumnLayout:
    """``roles``: role -> the file's column, in role order (``anchor``, ``positive``, ``negative_1``, ...,
    or ``negatives`` for one column of lists, then ``label``); ``by``: ``"name"``, ``"position"`` or
    ``"columns"`` (given by the caller)."""

    roles: dict[str, str]
    by: str

    def describe(self) -> str:
        """``'q' -> anchor, 'd' -> positive``: the layout in words, for logs."""
        return ", ".join(f"{column!r} -> {role}" for role, column in self.roles.items())


def resolve_columns(names: Sequence[str], sample_rows: Sequence[Mapping[str, Any]],
                    columns: Mapping[str, str | Sequence[str]] | None = None, *,
                    path: str = "training file") -> ColumnLayout:
    """The roles of a file's columns ``names``, decided by ``columns`` (role -> column name; ``"negative"`` may
    name a list of columns), else by name, else by position (see the module docstring). ``sample_rows`` (the
    file's first rows) tell numbers from text and list columns from text columns. Raises a one-line
    ``ValueError`` naming ``path``, each column with the role it would take, and the fix, for a layout that is
    ambiguous: two columns for one role, a column no role explains next to named ones, a number column where
    text belongs, no anchor or no positive."""
    names = list(names)
    if columns is not None:
        return _given(names, columns, path)
    kinds = {name: _kind(sample_rows, name) for name in names}
    guesses = {name: _role_by_name(name, kinds[name]) for name in names}
    if any(guesses.values()):
        return _by_name(names, guesses, kinds, path)
    return _by_position(names, kinds, path)


def _kind(rows: Sequence[Mapping[str, Any]], name: str) -> str:
    """``"number"`` (every sampled value a number, or text that reads as one), ``"scores"`` (lists of numbers),
    ``"list"`` (other lists), ``"text"`` or ``"mixed"`` (numbers and other text: could be a label or text)."""
    values = [row[name] for row in rows if row.get(name) is not None]
    if values and all(isinstance(v, (list, tuple)) for v in values):
        scores = all(v and all(_number(x) is not None and not isinstance(x, str) for x in v) for v in values)
        return "scores" if scores else "list"
    numeric = sum(_number(v) is not None for v in values)
    return "number" if values and numeric == len(values) else "mixed" if numeric else "text"


def _number(value: Any) -> float | None:
    """``value`` as a float (a number, or text such as ``"0.8"``; NaN and infinities too: they are numbers, refused
    as labels by :func:`check_row`), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return float(value) if isinstance(value, (int, float)) else None


def _role_by_name(name: str, kind: str) -> str | None:
    key = name.strip().lower()
    numbered = _NUMBERED_NEGATIVE.fullmatch(key)
    if numbered:
        return f"negative_{int(numbered.group(1))}"
    for role, aliases in ALIASES.items():
        if key in aliases:
            return "negatives" if role == "negative" and kind == "list" else role
    return None


def _refuse(path: str, assignment: Sequence[tuple[str, str]], why: str) -> ValueError:
    said = ", ".join(f"{column!r} -> {role}" for column, role in assignment)
    return ValueError(f"{path}: cannot tell the roles of its columns ({said}): {why}; {_FIX}.")


def _by_name(names: list[str], guesses: dict[str, str | None], kinds: dict[str, str], path: str) -> ColumnLayout:
    assignment = [(name, guesses[name] or "?") for name in names]
    unexplained = [name for name in names if guesses[name] is None]
    if unexplained:
        raise _refuse(path, assignment, f"no role is named by {unexplained}")
    for role in ("anchor", "positive", "label", "negatives"):
        claim = [name for name in names if guesses[name] == role]
        if len(claim) > 1:
            raise _refuse(path, assignment, f"{claim} both name the {role}")
    singles = [name for name in names if guesses[name] == "negative" or guesses[name].startswith("negative_")]
    if any(guesses[name] == "negatives" for name in names) and singles:
        raise _refuse(path, assignment, f"a list column of negatives and negative columns {singles} together")
    numbers = [int(guesses[n].split("_")[1]) for n in singles if guesses[n] != "negative"]
    if len(set(numbers)) != len(numbers):
        raise _refuse(path, assignment, "two columns name the same negative")
    roles = {}
    for role in ("anchor", "positive"):
        roles.update({name: role for name in names if guesses[name] == role})
    # negatives in their numbers' order (an unnumbered "negative" first), renumbered 1..k
    ordered = sorted(singles, key=lambda n: 0 if guesses[n] == "negative" else int(guesses[n].split("_")[1]))
    roles.update({name: f"negative_{i}" for i, name in enumerate(ordered, 1)})
    roles.update({name: guesses[name] for name in names if guesses[name] in ("negatives", "label")})
    return _checked(names, roles, kinds, path, "name")


def _by_position(names: list[str], kinds: dict[str, str], path: str) -> ColumnLayout:
    label = names[-1] if len(names) >= 2 and kinds[names[-1]] in ("number", "scores") else None
    texts = [name for name in names if name != label]
    roles = dict(zip(texts, ["anchor", "positive", *(f"negative_{i}" for i in range(1, len(texts) - 1))]))
    if len(texts) > 2 and kinds[texts[-1]] == "list":  # a last column of lists: the negatives
        roles[texts[-1]] = "negatives"
    if label is not None:
        roles[label] = "label"
    assignment = [(name, roles[name]) for name in names]
    numbers = [name for name in texts if kinds[name] == "number" or (name == names[-1] and kinds[name] == "mixed")]
    if numbers:
        raise _refuse(path, assignment, f"{numbers} hold numbers: a label or text?")
    return _checked(names, roles, kinds, path, "position")


def _checked(names: list[str], roles: dict[str, str], kinds: dict[str, str], path: str, by: str) -> ColumnLayout:
    """The layout of ``roles`` (column -> role), refused when the anchor or positive lacks its column or the
    label holds no number in the sample."""
    assignment = [(name, roles.get(name, "?")) for name in names]
    taken = set(roles.values())
    for role in _TEXT_ROLES:
        if role not in taken:
            raise _refuse(path, assignment, f"no column is the {role}")
    for name, role in roles.items():  # a named label with a few bad values is left to the rows' checks
        if role == "label" and kinds.get(name) == "text":
            raise _refuse(path, assignment, f"the label {name!r} holds text, not numbers")
    order = ["anchor", "positive", *sorted((r for r in taken if r.startswith("negative_")),
                                           key=lambda r: int(r.split("_")[1])), "negatives", "label"]
    by_role = {role: name for name, role in roles.items()}
    return ColumnLayout({role: by_role[role] for role in order if role in by_role}, by)


def _given(names: list[str], columns: Mapping[str, str | Sequence[str]], path: str) -> ColumnLayout:
    """The layout the caller named: role -> column (``"negative"``: one column or a list of them)."""
    roles: dict[str, str] = {}
    for role, column in columns.items():
        chosen = [column] if isinstance(column, str) else list(column)
        known = role in ("anchor", "positive", "negative", "negatives", "label") or _NUMBERED_NEGATIVE.fullmatch(role)
        if not known or not chosen or (len(chosen) > 1 and role != "negative"):
            raise ValueError(f"columns: {role!r} -> {column!r} is not a role and its column; the roles are anchor, "
                             "positive, negative (a column or a list of columns), negative_1.., negatives (a column "
                             "of lists) and label, e.g. columns={'anchor': 'q', 'positive': 'd'}.")
        for name in chosen:
            if name not in names:
                raise ValueError(f"{path} has no column {name!r} (named for the {role} by columns=...); its columns: "
                                 f"{names}.")
            if name in roles:
                raise ValueError(f"columns: {name!r} is named for both the {roles[name]} and the {role}; give "
                                 "each column one role.")
            roles[name] = role
    for role in _TEXT_ROLES:
        if role not in roles.values():
            raise ValueError(f"columns={dict(columns)!r} names no {role} column; every training file needs an "
                             "anchor and a positive.")
    negatives = [n for n, r in roles.items() if r == "negative" or r.startswith("negative_")]
    roles.update({name: f"negative_{i}" for i, name in enumerate(negatives, 1)})
    order = ["anchor", "positive", *(f"negative_{i}" for i in range(1, len(negatives) + 1)), "negatives", "label"]
    by_role = {role: name for name, role in roles.items()}
    return ColumnLayout({role: by_role[role] for role in order if role in by_role}, "columns")


def parse_columns(text: str) -> dict[str, str | list[str]]:
    """The CLI's ``--columns q=anchor,d=positive,n1=negative,n2=negative`` as ``columns=`` (role -> column;
    ``negative`` -> the list of its columns). ``ValueError`` naming the malformed item."""
    columns: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, role = item.rpartition("=")
        if not sep or not name.strip() or not role.strip():
            raise ValueError(f"--columns: {item!r} is not COLUMN=ROLE; write e.g. --columns q=anchor,d=positive.")
        name, role = name.strip(), role.strip().lower()
        if role == "negative":
            columns.setdefault("negative", []).append(name)
        elif role in columns:
            raise ValueError(f"--columns names two columns for the {role}: {columns[role]!r} and {name!r}.")
        else:
            columns[role] = name
    return columns


def check_row(values: Mapping[str, Any], layout: ColumnLayout, where: str) -> dict[str, Any]:
    """``{role: value}`` of one row (``values``: column -> value), checked: a lacking column, a blank or
    non-text text, a negatives cell that is not a list of texts, a label that is not a finite number raise a
    one-line ``ValueError`` starting with ``where`` (the file and row)."""
    row: dict[str, Any] = {}
    for role, column in layout.roles.items():
        if column not in values:
            raise ValueError(f"{where}: the row lacks the column {column!r} (the {role}); every row needs "
                             f"{list(layout.roles.values())}.")
        value = values[column]
        if role == "label":
            row[role] = _label(value, column, where)
        elif role == "negatives":
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"{where}: {column!r} (the negatives) holds {type(value).__name__}, not a "
                                 "non-empty list of texts.")
            row[role] = [_text(v, f"{column!r} item {i}", where) for i, v in enumerate(value)]
        else:
            row[role] = _text(value, f"{column!r} (the {role})", where)
    return row


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {what} holds {type(value).__name__} ({value!r}), not text.")
    if not value.strip():
        raise ValueError(f"{where}: {what} is empty; fill it in or drop the row.")
    return value


def _label(value: Any, column: str, where: str) -> float | list[float]:
    if isinstance(value, (list, tuple)) and value:
        return [_label(v, column, where) for v in value]
    number = _number(value)
    if number is None:
        raise ValueError(f"{where}: the label {column!r} is {value!r}, not a finite number.")
    if not math.isfinite(number):
        raise ValueError(f"{where}: the label {column!r} is {value!r}, which is not finite; write a finite number "
                         "or drop the row.")
    return number


@dataclass(frozen=True)
class LabelRule:
    """What a loss needs of every label value (each score of a list too): ``allowed(value)``, said as ``needs``
    (``"0 or 1"``) for ``who`` (``"--loss contrastive"``). Called on a checked row (:func:`check_row`) with its
    place, it raises a one-line ``ValueError`` naming the place, the value and both."""

    who: str
    needs: str
    allowed: Callable[[float], bool]

    def __call__(self, row: Mapping[str, Any], where: str) -> None:
        label = row.get("label")
        for value in label if isinstance(label, list) else [] if label is None else [label]:
            if not self.allowed(value):
                raise ValueError(f"{where}: the label {value!r} is not {self.needs}, which {self.who} needs; fix "
                                 "the label or choose another loss.")


#: the rules of the losses that need more of a label than a finite number
BINARY = ("0 or 1", lambda value: value in (0.0, 1.0))
UNIT = ("in [0, 1]", lambda value: 0.0 <= value <= 1.0)
