"""A held-out NER set like issue 28's: sentences of one novel, tagged by a gazetteer with three entity types.

The novel is *Emma* (bundled with bertkit, public domain), split into sentences by bertkit's corpus
reader; its chapters are the reader's documents. The last ``--test-chapters`` chapters (a contiguous
block) are held out: every sentence of theirs with at least four tokens is a test sentence. The
training sentences come from the other chapters: ``--train`` of them, half holding an entity and half
entity-free (the issue's set: about half), drawn with the seed and kept in the novel's order. Lengths
are the novel's own: about 2 % of the sentences are longer than 98 words, some longer than 128 and
256 word pieces (``--max-seq-length 256`` truncates those).

Entity types, tagged BIO by :func:`finetune_data.tag_sentence` (words are ``\\w+`` or one
punctuation character):

* ``PER``: character names (:data:`finetune_data.PERSONS`); a title such as ``Mr.`` joins the name;
* ``FAC``: houses, estates and inns (:data:`HOUSES`: ``Hartfield``, ``Randalls``, ``Maple Grove``, ...);
* ``LOC``: towns, counties and countries (:data:`finetune_data.PLACES` less the houses).

Files (CoNLL, ``token TAG`` per line, a blank line between sentences; what ``bertkit finetune tag``
reads): ``OUT/train.conll`` and ``OUT/test.conll``, written atomically; the same arguments give
the same bytes on every machine. ::

    .venv/bin/python benchmarks/ner_set.py -o /tmp/ner            # 2,584 training sentences
    .venv/bin/python benchmarks/ner_set.py -o /tmp/ner --train 1200
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from bertkit.data.corpus import read_documents
from bertkit.io import atomic_write_text
from bertkit.resources import austen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune_data import _TOKENS, PERSONS, PLACES, tag_sentence  # the benchmark's sibling, not a package

NOVEL = "emma"
HOUSES = frozenset(re.findall(r"\w+", """
Hartfield Randalls Donwell Enscombe Maple Grove Crown Abbey Pemberley Netherfield Longbourn Rosings Mansfield
Sotherton Kellynch Uppercross Norland Delaford Cleveland Allenham Northanger Fullerton Woodston Everingham
"""))
#: the first type a word is listed under wins: a house is FAC, not LOC
GAZETTEER = {"PER": PERSONS, "FAC": HOUSES, "LOC": PLACES - HOUSES}


def tagged_chapters() -> list[list[tuple[list[str], list[str]]]]:
    """The novel's chapters as lists of ``(tokens, tags)``, sentences of fewer than four tokens dropped."""
    novel = [path for path in austen_files() if path.name.startswith(NOVEL)]
    chapters = []
    for chapter in read_documents(novel):
        tokenized = [_TOKENS.findall(sentence) for sentence in chapter]
        chapters.append([(tokens, tag_sentence(tokens, GAZETTEER)) for tokens in tokenized if len(tokens) >= 4])
    return chapters


def build(n_train: int, test_chapters: int, seed: int = 0) -> dict[str, list[tuple[list[str], list[str]]]]:
    """``{"train": [...], "test": [...]}``, sentences as ``(tokens, tags)``; see the module doc."""
    chapters = tagged_chapters()
    if not 0 < test_chapters < len(chapters):
        raise ValueError(f"--test-chapters must be between 1 and {len(chapters) - 1}, got {test_chapters}.")
    pool = [s for chapter in chapters[:-test_chapters] for s in chapter]
    bearing = [i for i, (_, tags) in enumerate(pool) if any(t != "O" for t in tags)]
    free = [i for i, (_, tags) in enumerate(pool) if all(t == "O" for t in tags)]
    half = n_train // 2
    if n_train < 2 or half > len(bearing) or n_train - half > len(free):
        raise ValueError(f"--train must be between 2 and {2 * min(len(bearing), len(free))} (the training "
                         f"chapters hold {len(bearing)} sentences with entities, {len(free)} without); got {n_train}.")
    rng = random.Random(f"ner-set-{seed}")
    chosen = sorted(rng.sample(bearing, half) + rng.sample(free, n_train - half))
    return {"train": [pool[i] for i in chosen], "test": [s for chapter in chapters[-test_chapters:] for s in chapter]}


def conll(sentences: list[tuple[list[str], list[str]]]) -> str:
    return "\n".join("".join(f"{token} {tag}\n" for token, tag in zip(tokens, tags)) for tokens, tags in sentences)


def describe(sentences: list[tuple[list[str], list[str]]]) -> dict[str, int]:
    entities = {kind: sum(tag == f"B-{kind}" for _, tags in sentences for tag in tags) for kind in GAZETTEER}
    return {"sentences": len(sentences), "entity_free": sum(all(t == "O" for t in tags) for _, tags in sentences),
            "longer_than_98_words": sum(len(tokens) > 98 for tokens, _ in sentences), **entities}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", type=Path, required=True, help="directory for train.conll and test.conll")
    parser.add_argument("--train", type=int, default=2584, help="training sentences (default: the issue's 2,584)")
    parser.add_argument("--test-chapters", type=int, default=11, help="held-out final chapters (default 11 of 55)")
    parser.add_argument("--seed", type=int, default=0, help="picks the training sentences (default 0)")
    args = parser.parse_args()
    sets = build(args.train, args.test_chapters, args.seed)
    args.output.mkdir(parents=True, exist_ok=True)
    for split, sentences in sets.items():
        atomic_write_text(args.output / f"{split}.conll", conll(sentences))
        print(split, json.dumps(describe(sentences)))


if __name__ == "__main__":
    main()
