"""The user-written parts of a ``tokenizer.json`` pipeline (its normalizer and pre-tokenizer), checked before they
run: their regexes run in Rust, where a fault is a panic far from its cause.

Two faults are known: a regex that backtracks catastrophically (``(a+)+$``: Oniguruma gives up after its retry
limit and ``tokenizers`` panics, "retry-limit-in-match over"), and a ``Replace`` normalizer with an empty pattern
(it matches between every two characters). :func:`check_components` refuses both when a tokenizer.json is loaded:
an empty pattern on sight, a regex by running its component alone on probe strings (a run of each character the
pattern names, and of a few common ones, ended by a character that no real text pattern expects), which a
regex without nested repetition answers in microseconds. A backtracking regex the probes miss still panics
on some text; :func:`panicking_component` then finds the component that panics on that text, for the error.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tokenizers import Tokenizer

from bertkit.tokenization import checks

#: characters every regex is probed with, besides those its pattern names
PROBE_CHARACTERS = "a A0 .-'\n\u00e9\u4e00\u2581"
#: probe length: enough repetition that a nested quantifier exceeds Oniguruma's retry limit (2**40 paths)
PROBE_LENGTH = 40
#: the pipeline sections checked: (tokenizer.json key, its Sequence's list key)
SECTIONS = (("normalizer", "normalizers"), ("pre_tokenizer", "pretokenizers"))
_FIX = "correct the pattern in the file (or restore the file from where the tokenizer came from)"


def check_components(data: dict[str, Any], source: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``source`` and the component (``pre_tokenizer.pretokenizers[1] (Split)``) for
    a ``Replace`` with an empty pattern, or a regex that makes the regex engine give up on a probe string."""
    for where, section, component in _components(data):
        kind, pattern = _pattern(component)
        if component.get("type") == "Replace" and pattern == "":
            content = component.get("content")
            effect = f"it would insert {content!r} everywhere" if content else "it does nothing"
            raise ValueError(f"{os.fspath(source)}: its {where} has an empty pattern, which matches between every two "
                             f"characters ({effect}); {_FIX}.")
        if kind != "Regex" or not isinstance(pattern, str):
            continue
        probes = _probes(pattern)
        found = _first_panic(_alone(data, section, component), probes)
        if found is not None:
            i, message = found
            raise ValueError(f"{os.fspath(source)}: its {where} regex {pattern!r} makes the regex engine give up "
                             f"on {probes[i][:8]!r}... ({message}): it backtracks catastrophically, as nested "
                             f"repetition such as (a+)+ does; {_FIX}.")


def panicking_component(backend: Tokenizer, inputs: Iterable, source: str) -> str | None:
    """Why ``backend`` panicked on ``inputs`` (texts, pairs or pre-split words), naming ``source`` and the
    normalizer or pre-tokenizer component that panics alone on one of them; None when none does (the panic
    came from elsewhere: truncation, padding)."""
    data = json.loads(backend.to_str())
    texts = list(_texts(inputs))
    for where, section, component in _components(data):
        found = _first_panic(_alone(data, section, component), texts)
        if found is not None:
            i, message = found
            return (f"{source}: its {where} panicked on text {i} of the batch ({texts[i][:40]!r}...: {message}); "
                    f"the tokenizer's pipeline cannot encode it: {_FIX}.")
    return None


def _components(data: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(where, section, component)`` for each leaf component of the normalizer and pre-tokenizer."""
    for section, list_key in SECTIONS:
        yield from _leaves(data.get(section), section, section, list_key)


def _leaves(component: Any, where: str, section: str, list_key: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    if not isinstance(component, dict):
        return
    if component.get("type") == "Sequence":
        for i, part in enumerate(component.get(list_key) or []):
            yield from _leaves(part, f"{where}.{list_key}[{i}]", section, list_key)
    else:
        yield f"{where} ({component.get('type')})", section, component


def _pattern(component: dict[str, Any]) -> tuple[str | None, Any]:
    """``("Regex" | "String", pattern)`` of a component with a pattern, else ``(None, None)``."""
    pattern = component.get("pattern")
    if isinstance(pattern, dict) and len(pattern) == 1:
        return next(iter(pattern.items()))
    return None, None


def _alone(data: dict[str, Any], section: str, component: dict[str, Any]) -> Callable[[str], Any]:
    """What runs ``component`` alone on a text: its ``normalize_str`` / ``pre_tokenize_str``."""
    minimal = {"version": data.get("version", "1.0"), "truncation": None, "padding": None, "added_tokens": [],
               "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
               "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}, section: component}
    alone = Tokenizer.from_str(json.dumps(minimal))
    return alone.normalizer.normalize_str if section == "normalizer" else alone.pre_tokenizer.pre_tokenize_str


def _probes(pattern: str) -> list[str]:
    characters = dict.fromkeys(PROBE_CHARACTERS + "".join(c for c in pattern if c.isprintable() and c != "\\"))
    return [c * PROBE_LENGTH + "\x00" for c in characters]


def _texts(inputs: Iterable) -> Iterator[str]:
    for item in inputs:
        if isinstance(item, str):
            yield item
        elif isinstance(item, list | tuple):
            yield from _texts(item)


def _first_panic(run: Callable[[str], Any], texts: list[str]) -> tuple[int, str] | None:
    """``(i, message)`` of the first of ``texts`` on which ``run`` raises a Rust panic, or None; the panic's
    report to stderr is silenced (one window for all the texts: microseconds where the component is sound)."""
    with _quiet_stderr():
        for i, text in enumerate(texts):
            try:
                run(text)
            except BaseException as error:
                if not checks.is_panic(error):
                    raise
                return i, " ".join(str(error).split())
    return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null: Rust's panic hook writes its report there, before Python sees the panic."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
