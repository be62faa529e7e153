"""Token classification (``bertkit finetune tag``): one tag per word — NER, POS tagging, chunking.

Data, by what the file holds (:func:`bertkit.data.sniff.sniff_format`, whatever its name):

* CoNLL (``.conll``, ``.txt``, ``.tsv``, anything but JSON lines): one token per
  line, columns separated by tabs or spaces, a blank line between sentences, ``-DOCSTART-``
  lines skipped. ``tag_column`` picks the tag's column (CoNLL-2003 is ``token POS chunk NER``:
  -1 = NER, 1 = POS, 2 = chunk). A file whose lines all hold just the token is untagged (a test set).
* JSON Lines: ``{"tokens": [...], "tags": [...]}`` per line (``ner_tags`` is read too, as HF
  datasets name it); integer tags are indices into ``labels``, which must then be given.

Labels are the training set's tags, ``"O"`` first when present, then sorted; they become the
model config's ``id2label``. The model predicts per word piece; one alignment rule links the two
levels, here and in the NER pipeline: a word's label sits on its first piece
(:func:`align_labels`), and a word's prediction is its first piece's (:func:`word_predictions`).
With ``label_all_pieces`` the other pieces are trained too, a ``B-X`` word's as ``I-X`` (other
tags are copied; prediction still reads the first piece). Words are encoded as words inside a
text: a byte-level BPE tokenizer (RoBERTa, ModernBERT) gets ``add_prefix_space``, as in HF's
``run_ner``, and is saved so with the model (:meth:`TokenClassification.tokenizer_for`).

A sentence longer than ``max_seq_length`` is cut at word boundaries into several features, so
every word is predicted (a single word longer than the window keeps its first pieces). A word
that tokenizes to nothing (e.g. a lone control character) has no piece to predict from: it is
tagged ``"O"`` (the first label when there is no ``"O"``) with score 0.0.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bertkit.modeling.heads import BERTForTokenClassification
from bertkit.tasks import metrics
from bertkit.tasks.base import IGNORE_INDEX, Task, softmax
from bertkit.tasks.readers import open_text, read_rows, table_format, where

#: tag prefixes that mark an entity scheme (scored by entity F1 rather than tag accuracy)
ENTITY_PREFIXES = ("B-", "I-", "E-", "S-")
OUTSIDE = "O"
_FIELDS = re.compile(r"[ \t]+")  # only tabs and spaces: a token may be another Unicode space


@dataclass
class TaggedSentence:
    """One sentence: its tokens, their tags (None in an untagged file), the line it starts on (1-based) and its
    file (for error messages; "" when built in code)."""

    tokens: list[str]
    tags: list[str] | None
    line: int
    path: str = ""

    @property
    def label(self) -> list[str] | None:
        """The gold tags, under the name :meth:`Task.has_labels` looks for."""
        return self.tags


class _Row(NamedTuple):
    """One tokenized model input: a sentence, or a window of it starting at word ``start``."""

    example: int
    start: int
    input_ids: list[int]
    token_type_ids: list[int]
    word_ids: list[int | None]  # relative to ``start``


# ---------------------------------------------------------------------- the alignment rule
def first_pieces(word_ids: Sequence[int | None]) -> dict[int, int]:
    """Word index -> position of the word's first piece; special tokens (None) have none."""
    first: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in first:
            first[word] = position
    return first


def align_labels(word_ids: Sequence[int | None], word_label_ids: Sequence[int] | Mapping[int, int],
                 label_all_pieces: bool, continuation_ids: Sequence[int] | Mapping[int, int] | None = None
                 ) -> list[int]:
    """Piece-level labels from word-level ones: one per entry of ``word_ids``.

    A word's first piece gets ``word_label_ids[word]``; special tokens get -100; the word's
    other pieces get -100, or with ``label_all_pieces`` the word's label mapped through
    ``continuation_ids`` (label id -> id for continuation pieces, e.g. ``B-X`` -> ``I-X``;
    None keeps the label). :func:`word_predictions` reads the word labels back.
    """
    first = set(first_pieces(word_ids).values())
    labels = []
    for position, word in enumerate(word_ids):
        if word is None or (position not in first and not label_all_pieces):
            labels.append(IGNORE_INDEX)
            continue
        label = word_label_ids[word]
        if position not in first and continuation_ids is not None and label >= 0:
            label = continuation_ids[label]
        labels.append(label)
    return labels


def word_predictions(word_ids: Sequence[int | None], piece_prediction_ids: Sequence[Any]) -> dict[int, Any]:
    """Word index -> the value at the word's first piece (a prediction id, or e.g. its probability).

    Words without a piece (special tokens only, or a word that tokenized to nothing) are absent.
    """
    return {word: piece_prediction_ids[position] for word, position in first_pieces(word_ids).items()}


def continuation_ids(labels: Sequence[str]) -> list[int]:
    """For each label id, the id its word's continuation pieces get: ``B-X`` -> ``I-X`` when present, else itself."""
    index = {label: i for i, label in enumerate(labels)}
    return [index.get("I-" + label[2:], i) if label.startswith("B-") else i for i, label in enumerate(labels)]


def split_words(piece_counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive word ranges ``[start, stop)`` covering every word, each holding at most ``budget`` pieces.

    A word with more pieces than ``budget`` gets a range of its own (the tokenizer truncates it).
    No words give one empty range, so every sentence has a feature.
    """
    windows, start, used = [], 0, 0
    for word, count in enumerate(piece_counts):
        if used + count > budget and word > start:
            windows.append((start, word))
            start, used = word, 0
        used += count
    windows.append((start, len(piece_counts)))
    return windows


def _columns(path, blocks: Sequence[Sequence[tuple[int, list[str]]]]) -> int:
    """The number of columns of a CoNLL file: what most of its lines have (``blocks``: per sentence, its
    ``(line number, fields)``). ValueError naming the file and the first line with another number of
    columns (a missing tag would otherwise shift the columns, e.g. ``in NN`` trained with tag ``NN``)."""
    counts = Counter(len(fields) for block in blocks for _, fields in block)
    if len(counts) <= 1:
        return next(iter(counts), 1)
    expected, lines = counts.most_common(1)[0]
    number, fields = next((number, fields) for block in blocks for number, fields in block
                          if len(fields) != expected)
    others = sum(counts.values()) - lines
    raise ValueError(f"{path}, line {number}: {len(fields)} column(s) ({' '.join(fields)!r:.80}), but {lines} of the "
                     f"file's lines have {expected} (token and tags, separated by spaces or tabs); {others} line(s) "
                     "differ. Give every line all its columns (a token with a space inside splits in two).")


# ---------------------------------------------------------------------- the task
class TokenClassification(Task):
    """Word tagging (``bertkit finetune tag``); see the module docstring for data, labels and alignment.

    Options: ``tag_column`` (CoNLL column of the tag, negative from the end; not 0, the token),
    ``label_all_pieces``, ``scheme`` (entity scheme for scoring: None = seqeval's default mode,
    or ``"IOB2"``/``"BIO"``, ``"IOB1"``, ``"IOBES"``/``"BIOES"`` strict), ``labels`` (the label
    list in id order, set by :meth:`fit`), ``encoding`` (of the data files).
    """

    name = "tag"
    model_class = BERTForTokenClassification
    pads_labels = True
    sequence_outputs = True
    label_hint = "a tag column in CoNLL (--tag-column), \"tags\" in JSON Lines"
    primary_metric = "f1"

    def __init__(self, *, tag_column: int = -1, label_all_pieces: bool = False, scheme: str | None = None,
                 labels: Sequence[str] | None = None, encoding: str = "utf-8"):
        super().__init__()
        if isinstance(tag_column, bool) or not isinstance(tag_column, int) or tag_column == 0:
            raise ValueError(f"tag_column must be a non-zero integer (the tag's column; 0 is the token, negative "
                             f"counts from the end), got {tag_column!r}.")
        if not isinstance(label_all_pieces, bool):
            raise ValueError(f"label_all_pieces must be True or False, got {label_all_pieces!r}.")
        if scheme is not None:
            try:  # metrics knows the schemes and their aliases
                metrics.get_entities([], scheme=scheme if isinstance(scheme, str) else "")
            except ValueError as error:
                raise ValueError(f"scheme={scheme!r}: {error}.") from None
        self.tag_column = tag_column
        self.label_all_pieces = label_all_pieces
        self.scheme = scheme.upper() if scheme is not None else None
        self.encoding = encoding
        self.labels: list[str] | None = None
        if labels is not None:
            self._use_labels(labels)

    def options(self) -> dict[str, Any]:
        return {"tag_column": self.tag_column, "label_all_pieces": self.label_all_pieces, "scheme": self.scheme,
                "labels": self.labels, "encoding": self.encoding}

    # ------------------------------------------------------------------ reading
    def read(self, path: str | os.PathLike) -> list[TaggedSentence]:
        """The sentences of a CoNLL or JSON Lines file, in order (formats in the module docstring).

        Raises ValueError naming the file and line for a line without the tag column, a JSON
        record without ``tokens`` or with a different number of tags, or integer tags without ``labels``.
        """
        jsonl = table_format(path, self.encoding) == "jsonl"
        sentences = self._read_jsonl(path) if jsonl else self._read_conll(path)
        if not sentences:
            raise ValueError(f"{path} holds no sentences.")
        return sentences

    def _read_conll(self, path) -> list[TaggedSentence]:
        blocks: list[list[tuple[int, list[str]]]] = [[]]  # per sentence: (line number, fields)
        with open_text(path, self.encoding) as f:
            for number, line in enumerate(f, 1):
                fields = _FIELDS.split(line.strip(" \t\r\n"))
                if fields == [""] or fields[0] == "-DOCSTART-":
                    if blocks[-1]:
                        blocks.append([])
                    continue
                blocks[-1].append((number, fields))
        blocks = [block for block in blocks if block]
        untagged = _columns(path, blocks) == 1
        return [TaggedSentence([fields[0] for _, fields in block],
                               None if untagged else [self._tag(path, number, fields) for number, fields in block],
                               block[0][0], str(path)) for block in blocks]

    def _tag(self, path, number: int, fields: list[str]) -> str:
        column = self.tag_column if self.tag_column > 0 else len(fields) + self.tag_column
        if not 1 <= column < len(fields):
            need = self.tag_column + 1 if self.tag_column > 0 else 1 - self.tag_column
            raise ValueError(f"{path}, line {number}: {len(fields)} column(s), but tag_column={self.tag_column} "
                             f"needs at least {need} (the token, then the tags); fix the line or choose another "
                             "tag_column.")
        return fields[column]

    def _read_jsonl(self, path) -> list[TaggedSentence]:
        rows = read_rows(path, encoding=self.encoding)
        key = next((k for k in ("tags", "ner_tags") if any(k in row.values for row in rows)), None)
        sentences = []
        for row in rows:
            tokens = row.values.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{path}, line {row.line}: expected \"tokens\": a list of strings, got {tokens!r}.")
            tags = row.values.get(key) if key else None
            if key and not isinstance(tags, list):
                raise ValueError(f"{path}, line {row.line}: no {key!r} list, but other records have one; every "
                                 "record of a tagged file needs its tags.")
            if tags is not None and len(tags) != len(tokens):
                raise ValueError(f"{path}, line {row.line}: {len(tokens)} tokens but {len(tags)} {key}.")
            sentences.append(TaggedSentence(tokens, self._tag_names(path, row.line, tags), row.line, str(path)))
        return sentences

    def _tag_names(self, path, line: int, tags: list | None) -> list[str] | None:
        if tags is None or all(isinstance(t, str) for t in tags):
            return tags
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tags):
            raise ValueError(f"{path}, line {line}: tags must be strings or integer label ids, got {tags!r}.")
        if self.labels is None:
            raise ValueError(f"{path}, line {line}: the tags are integers; pass the label names with labels=[...] "
                             "(in id order, e.g. the dataset's ClassLabel names).")
        bad = sorted({t for t in tags if not 0 <= t < len(self.labels)})
        if bad:
            raise ValueError(f"{path}, line {line}: tag ids {bad} are out of range for the {len(self.labels)} labels.")
        return [self.labels[t] for t in tags]

    # ------------------------------------------------------------------ labels
    def fit(self, examples: Sequence[TaggedSentence]) -> None:
        """The label set: the training tags, ``"O"`` first when present, then sorted.

        When ``labels`` was given, it is kept (its order is the ids') and must hold every training tag.
        """
        tags = {tag for e in examples if e.tags is not None for tag in e.tags}
        if not tags:
            raise ValueError("the training data has no tags (a CoNLL file with only the token column, or JSON "
                             "records without \"tags\"); check the file and tag_column.")
        if self.labels is None:
            self._use_labels(sorted(tags, key=lambda tag: (tag != OUTSIDE, tag)))
        elif tags - set(self.labels):
            raise ValueError(f"the training tags {sorted(tags - set(self.labels))} are not in labels={self.labels}; "
                             "add them there, or leave labels out to take the training set's.")

    def model_overrides(self) -> dict[str, Any]:
        return {"num_labels": len(self._fitted_labels()), "id2label": dict(enumerate(self._fitted_labels()))}

    def restore(self, config: Any) -> None:
        """Labels from a fine-tuned model's ``config.id2label`` (the model's order wins over ``labels``).

        A config without names (HF's ``LABEL_i`` placeholders) keeps ``labels`` when their number fits.
        """
        if config.id2label:
            self._use_labels([config.id2label[i] for i in range(config.num_labels)])
        elif self.labels is None or len(self.labels) != config.num_labels:
            raise ValueError(f"the model's config has no id2label, so its {config.num_labels} tags are unknown; "
                             "pass labels=[...] in the model's order (or fine-tune it with the tag task).")

    def _use_labels(self, labels: Sequence[str]) -> None:
        labels = list(labels)
        if not labels or not all(isinstance(label, str) for label in labels) or len(set(labels)) != len(labels):
            raise ValueError(f"labels must be a non-empty list of distinct tag strings, got {labels!r}.")
        self.labels = labels
        self._label_ids = {label: i for i, label in enumerate(labels)}
        self._continuation = continuation_ids(labels)
        entity_like = any(label.startswith(ENTITY_PREFIXES) for label in labels)
        self.primary_metric = "f1" if entity_like else "accuracy"

    def _fitted_labels(self) -> list[str]:
        if self.labels is None:
            raise ValueError("the tag task has no labels yet: call fit(train_examples) or restore(config) first.")
        return self.labels

    def _label_ids_of(self, examples: Sequence[TaggedSentence]) -> list[list[int]]:
        labels = self._fitted_labels()
        unknown = sorted({tag for e in examples for tag in e.tags} - set(labels))
        if unknown:
            first = next(e for e in examples if set(e.tags) - set(labels))
            raise ValueError(f"{where(first.path, first.line)}: tags {unknown} occur in this data but not in the "
                             f"training data (labels: {labels}); add sentences with them to the training data.")
        return [[self._label_ids[tag] for tag in e.tags] for e in examples]

    # ------------------------------------------------------------------ features
    def tokenizer_for(self, tokenizer: Any) -> Any:
        """The model's tokenizer with byte-level BPE's ``add_prefix_space`` (RoBERTa, ModernBERT), as HF's
        ``run_ner`` loads it: each pre-split word is then encoded as a word inside a text (``Ġworld``), not as a
        text's start (``world``); other tokenizers as they are
        (:meth:`~bertkit.tokenization.TokenizerFast.with_prefix_space`)."""
        with_prefix_space = getattr(tokenizer, "with_prefix_space", None)
        return with_prefix_space() if callable(with_prefix_space) else tokenizer

    def featurize(self, examples: Sequence[TaggedSentence], tokenizer: Any, max_seq_length: int) -> list[dict]:
        """One feature per window of each sentence (see the module docstring), in example order.

        Each has ``example``, ``input_ids``, ``token_type_ids``, ``word_ids`` (the sentence's word
        index per token, None for special tokens) and, when every example has tags, piece-level
        ``labels``. Raises ValueError for tags unseen in training, or a ``max_seq_length`` too
        small for the special tokens plus one piece. The words are encoded by :meth:`tokenizer_for`'s tokenizer.
        """
        tokenizer = self.tokenizer_for(tokenizer)
        self.prepare(tokenizer)
        if not examples:
            return []
        word_labels = self._label_ids_of(examples) if self.has_labels(examples) else None
        encoded = tokenizer([e.tokens for e in examples], is_split_into_words=True, return_token_type_ids=True)
        rows = [_Row(i, 0, encoded["input_ids"][i], encoded["token_type_ids"][i], encoded.word_ids(i))
                for i in range(len(examples))]
        specials = rows[0].word_ids.count(None)
        if max_seq_length <= specials:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for words beside the {specials} "
                             "special tokens; use a larger one.")
        long = [row for row in rows if len(row.input_ids) > max_seq_length]
        if long:
            rows = [row for row in rows if len(row.input_ids) <= max_seq_length] + \
                self._windows(long, examples, tokenizer, max_seq_length, max_seq_length - specials)
            rows.sort(key=lambda row: (row.example, row.start))
        features = []
        for row in rows:
            word_ids = [None if w is None else w + row.start for w in row.word_ids]
            feature = {"example": row.example, "input_ids": row.input_ids, "token_type_ids": row.token_type_ids,
                       "word_ids": word_ids}
            if word_labels is not None:
                feature["labels"] = align_labels(word_ids, word_labels[row.example], self.label_all_pieces,
                                                 self._continuation)
            features.append(feature)
        return features

    @staticmethod
    def _windows(rows: list[_Row], examples: Sequence[TaggedSentence], tokenizer: Any, max_seq_length: int,
                 budget: int) -> list[_Row]:
        """The over-long ``rows`` re-tokenized as windows of whole words, at most ``budget`` pieces each."""
        windows = []
        for row in rows:
            counts = Counter(w for w in row.word_ids if w is not None)
            pieces = [counts[w] for w in range(len(examples[row.example].tokens))]
            windows += [(row.example, start, stop) for start, stop in split_words(pieces, budget)]
        encoded = tokenizer([examples[e].tokens[start:stop] for e, start, stop in windows], is_split_into_words=True,
                            truncation=True, max_length=max_seq_length, return_token_type_ids=True)
        return [_Row(e, start, encoded["input_ids"][i], encoded["token_type_ids"][i], encoded.word_ids(i))
                for i, (e, start, _) in enumerate(windows)]

    # ------------------------------------------------------------------ predictions and scores
    def decode(self, examples, features, outputs) -> list[dict[str, Any]]:
        """Per example: ``tokens``, word-level ``tags`` (one per token), ``label`` (= tags) and ``scores``.

        ``outputs[i]`` is feature ``i``'s logits ``[len, num_labels]``; each word takes its first
        piece's most probable tag, and ``scores`` holds that tag's probability.
        """
        labels = self._fitted_labels()
        fallback = labels.index(OUTSIDE) if OUTSIDE in labels else 0
        chosen: list[dict[int, int]] = [{} for _ in examples]
        chosen_scores: list[dict[int, float]] = [{} for _ in examples]
        for feature, logits in zip(features, outputs):
            probabilities = softmax(np.asarray(logits))
            best = probabilities.argmax(-1)
            ids = word_predictions(feature["word_ids"], best.tolist())
            scores = word_predictions(feature["word_ids"], probabilities[np.arange(len(best)), best].tolist())
            chosen[feature["example"]].update(ids)
            chosen_scores[feature["example"]].update(scores)
        predictions = []
        for example, ids, scores in zip(examples, chosen, chosen_scores):
            tags = [labels[ids.get(w, fallback)] for w in range(len(example.tokens))]
            predictions.append({"tokens": example.tokens, "tags": tags, "label": tags,
                                "scores": [scores.get(w, 0.0) for w in range(len(example.tokens))]})
        return predictions

    def score(self, examples, predictions) -> dict[str, Any]:
        """Entity precision / recall / F1 (seqeval's definitions, under ``scheme``), tag accuracy, and
        ``per_type``: ``{type: {precision, recall, f1, support}}``; over the examples with gold tags."""
        pairs = [(e.tags, p["tags"]) for e, p in zip(examples, predictions) if e.tags is not None]
        if not pairs:
            raise ValueError("no sentence has gold tags to score against.")
        scores = metrics.entity_scores([gold for gold, _ in pairs], [predicted for _, predicted in pairs],
                                       scheme=self.scheme)
        flat: dict[str, Any] = {key: float(scores[key]) for key in ("precision", "recall", "f1", "accuracy")}
        flat["per_type"] = {kind: {key: (int(value) if key == "support" else float(value))
                                   for key, value in row.items()}
                            for kind, row in scores["per_type"].items()}
        return flat
