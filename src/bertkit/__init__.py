"""bertkit: the BERT model family for PyTorch.

Start with :class:`BERTConfig` and :class:`BERT`, a task model such as
:class:`BERTForSequenceClassification`, or a factory like ``bert_for_masked_lm_base()``.

Names are resolved lazily, so ``import bertkit`` (and ``bertkit --help``) does not import
torch until a model is touched.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from bertkit import hooks as _hooks

__version__ = "0.1.0"


# The models' from_pretrained / save_pretrained are bertkit.weights' work, and modeling does not
# import weights (design §2): this root, which runs before any bertkit.* module, wires them up.
def _load_pretrained(model_or_cls: Any, source: str | os.PathLike | Any | None, weights: Any,
                     config_overrides: dict[str, Any]) -> Any:
    from bertkit.weights import load_pretrained

    return load_pretrained(model_or_cls, source, weights, config_overrides)


def _save_pretrained(model: Any, directory: str | os.PathLike, **options: Any) -> None:
    from bertkit.weights import save_pretrained

    save_pretrained(model, directory, **options)


def _optimize_for_inference(model: Any, **options: Any) -> Any:
    from bertkit.inference import optimize_for_inference

    return optimize_for_inference(model, **options)


_hooks.install_checkpoint_io(_load_pretrained, _save_pretrained)
_hooks.install_inference(_optimize_for_inference)

#: top-level name -> module that defines it (everything else comes from bertkit.modeling)
_LAZY = {
    "BERTConfig": "bertkit.config",
    "AutoModel": "bertkit.weights.auto",
    "AutoConfig": "bertkit.weights.auto",
    "SIZES": "bertkit.presets",
    "preset_config": "bertkit.presets",
    "RoBERTaConfig": "bertkit.presets",
    "XLMRoBERTaConfig": "bertkit.presets",
    "CamemBERTConfig": "bertkit.presets",
    "MPNetConfig": "bertkit.presets",
    "DistilBERTConfig": "bertkit.presets",
    "ELECTRAConfig": "bertkit.presets",
    "ModernBERTConfig": "bertkit.presets",
    "DeBERTaV2Config": "bertkit.presets",
    "EuroBERTConfig": "bertkit.presets",
    "GTEConfig": "bertkit.presets",
    "NomicBERTConfig": "bertkit.presets",
    "JinaEmbeddingsV3Config": "bertkit.presets",
    "BERTTokenizerFast": "bertkit.tokenization",
    "BERTTokenizer": "bertkit.tokenization",
    "TokenizerFast": "bertkit.tokenization",
    "AutoTokenizer": "bertkit.tokenization",
    "BatchEncoding": "bertkit.tokenization",
    "BERT_Weights": "bertkit.weights",
    "BERT_ForQuestionAnswering_Weights": "bertkit.weights",
    "BERT_ForSequenceClassification_Weights": "bertkit.weights",
    "LoadWarning": "bertkit.weights",
    "optimize_for_inference": "bertkit.inference",
    "fast_path": "bertkit.modeling.fast",
    "pipeline": "bertkit.pipelines",
    "SentenceTransformer": "bertkit.sentence",
    "semantic_search": "bertkit.sentence",
    "CrossEncoder": "bertkit.sentence.cross_encoder",
    "SparseEncoder": "bertkit.sentence.sparse",
    "StaticModel": "bertkit.sentence.static_model",
    "MultiVectorEncoder": "bertkit.sentence.multi_vector",
    "BGEM3": "bertkit.sentence.bge_m3",
    "BGEM3Lexical": "bertkit.sentence.bge_m3",
    "lexical_matching_score": "bertkit.sentence.bge_m3",
}

if TYPE_CHECKING:  # for IDEs and type checkers
    from bertkit.config import BERTConfig as BERTConfig
    from bertkit.inference import optimize_for_inference as optimize_for_inference
    from bertkit.modeling import *  # noqa: F403
    from bertkit.modeling.fast import fast_path as fast_path
    from bertkit.pipelines import pipeline as pipeline
    from bertkit.presets import SIZES as SIZES
    from bertkit.presets import CamemBERTConfig as CamemBERTConfig
    from bertkit.presets import DeBERTaV2Config as DeBERTaV2Config
    from bertkit.presets import DistilBERTConfig as DistilBERTConfig
    from bertkit.presets import ELECTRAConfig as ELECTRAConfig
    from bertkit.presets import EuroBERTConfig as EuroBERTConfig
    from bertkit.presets import GTEConfig as GTEConfig
    from bertkit.presets import JinaEmbeddingsV3Config as JinaEmbeddingsV3Config
    from bertkit.presets import ModernBERTConfig as ModernBERTConfig
    from bertkit.presets import MPNetConfig as MPNetConfig
    from bertkit.presets import NomicBERTConfig as NomicBERTConfig
    from bertkit.presets import RoBERTaConfig as RoBERTaConfig
    from bertkit.presets import XLMRoBERTaConfig as XLMRoBERTaConfig
    from bertkit.presets import preset_config as preset_config
    from bertkit.sentence import SentenceTransformer as SentenceTransformer
    from bertkit.sentence import semantic_search as semantic_search
    from bertkit.sentence.bge_m3 import BGEM3 as BGEM3
    from bertkit.sentence.bge_m3 import BGEM3Lexical as BGEM3Lexical
    from bertkit.sentence.bge_m3 import lexical_matching_score as lexical_matching_score
    from bertkit.sentence.cross_encoder import CrossEncoder as CrossEncoder
    from bertkit.sentence.multi_vector import MultiVectorEncoder as MultiVectorEncoder
    from bertkit.sentence.sparse import SparseEncoder as SparseEncoder
    from bertkit.sentence.static_model import StaticModel as StaticModel
    from bertkit.tokenization import AutoTokenizer as AutoTokenizer
    from bertkit.tokenization import BatchEncoding as BatchEncoding
    from bertkit.tokenization import BERTTokenizer as BERTTokenizer
    from bertkit.tokenization import BERTTokenizerFast as BERTTokenizerFast
    from bertkit.tokenization import TokenizerFast as TokenizerFast
    from bertkit.weights import BERT_ForQuestionAnswering_Weights as BERT_ForQuestionAnswering_Weights
    from bertkit.weights import BERT_ForSequenceClassification_Weights as BERT_ForSequenceClassification_Weights
    from bertkit.weights import BERT_Weights as BERT_Weights
    from bertkit.weights import LoadWarning as LoadWarning
    from bertkit.weights.auto import AutoConfig as AutoConfig
    from bertkit.weights.auto import AutoModel as AutoModel


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("models", "weights"):
        return importlib.import_module(f"bertkit.{name}")
    modeling = importlib.import_module("bertkit.modeling")
    if name == "__all__":
        return [*_LAZY, "models", "weights", *modeling.__all__]
    try:
        return getattr(modeling, name)
    except AttributeError:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}") from None
