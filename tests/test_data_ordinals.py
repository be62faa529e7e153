"""The same documents give the same shards in every format: text, JSON lines, Parquet and Arrow
(``datasets.save_to_disk``) holding the same documents in the same order write identical shards, whatever the
partition size (many partitions, byte ranges cutting the files anywhere, row groups) and the number of
workers, because blocks of documents and their seeds follow document ordinals, not partitions."""

from __future__ import annotations

import json
import random

import pytest

from bertkit.data.create import create_pretraining_data
from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast


@pytest.fixture(scope="module")
def tokenizer():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def documents(n: int) -> list[str]:
    """``n`` documents of 1 to 5 shuffled Emma paragraphs, a paragraph per line."""
    paragraphs = [" ".join(p.split()) for p in austen_novels()["emma"].split("\n\n") if len(p) > 80]
    rng = random.Random(7)
    return ["\n".join(rng.sample(paragraphs, rng.randint(1, 5))) for _ in range(n)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("formats")
    texts = documents(240)
    text = root / "c.txt"
    text.write_text("\n\n\n".join(texts) + "\n")
    jsonl = root / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    parquet = root / "c.parquet"
    pq.write_table(pa.table({"text": texts}), parquet, row_group_size=13)
    arrow = root / "arrow"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(arrow), max_shard_size="60KB")
    assert len(list(arrow.glob("*.arrow"))) > 2
    return {"text": text, "jsonl": jsonl, "parquet": parquet, "arrow": arrow}


def shard_bytes(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.npy"))}


def test_every_format_partition_size_and_worker_count_writes_the_same_shards(tmp_path, tokenizer, inputs):
    common = dict(seed=5, max_seq_length=64, static_masking=True, pairing_tokens=6000, progress=False)
    runs = [(name, size, 1) for name in inputs for size in (9_000, 10 ** 9)] + [("jsonl", 9_000, 2),
                                                                                ("parquet", 30_000, 2)]
    made = {}
    for name, size, workers in runs:
        made[name, size, workers] = create_pretraining_data(
            inputs[name], tokenizer, tmp_path / f"{name}-{size}-{workers}", partition_bytes=size, workers=workers,
            **common)
    reference = shard_bytes(made["text", 10 ** 9, 1])
    index = json.loads((made["text", 10 ** 9, 1] / "index.json").read_text())
    assert index["num_partitions"] == 1 and index["num_blocks"] >= 8 and index["num_documents"] == 240
    for key, out in made.items():
        theirs = json.loads((out / "index.json").read_text())
        if key[1] == 9_000:
            # many partitions: byte ranges, row groups, one per Arrow file
            assert theirs["num_partitions"] >= (len(list(inputs["arrow"].glob("*.arrow"))) if key[0] == "arrow"
                                                else 10), key
        assert theirs["num_instances"] == index["num_instances"], key
        assert shard_bytes(out) == reference, key
        assert not (out / "tokenized").exists()


def test_held_out_documents_follow_ordinals_whatever_the_partitions(tmp_path, tokenizer, inputs):
    common = dict(seed=5, max_seq_length=64, pairing_tokens=6000, heldout_every=10, progress=False)
    for heldout in (False, True):
        small = create_pretraining_data(inputs["jsonl"], tokenizer, tmp_path / f"small-{heldout}", heldout=heldout,
                                        partition_bytes=9_000, **common)
        whole = create_pretraining_data(inputs["parquet"], tokenizer, tmp_path / f"whole-{heldout}",
                                        heldout=heldout, **common)
        assert shard_bytes(small) == shard_bytes(whole)
        documents_kept = json.loads((small / "index.json").read_text())["num_documents"]
        assert documents_kept == (24 if heldout else 216)


def test_cli_holdout_writes_a_second_directory_that_pretrain_evaluates_on(tmp_path, inputs, capsys):
    from bertkit.cli import main

    out = tmp_path / "data"
    assert main(["data", "create", str(inputs["jsonl"]), "--tokenizer", str(BERT_BASE_UNCASED_VOCAB), "-o", str(out),
                 "--holdout", "0.1", "--workers", "1", "--max-seq-length", "64", "--quiet"]) == 0
    said = capsys.readouterr().out
    assert f"pretrain --data {out} --eval-data {out / 'heldout'}" in said
    train, heldout = (json.loads((d / "index.json").read_text()) for d in (out, out / "heldout"))
    assert (train["num_documents"], heldout["num_documents"]) == (216, 24)
    assert heldout["heldout"] and heldout["heldout_every"] == 10 and not train["heldout"]
    assert main(["pretrain", "--data", str(out), "--eval-data", str(out / "heldout"), "--model", "tiny",
                 "-o", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4", "--precision", "fp32",
                 "--log-every", "1"]) == 0
    assert "held-out [MASK] accuracy" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["data", "create", str(inputs["jsonl"]), "--tokenizer", str(BERT_BASE_UNCASED_VOCAB), "-o",
              str(tmp_path / "x"), "--holdout", "0.9"])
    assert usage.value.code == 2 and "--holdout must be a share of the documents in (0, 0.5]" in capsys.readouterr().err
