"""A request's inputs made ready for the model: counted, checked against the input limit, truncated if asked.

Runs on the server's tokenization threads, never on the event loop. An input is a text, a pair of texts, or
(embedding routes) a list of token ids. Every route applies the same policy: an input longer than the limit is
refused (422 naming it and the limit) unless truncation is asked for (``truncate``, or the server's
``--auto-truncate``), and then the pipeline cuts it at ``side`` (``right``: the end goes, ``left``: the start);
a pair is cut longest-first (the longer text loses tokens first, as text-embeddings-inference cuts it), and a
refused pair names the longer of its two texts.

A text that will be truncated is first cut to the part that can matter (:func:`bertkit.tokenization.cut.cut_texts`,
as every reader of bertkit cuts): the model sees exactly what truncating the whole text would give, and a huge
text costs what its kept part costs. Like text-embeddings-inference, a text longer than ``250 x limit``
characters is refused without truncation (and cut to at most that many characters with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertkit.serving.errors import ServeError
from bertkit.tokenization.cut import CHARS_PER_TOKEN, cut_pairs, cut_texts

Text = str | tuple[str, str]


class Prepared:
    """Inputs ready for the pipeline (``items``) and the tokens each takes after truncation (``tokens``)."""

    def __init__(self, items: list[Any], tokens: list[int]):
        self.items, self.tokens = items, tokens


#: what a client can do about an input past the limit (every route takes ``truncate``, OpenAI's too)
ADVICE = "send \"truncate\": true, or start the server with --auto-truncate"


def prepare(inputs: Sequence[Any], *, tokenizer: Any, limit: int, truncate: bool, side: str = "right",
            prefix: str = "", field: str = "inputs", first: str | None = None) -> Prepared:
    """Count, check and cut ``inputs`` (texts, ``(a, b)`` pairs, or token-id lists) for a model taking ``limit``
    tokens; ``prefix`` (a prompt) goes before each text; ``first`` names the first text every pair shares (rerank's
    ``query``; otherwise pair ``i``'s texts are ``field[i][0]`` and ``field[i][1]``). Raises :class:`ServeError` 422
    for an input that is too long without ``truncate`` or holds ids that are not token ids."""
    items: list[Any] = list(inputs)
    counts: list[int | None] = [None] * len(items)
    texts: list[int] = []
    for i, item in enumerate(items):
        if isinstance(item, list):
            counts[i] = _ids(item, i, limit, truncate, field)
            items[i] = item[:limit] if side == "right" else item[-limit:]
        else:
            if not truncate:
                _check_characters(item, _names(item, i, field, first), limit)
            texts.append(i)
    if texts and truncate:
        _cut(items, texts, tokenizer, limit, side, prefix)
    if texts:
        for i, n in zip(texts, count_tokens(tokenizer, [items[i] for i in texts], prefix)):
            counts[i] = n
    for i in texts:
        if counts[i] > limit and not truncate:
            _refuse(items[i], counts[i], _names(items[i], i, field, first), limit, tokenizer)
    return Prepared(items, [min(n, limit) for n in counts])


def _names(item: Text, index: int, field: str, first: str | None) -> tuple[str, ...]:
    """What an error calls the input's text, or its pair's two texts."""
    if isinstance(item, str):
        return (f"{field}[{index}]",)
    return (first, f"{field}[{index}]") if first else (f"{field}[{index}][0]", f"{field}[{index}][1]")


def _refuse(item: Text, count: int, names: tuple[str, ...], limit: int, tokenizer: Any) -> None:
    """The 422 of an input of ``count`` tokens past ``limit``: a pair names its two texts, the longer first to
    shorten."""
    if isinstance(item, str):
        raise ServeError(422, f"{names[0]} has {count} tokens; the model takes {limit} (max_input_length). Shorten "
                              f"it, or {ADVICE}.", param=names[0].split("[")[0], code="context_length_exceeded")
    sizes = [len(ids) for ids in tokenizer(list(item), add_special_tokens=False)["input_ids"]]
    longer = names[0] if sizes[0] > sizes[1] else names[1]
    raise ServeError(422, f"{names[0]} ({sizes[0]} tokens) and {names[1]} ({sizes[1]} tokens) take {count} tokens "
                          f"with the special tokens; the model takes {limit} (max_input_length). Shorten {longer}, "
                          f"or {ADVICE} (the longer text is cut first).", param=longer.split("[")[0],
                     code="context_length_exceeded")


def _ids(ids: list, index: int, limit: int, truncate: bool, field: str) -> int:
    if not ids or not all(type(i) is int and i >= 0 for i in ids):
        raise ServeError(422, f"{field}[{index}] must be a text or a non-empty list of token ids (integers >= 0).",
                         param=field)
    if len(ids) > limit and not truncate:
        raise ServeError(422, f"{field}[{index}] has {len(ids)} tokens; the model takes {limit} (max_input_length). "
                              f"Shorten it, or {ADVICE}.", param=field, code="context_length_exceeded")
    return len(ids)


def _check_characters(item: Text, names: tuple[str, ...], limit: int) -> None:
    """The 422 of a text past :data:`CHARS_PER_TOKEN` characters per token of ``limit``, not to be truncated."""
    cap = CHARS_PER_TOKEN * limit
    for text, name in zip((item,) if isinstance(item, str) else item, names):
        if len(text) > cap:
            raise ServeError(422, f"{name} has {len(text)} characters; without truncation the limit is {cap} ("
                                  f"{CHARS_PER_TOKEN} per token of max_input_length {limit}). Shorten it, or "
                                  f"{ADVICE}.", param=name.split("[")[0], code="context_length_exceeded")


def _cut(items: list[Any], texts: list[int], tokenizer: Any, limit: int, side: str, prefix: str) -> None:
    """Cut ``items[i]`` for ``i`` in ``texts`` (texts after ``prefix``, pairs as longest-first cuts them: the
    server's pair truncation) to the part truncation keeps, in place."""
    singles = [i for i in texts if isinstance(items[i], str)]
    for i, text in zip(singles, cut_texts(tokenizer, [items[i] for i in singles], limit, side, prefix=prefix)):
        items[i] = text
    pairs = [i for i in texts if not isinstance(items[i], str)]
    firsts, seconds = cut_pairs(tokenizer, [items[i][0] for i in pairs], [items[i][1] for i in pairs], limit, side)
    for i, a, b in zip(pairs, firsts, seconds):
        items[i] = (a, b)


def count_tokens(tokenizer: Any, texts: list[Text], prefix: str = "") -> list[int]:
    """Tokens of each text (after ``prefix``) or pair, special tokens included, before truncation: one batched
    tokenizer call for the texts and one for the pairs."""
    counts = [0] * len(texts)
    singles = [i for i, t in enumerate(texts) if isinstance(t, str)]
    pairs = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if singles:
        for i, ids in zip(singles, tokenizer([prefix + texts[i] for i in singles])["input_ids"]):
            counts[i] = len(ids)
    if pairs:
        encoded = tokenizer([texts[i][0] for i in pairs], [texts[i][1] for i in pairs])["input_ids"]
        for i, ids in zip(pairs, encoded):
            counts[i] = len(ids)
    return counts
