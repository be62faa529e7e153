"""bertkit.tasks.metrics against the references: scikit-learn, scipy, seqeval and the official SQuAD scripts.

The references are test-only: each test that needs one asks for it through a fixture that skips when
it is not installed. The SQuAD reference is a small transcription of the official v2.0 script's
``normalize_answer`` / ``compute_exact`` / ``compute_f1`` / ``find_best_thresh``, kept apart from
the code under test.
"""

from __future__ import annotations

import collections
import math
import re
import string
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.tasks.metrics import (
    accuracy,
    best_null_threshold,
    entity_scores,
    exact_match_score,
    f1_answer_score,
    f1_score,
    format_entity_table,
    get_entities,
    matthews_corrcoef,
    multilabel_scores,
    normalize_answer,
    pearson,
    precision_recall_f1,
    spearman,
    squad_scores,
)

FAST = settings(max_examples=150, deadline=None, derandomize=True)

# the references' own complaints about degenerate inputs (one class only, no entities at all)
pytestmark = [
    pytest.mark.filterwarnings("ignore:A single label was found:UserWarning"),
    pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]


# ====================================================================== reference fixtures
@pytest.fixture(scope="module")
def skm():
    return pytest.importorskip("sklearn.metrics")


@pytest.fixture(scope="module")
def scipy_stats():
    return pytest.importorskip("scipy.stats")


@pytest.fixture(scope="module")
def seqeval():
    metrics = pytest.importorskip("seqeval.metrics")
    scheme = pytest.importorskip("seqeval.scheme")
    labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    schemes = {"IOB2": scheme.IOB2, "IOB1": scheme.IOB1, "IOBES": scheme.IOBES}
    return collections.namedtuple("Seqeval", "metrics scheme labeling schemes")(metrics, scheme, labeling, schemes)


# ====================================================================== classification
def _random_pair(rng, classes, n_max=30):
    n = int(rng.integers(1, n_max + 1))
    labels = [classes[i] for i in rng.integers(0, len(classes), n)]
    # mostly-right predictions, sometimes fully random, sometimes constant
    mode = rng.integers(0, 3)
    if mode == 0:
        predictions = [classes[i] for i in rng.integers(0, len(classes), n)]
    elif mode == 1:
        predictions = [lab if rng.random() < 0.7 else classes[rng.integers(0, len(classes))] for lab in labels]
    else:
        predictions = [classes[rng.integers(0, len(classes))]] * n
    return predictions, labels


def _sk_prf(skm, predictions, labels, average, positive=1):
    p, r, f, _ = skm.precision_recall_fscore_support(
        labels, predictions, average=average, pos_label=positive, zero_division=0
    )
    return {"precision": p, "recall": r, "f1": f}


@pytest.mark.parametrize("classes", [[0, 1, 2], ["neutral", "contradiction", "entailment", "x"], [0, 1, 2, 3, 4, 5]])
def test_multiclass_scores_match_sklearn(skm, classes):
    rng = np.random.default_rng(len(classes))
    for _ in range(60):
        predictions, labels = _random_pair(rng, classes)
        assert accuracy(predictions, labels) == pytest.approx(skm.accuracy_score(labels, predictions))
        for average in ("macro", "micro", "weighted"):
            ours = precision_recall_f1(predictions, labels, average=average)
            assert ours == pytest.approx(_sk_prf(skm, predictions, labels, average), abs=1e-12), average
            assert f1_score(predictions, labels, average=average) == pytest.approx(ours["f1"])
        assert matthews_corrcoef(predictions, labels) == pytest.approx(
            skm.matthews_corrcoef(labels, predictions), abs=1e-12
        )


@pytest.mark.parametrize(("classes", "positive"), [([0, 1], 1), ([0, 1], 0), (["no", "yes"], "yes")])
def test_binary_scores_match_sklearn(skm, classes, positive):
    rng = np.random.default_rng(7)
    for _ in range(60):
        predictions, labels = _random_pair(rng, classes, n_max=12)
        ours = precision_recall_f1(predictions, labels, positive=positive)
        assert ours == pytest.approx(_sk_prf(skm, predictions, labels, "binary", positive), abs=1e-12)
        for average in ("macro", "micro", "weighted"):
            ours = precision_recall_f1(predictions, labels, average=average, positive=positive)
            assert ours == pytest.approx(_sk_prf(skm, predictions, labels, average), abs=1e-12)
        assert matthews_corrcoef(np.array(predictions), np.array(labels)) == pytest.approx(
            skm.matthews_corrcoef(labels, predictions), abs=1e-12
        )


@pytest.mark.parametrize(
    ("predictions", "labels"),
    [
        ([0, 0, 0], [0, 0, 0]),  # the positive class nowhere: 0/0 everywhere
        ([1, 1, 1], [1, 1, 1]),
        ([0, 0, 0], [1, 1, 0]),  # never predicts positive
        ([1, 1, 0], [0, 0, 0]),  # positive never true
        ([1], [0]),
        ([0, 1, 1, 0], [0, 1, 0, 1]),
    ],
)
def test_binary_edge_cases(skm, predictions, labels):
    ours = precision_recall_f1(predictions, labels)
    assert ours == pytest.approx(_sk_prf(skm, predictions, labels, "binary"), abs=1e-12)
    assert all(type(value) is float for value in ours.values())
    assert matthews_corrcoef(predictions, labels) == pytest.approx(skm.matthews_corrcoef(labels, predictions))


def test_macro_counts_classes_seen_only_in_predictions(skm):
    labels, predictions = [0, 0, 1, 1], [0, 2, 1, 1]  # class 2 is never true: precision 0 drags macro down
    ours = precision_recall_f1(predictions, labels, average="macro")
    assert ours == pytest.approx(_sk_prf(skm, predictions, labels, "macro"))
    assert ours["recall"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_matthews_degenerate_is_zero(skm):
    for predictions, labels in [([1, 1, 1], [0, 1, 0]), ([2, 2], [2, 2]), ([0, 1, 2], [1, 1, 1])]:
        assert matthews_corrcoef(predictions, labels) == 0.0 == skm.matthews_corrcoef(labels, predictions)
    assert matthews_corrcoef([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)


def test_scores_are_python_floats():
    values = [
        accuracy(np.array([1, 0]), np.array([1, 1])),
        f1_score([1, 0], [1, 1]),
        matthews_corrcoef([1, 0], [1, 0]),
        pearson(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])),
        spearman([1, 2, 3], [3, 2, 2]),
        *multilabel_scores([[1, 0]], [[1, 1]]).values(),
    ]
    assert all(type(value) is float for value in values)


def test_classification_errors():
    with pytest.raises(ValueError, match="predictions and labels are empty"):
        accuracy([], [])
    with pytest.raises(ValueError, match=r"predictions and labels differ in length \(2 vs 3\)"):
        accuracy([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="1-D"):
        accuracy([[1, 0]], [[1, 0]])
    with pytest.raises(ValueError, match="predictions and labels are empty"):
        precision_recall_f1([], [], average="macro")
    with pytest.raises(ValueError, match="average must be one of"):
        precision_recall_f1([1], [1], average="samples")
    with pytest.raises(ValueError, match="at most two classes"):
        precision_recall_f1([0, 1, 2], [0, 1, 1])
    with pytest.raises(ValueError, match="positive=1 is not one of the classes"):
        f1_score(["no", "yes"], ["yes", "yes"])
    with pytest.raises(ValueError, match="predictions and labels differ in length"):
        matthews_corrcoef([0], [0, 1])
    with pytest.raises(ValueError, match="at least 2 values"):
        pearson([1.0], [2.0])
    with pytest.raises(ValueError, match="predictions and labels differ in length"):
        spearman([1.0, 2.0], [2.0, 3.0, 4.0])


# ====================================================================== correlations
def _assert_same_correlation(ours, theirs):
    """NaN must meet NaN; numbers must agree closely."""
    if math.isnan(theirs):
        assert math.isnan(ours)
    else:
        assert ours == pytest.approx(theirs, abs=1e-10)


def test_correlations_match_scipy(scipy_stats):
    rng = np.random.default_rng(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input
        for trial in range(200):
            n = int(rng.integers(2, 25))
            if trial % 3 == 0:  # STS-B-like scores on a grid: many ties
                x = rng.integers(0, 4, n).astype(float) / 2
                y = rng.integers(0, 3, n).astype(float)
            else:
                x = rng.normal(size=n)
                y = x * rng.normal() + rng.normal(size=n)
            for ours, theirs in ((pearson(x, y), scipy_stats.pearsonr(x, y)[0]),
                                 (spearman(x, y), scipy_stats.spearmanr(x, y)[0])):
                _assert_same_correlation(ours, float(theirs))


def test_correlation_edge_cases(scipy_stats):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, y in [([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])]:
            assert math.isnan(pearson(x, y)) and math.isnan(float(scipy_stats.pearsonr(x, y)[0]))
            assert math.isnan(spearman(x, y)) and math.isnan(float(scipy_stats.spearmanr(x, y)[0]))
    assert pearson([1, 2], [3, 5]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [10, 20, 30, 1000]) < 1.0
    ties = ([1, 2, 2, 3, 3, 3], [3, 1, 2, 2, 5, 4])
    assert spearman(*ties) == pytest.approx(scipy_stats.spearmanr(*ties)[0])


# ====================================================================== multilabel
def test_multilabel_matches_sklearn(skm):
    rng = np.random.default_rng(11)
    for _ in range(150):
        n, k = int(rng.integers(1, 12)), int(rng.integers(1, 6))
        labels = (rng.random((n, k)) < rng.random()).astype(int)
        flips = rng.random((n, k)) < rng.random() * 0.5
        predictions = np.where(flips, 1 - labels, labels)
        ours = multilabel_scores(predictions, labels)
        assert ours["exact_match"] == pytest.approx(skm.accuracy_score(labels, predictions))
        if k == 1:  # sklearn reads an [N, 1] matrix as one column of classes: compare with binary F1 of label 1
            binary = skm.f1_score(labels.ravel(), predictions.ravel(), labels=[1], average="macro", zero_division=0)
            assert ours["micro_f1"] == ours["macro_f1"] == pytest.approx(binary)
            continue
        for average in ("micro", "macro"):
            expected = skm.f1_score(labels, predictions, average=average, zero_division=0)
            assert ours[f"{average}_f1"] == pytest.approx(expected), average


def test_multilabel_edge_cases(skm):
    zeros = np.zeros((3, 4), dtype=int)
    assert multilabel_scores(zeros, zeros) == {"exact_match": 1.0, "micro_f1": 0.0, "macro_f1": 0.0}
    labels = [[1, 0, 0], [1, 1, 0]]
    predictions = [[True, False, False], [True, False, False]]  # bools are 0/1 too; column 3 never used
    ours = multilabel_scores(predictions, labels)
    assert ours["exact_match"] == 0.5
    assert ours["macro_f1"] == pytest.approx(
        skm.f1_score(np.array(labels), np.array(predictions, dtype=int), average="macro", zero_division=0)
    )
    with pytest.raises(ValueError, match="same shape"):
        multilabel_scores([[1, 0]], [[1, 0, 1]])
    with pytest.raises(ValueError, match=r"\[N, K\] matrices"):
        multilabel_scores([1, 0], [1, 0])
    with pytest.raises(ValueError, match="labels must hold only 0 and 1"):
        multilabel_scores([[1, 0]], [[2, 0]])
    with pytest.raises(ValueError, match="empty"):
        multilabel_scores(np.zeros((0, 3)), np.zeros((0, 3)))


# ====================================================================== entities: hand-made cases
@pytest.mark.parametrize(
    ("tags", "scheme", "expected"),
    [
        (["B-PER", "I-PER", "O", "B-LOC"], None, [("PER", 0, 1), ("LOC", 3, 3)]),
        (["I-PER", "I-PER", "O"], None, [("PER", 0, 1)]),  # default mode: I after O opens a chunk
        (["B-PER", "I-LOC"], None, [("PER", 0, 0), ("LOC", 1, 1)]),  # type change splits
        (["B-PER", "E-PER", "I-PER"], None, [("PER", 0, 1), ("PER", 2, 2)]),
        (["S-PER", "E-PER"], None, [("PER", 0, 0), ("PER", 1, 1)]),
        (["B-PER", "B-PER"], None, [("PER", 0, 0), ("PER", 1, 1)]),
        (["O", "O"], None, []),
        ([], None, []),
        (["I-PER", "I-PER", "O"], "IOB2", []),  # strict IOB2: a chunk needs its B
        (["B-PER", "I-LOC", "I-LOC"], "BIO", [("PER", 0, 0)]),
        (["B-PER", "I-PER", "B-PER"], "IOB2", [("PER", 0, 1), ("PER", 2, 2)]),
        (["I-PER", "I-PER", "B-PER", "I-PER"], "IOB1", [("PER", 0, 1), ("PER", 2, 3)]),
        (["I-PER", "I-LOC"], "IOB1", [("PER", 0, 0), ("LOC", 1, 1)]),
        (["O", "B-PER", "I-PER"], "IOB1", [("PER", 2, 2)]),  # seqeval drops a B not after its own type
        (["B-PER", "E-PER", "S-LOC"], "IOBES", [("PER", 0, 1), ("LOC", 2, 2)]),
        (["B-PER", "I-PER", "O"], "BIOES", []),  # never closed by an E
        (["B-PER", "I-PER", "E-LOC"], "IOBES", []),
        (["S-PER", "E-PER"], "IOBES", [("PER", 0, 0)]),
    ],
)
def test_get_entities_hand_cases(tags, scheme, expected):
    assert get_entities(tags, scheme=scheme) == expected


def test_entities_never_span_sentences():
    scores = entity_scores([["O", "B-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["I-PER", "O"]])
    assert scores["per_type"]["PER"]["support"] == 2  # two chunks, one per sentence
    strict = entity_scores([["B-PER"], ["I-PER"]], [["B-PER"], ["B-PER"]], scheme="IOB2")
    assert strict["per_type"]["PER"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}


def test_entity_scores_hand_case():
    true = [["O", "B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["O", "B-PER", "I-PER", "O", "O"], ["B-ORG", "I-ORG"]]
    scores = entity_scores(true, pred)
    assert scores["precision"] == 0.5 and scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(0.4)
    assert scores["accuracy"] == pytest.approx(5 / 7)
    assert list(scores["per_type"]) == ["LOC", "ORG", "PER"]
    assert scores["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert scores["per_type"]["ORG"]["support"] == 1 and scores["per_type"]["ORG"]["f1"] == 0.0


def test_entity_errors():
    with pytest.raises(ValueError, match=r"sentence 1 has 2 true tags but 3 predicted tags"):
        entity_scores([["O"], ["O", "O"]], [["O"], ["O", "O", "O"]])
    with pytest.raises(ValueError, match="true_tags has 2 sentences but pred_tags has 1"):
        entity_scores([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="no tokens"):
        entity_scores([[]], [[]])
    with pytest.raises(ValueError, match="not valid in the IOB2 scheme"):
        get_entities(["B-PER", "E-PER"], scheme="IOB2")
    with pytest.raises(ValueError, match="not valid in the IOBES scheme"):
        entity_scores([["U-PER"]], [["O"]], scheme="IOBES")
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        get_entities(["O"], scheme="IOE2")
    with pytest.raises(ValueError, match="empty tag"):
        get_entities(["B-PER", ""])


def test_format_entity_table():
    scores = entity_scores([["B-PER", "I-PER", "O", "B-LONGTYPE"]], [["B-PER", "I-PER", "O", "O"]])
    table = format_entity_table(scores)
    lines = table.splitlines()
    assert lines[0].split() == ["precision", "recall", "f1-score", "support"]
    assert lines[2].split() == ["LONGTYPE", "0.0000", "0.0000", "0.0000", "1"]
    assert lines[3].split() == ["PER", "1.0000", "1.0000", "1.0000", "1"]
    assert lines[-1].split() == ["micro", "avg", "1.0000", "0.5000", "0.6667", "2"]
    assert len({len(line) for line in lines if line}) == 1  # aligned columns
    empty = format_entity_table(entity_scores([["O"]], [["O"]]))
    assert empty.splitlines()[-1].split() == ["micro", "avg", "0.0000", "0.0000", "0.0000", "0"]


# ====================================================================== entities: against seqeval
TYPES = ("PER", "LOC", "ORG")


def _random_tags(rng, prefixes, n_types):
    n = int(rng.integers(0, 10))
    out = []
    for _ in range(n):
        prefix = prefixes[rng.integers(0, len(prefixes))]
        out.append("O" if prefix == "O" else f"{prefix}-{TYPES[rng.integers(0, n_types)]}")
    return out


def _perturb(rng, tags, prefixes, n_types):
    """A prediction: the gold tags with some replaced by random ones."""
    noise = _random_tags(rng, prefixes, n_types) or ["O"]
    return [tag if rng.random() < 0.7 else noise[i % len(noise)] for i, tag in enumerate(tags)]


def _strict_reference(seqeval, tags, scheme):
    tokens = seqeval.scheme.Tokens(tags, seqeval.schemes[scheme])
    return [(entity.tag, entity.start, entity.end - 1) for entity in tokens.entities]


tag_lists = st.lists(
    st.one_of(st.just("O"), st.builds("{}-{}".format, st.sampled_from("BIES"), st.sampled_from(TYPES[:2]))),
    max_size=12,
)


@FAST
@given(tags=tag_lists)
def test_get_entities_default_mode_matches_seqeval(tags):
    labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    assert get_entities(tags) == labeling.get_entities(tags)


@FAST
@given(tags=tag_lists)
def test_get_entities_strict_mode_matches_seqeval(tags):
    scheme = pytest.importorskip("seqeval.scheme")
    iob_tags = [tag if tag[0] in "BIO" else "I" + tag[1:] for tag in tags]
    for name, seqs in (("IOBES", tags), ("IOB2", iob_tags), ("IOB1", iob_tags)):
        reference = [(e.tag, e.start, e.end - 1) for e in scheme.Tokens(seqs, getattr(scheme, name)).entities]
        assert get_entities(seqs, scheme=name) == reference, name


@pytest.mark.parametrize(
    ("scheme", "prefixes"),
    [(None, "BIESO"), (None, "BIO"), ("IOB2", "BIO"), ("IOB1", "BIO"), ("IOBES", "BIESO")],
)
def test_entity_scores_match_seqeval(seqeval, scheme, prefixes):
    rng = np.random.default_rng(sum(map(ord, f"{scheme}{prefixes}")))
    metrics = seqeval.metrics
    strict = {} if scheme is None else {"mode": "strict", "scheme": seqeval.schemes[scheme]}
    for trial in range(60):
        n_types = 2 + trial % 2
        true = [_random_tags(rng, prefixes, n_types) for _ in range(int(rng.integers(1, 6)))]
        if not any(true):
            true[0] = ["O"]
        pred = [_perturb(rng, sentence, prefixes, n_types) for sentence in true]
        ours = entity_scores(true, pred, scheme=scheme)
        assert ours["precision"] == pytest.approx(metrics.precision_score(true, pred, zero_division=0, **strict))
        assert ours["recall"] == pytest.approx(metrics.recall_score(true, pred, zero_division=0, **strict))
        assert ours["f1"] == pytest.approx(metrics.f1_score(true, pred, zero_division=0, **strict))
        assert ours["accuracy"] == pytest.approx(metrics.accuracy_score(true, pred))
        report = metrics.classification_report(true, pred, output_dict=True, zero_division=0, **strict)
        per_type = {name: row for name, row in report.items() if not name.endswith(" avg")}
        assert list(ours["per_type"]) == sorted(per_type)
        for name, row in per_type.items():
            got = ours["per_type"][name]
            assert got["support"] == row["support"]
            assert [got["precision"], got["recall"], got["f1"]] == pytest.approx(
                [row["precision"], row["recall"], row["f1-score"]]
            )
        if scheme is not None:
            for sentence in true + pred:
                assert get_entities(sentence, scheme=scheme) == _strict_reference(seqeval, sentence, scheme)


# ====================================================================== SQuAD: reference transcription
def ref_normalize_answer(s):
    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def ref_get_tokens(s):
    return ref_normalize_answer(s).split() if s else []


def ref_compute_exact(a_gold, a_pred):
    return int(ref_normalize_answer(a_gold) == ref_normalize_answer(a_pred))


def ref_compute_f1(a_gold, a_pred):
    gold_toks, pred_toks = ref_get_tokens(a_gold), ref_get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def ref_raw_scores(gold, preds):
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        gold_answers = [a for a in answers if ref_normalize_answer(a)] or [""]
        exact[qid] = max(ref_compute_exact(a, preds[qid]) for a in gold_answers)
        f1[qid] = max(ref_compute_f1(a, preds[qid]) for a in gold_answers)
    return exact, f1


def ref_find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:  # noqa: SIM108 (kept in the official script's shape)
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


# ====================================================================== SQuAD: hand-made cases
@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Cat", "cat"),  # lower-cased before the articles go
        ("  Hello,\tWORLD!\n", "hello world"),
        ("a an the", ""),
        ("theory of them", "theory of them"),  # articles only as whole words
        ("a-team", "ateam"),  # punctuation goes first, so "a-" is no longer an article
        ("the.", ""),
        ("U.S.A.", "usa"),
        ("rock 'n' roll", "rock n roll"),
        ("", ""),
    ],
)
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized == ref_normalize_answer(raw)


def test_exact_match_rules():
    assert exact_match_score("The cat.", ["a cat"]) == 1.0
    assert exact_match_score("cat", ["dog", "CAT"]) == 1.0
    assert exact_match_score("cats", ["cat"]) == 0.0
    assert exact_match_score("", []) == 1.0  # unanswerable: the gold is ""
    assert exact_match_score("the", []) == 1.0
    assert exact_match_score("something", []) == 0.0
    assert exact_match_score("a", ["the", "cat"]) == 0.0  # a gold normalising to "" is dropped


def test_f1_rules():
    assert f1_answer_score("the cat cat cat", ["cat sat"]) == pytest.approx(0.4)  # overlap counts min(3, 1)
    assert f1_answer_score("x y y", ["y y z"]) == pytest.approx(2 / 3)
    assert f1_answer_score("x y", ["x", "x y z"]) == pytest.approx(0.8)  # the best gold wins
    assert f1_answer_score("", []) == 1.0
    assert f1_answer_score("x", []) == 0.0
    assert f1_answer_score("", ["x"]) == 0.0
    assert f1_answer_score("The, Dog!", ["dog"]) == 1.0
    assert f1_answer_score("red dog", ["blue cat"]) == 0.0


def test_squad_scores_hand_case():
    gold = {"q1": ["Paris"], "q2": [], "q3": ["the red dog", "dog"], "q4": []}
    preds = {"q1": "paris", "q2": "London", "q3": "red dog barks", "extra": "ignored"}  # q4 missing
    scores = squad_scores(preds, gold)
    assert scores["total"] == 4
    assert scores["exact_match"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 0 + 0.8 + 0) / 4)
    assert scores["HasAns_total"] == 2 and scores["NoAns_total"] == 2
    assert scores["HasAns_exact_match"] == pytest.approx(50.0)
    assert scores["HasAns_f1"] == pytest.approx(90.0)
    assert scores["NoAns_exact_match"] == 0.0 and scores["NoAns_f1"] == 0.0


def test_squad_score_groups():
    assert set(squad_scores({"a": "x"}, {"a": ["x"]})) == {"exact_match", "f1", "total"}
    only_null = squad_scores({"a": ""}, {"a": []})
    assert only_null == {"exact_match": 100.0, "f1": 100.0, "total": 1,
                         "NoAns_exact_match": 100.0, "NoAns_f1": 100.0, "NoAns_total": 1}
    with pytest.raises(ValueError, match="gold holds no questions"):
        squad_scores({}, {})


def test_best_null_threshold_hand_case():
    gold = {"a": ["x"], "b": [], "c": ["y z"], "d": []}
    preds = {"a": "x", "b": "w", "c": "y", "d": ""}
    diffs = {"a": -3.0, "b": -1.0, "c": 0.5, "d": 2.0}
    # start: 2 (b, d null). a: +1 -> 3 (thresh -3); b: -1 -> 2; c: +2/3 -> 2.67; d: +0
    assert best_null_threshold(diffs, preds, gold, metric="exact_match") == (-3.0, 75.0)
    threshold, best = best_null_threshold(diffs, preds, gold)
    assert threshold == -3.0 and best == pytest.approx(75.0)
    # nothing beats answering "" everywhere: threshold stays 0.0
    assert best_null_threshold({"b": 1.0}, {"b": "w"}, {"b": []}) == (0.0, 100.0)
    # a question without a diff or a prediction keeps the null answer; the score covers all of gold
    assert best_null_threshold({"a": 1.0}, {"a": "x", "c": "y z"}, {"a": ["x"], "c": ["y z"]}) == (1.0, 50.0)
    with pytest.raises(ValueError, match="metric must be"):
        best_null_threshold(diffs, preds, gold, metric="accuracy")


# ====================================================================== SQuAD: randomized against the reference
WORDS = ["The", "a", "an", "cat", "Cat", "dog", "sat", "on", "mat", ",", ".", "!", "theory", "an-apple", "U.S.", "'s"]


def _random_answer(rng, max_words=5):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(0, max_words + 1)))


def _random_squad(rng, n):
    gold, preds, diffs = {}, {}, {}
    for i in range(n):
        qid = f"q{i}"
        gold[qid] = [] if rng.random() < 0.35 else [_random_answer(rng) for _ in range(rng.integers(1, 4))]
        preds[qid] = "" if rng.random() < 0.25 else _random_answer(rng)
        diffs[qid] = float(rng.integers(-4, 5)) / 2  # a coarse grid: ties happen
    return gold, preds, diffs


def test_squad_matches_reference_transcription():
    rng = np.random.default_rng(2024)
    for _ in range(150):
        gold, preds, diffs = _random_squad(rng, int(rng.integers(1, 15)))
        exact, f1 = ref_raw_scores(gold, preds)
        for qid in gold:
            assert exact_match_score(preds[qid], gold[qid]) == exact[qid]
            assert f1_answer_score(preds[qid], gold[qid]) == pytest.approx(f1[qid])
        scores = squad_scores(preds, gold)
        assert scores["exact_match"] == pytest.approx(100.0 * sum(exact.values()) / len(gold))
        assert scores["f1"] == pytest.approx(100.0 * sum(f1.values()) / len(gold))
        for prefix, wanted in (("HasAns", True), ("NoAns", False)):
            qids = [q for q in gold if bool(gold[q]) == wanted]
            if qids and any(not answers for answers in gold.values()):
                assert scores[f"{prefix}_total"] == len(qids)
                assert scores[f"{prefix}_f1"] == pytest.approx(100.0 * sum(f1[q] for q in qids) / len(qids))
            else:
                assert f"{prefix}_total" not in scores
        has_ans = {qid: bool(answers) for qid, answers in gold.items()}
        for metric, raw in (("exact_match", exact), ("f1", f1)):
            ref_score, ref_thresh = ref_find_best_thresh(preds, raw, diffs, has_ans)
            threshold, score = best_null_threshold(diffs, preds, gold, metric=metric)
            assert threshold == ref_thresh
            assert score == pytest.approx(ref_score)
