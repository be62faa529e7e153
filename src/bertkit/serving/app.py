"""``bertkit serve``'s ASGI app: text-embeddings-inference's routes, OpenAI's ``/v1/embeddings``, ``/ner``,
``/qa``, ``/fill-mask``, Prometheus ``/metrics`` and a page at ``/`` (the contract: ``CONTRACT.md`` beside this
file), answered by one pipeline through the :class:`~bertkit.serving.batcher.DynamicBatcher`.

:func:`create_app` builds it for a model; :func:`app_from_environment` builds it from the settings ``bertkit
serve --workers N`` hands its worker processes. Errors are JSON ``{"error", "error_type"}`` with the status
codes of the contract; nothing a client sends stops the server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from bertkit.serving import schemas
from bertkit.serving.batcher import DynamicBatcher, Overloaded, ShuttingDown
from bertkit.serving.metrics import Metrics
from bertkit.serving.settings import PIPELINE_TASKS, ServeSettings, resolve_task

logger = logging.getLogger("bertkit.serve")
STATIC = Path(__file__).parent / "static"
ENVIRONMENT = "BERTKIT_SERVE_SETTINGS"
#: the largest request body taken (a client's 32 inputs of 512 tokens are ~0.1 MB); beyond: 413
MAX_BODY_BYTES = 16 * 1024 * 1024
#: routes anyone may call when an API key is set
PUBLIC = ("/", "/health", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/static")
#: forward passes inside a dynamic batch (the pipeline sorts it by length first): at most this many rows and
#: padded tokens. On 2 CPU cores ~1,000 padded tokens per pass ran 1.2x faster than 16,384 and 1.8x faster
#: than one unbounded pass over mixed 3-200-token texts (all-MiniLM-L6-v2); GPUs want larger passes.
FORWARD_BATCH, FORWARD_TOKENS = 64, {"cpu": 1024, "cuda": 16384}


class ServeError(Exception):
    """An answer other than 200: ``status``, ``error_type``, a message that says what to change."""

    def __init__(self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.error_type, self.headers = status, error_type, headers


class Service:
    """The model behind the routes: its pipeline, limits, token counting and batcher."""

    def __init__(self, settings: ServeSettings):
        import torch

        from bertkit.modeling.text import resolve_device
        from bertkit.pipelines import pipeline

        self.settings = settings
        if settings.workers > 1:  # N processes share the cores: each takes its part, not all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // settings.workers))
        self.task = resolve_task(settings.model, settings.task)
        dtype = torch.bfloat16 if settings.dtype == "bf16" else None
        device = resolve_device(settings.device) if settings.device else torch.device("cpu")
        self.pipe = pipeline(PIPELINE_TASKS[self.task], model=settings.model, device=device, dtype=dtype,
                             batch_size=FORWARD_BATCH, batch_tokens=FORWARD_TOKENS.get(device.type))
        self.tokenizer = self.pipe.tokenizer
        self.max_input_length = self.pipe.max_length
        self.metrics = Metrics()
        self.batcher = DynamicBatcher(self._run, max_batch_tokens=settings.max_batch_tokens,
                                      max_concurrent_requests=settings.max_concurrent_requests, metrics=self.metrics)

    def _run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """The pipeline on a batch; if one input is refused, each input alone, so only its request fails."""
        params = self.pipe.check({**self.pipe.params, **params})
        try:
            return self.pipe.run(items, params)
        except ValueError:
            pass
        answers: list[Any] = []
        for item in items:
            try:
                answers.append(self.pipe.run([item], params)[0])
            except ValueError as error:
                answers.append(error)
        return answers

    async def answer(self, items: list[Any], tokens: list[int], params: dict[str, Any]) -> list[Any]:
        answers = await self.batcher.submit(items, tokens, params)
        for answer in answers:
            if isinstance(answer, ValueError):
                raise ServeError(422, "Validation", str(answer))
        return answers

    def serves(self, task: str, route: str) -> None:
        """400 unless this server's task answers ``route``; 429 / 503 when no request can be queued now."""
        self.batcher.admit()
        if self.task != task:
            raise ServeError(400, "Task", f"this server runs {self.task}, which {route} does not answer; "
                                          f"see /info and the routes in /docs.")

    def check_batch(self, inputs: list[Any], field: str = "inputs") -> None:
        """413 for more inputs than ``--max-client-batch-size``, 422 for none."""
        if len(inputs) > self.settings.max_client_batch_size:
            raise ServeError(413, "Batch too large", f"{len(inputs)} inputs in one request; the limit "
                             f"(--max-client-batch-size) is {self.settings.max_client_batch_size}.")
        if not inputs:
            raise ServeError(422, "Validation", f"{field} is empty: send at least one input.")

    def count(self, texts: list[Any], truncate: bool, limit: bool = True) -> list[int]:
        """Token counts of ``texts`` (strings or pairs); 413 past the input limit unless ``truncate``."""
        self.check_batch(texts)
        if all(isinstance(t, str) for t in texts):
            counts = [len(ids) for ids in self.tokenizer(texts)["input_ids"]]
        else:  # pairs, perhaps mixed with single texts
            counts = [len(self.tokenizer(t if isinstance(t, str) else t[0],
                                         None if isinstance(t, str) else t[1])["input_ids"]) for t in texts]
        if limit and not truncate:
            for i, n in enumerate(counts):
                if n > self.max_input_length:
                    raise ServeError(413, "Input too long", f"input {i} has {n} tokens; the model takes "
                                     f"{self.max_input_length} (max_input_length). Shorten it or send "
                                     "\"truncate\": true.")
        return [min(n, self.max_input_length) for n in counts] if limit else counts

    def tokens(self, text: str, add_special_tokens: bool) -> list[dict[str, Any]]:
        """text-embeddings-inference's ``/tokenize`` answer for one text: ``{"id", "text", "special", "start",
        "stop"}`` per token; ``text`` the characters it covers (a special token's own string, with no span)."""
        encoded = self.tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                                 return_special_tokens_mask=True)
        names = self.tokenizer.convert_ids_to_tokens(encoded["input_ids"])
        return [{"id": i, "text": name if special else text[start:stop], "special": bool(special),
                 "start": None if special else start, "stop": None if special else stop}
                for i, name, special, (start, stop) in zip(encoded["input_ids"], names, encoded["special_tokens_mask"],
                                                           encoded["offset_mapping"])]

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI):
        await self.batcher.start()
        try:
            yield
        finally:
            await self.batcher.close()  # requests in flight are answered first

    def info(self) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("bertkit")
        except PackageNotFoundError:  # run from a source tree
            installed = "unknown"
        config = getattr(self.pipe.model, "config", None) or self.pipe.model.bert.config
        labels = list(config.id2label.values()) if self.task in ("classify", "ner") and config.id2label else None
        return {"model_id": self.settings.model, "task": self.task, "model_dtype": {"fp32": "float32",
                "bf16": "bfloat16"}[self.settings.dtype], "max_concurrent_requests":
                self.settings.max_concurrent_requests, "max_input_length": self.max_input_length,
                "max_batch_tokens": self.settings.max_batch_tokens, "max_client_batch_size":
                self.settings.max_client_batch_size, "version": installed, "labels": labels}


def create_app(model: str | os.PathLike, task: str = "auto", **settings: Any) -> FastAPI:
    """The app serving ``model`` (anything bertkit loads) for ``task`` (``auto``: what the model holds); the
    other ``settings`` are :class:`ServeSettings`' fields."""
    service = Service(ServeSettings(model=os.fspath(model), task=task, **settings).check())
    app = FastAPI(title="bertkit serve", summary=f"{service.task}: {service.settings.model}",
                  lifespan=service.lifespan)
    app.state.service = service
    _errors(app)
    _middleware(app, service)
    _routes(app, service)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def app_from_environment() -> FastAPI:
    """The app of the settings in ``BERTKIT_SERVE_SETTINGS`` (JSON): each ``--workers`` process builds its own."""
    settings = json.loads(os.environ[ENVIRONMENT])
    return create_app(settings.pop("model"), **settings)


def _error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": error_type}, status_code=status, headers=headers)


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ServeError)
    async def serve_error(request: Request, error: ServeError):
        return _error(error.status, error.error_type, str(error), error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        problems = []
        for e in error.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {e.get('msg', 'invalid')}")
        return _error(422, "Validation", "; ".join(problems[:5]))

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded):
        return _error(429, "Overloaded", str(error), {"Retry-After": "1"})

    @app.exception_handler(ShuttingDown)
    async def stopping(request: Request, error: ShuttingDown):
        return _error(503, "Unavailable", str(error), {"Retry-After": "5"})

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return _error(error.status_code, "HTTP", str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def backend(request: Request, error: Exception):
        logger.exception("model failure on %s", request.url.path)
        return _error(500, "Backend", f"the model failed on this request: {type(error).__name__}: {error}")


def _middleware(app: FastAPI, service: Service) -> None:
    app.add_middleware(_Gate, service=service)


class _Gate:
    """Every HTTP request passes here first (a plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` costs a
    task group and a body stream per request): 401 without the API key (but on the public routes), 413 for a
    body over :data:`MAX_BODY_BYTES` before it is read, then the route; each answer is counted in the metrics."""

    def __init__(self, app: Any, service: Service):
        self.app, self.service = app, service
        self.authorization = None if service.settings.api_key is None else f"Bearer {service.settings.api_key}"

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, path, status = time.perf_counter(), scope["path"], 500
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k in (b"authorization", b"content-length")}
        size = headers.get("content-length", "0")
        public = path == "/" or any(path == p or path.startswith(p + "/") for p in PUBLIC[1:])

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        answer = self.app
        if self.authorization is not None and not public and headers.get("authorization") != self.authorization:
            answer = _error(401, "Unauthorized", "missing or wrong API key: send 'Authorization: Bearer <key>'.")
        elif not size.isdigit() or int(size) > MAX_BODY_BYTES:
            answer = _error(413, "Payload too large", f"the request body is {size} bytes; the limit is "
                            f"{MAX_BODY_BYTES} bytes: send fewer or shorter inputs per request.")
        try:
            await answer(scope, receive, sending)
        finally:
            if path != "/metrics":
                self.service.metrics.request(path, status, time.perf_counter() - start)


def _routes(app: FastAPI, service: Service) -> None:
    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return service.info()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return service.metrics.render()

    @app.post("/embed")
    async def embed(body: schemas.EmbedRequest) -> list[list[float]]:
        service.serves("embeddings", "/embed")
        texts = _listed(body.inputs)
        return await service.answer(texts, service.count(texts, body.truncate), {"normalize": body.normalize})

    @app.post("/v1/embeddings")
    async def openai_embeddings(body: schemas.OpenAIEmbeddingsRequest) -> dict[str, Any]:
        service.serves("embeddings", "/v1/embeddings")
        texts = _listed(body.input)
        tokens = service.count(texts, truncate=True)
        vectors = await service.answer(texts, tokens, {"normalize": None})
        data = [{"object": "embedding", "index": i,
                 "embedding": v if body.encoding_format == "float" else
                 base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")}
                for i, v in enumerate(vectors)]
        return {"object": "list", "data": data, "model": body.model or service.settings.model,
                "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}}

    @app.post("/predict")
    async def predict(body: schemas.PredictRequest) -> list:
        service.serves("classify", "/predict")
        single, items = _predict_inputs(body.inputs)
        texts = [item if isinstance(item, str) else (item["text"], item["text_pair"]) for item in items]
        params = {"top_k": None, "function_to_apply": "none" if body.raw_scores else None}
        answers = await service.answer(items, service.count(texts, body.truncate), params)
        return answers[0] if single else answers

    @app.post("/rerank")
    async def rerank(body: schemas.RerankRequest) -> list[dict[str, Any]]:
        service.serves("rerank", "/rerank")
        pairs = [(body.query, text) for text in body.texts]
        logits = await service.answer(pairs, service.count(pairs, body.truncate), {})
        ranked = [{"index": i, "score": service.pipe.score(v, body.raw_scores)} for i, v in enumerate(logits)]
        if body.return_text:
            for r in ranked:
                r["text"] = body.texts[r["index"]]
        return sorted(ranked, key=lambda r: r["score"], reverse=True)

    @app.post("/ner")
    async def ner(body: schemas.NerRequest) -> list:
        service.serves("ner", "/ner")
        texts = _listed(body.inputs)
        answers = await service.answer(texts, service.count(texts, body.truncate),
                                       {"aggregation_strategy": body.aggregation_strategy})
        return _as_sent(body.inputs, answers)

    @app.post("/qa")
    async def qa(body: schemas.QARequest) -> Any:
        service.serves("qa", "/qa")
        if body.inputs is None and (body.question is None or body.context is None):
            raise ServeError(422, "Validation", 'send "question" and "context", or "inputs": [{"question", '
                                                '"context"}, ...].')
        items = [{"question": body.question, "context": body.context}] if body.inputs is None else \
            [p.model_dump() for p in body.inputs]
        tokens = service.count([(i["question"], i["context"]) for i in items], truncate=True, limit=False)
        params = {"top_k": body.top_k, "max_answer_len": body.max_answer_len,
                  "handle_impossible_answer": body.handle_impossible_answer}
        answers = await service.answer(items, tokens, params)
        return answers[0] if body.inputs is None else answers

    @app.post("/tokenize")
    async def tokenize(body: schemas.TokenizeRequest) -> list[list[dict[str, Any]]]:
        texts = _listed(body.inputs)
        service.check_batch(texts)
        return [service.tokens(text, body.add_special_tokens) for text in texts]

    @app.post("/decode")
    async def decode(body: schemas.DecodeRequest) -> list[str]:
        batch = [body.ids] if not body.ids or isinstance(body.ids[0], int) else body.ids
        service.check_batch(batch, "ids")
        try:
            return [service.tokenizer.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in batch]
        except ValueError as error:  # ids outside the vocabulary, named
            raise ServeError(422, "Validation", f"ids: {error}") from None

    @app.post("/fill-mask")
    async def fill_mask(body: schemas.FillMaskRequest) -> list:
        service.serves("fill-mask", "/fill-mask")
        texts = _listed(body.inputs)
        answers = await service.answer(texts, service.count(texts, body.truncate), {"top_k": body.top_k})
        return _as_sent(body.inputs, answers)


def _listed(inputs: str | list) -> list:
    """A route's ``inputs``: one text becomes a list of one."""
    return [inputs] if isinstance(inputs, str) else inputs


def _as_sent(inputs: str | list, answers: list) -> Any:
    """The answers shaped as the inputs came: one text's answer bare, a list's as a list."""
    return answers[0] if isinstance(inputs, str) else answers


def _predict_inputs(inputs: str | list) -> tuple[bool, list[Any]]:
    """text-embeddings-inference's ``inputs``: a text, a pair ``["a", "b"]``, or a batch of ``[text]`` /
    ``[a, b]`` lists -> (single?, pipeline items)."""
    def item(sequence: str | list[str]) -> Any:
        if isinstance(sequence, str):
            return sequence
        if len(sequence) == 1:
            return sequence[0]
        if len(sequence) == 2:
            return {"text": sequence[0], "text_pair": sequence[1]}
        raise ServeError(422, "Validation", f"inputs: a sequence has one text or a pair of two, got {len(sequence)}.")

    if isinstance(inputs, str) or (inputs and all(isinstance(t, str) for t in inputs)):
        return True, [item(inputs)]
    return False, [item(sequence) for sequence in inputs]
