"""``pretrain --text`` on a corpus rather than a book: JSON lines with another text field, directories and globs,
and past the in-memory size a streamed path (held-out documents per partition, a vocabulary from a sample, both
data directories written by the partition pipeline on several workers) that never holds the corpus whole."""

from __future__ import annotations

import json

import pytest

from bertkit.cli import parse_size
from bertkit.data.partitions import ReadSettings
from bertkit.data.reading import sample_texts
from bertkit.tasks import text_data
from bertkit.tasks.pretraining import pretrain_from_text
from bertkit.training import TrainingConfig
from test_data_partitions import corpus_texts, write_jsonl

TRAINING = dict(max_steps=2, batch_size=8, learning_rate=1e-3, precision="fp32", seed=3, progress_bar=False)


def test_a_large_corpus_is_streamed_never_held_whole(tmp_path, monkeypatch):
    corpus = tmp_path / "shards"
    corpus.mkdir()
    texts = corpus_texts(800, paragraphs=(3, 8))
    for k in range(4):
        write_jsonl(corpus / f"part-{k}.jsonl", texts[k::4], field="body")
    total = sum(p.stat().st_size for p in corpus.iterdir())
    monkeypatch.setattr(text_data, "IN_MEMORY_BYTES", total // 4)  # the corpus counts as large
    monkeypatch.setattr(text_data, "HELDOUT_BYTES", total // 25 + 1)  # hold out every 25th document (not 20th)
    monkeypatch.setattr(text_data, "PARTITION_BYTES", total // 8)
    result = pretrain_from_text(str(corpus / "*.jsonl"), tmp_path / "run", text_field="body", vocab_size=600,
                                max_seq_length=64, tokenizer_sample_bytes=total // 3, workers=2,
                                training=TrainingConfig(**TRAINING), progress=False)
    data = tmp_path / "run" / "data"
    assert not (data / "train.txt").exists()  # no whole-corpus copy
    train, heldout = (json.loads((data / d / "index.json").read_text()) for d in ("train", "heldout"))
    assert train["heldout_every"] == heldout["heldout_every"] == 25
    assert train["num_documents"] + heldout["num_documents"] == 800
    assert 800 / 25 <= heldout["num_documents"] <= 800 / 25 + 4  # one per 25, rounded up in each file
    assert train["num_partitions"] >= 2 and train["read"]["text_field"] == "body"
    assert result.evaluation["masked_positions"] > 0
    vocab = (result.model_dir / "vocab.txt").read_text().split()
    assert len(vocab) == 600 and "elizabeth" not in vocab[:5]


def test_the_tokenizer_sample_is_spread_over_the_corpus_and_bounded(tmp_path):
    paths = []
    for k in range(6):  # six files, each its own words: which files the sample read shows
        texts = [f"word{k}a word{k}b. Another sentence {k} here." for _ in range(400)]
        paths.append(str(write_jsonl(tmp_path / f"f{k}.jsonl", texts)))
    size = sum((tmp_path / f"f{k}.jsonl").stat().st_size for k in range(6))
    sample = sample_texts(paths, size // 3, ReadSettings(), partition_bytes=size // 6)
    read = {k for k in range(6) if any(f"word{k}a" in t for t in sample)}
    # every third partition from the first on (0, 3), then the next ones (1, 4): the JSON around the text
    # makes a partition's text less than its bytes
    assert read == {0, 1, 3, 4}
    assert size // 3 <= sum(map(len, sample)) < size // 3 + 16_000
    few = sample_texts(paths, 100, ReadSettings(), partition_bytes=size // 6)
    assert sum(map(len, few)) < 200


def test_pretrain_text_reads_jsonl_with_another_field(tmp_path):
    from bertkit.cli import main

    path = write_jsonl(tmp_path / "c.jsonl", corpus_texts(120), field="body")
    code = main(["pretrain", "--text", str(path), "--text-field", "body", "--model", "tiny", "-o",
                 str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "8", "--vocab-size", "500",
                 "--max-seq-length", "64", "--precision", "fp32"])
    assert code == 0
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["text"]["settings"]["text_field"] == "body"
    with pytest.raises(SystemExit):
        main(["pretrain", "--text", str(path), "-o", str(tmp_path / "x"), "--tokenizer-sample-bytes", "lots"])


@pytest.mark.parametrize("text,size", [("256M", 256 << 20), ("1G", 1 << 30), ("512k", 512 << 10),
                                       ("1000", 1000), ("1.5MB", 3 << 19), ("2GiB", 2 << 30)])
def test_sizes_parse(text, size):
    assert parse_size(text) == size


def test_tokenizer_train_reads_the_text_of_json_lines(tmp_path):
    from bertkit.cli import main
    from bertkit.tokenization import BERTTokenizerFast

    path = write_jsonl(tmp_path / "c.jsonl", corpus_texts(150), field="zqx")
    assert main(["tokenizer", "train", str(path), "--text-field", "zqx", "--vocab-size", "700", "-o",
                 str(tmp_path / "tok")]) == 0
    vocab = BERTTokenizerFast.from_pretrained(tmp_path / "tok").vocab
    assert "emma" in vocab, sorted(vocab)[-50:]
    assert not {"{", "}", "zqx"} & set(vocab)  # the text, not the JSON around it
