"""``zero-shot-classification`` equal to HF's pipeline on NLI classifiers of several families (tiny random HF
checkpoints: BERT, RoBERTa, ModernBERT, XLM-R, ELECTRA, DeBERTa-v2/v3; two orders of the NLI labels and a
two-label model), its bad input, the server through
huggingface_hub's ``InferenceClient`` on 127.0.0.1, and ``bertkit predict zero-shot-classification``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from family_dirs import _bert_vocab, family_dir, hf_tokenizer  # noqa: E402

NLI = {0: "contradiction", 1: "neutral", 2: "entailment"}
REVERSED = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}  # MoritzLaurer's DeBERTa NLI models' order
TWO = {0: "entailment", 1: "not_entailment"}
TEXTS = ["Emma Woodhouse, handsome, clever, and rich, seemed to unite some of the best blessings of existence.",
         "The match ended two goals to one.",
         "It is a truth universally acknowledged, that a single man in possession of a good fortune " * 6]  # cut
CALLS = [dict(candidate_labels=["wealth", "marriage", "sport", "travel"]),
         dict(candidate_labels="wealth, marriage,, sport", multi_label=True),
         dict(candidate_labels=["sport"]),  # one label: entailment against contradiction, as multi-label
         dict(candidate_labels=["good news", "bad news"], hypothesis_template="The tone is {}.")]


SIZES = dict(vocab_size=300, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
             max_position_embeddings=64)
#: HF classes and switches of the families built here (BERT's WordPiece tokenizer; Jina, which has one token type,
#: XLM-R's): BERT, GTE, NomicBERT, Jina v3, EuroBERT, DeBERTa-v3 (log-bucketed relative positions, c2p + p2c, no
#: token types) and v2 (separate position projections, token types, the conv layer) as test_family_deberta.py's
BUILT = {
    "bert": (transformers.BertConfig, transformers.BertForSequenceClassification, {}),
    "deberta-v3": (transformers.DebertaV2Config, transformers.DebertaV2ForSequenceClassification,
                   dict(type_vocab_size=0, relative_attention=True, position_buckets=8, max_relative_positions=32,
                        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                        position_biased_input=False, layer_norm_eps=1e-7, pad_token_id=0)),
    "deberta-v2": (transformers.DebertaV2Config, transformers.DebertaV2ForSequenceClassification,
                   dict(type_vocab_size=2, relative_attention=True, max_relative_positions=6, share_att_key=False,
                        pos_att_type=["c2p", "p2c"], position_biased_input=True, conv_kernel_size=3,
                        conv_act="gelu", embedding_size=20, layer_norm_eps=1e-7, pad_token_id=0)),
    "gte": (transformers.GteConfig, transformers.GteForSequenceClassification, dict(type_vocab_size=0, pad_token_id=0)),
    "nomic_bert": (transformers.NomicBertConfig, transformers.NomicBertForSequenceClassification,
                   dict(pad_token_id=0)),
    "jina_embeddings_v3": (transformers.JinaEmbeddingsV3Config,  # XLM-R's tokenizer: one token type
                           transformers.JinaEmbeddingsV3ForSequenceClassification, dict(pad_token_id=1)),
    "eurobert": (transformers.EuroBertConfig, transformers.EuroBertForSequenceClassification,
                 dict(pad_token_id=0, bos_token_id=2, eos_token_id=3, mask_token_id=4, num_key_value_heads=1)),
}


def nli_dir(root, family: str, id2label: dict[int, str] = NLI, seed: int = 0):
    """An HF sequence classifier of ``family`` with ``id2label`` (weights spread wide, so the labels' scores
    differ), written by transformers."""
    labels = dict(num_labels=len(id2label), id2label=id2label, label2id={v: k for k, v in id2label.items()},
                  initializer_range=0.6)
    if family not in BUILT:
        return family_dir(root, family, "AutoModelForSequenceClassification", seed=seed, **labels)
    config_class, model_class, switches = BUILT[family]
    directory = root / f"{family}-AutoModelForSequenceClassification"
    torch.manual_seed(seed)
    if family == "jina_embeddings_v3":
        tokenizer = hf_tokenizer("xlm-roberta")
    else:
        tokenizer = transformers.BertTokenizerFast(vocab=_bert_vocab(), model_max_length=64)
    sizes = {**SIZES, "vocab_size": len(tokenizer)}
    model_class(config_class(**sizes, **switches, **labels)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def both(directory):
    ours = bertkit.pipeline("zero-shot-classification", model=directory, batch_size=5)
    hf = transformers.pipeline("zero-shot-classification", model=str(directory))
    hf.tokenizer.model_max_length = ours.max_length  # the tiny tokenizers carry no limit; cut where ours does
    return ours, hf


def assert_same(got, want):
    assert got["sequence"] == want["sequence"] and got["labels"] == want["labels"], (got, want)
    np.testing.assert_allclose(got["scores"], want["scores"], atol=2e-5, rtol=0)


@pytest.mark.parametrize(("family", "id2label"), [("bert", NLI), ("roberta", NLI), ("modernbert", NLI),
                                                  ("xlm-roberta", REVERSED), ("electra", TWO),
                                                  ("deberta-v3", REVERSED), ("deberta-v2", NLI), ("gte", NLI),
                                                  ("nomic_bert", TWO), ("jina_embeddings_v3", REVERSED),
                                                  ("eurobert", NLI)])
def test_equal_to_hf_pipeline(tmp_path, family, id2label):
    ours, hf = both(nli_dir(tmp_path, family, id2label))
    assert len(ours.tokenizer(TEXTS[2])["input_ids"]) > ours.max_length  # the premise is cut (only_first)
    worst = 0.0
    for call in CALLS:
        got, want = ours(TEXTS, **call), hf(TEXTS, **call)
        for g, w in zip(got, want):
            assert_same(g, w)
            worst = max(worst, float(np.abs(np.subtract(g["scores"], w["scores"])).max()))
        rest = {k: v for k, v in call.items() if k != "candidate_labels"}  # the labels given second, as HF takes them
        assert_same(ours(TEXTS[1], call["candidate_labels"], **rest), hf(TEXTS[1], call["candidate_labels"], **rest))
    print(f"{family}: largest |ours - HF| {worst:.2e}")


def test_a_contradiction_class_is_found_by_name(tmp_path):
    """Entailment in the middle: multi-label scores against the class named contradiction (HF's pipeline takes
    id 0 whatever its name); the single-label scores are HF's."""
    directory = nli_dir(tmp_path, "roberta", {0: "neutral", 1: "entailment", 2: "contradiction"})
    ours, hf = both(directory)
    labels = ["wealth", "marriage"]
    assert_same(ours(TEXTS[0], labels), hf(TEXTS[0], labels))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory)
    encoded = hf.tokenizer([TEXTS[0]] * 2, [f"This example is {label}." for label in labels], return_tensors="pt",
                           padding=True, truncation="only_first")
    with torch.no_grad():
        logits = model(**encoded).logits[:, [2, 1]]
    want = torch.softmax(logits, -1)[:, 1].numpy()
    got = ours(TEXTS[0], labels, multi_label=True)
    np.testing.assert_allclose([got["scores"][got["labels"].index(label)] for label in labels], want, atol=2e-5)


def test_bad_input(tmp_path):
    sentiment = nli_dir(tmp_path / "s", "roberta", {0: "negative", 1: "neutral", 2: "positive"})
    with pytest.raises(ValueError, match=r"labels are \{0: 'negative', 1: 'neutral', 2: 'positive'\}: set id2label"
                                         r" in its config.json, or name the class with entailment_label"):
        bertkit.pipeline("zero-shot-classification", model=sentiment)
    named = bertkit.pipeline("zero-shot-classification", model=sentiment, entailment_label="positive")
    assert named("fine", ["a", "b"])["labels"]
    with pytest.raises(ValueError, match="entailment_label 'yes' is none of the model's labels"):
        named("fine", ["a"], entailment_label="yes")
    pipe = bertkit.pipeline("zero-shot-classification", model=nli_dir(tmp_path, "roberta"))
    for labels in ([], " , ", ""):
        with pytest.raises(ValueError, match="candidate_labels is empty"):
            pipe("text", labels)
    with pytest.raises(ValueError, match="needs candidate_labels"):
        pipe("text")
    for template in ("This example is about it.", "It is {label}.", "{0} and {1}", 3):
        with pytest.raises(ValueError, match=r"has no \{\} where the label goes"):
            pipe("text", ["a"], hypothesis_template=template)
    with pytest.raises(ValueError, match=r"the hypothesis of candidate label 'word word .* leaves no room for the "
                                         r"text within the model's 64 tokens; use a shorter label"):
        pipe("text", ["word " * 70])
    with pytest.raises(ValueError, match="multi_label must be true or false"):
        pipe("text", ["a"], multi_label="yes")
    assert pipe(["a", "b"], "x, y")[1]["labels"] in (["x", "y"], ["y", "x"])


def test_served_through_inference_client(tmp_path):
    """An NLI classifier's server answers HF's Inference API zero-shot request on ``POST /`` (and still classifies);
    a classifier without an entailment class refuses it in one line."""
    pytest.importorskip("fastapi")
    huggingface_hub = pytest.importorskip("huggingface_hub")
    httpx = pytest.importorskip("httpx")
    from bertkit.serving import create_app
    from serve_helpers import error_of, serving

    directory = nli_dir(tmp_path, "roberta")
    pipe = bertkit.pipeline("zero-shot-classification", model=directory)
    labels = ["wealth", "marriage", "sport"]
    with serving(create_app(directory)) as (url, _):
        client = huggingface_hub.InferenceClient(model=url)
        for options in ({}, {"multi_label": True}, {"hypothesis_template": "The tone is {}."}):
            got = client.zero_shot_classification(TEXTS[2], labels, **options)
            want = pipe(TEXTS[2], labels, **options)
            assert [g.label for g in got] == want["labels"]
            np.testing.assert_allclose([g.score for g in got], want["scores"], atol=1e-6)
        assert client.text_classification(TEXTS[0])[0].label in NLI.values()
        batch = httpx.post(url, json={"inputs": TEXTS[:2], "parameters": {"candidate_labels": "a, b"}}).json()
        assert [[d["label"] for d in answer] for answer in batch] == [a["labels"] for a in pipe(TEXTS[:2], "a, b")]
        for parameters, words in (({"candidate_labels": []}, "candidate_labels is empty"),
                                  ({"candidate_labels": ["a"], "hypothesis_template": "no place"}, "has no {}"),
                                  ({"candidate_labels": ["x"] * 33}, "the limit (--max-client-batch-size) is 32")):
            response = httpx.post(url, json={"inputs": "t", "parameters": parameters})
            assert words in error_of(response, 413 if "limit" in words else 422)
    sentiment = nli_dir(tmp_path / "s", "roberta", {0: "negative", 1: "neutral", 2: "positive"})
    with serving(create_app(sentiment)) as (url, _):
        response = httpx.post(url, json={"inputs": "t", "parameters": {"candidate_labels": ["a"]}})
        assert "candidate_labels: zero-shot classification needs an NLI model" in error_of(response, 422)


def test_cli(tmp_path, capsys):
    from bertkit.cli import main as cli

    directory = nli_dir(tmp_path, "bert")
    assert cli(["predict", "zero-shot", str(directory), TEXTS[0], TEXTS[1], "--candidate-labels", "wealth, sport",
                "travel", "--multi-label", "--hypothesis-template", "It is {}."]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = bertkit.pipeline("zero-shot-classification", model=directory)(
        TEXTS[:2], ["wealth", "sport", "travel"], multi_label=True, hypothesis_template="It is {}.")
    assert [line["output"] for line in lines] == want
