"""Mining hard negatives from an embedding store (bertkit.embed_job.mine): the rows equal the in-memory mining's
on the same embeddings, whatever the shards and chunks; a store meets only its own corpus."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from bertkit.embed_job.mine import mine_from_store
from bertkit.embed_job.store import open_store, shard_name, write_index, write_shard
from bertkit.sentence.mining import mine_hard_negatives
from test_embedding_mining import SETTINGS, bag_of_words, gaussian, texts, word_data  # noqa: F401 (a fixture)


def store_of(directory, corpus: list[str], encode, cuts=(0, 13, 14, 50), ids=None, kind="dense", formats=("parquet",)):
    """``corpus`` embedded by ``encode`` into a store of uneven shards (cut at ``cuts``), ids the row numbers."""
    ids = list(range(len(corpus))) if ids is None else ids
    bounds = [*cuts, len(corpus)]
    vectors = encode(corpus)
    records = [write_shard(directory, shard_name(n), ids[a:b], vectors[a:b], kind, formats)
               for n, (a, b) in enumerate(itertools.pairwise(bounds))]
    write_index(directory, {"model": {"path": "m", "fingerprint": "f", "kind": kind, "dtype": "float32",
                                      "dim": vectors.shape[1], "normalize": False, "prompt": None},
                            "input": {}, "shards": records, "complete": True})
    return open_store(directory)


def rows_of(corpus: list[str]):
    return lambda: enumerate(corpus)


@pytest.fixture(scope="module")
def data():
    """60 pairs (a query with two positives, a positive that is a corpus row, two positives copied into the corpus)
    and 80 other corpus texts: as test_embedding_mining's, the corpus without repeats."""
    pool = texts(200, seed=0)
    queries, positives, corpus = pool[:60], pool[60:120], pool[120:]
    return [*queries, queries[3]], [*positives, corpus[0]], [*corpus, positives[5], positives[7]]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_mined_from_a_store_equals_mined_from_the_texts(data, settings, tmp_path):
    queries, positives, corpus = data
    want = mine_hard_negatives(queries, positives, corpus, bag_of_words, similarity="dot", **settings)
    store = store_of(tmp_path, corpus, bag_of_words)
    for chunk_size in (7, 10_000):
        got = mine_from_store(queries, positives, store, rows_of(corpus), bag_of_words, similarity="dot",
                              chunk_size=chunk_size, **settings)
        assert got.rows == want.rows and got.summary == want.summary, chunk_size
    assert want.rows  # every setting finds some rows


def test_cosine_npy_shards_and_query_vectors_from_a_store(data, tmp_path):
    queries, positives, corpus = data
    want = mine_hard_negatives(queries, positives, corpus, gaussian, relative_margin=0.05)
    store = store_of(tmp_path / "c", corpus, gaussian, formats=("npy",))
    asked = store_of(tmp_path / "q", queries, gaussian, cuts=(0, 30))  # the pairs' queries, one row a pair
    query_vectors = np.concatenate([vectors for _, vectors in asked.iter_batches()])
    got = mine_from_store(queries, positives, store, rows_of(corpus), gaussian, query_vectors=query_vectors,
                          relative_margin=0.05, chunk_size=9)
    assert got.rows == want.rows and len(got.rows) > 10


def test_rescore_from_a_store(data, tmp_path):
    def rescore(pairs):  # a fake cross-encoder: shared words
        return [float(len(set(q.split()) & set(p.split()))) + 0.01 * len(p) for q, p in pairs]

    queries, positives, corpus = data
    settings = {"range_max": 15, "absolute_margin": 0.5, "similarity": "dot", "rescore": rescore, "batch_size": 5}
    want = mine_hard_negatives(queries, positives, corpus, bag_of_words, **settings)
    got = mine_from_store(queries, positives, store_of(tmp_path, corpus, bag_of_words), rows_of(corpus),
                          bag_of_words, **settings)
    assert got.rows == want.rows and len(got.rows) > 10


def test_a_repeated_positive_is_never_a_negative_and_the_model_is_needed_only_for_missing_positives(tmp_path):
    corpus = texts(40, seed=3)
    queries = texts(45, seed=4)[-5:]
    positives = corpus[:5]
    repeated = [*corpus, *corpus[:5]]  # every positive twice in the store
    store = store_of(tmp_path, repeated, gaussian)
    got = mine_from_store(queries, positives, store, rows_of(repeated), None, query_vectors=gaussian(queries),
                          num_negatives=4, range_max=10)
    assert len(got.rows) == 5
    for row in got.rows:
        assert row["positive"] not in [row[f"negative_{k}"] for k in range(1, 5)]
    with pytest.raises(ValueError, match=r"is in no row of .*give the model"):
        mine_from_store(queries, ["not in the corpus", *positives[1:]], store, rows_of(repeated), None,
                        query_vectors=gaussian(queries))


def test_a_store_meets_only_its_own_corpus(data, tmp_path):
    queries, positives, corpus = data
    store = store_of(tmp_path / "s", corpus, bag_of_words)
    with pytest.raises(ValueError, match=r"row 0 of the corpus has id 'a' but the store .* has id 0 there"):
        mine_from_store(queries, positives, store, lambda: (("a", t) for t in corpus), bag_of_words)
    with pytest.raises(ValueError, match=r"the corpus has 81 rows but the store .* 82"):
        mine_from_store(queries, positives, store, rows_of(corpus[:-1]), bag_of_words)
    with pytest.raises(ValueError, match="ends before it"):
        mine_from_store(queries, positives, store, rows_of([*corpus, "one more"]), bag_of_words)
    with pytest.raises(ValueError, match=r"the query embeddings have 16 dimensions but .* 24"):
        mine_from_store(queries, positives, store, rows_of(corpus), gaussian)
    sparse = [(np.array([1], np.int32), np.array([1.0], np.float32))] * 3
    records = [write_shard(tmp_path / "p", shard_name(0), [0, 1, 2], sparse, "sparse")]
    write_index(tmp_path / "p", {"model": {"kind": "sparse", "dim": 9}, "input": {}, "shards": records,
                                 "complete": True})
    with pytest.raises(ValueError, match=r"holds a sparse model's embeddings; .* dense or static model"):
        mine_from_store(queries, positives, open_store(tmp_path / "p"), rows_of(corpus), bag_of_words)


# ---------------------------------------------------------------------------- bertkit embed mine --corpus-embeddings
@pytest.fixture(scope="module")
def job(tmp_path_factory, word_data):  # noqa: F811 (the fixture imported above)
    """The tiny model, word pairs in pairs.jsonl, the corpus in corpus.jsonl (ids in "doc") embedded by the job
    into stores of the corpus and of the pairs' queries."""
    from bertkit.embed_job.plan import ReadOptions
    from bertkit.embed_job.run import JobConfig, embed_corpus
    from test_embedding_mining import tiny_model

    root = tmp_path_factory.mktemp("store-mining")
    model = tiny_model(root / "tiny")
    queries, positives, corpus = word_data
    pairs, texts_file = root / "pairs.jsonl", root / "corpus.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": q, "positive": p}) + "\n" for q, p in zip(queries, positives)))
    texts_file.write_text("".join(json.dumps({"doc": f"d{i}", "text": t}) + "\n" for i, t in enumerate(corpus)))
    for inputs, out, read in ((texts_file, "corpus", ReadOptions(id_column="doc")),
                              (pairs, "queries", ReadOptions(text_column="anchor"))):
        embed_corpus(JobConfig(str(model), (str(inputs),), str(root / out), read=read, shard_rows=17, dtype="fp32",
                               progress=False))
    return root, model, corpus


def test_cli_mines_from_a_store_as_from_re_encoding(job, capsys):
    from bertkit.cli import main

    root, model, corpus = job
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n")
    common = ["embed", "mine", str(model), "--data", str(root / "pairs.jsonl"), "--num-negatives", "2",
              "--range-max", "30", "--absolute-margin", "0.001", "--dtype", "fp32", "--chunk-size", "11"]
    assert main([*common, "--corpus", str(root / "corpus.txt"), "-o", str(root / "encoded.jsonl")]) == 0
    encoded = json.loads(capsys.readouterr().out)
    for extra in ([], ["--query-embeddings", str(root / "queries")]):
        out = root / f"stored{len(extra)}.jsonl"
        assert main([*common, "--corpus-embeddings", str(root / "corpus"), *extra, "-o", str(out)]) == 0
        assert json.loads(capsys.readouterr().out) == encoded
        assert out.read_text() == (root / "encoded.jsonl").read_text() and encoded["rows"] > 10


def test_cli_store_refusals(job, tmp_path, capsys):
    from bertkit.cli import main
    from test_embedding_mining import tiny_model

    root, model, _ = job
    base = ["embed", "mine", str(model), "--data", str(root / "pairs.jsonl"), "-o", str(tmp_path / "x.jsonl")]
    cases = [
        (["--corpus-embeddings", str(root / "corpus"), "--corpus", str(root / "pairs.jsonl")], "leave --corpus out"),
        (["--corpus-embeddings", str(root / "corpus"), "--faiss"], "leave --faiss out"),
        (["--query-embeddings", str(root / "queries")], "--query-embeddings goes with --corpus-embeddings"),
        (["--corpus-embeddings", str(root / "corpus"), "--query-embeddings", str(root / "corpus")],
         "is not the 'anchor' column of --data"),
        (["--corpus-embeddings", str(root)], "holds no index.json"),
    ]
    for flags, message in cases:
        assert main([*base, *flags]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (flags, err)
    other = tiny_model(tmp_path / "other", max_positions=48)
    assert main(["embed", "mine", str(other), *base[3:], "--corpus-embeddings", str(root / "corpus")]) == 1
    assert "was embedded by" in capsys.readouterr().err
    assert main([*base[:-1], str(root / "corpus" / "mined.jsonl"), "--corpus-embeddings", str(root / "corpus")]) == 1
    assert "--corpus-embeddings" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_corpus_changed_or_gone_since_its_store_is_named(job, tmp_path):
    from bertkit.embed_job.mine import store_corpus
    from bertkit.embed_job.run import JobConfig, embed_corpus

    _, model, corpus = job
    texts_file = tmp_path / "c.txt"
    texts_file.write_text("\n".join(corpus[:20]) + "\n")
    embed_corpus(JobConfig(str(model), (str(texts_file),), str(tmp_path / "s"), shard_rows=7, dtype="fp32",
                           progress=False))
    store = open_store(tmp_path / "s")
    assert list(store_corpus(store)()) == list(enumerate(corpus[:20]))
    texts_file.write_text("\n".join(corpus[:21]) + "\n")
    with pytest.raises(ValueError, match=r"c\.txt, the corpus of .* is changed since it was embedded"):
        store_corpus(store)
    texts_file.unlink()
    with pytest.raises(ValueError, match="is gone since"):
        store_corpus(store)


def test_cli_mines_a_static_models_store_as_from_re_encoding(tmp_path, capsys):
    """A Model2Vec directory: the job's static store, mined and deduplicated through the CLI."""
    from bertkit.cli import main
    from static_dirs import model2vec_dir

    model = model2vec_dir(tmp_path / "m2v", normalize=True)
    words = ["the", "capital", "of", "france", "is", "paris", "emma", "walked", "home", "in", "rain"]
    corpus = texts(120, seed=5, words=words)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus))
    (tmp_path / "c.txt").write_text("\n".join(corpus) + "\n")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"anchor": " ".join(t.split()[:2]), "positive": t}) + "\n"
                                              for t in corpus[:30]))
    assert main(["embed", str(model), "--input", str(tmp_path / "c.jsonl"), "-o", str(tmp_path / "store"),
                 "--shard-rows", "50"]) == 0
    base = ["embed", "mine", str(model), "--data", str(tmp_path / "p.jsonl"), "--range-max", "20"]
    assert main([*base, "--corpus", str(tmp_path / "c.txt"), "-o", str(tmp_path / "a.jsonl")]) == 0
    assert main([*base, "--corpus-embeddings", str(tmp_path / "store"), "-o", str(tmp_path / "b.jsonl")]) == 0
    assert open_store(tmp_path / "store").kind == "static"
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text() != ""
    assert main(["embed", "dedup", str(tmp_path / "store"), "-o", str(tmp_path / "k.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["rows"] == 120
