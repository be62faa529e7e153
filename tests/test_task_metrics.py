"""bertkit.tasks.metrics against the references: scikit-learn, scipy and seqeval (SQuAD's metrics:
test_task_squad_metrics.py).

The references are test-only: each test that needs one asks for it through a fixture that skips when
it is not installed.
"""

from __future__ import annotations

import collections
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.tasks.metrics import (
    accuracy,
    entity_scores,
    f1_score,
    format_entity_table,
    get_entities,
    matthews_corrcoef,
    multilabel_scores,
    pearson,
    precision_recall_f1,
    spearman,
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
