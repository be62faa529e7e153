"""Distilling a static model from a transformer: one vector per token, computed by the teacher itself.

Every token of the teacher's vocabulary (and, optionally, whole words from a word list or a corpus, added to the
tokenizer's WordPiece vocabulary) goes through the teacher alone between its special tokens (``[CLS] token
[SEP]``) and is pooled as the teacher pools (its Pooling and Dense modules; no normalisation): that vector is the
token's row. The table is then

1. reduced by PCA to ``dim`` dimensions (:func:`pca`: the covariance's eigenvectors, fitted on the real tokens;
   ``dim`` equal to the teacher's width only rotates, which still helps: the axes become uncorrelated);
2. weighted per token by its frequency rank ``r`` (1 = most frequent), estimated from the vocabulary's order
   (WordPiece vocabularies list frequent pieces first; added words follow, by their count):
   ``sif``: ``a / (a + p(r))`` with Zipf's estimate ``p(r) = (1 / (r + 1)) / sum_k 1 / (k + 1)`` and
   ``a = sif_coefficient`` (1e-4), so frequent tokens count less (Arora et al.'s smooth inverse frequency);
   ``zipf``: ``log(1 + r)``; ``none``: 1. The weight is folded into the row.

The static model averages its tokens' rows and normalises, so a text's vector is a weighted mean of what the
teacher says about each of its tokens. Tokens the tokenizer never produces from text (BERT's ``[unusedN]``
slots) are left out of the PCA fit and the ranks, and keep a zero row.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.io import refuse_nonempty_folder, refuse_output_over_input
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.static import StaticEmbedding, is_static_directory, save_static
from bertkit.tasks.sources import inspect_source

logger = logging.getLogger(__name__)

WEIGHTINGS = ("sif", "zipf", "none")
#: vocabulary entries that never come out of real text: no row is learnt for them
NEVER_PRODUCED = re.compile(r"\[unused\d+\]")
#: tokens a text is cut to, as model2vec's encode cuts by default: written so every reader cuts at the same place
MAX_LENGTH = 512


@dataclass(frozen=True)
class DistillSettings:
    """How the table is made: ``dim`` (None: the teacher's width), ``pca`` (False: the teacher's rows as they
    are; ``dim`` must then be None or the teacher's), ``weighting`` one of :data:`WEIGHTINGS`,
    ``sif_coefficient`` SIF's ``a``, ``words`` whole words added to the vocabulary (most frequent first),
    ``batch_size`` tokens per forward pass of the teacher."""

    dim: int | None = 256
    pca: bool = True
    weighting: str = "sif"
    sif_coefficient: float = 1e-4
    words: tuple[str, ...] = field(default_factory=tuple)
    batch_size: int = 4096

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {self.weighting!r} is not one of {WEIGHTINGS}.")
        if not 0 < self.sif_coefficient < 1:
            raise ValueError(f"sif_coefficient must lie in (0, 1), got {self.sif_coefficient}.")
        if self.dim is not None and self.dim < 1:
            raise ValueError(f"dim must be a positive number of dimensions, got {self.dim}.")
        check_batch_size(self.batch_size)


@dataclass
class DistilledTable:
    """The distilled model's parts: ``tokenizer`` (the teacher's, plus the added words, no truncation or
    padding), ``vectors`` ``[V, dim]`` float32 (weights folded in), and what was done, for the config."""

    tokenizer: Tokenizer
    vectors: np.ndarray
    settings: DistillSettings
    added_words: int
    explained_variance: float | None


def distill_table(teacher, settings: DistillSettings, *, progress: bool = False) -> DistilledTable:
    """Distil ``teacher`` (a :class:`bertkit.SentenceTransformer`, loaded in float32) into a token table."""
    width = teacher.get_sentence_embedding_dimension()
    dim = _check_dim(settings, width)
    tokenizer, added = with_words(teacher.tokenizer.backend_tokenizer, settings.words)
    vocabulary = tokenizer.get_vocab()
    tokens = sorted(vocabulary, key=vocabulary.get)
    real = np.array([not NEVER_PRODUCED.fullmatch(t) for t in tokens])
    vectors = token_vectors(teacher, tokens, len(tokens) - len(added), settings.batch_size, progress)
    explained = None
    if settings.pca:
        vectors, explained = pca(vectors, dim, fit_rows=real)
    vectors = vectors * token_weights(real, settings)[:, None]
    vectors[~real] = 0
    return DistilledTable(tokenizer, vectors.astype(np.float32), settings, len(added), explained)


def _check_dim(settings: DistillSettings, width: int) -> int:
    if settings.dim is not None and settings.dim > width:
        raise ValueError(f"--dim {settings.dim} is larger than the teacher's {width} dimensions; PCA cannot add "
                         f"any: pick --dim <= {width}.")
    if not settings.pca and settings.dim not in (None, width):
        raise ValueError(f"--dim {settings.dim} needs PCA to reduce the teacher's {width} dimensions: drop --no-pca "
                         "or --dim.")
    return width if settings.dim is None else settings.dim


def token_vectors(teacher, tokens: Sequence[str], base: int, batch_size: int, progress: bool) -> np.ndarray:
    """``[V, H]`` float32: each of ``tokens`` through ``teacher`` alone between its special tokens, pooled as
    the teacher pools. The first ``base`` tokens are the teacher's own (fed by id); the rest are added words,
    which the teacher's tokenizer splits into its pieces as it would in text."""
    bos, eos = special_tokens_around(teacher.tokenizer)
    rows = [{"input_ids": [*bos, i, *eos]} for i in range(base)]
    rows += [{"input_ids": r["input_ids"]} for r in teacher.features(list(tokens[base:]))] if base < len(tokens) \
        else []
    pad_values = {"input_ids": teacher.tokenizer.pad_token_id or 0}

    @torch.inference_mode()
    def run(batch: list[dict]) -> list[torch.Tensor]:
        ids = pad(batch, pad_values, teacher.device)["input_ids"]
        lengths = torch.tensor([len(r["input_ids"]) for r in batch], device=ids.device)
        mask = (torch.arange(ids.shape[1], device=ids.device)[None] < lengths[:, None]).long()
        hidden = teacher.bert(ids, mask, torch.zeros_like(ids))[0]
        pooled = teacher.pooling(hidden, mask)
        for layer in teacher.dense:
            pooled = layer(pooled)
        return list(pooled.float().cpu())

    results = run_sorted(rows, [len(r["input_ids"]) for r in rows], batch_size, run, progress=progress,
                         description="distil")
    return torch.stack(results).numpy() if results else np.zeros((0, teacher.get_sentence_embedding_dimension()))


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one text's tokens (``[CLS]`` / ``[SEP]`` for BERT)."""
    backend = tokenizer.backend_tokenizer
    plain = backend.encode("a", add_special_tokens=False).ids
    full = backend.encode("a", add_special_tokens=True).ids
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return full[:start], full[start + len(plain):]
    return [], []


def pca(vectors: np.ndarray, dim: int, fit_rows: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """``vectors`` centred and projected on the ``dim`` leading eigenvectors of the covariance of ``fit_rows``
    (all rows by default), in float64; each axis's sign chosen so its largest loading is positive (the result is
    deterministic). Returns the projection and the share of variance the kept axes explain."""
    data = torch.from_numpy(np.asarray(vectors, dtype=np.float64))
    fit = data if fit_rows is None else data[torch.from_numpy(np.asarray(fit_rows))]
    mean = fit.mean(0)
    centred = fit - mean
    values, axes = torch.linalg.eigh(centred.T @ centred / max(len(fit) - 1, 1))
    values, axes = values.flip(0).clamp(min=0), axes.flip(1)[:, :dim]
    largest = axes.abs().argmax(0)
    axes = axes * torch.sign(axes[largest, torch.arange(axes.shape[1])])[None]
    explained = float(values[:dim].sum() / values.sum()) if values.sum() > 0 else 1.0
    return ((data - mean) @ axes).numpy(), explained


def token_weights(real: np.ndarray, settings: DistillSettings) -> np.ndarray:
    """One weight per row (see the module doc); rows that are not ``real`` get rank 0 and are zeroed later."""
    ranks = np.zeros(len(real))
    ranks[real] = np.arange(1, int(real.sum()) + 1)
    if settings.weighting == "none":
        return np.ones(len(real))
    if settings.weighting == "zipf":
        return np.log1p(ranks)
    zipf = np.where(real, 1.0 / (ranks + 1), 0.0)
    probability = zipf / zipf.sum()
    return settings.sif_coefficient / (settings.sif_coefficient + probability)


def with_words(backend: Tokenizer, words: Iterable[str]) -> tuple[Tokenizer, list[str]]:
    """A copy of ``backend`` without truncation or padding, its WordPiece vocabulary extended by ``words`` (each
    normalised and pre-tokenised as the tokenizer does; one that is several words, or already in the vocabulary,
    is skipped), so each added word is read whole. Returns the tokenizer and the words added, in order."""
    data = json.loads(backend.to_str())
    data["truncation"] = data["padding"] = None
    words = list(words)
    if words and data["model"].get("type") != "WordPiece":
        raise ValueError(f"adding words needs a WordPiece tokenizer (BERT's); this teacher's is "
                         f"{data['model'].get('type')}: distil without --vocabulary/--corpus.")
    vocab, added = data["model"].get("vocab", {}), []
    known = backend.get_vocab(with_added_tokens=True)
    for word in words:
        pieces = word_pieces(backend, word)
        if len(pieces) == 1 and pieces[0] not in known:
            vocab[pieces[0]] = known[pieces[0]] = backend.get_vocab_size(with_added_tokens=True) + len(added)
            added.append(pieces[0])
    if len(words) > len(added):
        logger.info("%d of %d words added to the vocabulary (the rest were in it already or were several words)",
                    len(added), len(words))
    return Tokenizer.from_str(json.dumps(data)), added


def word_pieces(backend: Tokenizer, text: str) -> list[str]:
    """``text`` normalised and pre-tokenised as ``backend`` does before its model splits words."""
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return text.split()
    return [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text)]


def corpus_words(backend: Tokenizer, documents: Iterable[list[str]], limit: int, min_count: int = 2) -> list[str]:
    """The ``limit`` most frequent words of ``documents`` (lists of sentences) that the vocabulary lacks, as the
    tokenizer normalises them, seen at least ``min_count`` times; most frequent first (ties: alphabetical)."""
    counts: Counter[str] = Counter()
    for document in documents:
        for sentence in document:
            counts.update(word_pieces(backend, sentence))
    vocab = backend.get_vocab()
    chosen = [(-n, w) for w, n in counts.items() if n >= min_count and w not in vocab and any(c.isalpha() for c in w)]
    return [w for _, w in sorted(chosen)[:limit]]


def distill_config(table: DistilledTable, teacher_path: str) -> dict:
    """What model2vec records in a distilled model's ``config.json`` about how it was made."""
    settings = table.settings
    return {"base_model": teacher_path, "apply_pca": table.vectors.shape[1] if settings.pca else None,
            "weighting": settings.weighting,
            "sif_coefficient": settings.sif_coefficient if settings.weighting == "sif" else None,
            "added_words": table.added_words,
            "explained_variance": None if table.explained_variance is None else round(table.explained_variance, 4),
            "hidden_dim": table.vectors.shape[1]}



#: what inspect_source calls the checkpoints a teacher may be: embedding models and plain encoders (mean pooling)
TEACHER_TASKS = ("embeddings", "feature-extraction", "fill-mask", "pretraining")


def load_teacher(model: str | os.PathLike):
    """``model`` as a float32 :class:`bertkit.SentenceTransformer`; ValueError naming MODEL when it is no
    embedding model (a classifier, a sparse or multi-vector encoder, a static model already)."""
    if is_static_directory(model):
        raise ValueError(f"MODEL {model} is a static model already; distil from the transformer it came from.")
    info = inspect_source(model)
    if info.task not in TEACHER_TASKS or info.cross_encoder:
        raise ValueError(f"MODEL {model} is a {info.task or info.architecture} model, not an embedding model; distil "
                         "from a sentence-transformers directory or a plain BERT checkpoint.")
    return SentenceTransformer(model, dtype="fp32")


def distill_static(model: str | os.PathLike, output: str | os.PathLike, settings: DistillSettings = DistillSettings(),
                   *, progress: bool = False) -> Path:
    """Distil ``model`` (any embedding model bertkit loads) into the static model directory ``output``
    (:func:`bertkit.sentence.static.save_static`: it loads in bertkit, model2vec and sentence-transformers, its
    vectors normalised); returns ``output``. ``output`` must not be ``model`` nor lie inside it."""
    refuse_output_over_input(("-o", output), [], models=[("MODEL", model)])
    refuse_nonempty_folder("-o", output, "the static model")
    table = distill_table(load_teacher(model), settings, progress=progress)
    module = StaticEmbedding(table.tokenizer, table.vectors, max_length=MAX_LENGTH)
    return save_static(module, output, normalize=True, config=distill_config(table, os.fspath(model)))
