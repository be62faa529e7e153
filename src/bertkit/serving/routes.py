"""The routes (the contract: ``CONTRACT.md`` beside this file).

text-embeddings-inference's (``/embed``, ``/embed_all``, ``/embed_sparse``, ``/similarity``, ``/predict``,
``/rerank``, ``/tokenize``, ``/decode``, ``/info``, ``/health``, ``/metrics``), OpenAI's ``/v1/embeddings`` (and
TEI's alias ``/embeddings``), bertkit's ``/ner``, ``/qa``, ``/fill-mask``, and ``POST /``: the served task's route,
as TEI dispatches it, read the way HF's Inference API (``InferenceClient``) sends it when it carries
``parameters``. Every text route goes through :meth:`Service.prepare` (count, limit, truncation) and
:meth:`Service.answer` (the batcher); every body is read by :func:`~bertkit.serving.bodies.validated` and every
answer written by :func:`~bertkit.serving.bodies.respond` (off the event loop, bounded by --max-response-bytes).

A task's routes are the ones its row of the task table (:data:`bertkit.tasks.table.TABLE`) lists: each is a
small handler ``(service, body) -> Response`` in :data:`HANDLERS`, registered for every row that lists its path;
``POST /`` hands the body to the served task's handler in :data:`ROOT`.
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from pydantic import BaseModel

from bertkit.serving import late_interaction, schemas
from bertkit.serving.bodies import respond, validated
from bertkit.serving.errors import ServeError
from bertkit.serving.gate import PARSED
from bertkit.serving.inputs import CHARS_PER_TOKEN, Prepared
from bertkit.serving.service import SPLADE_NORMALIZE, Service
from bertkit.tasks.table import table_routes


@dataclass(frozen=True)
class Route:
    """A task route: its handler and what FastAPI documents of it."""

    handler: Callable[..., Awaitable[Response]]
    response_model: Any
    include_in_schema: bool = True


def add_routes(app: FastAPI, service: Service, static: Any) -> None:
    """Every server's routes (the page, health, info, metrics, tokenizer), those of every task of the task table
    (:data:`HANDLERS`; a ValueError names a listed route that no handler answers), and ``POST /``."""
    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(static / "index.html")

    @app.get("/health", response_class=Response)
    async def health() -> Response:
        """200 with an empty body while the server takes requests (TEI's answer); 503 while it stops."""
        if service.batcher.closing:
            raise ServeError(503, "the server is shutting down", "Unhealthy")
        return Response(status_code=200)

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return service.info()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return service.metrics.render()

    listed = table_routes()
    unanswered = [path for path in listed if path not in HANDLERS]
    if unanswered:
        raise ValueError(f"the task table lists the routes {unanswered}, which no handler answers: add them to "
                         "bertkit.serving.routes.HANDLERS.")
    for path, route in HANDLERS.items():  # in the handlers' order: /openapi.json lists the paths so
        if path in listed:
            app.post(path, response_model=route.response_model,
                     include_in_schema=route.include_in_schema)(_bound(route.handler, service))
    for path, route in ALWAYS.items():
        app.post(path, response_model=route.response_model)(_bound(route.handler, service))

    @app.post("/", summary="the served task's route (text-embeddings-inference), or HF's Inference API")
    async def root(request: Request) -> Response:
        parsed = request.scope.get(PARSED)
        data = None if parsed is None else parsed.value
        if not isinstance(data, dict):
            raise ServeError(422, "the body must be a JSON object.")
        parameters = data.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ServeError(422, "parameters must be an object.", param="parameters")

        async def read(model: type[BaseModel], fields: dict[str, Any]) -> Any:
            return await validated(model, fields, big=parsed.big, offload=service.offload)

        return await ROOT[service.task](service, data, parameters, read)


def _bound(handler: Callable[..., Awaitable[Response]], service: Service) -> Callable[..., Awaitable[Response]]:
    """``handler`` with ``service`` bound, as FastAPI reads an endpoint: the body parameter's type (and the
    handler's name, which names the operation) kept."""
    async def endpoint(body: Any) -> Response:
        return await handler(service, body)

    signature = inspect.signature(handler, eval_str=True)
    endpoint.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    endpoint.__name__ = endpoint.__qualname__ = handler.__name__
    return endpoint


async def _answer(service: Service, route: str, value: Any) -> Response:
    return await respond(value, route, limit=service.settings.max_response_bytes, offload=service.offload)


# ---------------------------------------------------------------------------------------------- embeddings
async def embed(service: Service, body: schemas.EmbedRequest) -> Response:
    service.serves("/embed")
    if not service.splade:
        vectors, _ = await _embed(service, body, {"normalize": body.normalize, "dimensions": body.dimensions})
        return await _answer(service, "/embed", vectors)
    if body.normalize:  # TEI's answer for a SPLADE model (normalize is true unless sent false)
        raise ServeError(424, f"{SPLADE_NORMALIZE}: send \"normalize\": false for the vocabulary-sized vector, or use "
                              "/embed_sparse.", "Backend", param="normalize")
    vectors, _ = await _embed(service, body, {"normalize": False}, "sparse")
    if body.dimensions is not None:  # TEI keeps the first dimensions of any vector
        if body.dimensions > len(vectors[0]):
            raise ServeError(422, f"dimensions {body.dimensions} is more than this model's {len(vectors[0])}: "
                                  "`dimensions` should be smaller than the maximum embedding dimension.",
                             param="dimensions")
        vectors = [v[:body.dimensions] for v in vectors]
    return await _answer(service, "/embed", vectors)


async def embed_all(service: Service, body: schemas.EmbedAllRequest) -> Response:
    service.serves("/embed_all")
    if "colbert" in service.pipes:  # a ColBERT's (or BGE-M3's) token vectors: after projection and skiplist
        return await late_interaction.embed_all(service, body)
    if body.task is not None:
        raise ServeError(422, f"task: {body.task!r} picks a side of a multi-vector model; this server runs "
                              f"{service.task} ({service.settings.name}): leave task out.", param="task")
    vectors, _ = await _embed(service, body, {"output": "tokens"})
    return await _answer(service, "/embed_all", vectors)


async def embed_sparse(service: Service, body: schemas.EmbedSparseRequest) -> Response:
    service.serves("/embed_sparse")
    vectors, _ = await _embed(service, body, {"output": "sparse", "task": body.task}, "sparse")
    return await _answer(service, "/embed_sparse", vectors)


async def similarity(service: Service, body: schemas.SimilarityRequest) -> Response:
    service.serves("/similarity")
    given = body.parameters or schemas.SimilarityParameters()
    request = schemas.EmbedRequest(inputs=[body.inputs.source_sentence, *body.inputs.sentences],
                                   normalize=True, truncate=given.truncate, prompt_name=given.prompt_name,
                                   truncation_direction=given.truncation_direction)
    if not body.inputs.sentences:
        raise ServeError(400, "inputs.sentences is empty: send at least one sentence.", param="inputs.sentences")
    vectors, _ = await _embed(service, request, {"normalize": True, "dimensions": None})
    matrix = np.asarray(vectors, dtype=np.float64)
    return await _answer(service, "/similarity", [float(s) for s in matrix[1:] @ matrix[0]])


async def openai_embeddings(service: Service, body: schemas.OpenAIEmbeddingsRequest) -> Response:
    service.serves("/v1/embeddings")
    if service.splade:  # TEI's OpenAI route normalises, which a SPLADE model refuses
        raise ServeError(424, f"{SPLADE_NORMALIZE}: this server runs a sparse model ({service.sparse}), whose "
                              "vectors are on /embed_sparse.", "Backend")
    request = schemas.EmbedRequest(inputs=body.input, dimensions=body.dimensions, truncate=body.truncate)
    vectors, prepared = await _embed(service, request, {"normalize": True, "dimensions": body.dimensions},
                                     field="input")
    data = [{"object": "embedding", "index": i,
             "embedding": v if body.encoding_format == "float" else
             base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")}
            for i, v in enumerate(vectors)]
    tokens = sum(prepared.tokens)
    return await _answer(service, "/v1/embeddings", {"object": "list", "data": data,
                                                     "model": body.model or service.settings.name,
                                                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


# ------------------------------------------------------------------------------------------ classification
async def predict(service: Service, body: schemas.PredictRequest) -> Response:
    service.serves("/predict")
    single, pairs = _predict_inputs(body.inputs)
    service.check_batch(pairs)
    prepared = await service.prepare(pairs, body.truncate, body.truncation_direction.lower())
    items = [p if isinstance(p, str) else {"text": p[0], "text_pair": p[1]} for p in prepared.items]
    params = {"top_k": None, "function_to_apply": "none" if body.raw_scores else None,
              "truncation_side": body.truncation_direction.lower()}
    answers = await service.answer(Prepared(items, prepared.tokens), params)
    return await _answer(service, "/predict", answers[0] if single else answers)


async def rerank(service: Service, body: schemas.RerankRequest) -> Response:
    service.serves("/rerank")
    if service.task == "colbert":  # scored by MaxSim
        return await late_interaction.rerank(service, body)
    service.check_batch(body.texts, "texts")
    prepared = await service.prepare([(body.query, text) for text in body.texts], body.truncate,
                                     body.truncation_direction.lower(), field="texts", first="query")
    logits = await service.answer(prepared, {"truncation_side": body.truncation_direction.lower(),
                                             "truncation": "longest_first"})  # TEI's cut of a pair
    ranked = [{"index": i, "score": service.pipe.score(v, body.raw_scores)} for i, v in enumerate(logits)]
    if body.return_text:
        for r in ranked:
            r["text"] = body.texts[r["index"]]
    return await _answer(service, "/rerank", sorted(ranked, key=lambda r: r["score"], reverse=True))


async def ner(service: Service, body: schemas.NerRequest) -> Response:
    service.serves("/ner")
    return await _answer(service, "/ner", await _texts(service, body.inputs, body.truncate,
                                                       {"aggregation_strategy": body.aggregation_strategy}))


async def qa(service: Service, body: schemas.QARequest) -> Response:
    service.serves("/qa")
    if body.inputs is None and (body.question is None or body.context is None):
        raise ServeError(422, 'send "question" and "context", or "inputs": [{"question", "context"}, ...].')
    items = [{"question": body.question, "context": body.context}] if body.inputs is None else \
        [p.model_dump() for p in body.inputs]
    service.check_batch(items)
    prepared = await service.prepare([(i["question"], i["context"]) for i in items], None, limit=False)
    params = {"top_k": body.top_k, "max_answer_len": body.max_answer_len,
              "handle_impossible_answer": body.handle_impossible_answer}
    answers = await service.answer(Prepared(items, prepared.tokens), params)
    return await _answer(service, "/qa", answers[0] if body.inputs is None else answers)


async def fill_mask(service: Service, body: schemas.FillMaskRequest) -> Response:
    service.serves("/fill-mask")
    return await _answer(service, "/fill-mask", await _texts(service, body.inputs, body.truncate,
                                                             {"top_k": body.top_k, "targets": body.targets}))


# ------------------------------------------------------------------------------------------------ tokenizer
async def tokenize(service: Service, body: schemas.TokenizeRequest) -> Response:
    texts = _listed(body.inputs)
    service.check_batch(texts)
    if service.task == "colbert":  # the tokens each side encodes, and which are scored
        return await _answer(service, "/tokenize", await service.offload(
            lambda: late_interaction.tokenize(service, body, texts)))
    tokenizer, special = service.side(body.task)  # an inference-free query side: its tokens, no special ones
    prefix = _prompt(service, "sparse" if body.task is not None else "main", body.prompt_name, body.task)
    cap = CHARS_PER_TOKEN * service.max_input_length
    for i, text in enumerate(texts):
        if len(prefix) + len(text) > cap:
            raise ServeError(422, f"inputs[{i}] has {len(text)} characters; /tokenize takes {cap} ("
                                  f"{CHARS_PER_TOKEN} per token of max_input_length {service.max_input_length}).",
                             param="inputs")
    # made one text at a time on the encoding thread: at most one text's tokens are held as dicts
    return await _answer(service, "/tokenize", (_tokens(tokenizer, prefix + t, body.add_special_tokens and special)
                                                for t in texts))


async def decode(service: Service, body: schemas.DecodeRequest) -> Response:
    batch = [body.ids] if not body.ids or isinstance(body.ids[0], int) else body.ids
    service.check_batch([ids for ids in batch if ids], "ids")
    skip = body.skip_special_tokens
    try:
        return await _answer(service, "/decode", (service.tokenizer.decode(ids, skip_special_tokens=skip)
                                                  for ids in batch))
    except ValueError as error:  # ids outside the vocabulary, named
        raise ServeError(422, f"ids: {error}", "Tokenizer", param="ids") from None


#: the handler of every route a row of the task table lists
HANDLERS: dict[str, Route] = {
    "/embed": Route(embed, list[list[float]]), "/embed_all": Route(embed_all, list[list[list[float]]]),
    "/embed_sparse": Route(embed_sparse, list[list[dict[str, Any]]]), "/similarity": Route(similarity, list[float]),
    "/v1/embeddings": Route(openai_embeddings, dict[str, Any]),
    "/embeddings": Route(openai_embeddings, None, include_in_schema=False),
    "/predict": Route(predict, list), "/rerank": Route(rerank, list[dict[str, Any]]), "/ner": Route(ner, list),
    "/qa": Route(qa, Any), "/fill-mask": Route(fill_mask, list),
    "/search": Route(late_interaction.search, list[list[dict[str, Any]]]),
}
#: the routes every server answers, whatever its task
ALWAYS: dict[str, Route] = {"/tokenize": Route(tokenize, list[list[dict[str, Any]]]),
                            "/decode": Route(decode, list[str])}


# ------------------------------------------------------------------------------------------------- POST /
Read = Callable[[type[BaseModel], dict[str, Any]], Awaitable[Any]]


async def _root_embeddings(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    if service.splade:
        return await embed_sparse(service, await read(schemas.EmbedSparseRequest,
                                                      _known(data, schemas.EmbedSparseRequest)))
    if isinstance(data.get("inputs"), dict):
        return await similarity(service, await read(schemas.SimilarityRequest, data))
    return await embed(service, await read(schemas.EmbedRequest, _known(data, schemas.EmbedRequest)))


async def _root_classify(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    if "parameters" not in data:  # TEI's /predict; with parameters, HF's Inference API
        return await predict(service, await read(schemas.PredictRequest, _known(data, schemas.PredictRequest)))
    if "candidate_labels" in parameters:  # HF's zero-shot-classification (an NLI model)
        given = await read(schemas.ZeroShotInference, data)
        return await _answer(service, "/", await _inference_zero_shot(service, given.inputs, given.parameters))
    given = await read(schemas.ClassifyInference, data)
    return await _answer(service, "/", await _inference_classify(service, given.inputs,
                                                                 given.parameters or schemas.ClassifyParameters()))


async def _root_rerank(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    return await rerank(service, await read(schemas.RerankRequest, _known(data, schemas.RerankRequest)))


async def _root_colbert(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    """TEI's ``POST /`` runs the served model's route: a ColBERT's is ``/embed_all`` (what HF's
    ``InferenceClient.feature_extraction`` reads), or ``/rerank`` for a body with ``query`` and ``texts``."""
    if "query" in data and "texts" in data:
        return await rerank(service, await read(schemas.RerankRequest, _known(data, schemas.RerankRequest)))
    given = {**_known(parameters, schemas.EmbedAllRequest), **_known(data, schemas.EmbedAllRequest)}
    return await embed_all(service, await read(schemas.EmbedAllRequest, given))


async def _root_fill_mask(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    return await fill_mask(service, await read(schemas.FillMaskRequest, {
        "inputs": data.get("inputs"), **_known(parameters, schemas.FillMaskRequest)}))


async def _root_ner(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    return await ner(service, await read(schemas.NerRequest, {"inputs": data.get("inputs"),
                                                              **_known(parameters, schemas.NerRequest)}))


async def _root_qa(service: Service, data: dict[str, Any], parameters: dict[str, Any], read: Read):
    inputs = data.get("inputs")
    given = inputs if isinstance(inputs, dict) else {"inputs": inputs}
    return await qa(service, await read(schemas.QARequest, {**given, **_known(parameters, schemas.QARequest)}))


#: served task (the task table's ``serve`` name) -> what ``POST /`` does with a body
ROOT = {"embeddings": _root_embeddings, "classify": _root_classify, "rerank": _root_rerank,
        "fill-mask": _root_fill_mask, "ner": _root_ner, "qa": _root_qa,
        "colbert": _root_colbert}


async def _embed(service: Service, body: Any, params: dict[str, Any], pipe: str = "main",
                 field: str = "inputs") -> tuple[list[Any], Any]:
    """Any embedding route: inputs listed, checked, prepared (prompt, limit, truncation), answered."""
    inputs = _listed(body.inputs)
    service.check_batch(inputs, field)
    side = body.truncation_direction.lower()
    prefix = _prompt(service, pipe, body.prompt_name, params.get("task"))
    prepared = await service.prepare(inputs, body.truncate, side, prefix=prefix, field=field)
    answers = await service.answer(prepared, {**params, "prompt_name": body.prompt_name, "truncation_side": side},
                                   pipe)
    return answers, prepared


async def _texts(service: Service, inputs: str | list[str], truncate: bool | None, params: dict[str, Any]) -> Any:
    """A text route of bertkit's own: the answer bare for one text, a list for a list."""
    texts = _listed(inputs)
    service.check_batch(texts)
    answers = await service.answer(await service.prepare(texts, truncate), params)
    return answers[0] if isinstance(inputs, str) else answers


async def _inference_classify(service: Service, inputs: Any, parameters: schemas.ClassifyParameters) -> list:
    """HF's Inference API text classification: a list of ``{label, score}`` per input, best first."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ServeError(422, "inputs must be a text or a list of texts.", param="inputs")
    service.check_batch(texts)
    prepared = await service.prepare(texts, parameters.truncate)
    return await service.answer(prepared, {"top_k": parameters.top_k,
                                           "function_to_apply": parameters.function_to_apply})


async def _inference_zero_shot(service: Service, inputs: str | list[str], parameters: schemas.ZeroShotParameters):
    """HF's Inference API zero-shot classification: ``[{label, score}]`` best first (a list of those per text for a
    list). Each text is scored with every label, so texts x labels count against --max-client-batch-size; the
    text is cut to fit beside its hypothesis, as HF's pipeline cuts it."""
    if "zero-shot" not in service.pipes:
        raise ServeError(422, f"candidate_labels: {service.zero_shot_refusal}", param="parameters.candidate_labels")
    texts = [inputs] if isinstance(inputs, str) else inputs
    params = {"candidate_labels": parameters.candidate_labels, "multi_label": bool(parameters.multi_label),
              "truncation_side": parameters.truncation_direction.lower()}
    if parameters.hypothesis_template is not None:
        params["hypothesis_template"] = parameters.hypothesis_template
    pipe = service.pipes["zero-shot"]
    try:
        params = pipe.check({**pipe.params, **params})
    except ValueError as error:
        raise ServeError(422, str(error), param="parameters") from None
    labels = len(params["candidate_labels"])
    service.check_batch(texts, extra=len(texts) * (labels - 1))
    service.batcher.admit()
    prepared = await service.prepare(texts, None, limit=False)
    tokens = [min(n, service.max_input_length) * labels for n in prepared.tokens]
    answers = await service.answer(Prepared(texts, tokens), params, "zero-shot")
    listed = [[{"label": label, "score": score} for label, score in zip(a["labels"], a["scores"])] for a in answers]
    return listed[0] if isinstance(inputs, str) else listed


def _prompt(service: Service, pipe: str, prompt_name: str | None, task: str | None = None) -> str:
    """The prompt text of ``prompt_name`` (the model's default prompt when None; a sparse encoder's ``task`` side's
    prompt, as ``encode_query`` / ``encode_document`` pick it); 422 for an unknown one."""
    pipeline = service.pipes[pipe]
    if not hasattr(pipeline, "prompt"):
        if prompt_name is not None:
            raise ServeError(422, "prompt_name: this model has no prompts.", param="prompt_name")
        return ""
    try:
        return pipeline.prompt(prompt_name, task) if task is not None else pipeline.prompt(prompt_name)
    except ValueError as error:
        raise ServeError(422, str(error), param="prompt_name") from None


def _tokens(tokenizer: Any, text: str, add_special_tokens: bool) -> list[dict[str, Any]]:
    """text-embeddings-inference's ``/tokenize`` answer for one text: ``{"id", "text", "special", "start",
    "stop"}`` per token; ``text`` the characters it covers (a special token's own string, with no span)."""
    encoded = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                        return_special_tokens_mask=True)
    names = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    return [{"id": i, "text": name if special else text[start:stop], "special": bool(special),
             "start": None if special else start, "stop": None if special else stop}
            for i, name, special, (start, stop) in zip(encoded["input_ids"], names, encoded["special_tokens_mask"],
                                                       encoded["offset_mapping"])]


def _listed(inputs: Any) -> list:
    """A route's ``inputs`` as a batch: one text, or one list of token ids, becomes a batch of one."""
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and all(type(i) is int for i in inputs)):
        return [inputs]
    return list(inputs)


def _predict_inputs(inputs: str | list) -> tuple[bool, list[Any]]:
    """text-embeddings-inference's ``inputs``: a text, a pair ``["a", "b"]``, or a batch of ``[text]`` /
    ``[a, b]`` lists -> (single?, texts and pairs)."""
    def item(sequence: str | list[str]) -> Any:
        if isinstance(sequence, str):
            return sequence
        if len(sequence) == 1:
            return sequence[0]
        if len(sequence) == 2:
            return (sequence[0], sequence[1])
        raise ServeError(422, f"inputs: a sequence has one text or a pair of two, got {len(sequence)}.",
                         param="inputs")

    if isinstance(inputs, str) or (inputs and all(isinstance(t, str) for t in inputs)):
        return True, [item(inputs)]
    if not inputs:
        raise ServeError(400, "inputs is empty: send at least one input.", "Empty", param="inputs")
    return False, [item(sequence) for sequence in inputs]


def _known(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The fields of ``data`` that ``model`` has (``POST /`` ignores the rest, as TEI does)."""
    return {k: v for k, v in data.items() if k in model.model_fields}
