"""Every task and tool on every family: RoBERTa, XLM-RoBERTa, MPNet, ModernBERT, DistilBERT, ELECTRA, DeBERTa-v2,
GTE, NomicBERT, Jina v3 and EuroBERT checkpoints as HF transformers writes them (tests/family_dirs.py: random weights,
the family's own tokenizer kind), each tool checked against HF itself where HF has the tool (QA and multiple choice
only for the families HF has those heads for: ``family_dirs.MISSING_HEADS``).

* ``bertkit finetune tag / qa / choice`` on a family's masked-LM checkpoint (one short epoch on tiny data), then
  ``bertkit evaluate`` and ``bertkit predict`` on the output; the fine-tuned directory is read back by HF's
  ``AutoModelFor...`` and ``AutoTokenizer``, which encode the task's inputs token for token and give its logits
  (tag: the pre-split words with byte-level BPE's ``add_prefix_space``, as HF's run_ner; QA: the windows of
  HF's tokenizer with ``truncation="only_second"`` and a stride);
* pipelines against HF's pipelines on the same directory: fill-mask (the family's mask token), token
  classification (all five aggregation strategies, also on the fine-tuned tagger), feature extraction; HF 5
  has no question-answering pipeline, so QA is checked against the definition run on HF's tokenizer windows and
  HF's model;
* sentence-transformers directories built by the sentence-transformers library over each family's checkpoint:
  ``bertkit.SentenceTransformer(dir).encode`` and ``bertkit embed`` equal its ``encode``;
* ``bertkit serve``: /predict, /rerank (a one-label cross-encoder of the family), /embed, /ner, /qa and
  /fill-mask against HF's model or bertkit's pipelines;
* ONNX: ``export_onnx`` of the backbone and the sequence classifier (verified in ONNX Runtime by the export
  itself), whose graph takes exactly what the family's tokenizer returns, and ``bertkit export`` on an HF dir;
* the fast CPU path: ``optimize_for_inference`` (oneDNN GEMMs forced where oneDNN is available, unpadded
  execution) equals the plain path on a padded batch.
"""

from __future__ import annotations

import json
import math
import pathlib
import random
import re

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit.cli import main as cli  # noqa: E402
from family_dirs import ALL_FAMILIES, families_with, family_dir, has_head  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TEXTS = ["Emma Woodhouse, handsome, clever, and rich.", "naïve café — Ærøskøbing, ça va ? 😀", "x " * 40,
         "Anne Elliot waited."]
NER_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
NER_TEXT = "Emma Woodhouse, handsome, clever, and rich, lived in Highbury with Mr. Knightley."
STRATEGIES = ("none", "simple", "first", "average", "max")
BYTE_LEVEL = ("roberta", "modernbert", "eurobert")
#: the mask token of each family's tokenizer (``<mask>`` where not listed)
MASKS = {"distilbert": "[MASK]", "electra": "[MASK]", "deberta-v2": "[MASK]", "gte": "[MASK]", "nomic_bert": "[MASK]",
         "eurobert": "<|mask|>"}
#: families whose tokenizer returns token_type_ids that the model ignores (type_vocab_size 0: gte-base-en-v1.5,
#: deberta-v3, whose DebertaV2Tokenizer gives token types as HF's does)
TYPES_IGNORED = ("gte", "deberta-v2")
QA_FAMILIES = families_with("AutoModelForQuestionAnswering")
CHOICE_FAMILIES = families_with("AutoModelForMultipleChoice")
FAST = ["--epochs", "1", "--batch-size", "8", "--max-seq-length", "32", "--learning-rate", "1e-3"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("matrix")


def hf_model(directory: pathlib.Path, auto: str = "AutoModel"):
    return getattr(transformers, auto).from_pretrained(directory).eval()


def hf_tokenizer(directory: pathlib.Path):
    return transformers.AutoTokenizer.from_pretrained(directory)


def hf_inputs(tokenizer, feature: dict) -> dict[str, torch.Tensor]:
    """A bertkit feature (or collated batch) as HF's model takes it: the inputs its tokenizer returns (token types
    only where the family has them: HF's DistilBERT and ModernBERT refuse them)."""
    tensors = {name: torch.as_tensor(feature[name]) for name in tokenizer.model_input_names if name in feature}
    return {name: tensor if tensor.dim() > 1 else tensor[None] for name, tensor in tensors.items()}


def tagger_dir(root: pathlib.Path, family: str) -> pathlib.Path:
    """An HF token classifier of ``family`` with NER labels and a confident random classifier (every label
    gets predicted somewhere)."""
    return family_dir(root, family, "AutoModelForTokenClassification", num_labels=len(NER_LABELS),
                      id2label=NER_LABELS, label2id={v: k for k, v in NER_LABELS.items()}, initializer_range=0.5)


# ---------------------------------------------------------------------------- data
def _tag_sentences(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(rng.randint(3, 6)):
            kind = rng.random()
            if kind < 0.3:
                tokens += [rng.choice(["Emma", "Anne", "Frank"]), rng.choice(["Woodhouse", "Elliot", "Churchill"])]
                tags += ["B-PER", "I-PER"]
            elif kind < 0.45:
                tokens.append(rng.choice(["Bath", "Highbury", "Kellynch"]))
                tags.append("B-LOC")
            else:
                tokens.append(rng.choice(["the", "walked", "to", "and", "was", "rich,", "naïve", "café."]))
                tags.append("O")
        sentences.append((tokens, tags))
    return sentences


def _squad(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name, place = rng.choice(["Emma", "Anne", "Harriet"]), rng.choice(["Bath", "Highbury", "Uppercross"])
        context = (f"{' '.join(rng.sample(['the', 'day', 'was', 'long', 'and', 'we', 'walked'], 4))}. "
                   f"{name} lived in {place}, near the sea, for many years.")
        answer = place
        rows.append({"id": f"q{i}", "question": f"Where did {name} live?", "context": context,
                     "answers": {"text": [answer], "answer_start": [context.index(answer)]}})
    return rows


def _choices(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    endings = ["she slipped on the ice", "he sang a song", "it rained all day", "they walked to Bath"]
    return [{"context": f"{rng.choice(['Emma', 'Anne'])} fell down.", "choices": rng.sample(endings, 3),
             "label": rng.randrange(3)} for _ in range(n)]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("data")
    conll = ["\n".join(f"{t} {g}" for t, g in zip(tokens, tags)) + "\n" for tokens, tags in _tag_sentences(24, 0)]
    (folder / "tag.conll").write_text("\n".join(conll), encoding="utf-8")
    (folder / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _squad(16, 1)), encoding="utf-8")
    (folder / "choice.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _choices(16, 2)), encoding="utf-8")
    return {"tag": folder / "tag.conll", "qa": folder / "qa.jsonl", "choice": folder / "choice.jsonl"}


def finetune_evaluate_predict(root, tmp_path, data, task: str, family: str, *extra: str) -> pathlib.Path:
    """``bertkit finetune TASK`` on the family's masked-LM checkpoint, then ``evaluate`` and ``predict`` on its
    output; returns the fine-tuned model directory."""
    out = tmp_path / f"run-{task}"
    assert cli(["finetune", task, "--model", str(family_dir(root, family)), "--train", str(data[task]),
                "--validation", str(data[task]), "-o", str(out), *FAST, *extra]) == 0
    model_dir = out / "model"
    assert cli(["evaluate", str(model_dir), "--data", str(data[task])]) == 0
    assert cli(["predict", str(model_dir), "--data", str(data[task]), "-o", str(tmp_path / "p.jsonl")]) == 0
    assert (out / "results.json").is_file()
    return model_dir


def ours_and_hf(model_dir: pathlib.Path, examples_file: pathlib.Path):
    """The task's features of ``examples_file`` as ``bertkit evaluate`` makes them, bertkit's outputs on them and
    HF's model (read from the same directory)."""
    from bertkit.tasks.finetuning import load_finetuned, run_model

    net, tokenizer, task_object, length = load_finetuned(model_dir)
    examples = task_object.read(examples_file)
    features = task_object.featurize(examples, tokenizer, length)
    outputs, _ = run_model(net, task_object, features, precision="fp32")
    return examples, features, outputs, task_object


# ---------------------------------------------------------------------------- fine-tuning
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_with_prefix_space_is_hfs_add_prefix_space_and_saves_as_such(root, tmp_path, family):
    """What the tag task encodes words with: byte-level BPE with ``add_prefix_space`` (HF's own option where the
    class has it: RoBERTa), saved so that transformers reads it back alike; other tokenizers unchanged."""
    directory = family_dir(root, family)
    plain = bertkit.AutoTokenizer.from_pretrained(directory)
    spaced = plain.with_prefix_space()
    assert (spaced is plain) == (family not in BYTE_LEVEL)
    words, options = [["Emma", "Woodhouse,", "naïve"], ["x"]], dict(return_offsets_mapping=True)
    ours = spaced(words, is_split_into_words=True, **options)
    if family == "roberta":
        theirs = transformers.AutoTokenizer.from_pretrained(directory, add_prefix_space=True)
        assert theirs(words, is_split_into_words=True, **options)["input_ids"] == ours["input_ids"]
    spaced.save_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text, split in ((words, True), (NER_TEXT, False)):
        mine = spaced(text, is_split_into_words=split, **options)
        read = theirs(text, is_split_into_words=split, **options)
        assert (mine["input_ids"], mine["offset_mapping"]) == (read["input_ids"], read["offset_mapping"])
    assert bertkit.AutoTokenizer.from_pretrained(tmp_path).with_prefix_space()(NER_TEXT)["input_ids"] == \
        spaced(NER_TEXT)["input_ids"]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_finetune_tag_evaluate_predict_as_hf_reads_it(root, tmp_path, data, family):
    model_dir = finetune_evaluate_predict(root, tmp_path, data, "tag", family)
    examples, features, outputs, _ = ours_and_hf(model_dir, data["tag"])
    theirs_tok, theirs = hf_tokenizer(model_dir), hf_model(model_dir, "AutoModelForTokenClassification")
    encoded = theirs_tok([e.tokens for e in examples], is_split_into_words=True)
    whole = [f for f in features if len(f["input_ids"]) == len(encoded["input_ids"][f["example"]])]
    assert len(whole) > len(examples) // 2  # the rest are windows of longer sentences
    assert [f["input_ids"] for f in whole] == [encoded["input_ids"][f["example"]] for f in whole]
    assert [f["word_ids"] for f in whole] == [encoded.word_ids(f["example"]) for f in whole]
    if family in BYTE_LEVEL:  # run_ner's add_prefix_space: every word starts with a space, as inside a text
        pieces = theirs_tok.convert_ids_to_tokens(features[0]["input_ids"])
        firsts = [pieces[p] for p, w in enumerate(features[0]["word_ids"]) if w is not None and
                  (p == 0 or features[0]["word_ids"][p - 1] != w)]
        assert all(piece.startswith("Ġ") for piece in firsts), pieces
    for feature, ours in zip(features[:6], outputs):
        with torch.no_grad():
            logits = theirs(**hf_inputs(theirs_tok, feature)).logits[0]
        np.testing.assert_allclose(ours, logits.numpy(), atol=2e-5, rtol=1e-4)
    predicted = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [len(p["tags"]) for p in predicted] == [len(e.tokens) for e in examples]
    # the NER pipeline on the fine-tuned directory answers as HF's (its saved tokenizer read alike)
    for strategy in ("none", "first"):
        want = transformers.pipeline("token-classification", model=str(model_dir),
                                     aggregation_strategy=strategy)(NER_TEXT)
        got = bertkit.pipeline("token-classification", model=model_dir, aggregation_strategy=strategy)(NER_TEXT)
        assert_same_entities(got, want)


@pytest.mark.parametrize("family", QA_FAMILIES)
def test_finetune_qa_evaluate_predict_as_hf_reads_it(root, tmp_path, data, family):
    model_dir = finetune_evaluate_predict(root, tmp_path, data, "qa", family, "--doc-stride", "6")
    examples, features, outputs, task = ours_and_hf(model_dir, data["qa"])
    theirs_tok, theirs = hf_tokenizer(model_dir), hf_model(model_dir, "AutoModelForQuestionAnswering")
    windows = []
    for example in examples:  # run_qa's windows: the pair, the context cut with a stride
        encoded = theirs_tok(example.question, example.context, truncation="only_second", max_length=32,
                             stride=task.doc_stride, return_overflowing_tokens=True)
        windows += encoded["input_ids"]
    assert [f["input_ids"] for f in features] == windows
    assert len(windows) > len(examples)  # the contexts do span several windows
    for feature, (start, end) in zip(features[:6], outputs):
        with torch.no_grad():
            out = theirs(**hf_inputs(theirs_tok, feature))
        np.testing.assert_allclose(start, out.start_logits[0].numpy(), atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(end, out.end_logits[0].numpy(), atol=2e-5, rtol=1e-4)
    predicted = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(predicted) == len(examples)
    assert all(p["answer"] in e.context for p, e in zip(predicted, examples))


@pytest.mark.parametrize("family", CHOICE_FAMILIES)
def test_finetune_choice_evaluate_predict_as_hf_reads_it(root, tmp_path, data, family):
    model_dir = finetune_evaluate_predict(root, tmp_path, data, "choice", family)
    examples, features, outputs, task = ours_and_hf(model_dir, data["choice"])
    theirs = hf_model(model_dir, "AutoModelForMultipleChoice")
    batch = task.collate(features[:4])
    with torch.no_grad():
        logits = theirs(**hf_inputs(hf_tokenizer(model_dir), batch)).logits
    np.testing.assert_allclose(np.stack(outputs[:4]), logits.numpy(), atol=2e-5, rtol=1e-4)
    predicted = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [p["choice"] for p in predicted] == [e.choices[p["label"]] for p, e in zip(predicted, examples)]


# ---------------------------------------------------------------------------- pipelines
def assert_same_entities(got: list[dict], want: list[dict]) -> None:
    keys = [k for k in ("entity", "entity_group", "index", "word", "start", "end") if want and k in want[0]]
    assert [[g[k] for k in keys] for g in got] == [[w[k] for k in keys] for w in want]
    np.testing.assert_allclose([g["score"] for g in got], [float(w["score"]) for w in want], atol=1e-4)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_fill_mask_pipeline_and_cli_use_the_family_mask(root, family, capsys):
    directory = family_dir(root, family)
    mask = hf_tokenizer(directory).mask_token
    assert mask == MASKS.get(family, "<mask>")
    text = f"Emma was {mask} and rich, and {mask} too."
    want = transformers.pipeline("fill-mask", model=str(directory))(text, top_k=4)
    got = bertkit.pipeline("fill-mask", model=directory)(text, top_k=4)
    for ours, theirs in zip(got, want):
        assert [(a["token"], a["token_str"], a["sequence"]) for a in ours] == \
            [(a["token"], a["token_str"], a["sequence"]) for a in theirs]
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], atol=1e-4)
    with pytest.raises(ValueError, match=f"holds no {re.escape(mask)}"):
        bertkit.pipeline("fill-mask", model=directory)("no mask here")
    assert cli(["fill-mask", str(directory), f"Emma was {mask}."]) == 0
    assert f"{mask} 1:" in capsys.readouterr().out


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.filterwarnings("ignore:Tokenizer does not support real words")  # HF's, for BPE and SentencePiece
def test_token_classification_pipeline_equals_hf_for_every_strategy(root, tmp_path, family):
    directory = tagger_dir(root, family)
    for strategy in STRATEGIES:
        want = transformers.pipeline("token-classification", model=str(directory),
                                     aggregation_strategy=strategy)(NER_TEXT)
        got = bertkit.pipeline("token-classification", model=directory, aggregation_strategy=strategy)(NER_TEXT)
        assert want, strategy  # something to compare
        assert_same_entities(got, want)
    out = tmp_path / "entities.jsonl"
    assert cli(["predict", "ner", str(directory), NER_TEXT, "-o", str(out), "--aggregation-strategy", "max"]) == 0
    assert json.loads(out.read_text())["output"] == got


def qa_definition(directory: pathlib.Path, question: str, context: str, *, max_seq_len: int, doc_stride: int,
                  max_answer_len: int, top_k: int) -> list[dict]:
    """The answers of bertkit's QA pipeline by its definition, on HF's tokenizer windows and HF's model: per
    window, softmaxes of the start / end logits over the context tokens and the first token; a span's score is
    ``p_start * p_end``, a span of characters counts once with its best score."""
    tokenizer, model = hf_tokenizer(directory), hf_model(directory, "AutoModelForQuestionAnswering")
    windows = tokenizer(question, context, truncation="only_second", max_length=max_seq_len, stride=doc_stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)
    best: dict[tuple[int, int], float] = {}
    for i, ids in enumerate(windows["input_ids"]):
        in_context = [j for j, s in enumerate(windows.sequence_ids(i)) if s == 1]
        inputs = {"input_ids": torch.tensor([ids])}
        if "token_type_ids" in windows:
            inputs["token_type_ids"] = torch.tensor([windows["token_type_ids"][i]])
        with torch.no_grad():
            out = model(**inputs)
        scored = [0, *in_context]
        p_start = torch.softmax(out.start_logits[0, scored].double(), 0).tolist()
        p_end = torch.softmax(out.end_logits[0, scored].double(), 0).tolist()
        offsets = windows["offset_mapping"][i]
        for a, s in enumerate(in_context, 1):
            for b, e in enumerate(in_context, 1):
                if s <= e < s + max_answer_len:
                    chars = (offsets[s][0], offsets[e][1])
                    best[chars] = max(best.get(chars, 0.0), p_start[a] * p_end[b])
    ranked = sorted(best.items(), key=lambda item: -item[1])[:top_k]
    return [{"score": score, "start": a, "end": b, "answer": context[a:b]} for (a, b), score in ranked]


@pytest.mark.parametrize("family", QA_FAMILIES)
def test_question_answering_pipeline_equals_its_definition_on_hf(root, family):
    directory = family_dir(root, family, "AutoModelForQuestionAnswering")
    question = "Who lived in Highbury?"
    context = " ".join([NER_TEXT, "Anne Elliot waited at Kellynch, naïve and kind."] * 3)
    params = dict(max_seq_len=40, doc_stride=10, max_answer_len=6, top_k=4)
    want = qa_definition(directory, question, context, **params)
    got = bertkit.pipeline("question-answering", model=directory)({"question": question, "context": context},
                                                                   **params)
    assert [(a["start"], a["end"], a["answer"]) for a in got] == [(a["start"], a["end"], a["answer"]) for a in want]
    np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-4)
    # the head's own text method windows the pair with the family's special tokens too
    model = bertkit.BERTForQuestionAnswering.from_pretrained(directory)
    found = model.answer(bertkit.AutoTokenizer.from_pretrained(directory), question, context, max_length=40,
                         stride=10, max_answer_length=6)
    assert context[found["start"]:found["end"]] == found["answer"]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_feature_extraction_pipeline_equals_hf(root, family):
    directory = family_dir(root, family, "AutoModel")
    texts = [TEXTS[0], TEXTS[1], TEXTS[3]]
    want = transformers.pipeline("feature-extraction", model=str(directory))(texts)
    got = bertkit.pipeline("feature-extraction", model=directory)(texts)
    for ours, theirs in zip(got, want):
        assert np.shape(ours) == np.shape(theirs)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-4)


# ---------------------------------------------------------------------------- sentence-transformers
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_sentence_transformers_directory_of_the_family(root, tmp_path, family):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import modules

    directory = tmp_path / "st"
    transformer = modules.Transformer(str(family_dir(root, family, "AutoModel")), max_seq_length=24)
    pooling = modules.Pooling(transformer.get_embedding_dimension(), "cls" if family in ("mpnet", "gte") else "mean")
    st.SentenceTransformer(modules=[transformer, pooling, modules.Normalize()], device="cpu").save(str(directory))
    want = st.SentenceTransformer(str(directory), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(bertkit.SentenceTransformer(directory).encode(TEXTS), want, atol=1e-5)
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert cli(["embed", str(directory), "--input", str(source), "-o", str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, atol=1e-5)


# ---------------------------------------------------------------------------- serving
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_serve_routes_of_the_family(root, family):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    classifier = family_dir(root, family, "AutoModelForSequenceClassification", num_labels=3)
    tokenizer = hf_tokenizer(classifier)
    with TestClient(create_app(classifier)) as client:
        got = client.post("/predict", json={"inputs": TEXTS[0], "raw_scores": True}).json()
    with torch.no_grad():
        logits = hf_model(classifier, "AutoModelForSequenceClassification")(**tokenizer(TEXTS[0],
                                                                                       return_tensors="pt")).logits[0]
    np.testing.assert_allclose(sorted(g["score"] for g in got), sorted(logits.tolist()), atol=2e-5, rtol=1e-4)

    reranker = family_dir(root / "rerank", family, "AutoModelForSequenceClassification", num_labels=1, seed=3)
    query, texts = "who wrote Emma?", ["Jane Austen wrote Emma.", "Bath is in England.", "Anne Elliot waited."]
    encoded = hf_tokenizer(reranker)([query] * 3, texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        scores = hf_model(reranker, "AutoModelForSequenceClassification")(**encoded).logits[:, 0]
    with TestClient(create_app(reranker)) as client:
        assert client.get("/info").json()["task"] == "rerank"
        ranked = client.post("/rerank", json={"query": query, "texts": texts, "raw_scores": True}).json()
    np.testing.assert_allclose([r["score"] for r in sorted(ranked, key=lambda r: r["index"])], scores.numpy(),
                               atol=2e-5, rtol=1e-4)

    backbone = family_dir(root, family, "AutoModel")
    with TestClient(create_app(backbone, task="embeddings")) as client:
        (vector,) = client.post("/embed", json={"inputs": TEXTS[0]}).json()
    want = bertkit.pipeline("embeddings", model=backbone, normalize=True)(TEXTS[0])
    np.testing.assert_allclose(vector, want, atol=1e-5)

    with TestClient(create_app(tagger_dir(root, family))) as client:
        entities = client.post("/ner", json={"inputs": NER_TEXT, "aggregation_strategy": "simple"}).json()
    assert_same_entities(entities, bertkit.pipeline("ner", model=tagger_dir(root, family),
                                                    aggregation_strategy="simple")(NER_TEXT))

    if has_head(family, "AutoModelForQuestionAnswering"):
        with TestClient(create_app(family_dir(root, family, "AutoModelForQuestionAnswering"))) as client:
            answer = client.post("/qa", json={"question": "Who lived in Highbury?", "context": NER_TEXT}).json()
        assert NER_TEXT[answer["start"]:answer["end"]] == answer["answer"]

    masked_lm = family_dir(root, family)
    mask = hf_tokenizer(masked_lm).mask_token
    with TestClient(create_app(masked_lm)) as client:
        filled = client.post("/fill-mask", json={"inputs": f"Emma was {mask}.", "top_k": 3}).json()
        refused = client.post("/fill-mask", json={"inputs": "no mask here"})
    assert len(filled) == 3 and all(mask not in a["sequence"] for a in filled)
    assert refused.status_code == 422 and mask in refused.json()["error"]


# ---------------------------------------------------------------------------- ONNX
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_onnx_export_of_backbone_and_classifier_runs_on_the_tokenizers_output(root, tmp_path, family):
    """``export_onnx`` of a loaded backbone, ``bertkit export`` of an HF classifier directory (each verified in ONNX
    Runtime by the export): the graphs take what the family's tokenizer returns and give HF's outputs."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from bertkit.export import export_onnx

    backbone = family_dir(root, family, "AutoModel")
    export_onnx(bertkit.BERT.from_pretrained(backbone), tmp_path / "AutoModel", tokenizer=hf_tokenizer(backbone))
    classifier = family_dir(root, family, "AutoModelForSequenceClassification")
    assert cli(["export", str(classifier), "-o", str(tmp_path / "AutoModelForSequenceClassification")]) == 0
    for directory, head in ((backbone, "AutoModel"), (classifier, "AutoModelForSequenceClassification")):
        exported = tmp_path / head
        report = json.loads((exported / "export.json").read_text())
        tokenizer = bertkit.AutoTokenizer.from_pretrained(exported)  # the tokenizer saved beside the graph
        encoded = tokenizer(TEXTS[:2], padding=True, truncation=True, max_length=32, return_tensors="np")
        assert encoded["input_ids"].tolist() == hf_tokenizer(directory)(
            TEXTS[:2], padding=True, truncation=True, max_length=32)["input_ids"]
        # token_type_ids only where the tokenizer gives them; GTE-v1.5's BERT tokenizer gives them to a model without
        # token types, whose graph takes none (the caller leaves them out)
        ignored = {"token_type_ids"} if family in TYPES_IGNORED else set()
        assert sorted(report["inputs"]) == sorted(set(encoded) - ignored)
        session = ort.InferenceSession(str(exported / "model.onnx"), providers=["CPUExecutionProvider"])
        got = session.run(None, {name: encoded[name] for name in report["inputs"]})[0]
        with torch.no_grad():
            want = hf_model(directory, head)(**{k: torch.from_numpy(v) for k, v in encoded.items()})[0].numpy()
        mask = encoded["attention_mask"].astype(bool)
        np.testing.assert_allclose(got[mask] if got.ndim == 3 else got, want[mask] if want.ndim == 3 else want,
                                   atol=1e-4)


# ---------------------------------------------------------------------------- the fast path
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_optimize_for_inference_equals_the_plain_path(root, family, monkeypatch):
    from bertkit.modeling import fast, unpad

    plans = []
    plan = unpad.plan
    monkeypatch.setattr(unpad, "plan", lambda *a, **k: plans.append(plan(*a, **k)) or plans[-1])
    gemm = "onednn" if fast.onednn_available() else "plain"
    for head, cls in (("AutoModel", bertkit.BERT),
                      ("AutoModelForSequenceClassification", bertkit.BERTForSequenceClassification),
                      ("AutoModelForTokenClassification", bertkit.BERTForTokenClassification),
                      ("AutoModelForMaskedLM", bertkit.BERTForMaskedLM)):
        directory = family_dir(root, family, head)
        encoded = bertkit.AutoTokenizer.from_pretrained(directory)(TEXTS, padding=True, truncation=True,
                                                                   max_length=32, return_tensors="pt")
        inputs = (encoded["input_ids"], encoded["attention_mask"])
        plain = cls.from_pretrained(directory).eval()
        with torch.no_grad(), bertkit.fast_path(False):
            want = plain(*inputs)
        with torch.no_grad(), bertkit.fast_path(gemm=gemm):
            optimized = bertkit.optimize_for_inference(cls.from_pretrained(directory))
            plans.clear()
            got = optimized(*inputs)
        assert any(p is not None for p in plans), head  # the padding was dropped
        want, got = (want[0], got[0]) if isinstance(want, tuple) else (want, got)
        mask = encoded["attention_mask"].bool()
        if want.dim() == 3:
            want, got = want[mask], got[mask]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert math.isfinite(float(got.sum()))
