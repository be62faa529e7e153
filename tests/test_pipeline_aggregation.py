"""bertkit.pipelines.aggregation against HF's token-classification pipeline on the same tiny random model."""

from __future__ import annotations

import pytest
import torch

from bertkit import BERTForTokenClassification, BERTTokenizerFast
from bertkit.pipelines.aggregation import STRATEGIES, entities, softmax
from bertkit.resources import BERT_BASE_UNCASED_VOCAB

transformers = pytest.importorskip("transformers")

ID2LABEL = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
#: pieces of one word, punctuation, accents (composed and decomposed), runs of spaces, numbers, CJK, an
#: unknown word, contractions, texts without tokens
SENTENCES = [
    "Hemingwayesque prose, by Ernest Hemingway, in Paris.",
    "Café  naïve   résumé — 1234567 dollars!!",
    "the Cafe\u0301s au lait in İstanbul, 北京 😀there, zero\u200bwidth",
    "I don't do not 'm it's Zürich's 3.14159 km² ... (U.S.A.)",
    "Peter Blackburn rejects unbelievably xyzzyqwrt offers from Antananarivo",
    "   ",
    "",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny odd-sized random BERT tagger with the bert-base-uncased vocabulary, saved by HF."""
    directory = tmp_path_factory.mktemp("tagger")
    vocab = BERT_BASE_UNCASED_VOCAB.read_text(encoding="utf-8").splitlines()
    # HF 5.x's BertTokenizerFast ignores vocab_file= (it would build a 5-token vocabulary): pass the dict
    transformers.BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(directory)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                                     intermediate_size=50, num_labels=len(ID2LABEL), id2label=ID2LABEL)
    model = transformers.BertForTokenClassification(config)
    with torch.no_grad():  # large random classifier weights, so that every label gets predicted somewhere
        model.classifier.weight.normal_(0.0, 1.0)
        model.classifier.bias.copy_(torch.tensor([2.0, 0.0, 0.0, 0.0, 0.0]))
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def hf_pipeline(model_dir):
    return transformers.pipeline("token-classification", model=str(model_dir), tokenizer=str(model_dir))


@pytest.fixture(scope="module")
def ours(model_dir):
    """``entities`` for a text, fed by bertkit's tokenizer and model loaded from the same directory."""
    tokenizer = BERTTokenizerFast.from_pretrained(model_dir)
    model = BERTForTokenClassification.from_pretrained(model_dir).eval()

    def run(text, **options):
        encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        with torch.no_grad():
            logits = model(torch.tensor([encoding["input_ids"]]))[0]
        return entities(text, encoding["input_ids"], encoding["offset_mapping"], encoding["special_tokens_mask"],
                        softmax(logits.numpy()), ID2LABEL, tokenizer, **options)

    return run


def assert_same(found, expected):
    assert len(found) == len(expected), (found, expected)
    for ours, theirs in zip(found, expected):
        assert isinstance(ours["score"], float)
        assert ours == {**theirs, "score": pytest.approx(float(theirs["score"]), rel=1e-5)}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("text", SENTENCES)
def test_matches_hf_pipeline(hf_pipeline, ours, text, strategy):
    assert_same(ours(text, strategy=strategy), hf_pipeline(text, aggregation_strategy=strategy))


@pytest.mark.parametrize("ignore_labels", [[], ["PER"], ["B-LOC", "LOC"]])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ignore_labels_match_hf(hf_pipeline, ours, strategy, ignore_labels):
    for text in SENTENCES[:4]:
        expected = hf_pipeline(text, aggregation_strategy=strategy, ignore_labels=ignore_labels)
        assert_same(ours(text, strategy=strategy, ignore_labels=ignore_labels), expected)


def test_the_comparison_has_something_to_compare(hf_pipeline):
    """The model predicts every label, and the strategies give different answers."""
    labels = {e["entity"] for text in SENTENCES for e in hf_pipeline(text, ignore_labels=[])}
    assert labels == set(ID2LABEL.values())
    found = {repr([hf_pipeline(text, aggregation_strategy=s) for text in SENTENCES]) for s in STRATEGIES}
    assert len(found) >= 4


def test_words_are_told_by_offsets(model_dir):
    """A token continues a word when its string and the text it covers differ in length: ``##`` pieces, and
    tokens whose text lost characters to the normaliser (a decomposed accent inside the word, a zero-width
    space), which thereby join the word before them."""
    tokenizer = BERTTokenizerFast.from_pretrained(model_dir)
    text = "the Cafe\u0301s Hemingwayesque, 😀there a\u200bb"
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    every_token_a_person = softmax(torch.tensor([[0.0, 9.0, 0.0, 0.0, 0.0]]).expand(len(encoding["input_ids"]), 5))
    args = (text, encoding["input_ids"], encoding["offset_mapping"], encoding["special_tokens_mask"],
            every_token_a_person, ID2LABEL, tokenizer)
    assert [e["word"] for e in entities(*args)] == ["the", "cafes", "hemingway", "##es", "##que", ",", "😀there", "ab"]
    assert [e["index"] for e in entities(*args)] == [1, 2, 3, 4, 5, 6, 7, 8]
    words = entities(*args, strategy="first")
    assert [(e["word"], e["start"], e["end"]) for e in words] == [
        ("the cafes", 0, 10), ("hemingwayesque", 11, 25), (",", 25, 26), ("😀there ab", 27, 37)]


def test_strategy_is_case_insensitive(ours):
    assert ours(SENTENCES[0], strategy="SIMPLE") == ours(SENTENCES[0], strategy="simple")


@pytest.mark.parametrize("strategy", ["longest", "", None, "exact"])
def test_unknown_strategy_is_a_value_error(ours, strategy):
    with pytest.raises(ValueError, match=r"strategy must be one of 'none', 'simple', 'first', 'average', 'max'"):
        ours(SENTENCES[0], strategy=strategy)


def test_inputs_of_different_lengths_are_a_value_error(model_dir):
    tokenizer = BERTTokenizerFast.from_pretrained(model_dir)
    with pytest.raises(ValueError, match="same tokens"):
        entities("a b", [101, 1037, 1038, 102], [(0, 0), (0, 1), (2, 3), (0, 0)], [1, 0, 0, 1],
                 softmax(torch.zeros(3, 5)), ID2LABEL, tokenizer)


@pytest.mark.parametrize("tokens", [
    [], ["##ab", "cd", "##ef"], ["a", ".", "b", ",", "?", "!"], ["i", "don", "'", "t"], ["x", "' ", "s", "'m"],
    ["x do not", "y", "do not", "n't", "'s", "'ve", "'re"], ["a", "##", "#", "####x"], ["ab ,c", "d ."],
])
def test_tokens_join_as_hf_bert_tokenizers_join_them(model_dir, tokens):
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert BERTTokenizerFast.from_pretrained(model_dir).convert_tokens_to_string(tokens) == \
        theirs.convert_tokens_to_string(tokens)
