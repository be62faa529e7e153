"""``embeddings``: one vector per text; ``feature-extraction``: HF's token vectors.

``embeddings`` on a sentence-transformers directory runs its own modules (pooling, Dense, Normalize:
:class:`bertkit.sentence.SentenceTransformer`); on any other BERT it mean-pools the last hidden states over
real tokens (``pooling="cls"``/``"max"``/... picks another mode). ``normalize=True`` L2-normalises.
Answers are lists of floats. ``feature-extraction`` answers as HF's pipeline does: per text
``[[vector per token]]`` (``[1, L, H]``, special tokens included).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.modeling.backbone import BERT
from bertkit.pipelines.base import Pipeline
from bertkit.sentence.modules import Pooling, is_sentence_transformer, normalize


class EmbeddingsPipeline(Pipeline):
    task = "embeddings"
    model_class = BERT
    defaults: ClassVar[dict[str, Any]] = {"normalize": None, "pooling": None}

    @classmethod
    def from_source(cls, source: str | os.PathLike, **options: Any) -> Pipeline:
        if not is_sentence_transformer(source):
            return super().from_source(source, **options)
        from bertkit.sentence.model import SentenceTransformer

        model = SentenceTransformer(source, optimize=False)
        return cls(model, model.tokenizer, max_length=model.max_seq_length, **options)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["pooling"] is not None:
            Pooling((params["pooling"],))  # ValueError naming the modes
        return params

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(item, str):
            raise ValueError(f"embeddings takes texts, got {type(item)}.")
        return [self.encode(item)]

    token_level = True  # token vectors come back trimmed to each text; postprocess pools them

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        backbone = self.model.bert if hasattr(self.model, "head") else self.model
        return backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> list[float]:
        tokens = torch.from_numpy(outputs[0])[None]  # [1, L, H], every token real
        mask = torch.ones(tokens.shape[:2], dtype=torch.long)
        with torch.no_grad():
            if params["pooling"] is None and hasattr(self.model, "head"):  # the model's own modules
                vector = self.model.head(tokens.to(self.device), mask.to(self.device))[0].float().cpu()
            else:
                vector = Pooling((params["pooling"] or "mean",))(tokens, mask)[0]
        return (normalize(vector) if params["normalize"] else vector).tolist()


class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"
    model_class = BERT
    token_level = True

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.encode(item)]

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> list:
        return [outputs[0].tolist()]
