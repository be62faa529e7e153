"""The compression of a PLAID index (ColBERTv2's residual compression), model-agnostic: token vectors ``[t, d]`` as
the nearest of ``K`` centroids plus their residual quantised to ``nbits`` (2 or 4) bits per dimension.

:func:`kmeans` finds the centroids from a sample (torch, seeded). :func:`residual_buckets` reads the quantiser off
held-out residuals the way PLAID does: one set of ``2**nbits - 1`` cutoffs for every dimension, the residual values'
quantiles at ``i / 2**nbits``, and the value each bucket decodes to, the quantile at the bucket's middle
(``(i + 0.5) / 2**nbits``). :class:`Codec` compresses (nearest centroid, bucket of each residual value, the buckets
packed ``8 // nbits`` to a byte) and decompresses (centroid + bucket values, renormalised when the vectors were unit
length).
"""

from __future__ import annotations

import torch

NBITS = (2, 4)


def nearest(vectors: torch.Tensor, centroids: torch.Tensor, scores: int = 1 << 24) -> torch.Tensor:
    """The nearest centroid (Euclidean) of each vector, ``[t]`` int64: argmax of ``x.c - |c|^2 / 2``, a chunk of
    vectors at a time (at most about ``scores`` vector-centroid scores held: 64 MiB)."""
    half_norms = 0.5 * (centroids * centroids).sum(1)
    chunk = max(1, scores // len(centroids))
    return torch.cat([(part @ centroids.T - half_norms).argmax(1) for part in vectors.split(chunk)]) \
        if len(vectors) else torch.empty(0, dtype=torch.int64)


def kmeans(sample: torch.Tensor, count: int, *, iterations: int = 8, seed: int = 0,
           normalize: bool = False) -> torch.Tensor:
    """``count`` centroids ``[count, d]`` of the float32 ``sample [n, d]`` (n >= count): Lloyd's iterations from
    ``count`` distinct sample rows drawn with ``seed``; a centroid left without vectors keeps its place. With
    ``normalize`` the centroids are kept unit length (the vectors are, and are compared by dot product)."""
    generator = torch.Generator().manual_seed(seed)
    centroids = sample[torch.randperm(len(sample), generator=generator)[:count]].clone()
    for _ in range(iterations):
        assigned = nearest(sample, centroids)
        sums = torch.zeros_like(centroids).index_add_(0, assigned, sample)
        sizes = torch.bincount(assigned, minlength=count)
        filled = sizes > 0
        centroids[filled] = sums[filled] / sizes[filled, None].to(sums.dtype)
        if normalize:
            centroids = torch.nn.functional.normalize(centroids, dim=1)
    return centroids


def residual_buckets(residuals: torch.Tensor, nbits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cutoffs [2**nbits - 1], weights [2**nbits])`` from held-out ``residuals [n, d]`` (all dimensions pooled):
    the quantiles at ``i / 2**nbits`` (i >= 1) and at ``(i + 0.5) / 2**nbits``."""
    if nbits not in NBITS:
        raise ValueError(f"nbits must be one of {NBITS}, got {nbits}.")
    levels = 1 << nbits
    values = residuals.flatten().float()
    if len(values) > 1 << 24:  # torch.quantile's limit; an even thinning keeps the quantiles
        values = values[torch.linspace(0, len(values) - 1, 1 << 24).long()]
    steps = torch.arange(levels, dtype=torch.float32) / levels
    return torch.quantile(values, steps[1:]), torch.quantile(values, steps + 0.5 / levels)


class Codec:
    """Compresses token vectors to (centroid code, packed residual buckets) and back; ``d * nbits`` must be a
    multiple of 8 (whole bytes per vector)."""

    def __init__(self, centroids: torch.Tensor, cutoffs: torch.Tensor, weights: torch.Tensor, nbits: int,
                 normalize: bool):
        if nbits not in NBITS or centroids.shape[1] * nbits % 8:
            raise ValueError(f"nbits must be one of {NBITS} with dim * nbits a multiple of 8, got nbits {nbits} and "
                             f"dim {centroids.shape[1]}.")
        self.centroids, self.cutoffs, self.weights = centroids.float(), cutoffs.float(), weights.float()
        self.nbits, self.normalize = nbits, normalize
        per_byte = 8 // nbits
        # bucket j of a byte's per_byte buckets sits at bits nbits * (per_byte - 1 - j): the first in the high bits
        self._shifts = torch.arange(per_byte - 1, -1, -1, dtype=torch.uint8) * nbits
        # the values of each possible byte's buckets [256, per_byte]: decompression is one lookup per byte
        every_byte = torch.arange(256, dtype=torch.uint8).unsqueeze(1)
        self._table = self.weights[((every_byte >> self._shifts) & ((1 << nbits) - 1)).long()]

    @property
    def residual_bytes(self) -> int:
        return self.centroids.shape[1] * self.nbits // 8

    def compress(self, vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes [t] int64, packed [t, d * nbits / 8] uint8)`` of float32 ``vectors [t, d]``."""
        codes = nearest(vectors, self.centroids)
        buckets = torch.bucketize(vectors - self.centroids[codes], self.cutoffs, right=True).to(torch.uint8)
        grouped = buckets.view(len(vectors), self.residual_bytes, 8 // self.nbits)
        return codes, (grouped << self._shifts).sum(2, dtype=torch.uint8)

    def decompress(self, codes: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
        """The float32 vectors ``[t, d]`` that ``codes`` and ``packed`` stand for."""
        vectors = self.centroids[codes] + self._table[packed.long()].view(len(packed), -1)
        return torch.nn.functional.normalize(vectors, dim=1) if self.normalize else vectors
