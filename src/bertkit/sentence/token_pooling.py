"""Token pooling: fewer vectors per document, by clustering them (PyLate's and sentence-transformers 6's
``HierarchicalTokenPooling``).

A text's scored vectors, less its first ``num_protected_tokens`` (``[CLS]``), are clustered by Ward linkage on
their cosine distances into ``n // pool_factor`` clusters (at least one), each replaced by its mean; the clusters
come in the order of their labels. ``normalize_embeddings`` L2-normalises every output vector. Applies to the
``tasks`` named (documents by default; no task counts as a document). Needs scipy (imported when a text is pooled).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class HierarchicalTokenPooling:
    """The settings of a directory's ``HierarchicalTokenPooling`` and :meth:`pool`, which applies them."""

    def __init__(self, pool_factor: float = 1.0, num_protected_tokens: int = 1, normalize_embeddings: bool = False,
                 tasks: Any = None):
        if not pool_factor >= 1 or num_protected_tokens < 0:
            raise ValueError(f"HierarchicalTokenPooling needs pool_factor >= 1 and num_protected_tokens >= 0, got "
                             f"{pool_factor} and {num_protected_tokens}.")
        self.pool_factor, self.num_protected_tokens = float(pool_factor), int(num_protected_tokens)
        self.normalize_embeddings = bool(normalize_embeddings)
        self.tasks = [tasks] if isinstance(tasks, str) else list(tasks or ["document"])

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HierarchicalTokenPooling:
        # a config saved before normalize_embeddings existed pooled without normalising
        return cls(config.get("pool_factor", 1.0), config.get("num_protected_tokens", 1),
                   config.get("normalize_embeddings", False), config.get("tasks"))

    def config(self) -> dict[str, Any]:
        return {"pool_factor": self.pool_factor, "num_protected_tokens": self.num_protected_tokens,
                "normalize_embeddings": self.normalize_embeddings, "tasks": list(self.tasks)}

    def applies_to(self, task: str | None) -> bool:
        return (task or "document") in self.tasks

    def pool(self, vectors: torch.Tensor) -> torch.Tensor:
        """One text's ``[n, D]`` vectors pooled to about ``n / pool_factor`` (the protected ones kept)."""
        protected, rest = vectors[:self.num_protected_tokens], vectors[self.num_protected_tokens:]
        clusters = max(int(len(rest) // self.pool_factor), 1)
        if clusters < len(rest):
            labels = _ward_labels(rest.detach().float().cpu(), clusters)
            _, inverse = torch.unique(labels, return_inverse=True)
            count = int(inverse.max()) + 1
            sums = torch.zeros(count, rest.shape[1], dtype=rest.dtype).index_add_(0, inverse, rest.cpu())
            sizes = torch.zeros(count, dtype=rest.dtype).index_add_(0, inverse, torch.ones(len(rest), dtype=rest.dtype))
            vectors = torch.cat([protected, (sums / sizes[:, None]).to(vectors.device)])
        return F.normalize(vectors.float(), dim=-1).to(vectors.dtype) if self.normalize_embeddings else vectors


def _ward_labels(vectors: torch.Tensor, clusters: int) -> torch.Tensor:
    """Cluster labels of ``[n, D]`` vectors: Ward linkage on cosine distance, cut into ``clusters``."""
    try:
        from scipy.cluster import hierarchy
    except ImportError as error:
        raise ImportError("this model pools its document vectors (HierarchicalTokenPooling), which needs scipy: "
                          "pip install scipy") from error

    distances = (1 - vectors @ vectors.T).clamp_(0, 2)
    upper = torch.triu_indices(len(vectors), len(vectors), offset=1)
    condensed = distances[upper[0], upper[1]].double().numpy()  # scipy's condensed form: the upper triangle by rows
    tree = hierarchy.linkage(condensed, method="ward")
    return torch.from_numpy(hierarchy.fcluster(tree, t=clusters, criterion="maxclust").astype("int64"))
