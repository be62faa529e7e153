"""From per-token class probabilities to the entity dicts of HF's token-classification pipeline.

:func:`entities` returns, for one encoded text, what ``transformers.pipeline("token-classification")``
(transformers 5.23, fast tokenizers of any kind) returns for the same probabilities, under each
``aggregation_strategy``:

- ``"none"``: one dict per non-special token: ``entity`` (its most probable label), ``score``,
  ``index`` (its position in the encoding, special tokens counted), ``word`` (the token, e.g. ``##ing``,
  ``Ġworld``, ``▁world``, or the text it covers when it is the unknown token), ``start``, ``end``
  (character offsets).
- ``"simple"``: the same tokens, merged into groups (see below).
- ``"first"`` / ``"average"`` / ``"max"``: tokens are first gathered into words, each word taking one
  label: that of its first token, of its tokens' mean probabilities, or of its single most
  confident token. The words are then merged into groups.

Words, as HF tells them: with a tokenizer whose model marks word continuations (WordPiece's ``##``), a
token continues the previous word when its string's length differs from the text it covers; with
others (byte-level BPE, SentencePiece), HF's fallback: when the text has no space right before or at
the token's start. The unknown token never continues a word.

Grouping: a run of items whose labels share a tag (``B-PER``, ``I-PER``, ``PER`` share ``PER``)
becomes one dict ``{"entity_group", "score", "word", "start", "end"}``; an item labelled ``B-...``
always opens a new run. The group's score is the mean of its items' scores, its name the label
after its first ``-`` (HF's rule), its word the items' words joined by the tokenizer's
``convert_tokens_to_string`` (its decoder: ``##`` pieces glued, ``Ġ`` / ``▁`` as spaces).

Labels in ``ignore_labels`` are dropped last: compared with ``entity`` for ``"none"`` and with
``entity_group`` otherwise (so ``"O"`` filters both, ``"PER"`` only groups).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

STRATEGIES = ("none", "simple", "first", "average", "max")

#: how a word's tokens' probability rows become the word's single row
_WORD_PROBABILITIES: dict[str, Callable[[list[np.ndarray]], np.ndarray]] = {
    "first": lambda rows: rows[0],
    "max": lambda rows: max(rows, key=np.max),  # the first of equally confident tokens
    "average": lambda rows: np.nanmean(np.stack(rows), axis=0),
}


class _Token(NamedTuple):
    index: int
    word: str
    start: int
    end: int
    probabilities: np.ndarray
    continues_word: bool


def softmax(logits: Any) -> np.ndarray:
    """Softmax over the last axis of ``logits`` (array-like, e.g. ``[T, C]``), in float32 as HF's pipeline does."""
    logits = np.asarray(logits, dtype=np.float32)
    exponentials = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def entities(text: str, token_ids: Sequence[int], offsets: Sequence[tuple[int, int]], special: Sequence[bool],
             probabilities: np.ndarray, id2label: Mapping[int, str], tokenizer: Any, strategy: str = "none",
             ignore_labels: Sequence[str] = ("O",)) -> list[dict[str, Any]]:
    """The entities HF's token-classification pipeline finds in ``text`` (see the module docstring).

    Args:
        text: the text that was encoded; ``word`` of unknown tokens and subword detection read it.
        token_ids, offsets, special: one encoding of ``text`` (one row, special tokens included):
            the ids, the ``(start, end)`` character offsets and the special-tokens mask, as a
            ``BERTTokenizerFast`` returns them with ``return_offsets_mapping=True,
            return_special_tokens_mask=True``. Lists, 1-D/2-D numpy arrays or CPU tensors.
        probabilities: ``[T, C]`` class probabilities of those ``T`` tokens (:func:`softmax` of the logits).
        id2label: class index -> label name, e.g. ``config.id2label``.
        tokenizer: the tokenizer that made ``token_ids`` (``convert_ids_to_tokens``, ``convert_tokens_to_string``,
            ``unk_token_id``, ``backend_tokenizer``: a bertkit or HF fast tokenizer).
        strategy: one of :data:`STRATEGIES`, case-insensitive.
        ignore_labels: labels (``"none"``) or group names (the other strategies) to leave out.

    Returns:
        dicts in text order, scores as Python floats and offsets as ints. Raises ValueError for an
        unknown ``strategy`` or inputs of different lengths.
    """
    strategy = _checked_strategy(strategy)
    if not len(token_ids) == len(offsets) == len(special) == len(probabilities):
        raise ValueError(f"token_ids, offsets, special and probabilities must describe the same tokens, got lengths "
                         f"{len(token_ids)}, {len(offsets)}, {len(special)} and {len(probabilities)}.")
    tokens = _tokens(text, token_ids, offsets, special, probabilities, tokenizer)
    if strategy == "none":
        labelled = [_label_token(token, id2label) for token in tokens]
        return [item for item in labelled if item["entity"] not in ignore_labels]
    join = tokenizer.convert_tokens_to_string
    if strategy == "simple":
        items = [_label_token(token, id2label) for token in tokens]
    else:
        items = [_label_word(word, _WORD_PROBABILITIES[strategy], id2label, join) for word in _words(tokens)]
    groups = (_group(run, join) for run in _runs(items))
    return [group for group in groups if group["entity_group"] not in ignore_labels]


def _checked_strategy(strategy: str) -> str:
    if not isinstance(strategy, str) or strategy.lower() not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}.")
    return strategy.lower()


def _tokens(text: str, token_ids, offsets, special, probabilities: np.ndarray, tokenizer: Any) -> list[_Token]:
    """The non-special tokens, each with whether it continues the previous word (the module docstring's rule);
    the unknown token takes the text it covers as its word."""
    word_aware = marks_continuations(tokenizer)
    tokens = []
    for index, (token_id, (start, end), is_special, row) in enumerate(zip(token_ids, offsets, special, probabilities)):
        if is_special:
            continue
        token_id, start, end = int(token_id), int(start), int(end)
        covered = text[start:end]
        if token_id == tokenizer.unk_token_id:
            tokens.append(_Token(index, covered, start, end, row, False))
        else:
            word = tokenizer.convert_ids_to_tokens(token_id)
            continues = len(word) != len(covered) if word_aware else start > 0 and " " not in text[start - 1:start + 1]
            tokens.append(_Token(index, word, start, end, row, continues))
    return tokens


def marks_continuations(tokenizer: Any) -> bool:
    """Whether the tokenizer's model marks the pieces that continue a word (WordPiece's ``##``: its
    ``continuing_subword_prefix``), so that words are told by the tokens themselves (HF's test)."""
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    return bool(getattr(model, "continuing_subword_prefix", None))


def _label_token(token: _Token, id2label: Mapping[int, str]) -> dict[str, Any]:
    best = int(np.argmax(token.probabilities))
    return {"entity": id2label[best], "score": float(token.probabilities[best]), "index": token.index,
            "word": token.word, "start": token.start, "end": token.end}


def _words(tokens: list[_Token]) -> list[list[_Token]]:
    words: list[list[_Token]] = []
    for token in tokens:
        if words and token.continues_word:
            words[-1].append(token)
        else:
            words.append([token])
    return words


def _label_word(word: list[_Token], combine: Callable[[list[np.ndarray]], np.ndarray],
                id2label: Mapping[int, str], join: Callable[[list[str]], str]) -> dict[str, Any]:
    row = combine([token.probabilities for token in word])
    best = int(np.argmax(row))
    return {"entity": id2label[best], "score": float(row[best]), "word": join([t.word for t in word]),
            "start": word[0].start, "end": word[-1].end}


def _split_label(label: str) -> tuple[str, str]:
    """``("B" or "I", tag)``; a label without a ``B-`` / ``I-`` prefix counts as an ``I-`` of itself."""
    return (label[0], label[2:]) if label.startswith(("B-", "I-")) else ("I", label)


def _runs(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    runs: list[list[dict[str, Any]]] = []
    for item in items:
        prefix, tag = _split_label(item["entity"])
        if runs and prefix != "B" and tag == _split_label(runs[-1][-1]["entity"])[1]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _group(run: list[dict[str, Any]], join: Callable[[list[str]], str]) -> dict[str, Any]:
    # the scores came from float32 probabilities, so float32 holds them exactly and the mean rounds as HF's does
    score = np.nanmean(np.array([item["score"] for item in run], dtype=np.float32))
    return {"entity_group": run[0]["entity"].split("-", 1)[-1], "score": float(score),
            "word": join([item["word"] for item in run]), "start": run[0]["start"], "end": run[-1]["end"]}
