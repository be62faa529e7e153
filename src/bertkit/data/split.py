"""Holding out part of a corpus for evaluation, without ever leaving training empty.

The held-out set is every ``every``-th document when the corpus has enough documents
(``2 * every`` or more). A corpus with too few (one book whose chapters were not
recognised, a file with one paragraph per line, a single huge document) is cut into
contiguous blocks of sentences first — each block stays within one document — and every
``every``-th block is held out. A corpus too small even for that trains on everything and
has no held-out set. :attr:`HeldOutSplit.description` says which of these happened, in
words for the user. Deterministic: the same documents give the same split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertkit.checks import check_int

#: blocks are at least this many sentences (NSP pairs need a few consecutive ones)
MIN_BLOCK_SENTENCES = 8
#: and at most this many (a finer split spreads the held-out text over the corpus)
MAX_BLOCK_SENTENCES = 200


@dataclass
class HeldOutSplit:
    """``train`` and ``heldout`` documents (lists of sentences) and what was done, in words."""

    train: list[list[str]]
    heldout: list[list[str]]
    description: str


def split_heldout(documents: Sequence[list[str]], every: int = 20) -> HeldOutSplit:
    """Hold out every ``every``-th document, or every ``every``-th block of sentences when there are too
    few documents (see the module docstring). ``train`` is never empty when ``documents`` has a sentence."""
    check_int("every (one part in `every` is held out)", every, 2)
    documents = [d for d in documents if d]
    if len(documents) >= 2 * every:
        heldout = list(documents[::every])
        train = [d for i, d in enumerate(documents) if i % every]
        return HeldOutSplit(train, heldout, f"held out every {every}th of {len(documents)} documents "
                                            f"({len(heldout)} documents)")
    sentences = sum(map(len, documents))
    size = min(MAX_BLOCK_SENTENCES, max(MIN_BLOCK_SENTENCES, sentences // (10 * every)))
    blocks = [d[i:i + size] for d in documents for i in range(0, len(d), size)]
    if len(blocks) < 2:
        return HeldOutSplit(list(documents), [], f"the corpus is too small to hold any text out ({sentences} "
                                                 "sentences): training on all of it, with no held-out evaluation")
    step = min(every, len(blocks))  # a short corpus still holds out one block and trains on the rest
    heldout = blocks[::step]
    train = [b for i, b in enumerate(blocks) if i % step]
    return HeldOutSplit(train, heldout, f"only {len(documents)} document(s), too few to hold whole documents out: "
                                        f"cut them into {len(blocks)} blocks of up to {size} consecutive sentences "
                                        f"and held out every {step}th block ({len(heldout)} blocks, "
                                        f"{sum(map(len, heldout))} of {sentences} sentences)")
