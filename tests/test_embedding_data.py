"""Training files for embedding / reranking training: formats, column roles, bad rows, mixing, resume, collation."""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections import Counter

import pytest
import torch

from bertkit.sentence.data import EmbeddingDataset, PairCollator, RowBatch, file_layout, training_rows
from bertkit.sentence.data_layout import ColumnLayout, parse_columns, resolve_columns
from bertkit.tasks.readers import read_rows
from bertkit.tokenization import BERTTokenizerFast

FIX = ("rename the columns (anchor, positive, negative_1.., label) or name the roles: columns={'anchor': 'q', "
       "'positive': 'd', ...} (CLI --columns q=anchor,d=positive,...).")


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def write_delimited(path, records, delimiter=","):
    """A CSV file (quoted as the csv module quotes), or a TSV file (tab-separated, never quoted)."""
    with open(path, "w", newline="") as f:
        if delimiter == "\t":
            f.writelines("\t".join(map(str, values)) + "\n" for values in [list(records[0])] + [
                list(r.values()) for r in records])
        else:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    return str(path)


def rows_of(path, columns=None):
    return [row for _, row in training_rows(path, file_layout(path, columns))]


def pairs(n, prefix=""):
    return [{"query": f"{prefix}question {i}", "positive": f"{prefix}answer {i}"} for i in range(n)]


# ---------------------------------------------------------------------------- formats

def test_every_format_gives_the_same_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")
    records = [{"sentence1": f"a cat, number {i}", "sentence2": f"a \"dog\" {i}", "score": i / 4} for i in range(7)]
    files = [write_jsonl(tmp_path / "t.jsonl", records), write_delimited(tmp_path / "t.csv", records),
             write_delimited(tmp_path / "t.tsv", records, "\t")]
    (tmp_path / "t.json").write_text(json.dumps(records))
    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as f:
        f.write("\r\n".join(json.dumps(r) for r in records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "t.parquet", row_group_size=3)
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "saved"))
    files += [str(tmp_path / name) for name in ("t.json", "t.jsonl.gz", "t.parquet", "saved")]
    expected = [{"anchor": r["sentence1"], "positive": r["sentence2"], "label": r["score"]} for r in records]
    for path in files:
        assert file_layout(path) == ColumnLayout({"anchor": "sentence1", "positive": "sentence2", "label": "score"},
                                                 "name")
        assert rows_of(path) == expected, path
    assert [place for place, _ in training_rows(files[-1], file_layout(files[-1]))][-1] == f"{files[-1]}, row 7"
    assert next(place for place, _ in training_rows(files[1], file_layout(files[1]))) == f"{files[1]}, line 2"


def test_json_lines_are_streamed_and_split_only_at_line_ends(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": "one\u2028line"}\r\n\n{"a": "two"}\r{"a": "three"}')
    assert [(r.values["a"], r.line) for r in read_rows(path)] == [("one\u2028line", 1), ("two", 3), ("three", 4)]


# ---------------------------------------------------------------------------- layouts

@pytest.mark.parametrize("names, roles", [
    (["question", "answer"], {"anchor": "question", "positive": "answer"}),
    (["Query", "passage", "labels"], {"anchor": "Query", "positive": "passage", "label": "labels"}),
    (["anchor", "positive", "negative_2", "negative_1"],
     {"anchor": "anchor", "positive": "positive", "negative_1": "negative_1", "negative_2": "negative_2"}),
    (["text1", "pos", "hard_negative"], {"anchor": "text1", "positive": "pos", "negative_1": "hard_negative"}),
])
def test_roles_by_name(names, roles):
    sample = [{n: (0.5 if n.startswith("label") else "text") for n in names}]
    assert resolve_columns(names, sample) == ColumnLayout(roles, "name")


def test_a_column_of_lists_is_the_negatives():
    sample = [{"query": "q", "document": "d", "negatives": ["x", "y"]}]
    layout = resolve_columns(["query", "document", "negatives"], sample)
    assert layout == ColumnLayout({"anchor": "query", "positive": "document", "negatives": "negatives"}, "name")


def test_roles_by_position():
    sample = [{"s": "a", "t": "b", "u": "c", "v": "d"}]
    assert resolve_columns(list("stuv"), sample) == ColumnLayout(
        {"anchor": "s", "positive": "t", "negative_1": "u", "negative_2": "v"}, "position")
    sample = [{"s": "a", "t": "b", "sim": "0.25"}, {"s": "c", "t": "d", "sim": "1"}]
    assert resolve_columns(["s", "t", "sim"], sample) == ColumnLayout({"anchor": "s", "positive": "t", "label": "sim"},
                                                                "position")
    sample = [{"s": "a", "t": "b", "u": ["c", "d"], "margins": [0.5, 1]}]
    assert resolve_columns(["s", "t", "u", "margins"], sample) == ColumnLayout(
        {"anchor": "s", "positive": "t", "negatives": "u", "label": "margins"}, "position")


def test_a_missing_file_is_named(tmp_path):
    for name in ("t.parquet", "t.jsonl", "saved"):
        with pytest.raises(ValueError) as error:
            file_layout(tmp_path / name)
        assert str(error.value) == f"no such training file or directory: {tmp_path / name}"


def test_roles_given_by_the_caller(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"q": "a", "d": "b", "n1": "c", "n2": "e", "id": 3}])
    columns = parse_columns("q=anchor, d=positive,n1=negative,n2=negative")
    assert columns == {"anchor": "q", "positive": "d", "negative": ["n1", "n2"]}
    assert rows_of(path, columns) == [{"anchor": "a", "positive": "b", "negative_1": "c", "negative_2": "e"}]
    with pytest.raises(ValueError) as error:
        file_layout(path, {"anchor": "q", "positive": "doc"})
    assert str(error.value) == (f"{path} has no column 'doc' (named for the positive by columns=...); its columns: "
                                "['q', 'd', 'n1', 'n2', 'id'].")
    with pytest.raises(ValueError, match=r"^--columns: 'q' is not COLUMN=ROLE"):
        parse_columns("q,d=positive")


@pytest.mark.parametrize("sample, why", [
    ({"query": "q", "question": "r", "positive": "p"},
     "('query' -> anchor, 'question' -> anchor, 'positive' -> positive): ['query', 'question'] both name the anchor"),
    ({"query": "q", "positive": "p", "notes": "n"},
     "('query' -> anchor, 'positive' -> positive, 'notes' -> ?): no role is named by ['notes']"),
    ({"query": "q", "label": 1},
     "('query' -> anchor, 'label' -> label): no column is the positive"),
    ({"query": "q", "positive": "p", "label": "yes"},
     "('query' -> anchor, 'positive' -> positive, 'label' -> label): the label 'label' holds text, not numbers"),
    ({"a": "q", "b": 3, "c": "p"},
     "('a' -> anchor, 'b' -> positive, 'c' -> negative_1): ['b'] hold numbers: a label or text?"),
])
def test_an_ambiguous_layout_is_refused_naming_each_column(sample, why):
    with pytest.raises(ValueError) as error:
        resolve_columns(list(sample), [sample], path="train.jsonl")
    assert str(error.value) == f"train.jsonl: cannot tell the roles of its columns {why}; {FIX}"


def test_a_last_column_of_numbers_and_text_is_refused():
    rows = [{"a": "q", "b": "p", "c": "0.5"}, {"a": "q", "b": "p", "c": "a text"}]
    with pytest.raises(ValueError) as error:
        resolve_columns(["a", "b", "c"], rows, path="t.csv")
    assert str(error.value) == (f"t.csv: cannot tell the roles of its columns ('a' -> anchor, 'b' -> positive, 'c' "
                                f"-> negative_1): ['c'] hold numbers: a label or text?; {FIX}")


# ---------------------------------------------------------------------------- bad rows

@pytest.mark.parametrize("bad, message", [
    ({"query": "q"}, "line 3: the row lacks the column 'positive' (the positive); every row needs "
                     "['query', 'positive', 'label']."),
    ({"query": "q", "positive": "  ", "label": 1}, "line 3: 'positive' (the positive) is empty; fill it in or drop "
                                                   "the row."),
    ({"query": "", "positive": "p", "label": 1}, "line 3: 'query' (the anchor) is empty; fill it in or drop the row."),
    ({"query": "q", "positive": "p", "label": "high"}, "line 3: the label 'label' is 'high', not a finite number."),
    ({"query": "q", "positive": "p", "label": math.nan}, "line 3: the label 'label' is nan, which is not finite; "
                                                         "write a finite number or drop the row."),
    ({"query": 7, "positive": "p", "label": 1}, "line 3: 'query' (the anchor) holds int (7), not text."),
])
def test_a_bad_row_is_refused_naming_file_and_row(tmp_path, bad, message):
    good = {"query": "q", "positive": "p", "label": 0.5}
    path = write_jsonl(tmp_path / "t.jsonl", [good, good, bad])
    with pytest.raises(ValueError) as error:
        rows_of(path)
    assert str(error.value) == f"{path}, {message}"


def test_a_bad_csv_label_and_a_bad_negatives_list(tmp_path):
    path = write_delimited(tmp_path / "t.csv", [{"query": "q", "positive": "p", "score": "1"},
                                                {"query": "q", "positive": "p", "score": "n/a"}])
    with pytest.raises(ValueError) as error:
        rows_of(path)
    assert str(error.value) == f"{path}, line 3: the label 'score' is 'n/a', not a finite number."
    path = write_jsonl(tmp_path / "n.jsonl", [{"query": "q", "pos": "p", "neg": ["a", "b"]},
                                              {"query": "q", "pos": "p", "neg": ["a", None]}])
    with pytest.raises(ValueError) as error:
        rows_of(path)
    assert str(error.value) == f"{path}, line 2: 'neg' item 1 holds NoneType (None), not text."


def test_a_bad_row_fails_when_the_dataset_opens(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [*pairs(150), {"query": "q", "positive": ""}])
    with pytest.raises(ValueError, match=r"line 151: 'positive' \(the positive\) is empty"):
        EmbeddingDataset(path, batch_size=4)


# ---------------------------------------------------------------------------- several files

def two_files(tmp_path):
    return [write_jsonl(tmp_path / "big.jsonl", pairs(30, "big ")),
            write_jsonl(tmp_path / "small.jsonl", pairs(10, "small "))]


def file_order(dataset):
    return [batch.source for batch in dataset]


def test_proportional_sampling_takes_every_batch_once_in_a_seeded_order(tmp_path):
    big, small = two_files(tmp_path)
    dataset = EmbeddingDataset([big, small], batch_size=2, seed=3, shuffle_buffer=4)
    assert len(dataset) == 20
    first_batches = Counter()
    epochs = [file_order(dataset) for _ in range(200)]
    for order in epochs:
        assert Counter(order) == {big: 15, small: 5}
        first_batches[order[0]] += 1
    assert len({tuple(order) for order in epochs}) > 150  # the order changes with the epoch
    assert abs(first_batches[big] / 200 - 0.75) < 0.1  # a batch's file is drawn in proportion to its batches
    again = EmbeddingDataset([big, small], batch_size=2, seed=3, shuffle_buffer=4)
    assert file_order(again) == epochs[0]
    assert file_order(EmbeddingDataset([big, small], batch_size=2, seed=4)) != epochs[0]


def st_file_order(sampler_class, sizes, batch_size, epoch):
    """The file of each batch sentence-transformers' multi-dataset ``sampler_class`` yields in ``epoch``."""
    data = pytest.importorskip("torch.utils.data")
    sampler_module = pytest.importorskip("sentence_transformers.base.sampler")
    datasets = [list(range(n)) for n in sizes]
    samplers = [data.BatchSampler(data.SequentialSampler(d), batch_size, drop_last=False) for d in datasets]
    sampler = getattr(sampler_module, sampler_class)(data.ConcatDataset(datasets), samplers,
                                                     generator=torch.Generator(), seed=0)
    sampler.set_epoch(epoch)
    return [0 if batch[0] < sizes[0] else 1 for batch in sampler]


def test_the_mix_of_files_is_sentence_transformers(tmp_path):
    big, small = two_files(tmp_path)
    for sampling, sampler_class in (("proportional", "ProportionalBatchSampler"),
                                    ("round_robin", "RoundRobinBatchSampler")):
        dataset = EmbeddingDataset([big, small], batch_size=3, sampling=sampling)
        for epoch in range(3):
            ours = [[big, small].index(source) for source in file_order(dataset)]
            theirs = st_file_order(sampler_class, [30, 10], 3, epoch)
            assert len(ours) == len(theirs) and Counter(ours) == Counter(theirs), sampling
            if sampling == "round_robin":
                assert ours == theirs


def test_round_robin_takes_the_files_in_turn_until_one_runs_out(tmp_path):
    big, small = two_files(tmp_path)
    dataset = EmbeddingDataset([big, small], batch_size=2, sampling="round_robin")
    assert file_order(dataset) == [big, small] * 5
    assert len(dataset) == 10


def test_every_row_of_a_file_comes_once_per_epoch_in_batches_of_that_file(tmp_path):
    big, small = two_files(tmp_path)
    dataset = EmbeddingDataset([big, small], batch_size=4, seed=1, shuffle_buffer=5)
    batches = list(dataset)
    for batch in batches:
        assert all(row["anchor"].startswith("big" if batch.source == big else "small") for row in batch.rows)
    anchors = [row["anchor"] for batch in batches for row in batch.rows]
    assert sorted(anchors) == sorted(r["query"] for r in pairs(30, "big ") + pairs(10, "small "))
    assert anchors[:4] != [f"big question {i}" for i in range(4)]  # shuffled within the file
    assert sum(len(b.rows) for b in EmbeddingDataset([big], batch_size=4, drop_last=True)) == 28


def test_a_resumed_dataset_gives_the_next_batches_of_the_uninterrupted_one(tmp_path):
    files = two_files(tmp_path)
    settings = {"batch_size": 3, "seed": 7, "shuffle_buffer": 6}
    whole = EmbeddingDataset(files, **settings)
    uninterrupted = [b.where for _ in range(2) for b in whole]
    for cut in (0, 5, 13, 14, 20):  # in the first epoch, at its end, in the second
        dataset = EmbeddingDataset(files, **settings)
        taken = []
        while len(taken) < cut:
            for batch in dataset:
                taken.append(batch.where)
                if len(taken) == cut:
                    break
        state = json.loads(json.dumps(dataset.state_dict()))
        resumed = EmbeddingDataset(files, **settings)
        resumed.load_state_dict(state)
        rest = []
        while len(taken) + len(rest) < len(uninterrupted):
            rest += [b.where for b in resumed]
        assert taken + rest == uninterrupted, cut
    other = EmbeddingDataset(files, **{**settings, "seed": 8})
    with pytest.raises(ValueError) as error:
        other.load_state_dict(state)
    assert str(error.value) == ("cannot resume the training data: seed 7 -> 8; resume with the files and settings of "
                                "the interrupted run, or start afresh.")


# ---------------------------------------------------------------------------- collation

@pytest.fixture
def tokenizer():
    words = ["query", "passage", ":", "cat", "dog", "bird", "fish", "sat", "ran", "a", "the"]
    return BERTTokenizerFast(vocab=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])


def batch_of(rows, source="t.jsonl"):
    return RowBatch(source, rows, [f"{source}, line {i + 1}" for i in range(len(rows))])


def test_the_collator_tokenizes_each_column_with_its_prompt_and_numbers_texts(tokenizer):
    rows = [{"anchor": "a cat", "positive": "the dog sat", "negatives": ["fish", "bird"]},
            {"anchor": "the dog sat", "positive": "a bird ran", "negatives": ["a cat", "fish"]}]
    collate = PairCollator(tokenizer, prompts={"anchor": "query: ", "negative": "passage: "}, max_length=5)
    batch = collate(batch_of(rows))
    assert batch.columns == ["anchor", "positive", "negative_1", "negative_2"]
    assert [ids.tolist() for ids in batch.text_ids] == [[0, 1], [1, 2], [3, 0], [4, 3]]
    assert batch.labels is None
    expected = {"anchor": ["query: a cat", "query: the dog sat"], "positive": ["the dog sat", "a bird ran"],
                "negative_1": ["passage: fish", "passage: a cat"], "negative_2": ["passage: bird", "passage: fish"]}
    prompts = {"anchor": "query: ", "positive": "", "negative_1": "passage: ", "negative_2": "passage: "}
    for column, inputs in zip(batch.columns, batch.inputs):
        reference = tokenizer(expected[column], padding=True, truncation=True, max_length=5, return_tensors="pt")
        # a prompted column says how many leading tokens are its prompt's ([CLS] and the prompt, no [SEP])
        prompt = prompts[column]
        assert set(inputs) == set(reference) | ({"prompt_length"} if prompt else set())
        if prompt:
            assert inputs.pop("prompt_length").tolist() == [len(tokenizer(prompt)["input_ids"]) - 1] * 2
        for key in reference:
            torch.testing.assert_close(inputs[key], reference[key])
    assert batch.inputs[0]["input_ids"].shape == (2, 5)  # "query: the dog sat" cut to 5 tokens
    assert batch.inputs[1]["input_ids"].shape == (2, 5)


def test_labels_are_float32(tokenizer):
    rows = [{"anchor": "cat", "positive": "dog", "label": 1.0}, {"anchor": "cat", "positive": "fish", "label": 0.0}]
    batch = PairCollator(tokenizer)(batch_of(rows))  # a scored pair file repeats its queries: allowed
    assert batch.labels.dtype == torch.float32 and batch.labels.tolist() == [1.0, 0.0]
    scores = [{"anchor": "cat", "positive": "dog", "negative_1": "bird", "label": [2.0, 0.5]}] * 2
    assert PairCollator(tokenizer)(batch_of(scores)).labels.shape == (2, 2)


def test_a_query_with_two_positives_in_one_batch_is_refused(tokenizer):
    rows = [{"anchor": "cat", "positive": "dog"}, {"anchor": "fish", "positive": "bird"},
            {"anchor": "cat", "positive": "dog"}, {"anchor": "cat", "positive": "a bird"}]
    with pytest.raises(ValueError) as error:
        PairCollator(tokenizer)(batch_of(rows))
    assert str(error.value) == (
        "t.jsonl: the query 'cat' comes with two different positives in one batch (line 1 and line 4); in-batch "
        "negatives would make one positive the other's negative: merge the rows into one with negatives, or allow "
        "it (allow_repeated_queries=True, CLI --allow-repeated-queries).")
    batch = PairCollator(tokenizer, allow_repeated_queries=True)(batch_of(rows))
    assert batch.text_ids[0].tolist() == [0, 1, 0, 0]


def test_rows_with_different_numbers_of_negatives_in_one_batch_are_refused(tokenizer):
    rows = [{"anchor": "cat", "positive": "dog", "negatives": ["fish"]},
            {"anchor": "bird", "positive": "dog", "negatives": ["fish", "cat"]}]
    with pytest.raises(ValueError) as error:
        PairCollator(tokenizer)(batch_of(rows))
    assert str(error.value) == ("t.jsonl: rows of one batch hold different numbers of negatives (line 1 (1), line 2 "
                                "(2)); give every row the same number of negatives.")


def test_a_file_is_read_as_it_is_iterated(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"query": "cat", "positive": "dog"}) + "\n{not json\n")
    rows = training_rows(str(path), ColumnLayout({"anchor": "query", "positive": "positive"}, "name"))
    assert next(rows) == (f"{path}, line 1", {"anchor": "cat", "positive": "dog"})  # the bad line is not read yet
    with pytest.raises(ValueError, match=r", line 2: not valid JSON"):
        next(rows)
