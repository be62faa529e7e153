"""``embeddings``: one vector per text; ``sparse-embeddings``: SPLADE's; ``feature-extraction``: HF's token vectors.

``embeddings`` on a sentence-transformers directory runs its own modules (pooling, Dense, Normalize:
:class:`bertkit.sentence.SentenceTransformer`); on any other BERT it mean-pools the last hidden states over real
tokens (``pooling="cls"``/``"max"``/... picks another mode); a static directory (Model2Vec, sentence-transformers'
``StaticEmbedding``) averages its token table (:mod:`bertkit.pipelines.static_embeddings`). ``normalize=True``
L2-normalises; ``dimensions=d`` keeps the first ``d`` (Matryoshka models; re-normalised when normalising);
``prompt_name`` puts one of a sentence-transformers model's prompts before each text; ``output="tokens"`` answers
every token's vector instead (``[L, H]`` per text, text-embeddings-inference's ``/embed_all``). An input is a text
or a list of token ids (already the model's: no prompt, no truncation). Answers are lists of floats.

``sparse-embeddings`` answers one vocabulary-sized vector per text from a sentence-transformers sparse encoder
directory (:class:`bertkit.SparseEncoder`: SPLADE, an inference-free Router, CSR), a BGE-M3 directory (its lexical
weights, :class:`bertkit.BGEM3Lexical`), or any masked-LM head (SPLADE's max over real tokens of
``log(1 + relu(logits))``); ``output="sparse"`` answers its non-zero entries ``[{"index", "value"}]``.
``feature-extraction`` answers as HF's pipeline does: per text ``[[vector per token]]`` (``[1, L, H]``).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.inference.batching import pad, run_sorted
from bertkit.modeling.backbone import BERT
from bertkit.modeling.lm_heads import BERTForMaskedLM
from bertkit.pipelines.base import Pipeline
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Pooling, is_sentence_transformer, normalize
from bertkit.sentence.sides import side_prompts
from bertkit.sentence.sparse import SparseEncoder, keep_largest
from bertkit.tasks.sources import SPARSE_ENCODERS, inspect_source, static_kind

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
    def from_source(cls, source: str | os.PathLike, *, load: dict[str, Any] | None = None,
                    **options: Any) -> Pipeline:
        """A static directory (Model2Vec, sentence-transformers' StaticEmbedding) runs in
        :class:`~bertkit.pipelines.static_embeddings.StaticEmbeddingsPipeline`; another sentence-transformers
        directory as :class:`bertkit.SentenceTransformer`; anything else as a BERT, mean-pooled. ``adapter``: the
        task adapter of a Jina embeddings v3 checkpoint to merge at load (:mod:`bertkit.weights.task_adapters`:
        ``pipeline("embeddings", model=..., adapter="retrieval.query")``), also given as ``load={"task": ...}``
        (the loading options of :meth:`Pipeline.from_source`)."""
        load = dict(load or {})
        adapter = options.pop("adapter", None)
        if adapter is not None:
            load["task"] = adapter
        if cls is EmbeddingsPipeline and static_kind(source) is not None:
            from bertkit.weights.task_adapters import refuse_task

            refuse_task(load.get("task"), source)
            from bertkit.pipelines.static_embeddings import StaticEmbeddingsPipeline

            return StaticEmbeddingsPipeline.from_source(source, **options)
        if not is_sentence_transformer(source):
            return super().from_source(source, load=load, **options)
        model = SentenceTransformer(source, optimize=False, **load)
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
    """One vocabulary-sized vector per input, from whichever sparse model the source holds (see the module doc).

    ``task`` (``"query"`` / ``"document"``, None: the model's default) picks an inference-free model's side, as
    sentence-transformers' ``encode_query`` / ``encode_document`` do: with no ``prompt_name`` it takes that side's
    prompt (``query``; ``document``, ``passage`` or ``corpus``), and the query side of a Router runs no model (one
    learned weight per token). A model with one side (SPLADE, CSR, BGE-M3, a masked-LM) encodes both alike.
    """

    task = "sparse-embeddings"
    model_class = BERTForMaskedLM
    defaults: ClassVar[dict[str, Any]] = {"normalize": None, "prompt_name": None, "output": "dense", "task": None}

    @classmethod
    def from_source(cls, source: str | os.PathLike, **options: Any) -> Pipeline:
        """A sentence-transformers sparse encoder directory loads as :class:`bertkit.SparseEncoder`, a BGE-M3
        directory as :class:`bertkit.BGEM3Lexical`, anything else into a masked LM (SPLADE over its MLM head)."""
        from bertkit.sentence.bge_m3 import BGEM3Lexical

        kind = inspect_source(source).sparse
        if kind in SPARSE_ENCODERS:
            model = SparseEncoder(source, options.get("device"), dtype=options.get("dtype"))
        elif kind == "bge-m3":
            model = BGEM3Lexical(source, options.get("device"), dtype=options.get("dtype"))
        else:
            return super().from_source(source, **options)
        return cls(model, model.tokenizer, **options)

    def place(self, device: str | torch.device | None, dtype: Any, max_length: int | None) -> tuple[Any, int]:
        """A sparse encoder or BGE-M3 model placed itself when it loaded; its length is its document side's."""
        if isinstance(self.model, SparseEncoder):
            route = self.model.route()
            limit = getattr(route, "max_seq_length", None) or getattr(getattr(route, "dense", None),
                                                                      "max_seq_length", None)
            return self.model.dtype_choice, min(max_length or limit, limit)
        if hasattr(self.model, "lexical_weights"):  # BGE-M3
            return self.model.dtype_choice, min(max_length or self.model.max_length, self.model.max_length)
        return super().place(device, dtype, max_length)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["output"] not in ("dense", "sparse"):
            raise ValueError(f"output must be 'dense' or 'sparse', got {params['output']!r}.")
        if params["task"] is not None and not isinstance(params["task"], str):
            raise ValueError(f"task must be a route name such as 'query' or 'document', got {params['task']!r}.")
        if isinstance(self.model, SparseEncoder):
            self.model.route(params["task"])  # ValueError naming the routes there are
            if params["truncation_side"] != "right":
                raise ValueError("truncation_side: a sentence-transformers sparse encoder truncates on the right "
                                 "(as sentence-transformers does); send \"truncation_direction\": \"right\".")
        return params

    def prompt(self, prompt_name: str | None, task: str | None = None) -> str:
        """The text put before each input text; for a sparse encoder and no ``prompt_name``, ``task``'s prompt as
        ``encode_query`` / ``encode_document`` pick it."""
        if not isinstance(self.model, SparseEncoder):
            return super().prompt(prompt_name)
        prompts = self.model.prompts
        if prompt_name is None and task in ("query", "document"):
            prompt_name = side_prompts(prompts)[task]
        return self.model.prompt(prompt_name)

    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        if isinstance(self.model, SparseEncoder):
            vectors = self._encoder_vectors(items, params)
        elif hasattr(self.model, "lexical_weights"):
            vectors = self._lexical_vectors(items, params)
        else:
            return super().run(items, params)
        self.finite(*vectors)
        return [self._answer(vector, params) for vector in vectors]

    def _sorted(self, rows: list[dict], pad_values: dict[str, int], model: Any) -> list[np.ndarray]:
        """``model(batch)`` per row (numpy float32, in row order) over length-sorted padded batches."""
        @torch.inference_mode()
        def forward(batch_rows: list[dict]) -> list[np.ndarray]:
            batch = pad(batch_rows, pad_values, self.device)
            return list(model(batch).float().cpu().numpy())

        return run_sorted(rows, [len(row["input_ids"]) for row in rows], self.batch_size, forward,
                          max_tokens=self.batch_tokens)

    def _encoder_vectors(self, items: list[Any], params: dict[str, Any]) -> list[np.ndarray]:
        """A :class:`~bertkit.SparseEncoder`'s vectors: texts through its own ``encode`` (the route of ``task``,
        that side's prompt, ``max_active_dims``); token-id lists through the route as they are (no prompt)."""
        task, vectors = params["task"], [None] * len(items)
        texts = [i for i, item in enumerate(items) if isinstance(item, str)]
        if texts:
            encoded = self.model.encode([items[i] for i in texts], prompt=self.prompt(params["prompt_name"], task),
                                        task=task, batch_size=self.batch_size, batch_tokens=self.batch_tokens,
                                        show_progress_bar=False, convert_to_sparse_tensor=False)
            for i, vector in zip(texts, encoded):
                vectors[i] = vector.numpy()
        given = [i for i, vector in enumerate(vectors) if vector is None]
        if given:
            route, dims = self.model.route(task), self.model.max_active_dims
            pad_values = {"input_ids": route.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}
            rows = [self.id_row(items[i]) for i in given]
            out = self._sorted(rows, pad_values, lambda b: route(b["input_ids"], b["attention_mask"],
                                                                 b["token_type_ids"], dims))
            if dims is not None:
                out = list(keep_largest(torch.from_numpy(np.stack(out)), dims).numpy())
            for i, vector in zip(given, out):
                vectors[i] = vector
        return vectors

    def _lexical_vectors(self, items: list[Any], params: dict[str, Any]) -> list[np.ndarray]:
        """BGE-M3's lexical weights as vocabulary-sized vectors (:class:`~bertkit.BGEM3Lexical`'s definition)."""
        model, side = self.model, params["truncation_side"]
        texts = [item for item in items if isinstance(item, str)]
        encoded = iter(model.tokenizer(texts, truncation=True, max_length=self.max_length,
                                       truncation_side=side)["input_ids"] if texts else [])
        rows = []
        for item in items:
            ids = next(encoded) if isinstance(item, str) else None
            rows.append(self.id_row(item) if ids is None else
                        {"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)})
        pad_values = {"input_ids": model.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}
        weights = self._sorted(rows, pad_values, lambda b: model(b["input_ids"], b["attention_mask"]))
        vectors = []
        for row, w in zip(rows, weights):
            vector = np.zeros(model.bert.config.vocab_size, dtype=np.float32)
            for token, weight in model.lexical_weights(torch.from_numpy(w[:len(row["input_ids"])]),
                                                       row["input_ids"]).items():
                vector[int(token)] = weight
            vectors.append(vector)
        return vectors

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """SPLADE: ``max_l log(1 + relu(logits[b, l]))`` over real tokens, ``[B, V]`` float32."""
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])  # [B, L, V]
        weights = torch.log1p(torch.relu(logits.float()))
        weights = weights * batch["attention_mask"][..., None].to(weights.dtype)  # padding scores 0
        return weights.amax(dim=1)

    def postprocess(self, item: Any, features: list[dict], outputs: list[np.ndarray], params: dict) -> list:
        return self._answer(outputs[0], params)

    @staticmethod
    def _answer(vector: np.ndarray, params: dict[str, Any]) -> list:
        """``output="sparse"``: the non-zero entries ``[{"index", "value"}]`` by index; else the whole vector
        (L2-normalised with ``normalize``)."""
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
