"""Data creation by partitions: every input format gives the instances its documents give as text, byte
ranges read exactly the whole file's documents, shards do not depend on the workers (1, 2, a Dask
LocalCluster), a killed run resumes to the same bytes, memory does not grow with the corpus, and bad
input is one line naming the file and line or row group."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertkit.data.corpus import read_documents
from bertkit.data.create import create_pretraining_data
from bertkit.data.partitions import Documents, ReadSettings, expand_inputs, plan_partitions
from bertkit.data.reading import partition_documents
from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "bertkit.cli"]


@pytest.fixture(scope="module")
def tokenizer():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def corpus_texts(n: int, seed: int = 0, paragraphs=(2, 6)) -> list[str]:
    """``n`` documents of shuffled Austen paragraphs, a paragraph per line."""
    blocks = [" ".join(b.split()) for b in austen_novels()["emma"].split("\n\n")]
    blocks = [b for b in blocks if len(b) > 80]
    rng = random.Random(seed)
    return ["\n".join(rng.sample(blocks, rng.randint(*paragraphs))) for _ in range(n)]


def write_blocks(path: Path, texts: list[str], newline: str = "\n") -> Path:
    path.write_bytes(("\ufeff" + "\n\n\n".join(texts) + "\n").replace("\n", newline).encode())
    return path


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({"id": i, field: t}) + "\n" for i, t in enumerate(texts)))
    return path


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.npy"))}


def documents_of(sources, partition_bytes: int, **read) -> list[list[str]]:
    settings = ReadSettings(**read)
    return [d for p in plan_partitions(expand_inputs(sources), partition_bytes, settings)
            for d in partition_documents(p, settings)]


# ---------------------------------------------------------------------------- reading

@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_byte_ranges_read_exactly_the_whole_files_documents(tmp_path, newline):
    texts = corpus_texts(60)
    blocks = write_blocks(tmp_path / "blocks.txt", texts, newline)
    google = tmp_path / "google.txt"
    google.write_text("\n\n".join("\n".join(doc) for doc in read_documents(blocks)) + "\n\n\n")
    jsonl = write_jsonl(tmp_path / "c.jsonl", texts)
    for path in (blocks, google, jsonl):
        whole = list(read_documents(path))
        plans = {size: list(plan_partitions([str(path)], size, ReadSettings())) for size in (301, 4096, 10 ** 9)}
        assert len(plans[301]) > 100 and len(plans[10 ** 9]) == 1
        for size in plans:
            assert documents_of([str(path)], size) == whole, (path.name, size)
    assert len(read_documents.__doc__) and len(list(read_documents(blocks))) == 60


def test_every_format_gives_the_instances_of_the_same_documents_as_text(tmp_path, tokenizer):
    import gzip

    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    texts = corpus_texts(40)
    jsonl = write_jsonl(tmp_path / "c.jsonl", texts, field="body")
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(jsonl.read_bytes()))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl.read_bytes()))
    inputs = {
        "text": write_blocks(tmp_path / "c.txt", texts),
        "google": tmp_path / "google.txt",
        "jsonl": jsonl,
        "jsonl.gz": tmp_path / "c.jsonl.gz",
        "jsonl.zst": tmp_path / "c.jsonl.zst",
        "parquet": tmp_path / "c.parquet",
        "arrow": tmp_path / "arrow",
        "documents": Documents(iter(texts)),
        "sentences": Documents([list(d) for d in read_documents(tmp_path / "c.txt")]),
    }
    inputs["google"].write_text("\n\n".join("\n".join(d) for d in read_documents(inputs["text"])) + "\n")
    pq.write_table(pa.table({"id": list(range(40)), "body": texts}), inputs["parquet"], row_group_size=7)
    datasets.Dataset.from_dict({"body": texts}).save_to_disk(str(inputs["arrow"]), max_shard_size="30KB")
    assert len(list(inputs["arrow"].glob("*.arrow"))) > 1
    made = {name: create_pretraining_data(source, tokenizer, tmp_path / f"out-{name}", text_field="body", seed=3,
                                          max_seq_length=64, progress=False)
            for name, source in inputs.items()}
    expected = shard_bytes(made["text"])
    assert len(expected) == 4
    for name, out in made.items():
        assert shard_bytes(out) == expected, name
        assert json.loads((out / "index.json").read_text())["num_documents"] == 40


# ---------------------------------------------------------------------------- workers

@pytest.fixture(scope="module")
def jsonl_corpus(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "c.jsonl", corpus_texts(600, paragraphs=(4, 12)))


def test_shards_do_not_depend_on_the_number_of_workers_nor_on_dask(tmp_path, tokenizer, jsonl_corpus):
    from distributed import Client, LocalCluster

    common = dict(partition_bytes=150_000, seed=9, max_seq_length=96, progress=False)
    one = create_pretraining_data(jsonl_corpus, tokenizer, tmp_path / "one", workers=1, **common)
    two = create_pretraining_data(jsonl_corpus, tokenizer, tmp_path / "two", workers=2, **common)
    index = json.loads((one / "index.json").read_text())
    assert index["num_partitions"] > 8 and len(shard_bytes(one)) == 4 * index["num_blocks"]
    assert shard_bytes(two) == shard_bytes(one)
    pool = {json.loads(m.read_text())["pid"] for m in two.glob("part-*.json")}
    assert len(pool) == 2 and os.getpid() not in pool  # two worker processes did the work
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        # the scheduler's address, as --dask passes it (the library opens and closes its own client)
        on_dask = create_pretraining_data(jsonl_corpus, tokenizer, tmp_path / "dask", dask=cluster.scheduler_address,
                                          **common)
        ran_on = client.run(os.getpid)
    assert len(ran_on) == 2 and os.getpid() not in ran_on.values()
    where = {json.loads(m.read_text())["pid"] for m in on_dask.glob("part-*.json")}
    assert where == set(ran_on.values())  # both Dask workers built partitions, this process none
    assert shard_bytes(on_dask) == shard_bytes(one)
    for out in (two, on_dask):
        theirs = json.loads((out / "index.json").read_text())
        assert theirs["shards"] == index["shards"] and theirs["partitions"] == index["partitions"]
        assert theirs["blocks"] == index["blocks"]


def test_a_killed_run_started_again_ends_with_the_same_bytes(tmp_path, jsonl_corpus):
    """SIGKILLed after three partitions (while a second run into the same directory is refused), then run
    again: the finished partitions are kept, and the directory equals an uninterrupted run's."""
    args = [*CLI, "data", "create", str(jsonl_corpus), "--tokenizer", str(BERT_BASE_UNCASED_VOCAB),
            "--partition-size", "0.05", "--workers", "1", "--quiet", "--static-masking", "--seed", "4", "-o"]
    whole = tmp_path / "whole"
    assert subprocess.run([*args, str(whole)], capture_output=True, timeout=600).returncode == 0
    killed = tmp_path / "killed"
    child = subprocess.Popen([*args, str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(list(killed.glob("part-*.json"))) < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    second = subprocess.run([*args, str(killed)], capture_output=True, text=True, timeout=600)  # concurrently
    assert second.returncode == 1 and f"{killed} is in use by another data creation (pid {child.pid}" in second.stderr
    child.send_signal(signal.SIGKILL)  # the lock goes with the process
    child.wait()
    finished = sorted(killed.glob("part-*.json"))
    # on a busy machine every partition may be read before the kill: the pairing stage is then what is cut short
    assert 3 <= len(finished) <= len(list(whole.glob("part-*.json"))) and not (killed / "index.json").exists()
    kept = {p.name: p.stat().st_mtime_ns for p in finished}
    rerun = subprocess.run([*args, str(killed)], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert {p: (killed / p).stat().st_mtime_ns for p in kept} == kept  # finished partitions were not redone
    assert shard_bytes(killed) == shard_bytes(whole)
    assert not list(killed.glob(".*.tmp"))
    strip = [json.loads((d / "index.json").read_text()) for d in (whole, killed)]
    for index in strip:
        index.pop("inputs")
    assert strip[0] == strip[1]
    changed = subprocess.run([*args, str(killed), "--seed", "5"], capture_output=True, text=True, timeout=600)
    assert changed.returncode == 1 and "seed 4 then, 5 now" in changed.stderr and "--overwrite" in changed.stderr


def test_memory_does_not_grow_with_the_corpus(tmp_path):
    """Peak RSS of one creating process (one worker) for a corpus 6x the partition size and one 36x."""
    # VmHWM, the peak of this process image (ru_maxrss would count the forking parent's pages too)
    script = ("import re, sys\nfrom bertkit.data.create import create_pretraining_data\n"
              "create_pretraining_data(sys.argv[1], sys.argv[2], sys.argv[3], partition_bytes=1 << 20, "
              "progress=False)\nprint(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])")
    peaks = {}
    for documents in (1_500, 9_000):
        corpus = write_jsonl(tmp_path / f"c{documents}.jsonl", corpus_texts(documents, seed=documents,
                                                                             paragraphs=(4, 8)))
        result = subprocess.run([sys.executable, "-c", script, str(corpus), str(BERT_BASE_UNCASED_VOCAB),
                                 str(tmp_path / f"out{documents}")], capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr
        peaks[corpus.stat().st_size] = int(result.stdout.split()[-1]) / 1024  # MiB
    (small, small_peak), (large, large_peak) = sorted(peaks.items())
    assert large > 5 * small and large > 20 << 20
    # the whole-corpus pipeline held ~4 bytes per byte of text: 100+ MiB more for the larger corpus
    assert large_peak - small_peak < 25, peaks


# ---------------------------------------------------------------------------- bad input

def test_bad_inputs_are_one_line_naming_the_file_and_place(tmp_path, tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def fails(source, match, **kwargs):
        with pytest.raises(ValueError, match=match):
            create_pretraining_data(source, tokenizer, tmp_path / "out", progress=False, overwrite=True, **kwargs)

    texts = corpus_texts(200)
    broken = write_jsonl(tmp_path / "broken.jsonl", texts)
    lines = broken.read_text().splitlines()
    lines[150] = lines[150][:40]  # a truncated line deep inside (in a later partition than the first)
    broken.write_text("\n".join(lines) + "\n")
    fails(broken, r"broken\.jsonl, line 151: not JSON", partition_bytes=20_000)
    fails(broken, r"broken\.jsonl, line 151: not JSON", partition_bytes=20_000, workers=2)  # from a pool worker
    fails(write_jsonl(tmp_path / "other.jsonl", texts[:3], field="content"),
          r"other\.jsonl, line 1: no text in field 'text' \(found: \['content', 'id'\]\).*--text-field")
    pq.write_table(pa.table({"content": texts}), tmp_path / "c.parquet", row_group_size=50)
    fails(tmp_path / "c.parquet", r"c\.parquet: no column 'text' \(columns: \['content'\]\).*--text-field")
    pq.write_table(pa.table({"text": [*texts[:120], None, *texts[120:]]}), tmp_path / "nulls.parquet",
                   row_group_size=50)
    fails(tmp_path / "nulls.parquet", r"nulls\.parquet, row group 2, row 20: 'text' holds NoneType")
    whole = (tmp_path / "nulls.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[:len(whole) // 2])
    fails(tmp_path / "cut.parquet", r"cut\.parquet is not a readable Parquet file \(.*\): truncated")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    fails(tmp_path / "empty.jsonl", r"empty\.jsonl is empty \(0 bytes\)")
    fails(str(tmp_path / "nothing-*.jsonl"), r"the glob pattern .*nothing-\*\.jsonl' matches no file")
    (tmp_path / "void").mkdir()
    fails(tmp_path / "void", r"void holds no corpus files")
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    fails(tmp_path / "dd", r"DatasetDict \(splits \['train', 'test'\]\); pass one split's directory")
    fails(tmp_path / "missing.txt", r"no such file or directory: .*missing\.txt")
    with pytest.raises(ValueError, match=r"the input .*other\.jsonl lies inside the output directory"):
        create_pretraining_data(str(tmp_path / "other.*"), tokenizer, tmp_path, progress=False)
    import gzip

    packed = gzip.compress(broken.read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(packed[:len(packed) // 2])  # a partial download
    fails(tmp_path / "cut.jsonl.gz", r"cut\.jsonl\.gz is truncated: its compressed data ends before the end")
    (tmp_path / "fake.txt.gz").write_text("plain text named .gz\n")
    fails(tmp_path / "fake.txt.gz", r"fake\.txt\.gz is not readable as its suffix says \(BadGzipFile")


def test_cli_create_and_info(tmp_path, jsonl_corpus):
    out = tmp_path / "data"
    made = subprocess.run([*CLI, "data", "create", str(jsonl_corpus.parent / "*.jsonl"), "--tokenizer",
                           str(BERT_BASE_UNCASED_VOCAB), "-o", str(out), "--workers", "2", "--quiet",
                           "--partition-size", "0.5"], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    index = json.loads((out / "index.json").read_text())
    assert f"{index['num_instances']:,} instances" in made.stdout
    info = subprocess.run([*CLI, "data", "info", str(out)], capture_output=True, text=True, timeout=600)
    assert info.returncode == 0, info.stderr
    assert f"{index['num_documents']:,} documents" in info.stdout and "max_seq_length: 128" in info.stdout
    assert str(jsonl_corpus) in info.stdout
    missing = subprocess.run([*CLI, "data", "info", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert missing.returncode != 0 and "holds no index.json" in missing.stderr
