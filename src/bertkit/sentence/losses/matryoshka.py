"""Matryoshka: a loss evaluated on the embeddings truncated to several dimensions, weighted and summed.

``MatryoshkaLoss(inner, dims=[768, 256, 64])(embed, batch)`` is ``sum_k weights[k] * inner`` on the
embeddings cut to their first ``dims[k]`` components and L2-normalised again (always, as
sentence-transformers' MatryoshkaLoss does: with cosine similarity this changes nothing, with dot product
it turns the truncated scores into cosines). The model is run once per batch, not once per dimension:

- any ``loss(embed, batch)``: the inner loss is called once per dimension with an ``embed`` that returns
  the truncation of the full embeddings, computed on the first call for each inputs mapping and reused;
- a cached (GradCache) loss, one with a ``cached(embed, batch, objective)`` method: the weighted sum over the
  truncations is its objective, so the columns are embedded once, in mini-batches, and the sum's cached
  gradients are replayed once (as sentence-transformers' MatryoshkaLoss does with its Cached losses).

The embedding dimension is known only when the model runs, so a dimension above it is refused then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.sentence.batch import Embed, PairBatch


def _check_dims(dims: Sequence[int], weights: Sequence[float] | None) -> tuple[list[int], list[float]]:
    """``(dims, weights)`` sorted by dimension, largest first (ValueError naming --matryoshka-dims if bad)."""
    dims = list(dims)
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in dims):
        raise ValueError(f"--matryoshka-dims must be positive integers such as 768,256,64, got {dims}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"--matryoshka-dims lists a dimension twice: {dims}")
    weights = [1.0] * len(dims) if weights is None else [float(w) for w in weights]
    if len(weights) != len(dims):
        raise ValueError(f"Matryoshka weights need one weight per dimension of --matryoshka-dims {dims}, "
                         f"got {len(weights)} weights")
    pairs = sorted(zip(dims, weights), key=lambda pair: -pair[0])
    return [d for d, _ in pairs], [w for _, w in pairs]


def truncate(embeddings: torch.Tensor, dim: int) -> torch.Tensor:
    """The first ``dim`` components of ``embeddings [n, d]``, L2-normalised (ValueError if ``dim > d``)."""
    if dim > embeddings.shape[-1]:
        raise ValueError(f"--matryoshka-dims {dim} is above the model's embedding dimension "
                         f"{embeddings.shape[-1]}; use dimensions up to {embeddings.shape[-1]}")
    return F.normalize(embeddings[..., :dim], p=2, dim=-1)


class MatryoshkaLoss(nn.Module):
    """``inner`` at each of ``dims``, weighted by ``weights`` (default 1 each) and summed (module docstring)."""

    def __init__(self, inner: nn.Module, dims: Sequence[int], weights: Sequence[float] | None = None):
        super().__init__()
        self.inner = inner
        self.dims, self.weights = _check_dims(dims, weights)

    def _weighted(self, embeddings: Sequence[torch.Tensor], batch: PairBatch) -> torch.Tensor:
        return sum(w * self.inner.from_embeddings([truncate(e, d) for e in embeddings], batch)
                   for d, w in zip(self.dims, self.weights))

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        if hasattr(self.inner, "cached"):
            return self.inner.cached(embed, batch, self._weighted)
        full: dict[int, tuple[Mapping[str, torch.Tensor], torch.Tensor]] = {}

        def once(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
            # keyed by the mapping's identity; the mapping is kept so that its id cannot be reused meanwhile
            if id(inputs) not in full:
                full[id(inputs)] = (inputs, embed(inputs))
            return full[id(inputs)][1]

        return sum(w * self.inner(lambda inputs, d=d: truncate(once(inputs), d), batch)
                   for d, w in zip(self.dims, self.weights))
