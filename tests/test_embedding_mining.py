"""Hard-negative mining (``bertkit.sentence.mining``, ``bertkit embed mine``).

The chunked search is checked against brute force (the full similarity matrix sorted, and the selection of
sentence-transformers' ``mine_hard_negatives`` written out plainly below), and the whole function against
sentence-transformers 6.2's own ``mine_hard_negatives`` on a tiny random BERT (built from a config, no downloads)
with the same embeddings.
"""

from __future__ import annotations

import json
import pathlib
import random
import zlib

import numpy as np
import pytest
import torch

import bertkit
from bertkit.inference.finite import NonFiniteOutput
from bertkit.sentence.mining import mine_hard_negatives, top_k
from conftest import randomize_

VOCAB = [f"w{i}" for i in range(40)]


def texts(n: int, seed: int, words=VOCAB, low: int = 3, high: int = 8) -> list[str]:
    rng = random.Random(seed)
    out = dict.fromkeys(" ".join(rng.choices(words, k=rng.randint(low, high))) for _ in range(3 * n))
    return list(out)[:n]


def bag_of_words(batch: list[str]) -> np.ndarray:
    """A deterministic encoder: hashed word counts in 24 buckets (small integers: dot products are exact in any
    summation order, so chunking cannot change a score, and ties are real)."""
    out = np.zeros((len(batch), 24), dtype=np.float32)
    for i, text in enumerate(batch):
        for word in text.split():
            out[i, zlib.crc32(word.encode()) % 24] += 1
    return out


def brute_force(queries, positives, corpus, encode, *, range_min=0, range_max=100, num_negatives=3,
                absolute_margin=None, relative_margin=None, max_score=None, min_score=None, similarity="dot",
                rescore=None):
    """The reference: every query against the whole pool, sorted by (score desc, pool index asc)."""
    unique = list(dict.fromkeys(queries))
    pool = list(dict.fromkeys([*corpus, *positives]))
    own = {q: list(dict.fromkeys(p for qq, p in zip(queries, positives) if qq == q)) for q in unique}
    q_vec, p_vec = torch.as_tensor(encode(unique)), torch.as_tensor(encode(pool))
    if similarity == "cosine":
        q_vec, p_vec = torch.nn.functional.normalize(q_vec, dim=-1), torch.nn.functional.normalize(p_vec, dim=-1)
    full = (q_vec @ p_vec.T).tolist()
    depth = min(range_max + max(len(p) for p in own.values()), len(pool))
    rows = []
    for qi, query in enumerate(unique):
        ranked = sorted(range(len(pool)), key=lambda j: (-full[qi][j], j))[:depth]
        score = {j: full[qi][j] for j in ranked}
        positive_scores = [full[qi][pool.index(p)] for p in own[query]]
        if rescore is not None:
            score = dict(zip(ranked, rescore([(query, pool[j]) for j in ranked])))
            positive_scores = list(rescore([(query, p) for p in own[query]]))
        low = min(positive_scores)
        kept = []
        for j in ranked:
            s = score[j]
            if pool[j] in own[query] or (absolute_margin is not None and s + absolute_margin > low) \
                    or (relative_margin is not None and s > low - abs(low) * relative_margin) \
                    or (max_score is not None and s > max_score) or (min_score is not None and s < min_score):
                continue
            kept.append(j)
        kept.sort(key=lambda j: -score[j])  # stable: ties stay in retrieval order
        negatives = kept[:range_max][range_min:range_min + num_negatives]
        if len(negatives) == num_negatives:
            rows += [{"anchor": query, "positive": p, **{f"negative_{k}": pool[j] for k, j in enumerate(negatives, 1)}}
                     for p in own[query]]
    return rows


@pytest.fixture(scope="module")
def data():
    """~200 texts: 60 pairs (one query with two positives, one positive repeated in the corpus) + 80 others."""
    pool = texts(200, seed=0)
    queries, positives, corpus = pool[:60], pool[60:120], pool[120:]
    queries = [*queries, queries[3]]  # a second positive for query 3
    positives = [*positives, corpus[0]]
    corpus = [*corpus, positives[5], positives[7]]  # copies of positives: the same candidate, never a negative
    return queries, positives, corpus


SETTINGS = [{}, {"range_min": 2, "range_max": 12}, {"absolute_margin": 1.0}, {"relative_margin": 0.3},
            {"max_score": 3.0}, {"min_score": 2.0}, {"num_negatives": 5, "range_max": 9, "absolute_margin": 0.0},
            {"range_max": 4, "num_negatives": 4, "max_score": 4.0}]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_chunked_equals_brute_force(data, settings):
    want = brute_force(*data, bag_of_words, **settings)
    for chunk_size in (7, 10_000):
        mined = mine_hard_negatives(*data, bag_of_words, similarity="dot", chunk_size=chunk_size, **settings)
        assert mined.rows == want, chunk_size
    assert mined.summary["rows"] == len(want) and mined.summary["corpus"] == 140  # 80 + 60 distinct texts


def test_cosine_on_random_embeddings_equals_brute_force(data):
    want = brute_force(*data, gaussian, similarity="cosine", relative_margin=0.05)
    for chunk_size in (7, 10_000):
        assert mine_hard_negatives(*data, gaussian, relative_margin=0.05, chunk_size=chunk_size).rows == want


def test_top_k_equals_sorting_the_full_matrix_ties_by_index():
    torch.manual_seed(0)
    queries, corpus = torch.randint(-2, 3, (9, 4)).float(), torch.randint(-2, 3, (50, 4)).float()  # many ties
    full = queries @ corpus.T
    for chunk_size in (1, 7, 50, 64):
        scores, indices = top_k(queries, corpus, 12, "dot", chunk_size)
        for q in range(9):
            want = sorted(range(50), key=lambda j: (-full[q, j].item(), j))[:12]
            assert indices[q].tolist() == want
            torch.testing.assert_close(scores[q], full[q, want])


def test_positives_and_their_copies_are_never_negatives(data):
    queries, positives, corpus = data
    rows = mine_hard_negatives(queries, positives, corpus, bag_of_words, similarity="dot", range_max=30,
                               num_negatives=10, chunk_size=7).rows
    own = {}
    for q, p in zip(queries, positives):
        own.setdefault(q, set()).add(p)
    assert rows
    for row in rows:
        negatives = [row[f"negative_{k}"] for k in range(1, 11)]
        assert not own[row["anchor"]] & set(negatives) and len(set(negatives)) == 10
    # query 3 has two positives: two rows, the same negatives, neither positive among them
    three = [row for row in rows if row["anchor"] == queries[3]]
    assert {row["positive"] for row in three} == {positives[3], corpus[0]}


def test_the_filters_on_one_dimension():
    """Scores are the candidates' own values (a query [1] against 1-d embeddings): each filter's boundary."""
    values = {"q": 1.0, "pos": 0.8, "a": 0.9, "b": 0.8, "c": 0.7, "d": 0.76, "e": 0.5, "f": -0.2}

    def encode(batch):
        return np.array([[values[t]] for t in batch], dtype=np.float32)

    def negatives(**settings):
        rows = mine_hard_negatives(["q"], ["pos"], list("abcdef"), encode, similarity="dot", num_negatives=1,
                                   range_max=6, **settings).rows
        return rows[0]["negative_1"] if rows else None

    assert negatives() == "a"  # the closest non-positive
    assert negatives(absolute_margin=0.0) == "b"  # b scores exactly the positive's 0.8: kept
    assert negatives(absolute_margin=0.05) == "c"  # kept: score <= 0.75; d (0.76) is out
    assert negatives(relative_margin=0.1) == "c"  # 0.8 - 0.08 = 0.72: d (0.76) out, c (0.7) in
    assert negatives(max_score=0.75) == "c"
    assert negatives(min_score=0.95) is None  # nothing left: the pair is dropped
    assert negatives(range_min=2) == "d"  # survivors a, b, d, c, ...: skip two


def test_short_rows_are_dropped_and_counted(data):
    queries, positives, corpus = data
    mined = mine_hard_negatives(queries, positives, corpus, bag_of_words, similarity="dot", max_score=2.0,
                                num_negatives=3, range_max=5)
    summary = mined.summary
    assert summary["queries"] == 60 and summary["pairs"] == 61
    assert summary["rows"] == len(mined.rows) < 61 and summary["queries_with_too_few"] > 0
    assert summary["skipped"]["max_score"] > 0
    assert all(len(row) == 5 for row in mined.rows)


def test_rescore_reorders_and_filters_like_brute_force(data):
    def rescore(pairs):  # a fake cross-encoder: shared words
        return [float(len(set(q.split()) & set(p.split()))) + 0.01 * len(p) for q, p in pairs]

    settings = {"range_max": 15, "absolute_margin": 0.5}
    want = brute_force(*data, bag_of_words, rescore=rescore, **settings)
    got = mine_hard_negatives(*data, bag_of_words, similarity="dot", rescore=rescore, batch_size=5, **settings)
    assert got.rows == want


def test_random_sampling_is_seeded_and_within_the_window(data):
    kwargs = {"similarity": "dot", "range_max": 20, "num_negatives": 3, "sampling": "random"}
    one = mine_hard_negatives(*data, bag_of_words, seed=1, **kwargs).rows
    assert one == mine_hard_negatives(*data, bag_of_words, seed=1, **kwargs).rows
    assert one != mine_hard_negatives(*data, bag_of_words, seed=2, **kwargs).rows
    top = {row["positive"]: row for row in mine_hard_negatives(*data, bag_of_words, similarity="dot",
                                                               range_max=20, num_negatives=20).rows}
    for row in one:
        window = [top[row["positive"]][f"negative_{k}"] for k in range(1, 21)] if row["positive"] in top else None
        if window:
            picked = [row[f"negative_{k}"] for k in (1, 2, 3)]
            assert set(picked) <= set(window) and picked == sorted(picked, key=window.index)


def gaussian(batch: list[str]) -> np.ndarray:
    """A deterministic encoder without ties: a normal vector seeded by the text."""
    return np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=16) for t in batch]).astype(np.float32)


class FlatInnerProduct:
    """A stand-in for ``faiss.IndexFlatIP`` (its ``add`` / ``search`` contract, by numpy), to run the FAISS path
    where FAISS is not installed."""

    def __init__(self, dimensions: int):
        self.vectors = np.zeros((0, dimensions), dtype=np.float32)

    def add(self, vectors: np.ndarray) -> None:
        assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
        self.vectors = np.concatenate([self.vectors, vectors])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = queries @ self.vectors.T
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1), order.astype(np.int64)


def test_faiss_path_equals_the_exact_search(data, monkeypatch):
    import sys
    import types

    try:
        import faiss  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install faiss-cpu"):
            mine_hard_negatives(["a b"], ["b c"], ["c d", "d e"], bag_of_words, use_faiss=True, range_max=2,
                                num_negatives=1)
        monkeypatch.setitem(sys.modules, "faiss", types.SimpleNamespace(IndexFlatIP=FlatInnerProduct))
    for similarity in ("cosine", "dot"):
        want = mine_hard_negatives(*data, gaussian, similarity=similarity, range_max=10, range_min=1).rows
        got = mine_hard_negatives(*data, gaussian, similarity=similarity, range_max=10, range_min=1,
                                  use_faiss=True, chunk_size=7).rows
        assert got == want and len(got) > 10


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_negatives": 0}, "num_negatives must be at least 1"),
    ({"range_min": 5, "range_max": 5}, "0 <= range_min < range_max"),
    ({"range_max": 2, "num_negatives": 3}, "do not fit in the window"),
    ({"similarity": "jaccard"}, "similarity must be one of"),
    ({"similarity": "euclidean", "use_faiss": True}, "cosine or dot"),
    ({"chunk_size": 0}, "chunk_size must be at least 1"),
    ({"sampling": "best"}, "sampling must be one of"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mine_hard_negatives(["a"], ["b"], ["c"], bag_of_words, **kwargs)


def test_bad_pairs_and_encoders_are_named():
    with pytest.raises(ValueError, match=r"queries \(2\) and positives \(1\)"):
        mine_hard_negatives(["a", "b"], ["c"], [], bag_of_words)
    with pytest.raises(ValueError, match=r"positives\[1\] is ''"):
        mine_hard_negatives(["a", "b"], ["c", ""], [], bag_of_words)
    with pytest.raises(ValueError, match=r"corpus\[1\] is int 7"):
        mine_hard_negatives(["a"], ["b"], ["c", 7], bag_of_words)
    with pytest.raises(ValueError, match="one row per text"):
        mine_hard_negatives(["a"], ["b"], ["c"], lambda batch: np.zeros((1, 3)), range_max=2, num_negatives=1)
    with pytest.raises(NonFiniteOutput, match=r"the corpus, text 0 \('c'\) is non-finite"):
        mine_hard_negatives(["a"], ["b"], ["c"], lambda batch: np.full((len(batch), 3), np.nan), range_max=2,
                            num_negatives=1)


# ------------------------------------------------------------------- sentence-transformers and the CLI
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "paris", "is", "capital", "france", "emma",
         "wrote", "who", "austen", "jane", "novel", "in", "lived", "city", "hello", "world", "good", "bad", "movie",
         "river", "house", "letter", "walk", "rain", "garden", "ball", "sister", "mother", "father"]


def tiny_model(directory: pathlib.Path, words: list[str] = WORDS, max_positions: int = 64) -> pathlib.Path:
    """A random tiny BERT with the vocabulary ``words``: a plain directory both bertkit and sentence-transformers
    load (mean pooling)."""
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    bertkit.BERTTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    config = bertkit.BERTConfig(vocab_size=len(words), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                                intermediate_size=37, max_position_embeddings=max_positions)
    randomize_(bertkit.BERT(config), seed=0, std=0.5).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("mining") / "tiny")


@pytest.fixture(scope="module")
def word_data():
    """Pairs whose positive is its query's words shuffled plus two (so that it is close), 70 other texts, a query
    with two positives and a positive repeated in the corpus."""
    pool = texts(110, seed=7, words=WORDS[5:], low=2, high=7)
    rng = random.Random(1)
    queries, corpus = pool[:40], pool[40:]
    positives = [" ".join(rng.sample(q.split(), len(q.split())) + rng.choices(WORDS[5:], k=2)) for q in queries]
    return [*queries, queries[0]], [*positives, corpus[0]], [*corpus, positives[2]]


@pytest.mark.parametrize("settings", [
    {"range_max": 10}, {"range_min": 3, "range_max": 12, "num_negatives": 4}, {"range_max": 40, "absolute_margin": 0.0},
    {"range_max": 40, "relative_margin": 0.02}, {"range_max": 40, "max_score": 0.95},
], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_equals_sentence_transformers_mine_hard_negatives(tiny_dir, word_data, settings):
    """The same rows as sentence-transformers 6.2's ``mine_hard_negatives(output_format="n-tuple")`` with the same
    model (its own encode gives both sides the same embeddings)."""
    st = pytest.importorskip("sentence_transformers")
    datasets = pytest.importorskip("datasets")
    model = st.SentenceTransformer(str(tiny_dir), device="cpu")
    queries, positives, corpus = word_data
    reference = st.util.mine_hard_negatives(
        datasets.Dataset.from_dict({"anchor": queries, "positive": positives}), model, corpus=corpus,
        output_format="n-tuple", batch_size=16, verbose=False, **settings)
    want = [dict(row) for row in reference]
    got = mine_hard_negatives(queries, positives, corpus, lambda batch: model.encode(batch, batch_size=16),
                              chunk_size=7, **settings).rows
    assert len(got) > 10 and got == want


def test_rescore_equals_sentence_transformers_cross_encoder(tiny_dir, word_data):
    """A cross-encoder stand-in passed to both (sentence-transformers rescores when a filter is set)."""
    st = pytest.importorskip("sentence_transformers")
    datasets = pytest.importorskip("datasets")
    model = st.SentenceTransformer(str(tiny_dir), device="cpu")

    def scores(pairs):
        return [len(set(q.split()) & set(p.split())) + zlib.crc32(p.encode()) / 2**33 for q, p in pairs]  # no ties

    class CrossEncoder:
        def predict(self, pairs, batch_size=32, convert_to_tensor=False, pool=None):
            return torch.tensor(scores(pairs))

    queries, positives, corpus = word_data
    settings = {"range_max": 15, "max_score": 2.5}
    want = [dict(row) for row in st.util.mine_hard_negatives(
        datasets.Dataset.from_dict({"anchor": queries, "positive": positives}), model, corpus=corpus,
        cross_encoder=CrossEncoder(), output_format="n-tuple", verbose=False, **settings)]
    got = mine_hard_negatives(queries, positives, corpus, model.encode, rescore=scores, **settings).rows
    assert len(got) > 10 and got == want


def test_cli_end_to_end(tiny_dir, word_data, tmp_path, capsys):
    from bertkit.cli import main
    from bertkit.sentence import SentenceTransformer

    queries, positives, corpus = word_data
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("query,positive\n" + "".join(f"{q},{p}\n" for q, p in zip(queries, positives)))
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n\n")
    out = tmp_path / "mined.jsonl"
    argv = ["embed", "mine", str(tiny_dir), "--data", str(pairs), "--corpus", str(tmp_path / "corpus.txt"),
            "-o", str(out), "--num-negatives", "2", "--range-max", "30", "--absolute-margin", "0.001",
            "--batch-size", "8"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    model = SentenceTransformer(tiny_dir)
    want = mine_hard_negatives(queries, positives, corpus, lambda batch: model.encode(batch), num_negatives=2,
                               range_max=30, absolute_margin=0.001)
    assert rows == want.rows and summary == want.summary and len(rows) > 10
    assert list(rows[0]) == ["anchor", "positive", "negative_1", "negative_2"]

    assert main([*argv[:-8], "-o", str(pairs)]) == 1  # -o over the input
    assert "-o" in capsys.readouterr().err and pairs.read_text().startswith("query,positive")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"anchor": "paris", "positive": "france"}\n{"anchor": "emma", "positive": ""}\n')
    assert main(["embed", "mine", str(tiny_dir), "--data", str(bad), "-o", str(tmp_path / "x.jsonl")]) == 1
    assert "bad.jsonl, line 2: column 'positive'" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_embed_still_embeds_a_model_called_mine(tiny_dir, tmp_path, monkeypatch):
    from bertkit.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").symlink_to(tiny_dir, target_is_directory=True)
    (tmp_path / "t.txt").write_text("hello world\nthe city\n")
    assert main(["embed", "mine", "--input", "t.txt", "-o", "v.npy"]) == 0
    assert np.load(tmp_path / "v.npy").shape == (2, 36)


def test_cli_rescore_with_a_reranker_and_faiss_missing(tiny_dir, word_data, tmp_path, capsys):
    from bertkit.cli import main
    from bertkit.cli.embed_mine import cross_encoder
    from bertkit.sentence import SentenceTransformer

    reranker = tmp_path / "reranker"
    reranker.mkdir()
    (reranker / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    bertkit.BERTTokenizerFast(vocab_file=str(reranker / "vocab.txt")).save_pretrained(reranker)
    config = bertkit.BERTConfig(vocab_size=len(WORDS), hidden_size=36, num_hidden_layers=1, num_attention_heads=3,
                                intermediate_size=37, max_position_embeddings=64, num_labels=1)
    randomize_(bertkit.BERTForSequenceClassification(config), seed=1, std=0.5).save_pretrained(reranker)
    queries, positives, _ = word_data  # no --corpus: the positives are the pool
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": q, "positive": p}) + "\n" for q, p in zip(queries, positives)))
    out = tmp_path / "mined.jsonl"
    argv = ["embed", "mine", str(tiny_dir), "--data", str(pairs), "-o", str(out), "--range-max", "8",
            "--num-negatives", "2", "--rescore", str(reranker)]
    assert main(argv) == 0
    capsys.readouterr()
    model = SentenceTransformer(tiny_dir)
    want = mine_hard_negatives(queries, positives, [], lambda batch: model.encode(batch), range_max=8,
                               num_negatives=2, rescore=cross_encoder(str(reranker), 32, None), batch_size=32)
    plain = mine_hard_negatives(queries, positives, [], lambda batch: model.encode(batch), range_max=8,
                                num_negatives=2)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == want.rows and rows != plain.rows  # the reranker's order, not the embeddings'

    try:
        import faiss  # noqa: F401
    except ImportError:
        assert main([*argv[:-2], "--faiss"]) == 1
        assert "pip install faiss-cpu" in capsys.readouterr().err
