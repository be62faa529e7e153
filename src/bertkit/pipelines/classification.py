"""``text-classification`` (single texts and pairs, multi-label) and ``rerank`` (cross-encoder scores).

text-classification answers as HF's pipeline does: without ``top_k`` one ``{"label", "score"}`` per input
(a bare text's answer wrapped in a list, as HF wraps it); with ``top_k`` (an int, or None for every label)
each input's labels sorted best first. ``function_to_apply``: ``"softmax"``, ``"sigmoid"`` or ``"none"``;
by default sigmoid for one label or multi-label models (``problem_type``), none for regression, softmax
otherwise. A pair is ``{"text": ..., "text_pair": ...}``.

rerank scores passages against a query with a cross-encoder (a one-label sequence classifier, e.g. an
MS MARCO cross-encoder), through a :class:`~bertkit.sentence.CrossEncoder` over the model (its pairs and its
scores: one scoring path): ``rerank(query, passages)`` -> ``[{"index", "score", "text"}]`` best first, the
score sigmoid-squashed unless ``raw_scores=True`` (a multi-label model scores with its last label's
softmax probability, the "relevant" class of two-label rerankers); ``top_k`` keeps the best. A pair past
``max_length`` is cut in the passage (``truncation="only_second"``, the default) or, with
``truncation="longest_first"``, in whichever text is longer (text-embeddings-inference's cut, which also fits
a query longer than ``max_length``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.checks import check_int
from bertkit.modeling.heads import BERTForSequenceClassification
from bertkit.pipelines.aggregation import softmax
from bertkit.pipelines.base import Pipeline
from bertkit.sentence.cross_encoder import PAIR_CUTS, CrossEncoder

FUNCTIONS = ("softmax", "sigmoid", "none")
_UNSET = object()


def apply(function: str, logits: np.ndarray) -> np.ndarray:
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    return softmax(logits) if function == "softmax" else logits


class _SequenceScores(Pipeline):
    """Both tasks: one feature per (text, pair), the classifier's logits per row."""

    model_class = BERTForSequenceClassification

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def labels(self) -> dict[int, str]:
        config = self.model.config
        return config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}


class TextClassificationPipeline(_SequenceScores):
    task = "text-classification"
    defaults: ClassVar[dict[str, Any]] = {"top_k": _UNSET, "function_to_apply": None}

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["function_to_apply"] not in (None, *FUNCTIONS):
            raise ValueError(f"function_to_apply must be one of {FUNCTIONS} or None, got "
                             f"{params['function_to_apply']!r}.")
        if params["top_k"] is not _UNSET:
            check_int("top_k", params["top_k"], none_means="every label")
        return params

    def is_single(self, inputs: Any) -> bool:
        return isinstance(inputs, str | dict)

    def __call__(self, inputs: Any, **params: Any) -> Any:
        answer = super().__call__(inputs, **params)
        legacy = "top_k" not in params and self.params["top_k"] is _UNSET
        return [answer] if isinstance(inputs, str) and legacy else answer

    def preprocess(self, item: str | dict, params: dict[str, Any]) -> list[dict[str, Any]]:
        if isinstance(item, dict):
            unknown = set(item) - {"text", "text_pair"}
            if "text" not in item or unknown:
                raise ValueError('a text pair is {"text": ..., "text_pair": ...}; got keys ' f"{sorted(item)}.")
            return [self.encode(item["text"], item.get("text_pair"), params)]
        if not isinstance(item, str):
            raise ValueError(f"text-classification takes texts or {{'text', 'text_pair'}} dicts, got {type(item)}.")
        return [self.encode(item, params=params)]

    def postprocess(self, item: Any, features: list[dict], outputs: list[np.ndarray], params: dict) -> Any:
        scores = apply(params["function_to_apply"] or self._default_function(), outputs[0])
        labels = self.labels()
        if params["top_k"] is _UNSET:
            best = int(scores.argmax())
            return {"label": labels[best], "score": float(scores[best])}
        ranked = sorted(({"label": labels[i], "score": float(s)} for i, s in enumerate(scores)),
                        key=lambda d: d["score"], reverse=True)
        return ranked if params["top_k"] is None else ranked[:params["top_k"]]

    def _default_function(self) -> str:
        config = self.model.config
        if config.problem_type == "regression":
            return "none"
        if config.problem_type == "multi_label_classification" or config.num_labels == 1:
            return "sigmoid"
        return "softmax"


class RerankPipeline(_SequenceScores):
    """``rerank``: the model (a sequence classifier) scores through :attr:`cross_encoder`, a
    :class:`~bertkit.sentence.CrossEncoder` over it, which tokenizes each pair and runs the classifier."""

    task = "rerank"
    defaults: ClassVar[dict[str, Any]] = {"top_k": None, "raw_scores": False, "truncation": "only_second"}

    def place(self, device: str | torch.device | None, dtype: Any, max_length: int | None) -> tuple[Any, int]:
        self.cross_encoder = CrossEncoder.from_model(self.model, self.tokenizer, max_length=max_length, device=device,
                                                     dtype=dtype)
        return self.cross_encoder.dtype_choice, self.cross_encoder.max_length

    @property
    def max_length(self) -> int:
        """Where a pair is cut: the cross-encoder's length, so a length set here (the server's
        ``--max-input-length``, a reranker's trained length) is the one its features are cut at."""
        return self.cross_encoder.max_length

    @max_length.setter
    def max_length(self, value: int) -> None:
        self.cross_encoder.max_length = value

    def __call__(self, query: str, passages: list[str] | None = None, **params: Any) -> list[dict[str, Any]]:
        """``[{"index", "score", "text"}]`` for ``passages`` against ``query``, best first."""
        if not isinstance(query, str) or not isinstance(passages, list | tuple) \
                or not all(isinstance(p, str) for p in passages):
            raise ValueError("rerank takes a query string and a list of passage strings: rerank(query, passages).")
        params = self.check({**self.params, **params})
        scores = [self.score(logits, params["raw_scores"])
                  for logits in self.run([(query, p) for p in passages], params)]
        ranked = sorted(({"index": i, "score": s, "text": p} for i, (s, p) in enumerate(zip(scores, passages))),
                        key=lambda d: d["score"], reverse=True)
        return ranked if params["top_k"] is None else ranked[:params["top_k"]]

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        check_int("top_k", params["top_k"], none_means="every passage")
        if params["truncation"] not in PAIR_CUTS:
            raise ValueError(f"truncation must be one of {PAIR_CUTS}, got {params['truncation']!r}.")
        return params

    def preprocess(self, item: tuple[str, str], params: dict[str, Any]) -> list[dict[str, Any]]:
        return self.cross_encoder.features([item], params["truncation"], params["truncation_side"])

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.cross_encoder.score(batch)

    def postprocess(self, item: Any, features: list[dict], outputs: list[np.ndarray], params: dict) -> np.ndarray:
        return outputs[0]

    @staticmethod
    def score(logits: np.ndarray, raw: bool) -> float:
        """A passage's score from its logits: sigmoid (one label) or the last label's softmax; raw: the logit."""
        if logits.shape[-1] == 1:
            return float(logits[0] if raw else apply("sigmoid", logits)[0])
        return float(logits[-1] if raw else apply("softmax", logits)[-1])
