"""Small real-text sets for tagging, QA and multiple choice, generated from the bundled Austen novels.

No NER / QA / choice set ships with bertkit, so ``benchmarks/finetune.py`` writes these at start
(deterministic: the same files for the same sizes, whatever the machine):

* tag: sentences with their words tagged ``B-/I-PER`` (character names from :data:`PERSONS`, a
  title such as ``Mr.`` before a name joins its entity) and ``B-/I-LOC`` (:data:`PLACES`), BIO in
  CoNLL files (``token TAG``); about a quarter of the sentences hold no entity.
* qa: SQuAD JSON. The context is three consecutive sentences; the question is the middle one with
  one character's name replaced by ``who`` (``"who was fond of society in his own way ?"``), the
  answer that name where it stands in the context. Neighbouring sentences bring other names.
* choice: JSON Lines ``{"context", "choices", "label"}``: which of four sentences follows the
  context sentence; the three wrong ones are other sentences of the same novel.

Sentences are split between train and test by a seeded shuffle of whole chapters, so no test
sentence (or its neighbours) is seen in training.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from bertkit.data.corpus import read_documents
from bertkit.resources import austen_files

PERSONS = frozenset(re.findall(r"\w+", """
Elizabeth Darcy Bingley Jane Lydia Kitty Mary Bennet Collins Wickham Charlotte Lucas Gardiner Catherine
Georgiana Emma Woodhouse Knightley Harriet Smith Elton Weston Churchill Fairfax Bates Frank Martin Taylor
Isabella Elinor Marianne Dashwood Willoughby Brandon Ferrars Edward Lucy Steele Jennings Palmer Middleton
Anne Elliot Wentworth Musgrove Louisa Henrietta Russell Walter Benwick Harville Fanny Price Edmund Bertram
Thomas Norris Crawford Henry Julia Maria Rushworth Yates Susan William Morland Tilney Eleanor Thorpe Allen
John Charles Robert Frederick James Margaret Sophia Clay Grant Hurst Denny Phillips Reynolds
"""))
PLACES = frozenset(re.findall(r"\w+", """
London Bath Highbury Hartfield Randalls Donwell Longbourn Pemberley Netherfield Meryton Rosings Hunsford
Derbyshire Hertfordshire Kent Brighton Mansfield Portsmouth Sotherton Everingham Antigua Northampton
Kellynch Uppercross Lyme Somersetshire Barton Norland Delaford Cleveland Devonshire Sussex Combe Allenham
Northanger Fullerton Woodston Oxford Bristol Blaize Richmond Weymouth Ireland Scotland England Surrey
Windsor Plymouth Exeter Lambton Cheapside Thornton Enscombe Maple Grove Clifton Gracechurch Yorkshire
"""))
TITLES = frozenset({"Mr", "Mrs", "Miss", "Lady", "Sir", "Colonel", "Captain", "Dr", "Admiral", "Lord"})
_TOKENS = re.compile(r"\w+|[^\w\s]")


#: entity type -> its words; the first type a word is listed under wins
GAZETTEER = {"PER": PERSONS, "LOC": PLACES}


def tag_sentence(tokens: list[str], gazetteer: dict[str, frozenset[str]] = GAZETTEER) -> list[str]:
    """BIO tags from ``gazetteer``: runs of words of one type are one entity, and a title (optionally with
    its ``.``) joins a following ``PER`` name."""
    kinds = [next((kind for kind, words in gazetteer.items() if t in words), None) for t in tokens]
    for i in range(len(tokens) - 1, -1, -1):  # right to left, so "Mr. Knightley" and "Sir Walter" join
        nxt = i + 2 if i + 2 < len(tokens) and tokens[i + 1] == "." else i + 1
        if tokens[i] in TITLES and nxt < len(tokens) and kinds[nxt] == "PER":
            for j in range(i, nxt):
                kinds[j] = "PER"
    tags = []
    for i, kind in enumerate(kinds):
        tags.append("O" if kind is None else ("I-" if i and kinds[i - 1] == kind else "B-") + kind)
    return tags


def _chapters(seed: int) -> tuple[list[list[str]], list[list[str]]]:
    """Train and test chapters (lists of sentences), split 80/20 by a seeded shuffle."""
    chapters = [doc for doc in read_documents(austen_files()) if len(doc) >= 4]
    random.Random(seed).shuffle(chapters)
    cut = len(chapters) * 4 // 5
    return chapters[:cut], chapters[cut:]


def _ner(chapters, limit: int, rng: random.Random, max_tokens: int) -> list[tuple[list[str], list[str]]]:
    with_entities, without = [], []
    for chapter in chapters:
        for sentence in chapter:
            tokens = _TOKENS.findall(sentence)
            if 4 <= len(tokens) <= max_tokens:
                tags = tag_sentence(tokens)
                (with_entities if any(t != "O" for t in tags) else without).append((tokens, tags))
    rng.shuffle(with_entities)
    rng.shuffle(without)
    chosen = with_entities[:limit - limit // 4] + without[:limit // 4]
    rng.shuffle(chosen)
    return chosen


def _qa(chapters, limit: int, rng: random.Random, max_tokens: int) -> list[dict]:
    items = []
    for c, chapter in enumerate(chapters):
        for i in range(1, len(chapter) - 1):
            names = [m for m in re.finditer(r"\b\w+\b", chapter[i]) if m.group() in PERSONS]
            if not names or len(_TOKENS.findall(" ".join(chapter[i - 1:i + 2]))) > max_tokens:
                continue
            name = rng.choice(names)
            question = chapter[i][:name.start()] + "who" + chapter[i][name.end():]
            context = " ".join(chapter[i - 1:i + 2])
            start = len(chapter[i - 1]) + 1 + name.start()
            assert context[start:start + len(name.group())] == name.group()
            items.append({"id": f"{c}-{i}", "question": question, "context": context,
                          "answers": [{"text": name.group(), "answer_start": start}]})
    rng.shuffle(items)
    return items[:limit]


def _choice(chapters, limit: int, rng: random.Random, max_tokens: int) -> list[dict]:
    short = [[s for s in chapter if 4 <= len(_TOKENS.findall(s)) <= max_tokens] for chapter in chapters]
    items = []
    for chapter, pool in zip(chapters, short):
        for i in range(len(chapter) - 1):
            context, right = chapter[i], chapter[i + 1]
            if len(_TOKENS.findall(context)) > max_tokens or len(_TOKENS.findall(right)) > max_tokens:
                continue
            wrong = [s for s in pool if s not in (context, right)]
            if len(wrong) < 3:
                continue
            choices = [right, *rng.sample(wrong, 3)]
            rng.shuffle(choices)
            items.append({"context": context, "choices": choices, "label": choices.index(right)})
    rng.shuffle(items)
    return items[:limit]


def write_sets(directory: Path, sizes: dict[str, tuple[int, int]], seed: int = 0) -> dict[str, dict[str, Path]]:
    """Write the sets of ``sizes`` (task -> (train, test) examples) into ``directory``;
    returns task -> {"train": path, "test": path}."""
    train_chapters, test_chapters = _chapters(seed)
    makers = {"tag": (_ner, 40, "conll"), "qa": (_qa, 120, "json"), "choice": (_choice, 30, "jsonl")}
    paths: dict[str, dict[str, Path]] = {}
    for task, (n_train, n_test) in sizes.items():
        make, max_tokens, ext = makers[task]
        paths[task] = {}
        for split, chapters, n in (("train", train_chapters, n_train), ("test", test_chapters, n_test)):
            items = make(chapters, n, random.Random(f"{seed}-{task}-{split}"), max_tokens)
            path = directory / f"{task}_{split}.{ext}"
            if task == "tag":
                text = "\n".join("".join(f"{t} {g}\n" for t, g in zip(tokens, tags)) for tokens, tags in items)
            elif task == "qa":
                text = json.dumps({"version": "synthetic-austen", "data": [{"title": "austen", "paragraphs": [
                    {"context": q["context"], "qas": [{"id": q["id"], "question": q["question"],
                                                       "answers": q["answers"]}]} for q in items]}]})
            else:
                text = "".join(json.dumps(item) + "\n" for item in items)
            path.write_text(text, encoding="utf-8")
            paths[task][split] = path
    return paths
