"""The old import path of the embedding and reranker training API, which now lives in :mod:`bertkit.sentence`
(models, losses, evaluation, data, mining, the recipes) and :mod:`bertkit.retrieval` (search over vectors).

Every name this package exported still imports from here (``from bertkit.embedding import CrossEncoder``), and so
do the module paths the guides showed (``bertkit.embedding.training``, ``bertkit.embedding.rerank_training``,
``bertkit.embedding.rerank_losses``); :data:`MOVED` says where each now lives. New code imports from there.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import Any

#: public name -> the module that defines it now (imported on first use: torch comes later)
MOVED = {
    "PairBatch": "bertkit.sentence.batch",
    "MultipleNegativesRankingLoss": "bertkit.sentence.losses.contrastive",
    "CachedMultipleNegativesRankingLoss": "bertkit.sentence.losses.cached",
    "MatryoshkaLoss": "bertkit.sentence.losses.matryoshka",
    **dict.fromkeys(("CoSENTLoss", "AnglELoss", "CosineSimilarityLoss", "TripletLoss", "ContrastiveLoss",
                     "OnlineContrastiveLoss"), "bertkit.sentence.losses.pairwise"),
    **dict.fromkeys(("MarginMSELoss", "DistillKLDivLoss", "GISTEmbedLoss"), "bertkit.sentence.losses.distillation"),
    **dict.fromkeys(("BinaryCrossEntropyLoss", "ListNetLoss", "LambdaLoss"), "bertkit.sentence.losses.rerank"),
    **dict.fromkeys(("BiEncoder", "finetune_embeddings", "EmbeddingTrainingResult"), "bertkit.sentence.training"),
    "build_loss": "bertkit.sentence.losses",
    "CrossEncoder": "bertkit.sentence.cross_encoder",
    "finetune_reranker": "bertkit.sentence.rerank_training",
    **dict.fromkeys(("EmbeddingDataset", "PairCollator", "RowBatch"), "bertkit.sentence.data"),
    "evaluate_retrieval": "bertkit.sentence.evaluation.evaluate",
    **dict.fromkeys(("retrieve", "search"), "bertkit.retrieval.dense"),
    **dict.fromkeys(("evaluate_sts", "read_sts"), "bertkit.sentence.evaluation.sts"),
    **dict.fromkeys(("load_beir", "BeirData"), "bertkit.sentence.evaluation.beir"),
    "evaluate_run": "bertkit.sentence.evaluation.ir_metrics",
    **dict.fromkeys(("RowsRerankEvaluator", "BeirRerankEvaluator"), "bertkit.sentence.evaluation.reranking"),
    "mine_hard_negatives": "bertkit.sentence.mining",
}
#: old submodule -> the module it is now (``import bertkit.embedding.training`` gives bertkit.sentence.training)
MODULES = {"training": "bertkit.sentence.training", "rerank_training": "bertkit.sentence.rerank_training",
           "rerank_losses": "bertkit.sentence.losses.rerank"}
__all__ = sorted(MOVED)


def __getattr__(name: str) -> Any:
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in MOVED:
        raise AttributeError(f"module 'bertkit.embedding' has no attribute {name!r}")
    return getattr(importlib.import_module(MOVED[name]), name)


def __dir__() -> list[str]:
    return __all__


class _OldModulePath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``bertkit.embedding.<old>`` for the modules of :data:`MODULES` and answers the module that replaced it
    (the same module object under both names, so a name patched on one is patched on the other)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(MODULES[spec.name.rpartition(".")[2]])
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the old name's: put it back after
        return module

    def exec_module(self, module: Any) -> None:  # the module ran when it was imported under its own name
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _OldModulePath) for finder in sys.meta_path):
    sys.meta_path.append(_OldModulePath())
