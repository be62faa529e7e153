"""The tag task (token classification): reading CoNLL / JSONL, the label-alignment rule, windows, decoding, scores."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertkit import BERTConfig, BERTTokenizerFast
from bertkit.modeling.heads import BERTForTokenClassification
from bertkit.resources import BERT_BASE_UNCASED_VOCAB
from bertkit.tasks.base import IGNORE_INDEX
from bertkit.tasks.token_classification import (
    TaggedSentence,
    TokenClassification,
    align_labels,
    continuation_ids,
    split_words,
    word_predictions,
)
from task_helpers import refused

NER = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
#: words with several pieces, accents, punctuation, CJK, unknown characters
WORDS = ["the", "Hello", "unbelievably", "xyzzyqwrt", "naïve", "Zürich", "café", "U.S.", "...", "!", ",", "don't",
         "東京", "☃", "EU", "rejects", "German", "call", "Peter", "Blackburn", "1996-08-22", "(", ")"]

CONLL = ("-DOCSTART- -X- -X- O\n"
         "\n"
         "EU NNP B-NP B-ORG\n"
         "rejects\tVBZ\tB-VP\tO\n"
         "German  JJ B-NP   B-MISC\n"
         "\n"
         "\n"
         "Peter NNP B-NP B-PER\n"
         "Blackburn NNP I-NP I-PER\n"
         "\n"
         "-DOCSTART- -X- -X- O\n"
         "\n"
         "call NN I-NP O\n"
         "\n"
         "\n")


@pytest.fixture(scope="module")
def tokenizer() -> BERTTokenizerFast:
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def fitted(labels=NER, **options) -> TokenClassification:
    task = TokenClassification(**options)
    task.fit([TaggedSentence(["w"] * len(labels), list(labels), 1)])
    return task


def random_sentences(n: int, seed: int = 0, length: tuple[int, int] = (1, 12)) -> list[TaggedSentence]:
    rng = random.Random(seed)
    sentences = []
    for i in range(n):
        size = rng.randint(*length)
        sentences.append(TaggedSentence([rng.choice(WORDS) for _ in range(size)],
                                        [rng.choice(NER) for _ in range(size)], i + 1))
    return sentences


def one_hot_logits(features, piece_labels) -> list[np.ndarray]:
    """Logits whose argmax at each piece is ``piece_labels(feature, position)``."""
    outputs = []
    for feature in features:
        logits = np.zeros((len(feature["input_ids"]), len(NER)), dtype=np.float32)
        for position in range(len(feature["input_ids"])):
            logits[position, piece_labels(feature, position)] = 5.0
        outputs.append(logits)
    return outputs


# ---------------------------------------------------------------------- reading
@pytest.mark.parametrize("name", ["train.conll", "train.txt", "train.tsv"])
def test_conll_reading_skips_docstart_and_blank_lines(tmp_path, name):
    sentences = TokenClassification().read(write(tmp_path, name, CONLL))
    assert [s.tokens for s in sentences] == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["call"]]
    assert [s.tags for s in sentences] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["O"]]
    assert [s.line for s in sentences] == [3, 8, 13]
    assert sentences[0].label == sentences[0].tags


@pytest.mark.parametrize("tag_column, tags", [(1, ["NNP", "VBZ", "JJ"]), (2, ["B-NP", "B-VP", "B-NP"]),
                                              (-2, ["B-NP", "B-VP", "B-NP"]), (3, ["B-ORG", "O", "B-MISC"])])
def test_conll_tag_column_choice(tmp_path, tag_column, tags):
    sentences = TokenClassification(tag_column=tag_column).read(write(tmp_path, "a.conll", CONLL))
    assert sentences[0].tags == tags


def test_conll_without_tags_and_with_crlf(tmp_path):
    path = write(tmp_path, "test.txt", "\r\nEU\r\nrejects\r\n\r\nPeter\r\n")
    task = TokenClassification()
    sentences = task.read(path)
    assert [s.tokens for s in sentences] == [["EU", "rejects"], ["Peter"]]
    assert all(s.tags is None for s in sentences) and not task.has_labels(sentences)


def test_conll_keeps_unicode_space_tokens(tmp_path):
    sentences = TokenClassification().read(write(tmp_path, "a.conll", "a O\n\u00a0 O\nb\tB-PER\n"))
    assert sentences[0].tokens == ["a", "\u00a0", "b"]


@pytest.mark.parametrize("text, tag_column, line", [("EU NNP\n\nrejects VBZ\n", 2, 1),
                                                    ("EU NNP B-ORG\n", -3, 1)])
def test_conll_too_few_columns_names_file_line_and_option(tmp_path, text, tag_column, line):
    path = write(tmp_path, "bad.conll", text)
    with pytest.raises(ValueError, match=rf"bad\.conll, line {line}: .*tag_column={tag_column}"):
        TokenClassification(tag_column=tag_column).read(path)


@pytest.mark.parametrize("text, line, found, expected", [
    ("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nin NN\n", 3, 2, 4),  # `NN` is no tag
    ("EU B-ORG\nrejects\nGerman B-MISC\n", 2, 1, 2),
    ("New York NNP B-LOC\nis VBZ O\nbig JJ O\n", 1, 4, 3)])  # a token with a space
def test_conll_line_with_other_columns_than_the_file_names_file_and_line(tmp_path, text, line, found, expected):
    path = write(tmp_path, "bad.conll", text)
    with pytest.raises(ValueError, match=rf"bad\.conll, line {line}: {found} column\(s\) .*, but 2 of the file's "
                                         rf"lines have {expected} .*1 line\(s\) differ"):
        TokenClassification().read(path)


def test_a_mistagged_conll_file_trains_nothing(tmp_path):
    path = write(tmp_path, "train.conll", "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nin NN\n\nPeter NNP B-NP B-PER\n")
    refused(tmp_path, r"train\.conll, line 3: 2 column\(s\) \('in NN'\), but 3 of the file's lines have 4",
             task="tag", train=path)


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no sentences"):
        TokenClassification().read(write(tmp_path, "empty.conll", "-DOCSTART- O\n\n\n"))


def test_jsonl_reading(tmp_path):
    lines = [{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}, {"tokens": ["Peter"], "tags": ["B-PER"]}]
    path = write(tmp_path, "train.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    sentences = TokenClassification().read(path)
    assert [(s.tokens, s.tags, s.line) for s in sentences] == [(["EU", "rejects"], ["B-ORG", "O"], 1),
                                                               (["Peter"], ["B-PER"], 2)]
    untagged = TokenClassification().read(write(tmp_path, "test.json", json.dumps([{"tokens": ["a", "b"]}])))
    assert untagged[0].tags is None


def test_jsonl_integer_ner_tags_need_labels(tmp_path):
    path = write(tmp_path, "hf.jsonl", json.dumps({"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: .*integers.*labels="):
        TokenClassification().read(path)
    assert TokenClassification(labels=NER).read(path)[0].tags == ["B-ORG", "O"]
    with pytest.raises(ValueError, match="out of range"):
        TokenClassification(labels=["O", "B-ORG"]).read(path)


@pytest.mark.parametrize("record, match", [({"tokens": ["a", "b"], "tags": ["O"]}, "2 tokens but 1 tags"),
                                           ({"tokens": "a b", "tags": ["O"]}, "list of strings"),
                                           ({"tokens": ["a"]}, "no 'tags' list")])
def test_jsonl_errors_name_the_line(tmp_path, record, match):
    good = {"tokens": ["x"], "tags": ["O"]}
    path = write(tmp_path, "bad.jsonl", json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=rf"line 2: .*{match}"):
        TokenClassification().read(path)


@pytest.mark.parametrize("options, name", [({"tag_column": 0}, "tag_column"), ({"tag_column": True}, "tag_column"),
                                           ({"tag_column": "3"}, "tag_column"),
                                           ({"label_all_pieces": 1}, "label_all_pieces"),
                                           ({"scheme": "BILOU"}, "scheme"), ({"scheme": 2}, "scheme"),
                                           ({"labels": ["O", "O"]}, "labels"),
                                           ({"labels": []}, "labels")])
def test_option_validation(options, name):
    with pytest.raises(ValueError, match=name):
        TokenClassification(**options)


def test_scheme_names_are_upper_cased():
    assert [TokenClassification(scheme=s).scheme for s in ("bio", "BIOES", "iob1", None)] == ["BIO", "BIOES", "IOB1",
                                                                                               None]


# ---------------------------------------------------------------------- labels
def test_fit_orders_labels_o_first_and_picks_primary_metric():
    task = TokenClassification()
    task.fit([TaggedSentence(["a", "b", "c"], ["I-PER", "O", "B-PER"], 1)])
    assert task.labels == ["O", "B-PER", "I-PER"] and task.primary_metric == "f1"
    pos = TokenClassification(tag_column=1)
    pos.fit([TaggedSentence(["a", "b"], ["VBZ", "NNP"], 1)])
    assert pos.labels == ["NNP", "VBZ"] and pos.primary_metric == "accuracy"
    assert pos.model_overrides() == {"num_labels": 2, "id2label": {0: "NNP", 1: "VBZ"}}


def test_fit_errors():
    with pytest.raises(ValueError, match="no tags"):
        TokenClassification().fit([TaggedSentence(["a"], None, 1)])
    with pytest.raises(ValueError, match=r"\['B-PER'\] are not in labels"):
        TokenClassification(labels=["O"]).fit([TaggedSentence(["a", "b"], ["O", "B-PER"], 1)])
    with pytest.raises(ValueError, match="fit"):
        TokenClassification().model_overrides()


def test_unknown_tags_in_validation_are_a_clear_error(tokenizer):
    task = fitted(["O", "B-PER", "I-PER"])
    validation = [TaggedSentence(["Paris", "is", "nice"], ["B-LOC", "O", "B-MISC"], 7)]
    with pytest.raises(ValueError, match=r"line 7: tags \['B-LOC', 'B-MISC'\].*add sentences with them to the "
                                         "training data"):
        task.featurize(validation, tokenizer, 32)


def test_unknown_tags_in_a_validation_file_name_the_file_and_line(tmp_path, tokenizer):
    task = fitted(["O", "B-PER", "I-PER"])
    validation = task.read(write(tmp_path, "dev.conll", "Peter B-PER\n\nParis B-LOC\n"))
    with pytest.raises(ValueError, match=r"dev\.conll, line 3: tags \['B-LOC'\] occur in this data but not in the "
                                         "training data"):
        task.featurize(validation, tokenizer, 32)


def test_options_and_restore_round_trip_through_config(tmp_path):
    task = TokenClassification(tag_column=-1, label_all_pieces=True, scheme="BIO")
    task.fit(random_sentences(20))
    config = BERTConfig(vocab_size=99, hidden_size=36, num_hidden_layers=1, num_attention_heads=3,
                        intermediate_size=37, **task.model_overrides())
    config.to_json_file(tmp_path / "config.json")
    saved = json.loads(json.dumps(task.options()))
    rebuilt = TokenClassification(**{**saved, "labels": None})
    rebuilt.restore(BERTConfig.from_json_file(tmp_path / "config.json"))
    assert rebuilt.options() == task.options() == TokenClassification(**saved).options()
    assert rebuilt.labels == task.labels and rebuilt.primary_metric == task.primary_metric == "f1"
    hf = BERTConfig.from_hf_dict(config.to_hf_dict("BertForTokenClassification"))
    from_hf = TokenClassification()
    from_hf.restore(hf)
    assert from_hf.labels == task.labels
    unnamed = BERTConfig(vocab_size=99, hidden_size=36, num_hidden_layers=1, num_attention_heads=3,
                         intermediate_size=37, num_labels=3)
    with pytest.raises(ValueError, match=r"no id2label.*labels="):
        TokenClassification().restore(unnamed)
    given = TokenClassification(labels=["O", "B-X", "I-X"])
    given.restore(unnamed)
    assert given.labels == ["O", "B-X", "I-X"]


# ---------------------------------------------------------------------- the alignment rule
def test_align_labels_by_hand():
    word_ids = [None, 0, 1, 1, 1, 2, None]
    continuation = continuation_ids(NER)
    b_per, i_per, o = NER.index("B-PER"), NER.index("I-PER"), NER.index("O")
    assert align_labels(word_ids, [o, b_per, i_per], False) == [-100, o, b_per, -100, -100, i_per, -100]
    assert align_labels(word_ids, [o, b_per, i_per], True, continuation) == [-100, o, b_per, i_per, i_per, i_per,
                                                                             -100]
    assert align_labels(word_ids, [o, b_per, i_per], True) == [-100, o, b_per, b_per, b_per, i_per, -100]
    assert word_predictions(word_ids, [9, 1, 2, 3, 4, 5, 9]) == {0: 1, 1: 2, 2: 5}
    assert continuation_ids(["O", "B-X", "I-X", "B-Y"]) == [0, 2, 2, 3]  # no I-Y: B-Y stays


@pytest.mark.parametrize("label_all_pieces", [False, True])
def test_alignment_round_trip_on_random_sentences(tokenizer, label_all_pieces):
    task = fitted(label_all_pieces=label_all_pieces)
    sentences = random_sentences(60, seed=1)
    features = task.featurize(sentences, tokenizer, 64)
    assert [f["example"] for f in features] == list(range(len(sentences)))  # all fit in one window
    several_pieces = 0
    for feature, sentence in zip(features, sentences):
        gold = [NER.index(tag) for tag in sentence.tags]
        word_ids, labels = feature["word_ids"], feature["labels"]
        assert len(word_ids) == len(labels) == len(feature["input_ids"]) == len(feature["token_type_ids"])
        assert word_predictions(word_ids, labels) == dict(enumerate(gold))
        assert word_ids[0] is None and word_ids[-1] is None and labels[0] == labels[-1] == IGNORE_INDEX
        for position in range(2, len(word_ids) - 1):
            word = word_ids[position]
            if word != word_ids[position - 1]:
                continue
            several_pieces += 1
            expected = NER.index(NER[gold[word]].replace("B-", "I-")) if label_all_pieces else IGNORE_INDEX
            assert labels[position] == expected
    assert several_pieces > 50


def test_words_without_pieces_still_get_a_tag(tokenizer):
    task = fitted()
    sentence = TaggedSentence(["Hello", "\x00", "world", "\u200b", "Peter"], ["O", "B-PER", "O", "B-LOC", "B-PER"], 1)
    (feature,) = task.featurize([sentence], tokenizer, 32)
    assert feature["word_ids"] == [None, 0, 2, 4, None]
    assert feature["labels"] == [-100, NER.index("O"), NER.index("O"), NER.index("B-PER"), -100]
    outputs = one_hot_logits([feature], lambda f, p: NER.index("B-PER") if f["word_ids"][p] == 4 else 0)
    (prediction,) = task.decode([sentence], [feature], outputs)
    assert prediction["tags"] == ["O", "O", "O", "O", "B-PER"]
    assert prediction["scores"][1] == prediction["scores"][3] == 0.0 and prediction["scores"][4] > 0.5


# ---------------------------------------------------------------------- windows and decoding
def test_split_words():
    assert split_words([1, 2, 3, 1], 3) == [(0, 2), (2, 3), (3, 4)]
    assert split_words([5, 1], 3) == [(0, 1), (1, 2)]
    assert split_words([], 3) == [(0, 0)]
    assert split_words([0, 2, 0, 1], 3) == [(0, 4)]
    assert split_words([0, 2, 0, 2], 3) == [(0, 3), (3, 4)]


@pytest.mark.parametrize("label_all_pieces", [False, True])
def test_long_sentences_are_split_into_windows_at_word_boundaries(tokenizer, label_all_pieces):
    task = fitted(label_all_pieces=label_all_pieces)
    sentences = [random_sentences(1, seed=2, length=(3, 3))[0], *random_sentences(3, seed=3, length=(40, 60))]
    features = task.featurize(sentences, tokenizer, 16)
    assert all(len(f["input_ids"]) <= 16 for f in features)
    assert [f["example"] for f in features] == sorted(f["example"] for f in features)
    for index, sentence in enumerate(sentences):
        mine = [f for f in features if f["example"] == index]
        assert len(mine) > 1 or index == 0
        words = [w for f in mine for w in f["word_ids"] if w is not None]
        assert words == sorted(words) and set(words) == set(range(len(sentence.tokens)))
        starts = [next(w for w in f["word_ids"] if w is not None) for f in mine]
        assert all(f["labels"][f["word_ids"].index(start)] != IGNORE_INDEX for f, start in zip(mine, starts))
    gold = {i: [NER.index(tag) for tag in s.tags] for i, s in enumerate(sentences)}
    outputs = one_hot_logits(features, lambda f, p: 0 if f["word_ids"][p] is None
                             else gold[f["example"]][f["word_ids"][p]])
    predictions = task.decode(sentences, features, outputs)
    assert [p["tags"] for p in predictions] == [s.tags for s in sentences]
    assert [p["tokens"] for p in predictions] == [s.tokens for s in sentences]


def test_a_word_longer_than_the_window_keeps_its_first_pieces(tokenizer):
    task = fitted()
    sentence = TaggedSentence(["a", "xyzzyqwrt" * 4, "b"], ["O", "B-PER", "O"], 1)
    features = task.featurize([sentence], tokenizer, 6)
    assert [f["word_ids"] for f in features] == [[None, 0, None], [None, 1, 1, 1, 1, None], [None, 2, None]]
    outputs = one_hot_logits(features, lambda f, p: NER.index("B-PER") if f["word_ids"][p] == 1 else 0)
    assert task.decode([sentence], features, outputs)[0]["tags"] == ["O", "B-PER", "O"]
    with pytest.raises(ValueError, match="max_seq_length=2"):
        task.featurize([sentence], tokenizer, 2)


def test_decode_reads_each_words_first_piece(tokenizer):
    task = fitted()
    sentence = TaggedSentence(["Peter", "unbelievably", "xyzzyqwrt", "!"], ["B-PER", "O", "B-MISC", "O"], 1)
    (feature,) = task.featurize([sentence], tokenizer, 32)
    first = {w: feature["word_ids"].index(w) for w in range(4)}
    gold = [NER.index(tag) for tag in sentence.tags]
    # continuation pieces argue for another tag: only first pieces count
    outputs = one_hot_logits([feature], lambda f, p: gold[f["word_ids"][p]] if p in first.values() else 8)
    (prediction,) = task.decode([sentence], [feature], outputs)
    assert prediction["tags"] == prediction["label"] == sentence.tags
    expected = np.exp(5.0) / (np.exp(5.0) + len(NER) - 1)
    np.testing.assert_allclose(prediction["scores"], [expected] * 4, rtol=1e-6)


def test_untagged_examples_featurize_without_labels(tokenizer):
    task = fitted()
    features = task.featurize([TaggedSentence(["a", "b"], None, 1)], tokenizer, 16)
    assert "labels" not in features[0] and features[0]["word_ids"] == [None, 0, 1, None]


def test_collate_pads_labels_and_runs_the_head(tokenizer):
    task = fitted()
    sentences = random_sentences(3, seed=4, length=(2, 9))
    features = task.featurize(sentences, tokenizer, 32)
    batch = task.collate(features)
    longest = max(len(f["input_ids"]) for f in features)
    assert batch["labels"].shape == batch["input_ids"].shape == (3, longest)
    for row, feature in enumerate(features):
        n = len(feature["input_ids"])
        assert batch["labels"][row, :n].tolist() == feature["labels"]
        assert (batch["labels"][row, n:] == IGNORE_INDEX).all() and (batch["input_ids"][row, n:] == 0).all()
        assert batch["attention_mask"][row].sum() == n
    config = BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=36, num_hidden_layers=1, num_attention_heads=3,
                        intermediate_size=37, max_position_embeddings=64, **task.model_overrides())
    model = BERTForTokenClassification(config).eval()
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert logits.shape == (3, longest, len(NER))
    outputs = [logits[i, :len(f["input_ids"])].numpy() for i, f in enumerate(features)]
    predictions = task.decode(sentences, features, outputs)
    assert [len(p["tags"]) for p in predictions] == [len(s.tokens) for s in sentences]


# ---------------------------------------------------------------------- scores
GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O", "B-MISC"], ["I-LOC", "O"]]
PREDICTED = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "I-ORG", "I-ORG", "O", "B-MISC"], ["I-LOC", "B-LOC"]]


@pytest.mark.parametrize("scheme", [None, "BIO"])
def test_score_equals_seqeval(scheme):
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2

    task = fitted(scheme=scheme)
    examples = [TaggedSentence(["w"] * len(tags), tags, 1) for tags in GOLD]
    examples.append(TaggedSentence(["unscored"], None, 9))
    predictions = [{"tags": tags} for tags in [*PREDICTED, ["O"]]]
    scores = task.score(examples, predictions)
    strict = {"mode": "strict", "scheme": IOB2} if scheme else {}
    assert scores["precision"] == pytest.approx(seqeval_metrics.precision_score(GOLD, PREDICTED, **strict))
    assert scores["recall"] == pytest.approx(seqeval_metrics.recall_score(GOLD, PREDICTED, **strict))
    assert scores["f1"] == pytest.approx(seqeval_metrics.f1_score(GOLD, PREDICTED, **strict))
    assert scores["accuracy"] == pytest.approx(seqeval_metrics.accuracy_score(GOLD, PREDICTED))
    report = seqeval_metrics.classification_report(GOLD, PREDICTED, output_dict=True, zero_division=0, **strict)
    types = {kind for kind in report if not kind.endswith(" avg")}
    assert set(scores["per_type"]) == types
    for kind in types:
        expected = {"precision": report[kind]["precision"], "recall": report[kind]["recall"],
                    "f1": report[kind]["f1-score"], "support": report[kind]["support"]}
        assert scores["per_type"][kind] == pytest.approx(expected)
    json.dumps(scores)
