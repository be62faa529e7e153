"""BGE-M3's lexical weights: ``BGEM3Lexical(DIR).encode(texts)`` -> one ``{token id: weight}`` dict per text.

A BGE-M3 directory is an XLM-R checkpoint with ``sparse_linear.pt`` beside it: the state dict of a
``Linear(hidden, 1)`` that FlagEmbedding trained to score each token. A text's lexical weights are, as
FlagEmbedding's ``lexical_weights``: ``relu(linear(last_hidden_state))`` per position, then per token id the
largest weight over the positions holding it; the ids of the tokenizer's cls, eos, sep, pad and unk tokens and
zero weights are left out. Keys are token ids as strings (FlagEmbedding's form, ready for JSON).
:func:`lexical_matching_score` is FlagEmbedding's score between two such dicts: the sum over shared ids of the
weights' product.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.tasks.sources import SPARSE_LINEAR  # the token-weight layer's file, one name with inspect_source

#: the special tokens whose ids carry no lexical weight (FlagEmbedding drops cls, eos, pad and unk; XLM-R's sep
#: is its eos)
DROPPED_TOKENS = ("cls_token", "eos_token", "sep_token", "pad_token", "unk_token")


def has_lexical_weights(path: str | os.PathLike) -> bool:
    """Whether the directory holds BGE-M3's token-weight layer (``sparse_linear.pt``)."""
    return (Path(path) / SPARSE_LINEAR).is_file()


def load_sparse_linear(path: str | os.PathLike, hidden_size: int) -> nn.Linear:
    """The ``Linear(hidden_size, 1)`` in ``path/sparse_linear.pt``, read as tensors only (no pickled code runs:
    ``torch.load(weights_only=True)``)."""
    file = Path(path) / SPARSE_LINEAR
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing: a BGE-M3 directory holds its token-weight layer there.")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated file or one holding more than tensors
        raise ValueError(f"{file} is not a tensor state dict ({type(error).__name__}): write it with "
                         "torch.save(linear.state_dict(), ...).") from None
    weight, bias = (state.get("weight"), state.get("bias")) if isinstance(state, Mapping) else (None, None)
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (1, hidden_size) or \
            set(state) - {"weight", "bias"} or (bias is not None and tuple(bias.shape) != (1,)):
        shapes = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"{file} holds {shapes}, not a Linear({hidden_size}, 1): weight (1, {hidden_size}) and an "
                         "optional bias (1,).")
    linear = nn.Linear(hidden_size, 1, bias=bias is not None)
    linear.load_state_dict({k: v.float() for k, v in state.items()})
    return linear


class BGEM3Lexical(nn.Module):
    """The XLM-R encoder of a BGE-M3 directory with its token-weight layer.

    ``forward(input_ids, attention_mask)`` gives the token weights ``[B, L]`` (zero on padding); :meth:`encode`
    gives the lexical-weight dicts, in input order, from length-sorted batches.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", max_length: int = 512):
        """``dtype``: the encoder's number format as :class:`bertkit.SentenceTransformer` takes it (``"fp32"``:
        exact; the token-weight layer always runs in float32). ``max_length``: tokens kept per text
        (FlagEmbedding's default 512), at most the model's limit."""
        super().__init__()
        from bertkit.inference.precision import prepare
        from bertkit.modeling.backbone import BERT
        from bertkit.modeling.text import resolve_device
        from bertkit.tasks.sources import load_model_and_tokenizer

        path = Path(model_name_or_path)
        if not has_lexical_weights(path):  # before loading the encoder: the cheap check first
            raise FileNotFoundError(f"{path / SPARSE_LINEAR} is missing: pass a BGE-M3 directory (an XLM-R "
                                    "checkpoint with FlagEmbedding's sparse_linear.pt).")
        self.bert, self.tokenizer = load_model_and_tokenizer(path, BERT, warn=False)
        self.sparse_linear = load_sparse_linear(path, self.bert.config.hidden_size)
        self.max_length = min(check_batch_size(max_length, "max_length"), self.bert.config.max_tokens)
        ids = (getattr(self.tokenizer, name + "_id", None) for name in DROPPED_TOKENS)
        self.dropped_ids = frozenset(i for i in ids if i is not None)
        self.to(resolve_device(device) if device is not None else "cpu").eval()
        self.dtype_choice = prepare(self.bert, dtype, "embeddings")

    @property
    def device(self) -> torch.device:
        return self.sparse_linear.weight.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        tokens = self.bert(input_ids, attention_mask)[0]
        weights = torch.relu(self.sparse_linear(tokens.float())).squeeze(-1)
        return weights * attention_mask.to(weights.dtype)

    def encode(self, texts: str | Sequence[str], batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]:
        """The lexical weights of each text (one dict for one string), as FlagEmbedding's ``lexical_weights``."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        encoding = self.tokenizer(texts, truncation=True, max_length=self.max_length) if texts else {}
        rows = [{"input_ids": encoding["input_ids"][i], "attention_mask": encoding["attention_mask"][i]}
                for i in range(len(texts))]
        pad_values = {"input_ids": self.tokenizer.pad_token_id, "attention_mask": 0}

        @torch.inference_mode()
        def run(batch_rows: list[dict]) -> list[dict[str, float]]:
            batch = pad(batch_rows, pad_values, self.device)
            weights = self(batch["input_ids"], batch["attention_mask"]).cpu()
            return [self.lexical_weights(w[:len(row["input_ids"])], row["input_ids"])
                    for w, row in zip(weights, batch_rows)]

        results = run_sorted(rows, [len(row["input_ids"]) for row in rows], check_batch_size(batch_size), run)
        return results[0] if single else results

    def lexical_weights(self, weights: torch.Tensor, input_ids: Sequence[int]) -> dict[str, float]:
        """One text's ``{token id: max weight}`` from its per-position ``weights``, special tokens and zeros
        left out."""
        best: dict[int, float] = {}
        for token, weight in zip(input_ids, weights.tolist()):
            if token not in self.dropped_ids and weight > best.get(token, 0.0):
                best[token] = weight
        return {str(token): weight for token, weight in best.items()}


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
