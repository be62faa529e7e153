"""BGE-M3's three outputs from one encoder pass: ``BGEM3(DIR).encode(texts)`` -> FlagEmbedding's ``dense_vecs``,
``lexical_weights`` and ``colbert_vecs``; ``BGEM3Lexical(DIR).encode(texts)`` -> the lexical weights alone.

A BGE-M3 directory is an XLM-R checkpoint with ``sparse_linear.pt`` and ``colbert_linear.pt`` beside it: the state
dicts of a ``Linear(hidden, 1)`` that FlagEmbedding trained to score each token and of a ``Linear(hidden, dim)``
projecting each token for late interaction. The dense vector is the normalised CLS state. The ColBERT vectors are
the projected token states after CLS (the final ``</s>`` kept), each normalised; :func:`colbert_score` is
FlagEmbedding's: the mean over query vectors of their best dot product with a passage vector. A text's lexical
weights are, as FlagEmbedding's ``lexical_weights``: ``relu(linear(last_hidden_state))`` per position, then per
token id the largest weight over the positions holding it; the ids of the tokenizer's cls, eos, sep, pad and unk
tokens and zero weights are left out. Keys are token ids as strings (FlagEmbedding's form, ready for JSON).
:func:`lexical_matching_score` is FlagEmbedding's score between two such dicts: the sum over shared ids of the
weights' product. :func:`fused_scores` weighs the three as FlagEmbedding's ``compute_score`` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.sentence.maxsim import maxsim_scores
from bertkit.tasks.sources import COLBERT_LINEAR, SPARSE_LINEAR  # the heads' files, one name with inspect_source

#: the special tokens whose ids carry no lexical weight (FlagEmbedding drops cls, eos, pad and unk; XLM-R's sep
#: is its eos)
DROPPED_TOKENS = ("cls_token", "eos_token", "sep_token", "pad_token", "unk_token")


def load_linear(path: str | os.PathLike, name: str, in_features: int, out_features: int | None = None) -> nn.Linear:
    """The ``Linear(in_features, out_features)`` in ``path/name`` (any output size where ``out_features`` is
    None), read as tensors only (no pickled code runs: ``torch.load(weights_only=True)``)."""
    file = Path(path) / name
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing: a BGE-M3 directory holds a head's layer there.")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated file or one holding more than tensors
        raise ValueError(f"{file} is not a tensor state dict ({type(error).__name__}): write it with "
                         "torch.save(linear.state_dict(), ...).") from None
    tensors = isinstance(state, Mapping) and set(state) in ({"weight"}, {"weight", "bias"}) and \
        all(isinstance(v, torch.Tensor) for v in state.values())
    out = out_features or (state["weight"].shape[0] if tensors and state["weight"].dim() == 2 else 0)
    wanted = {"weight": (out, in_features), "bias": (out,)}
    if not tensors or out < 1 or any(tuple(v.shape) != wanted[k] for k, v in state.items()):
        shapes = {k: tuple(getattr(v, "shape", ())) for k, v in state.items()} if isinstance(state, Mapping) \
            else type(state).__name__
        n = out_features or "n"
        raise ValueError(f"{file} holds {shapes}, not a Linear({in_features}, {n}): weight ({n}, {in_features}) "
                         f"and an optional bias ({n},).")
    linear = nn.Linear(in_features, out, bias="bias" in state)
    linear.load_state_dict({k: v.float() for k, v in state.items()})
    return linear


class M3Output(NamedTuple):
    """One batch's outputs of one encoder pass: ``dense`` ``[B, H]`` (normalised CLS), ``sparse`` ``[B, L]``
    (token weights, zero on padding), ``colbert`` ``[B, L - 1, D]`` (normalised, zero on padding); a head the
    model was loaded without is None."""

    dense: torch.Tensor
    sparse: torch.Tensor | None
    colbert: torch.Tensor | None


class BGEM3Encoder(nn.Module):
    """The XLM-R encoder of a BGE-M3 directory with the heads named in ``heads`` (``"sparse"``, ``"colbert"``):
    :meth:`outputs` runs the encoder once for all of them; :meth:`run_texts` tokenizes and batches."""

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", max_length: int = 512, heads: Sequence[str] = ("sparse", "colbert")):
        """``dtype``: the encoder's number format as :class:`bertkit.SentenceTransformer` takes it (``"fp32"``:
        exact; the heads always run in float32). ``max_length``: tokens kept per text (FlagEmbedding's default
        512), at most the model's limit."""
        super().__init__()
        from bertkit.inference.precision import prepare
        from bertkit.modeling.backbone import BERT
        from bertkit.modeling.text import resolve_device
        from bertkit.tasks.sources import load_model_and_tokenizer

        path = Path(model_name_or_path)
        files = {"sparse": SPARSE_LINEAR, "colbert": COLBERT_LINEAR}
        for head in heads:  # before loading the encoder: the cheap check first
            if head not in files:
                raise ValueError(f"heads: {head!r} is not a BGE-M3 head; pick from {sorted(files)}.")
            if not (path / files[head]).is_file():
                raise FileNotFoundError(f"{path / files[head]} is missing: pass a BGE-M3 directory (an XLM-R "
                                        f"checkpoint with FlagEmbedding's {files[head]}).")
        self.bert, self.tokenizer = load_model_and_tokenizer(path, BERT, warn=False)
        hidden = self.bert.config.hidden_size
        self.sparse_linear = load_linear(path, SPARSE_LINEAR, hidden, 1) if "sparse" in heads else None
        self.colbert_linear = load_linear(path, COLBERT_LINEAR, hidden) if "colbert" in heads else None
        self.max_length = min(check_batch_size(max_length, "max_length"), self.bert.config.max_tokens)
        ids = (getattr(self.tokenizer, name + "_id", None) for name in DROPPED_TOKENS)
        self.dropped_ids = frozenset(i for i in ids if i is not None)
        self.to(resolve_device(device) if device is not None else "cpu").eval()
        self.dtype_choice = prepare(self.bert, dtype, "embeddings")

    @property
    def device(self) -> torch.device:
        return next(self.bert.parameters()).device

    def outputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> M3Output:
        """All heads' outputs from one pass of the encoder (float32)."""
        tokens = self.bert(input_ids, attention_mask)[0].float()
        mask = attention_mask.to(tokens.dtype)
        dense = nn.functional.normalize(tokens[:, 0], dim=-1)
        sparse = colbert = None
        if self.sparse_linear is not None:
            sparse = torch.relu(self.sparse_linear(tokens)).squeeze(-1) * mask
        if self.colbert_linear is not None:  # CLS left out: its state is the dense vector
            colbert = nn.functional.normalize(self.colbert_linear(tokens[:, 1:]) * mask[:, 1:, None], dim=-1)
        return M3Output(dense, sparse, colbert)

    def run_texts(self, texts: Sequence[str], batch_size: int, run: Callable[[M3Output, list[dict]], list[Any]],
                  max_length: int | None = None) -> list[Any]:
        """``run(outputs, rows)`` over length-sorted batches of the tokenized ``texts`` (``rows``: each text's
        ``input_ids``), its per-row results in ``texts``' order."""
        limit = self.max_length if max_length is None else min(check_batch_size(max_length, "max_length"),
                                                                self.bert.config.max_tokens)
        encoding = self.tokenizer(list(texts), truncation=True, max_length=limit) if texts else {}
        rows = [{"input_ids": encoding["input_ids"][i], "attention_mask": encoding["attention_mask"][i]}
                for i in range(len(texts))]
        pad_values = {"input_ids": self.tokenizer.pad_token_id, "attention_mask": 0}

        @torch.inference_mode()
        def forward(batch_rows: list[dict]) -> list[Any]:
            batch = pad(batch_rows, pad_values, self.device)
            return run(self.outputs(batch["input_ids"], batch["attention_mask"]), batch_rows)

        return run_sorted(rows, [len(row["input_ids"]) for row in rows], check_batch_size(batch_size), forward)

    def lexical_weights(self, weights: torch.Tensor, input_ids: Sequence[int]) -> dict[str, float]:
        """One text's ``{token id: max weight}`` from its per-position ``weights``, special tokens and zeros
        left out."""
        best: dict[int, float] = {}
        for token, weight in zip(input_ids, weights.tolist()):
            if token not in self.dropped_ids and weight > best.get(token, 0.0):
                best[token] = weight
        return {str(token): weight for token, weight in best.items()}


class BGEM3Lexical(BGEM3Encoder):
    """The XLM-R encoder of a BGE-M3 directory with its token-weight layer (``sparse_linear.pt``).

    ``forward(input_ids, attention_mask)`` gives the token weights ``[B, L]`` (zero on padding); :meth:`encode`
    gives the lexical-weight dicts, in input order, from length-sorted batches.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", max_length: int = 512):
        super().__init__(model_name_or_path, device, dtype=dtype, max_length=max_length, heads=("sparse",))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.outputs(input_ids, attention_mask).sparse

    def encode(self, texts: str | Sequence[str], batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]:
        """The lexical weights of each text (one dict for one string), as FlagEmbedding's ``lexical_weights``."""
        single = isinstance(texts, str)

        def run(out: M3Output, rows: list[dict]) -> list[dict[str, float]]:
            return [self.lexical_weights(w[:len(row["input_ids"])].cpu(), row["input_ids"])
                    for w, row in zip(out.sparse, rows)]

        results = self.run_texts([texts] if single else list(texts), batch_size, run)
        return results[0] if single else results


class BGEM3(BGEM3Encoder):
    """A BGE-M3 directory's dense, lexical and multi-vector outputs (both ``sparse_linear.pt`` and
    ``colbert_linear.pt`` required), from one encoder pass per batch.

    :meth:`encode` answers as FlagEmbedding's ``BGEM3FlagModel.encode``; :meth:`compute_score` as its
    ``compute_score``.
    """

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> M3Output:
        return self.outputs(input_ids, attention_mask)

    def encode(self, texts: str | Sequence[str], batch_size: int = 32, max_length: int | None = None,
               ) -> dict[str, Any]:
        """``{"dense_vecs": [N, H] float32, "lexical_weights": [dict], "colbert_vecs": [[n_i, D] float32]}`` in
        input order (one string: one vector, one dict, one matrix). A text's ColBERT vectors are one per token
        after CLS (its length less one)."""
        single = isinstance(texts, str)

        def run(out: M3Output, rows: list[dict]) -> list[tuple]:
            dense, sparse, colbert = (t.cpu() for t in out)
            return [(dense[i].numpy(), self.lexical_weights(sparse[i, :len(row["input_ids"])], row["input_ids"]),
                     colbert[i, :len(row["input_ids"]) - 1].numpy()) for i, row in enumerate(rows)]

        results = self.run_texts([texts] if single else list(texts), batch_size, run, max_length)
        dense = np.stack([r[0] for r in results]) if results else \
            np.zeros((0, self.bert.config.hidden_size), dtype=np.float32)
        lexical, colbert = [r[1] for r in results], [r[2] for r in results]
        if single:
            return {"dense_vecs": dense[0], "lexical_weights": lexical[0], "colbert_vecs": colbert[0]}
        return {"dense_vecs": dense, "lexical_weights": lexical, "colbert_vecs": colbert}

    def compute_score(self, pairs: Sequence[tuple[str, str]] | tuple[str, str], batch_size: int = 32,
                      max_query_length: int = 512, max_passage_length: int = 8192,
                      weights: Sequence[float] = (1.0, 1.0, 1.0)) -> dict[str, list[float]] | dict[str, float]:
        """The five scores of each ``(query, passage)`` pair (one pair: one float per mode), as FlagEmbedding's
        ``compute_score`` (:func:`fused_scores`). Each pair's ColBERT score is over its passage's own tokens (as
        FlagEmbedding's ``colbert_score`` on ``encode``'s vectors; its ``compute_score`` also lets a query token
        score 0 against the padding of a batch's shorter passages)."""
        single = isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(t, str) for t in pairs)
        pairs = [pairs] if single else list(pairs)
        if any(not isinstance(p, (tuple, list)) or len(p) != 2 or not all(isinstance(t, str) for t in p)
               for p in pairs):
            raise TypeError("pairs: pass a (query, passage) pair of strings or a list of them.")
        queries = self.encode([q for q, _ in pairs], batch_size, max_query_length)
        passages = self.encode([p for _, p in pairs], batch_size, max_passage_length)
        dense = (queries["dense_vecs"] * passages["dense_vecs"]).sum(-1).astype(np.float64)
        sparse = np.array([lexical_matching_score(q, p) for q, p in
                           zip(queries["lexical_weights"], passages["lexical_weights"])], dtype=np.float64)
        colbert = np.array([colbert_score(q, p) for q, p in zip(queries["colbert_vecs"], passages["colbert_vecs"])],
                           dtype=np.float64)
        fused = fused_scores(dense, sparse, colbert, weights)
        return {mode: scores[0].item() if single else scores.tolist() for mode, scores in fused.items()}


def colbert_score(query: np.ndarray | torch.Tensor, passage: np.ndarray | torch.Tensor) -> float:
    """FlagEmbedding's ColBERT score of a query's ``[n, D]`` vectors against a passage's ``[m, D]``: the sum over
    query vectors of their largest dot product with a passage vector, divided by ``n``: MeanMaxSim
    (:func:`~bertkit.sentence.maxsim.maxsim_scores` with ``length_normalize``, the one MaxSim)."""
    q, p = torch.as_tensor(query, dtype=torch.float32), torch.as_tensor(passage, dtype=torch.float32)
    if q.dim() != 2 or p.dim() != 2 or q.shape[1] != p.shape[1] or not len(q) or not len(p):
        raise ValueError(f"colbert_score takes two non-empty [n, D] matrices of one D, got {tuple(q.shape)} and "
                         f"{tuple(p.shape)}: pass encode()'s colbert_vecs of one text each.")
    return float(maxsim_scores([q], [p], length_normalize=True)[0, 0])


def fused_scores(dense: np.ndarray, sparse: np.ndarray, colbert: np.ndarray,
                 weights: Sequence[float] = (1.0, 1.0, 1.0)) -> dict[str, np.ndarray]:
    """FlagEmbedding's ``compute_score`` modes from each pair's three scores and the ``(dense, sparse, colbert)``
    weights (its default ``[1, 1, 1]``; its README uses ``[0.4, 0.2, 0.4]``): the three alone, ``sparse+dense``
    their weighted mean, ``colbert+sparse+dense`` the weighted mean of all three."""
    w = [float(x) for x in weights]
    if len(w) != 3 or min(w) < 0 or w[0] + w[1] <= 0:
        raise ValueError(f"weights: three non-negative numbers (dense, sparse, colbert) with dense + sparse > 0, "
                         f"got {list(weights)}.")
    dense, sparse, colbert = (np.asarray(x, dtype=np.float64) for x in (dense, sparse, colbert))
    return {"colbert": colbert, "sparse": sparse, "dense": dense,
            "sparse+dense": (w[0] * dense + w[1] * sparse) / (w[0] + w[1]),
            "colbert+sparse+dense": (w[0] * dense + w[1] * sparse + w[2] * colbert) / sum(w)}


def lexical_matching_score(a: Mapping[str, float] | Sequence[Mapping[str, float]],
                           b: Mapping[str, float] | Sequence[Mapping[str, float]]) -> float | np.ndarray:
    """Sum over the token ids two lexical-weight dicts share of the weights' product; for two lists of dicts the
    ``[len(a), len(b)]`` matrix of those scores."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        small, large = (a, b) if len(a) <= len(b) else (b, a)
        return float(sum(weight * large[token] for token, weight in small.items() if token in large))
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        raise TypeError("lexical_matching_score takes two dicts or two lists of dicts, not one of each: wrap the "
                        "single dict in a list.")
    return np.array([[lexical_matching_score(x, y) for y in b] for x in a], dtype=np.float64).reshape(len(a), len(b))
