"""question-answering pipeline: answers equal a plain brute-force search over the tokenizer's own windows,
answers are exact substrings of their contexts, batching and streaming change nothing, bad parameters raise."""

from __future__ import annotations

import math
import random
import types

import pytest
import torch

import bertkit
from bertkit import BERTConfig, BERTForQuestionAnswering, BERTTokenizerFast
from bertkit.resources import BERT_BASE_UNCASED_VOCAB
from conftest import TINY, randomize_

#: windows of at most 64 tokens overlapping by 16: a context of ~200 tokens spans five of them
WINDOWS = dict(max_seq_len=64, doc_stride=16)
WORDS = ["the", "river", "Zürich", "café", "naïve", "résumé", "e\u0301cole", "1,234", "U.S.", "(1990)", "don't",
         "state-of-the-art", "Paris,", "France.", "42%", "$5", "Æsir", "straße", "Ωmega", "Dvořák", "İstanbul",
         "hyperparameterization", "«quoted»", "a/b", "east–west", "東京", "😀", "x"]
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", " \u00a0 "]
QUESTION = "Where did the naïve river go?"


def random_context(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    return "".join((rng.choice(SPACES) if i else "") + rng.choice(WORDS) for i in range(n_words))


SHORT = random_context(0, 12)
LONG = random_context(1, 80)


@pytest.fixture(scope="module")
def tokenizer():
    return BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB)


@pytest.fixture(scope="module")
def model():
    config = BERTConfig(**{**TINY, "vocab_size": 30522, "max_position_embeddings": 64})
    return randomize_(BERTForQuestionAnswering(config), seed=3).eval()


@pytest.fixture(scope="module")
def pipe(model, tokenizer):
    return bertkit.pipeline("question-answering", model=model, tokenizer=tokenizer, batch_size=3, **WINDOWS)


def brute_force(model, tokenizer, question, context, *, max_seq_len, doc_stride, max_answer_len, top_k,
                handle_impossible_answer):
    """The definition, plainly: the tokenizer's windows, each run alone, every (s, e) pair tried."""
    windows = tokenizer(question, context, truncation="only_second", max_length=max_seq_len, stride=doc_stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)
    best, nulls = {}, []
    for ids, type_ids, offsets in zip(windows["input_ids"], windows["token_type_ids"], windows["offset_mapping"]):
        with torch.no_grad():
            start, end = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), torch.tensor([type_ids]))
        in_context = [i for i in range(len(ids) - 1) if type_ids[i] == 1]  # the last [SEP] has type 1 too
        p_start = softmax_at(start[0].tolist(), [0, *in_context])
        p_end = softmax_at(end[0].tolist(), [0, *in_context])
        for s in in_context:
            for e in in_context:
                if s <= e and e - s + 1 <= max_answer_len:
                    chars = (offsets[s][0], offsets[e][1])
                    best[chars] = max(best.get(chars, 0.0), p_start[s] * p_end[e])
        nulls.append(p_start[0] * p_end[0])
    answers = [{"score": score, "start": a, "end": b, "answer": context[a:b]} for (a, b), score in best.items()]
    if handle_impossible_answer:
        answers.append({"score": min(nulls), "start": 0, "end": 0, "answer": ""})
    answers = sorted(answers, key=lambda a: -a["score"])[:top_k]
    return answers[0] if top_k == 1 else answers


def softmax_at(logits, positions):
    total = sum(math.exp(logits[i]) for i in positions)
    return {i: math.exp(logits[i]) / total for i in positions}


def features_of(pipe, question, context, **params):
    """The pipeline's windows of one input under ``params``."""
    return pipe.preprocess({"question": question, "context": context}, pipe.check({**pipe.params, **params}))


def assert_same(got, expected):
    got, expected = ([got], [expected]) if isinstance(expected, dict) else (got, expected)
    assert [(a["start"], a["end"], a["answer"]) for a in got] == [(a["start"], a["end"], a["answer"]) for a in expected]
    assert [a["score"] for a in got] == pytest.approx([a["score"] for a in expected], rel=1e-5)


# ---------------------------------------------------------------------------------------------- the definition
def test_windows_are_the_tokenizers(pipe, tokenizer):
    """The brute force's windows (the tokenizer's overflow with the same stride) are the pipeline's, so it checks
    the pipeline on the same inputs; max_seq_len is capped to the model's 64 positions."""
    for n_words in range(1, 130, 9):
        context = random_context(n_words, n_words)
        for params in (WINDOWS, dict(doc_stride=5)):  # 384 -> 64
            features = features_of(pipe, QUESTION, context, **params)
            windows = tokenizer(QUESTION, context, truncation="only_second", max_length=64,
                                stride=params["doc_stride"], return_overflowing_tokens=True)
            assert [f["input_ids"] for f in features] == windows["input_ids"]
            assert [f["token_type_ids"] for f in features] == windows["token_type_ids"]
    assert len(features_of(pipe, QUESTION, LONG)) == 5


@pytest.mark.parametrize("handle_impossible_answer", [False, True])
@pytest.mark.parametrize("max_answer_len", [2, 40])
@pytest.mark.parametrize("top_k", [1, 3])
@pytest.mark.parametrize("context", [SHORT, LONG], ids=["short", "five-windows"])
def test_answers_are_the_brute_force_search(pipe, model, tokenizer, context, top_k, max_answer_len,
                                            handle_impossible_answer):
    params = dict(top_k=top_k, max_answer_len=max_answer_len, handle_impossible_answer=handle_impossible_answer)
    got = pipe({"question": QUESTION, "context": context}, **params)
    assert_same(got, brute_force(model, tokenizer, QUESTION, context, **WINDOWS, **params))


def test_every_span_and_the_null_score(pipe, model, tokenizer):
    """top_k above the number of spans: every span comes back once, best first, and the null's score (the lowest
    over the windows) with them."""
    context = random_context(7, 30)  # two windows
    params = dict(top_k=10**6, max_answer_len=3, handle_impossible_answer=True)
    got = pipe({"question": QUESTION, "context": context}, **params)
    expected = brute_force(model, tokenizer, QUESTION, context, **WINDOWS, **params)
    assert len(features_of(pipe, QUESTION, context)) == 2
    assert len(got) == len(expected) < 10**6
    assert [a["score"] for a in got] == sorted((a["score"] for a in got), reverse=True)
    by_span = {(a["start"], a["end"], a["answer"]): a["score"] for a in got}
    assert by_span == pytest.approx({(a["start"], a["end"], a["answer"]): a["score"] for a in expected}, rel=1e-5)


def test_the_null_answer_wins_and_loses(pipe, model, tokenizer):
    """On one-word contexts the null candidate (p_start[CLS] * p_end[CLS]) sometimes beats the only span."""
    answers = []
    for word in ["river", "café", "x", "France.", "1,234", "Dvořák", "the", "Ωmega", "straße", "a/b"]:
        got = pipe({"question": QUESTION, "context": word}, handle_impossible_answer=True)
        assert_same(got, brute_force(model, tokenizer, QUESTION, word, **WINDOWS, max_answer_len=15, top_k=1,
                                     handle_impossible_answer=True))
        answers.append(got["answer"])
    assert "" in answers and any(answers)
    assert all(pipe({"question": QUESTION, "context": word})["answer"] for word in ["river", "café", "x"])


def test_the_question_is_cut_to_max_question_len(pipe, model, tokenizer):
    words = ["the", "river", "ran", "past", "the", "old", "mill", "and", "the", "town", "to", "the", "sea", "in"]
    question = " ".join(words)
    got = pipe({"question": question, "context": LONG}, max_question_len=5, top_k=3)
    assert all(f["token_type_ids"].count(0) == 5 + 2 for f in features_of(pipe, question, LONG, max_question_len=5))
    cut = " ".join(words[:5])  # one token per word
    assert_same(got, brute_force(model, tokenizer, cut, LONG, **WINDOWS, max_answer_len=15, top_k=3,
                                 handle_impossible_answer=False))


# ---------------------------------------------------------------------------------------------- offsets
@pytest.mark.parametrize("context", [
    "Zürich  is   a café,\tnaïve résumé — «quoted» (1990)!",
    "e\u0301cole İstanbul  Ωmega straße Æsir Dvořák",
    "東京 is 😀 far;   \u00a0 the U.S. costs $5... really?!",
    LONG,
])
def test_answers_are_exact_substrings(pipe, context):
    answers = pipe({"question": QUESTION, "context": context}, top_k=50, max_answer_len=6,
                   handle_impossible_answer=True)
    assert len(answers) == 50
    for a in answers:
        assert context[a["start"]:a["end"]] == a["answer"]
        assert a["answer"] == a["answer"].strip() and (a["answer"] or a["start"] == a["end"] == 0)
        assert isinstance(a["score"], float) and 0.0 < a["score"] <= 1.0


# ---------------------------------------------------------------------------------------------- inputs
ITEMS = [{"question": QUESTION, "context": random_context(seed, n)} for seed, n in
         [(10, 3), (11, 80), (12, 20), (13, 150), (14, 1), (15, 45), (16, 9)]]


def test_a_list_answers_as_one_at_a_time(pipe):
    batched = pipe(ITEMS, top_k=2)
    assert isinstance(batched, list) and len(batched) == len(ITEMS)
    for item, answers in zip(ITEMS, batched):
        assert_same(answers, pipe(item, top_k=2))


def test_a_generator_streams_back_in_order(pipe):
    stream = pipe(item for item in ITEMS)
    assert isinstance(stream, types.GeneratorType)
    for got, expected in zip(stream, pipe(ITEMS), strict=True):
        assert_same(got, expected)


def test_keyword_inputs(pipe):
    item = ITEMS[2]
    assert_same(pipe(question=item["question"], context=item["context"], top_k=2), pipe(item, top_k=2))
    got = pipe(question=[i["question"] for i in ITEMS[:3]], context=[i["context"] for i in ITEMS[:3]])
    for answer, expected in zip(got, pipe(ITEMS[:3]), strict=True):
        assert_same(answer, expected)


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("params", "message"), [
    (dict(top_k=0), "top_k"), (dict(top_k=True), "top_k"), (dict(top_k="3"), "top_k"),
    (dict(doc_stride=-1), "doc_stride"), (dict(max_answer_len=0), "max_answer_len"),
    (dict(max_seq_len=1.5), "max_seq_len"), (dict(max_question_len=0), "max_question_len"),
    (dict(handle_impossible_answer="yes"), "handle_impossible_answer"), (dict(topk=2), "topk"),
    (dict(doc_stride=60), "doc_stride=60 must be smaller"),  # room: 64 - 3 - 8 question tokens = 53
    (dict(max_seq_len=10, doc_stride=0), "max_seq_len=10"),
])
def test_bad_parameters(pipe, model, tokenizer, params, message):
    with pytest.raises(ValueError, match=message):
        pipe({"question": QUESTION, "context": SHORT}, **params)
    if "must be smaller" not in message and "max_seq_len=10" not in message:  # checked per question
        with pytest.raises(ValueError, match=message):
            bertkit.pipeline("question-answering", model=model, tokenizer=tokenizer, **params)


def test_the_room_counts_the_models_positions(pipe):
    with pytest.raises(ValueError, match=r"max_seq_len=64 \(capped to the model's 64 positions\)"):
        pipe({"question": QUESTION, "context": SHORT}, max_seq_len=384, doc_stride=128)


@pytest.mark.parametrize(("item", "message"), [
    ({"question": "", "context": SHORT}, "question is empty"),
    ({"question": "  \n", "context": SHORT}, "question is empty"),
    ({"question": QUESTION, "context": ""}, "context is empty"),
    ({"question": QUESTION, "context": " \t\u200b "}, "context is empty"),
    ({"question": QUESTION}, "dicts"),
    ({"question": QUESTION, "context": SHORT, "id": 3}, "dicts"),
    ({"question": QUESTION, "context": 3}, "context must be a string"),
    ([QUESTION, SHORT], "dicts"),
])
def test_bad_inputs(pipe, item, message):
    with pytest.raises(ValueError, match=message):
        pipe([item])


def test_bad_keyword_inputs(pipe):
    with pytest.raises(ValueError, match="two lists of the same length"):
        pipe(question=[QUESTION], context=[SHORT, SHORT])
    with pytest.raises(ValueError, match="not both"):
        pipe(ITEMS[0], question=QUESTION, context=SHORT)
    with pytest.raises(ValueError, match="needs"):
        pipe()


def test_a_bare_string_is_refused_at_once(pipe):
    with pytest.raises(ValueError, match=r'takes a \{"question", "context"\} dict .* not a bare string'):
        pipe("What is the question?")
