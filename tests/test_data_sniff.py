"""A file's format is what it holds, whatever its name: every reader of training, mining, evaluation and
embedding input reads a JSON-lines file named .csv as JSON lines (issue 38, fault 1), a CSV named .jsonl as CSV,
a TSV named .csv as TSV, Parquet named .csv as Parquet, or refuses naming what the file holds."""

from __future__ import annotations

import csv
import gzip
import json
import logging

import pytest

from bertkit.cli.embed_mine import read_pairs
from bertkit.data.sniff import name_format, sniff_format, text_format
from bertkit.pipelines.files import read_inputs
from bertkit.sentence.data import file_layout, training_rows
from bertkit.sentence.evaluation.beir import load_beir, read_qrels
from bertkit.sentence.evaluation.reranking import read_run
from bertkit.sentence.evaluation.sts import read_sts
from bertkit.tasks.classification import Classification
from bertkit.tasks.readers import read_rows

PAIRS = [{"anchor": f"what is a river, {i}?", "positive": f"water, flowing {i}", "score": i / 4} for i in range(5)]


def jsonl(path, records=PAIRS):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def table(path, records=PAIRS, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]), delimiter=delimiter,
                                quoting=csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE)
        writer.writeheader()
        writer.writerows(records)
    return path


# a JSON-lines file named .csv / .tsv, a CSV named .jsonl, a TSV named .csv: each read as what it holds
MISNAMED = [("pairs.csv", jsonl), ("pairs.tsv", jsonl), ("pairs.jsonl", table),
            ("pairs.csv", lambda p, records=PAIRS: table(p, records, "\t")), ("pairs.txt", jsonl)]


@pytest.mark.parametrize("head, named, found", [
    ('{"anchor": "a, b", "positive": "c"}\n', "csv", "jsonl"),
    ('\n\n  {"a": 1}\n', None, "jsonl"),
    ('[\n  {"a": 1},\n  {"a": 2}\n]\n', "csv", "json"),
    ('{\n  "data": []\n}\n', "txt", "json"),
    ("anchor,positive\nx,y\n", "jsonl", "csv"),
    ("anchor\tpositive\nx\ty\n", "csv", "tsv"),
    ("anchor\tpositive\nx, y\tz\n", None, "tsv"),
    ("text\nhello\n", "tsv", "tsv"),                   # one column: the name decides
    ("hello, world\nagain\n", "text", "text"),         # text lines hold commas
    ('"a string"\n"another, one"\n', "jsonl", "jsonl"),  # JSON strings per line
    ('{"broken": \n{"a": 1}\n', "jsonl", "jsonl"),     # a broken first line: its reader names it
    ("{ O\nEU B-ORG\n", None, "text"),                 # a CoNLL token that is a brace
])
def test_the_content_decides_the_format(head, named, found):
    assert text_format(head, {"txt": "text"}.get(named, named)) == found


def test_a_first_line_longer_than_the_head_is_json_lines(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(json.dumps({"anchor": "x" * 100_000, "positive": "y"}) + "\n", encoding="utf-8")
    assert sniff_format(path) == "jsonl"


def test_magic_numbers_and_compressed_data_under_a_plain_name(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(PAIRS), tmp_path / "pairs.csv")
    assert sniff_format(tmp_path / "pairs.csv") == "parquet"
    rows = [row for _, row in training_rows(tmp_path / "pairs.csv", file_layout(tmp_path / "pairs.csv"))]
    assert rows == [{"anchor": r["anchor"], "positive": r["positive"], "label": r["score"]} for r in PAIRS]
    with pytest.raises(ValueError, match=r"pairs\.csv holds a Parquet file \(by its content\), but this reader takes "
                                         r"CSV, TSV or JSON lines; convert it"):
        read_rows(tmp_path / "pairs.csv")
    with gzip.open(tmp_path / "zipped.csv", "wt") as f:
        f.write("anchor,positive\nx,y\n")
    with pytest.raises(ValueError, match=r"zipped\.csv holds gz-compressed data .*; rename it zipped\.csv\.gz"):
        read_rows(tmp_path / "zipped.csv")


def test_a_name_the_content_overrules_is_said_once(tmp_path):
    path = jsonl(tmp_path / "said.csv")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # on the logger itself: the CLI's set-up stops records at "bertkit"
    logging.getLogger("bertkit.data.sniff").addHandler(handler)
    try:
        read_rows(path)
        read_rows(path)
    finally:
        logging.getLogger("bertkit.data.sniff").removeHandler(handler)
    said = [r.getMessage() for r in records]
    assert said == [f"{path} holds JSON lines (a JSON object per line), whatever its name says: read as such "
                    "(rename it .jsonl to say so)."]


@pytest.mark.parametrize("name, write", MISNAMED)
def test_embedding_training_rows(tmp_path, name, write):
    path = write(tmp_path / name)
    rows = [row for _, row in training_rows(path, file_layout(path))]
    assert rows == [{"anchor": r["anchor"], "positive": r["positive"], "label": r["score"]} for r in PAIRS]


@pytest.mark.parametrize("name, write", MISNAMED)
def test_mining_pairs(tmp_path, name, write):
    queries, positives = read_pairs(str(write(tmp_path / name)), None, None, "utf-8")
    assert (queries, positives) == ([r["anchor"] for r in PAIRS], [r["positive"] for r in PAIRS])


@pytest.mark.parametrize("name, write", MISNAMED)
def test_classification_reader(tmp_path, name, write):
    records = [{"text": f"a film, {i}", "label": "good" if i % 2 else "bad"} for i in range(4)]
    examples = Classification().read(write(tmp_path / name, records))
    assert [(e.text, e.label) for e in examples] == [(r["text"], r["label"]) for r in records]


@pytest.mark.parametrize("name, write", MISNAMED)
def test_sts_reader(tmp_path, name, write):
    records = [{"sentence1": f"a, {i}", "sentence2": f"b {i}", "score": i} for i in range(3)]
    assert read_sts(write(tmp_path / name, records)) == ([(r["sentence1"], r["sentence2"]) for r in records],
                                                         [0.0, 1.0, 2.0])


@pytest.mark.parametrize("name, write", MISNAMED)
def test_embed_and_predict_inputs(tmp_path, name, write):
    records = [{"text": f"hello, world {i}", "text_pair": f"and you {i}"} for i in range(3)]
    assert list(read_inputs(write(tmp_path / name, records))) == records


def test_text_lines_stay_text_and_a_json_list_is_refused(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("hello, world\tand tabs\n\nagain\n", encoding="utf-8")
    assert list(read_inputs(lines, keep_blank=True)) == ["hello, world\tand tabs", "", "again"]
    listed = tmp_path / "list.csv"
    listed.write_text(json.dumps([{"text": "a"}], indent=1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"list\.csv holds one JSON document \(a list or an object\) \(by its "
                                         r"content\), but an input file holds text lines, JSON lines, CSV or TSV"):
        list(read_inputs(listed))


def test_run_files_qrels_and_beir_files(tmp_path):
    corpus = {"d1": "x", "d2": "y"}
    trec = tmp_path / "run.json"
    trec.write_text("q1 Q0 d1 1 2.5 bm25\nq1 Q0 d2 2 1.5 bm25\n", encoding="utf-8")
    assert read_run(trec, ["q1"], corpus) == {"q1": {"d1": 2.5, "d2": 1.5}}
    as_json = tmp_path / "run.trec"
    as_json.write_text(json.dumps({"q1": {"d2": 1.0}}), encoding="utf-8")
    assert read_run(as_json, ["q1"], corpus) == {"q1": {"d2": 1.0}}
    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id,corpus-id,score\nq1,d1,1\n", encoding="utf-8")
    assert read_qrels(qrels) == {"q1": {"d1": 1}}
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    table(beir / "corpus.jsonl", [{"_id": "d1", "text": "x"}])
    jsonl(beir / "queries.jsonl", [{"_id": "q1", "text": "what?"}])
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"corpus\.jsonl holds a comma-separated table \(by its content\), but "
                                         r"BEIR's corpus\.jsonl holds JSON lines; write one"):
        load_beir(beir)


def test_pretraining_corpora(tmp_path):
    from bertkit.data.corpus import read_documents
    from bertkit.data.partitions import ReadSettings, expand_inputs, plan_partitions
    from bertkit.data.reading import partition_documents

    texts = ["The river runs. It is wide.", "A second document, with a comma. And more."]
    corpus = jsonl(tmp_path / "corpus.txt", [{"id": i, "text": t} for i, t in enumerate(texts)])
    expected = [["The river runs.", "It is wide."], ["A second document, with a comma.", "And more."]]
    assert list(read_documents(corpus)) == expected
    settings = ReadSettings()
    assert [d for p in plan_partitions(expand_inputs([str(corpus)]), 1 << 20, settings)
            for d in partition_documents(p, settings)] == expected
    listed = tmp_path / "corpus.json"
    listed.write_text(json.dumps([{"text": t} for t in texts], indent=1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"corpus\.json holds one JSON document .* but a corpus is text, JSON lines"):
        list(plan_partitions(expand_inputs([str(listed)]), 1 << 20, settings))


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv", "empty.tsv", "empty.json"])
def test_an_empty_file_is_what_its_name_says(tmp_path, name, caplog):
    path = tmp_path / name
    path.write_text("\n\n")
    assert sniff_format(path) == name_format(path)
    assert "whatever its name says" not in caplog.text
