"""``embeddings``: one vector per text; ``sparse-embeddings``: SPLADE's; ``feature-extraction``: HF's token vectors.

``embeddings`` on a sentence-transformers directory runs its own modules (pooling, Dense, Normalize:
:class:`bertkit.sentence.SentenceTransformer`); on any other BERT it mean-pools the last hidden states over
real tokens (``pooling="cls"``/``"max"``/... picks another mode). ``normalize=True`` L2-normalises;
``dimensions=d`` keeps the first ``d`` (Matryoshka models; re-normalised when normalising); ``prompt_name``
puts one of a sentence-transformers model's prompts before each text; ``output="tokens"`` answers every
token's vector instead (``[L, H]`` per text, text-embeddings-inference's ``/embed_all``). An input is a text
or a list of token ids (already the model's: no prompt, no truncation). Answers are lists of floats.

``sparse-embeddings`` runs a masked-LM head: SPLADE's max over real tokens of ``log(1 + relu(logits))``, one
vocabulary-sized vector per text; ``output="sparse"`` answers its non-zero entries ``[{"index", "value"}]``.
``feature-extraction`` answers as HF's pipeline does: per text ``[[vector per token]]`` (``[1, L, H]``).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.modeling.backbone import BERT
from bertkit.modeling.lm_heads import BERTForMaskedLM
from bertkit.pipelines.base import Pipeline
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Pooling, is_sentence_transformer, normalize

OUTPUTS = ("sentence", "tokens")


class _TextsOrIds(Pipeline):
    """Inputs are texts or token-id lists; a prompt goes before each text."""

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params.get("prompt_name") is not None:
            self.prompt(params["prompt_name"])  # ValueError naming the prompts there are
        return params

    def prompt(self, prompt_name: str | None) -> str:
        """The text put before each input text: a sentence-transformers model's prompt (its default one when
        ``prompt_name`` is None); other models have none."""
        if isinstance(self.model, SentenceTransformer):
            return self.model.prompt(prompt_name)
        if prompt_name is not None:
            raise ValueError(f"prompt_name {prompt_name!r}: this model has no prompts (a sentence-transformers "
                             "directory lists them in config_sentence_transformers.json).")
        return ""

    def preprocess(self, item: str | list[int], params: dict[str, Any]) -> list[dict[str, Any]]:
        if isinstance(item, str):
            return [self.encode(item, params=params, prefix=self.prompt(params.get("prompt_name")))]
        return [self.id_row(item)]

    def id_row(self, ids: Any) -> dict[str, list]:
        """The model row of a token-id input (ValueError unless integers of the vocabulary, within the model)."""
        if not isinstance(ids, list | tuple) or not ids or not all(type(i) is int for i in ids):
            raise ValueError(f"{self.task} takes texts or non-empty lists of token ids, got {str(ids)[:80]}.")
        size = len(self.tokenizer)
        bad = next((i for i in ids if not 0 <= i < size), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{size - 1}).")
        if len(ids) > self.max_length:
            raise ValueError(f"{len(ids)} token ids; the model takes at most {self.max_length}.")
        return {"input_ids": list(ids), "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}


class EmbeddingsPipeline(_TextsOrIds):
    task = "embeddings"
    model_class = BERT
    defaults: ClassVar[dict[str, Any]] = {"normalize": None, "pooling": None, "dimensions": None,
                                          "prompt_name": None, "output": "sentence"}
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
        if params["output"] not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {params['output']!r}.")
        dimensions = params["dimensions"]
        if dimensions is not None and (type(dimensions) is not int or not 1 <= dimensions <= self.dimension):
            raise ValueError(f"dimensions must be an integer in [1, {self.dimension}] (this model's size), "
                             f"got {dimensions!r}.")
        return params

    @property
    def dimension(self) -> int:
        """The size of this model's sentence vectors."""
        if isinstance(self.model, SentenceTransformer):
            return self.model.get_sentence_embedding_dimension()
        return self.model.config.hidden_size

    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """A sentence-transformers model embeds with its own modules (prompts, casing, pooling, Dense, Normalize:
        one implementation); anything else (or another ``pooling``) through the generic path."""
        if not (isinstance(self.model, SentenceTransformer) and params["pooling"] is None):
            return super().run(items, params)
        prefix = self.model.prompt(params["prompt_name"])
        texts = [i for i, item in enumerate(items) if isinstance(item, str)]
        rows: list[dict] = [None] * len(items)  # type: ignore[list-item]
        for i, row in zip(texts, self.model.features([items[i] for i in texts], prefix, params["truncation_side"])):
            rows[i] = row
        for i, item in enumerate(items):
            if rows[i] is None:
                rows[i] = self.id_row(item)
        output = "token_embeddings" if params["output"] == "tokens" else "sentence_embedding"
        vectors = self.model.embed_features(rows, output, prefix, batch_size=self.batch_size,
                                            batch_tokens=self.batch_tokens)
        self.finite(*vectors)
        if output == "token_embeddings":
            return [v.tolist() for v in vectors]
        return [self._finish(v, params) for v in vectors]

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        backbone = self.model.bert if isinstance(self.model, SentenceTransformer) else self.model
        return backbone(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]

    def postprocess(self, item: Any, features: list[dict], outputs: list[np.ndarray], params: dict) -> list:
        if params["output"] == "tokens":
            return outputs[0].tolist()
        tokens = torch.from_numpy(outputs[0])[None]  # [1, L, H], every token real
        vector = Pooling((params["pooling"] or "mean",))(tokens, torch.ones(tokens.shape[:2], dtype=torch.long))[0]
        return self._finish(vector, params)

    @staticmethod
    def _finish(vector: torch.Tensor, params: dict[str, Any]) -> list[float]:
        """The first ``dimensions`` entries (all when None), L2-normalised when asked."""
        if params["dimensions"] is not None:
            vector = vector[:params["dimensions"]]
        return (normalize(vector) if params["normalize"] else vector).tolist()


class SparseEmbeddingsPipeline(_TextsOrIds):
    task = "sparse-embeddings"
    model_class = BERTForMaskedLM
    defaults: ClassVar[dict[str, Any]] = {"normalize": None, "prompt_name": None, "output": "dense"}

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["output"] not in ("dense", "sparse"):
            raise ValueError(f"output must be 'dense' or 'sparse', got {params['output']!r}.")
        return params

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """SPLADE: ``max_l log(1 + relu(logits[b, l]))`` over real tokens, ``[B, V]`` float32."""
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])  # [B, L, V]
        weights = torch.log1p(torch.relu(logits.float()))
        weights = weights * batch["attention_mask"][..., None].to(weights.dtype)  # padding scores 0
        return weights.amax(dim=1)

    def postprocess(self, item: Any, features: list[dict], outputs: list[np.ndarray], params: dict) -> list:
        vector = outputs[0]
        if params["output"] == "sparse":
            indices = np.flatnonzero(vector)
            return [{"index": int(i), "value": float(v)} for i, v in zip(indices, vector[indices])]
        if params["normalize"]:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return vector.tolist()


class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"
    model_class = BERT
    token_level = True

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.encode(item, params=params)]

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0]

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> list:
        return [outputs[0].tolist()]
