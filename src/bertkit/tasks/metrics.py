"""Evaluation metrics of the fine-tuning tasks: pure functions over lists and numpy arrays.

Every score is a plain Python ``float`` (counts are ``int``); nothing here needs torch, and the
reference libraries (scikit-learn, scipy, seqeval, the official SQuAD scripts) are never imported:
the tests compare against them. Contracts:

Classification (GLUE)
    ``predictions`` and ``labels`` are 1-D lists or arrays of equal, non-zero length holding
    hashable class values (ints or strings); a mismatch or an empty input is a ``ValueError``
    naming both arguments. :func:`precision_recall_f1` follows scikit-learn's
    ``precision_recall_fscore_support`` with ``zero_division=0`` (a 0/0 counts as 0.0): ``binary``
    scores the class ``positive`` (and, like scikit-learn, refuses more than two classes or a
    ``positive`` that is not one of two present classes); ``macro`` / ``weighted`` average over
    the classes present in labels or predictions (weighted by their support in ``labels``);
    ``micro`` pools the counts. :func:`matthews_corrcoef` is the multiclass MCC (0.0 when
    undefined). :func:`pearson` and :func:`spearman` (average ranks for ties) need two or more
    values and give NaN when either side is constant, like scipy. :func:`multilabel_scores` takes
    0/1 indicator matrices ``[N, K]`` and gives subset accuracy plus micro / macro F1 over the
    ``K`` label columns.

Entity-level tagging (seqeval)
    :func:`get_entities` reads ``(type, start, end_inclusive)`` chunks from one sentence's tags.
    ``scheme=None`` is seqeval's default, conlleval-compatible mode (lenient: an ``I-`` after ``O``
    or after another type opens a chunk; any prefix among B/I/E/S/O is read). ``scheme`` "IOB2"
    (alias "BIO"), "IOB1" or "IOBES" (alias "BIOES") is seqeval's ``mode="strict"``: only chunks
    well formed under the scheme count, and a tag whose prefix the scheme does not allow is a
    ``ValueError``. :func:`entity_scores` pools entities over sentences (a chunk never spans two)
    into micro precision / recall / F1, token accuracy and per-type scores for every type seen in
    the gold or predicted tags.

SQuAD (the official v1.1 / v2.0 evaluation scripts)
    Answers are compared after :func:`normalize_answer`. A gold list that is empty (or whose
    answers all normalise to "") stands for an unanswerable question, whose only gold answer is
    "". :func:`squad_scores` and :func:`best_null_threshold` give percentages (0-100) over the
    questions of ``gold``; a question missing from ``predictions`` scores 0.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "accuracy",
    "best_null_threshold",
    "entity_scores",
    "exact_match_score",
    "f1_answer_score",
    "f1_score",
    "format_entity_table",
    "get_entities",
    "matthews_corrcoef",
    "multilabel_scores",
    "normalize_answer",
    "pearson",
    "precision_recall_f1",
    "spearman",
    "squad_scores",
]

AVERAGES = ("binary", "macro", "micro", "weighted")


# ====================================================================== shared helpers
def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` as a float, 0.0 when the denominator is 0 (zero_division=0)."""
    return float(numerator) / float(denominator) if denominator else 0.0


def _f1_from_counts(tp: float, n_pred: float, n_true: float) -> float:
    """F1 = 2 tp / (n_pred + n_true): the harmonic mean of precision and recall, 0.0 when undefined."""
    return _ratio(2.0 * tp, n_pred + n_true)


def _paired_1d(predictions: Any, labels: Any, caller: str) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as 1-D arrays of the same non-zero length, else a ``ValueError`` naming them."""
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    if pred.ndim != 1 or gold.ndim != 1:
        raise ValueError(
            f"{caller}: predictions and labels must be 1-D sequences, got shapes {pred.shape} and {gold.shape}"
        )
    if len(pred) != len(gold):
        raise ValueError(f"{caller}: predictions and labels differ in length ({len(pred)} vs {len(gold)})")
    if len(pred) == 0:
        raise ValueError(f"{caller}: predictions and labels are empty; there is nothing to score")
    return pred, gold


def _class_codes(pred: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted classes present on either side, and each side's items as indices into them."""
    classes, codes = np.unique(np.concatenate([gold, pred]), return_inverse=True)
    codes = codes.reshape(-1)
    return classes, codes[len(gold) :], codes[: len(gold)]


# ====================================================================== classification
def accuracy(predictions: Any, labels: Any) -> float:
    """Share of items whose prediction equals the label."""
    pred, gold = _paired_1d(predictions, labels, "accuracy")
    return float(np.mean(pred == gold))


def _class_counts(pred_codes: np.ndarray, true_codes: np.ndarray, n_classes: int) -> tuple[np.ndarray, ...]:
    """Per class: true positives, number predicted, number in the labels."""
    tp = np.bincount(true_codes[true_codes == pred_codes], minlength=n_classes)
    n_pred = np.bincount(pred_codes, minlength=n_classes)
    n_true = np.bincount(true_codes, minlength=n_classes)
    return tp, n_pred, n_true


def _binary_index(classes: np.ndarray, positive: Any) -> int | None:
    """Index of ``positive`` among the classes (None when absent), checking the task is binary."""
    if len(classes) > 2:
        raise ValueError(
            f"precision_recall_f1: average='binary' needs at most two classes, got {len(classes)} "
            f"({classes.tolist()}); choose average='macro', 'micro' or 'weighted'"
        )
    matches = [i for i, value in enumerate(classes.tolist()) if value == positive]
    if not matches and len(classes) == 2:
        raise ValueError(
            f"precision_recall_f1: positive={positive!r} is not one of the classes {classes.tolist()}; "
            "pass positive= the class to score"
        )
    return matches[0] if matches else None


def precision_recall_f1(
    predictions: Any, labels: Any, *, average: str = "binary", positive: Any = 1
) -> dict[str, float]:
    """Precision, recall and F1 as scikit-learn's ``precision_recall_fscore_support`` (zero_division=0).

    ``average``: "binary" scores the class ``positive`` only; "macro" is the unweighted mean of the
    per-class scores over the classes present in labels or predictions; "weighted" weights that
    mean by each class's count in ``labels``; "micro" pools the counts of all classes.
    """
    if average not in AVERAGES:
        raise ValueError(f"precision_recall_f1: average must be one of {AVERAGES}, got {average!r}")
    pred, gold = _paired_1d(predictions, labels, "precision_recall_f1")
    classes, pred_codes, true_codes = _class_codes(pred, gold)
    tp, n_pred, n_true = _class_counts(pred_codes, true_codes, len(classes))

    if average == "binary":
        index = _binary_index(classes, positive)
        if index is None:  # the positive class appears nowhere: every score is 0/0
            return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        tp, n_pred, n_true = tp[index : index + 1], n_pred[index : index + 1], n_true[index : index + 1]
    elif average == "micro":
        tp, n_pred, n_true = tp.sum(keepdims=True), n_pred.sum(keepdims=True), n_true.sum(keepdims=True)

    precision = np.array([_ratio(t, p) for t, p in zip(tp, n_pred)])
    recall = np.array([_ratio(t, n) for t, n in zip(tp, n_true)])
    f1 = np.array([_f1_from_counts(t, p, n) for t, p, n in zip(tp, n_pred, n_true)])
    weights = n_true if average == "weighted" else None
    return {
        "precision": float(np.average(precision, weights=weights)),
        "recall": float(np.average(recall, weights=weights)),
        "f1": float(np.average(f1, weights=weights)),
    }


def f1_score(predictions: Any, labels: Any, *, average: str = "binary", positive: Any = 1) -> float:
    """The ``f1`` of :func:`precision_recall_f1`."""
    return precision_recall_f1(predictions, labels, average=average, positive=positive)["f1"]


def matthews_corrcoef(predictions: Any, labels: Any) -> float:
    """Multiclass Matthews correlation coefficient (Gorodkin's R_K), 0.0 when it is undefined.

    From the confusion matrix C: ``(c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t))`` with ``c`` the
    correct count, ``s`` the sample count, ``t`` / ``p`` the per-class true / predicted counts.
    """
    pred, gold = _paired_1d(predictions, labels, "matthews_corrcoef")
    classes, pred_codes, true_codes = _class_codes(pred, gold)
    _, n_pred, n_true = _class_counts(pred_codes, true_codes, len(classes))
    n_pred, n_true = n_pred.astype(np.float64), n_true.astype(np.float64)
    n_samples = float(len(gold))
    n_correct = float(np.sum(pred_codes == true_codes))
    cov_true_pred = n_correct * n_samples - float(n_true @ n_pred)
    cov_pred_pred = n_samples**2 - float(n_pred @ n_pred)
    cov_true_true = n_samples**2 - float(n_true @ n_true)
    if cov_pred_pred * cov_true_true == 0:
        return 0.0
    return cov_true_pred / math.sqrt(cov_true_true * cov_pred_pred)


def _paired_floats(predictions: Any, labels: Any, caller: str) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as float64 vectors of the same length, at least 2."""
    pred, gold = _paired_1d(predictions, labels, caller)
    if len(pred) < 2:
        raise ValueError(f"{caller}: predictions and labels need at least 2 values each, got {len(pred)}")
    return pred.astype(np.float64), gold.astype(np.float64)


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r of two float vectors; NaN when either is constant."""
    if np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    dx = x - x.mean()
    dy = y - y.mean()
    r = float(dx @ dy) / math.sqrt(float(dx @ dx) * float(dy @ dy))
    return max(-1.0, min(1.0, r))


def pearson(predictions: Any, labels: Any) -> float:
    """Pearson correlation coefficient; NaN when either side is constant."""
    return _correlation(*_paired_floats(predictions, labels, "pearson"))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_group = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], len(values))  # exclusive
    mean_rank = (starts + 1 + ends) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def spearman(predictions: Any, labels: Any) -> float:
    """Spearman rank correlation (Pearson's r of the average ranks); NaN when either side is constant."""
    x, y = _paired_floats(predictions, labels, "spearman")
    return _correlation(_average_ranks(x), _average_ranks(y))


def multilabel_scores(predictions: Any, labels: Any) -> dict[str, float]:
    """Subset accuracy and micro / macro F1 of 0/1 indicator matrices ``[N, K]``.

    ``exact_match``: share of rows with every label right. ``micro_f1`` pools the counts of all
    cells; ``macro_f1`` averages the F1 of the K columns (a column never true nor predicted: 0.0).
    """
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    if pred.ndim != 2 or gold.shape != pred.shape:
        raise ValueError(
            f"multilabel_scores: predictions and labels must be [N, K] matrices of the same shape, "
            f"got {pred.shape} and {gold.shape}"
        )
    if pred.shape[0] == 0:
        raise ValueError("multilabel_scores: predictions and labels are empty; there is nothing to score")
    for name, matrix in (("predictions", pred), ("labels", gold)):
        if not np.isin(matrix, (0, 1)).all():
            raise ValueError(f"multilabel_scores: {name} must hold only 0 and 1")
    pred, gold = pred.astype(bool), gold.astype(bool)
    tp = (pred & gold).sum(axis=0)
    n_pred = pred.sum(axis=0)
    n_true = gold.sum(axis=0)
    return {
        "exact_match": float(np.mean((pred == gold).all(axis=1))),
        "micro_f1": _f1_from_counts(tp.sum(), n_pred.sum(), n_true.sum()),
        "macro_f1": float(np.mean([_f1_from_counts(*counts) for counts in zip(tp, n_pred, n_true)])),
    }


# ====================================================================== entity-level tagging
# --- seqeval's default (conlleval-compatible) mode --------------------------------------------
def _lenient_split(tag: str) -> tuple[str, str]:
    """(prefix, type) as the default mode reads them: "B-PER" -> ("B", "PER"), "O" -> ("O", "_")."""
    if not tag:
        raise ValueError("empty tag: every token needs a tag such as 'O' or 'B-PER'")
    return tag[0], tag[1:].split("-", 1)[-1] or "_"


def _lenient_chunk_ends(prev_prefix: str, prefix: str, prev_type: str, type_: str) -> bool:
    """Whether the chunk holding the previous tag ends before the current one."""
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix not in ("O", ".") and prev_type != type_


def _lenient_chunk_starts(prev_prefix: str, prefix: str, prev_type: str, type_: str) -> bool:
    """Whether a chunk starts at the current tag."""
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix not in ("O", ".") and prev_type != type_


def _lenient_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks of one sentence in seqeval's default mode."""
    chunks = []
    prev_prefix, prev_type, start = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):  # the trailing O closes a chunk open at the end
        prefix, type_ = _lenient_split(tag)
        if _lenient_chunk_ends(prev_prefix, prefix, prev_type, type_):
            chunks.append((prev_type, start, i - 1))
        if _lenient_chunk_starts(prev_prefix, prefix, prev_type, type_):
            start = i
        prev_prefix, prev_type = prefix, type_
    return chunks


# --- seqeval's strict mode ---------------------------------------------------------------------
# A rule (previous prefixes, current prefixes, type condition) holds for two adjacent tags when the
# previous tag's prefix is among the first, the current one's among the second and their types
# compare as asked ("same", "diff" or "any"). A chunk starts at a tag matching a start rule with the
# tag before it, extends over the following tags while each matches an inside rule with its
# predecessor, and counts only if the first tag after it matches an end rule with the chunk's last tag.
_Rule = tuple[str, str, str]
_ANY_PREFIX = "IOBESUL"
_SCHEMES: dict[str, dict[str, Any]] = {
    "IOB2": {
        "allowed": "IOB",
        "start": [(_ANY_PREFIX, "B", "any")],
        "inside": [("BI", "I", "same")],
        "end": [("BI", "OB", "any"), ("BI", "I", "diff")],
    },
    "IOB1": {
        "allowed": "IOB",
        "start": [("O", "I", "any"), ("I", "I", "diff"), ("B", "I", "any"), ("IB", "B", "same")],
        "inside": [("BI", "I", "same")],
        "end": [("BI", "I", "diff"), ("BI", "O", "any"), ("I", "B", "any"), ("B", "B", "same")],
    },
    "IOBES": {
        "allowed": "IOBES",
        "start": [(_ANY_PREFIX, "BS", "any")],
        "inside": [("BI", "IE", "same")],
        "end": [("SE", _ANY_PREFIX, "any")],
    },
}
_SCHEME_ALIASES = {"BIO": "IOB2", "BIOES": "IOBES"}


def _scheme_name(scheme: str | None) -> str | None:
    """The canonical scheme name (None for the default mode); a ``ValueError`` for an unknown one."""
    if scheme is None:
        return None
    name = _SCHEME_ALIASES.get(scheme.upper(), scheme.upper())
    if name not in _SCHEMES:
        known = sorted([*_SCHEMES, *_SCHEME_ALIASES])
        raise ValueError(f"unknown tagging scheme {scheme!r}; use one of {known} or None (seqeval's default mode)")
    return name


def _strict_split(tag: str, scheme: str) -> tuple[str, str]:
    """(prefix, type) as strict mode reads them; a ``ValueError`` for a prefix the scheme does not allow."""
    prefix, type_ = tag[:1], tag[1:].strip("-") or "_"
    if not prefix or prefix not in _SCHEMES[scheme]["allowed"]:
        raise ValueError(f"tag {tag!r} is not valid in the {scheme} scheme (allowed prefixes: "
                         f"{', '.join(_SCHEMES[scheme]['allowed'])})")
    return prefix, type_


def _rule_holds(rules: list[_Rule], prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    """Whether any rule matches the adjacent (prefix, type) pairs ``prev`` and ``cur``."""
    for prev_prefixes, cur_prefixes, condition in rules:
        if prev[0] in prev_prefixes and cur[0] in cur_prefixes:
            same = prev[1] == cur[1]
            if condition == "any" or (condition == "same") == same:
                return True
    return False


def _strict_entities(tags: Sequence[str], scheme: str) -> list[tuple[str, int, int]]:
    """Chunks of one sentence in seqeval's strict mode for ``scheme``."""
    rules = _SCHEMES[scheme]
    tokens = [_strict_split(tag, scheme) for tag in tags] + [("O", "_")]  # the trailing O closes the sentence
    chunks = []
    i, prev = 0, ("O", "_")
    while i < len(tokens):
        if not _rule_holds(rules["start"], prev, tokens[i]):
            prev = tokens[i]
            i += 1
            continue
        after = i + 1  # first tag after the chunk
        while _rule_holds(rules["inside"], tokens[after - 1], tokens[after]):
            after += 1
        if _rule_holds(rules["end"], tokens[after - 1], tokens[after]):
            chunks.append((tokens[i][1], i, after - 1))
        prev = tokens[after - 1]
        i = after  # the tags inside a chunk (counted or not) never start another
    return chunks


def get_entities(tags: Sequence[str], *, scheme: str | None = None) -> list[tuple[str, int, int]]:
    """``(type, start, end_inclusive)`` chunks of one sentence's tags, in order.

    ``scheme=None``: seqeval's default mode, which reads any mix of B/I/E/S/O prefixes leniently
    (``["I-PER", "I-PER", "O", "B-LOC"]`` -> ``[("PER", 0, 1), ("LOC", 3, 3)]``). "IOB2"/"BIO",
    "IOB1", "IOBES"/"BIOES": seqeval's strict mode, keeping only chunks well formed under the scheme.
    """
    name = _scheme_name(scheme)
    tags = list(tags)
    return _lenient_entities(tags) if name is None else _strict_entities(tags, name)


def _check_sentences(true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> None:
    """A ``ValueError`` unless both sides have as many sentences, of the same lengths."""
    if len(true_tags) != len(pred_tags):
        raise ValueError(
            f"entity_scores: true_tags has {len(true_tags)} sentences but pred_tags has {len(pred_tags)}"
        )
    for index, (gold, pred) in enumerate(zip(true_tags, pred_tags)):
        if len(gold) != len(pred):
            raise ValueError(
                f"entity_scores: sentence {index} has {len(gold)} true tags but {len(pred)} predicted tags"
            )


def _prf(tp: int, n_pred: int, n_true: int) -> dict[str, float]:
    """Precision, recall and F1 (harmonic mean of the two, 0.0 when both are 0) of entity counts."""
    precision, recall = _ratio(tp, n_pred), _ratio(tp, n_true)
    f1 = _ratio(2 * precision * recall, precision + recall)
    return {"precision": precision, "recall": recall, "f1": f1}


def entity_scores(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], *, scheme: str | None = None
) -> dict[str, Any]:
    """Entity-level scores of tagged sentences, as seqeval computes them.

    Returns ``precision``, ``recall``, ``f1`` (micro: pooled over all entities, an entity right only
    when its type and both bounds are), ``accuracy`` (share of tokens tagged right) and ``per_type``:
    ``{type: {"precision", "recall", "f1", "support"}}`` over the types seen on either side, sorted by
    name, ``support`` being the number of true entities of the type.
    """
    _check_sentences(true_tags, pred_tags)
    n_tokens = sum(len(sentence) for sentence in true_tags)
    if n_tokens == 0:
        raise ValueError("entity_scores: true_tags and pred_tags hold no tokens; there is nothing to score")
    name = _scheme_name(scheme)
    true_set, pred_set = set(), set()
    for index, (gold, pred) in enumerate(zip(true_tags, pred_tags)):
        true_set.update((index, *chunk) for chunk in get_entities(gold, scheme=name))
        pred_set.update((index, *chunk) for chunk in get_entities(pred, scheme=name))
    correct_tokens = sum(g == p for gold, pred in zip(true_tags, pred_tags) for g, p in zip(gold, pred))

    per_type = {}
    for type_ in sorted({entity[1] for entity in true_set | pred_set}):
        gold_of_type = {entity for entity in true_set if entity[1] == type_}
        pred_of_type = {entity for entity in pred_set if entity[1] == type_}
        scores = _prf(len(gold_of_type & pred_of_type), len(pred_of_type), len(gold_of_type))
        per_type[type_] = {**scores, "support": len(gold_of_type)}
    return {
        **_prf(len(true_set & pred_set), len(pred_set), len(true_set)),
        "accuracy": correct_tokens / n_tokens,
        "per_type": per_type,
    }


def format_entity_table(scores: Mapping[str, Any], *, digits: int = 4) -> str:
    """A text table of :func:`entity_scores`'s result: one row per type, then the micro average."""
    per_type = scores.get("per_type", {})
    support = sum(row["support"] for row in per_type.values())
    rows = [(name, row["precision"], row["recall"], row["f1"], row["support"]) for name, row in per_type.items()]
    average = ("micro avg", scores["precision"], scores["recall"], scores["f1"], support)
    width = max([len(name) for name, *_ in rows] + [len("micro avg"), digits])

    def line(name: str, precision: float, recall: float, f1: float, count: int) -> str:
        return f"{name:>{width}}  {precision:>9.{digits}f} {recall:>9.{digits}f} {f1:>9.{digits}f} {count:>9}"

    header = f"{'':>{width}}  {'precision':>9} {'recall':>9} {'f1-score':>9} {'support':>9}"
    lines = [header, "", *(line(*row) for row in rows)]
    if rows:
        lines.append("")
    lines.append(line(*average))
    return "\n".join(lines) + "\n"


# ====================================================================== SQuAD
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (in that order)."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _gold_or_null(gold_answers: Sequence[str]) -> list[str]:
    """The gold answers that normalise to something, or ``[""]`` (unanswerable), as the v2 script."""
    kept = [answer for answer in gold_answers if normalize_answer(answer)]
    return kept or [""]


def _token_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of two answers (multiset overlap of normalised tokens)."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction: str, gold_answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold answer, else 0.0."""
    predicted = normalize_answer(prediction)
    return max(float(predicted == normalize_answer(gold)) for gold in _gold_or_null(gold_answers))


def f1_answer_score(prediction: str, gold_answers: Sequence[str]) -> float:
    """The best token F1 of the prediction against the gold answers."""
    return max(_token_f1(prediction, gold) for gold in _gold_or_null(gold_answers))


def _per_question(
    predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]], score: Callable[[str, Sequence[str]], float]
) -> dict[str, float]:
    """``score`` of each gold question's prediction; 0.0 for a question without a prediction."""
    return {qid: score(predictions[qid], answers) if qid in predictions else 0.0 for qid, answers in gold.items()}


def _group_scores(exact: Mapping[str, float], f1: Mapping[str, float], qids: Sequence[str]) -> dict[str, Any]:
    """Percent exact match and F1 over ``qids``, and their number."""
    return {
        "exact_match": 100.0 * sum(exact[qid] for qid in qids) / len(qids),
        "f1": 100.0 * sum(f1[qid] for qid in qids) / len(qids),
        "total": len(qids),
    }


def squad_scores(predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Percent exact match and F1 over the questions of ``gold`` (``{id: [answer, ...]}``), like the v2 script.

    When some question is unanswerable (empty gold list) the result also has ``HasAns_*`` and
    ``NoAns_*`` (``exact_match``, ``f1``, ``total``) for the groups that have questions. A question
    missing from ``predictions`` scores 0; predictions of unknown questions are ignored.
    """
    if not gold:
        raise ValueError("squad_scores: gold holds no questions; there is nothing to score")
    exact = _per_question(predictions, gold, exact_match_score)
    f1 = _per_question(predictions, gold, f1_answer_score)
    result = _group_scores(exact, f1, list(gold))
    no_ans = [qid for qid, answers in gold.items() if not answers]
    if no_ans:
        has_ans = [qid for qid, answers in gold.items() if answers]
        for prefix, qids in (("HasAns", has_ans), ("NoAns", no_ans)):
            if qids:
                result.update({f"{prefix}_{key}": value for key, value in _group_scores(exact, f1, qids).items()})
    return result


def best_null_threshold(
    null_score_diffs: Mapping[str, float],
    predictions: Mapping[str, str],
    gold: Mapping[str, Sequence[str]],
    *,
    metric: str = "f1",
) -> tuple[float, float]:
    """The null-score threshold that maximises ``metric`` ("f1" or "exact_match"), and that score (percent).

    The official v2 ``find_best_thresh``: a question whose ``null_score_diffs`` value is above the
    threshold gets the null answer "", the others their prediction. Starting from the score of
    answering "" everywhere (one point per unanswerable question), the questions are taken in
    increasing diff and switched to their prediction: an answerable one gains its score, an
    unanswerable one loses a point when its prediction is non-empty. The best running total wins
    (the first, on ties; threshold 0.0 if none beats the start). Questions without a diff or a
    prediction keep the null answer; the score is over all the questions of ``gold``.
    """
    scorers = {"f1": f1_answer_score, "exact_match": exact_match_score}
    if metric not in scorers:
        raise ValueError(f"best_null_threshold: metric must be 'f1' or 'exact_match', got {metric!r}")
    if not gold:
        raise ValueError("best_null_threshold: gold holds no questions; there is nothing to score")
    score = scorers[metric]
    current = best = float(sum(1 for answers in gold.values() if not answers))
    threshold = 0.0
    for qid in sorted(null_score_diffs, key=lambda q: null_score_diffs[q]):
        if qid not in gold or qid not in predictions:
            continue
        if gold[qid]:
            current += score(predictions[qid], gold[qid])
        elif predictions[qid]:
            current -= 1.0
        if current > best:
            best, threshold = current, float(null_score_diffs[qid])
    return threshold, 100.0 * best / len(gold)
