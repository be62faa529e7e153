"""Similarity functions between two sets of embeddings: every row of ``a`` against every row of ``b``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: the similarity functions, by name (a distance is negated, so that higher is more similar for each)
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


def pairwise(a: torch.Tensor, b: torch.Tensor, function: str = "cosine") -> torch.Tensor:
    """``[n, m]``: ``function`` of every row of ``a [n, d]`` with every row of ``b [m, d]``; for the distances
    (euclidean, manhattan) the negated distance, so that higher is more similar for every function."""
    if function == "cosine":
        return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
    if function == "dot":
        return a @ b.T
    if function == "euclidean":
        return -torch.cdist(a, b, p=2.0)
    if function == "manhattan":
        return -torch.cdist(a, b, p=1.0)
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {function!r}")


def rowwise(a: torch.Tensor, b: torch.Tensor, function: str = "cosine") -> torch.Tensor:
    """``[n]``: ``function`` of row i of ``a`` with row i of ``b`` (distances negated, as :func:`pairwise`)."""
    if function == "cosine":
        return F.cosine_similarity(a, b, dim=-1)
    if function == "dot":
        return (a * b).sum(-1)
    if function == "euclidean":
        return -(a - b).norm(p=2, dim=-1)
    if function == "manhattan":
        return -(a - b).abs().sum(-1)
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {function!r}")
