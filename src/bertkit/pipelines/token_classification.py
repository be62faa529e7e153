"""``token-classification`` (NER): entities with character offsets, HF's pipeline's output for every
``aggregation_strategy`` (``none``, ``simple``, ``first``, ``average``, ``max``; see
:mod:`bertkit.pipelines.aggregation`). Texts longer than the model are truncated, as HF's pipeline does
without a stride.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.modeling.heads import BERTForTokenClassification
from bertkit.pipelines.aggregation import STRATEGIES, entities, softmax
from bertkit.pipelines.base import Pipeline


class TokenClassificationPipeline(Pipeline):
    task = "token-classification"
    model_class = BERTForTokenClassification
    defaults: ClassVar[dict[str, Any]] = {"aggregation_strategy": "none", "ignore_labels": ("O",)}
    token_level = True

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if str(params["aggregation_strategy"]).lower() not in STRATEGIES:
            raise ValueError(f"aggregation_strategy must be one of {STRATEGIES}, got "
                             f"{params['aggregation_strategy']!r}.")
        return params

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(item, str):
            raise ValueError(f"token-classification takes texts, got {type(item)}.")
        return [self.encode(item, params=params, return_offsets_mapping=True, return_special_tokens_mask=True)]

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> list[dict]:
        feature = features[0]
        config = self.model.config
        labels = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
        return entities(item, feature["input_ids"], feature["offset_mapping"], feature["special_tokens_mask"],
                        softmax(outputs[0]), labels, self.tokenizer, strategy=params["aggregation_strategy"],
                        ignore_labels=params["ignore_labels"])
