"""The model behind the routes: its pipelines, input limit, tokenization threads, batcher and health.

One :class:`Service` per server process. Inputs are counted and cut on a pool of tokenization threads
(:mod:`bertkit.serving.inputs`), then queued on the :class:`~bertkit.serving.batcher.DynamicBatcher`, whose
model thread runs the pipeline. The pipelines refuse non-finite model outputs, and the model is probed once at
start, so a checkpoint holding NaN fails to start instead of serving ``null`` vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bertkit.serving.batcher import DynamicBatcher
from bertkit.serving.errors import ServeError
from bertkit.serving.inputs import Prepared, count_tokens, prepare
from bertkit.serving.metrics import Metrics
from bertkit.serving.settings import PIPELINE_TASKS, ServeSettings, resolve_task, trained_length
from bertkit.tasks.table import rows_with_route, served_tasks

#: text-embeddings-inference's refusal of ``normalize`` for a SPLADE model (``/embed`` by default, and the OpenAI
#: route, which always normalises): its words, then what to send instead
SPLADE_NORMALIZE = "Backend error: `normalize` is not available for SPLADE models"

#: forward passes inside a dynamic batch (the pipeline sorts it by length first): at most this many rows and
#: padded tokens. On 2 CPU cores ~1,000 padded tokens per pass ran 1.2x faster than 16,384 and 1.8x faster
#: than one unbounded pass over mixed 3-200-token texts (all-MiniLM-L6-v2); GPUs want larger passes.
FORWARD_BATCH, FORWARD_TOKENS = 64, {"cpu": 1024, "cuda": 16384}


class Service:
    """See the module doc. ``pipes["main"]`` answers the task; ``pipes["sparse"]`` sparse vectors where the model
    has them: a sentence-transformers sparse encoder (SPLADE, inference-free, CSR: then it is the main pipeline
    too, and ``splade`` is set), a masked-LM head (``--pooling splade``, or a fill-mask model), or BGE-M3's lexical
    weights beside its dense vectors. ``sparse``: the kind (:data:`bertkit.tasks.sources.SPARSE_KINDS`), or None.
    ``pipes["colbert"]``: token vectors after a projection, scored by MaxSim, where the model has them (a ColBERT
    directory: then it is the main pipeline; BGE-M3's ``colbert_linear.pt``); ``multi_vector``: the kind
    (:data:`bertkit.tasks.sources.MULTI_VECTOR_KINDS`), or None. ``static``: a static model's kind
    (:data:`bertkit.tasks.sources.STATIC_KINDS`: its pipeline is
    :class:`~bertkit.pipelines.static_embeddings.StaticEmbeddingsPipeline`), or None. ``index``: the multi-vector
    index ``/search`` searches (``--index``), or None."""

    def __init__(self, settings: ServeSettings):
        import torch

        from bertkit.modeling.text import resolve_device
        from bertkit.pipelines import pipeline
        from bertkit.pipelines.embeddings import SparseEmbeddingsPipeline
        from bertkit.serving.late_interaction import open_index
        from bertkit.tasks.sources import SPARSE_ENCODERS, inspect_source

        self.settings = settings
        if settings.workers > 1:  # N processes share the cores: each takes its part, not all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // settings.workers))
        self.task = resolve_task(settings.model, settings.task, settings.pooling)
        held = inspect_source(settings.model)
        self.sparse = held.sparse if self.task == "embeddings" else None
        self.multi_vector = held.multi_vector if self.task in ("embeddings", "colbert") else None
        self.static = held.static if self.task == "embeddings" else None
        if settings.index is not None and self.task != "colbert":
            raise ValueError(f"--index: {settings.name} is served as {self.task}; a multi-vector index is searched "
                             "with the ColBERT model that built it (give that model, or leave --index out).")
        if settings.pooling is not None and self.task != "embeddings":
            raise ValueError(f"--pooling applies to embeddings; this server runs {self.task}.")
        if settings.pooling is not None and self.static:
            raise ValueError(f"--pooling: {settings.name} is a static model ({self.static}), which averages its "
                             "tokens' vectors; it has no pooling to choose: leave --pooling out.")
        if settings.pooling is not None and self.sparse in SPARSE_ENCODERS:
            raise ValueError(f"--pooling: {settings.name} is a sentence-transformers sparse encoder ({self.sparse}) "
                             "whose own modules pool; leave --pooling out.")
        if settings.pooling == "splade" and self.sparse == "bge-m3":
            raise ValueError(f"--pooling splade: {settings.name} is a BGE-M3 directory without a masked-LM head; its "
                             "lexical weights are served on /embed_sparse as it is: leave --pooling splade out.")
        if settings.pooling == "splade":
            self.sparse = "splade"
        self.splade = self.sparse in SPARSE_ENCODERS
        device = resolve_device(settings.device) if settings.device else torch.device("cpu")
        self.device = device
        name = "sparse-embeddings" if self.splade else PIPELINE_TASKS[self.task]
        defaults = {"pooling": settings.pooling} if self.task == "embeddings" and not self.splade \
            and settings.pooling else {}
        if settings.adapter is not None:  # Jina v3's task adapter, merged when the model loads
            defaults["load"] = {"task": settings.adapter}
        self.pipe = pipeline(name, model=settings.model, device=device, dtype=settings.dtype, batch_size=FORWARD_BATCH,
                             batch_tokens=FORWARD_TOKENS.get(device.type), **defaults)
        self.pipes = {"main": self.pipe}
        if self.splade:
            self.pipes["sparse"] = self.pipe
        elif self.sparse == "bge-m3":  # the lexical weights, beside the dense vectors of the main pipeline
            self.pipes["sparse"] = pipeline("sparse-embeddings", model=settings.model, device=device,
                                            dtype=settings.dtype, batch_size=FORWARD_BATCH,
                                            batch_tokens=FORWARD_TOKENS.get(device.type))
        elif self.task == "fill-mask":  # the same masked-LM head gives SPLADE vectors
            self.sparse = "splade"
            self.pipes["sparse"] = SparseEmbeddingsPipeline(self.pipe.model, self.pipe.tokenizer, dtype=None,
                                                            batch_size=FORWARD_BATCH,
                                                            batch_tokens=FORWARD_TOKENS.get(device.type))
        self.zero_shot_refusal = None
        if self.task == "classify":
            self._zero_shot()
        self.index = None
        if self.task == "colbert":
            self.pipes["colbert"] = self.pipe
        elif self.multi_vector == "bge-m3" and self.sparse == "bge-m3":
            self._bge_m3_colbert()
        self.max_input_length = self._input_limit()
        for pipe in self.pipes.values():
            pipe.max_length = self.max_input_length
            pipe.check_finite = settings.name  # a NaN or inf output is an error naming the model
        self.tokenizer = self.pipe.tokenizer
        self.metrics = Metrics()
        self.tokenizing = ThreadPoolExecutor(settings.tokenizers, thread_name_prefix="bertkit-tokenize")
        self.batcher = DynamicBatcher(self._run, max_batch_tokens=settings.max_batch_tokens,
                                      max_concurrent_requests=settings.max_concurrent_requests, metrics=self.metrics)
        self.probe()
        if settings.index is not None:  # after the probe: a broken model is named before the index is read
            self.index = open_index(settings.index, settings.model, self.pipe.dimension)

    def _bge_m3_colbert(self) -> None:
        """BGE-M3's ColBERT vectors (``/embed_all``) from the encoder its lexical weights already load: its
        ``colbert_linear.pt`` put beside the token-weight layer, so the XLM-R weights are held once for both."""
        from bertkit.pipelines.multi_vector import MultiVectorPipeline
        from bertkit.sentence.bge_m3 import load_linear
        from bertkit.tasks.sources import COLBERT_LINEAR

        encoder = self.pipes["sparse"].model
        linear = load_linear(self.settings.model, COLBERT_LINEAR, encoder.bert.config.hidden_size)
        encoder.colbert_linear = linear.to(encoder.device)
        self.pipes["colbert"] = MultiVectorPipeline(encoder, encoder.tokenizer, dtype=None, batch_size=FORWARD_BATCH,
                                                    batch_tokens=FORWARD_TOKENS.get(self.device.type))

    def _zero_shot(self) -> None:
        """Zero-shot classification (HF's Inference API on ``POST /``) by the served classifier, where its labels name
        an entailment class; otherwise why not, said to a zero-shot request (:attr:`zero_shot_refusal`)."""
        from bertkit.pipelines.zero_shot import ZeroShotClassificationPipeline

        try:
            self.pipes["zero-shot"] = ZeroShotClassificationPipeline(
                self.pipe.model, self.pipe.tokenizer, dtype=None, batch_size=FORWARD_BATCH,
                batch_tokens=FORWARD_TOKENS.get(self.device.type))
        except ValueError as error:
            self.zero_shot_refusal = str(error)

    def _input_limit(self) -> int:
        """``--max-input-length``, else the length the model was fine-tuned at (a reranker: saved with), at most
        what it takes, else what it takes."""
        takes = self.pipe.max_length
        trained = trained_length(self.settings.model, self.task, self.pipe.tokenizer)
        wanted = self.settings.max_input_length or min(trained or takes, takes)
        if wanted > takes:
            raise ValueError(f"max_input_length {wanted} is more than the model takes ({takes} positions).")
        return wanted

    # ------------------------------------------------------------------------------------------- the model
    def probe(self) -> None:
        """Run the model once on a short input: a checkpoint that answers NaN or fails stops the start here."""
        probe = served_tasks()[self.task].serve.probe
        probe = probe.replace("[MASK]", self.tokenizer.mask_token) if isinstance(probe, str) and "[MASK]" in probe \
            else probe  # a static model's tokenizer has no mask token
        try:
            self._answers("main", [probe], {})
        except ServeError as error:
            raise ValueError(f"{self.settings.model} cannot be served: {error}") from None

    def _answers(self, pipe: str, items: list[Any], params: dict[str, Any]) -> list[Any]:
        from bertkit.pipelines.base import NonFiniteOutput

        pipeline = self.pipes[pipe]
        try:
            return pipeline.run(items, pipeline.check({**pipeline.params, **params}))
        except NonFiniteOutput as error:
            raise ServeError(500, str(error), "Backend") from None

    def _run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """The pipeline on a batch (on the model thread); if one input is refused, each input alone, so only its
        request fails."""
        params = dict(params)
        pipe = params.pop("pipe")
        try:
            return self._answers(pipe, items, params)
        except ValueError:
            pass
        answers: list[Any] = []
        for item in items:
            try:
                answers.append(self._answers(pipe, [item], params)[0])
            except ValueError as error:
                answers.append(error)
        return answers

    # ------------------------------------------------------------------------------------------ a request
    def serves(self, route: str) -> None:
        """424 (TEI's answer) unless this server answers ``route`` (a route of its task's row of the task table, or
        of a row no server runs on its own, SPLADE vectors, where it has the sparse pipeline); 429 / 503 when no
        request can be queued."""
        owners = rows_with_route(route)
        tasks = [row.serve.name for row in owners if row.serve is not None]
        sparse = any(row.serve is None for row in owners)
        dense = ("/embed", "/v1/embeddings", "/embeddings")  # a SPLADE model's dense routes (the last two refuse it)
        if (sparse and "sparse" not in self.pipes) or (not sparse and self.task not in tasks) or \
                (self.splade and not sparse and route not in dense):
            wants = "a model with a masked-LM head (--pooling splade, or a fill-mask model)" if sparse else \
                " or ".join(tasks)
            raise ServeError(424, f"{route} needs {wants}; this server runs {self.task}"
                                  f"{' with SPLADE pooling' if self.splade else ''} ({self.settings.name}). See /info.")
        self.batcher.admit()

    def check_batch(self, inputs: list[Any], field: str = "inputs", extra: int = 0) -> None:
        """400 ``Empty`` for no input, 413 for more than ``--max-client-batch-size``."""
        if not inputs:
            raise ServeError(400, f"{field} is empty: send at least one input.", "Empty", param=field)
        if len(inputs) + extra > self.settings.max_client_batch_size:
            raise ServeError(413, f"{len(inputs) + extra} inputs in one request; the limit "
                                  f"(--max-client-batch-size) is {self.settings.max_client_batch_size}.",
                             "Validation", param=field)

    def truncation(self, truncate: bool | None) -> bool:
        """A request's ``truncate``, the server's ``--auto-truncate`` when it sends none."""
        return self.settings.auto_truncate if truncate is None else truncate

    async def prepare(self, inputs: list[Any], truncate: bool | None, side: str = "right", *, prefix: str = "",
                      field: str = "inputs", first: str | None = None, limit: bool = True) -> Prepared:
        """The inputs counted and cut on a tokenization thread (:func:`bertkit.serving.inputs.prepare`;
        ``limit=False``: counted only, the QA pipeline windows long contexts itself)."""
        if not limit:
            return await self.offload(lambda: Prepared(inputs, count_tokens(self.tokenizer, inputs)))
        return await self.offload(lambda: prepare(inputs, tokenizer=self.tokenizer, limit=self.max_input_length,
                                                  truncate=self.truncation(truncate), side=side, prefix=prefix,
                                                  field=field, first=first))

    async def offload(self, work: Any) -> Any:
        """``work()`` on a tokenization thread: the event loop keeps answering meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.tokenizing, work)

    async def answer(self, prepared: Prepared, params: dict[str, Any], pipe: str = "main") -> list[Any]:
        answers = await self.batcher.submit(prepared.items, prepared.tokens, {**params, "pipe": pipe})
        for answer in answers:
            if isinstance(answer, ValueError):
                raise ServeError(422, str(answer), "Validation")
        return answers

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any):
        await self.batcher.start()
        try:
            yield
        finally:
            await self.batcher.close()  # requests in flight are answered first
            self.tokenizing.shutdown(wait=False)

    # ----------------------------------------------------------------------------------------------- /info
    def info(self) -> dict[str, Any]:
        """text-embeddings-inference's ``/info`` (every field of its schema), and bertkit's ``task`` / ``labels``
        ``dtype`` (what ``--dtype`` asked, what runs and why) and ``numerics`` (device, precision, float32 GEMM
        backend and why, threads: the numbers' provenance)."""
        from importlib.metadata import PackageNotFoundError, version

        from bertkit.modeling import numerics
        from bertkit.serving.late_interaction import multi_vector_info

        try:
            installed = version("bertkit")
        except PackageNotFoundError:  # run from a source tree
            installed = "unknown"
        served = served_tasks()[self.task].serve
        labels = None
        if served.labels:
            config = _config(self.pipe.model)
            id2label = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
            labels = {"id2label": {str(i): name for i, name in id2label.items()},
                      "label2id": {name: int(i) for i, name in id2label.items()}}
        model_type = {served.info_key: {"pooling": self.pooling()} if self.task in ("embeddings", "colbert")
                      else labels or {}}
        sparse = self.sparse_info()
        choice = self.pipe.dtype_choice
        return {"model_id": self.settings.name, "model_sha": None, "model_dtype": choice.torch_name,
                "served_model_name": self.settings.name,
                "model_type": model_type, "max_concurrent_requests": self.settings.max_concurrent_requests,
                "max_input_length": self.max_input_length, "max_batch_tokens": self.settings.max_batch_tokens,
                "max_batch_requests": None, "max_client_batch_size": self.settings.max_client_batch_size,
                "auto_truncate": self.settings.auto_truncate, "tokenization_workers": self.settings.tokenizers,
                "version": installed, "sha": None, "docker_label": None, "task": self.task,
                "labels": list(labels["id2label"].values()) if labels and self.task != "rerank" else None,
                "dtype": choice.as_dict(), "numerics": numerics.describe(self.device, choice.name),
                **({"sparse": sparse} if sparse else {}),
                **({"static": {"kind": self.static, "dimensions": self.pipe.dimension,
                               "vocabulary": len(self.tokenizer)}} if self.static else {}),
                **({"multi_vector": multi_vector_info(self)} if "colbert" in self.pipes else {})}

    def sparse_info(self) -> dict[str, Any] | None:
        """``/info``'s ``sparse`` (bertkit's): the kind, the vectors' size, ``max_active_dims``, and for a Router
        its routes, its default and the routes that run no model (``static``: an inference-free query side)."""
        from bertkit.sentence.sparse import SparseEncoder

        if "sparse" not in self.pipes:
            return None
        model = self.pipes["sparse"].model
        if not isinstance(model, SparseEncoder):
            size = model.bert.config.vocab_size if self.sparse == "bge-m3" else _config(model).vocab_size
            return {"kind": self.sparse, "dimensions": size, "max_active_dims": None, "routes": None,
                    "default_route": None, "static_routes": []}
        routed = bool(model.layout.routes)
        return {"kind": self.sparse, "dimensions": model.get_sentence_embedding_dimension(),
                "max_active_dims": model.max_active_dims, "routes": sorted(model.routes) if routed else None,
                "default_route": model.default_route if routed else None,
                "static_routes": sorted(name for name, side in model.layout.routes.items() if side.static)}

    def side(self, task: str | None) -> tuple[Any, bool]:
        """``(tokenizer, adds special tokens)`` of the side ``task`` names (``/tokenize``'s ``task``): a Router's
        route (an inference-free query side weighs its tokens without special tokens), else the model's own; 422
        for a task on a model without sides or a route the model lacks."""
        from bertkit.sentence.sparse import SparseEncoder

        model = self.pipes["sparse"].model if "sparse" in self.pipes else None
        if task is None:
            return self.tokenizer, True
        if not isinstance(model, SparseEncoder):
            if self.sparse is None:
                raise ServeError(422, f"task: {task!r} picks a side of a sparse model; this server runs "
                                      f"{self.task} ({self.settings.name}): leave task out.", param="task")
            return self.tokenizer, True  # one model for both sides
        try:
            route = model.route(task)
        except ValueError as error:
            raise ServeError(422, f"task: {error}", param="task") from None
        static = model.layout.routes[task].static if model.layout.routes else False
        return route.tokenizer, not static

    def pooling(self) -> str:
        """TEI's name of the embedding pooling: ``splade``, the sentence-transformers module's mode, or mean."""
        from bertkit.sentence.model import SentenceTransformer

        if self.splade:
            return "csr" if self.sparse == "csr" else "splade"
        if self.task == "colbert":  # one vector per scored token (bertkit's name; TEI has no ColBERT pooling)
            return "colbert"
        if self.settings.pooling:
            return self.settings.pooling
        if isinstance(self.pipe.model, SentenceTransformer):
            return "+".join(self.pipe.model.pooling.modes)
        return "mean"


def _config(model: Any) -> Any:
    return getattr(model, "config", None) or model.bert.config
