"""bertkit.tasks.metrics' SQuAD metrics against the official v2.0 evaluation script.

The reference is a small transcription of the script's ``normalize_answer`` / ``compute_exact`` /
``compute_f1`` / ``find_best_thresh``, kept apart from the code under test.
"""

from __future__ import annotations

import collections
import re
import string

import numpy as np
import pytest

from bertkit.tasks.metrics import (
    best_null_threshold,
    exact_match_score,
    f1_answer_score,
    normalize_answer,
    squad_scores,
)


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
