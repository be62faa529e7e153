"""Question answering task: SQuAD reading, windowed features, the n-best span decoder, v2's null threshold."""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit import BERTTokenizerFast
from bertkit.resources import BERT_BASE_UNCASED_VOCAB
from bertkit.tasks.metrics import normalize_answer
from bertkit.tasks.question_answering import (
    QuestionAnswering,
    Span,
    decode_example,
    nbest_spans,
)
from bertkit.tasks.squad import Answer, QAExample

WORDS = ["the", "river", "Zürich", "café", "naïve", "résumé", "e\u0301cole", "1,234", "U.S.", "(1990)", "don't",
         "state-of-the-art", "Paris,", "France.", "42%", "$5", "Æsir", "straße", "NASA's", "Ωmega", "x", "Dvořák",
         "hyperparameterization", "«quoted»", "a/b", "east–west", "東京", "[UNK]"]
SPACES = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", " \u00a0 "]


@pytest.fixture(scope="module")
def tokenizer():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def random_context(rng: random.Random, n_words: int) -> tuple[str, list[tuple[int, int]]]:
    """A context of ``n_words`` words with irregular spacing, and each word's character span."""
    text, spans = "", []
    for i in range(n_words):
        if i:
            text += rng.choice(SPACES)
        word = rng.choice(WORDS)
        spans.append((len(text), len(text) + len(word)))
        text += word
    return text, spans


def random_answer(rng: random.Random, context: str, words: list[tuple[int, int]], last: bool) -> tuple[int, int]:
    """The characters of 1-4 consecutive words (the context's last ones when ``last``), sometimes trimmed of
    edge punctuation or widened by a space: answers anywhere, at token boundaries or not."""
    n = rng.randint(1, 4)
    first = len(words) - n if last else rng.randrange(len(words) - n + 1)
    start, end = words[first][0], words[first + n - 1][1]
    trim = rng.random()
    if trim < 0.2 and not context[start].isalnum() and end - start > 1:
        start += 1
    elif trim < 0.4 and not context[end - 1].isalnum() and end - start > 1:
        end -= 1
    elif trim < 0.5 and start > 0 and context[start - 1] == " ":
        start -= 1  # a gold text with a leading space
    return start, end


# ---------------------------------------------------------------------------------------------- features
@pytest.mark.parametrize("max_seq_length, doc_stride, max_query_length",
                         [(40, 5, 8), (64, 12, 16), (32, 0, 6), (48, 7, 8)])  # odd strides: max-context ties
def test_every_gold_answer_is_recovered_from_the_windows(tokenizer, max_seq_length, doc_stride, max_query_length):
    rng = random.Random(max_seq_length)
    examples = []
    for i in range(40):
        context, words = random_context(rng, rng.randint(5, 10) * max_seq_length // 2)
        start, end = random_answer(rng, context, words, last=i % 5 == 0)
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3 * max_query_length)))
        examples.append(QAExample(str(i), question, context, [Answer(context[start:end], start, end)]))
    task = QuestionAnswering(doc_stride=doc_stride, max_query_length=max_query_length)
    features = task.featurize(examples, tokenizer, max_seq_length)

    by_example = {i: [f for f in features if f["example"] == i] for i in range(len(examples))}
    for i, example in enumerate(examples):
        encoded = tokenizer(example.context, add_special_tokens=False, return_offsets_mapping=True)
        all_offsets = [tuple(o) for o in encoded["offset_mapping"]]
        assert len(all_offsets) >= 5 * max_seq_length  # many windows
        answer = example.answers[0]
        overlapping = {o for o in all_offsets if o[0] < answer.end and o[1] > answer.start}
        at_boundaries = any(o[0] == answer.start for o in all_offsets) and any(o[1] == answer.end
                                                                              for o in all_offsets)
        question = tokenizer(example.question, add_special_tokens=False)["input_ids"][:max_query_length]
        windows, contained = [], 0
        for feature in by_example[i]:
            ids, offsets = feature["input_ids"], feature["offsets"]
            prefix = len(question) + 2
            assert len(ids) == max_seq_length or (feature is by_example[i][-1] and len(ids) < max_seq_length)
            assert ids[:prefix] == [tokenizer.cls_token_id, *question, tokenizer.sep_token_id]
            assert ids[-1] == tokenizer.sep_token_id
            assert feature["token_type_ids"] == [0] * prefix + [1] * (len(ids) - prefix)
            assert offsets[:prefix] == [None] * prefix and offsets[-1] is None
            window = [tuple(o) for o in offsets[prefix:-1]]
            first = all_offsets.index(window[0])
            assert window == all_offsets[first:first + len(window)]
            assert ids[prefix:-1] == encoded["input_ids"][first:first + len(window)]
            windows.append((first, len(window), prefix))
            s, e = feature["start_positions"], feature["end_positions"]
            if overlapping <= set(window):
                contained += 1
                assert prefix <= s <= e < len(ids) - 1
                text = example.context[offsets[s][0]:offsets[e][1]]
                if at_boundaries:
                    assert text == answer.text
                assert normalize_answer(text) == normalize_answer(answer.text)
            else:
                assert (s, e) == (0, 0)
        if len(overlapping) <= doc_stride + 1:
            assert contained >= 1
        # the windows cover the context, consecutive ones sharing doc_stride tokens
        assert windows[0][0] == 0 and windows[-1][0] + windows[-1][1] == len(all_offsets)
        for (a, n, _), (b, _, _) in itertools.pairwise(windows):
            assert b == a + n - doc_stride
        check_max_context(by_example[i], windows)


def check_max_context(features, windows):
    """Google's _check_is_max_context, brute force: each token's best window (first on ties)."""
    for k, (feature, (first, length, prefix)) in enumerate(zip(features, windows)):
        flags = feature["token_is_max_context"]
        assert flags[:prefix] == [False] * prefix and flags[-1] is False
        for j in range(length):
            position = first + j
            scores = [min(position - a, a + n - 1 - position) + 0.01 * n if a <= position < a + n else -1.0
                      for a, n, _ in windows]
            assert flags[prefix + j] == (int(np.argmax(scores)) == k)


def test_labels_of_unanswerable_and_unlocated_answers_and_collate(tokenizer):
    context = "Water boils at 100 degrees at sea level. " * 30
    examples = [QAExample("impossible", "Why?", context, []),
                QAExample("lost", "What?", context, [Answer("not there", None, None)]),
                QAExample("test", "Who?", context, None)]
    task = QuestionAnswering(doc_stride=8)
    features = task.featurize(examples, tokenizer, 96)
    for feature in features:
        if feature["example"] == 0:
            assert (feature["start_positions"], feature["end_positions"]) == (0, 0)
        elif feature["example"] == 1:
            assert (feature["start_positions"], feature["end_positions"]) == (-100, -100)
        else:
            assert "start_positions" not in feature
    batch = task.collate([f for f in features if f["example"] < 2])
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert set(batch["start_positions"].tolist()) == {0, -100}
    assert task.has_labels(examples[:2]) and not task.has_labels(examples)


def test_options_are_validated_and_round_trip(tokenizer):
    task = QuestionAnswering(doc_stride=32, max_query_length=20, n_best_size=5, max_answer_length=10,
                             null_score_diff_threshold=-1.5, version_2_with_negative=True)
    assert QuestionAnswering(**task.options()).options() == task.options()
    for option, flag, value in [("doc_stride", "--doc-stride", -1), ("max_query_length", "--max-query-length", 0),
                                ("n_best_size", "--n-best-size", 2.5), ("max_answer_length", "--max-answer-length",
                                                                        True)]:
        with pytest.raises(ValueError, match=f"{option} \\({flag}\\)"):
            QuestionAnswering(**{option: value})
    for option, value in [("null_score_diff_threshold", float("nan")), ("version_2_with_negative", "yes")]:
        with pytest.raises(ValueError, match=option):
            QuestionAnswering(**{option: value})
    example = QAExample("0", "q", "some context", None)
    with pytest.raises(ValueError, match=r"--max-seq-length.*--max-query-length.*--doc-stride"):
        QuestionAnswering(doc_stride=128, max_query_length=64).featurize([example], tokenizer, 128)
    inferred = QuestionAnswering()
    inferred.fit([example, QAExample("1", "q", "c", [])])
    assert inferred.options()["version_2_with_negative"] is True


# ---------------------------------------------------------------------------------------------- decoding
def random_windows(rng: np.random.Generator, n_windows: int, room: int, stride: int, prefix: int):
    """Overlapping windows over one context: logits, char offsets (None outside the context), max-context flags."""
    starts = [k * (room - stride) for k in range(n_windows)]
    n_tokens = starts[-1] + room
    ends = np.cumsum(rng.integers(1, 6, size=n_tokens) + rng.integers(0, 2, size=n_tokens))  # gaps between tokens
    token_chars = [(int(e - rng.integers(1, 3)), int(e)) for e in ends]
    start_logits, end_logits, offsets, flags = [], [], [], []
    for first in starts:
        length = prefix + room + 1
        start_logits.append(rng.normal(size=length).astype(np.float32))
        end_logits.append(rng.normal(size=length).astype(np.float32))
        offsets.append([None] * prefix + token_chars[first:first + room] + [None])
        flags.append([False] * prefix + list(rng.random(room) < 0.7) + [False])
    return start_logits, end_logits, offsets, flags


def brute_force_nbest(start_logits, end_logits, offsets, flags, n_best_size, max_answer_length) -> list[Span]:
    best: dict[tuple[int, int], Span] = {}
    for k in range(len(start_logits)):
        for s, e in itertools.product(range(len(offsets[k])), repeat=2):
            if offsets[k][s] is None or offsets[k][e] is None or not flags[k][s]:
                continue
            if not s <= e < s + max_answer_length:
                continue
            span = Span(offsets[k][s][0], offsets[k][e][1], float(start_logits[k][s]), float(end_logits[k][e]))
            chars = (span.start, span.end)
            if chars not in best or span.score > best[chars].score:
                best[chars] = span
    return sorted(best.values(), key=lambda span: -span.score)[:n_best_size]


@pytest.mark.parametrize("seed", range(12))
def test_nbest_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_best_size, max_answer_length = int(rng.integers(1, 25)), int(rng.integers(1, 12))
    windows = random_windows(rng, n_windows=int(rng.integers(1, 4)), room=int(rng.integers(8, 30)),
                             stride=int(rng.integers(0, 6)), prefix=int(rng.integers(2, 8)))
    expected = brute_force_nbest(*windows, n_best_size, max_answer_length)
    got = nbest_spans(*windows, n_best_size=n_best_size, max_answer_length=max_answer_length)
    assert got == expected
    # the prediction: the best span, its text, and an n-best with softmax probabilities
    context = "".join(chr(ord("a") + i % 26) for i in range(max(o[1] for w in windows[2] for o in w if o) + 1))
    prediction = decode_example(context, *windows, n_best_size=n_best_size, max_answer_length=max_answer_length)
    assert (prediction["start"], prediction["end"]) == (expected[0].start, expected[0].end)
    assert prediction["answer"] == prediction["label"] == context[expected[0].start:expected[0].end]
    assert prediction["score"] == pytest.approx(expected[0].score)
    assert [(e["start"], e["end"], e["text"]) for e in prediction["nbest"]] == [
        (s.start, s.end, context[s.start:s.end]) for s in expected]
    probabilities = [e["probability"] for e in prediction["nbest"]]
    assert sum(probabilities) == pytest.approx(1.0) and probabilities == sorted(probabilities, reverse=True)
    assert "null_score_diff" not in prediction


def test_task_decode_groups_windows_by_example(tokenizer):
    rng = np.random.default_rng(0)
    context = " ".join(rng.choice(["alpha", "beta", "gamma,", "delta."], size=200))
    examples = [QAExample(str(i), "which greek letter?", context, None) for i in range(3)]
    task = QuestionAnswering(doc_stride=10, max_query_length=8, n_best_size=7, max_answer_length=5)
    features = task.featurize(examples, tokenizer, 48)
    outputs = [(rng.normal(size=len(f["input_ids"])).astype(np.float32),
                rng.normal(size=len(f["input_ids"])).astype(np.float32)) for f in features]
    predictions = task.decode(examples, features, outputs)
    assert [p["id"] for p in predictions] == ["0", "1", "2"]
    for i, prediction in enumerate(predictions):
        rows = [j for j, f in enumerate(features) if f["example"] == i]
        windows = ([outputs[j][0] for j in rows], [outputs[j][1] for j in rows], [features[j]["offsets"] for j in rows],
                   [features[j]["token_is_max_context"] for j in rows])
        expected = brute_force_nbest(*windows, 7, 5)
        assert [(e["start"], e["end"]) for e in prediction["nbest"]] == [(s.start, s.end) for s in expected]
        assert prediction["answer"] == context[expected[0].start:expected[0].end]


# ---------------------------------------------------------------------------------------------- v2
def test_null_answer_when_the_diff_exceeds_the_threshold():
    offsets = [[None, None, (0, 3), (4, 8), None]] * 2
    start = [np.array([1.0, 0, 2.0, 0.5, 0], np.float32), np.array([3.0, 0, 0.1, 0.2, 0], np.float32)]
    end = [np.array([0.5, 0, 0.3, 1.0, 0], np.float32), np.array([0.0, 0, 0.1, 0.1, 0], np.float32)]
    context = "red fish"
    null, best = min(1.0 + 0.5, 3.0 + 0.0), 2.0 + 1.0  # min over windows of start[0] + end[0]; "red fish"
    for threshold, answer in [(-1.6, ""), (-1.5, "red fish"), (0.0, "red fish")]:
        prediction = decode_example(context, start, end, offsets, version_2_with_negative=True,
                                    null_score_diff_threshold=threshold)
        assert prediction["null_score_diff"] == pytest.approx(null - best)
        assert prediction["answer"] == answer
        assert prediction["score"] == pytest.approx(best if answer else null)
        assert (prediction["start"], prediction["end"]) == ((0, 8) if answer else (None, None))
        assert "" in [e["text"] for e in prediction["nbest"]]  # the null answer is one of the n-best


def make_v2_set(tokenizer, seed: int = 0):
    """Answerable and unanswerable questions with random logits; gold = the best span, another span, or none."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(60):
        words = rng.choice(["north", "wind", "sun", "cloak", "traveller", "warm", "strong"], size=40)
        examples.append(QAExample(f"q{i}", "who won?", " ".join(words), None))
    task = QuestionAnswering(doc_stride=8, max_query_length=8, version_2_with_negative=True, max_answer_length=4)
    features = task.featurize(examples, tokenizer, 40)
    outputs = [(rng.normal(size=len(f["input_ids"])).astype(np.float32) * 2,
                rng.normal(size=len(f["input_ids"])).astype(np.float32) * 2) for f in features]
    predictions = task.decode(examples, features, outputs)
    for example, prediction in zip(examples, predictions):
        best = next(e["text"] for e in prediction["nbest"] if e["start"] is not None)
        kind = rng.integers(3)
        example.answers = [] if kind == 0 else [Answer(best if kind == 1 else "wind", None, None)]
    return task, examples, features, outputs, predictions


def test_calibrate_picks_the_f1_maximising_threshold_and_apply_threshold_redecides(tokenizer):
    task, examples, features, outputs, predictions = make_v2_set(tokenizer)
    diffs = sorted(p["null_score_diff"] for p in predictions)
    candidates = [diffs[0] - 1, *diffs]
    f1_at = {t: task.score(examples, task.apply_threshold(predictions, t))["f1"] for t in candidates}

    calibration = task.calibrate(examples, predictions)
    assert calibration["best_f1"] == pytest.approx(max(f1_at.values()))
    assert task.null_score_diff_threshold == calibration["null_score_diff_threshold"]
    redecided = task.apply_threshold(predictions)
    assert task.score(examples, redecided)["f1"] == pytest.approx(calibration["best_f1"])
    assert redecided == task.decode(examples, features, outputs)  # the same as decoding again with the model's logits
    for prediction in redecided:
        assert (prediction["answer"] == "") == (prediction["null_score_diff"] > task.null_score_diff_threshold)
    assert task.options()["null_score_diff_threshold"] == calibration["null_score_diff_threshold"]
    assert QuestionAnswering(version_2_with_negative=False).calibrate(examples, predictions) == {}
    fixed = QuestionAnswering(version_2_with_negative=True, null_score_diff_threshold=1.5)  # the user's value stays
    assert fixed.calibrate(examples, predictions) == {} and fixed.null_score_diff_threshold == 1.5


def test_score_and_official_files(tokenizer, tmp_path):
    task, examples, _, _, predictions = make_v2_set(tokenizer)
    scores = task.score(examples, predictions)
    assert {"exact_match", "f1", "total", "HasAns_f1", "NoAns_f1"} <= set(scores) and scores["total"] == 60
    written = task.write_extra("validation", examples, predictions, tmp_path)
    assert sorted(p.name for p in written) == ["nbest_predictions_validation.json", "null_odds_validation.json",
                                               "predictions_validation.json"]
    answers = json.loads((tmp_path / "predictions_validation.json").read_text())
    assert answers == {p["id"]: p["answer"] for p in predictions}
    nbest = json.loads((tmp_path / "nbest_predictions_validation.json").read_text())
    assert nbest["q0"] == predictions[0]["nbest"]
    odds = json.loads((tmp_path / "null_odds_validation.json").read_text())
    assert odds["q3"] == pytest.approx(predictions[3]["null_score_diff"])


# ---------------------------------------------------------------------------------------------- reading
SQUAD_V1 = {"version": "1.1", "data": [
    {"title": "Weather", "paragraphs": [
        {"context": "The sun shone over  Paris in 1990.",
         "qas": [{"id": "a1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 20},
                                                                 {"text": "over  Paris", "answer_start": 14}]},
                 {"id": "a2", "question": "When?", "answers": [{"text": "1990", "answer_start": 29}]}]}]},
    {"title": "Quirks", "paragraphs": [
        {"context": "New York is big. It is in the U.S.",
         "qas": [{"id": "b1", "question": "Which city?", "answers": [{"text": "New York", "answer_start": 2}]},
                 {"id": "b2", "question": "Big?", "answers": [{"text": "is  big", "answer_start": 9}]},
                 {"id": "b3", "question": "Missing?", "answers": [{"text": "London", "answer_start": 0}]}]}]}]}


def test_read_squad_v1(tmp_path):
    path = tmp_path / "train-v1.1.json"
    path.write_text(json.dumps(SQUAD_V1))
    with pytest.warns(UserWarning, match=r"2 answers were not at their answer_start.*1 answers are not in"):
        examples = QuestionAnswering().read(str(path))
    assert [e.id for e in examples] == ["a1", "a2", "b1", "b2", "b3"]
    a1, _, b1, b2, b3 = examples
    assert a1.question == "Where?" and a1.context == "The sun shone over  Paris in 1990." and a1.title == "Weather"
    assert a1.label == ["Paris", "over  Paris"] and not a1.is_impossible
    assert [(a.start, a.end) for a in a1.answers] == [(20, 25), (14, 25)]
    assert b1.answers[0] == Answer("New York", 0, 8)  # moved to the nearest occurrence
    assert b2.context[b2.answers[0].start:b2.answers[0].end] == "is big"  # whitespace differs
    assert b3.answers[0] == Answer("London", None, None) and b3.label == ["London"]
    assert QuestionAnswering().has_labels(examples)


def test_read_squad_v2_and_an_unlabelled_file(tmp_path):
    data = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Cats sleep a lot.", "qas": [
        {"id": "p", "question": "Who sleeps?", "answers": [{"text": "Cats", "answer_start": 0}],
         "is_impossible": False},
        {"id": "n", "question": "Who flies?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Cats", "answer_start": 0}]}]}]}]}
    (tmp_path / "dev-v2.0.json").write_text(json.dumps(data))
    task = QuestionAnswering()
    examples = task.read(tmp_path / "dev-v2.0.json")
    assert [(e.label, e.is_impossible) for e in examples] == [(["Cats"], False), ([], True)]
    task.fit(examples)
    assert task.version_2_with_negative is True
    for qa in data["data"][0]["paragraphs"][0]["qas"]:
        del qa["answers"], qa["is_impossible"]
    (tmp_path / "test.json").write_text(json.dumps(data))
    unlabelled = task.read(tmp_path / "test.json")
    assert [e.label for e in unlabelled] == [None, None] and not task.has_labels(unlabelled)


def test_read_jsonl_in_the_hf_squad_layout(tmp_path):
    rows = [{"id": "1", "title": "T", "context": "Cats sleep a lot.", "question": "Who?",
             "answers": {"text": ["Cats", "Cats sleep"], "answer_start": [0, 0]}},
            {"id": "2", "title": "T", "context": "Cats sleep a lot.", "question": "Who flies?",
             "answers": {"text": [], "answer_start": []}}]
    path = tmp_path / "validation.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = QuestionAnswering().read(path)
    assert examples[0].answers == [Answer("Cats", 0, 4), Answer("Cats sleep", 0, 10)]
    assert examples[1].is_impossible and examples[1].label == []


def test_read_errors_name_the_file_and_the_question(tmp_path):
    broken = json.loads(json.dumps(SQUAD_V1))
    del broken["data"][1]["paragraphs"][0]["qas"][1]["question"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"broken\.json: question id 'b2'.*missing key 'question'"):
        QuestionAnswering().read(path)
    broken["data"][1]["paragraphs"][0]["qas"][1].update(question="q", answers=[{"text": "x"}])
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"broken\.json: question id 'b2'.*'answer_start'"):
        QuestionAnswering().read(path)
    path.write_text(json.dumps(SQUAD_V1)[:-3])
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
        QuestionAnswering().read(path)
    lines = tmp_path / "rows.jsonl"
    lines.write_text(json.dumps({"id": "x1", "question": "q", "context": "c"}) + "\n" +
                     json.dumps({"id": "x2", "question": "q"}) + "\n")
    with pytest.raises(ValueError, match=r"rows\.jsonl, line 2 \(question id 'x2'\).*missing key 'context'"):
        QuestionAnswering().read(lines)
    lines.write_text(json.dumps({"id": "x1", "question": "q", "context": "c"}) + "\n" + "{oops\n")
    with pytest.raises(ValueError, match=r"rows\.jsonl, line 2"):
        QuestionAnswering().read(lines)
    duplicate = json.loads(json.dumps(SQUAD_V1))
    duplicate["data"][1]["paragraphs"][0]["qas"][0]["id"] = "a1"
    path.write_text(json.dumps(duplicate))
    with pytest.raises(ValueError, match=r"broken\.json: question id 'a1' appears more than once"):
        QuestionAnswering().read(path)


def test_an_empty_context_gives_one_window_and_the_empty_answer(tokenizer):
    examples = [QAExample("e", "Anything?", "", None)]
    for version_2, diff in [(False, None), (True, sys.float_info.max)]:  # above any threshold, and valid JSON
        task = QuestionAnswering(doc_stride=4, max_query_length=8, version_2_with_negative=version_2)
        features = task.featurize(examples, tokenizer, 32)
        assert len(features) == 1 and features[0]["offsets"][-2:] == [None, None]
        outputs = [(np.ones(len(features[0]["input_ids"]), np.float32),) * 2]
        (prediction,) = task.decode(examples, features, outputs)
        assert prediction["answer"] == "" and prediction["start"] is None
        assert prediction.get("null_score_diff") == diff
        json.dumps(prediction, allow_nan=False)  # no Infinity in predictions_<split>.jsonl / null_odds files
        if version_2:
            assert task.apply_threshold([prediction], 1e300)[0]["answer"] == ""


# ---------------------------------------------------------------------------- answers vs is_impossible
def _contradicting(tmp_path, name: str = "train.json") -> str:
    """SQuAD JSON: q0 and q3 answered, q1 without answers but not impossible, q2 impossible with an answer."""
    qas = [{"id": f"q{i}", "question": "Who sleeps?", "answers": [{"text": "Cats", "answer_start": 0}],
            "is_impossible": False} for i in range(4)]
    qas[1]["answers"] = []
    qas[2]["is_impossible"] = True
    path = tmp_path / name
    path.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "Cats sleep a lot.",
                                                                         "qas": qas}]}]}))
    return str(path)


def test_answers_contradicting_is_impossible_warn_once_with_the_ids(tmp_path):
    from bertkit.tasks.readers import DataWarning

    with pytest.warns(DataWarning) as caught:
        examples = QuestionAnswering().read(_contradicting(tmp_path))
    assert len(caught) == 1
    assert str(caught[0].message) == (
        f"{tmp_path / 'train.json'}: 1 question(s) have no answers but \"is_impossible\": false (ids 'q1'): give "
        "their answers, or mark them true; 1 question(s) have answers but \"is_impossible\": true (ids 'q2'): set "
        "it false, or move the answers to \"plausible_answers\" as SQuAD v2 does. They are read as unanswerable.")
    assert [e.is_impossible for e in examples] == [False, True, True, False]
    rows = [{"id": "a", "question": "q", "context": "c", "answers": {"text": [], "answer_start": []},
             "is_impossible": False},
            {"id": "b", "question": "q", "context": "c", "answers": {"text": [], "answer_start": []}}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(DataWarning, match=r"rows\.jsonl: 1 question\(s\) have no answers .*\(ids 'a'\)"):
        assert [e.is_impossible for e in QuestionAnswering().read(tmp_path / "rows.jsonl")] == [True, True]


def test_a_file_of_empty_answers_not_impossible_is_unlabelled_without_a_warning(tmp_path, recwarn):
    qas = [{"id": f"q{i}", "question": "Who?", "answers": [], "is_impossible": False} for i in range(2)]
    (tmp_path / "test.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": qas}]}]}))
    examples = QuestionAnswering().read(tmp_path / "test.json")
    assert [e.label for e in examples] == [None, None] and not recwarn.list


def test_strict_refuses_contradicting_answers_and_unlabelled_questions_before_training(tmp_path, capsys):
    from bertkit.cli import main as cli
    from task_helpers import model_dir, refused

    train = _contradicting(tmp_path)
    refused(tmp_path, r"train\.json: 1 question\(s\) have no answers but \"is_impossible\": false \(ids 'q1'\).*"
                      r"\(ids 'q2'\).*an error under --strict", task="qa", train=train, strict=True)
    out = tmp_path / "cli"
    assert cli(["finetune", "qa", "--model", str(model_dir()), "--train", train, "-o", str(out), "--strict"]) == 1
    error = capsys.readouterr().err
    assert f"bertkit: error: {train}: 1 question(s) have no" in error and "under --strict" in error
    assert not (out / "model").exists()
    data = json.loads(Path(train).read_text())
    del data["data"][0]["paragraphs"][0]["qas"][3]["answers"], data["data"][0]["paragraphs"][0]["qas"][3][
        "is_impossible"]
    (tmp_path / "mixed.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning):
        refused(tmp_path, r"mixed\.json: question id 'q3': no gold label \(\"answers\", or \"is_impossible\": "
                          r"true\), though 3 other example\(s\) have one", task="qa", train=tmp_path / "mixed.json")


def test_without_strict_the_cli_warns_and_trains(tmp_path, capsys):
    from bertkit.cli import main as cli
    from task_helpers import model_dir

    train, out = _contradicting(tmp_path), tmp_path / "out"
    assert cli(["finetune", "qa", "--model", str(model_dir()), "--train", train, "-o", str(out), "--epochs", "1",
                "--batch-size", "2", "--max-seq-length", "48", "--doc-stride", "16"]) == 0
    assert (f"bertkit: warning: {train}: 1 question(s) have no answers but \"is_impossible\": false (ids 'q1')"
            in capsys.readouterr().err)
    assert (out / "model").is_dir()
