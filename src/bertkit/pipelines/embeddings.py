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
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Pooling, is_sentence_transformer, normalize


class EmbeddingsPipeline(Pipeline):
    task = "embeddings"
    model_class = BERT
    defaults: ClassVar[dict[str, Any]] = {"normalize": None, "pooling": None}
    token_level = True  # the generic path: token vectors trimmed to each text, pooled by postprocess

    @classmethod
    def from_source(cls, source: str | os.PathLike, **options: Any) -> Pipeline:
        if not is_sentence_transformer(source):
            return super().from_source(source, **options)
        model = SentenceTransformer(source, optimize=False)
        return cls(model, model.tokenizer, max_length=model.max_seq_length, **options)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["pooling"] is not None:
            Pooling((params["pooling"],))  # ValueError naming the modes
        return params

    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """A sentence-transformers model embeds with its own ``encode`` (prompts, casing, pooling, Dense,
        Normalize: one implementation); anything else (or another ``pooling``) through the generic path."""
        if not (isinstance(self.model, SentenceTransformer) and params["pooling"] is None):
            return super().run(items, params)
        for item in items:
            self._check_text(item)
        vectors = self.model.encode(items, batch_size=self.batch_size, batch_tokens=self.batch_tokens,
                                    show_progress_bar=False, normalize_embeddings=bool(params["normalize"]))
        return vectors.tolist()

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.encode(self._check_text(item))]

    @staticmethod
    def _check_text(item: Any) -> str:
        if not isinstance(item, str):
            raise ValueError(f"embeddings takes texts, got {type(item)}.")
        return item

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        backbone = self.model.bert if isinstance(self.model, SentenceTransformer) else self.model
        return backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> list[float]:
        tokens = torch.from_numpy(outputs[0])[None]  # [1, L, H], every token real
        vector = Pooling((params["pooling"] or "mean",))(tokens, torch.ones(tokens.shape[:2], dtype=torch.long))[0]
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
