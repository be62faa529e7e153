"""Argument checks made before the Rust calls, so that no Rust panic reaches the caller.

``tokenizers`` panics (``pyo3_runtime.PanicException``, a BaseException that
``except Exception`` does not catch) when a truncation window would not advance: a text is
cut to ``L`` tokens with ``0 < L <= stride``. For one text ``L`` follows from ``max_length``
alone; for a pair it depends on both texts' lengths, so :func:`cut_lengths` reproduces the
lengths ``tokenizers`` cuts a pair to and :func:`pair_cut_problem` says what is wrong with
them. Whatever panic still happens is turned into a ValueError by :func:`no_panics`.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator

#: tokens the post-processor adds: [CLS] A [SEP], and [CLS] A [SEP] B [SEP]
SPECIAL_TOKENS_SINGLE, SPECIAL_TOKENS_PAIR = 2, 3


def token_ids(ids, vocab_size: int, name: str = "token_ids") -> list[int]:
    """``ids`` (an int, a sequence of ints, a 1-D numpy array or torch tensor) as a list of ints.

    A nested sequence or a non-integer id is a TypeError; an id outside ``[0, vocab_size)``
    is a ValueError that lists the bad ids and the vocabulary size.
    """
    if hasattr(ids, "tolist"):  # numpy arrays and torch tensors, 0-d included
        ids = ids.tolist()
    if isinstance(ids, int):
        ids = [ids]
    elif isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(ids).__name__} {ids!r:.60}.")
    out = []
    for position, i in enumerate(ids):
        try:
            out.append(operator.index(i))
        except TypeError:
            nested = isinstance(i, (list, tuple))
            hint = " (pass one sequence of ids at a time, e.g. batch_decode for a batch)" if nested else ""
            raise TypeError(f"{name} must hold integer token ids; position {position} holds "
                            f"{type(i).__name__} {i!r:.40}{hint}.") from None
    bad = [(p, i) for p, i in enumerate(out) if not 0 <= i < vocab_size]
    if bad:
        listed = ", ".join(f"{i} (position {p})" for p, i in bad[:5])
        if len(bad) > 5:
            listed += f" and {len(bad) - 5} more"
        raise ValueError(f"{name} holds ids outside the vocabulary of {vocab_size} tokens (valid ids are 0 to "
                         f"{vocab_size - 1}): {listed}. Use the tokenizer (vocabulary) the ids were made with.")
    return out


def cut_lengths(n1: int, n2: int, room: int, strategy: str) -> tuple[int, int]:
    """The lengths ``tokenizers`` (0.23, ``truncate_encodings``) gives a pair of ``n1`` and ``n2`` tokens
    to fit ``room`` tokens. A length <= 0 means that ``only_first`` / ``only_second`` cannot make room."""
    if n1 + n2 <= room:
        return n1, n2
    if strategy == "only_first":
        return room - n2, n2
    if strategy == "only_second":
        return n1, room - n1
    short = min(n1, n2)
    if short <= room - short:  # only the longer text is cut
        cut_short, cut_long = short, room - short
    else:  # both are cut to half the room; the second of two equally long texts keeps the odd token
        cut_short, cut_long = room // 2, room - room // 2
    return (cut_long, cut_short) if n1 > n2 else (cut_short, cut_long)


def pair_cut_problem(n1: int, n2: int, *, strategy: str, max_length: int, reserved: int, stride: int,
                     where: str = "") -> str | None:
    """Why ``tokenizers`` cannot truncate a pair of ``n1`` and ``n2`` tokens this way, or None if it can.

    ``reserved``: the special tokens among ``max_length`` (3, or 0 without special tokens);
    ``where``: which pair of a batch, e.g. ``" (pair 3 of the batch)"``.
    """
    room = max_length - reserved
    if n1 + n2 <= room:
        return None
    l1, l2 = cut_lengths(n1, n2, room, strategy)
    # only_first / only_second keep one text whole and cut the other into the room it leaves
    kept, cut, n_kept, n_room = (("text", "text_pair", n1, l2) if strategy == "only_second" else
                                 ("text_pair", "text", n2, l1))
    if strategy != "longest_first" and n_room <= 0:
        return (f"cannot truncate to max_length={max_length} with truncation={strategy!r}{where}: {kept} alone has "
                f"{n_kept} tokens, and the {room} tokens left after {reserved} special tokens leave no room for "
                f"{cut}. Use a larger max_length, truncation='longest_first', or a shorter {kept}.")
    windows = [length for length, n in ((l1, n1), (l2, n2)) if 0 < length < n]  # the texts that are cut
    if not windows or min(windows) > stride:
        return None
    window = min(windows)
    if strategy == "longest_first":
        how = (f"text ({n1} tokens) and text_pair ({n2} tokens) share the {room} tokens left by max_length="
               f"{max_length} after {reserved} special tokens, so a text is cut into windows of {window} tokens")
        fix = "truncation='only_first' / 'only_second'"
    else:
        how = (f"{kept} has {n_kept} tokens, which leaves max_length={max_length} - {reserved} special tokens - "
               f"{n_kept} = {window} tokens for each window of {cut}")
        fix = f"a shorter {kept}"
    return (f"stride={stride} is too large for truncation={strategy!r}{where}: {how}, and the windows overlap by "
            f"stride tokens, so stride must be smaller than {window}. Use stride < {window}, a larger max_length, or "
            f"{fix}.")


def is_panic(error: BaseException) -> bool:
    """A Rust panic surfacing in Python (``pyo3_runtime.PanicException``, a BaseException)."""
    return type(error).__name__ == "PanicException"


@contextlib.contextmanager
def no_panics(arguments: Callable[[], str], fix: str,
              explain: Callable[[], str | None] = lambda: None) -> Iterator[None]:
    """Turn a Rust panic inside the block into a ValueError: ``explain()``'s message where it finds the cause
    (a tokenizer component that panics), else one naming ``arguments()`` and suggesting ``fix``."""
    try:
        yield
    except BaseException as error:
        if not is_panic(error):
            raise
        cause = explain()
        if cause is not None:
            raise ValueError(cause) from None
        message = " ".join(str(error).split())
        raise ValueError(f"the tokenizers library rejected {arguments()} (it panicked: {message}). {fix}") from None
