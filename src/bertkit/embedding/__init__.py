"""Training embedding models (bi-encoders) and rerankers (cross-encoders): batches, losses, evaluation, mining.

The pieces share one batch type, :class:`~bertkit.embedding.batch.PairBatch`: the rows of a training file
tokenized column by column (anchor, positive, negatives, ...), with the identity of every text (so a loss
can mask a duplicate out of the negatives by text, not by comparing embeddings) and the row's labels.
A loss is called as ``loss(embed, batch)``, where ``embed`` maps one column's tokenized inputs to its
embeddings ``[n, d]`` (with gradients); a loss that needs to run the encoder itself (the cached, GradCache
form) calls ``embed`` as often as it needs.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module under bertkit.embedding that defines it (imported on first use: torch comes later)
_NAMES = {
    "PairBatch": "batch",
    "MultipleNegativesRankingLoss": "contrastive", "CachedMultipleNegativesRankingLoss": "cached",
    "MatryoshkaLoss": "matryoshka",
    "CoSENTLoss": "pairwise", "AnglELoss": "pairwise", "CosineSimilarityLoss": "pairwise",
    "TripletLoss": "pairwise", "ContrastiveLoss": "pairwise", "OnlineContrastiveLoss": "pairwise",
    "MarginMSELoss": "distillation", "DistillKLDivLoss": "distillation", "GISTEmbedLoss": "distillation",
    "BinaryCrossEntropyLoss": "rerank_losses", "ListNetLoss": "rerank_losses", "LambdaLoss": "rerank_losses",
    "BiEncoder": "training", "build_loss": "training", "finetune_embeddings": "training",
    "EmbeddingTrainingResult": "training",
    "CrossEncoder": "cross_encoder", "finetune_reranker": "rerank_training",
    "EmbeddingDataset": "data", "PairCollator": "data", "RowBatch": "data",
    "evaluate_retrieval": "retrieval", "retrieve": "retrieval", "search": "retrieval",
    "evaluate_sts": "sts", "read_sts": "sts", "load_beir": "beir", "BeirData": "beir", "evaluate_run": "ir_metrics",
    "RowsRerankEvaluator": "reranking", "BeirRerankEvaluator": "reranking",
    "mine_hard_negatives": "mining",
}
#: submodules that are API of their own (the reranker losses, whose MNRL shares the bi-encoder loss's name)
_MODULES = ("rerank_losses",)
__all__ = sorted([*_NAMES, *_MODULES])


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"bertkit.embedding.{name}")
    if name not in _NAMES:
        raise AttributeError(f"module 'bertkit.embedding' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bertkit.embedding.{_NAMES[name]}"), name)


def __dir__() -> list[str]:
    return __all__
