"""Mirror of ``lucid.models``: every model class, the config and the factories."""

from bertkit.config import BERTConfig
from bertkit.modeling import *  # noqa: F403
from bertkit.modeling import __all__ as _modeling_all
from bertkit.presets import (
           CamemBERTConfig,
           DeBERTaV2Config,
           DistilBERTConfig,
           ELECTRAConfig,
           EuroBERTConfig,
           GTEConfig,
           JinaEmbeddingsV3Config,
           ModernBERTConfig,
           MPNetConfig,
           NomicBERTConfig,
           RoBERTaConfig,
           XLMRoBERTaConfig,
)
from bertkit.tokenization import BERTTokenizer, BERTTokenizerFast

__all__ = ["BERTConfig", "BERTTokenizer", "BERTTokenizerFast", "CamemBERTConfig", "DeBERTaV2Config", "DistilBERTConfig",
           "ELECTRAConfig", "EuroBERTConfig", "MPNetConfig",
           "ModernBERTConfig", "RoBERTaConfig", "XLMRoBERTaConfig", "GTEConfig", "NomicBERTConfig",
           "JinaEmbeddingsV3Config", *_modeling_all]
