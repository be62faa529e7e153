"""The routes (the contract: ``CONTRACT.md`` beside this file).

text-embeddings-inference's (``/embed``, ``/embed_all``, ``/embed_sparse``, ``/similarity``, ``/predict``,
``/rerank``, ``/tokenize``, ``/decode``, ``/info``, ``/health``, ``/metrics``), OpenAI's ``/v1/embeddings`` (and
TEI's alias ``/embeddings``), bertkit's ``/ner``, ``/qa``, ``/fill-mask``, and ``POST /``: the served task's route,
as TEI dispatches it, read the way HF's Inference API (``InferenceClient``) sends it when it carries
``parameters``. Every text route goes through :meth:`Service.prepare` (count, limit, truncation) and
:meth:`Service.answer` (the batcher).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError

from bertkit.serving import schemas
from bertkit.serving.errors import ServeError
from bertkit.serving.inputs import CHARS_PER_TOKEN, Prepared
from bertkit.serving.service import Service


def add_routes(app: FastAPI, service: Service, static: Any) -> None:
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

    # ------------------------------------------------------------------------------------ embeddings
    @app.post("/embed")
    async def embed(body: schemas.EmbedRequest) -> list[list[float]]:
        service.serves("/embed", "embeddings")
        if not service.splade:
            vectors, _ = await _embed(service, body, {"normalize": body.normalize, "dimensions": body.dimensions})
            return vectors
        if body.normalize or body.dimensions is not None:  # TEI's answer for a SPLADE model
            raise ServeError(424, "normalize and dimensions are not available for SPLADE models: send "
                                  "\"normalize\": false, or use /embed_sparse.", "Backend", param="normalize")
        vectors, _ = await _embed(service, body, {"normalize": False}, "sparse")
        return vectors

    @app.post("/embed_all")
    async def embed_all(body: schemas.EmbedAllRequest) -> list[list[list[float]]]:
        service.serves("/embed_all", "embeddings")
        vectors, _ = await _embed(service, body, {"output": "tokens"})
        return vectors

    @app.post("/embed_sparse")
    async def embed_sparse(body: schemas.EmbedSparseRequest) -> list[list[dict[str, Any]]]:
        service.serves("/embed_sparse", sparse=True)
        vectors, _ = await _embed(service, body, {"output": "sparse"}, "sparse")
        return vectors

    @app.post("/similarity")
    async def similarity(body: schemas.SimilarityRequest) -> list[float]:
        service.serves("/similarity", "embeddings")
        given = body.parameters or schemas.SimilarityParameters()
        request = schemas.EmbedRequest(inputs=[body.inputs.source_sentence, *body.inputs.sentences],
                                       normalize=True, truncate=given.truncate, prompt_name=given.prompt_name,
                                       truncation_direction=given.truncation_direction)
        if not body.inputs.sentences:
            raise ServeError(400, "inputs.sentences is empty: send at least one sentence.", param="inputs.sentences")
        vectors, _ = await _embed(service, request, {"normalize": True, "dimensions": None})
        matrix = np.asarray(vectors, dtype=np.float64)
        return [float(s) for s in matrix[1:] @ matrix[0]]

    async def openai_embeddings(body: schemas.OpenAIEmbeddingsRequest) -> dict[str, Any]:
        service.serves("/v1/embeddings", "embeddings")
        if service.splade:
            raise ServeError(424, "this server answers SPLADE vectors: use /embed_sparse.")
        request = schemas.EmbedRequest(inputs=body.input, dimensions=body.dimensions, truncate=None)
        vectors, prepared = await _embed(service, request, {"normalize": True, "dimensions": body.dimensions},
                                         field="input")
        data = [{"object": "embedding", "index": i,
                 "embedding": v if body.encoding_format == "float" else
                 base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")}
                for i, v in enumerate(vectors)]
        tokens = sum(prepared.tokens)
        return {"object": "list", "data": data, "model": body.model or service.settings.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    app.post("/v1/embeddings")(openai_embeddings)
    app.post("/embeddings", include_in_schema=False)(openai_embeddings)

    # ------------------------------------------------------------------------------ classification
    @app.post("/predict")
    async def predict(body: schemas.PredictRequest) -> list:
        service.serves("/predict", "classify")
        single, pairs = _predict_inputs(body.inputs)
        service.check_batch(pairs)
        prepared = await service.prepare(pairs, body.truncate, body.truncation_direction.lower())
        items = [p if isinstance(p, str) else {"text": p[0], "text_pair": p[1]} for p in prepared.items]
        params = {"top_k": None, "function_to_apply": "none" if body.raw_scores else None,
                  "truncation_side": body.truncation_direction.lower()}
        answers = await service.answer(Prepared(items, prepared.tokens), params)
        return answers[0] if single else answers

    @app.post("/rerank")
    async def rerank(body: schemas.RerankRequest) -> list[dict[str, Any]]:
        service.serves("/rerank", "rerank")
        service.check_batch(body.texts, "texts")
        prepared = await service.prepare([(body.query, text) for text in body.texts], body.truncate,
                                         body.truncation_direction.lower(), field="texts")
        logits = await service.answer(prepared, {"truncation_side": body.truncation_direction.lower()})
        ranked = [{"index": i, "score": service.pipe.score(v, body.raw_scores)} for i, v in enumerate(logits)]
        if body.return_text:
            for r in ranked:
                r["text"] = body.texts[r["index"]]
        return sorted(ranked, key=lambda r: r["score"], reverse=True)

    @app.post("/ner")
    async def ner(body: schemas.NerRequest) -> list:
        service.serves("/ner", "ner")
        return await _texts(service, body.inputs, body.truncate, {"aggregation_strategy": body.aggregation_strategy})

    @app.post("/qa")
    async def qa(body: schemas.QARequest) -> Any:
        service.serves("/qa", "qa")
        if body.inputs is None and (body.question is None or body.context is None):
            raise ServeError(422, 'send "question" and "context", or "inputs": [{"question", "context"}, ...].')
        items = [{"question": body.question, "context": body.context}] if body.inputs is None else \
            [p.model_dump() for p in body.inputs]
        service.check_batch(items)
        prepared = await service.prepare([(i["question"], i["context"]) for i in items], None, limit=False)
        params = {"top_k": body.top_k, "max_answer_len": body.max_answer_len,
                  "handle_impossible_answer": body.handle_impossible_answer}
        answers = await service.answer(Prepared(items, prepared.tokens), params)
        return answers[0] if body.inputs is None else answers

    @app.post("/fill-mask")
    async def fill_mask(body: schemas.FillMaskRequest) -> list:
        service.serves("/fill-mask", "fill-mask")
        return await _texts(service, body.inputs, body.truncate, {"top_k": body.top_k, "targets": body.targets})

    # ---------------------------------------------------------------------------------- tokenizer
    @app.post("/tokenize")
    async def tokenize(body: schemas.TokenizeRequest) -> list[list[dict[str, Any]]]:
        texts = _listed(body.inputs)
        service.check_batch(texts)
        prefix = _prompt(service, "main", body.prompt_name)
        cap = CHARS_PER_TOKEN * service.max_input_length
        for i, text in enumerate(texts):
            if len(prefix) + len(text) > cap:
                raise ServeError(422, f"inputs[{i}] has {len(text)} characters; /tokenize takes {cap} ("
                                      f"{CHARS_PER_TOKEN} per token of max_input_length {service.max_input_length}).",
                                 param="inputs")
        return await service.offload(lambda: [_tokens(service, prefix + t, body.add_special_tokens) for t in texts])

    @app.post("/decode")
    async def decode(body: schemas.DecodeRequest) -> list[str]:
        batch = [body.ids] if not body.ids or isinstance(body.ids[0], int) else body.ids
        service.check_batch([ids for ids in batch if ids], "ids")
        try:
            return await service.offload(
                lambda: [service.tokenizer.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in batch])
        except ValueError as error:  # ids outside the vocabulary, named
            raise ServeError(422, f"ids: {error}", "Tokenizer", param="ids") from None

    # ------------------------------------------------------------------------------------- POST /
    @app.post("/", summary="the served task's route (text-embeddings-inference), or HF's Inference API")
    async def root(request: Request) -> Any:
        data = await request.json()
        if not isinstance(data, dict):
            raise ServeError(422, "the body must be a JSON object.")
        hf = "parameters" in data
        parameters = data.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ServeError(422, "parameters must be an object.", param="parameters")
        if service.task == "embeddings":
            if service.splade:
                return await embed_sparse(_read(schemas.EmbedSparseRequest, _known(data, schemas.EmbedSparseRequest)))
            if isinstance(data.get("inputs"), dict):
                return await similarity(_read(schemas.SimilarityRequest, data))
            return await embed(_read(schemas.EmbedRequest, _known(data, schemas.EmbedRequest)))
        if service.task == "classify":
            if not hf:
                return await predict(_read(schemas.PredictRequest, _known(data, schemas.PredictRequest)))
            return await _inference_classify(service, data["inputs"], parameters)
        if service.task == "rerank":
            return await rerank(_read(schemas.RerankRequest, _known(data, schemas.RerankRequest)))
        if service.task == "fill-mask":
            return await fill_mask(_read(schemas.FillMaskRequest, {"inputs": data.get("inputs"),
                                                                   **_known(parameters, schemas.FillMaskRequest)}))
        if service.task == "ner":
            return await ner(_read(schemas.NerRequest, {"inputs": data.get("inputs"),
                                                        **_known(parameters, schemas.NerRequest)}))
        inputs = data.get("inputs")
        given = inputs if isinstance(inputs, dict) else {"inputs": inputs}
        return await qa(_read(schemas.QARequest, {**given, **_known(parameters, schemas.QARequest)}))


async def _embed(service: Service, body: Any, params: dict[str, Any], pipe: str = "main",
                 field: str = "inputs") -> tuple[list[Any], Any]:
    """Any embedding route: inputs listed, checked, prepared (prompt, limit, truncation), answered."""
    inputs = _listed(body.inputs)
    service.check_batch(inputs, field)
    side = body.truncation_direction.lower()
    prefix = _prompt(service, pipe, body.prompt_name)
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


async def _inference_classify(service: Service, inputs: Any, parameters: dict[str, Any]) -> list:
    """HF's Inference API text classification: a list of ``{label, score}`` per input, best first."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ServeError(422, "inputs must be a text or a list of texts.", param="inputs")
    service.check_batch(texts)
    top_k = parameters.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        raise ServeError(422, f"parameters.top_k must be an integer >= 1, got {top_k!r}.", param="top_k")
    function = parameters.get("function_to_apply")
    if function not in (None, "softmax", "sigmoid", "none"):
        raise ServeError(422, f"parameters.function_to_apply must be softmax, sigmoid or none, got {function!r}.",
                         param="function_to_apply")
    prepared = await service.prepare(texts, parameters.get("truncate"))
    return await service.answer(prepared, {"top_k": top_k, "function_to_apply": function})


def _prompt(service: Service, pipe: str, prompt_name: str | None) -> str:
    """The prompt text of ``prompt_name`` (the model's default prompt when None); 422 for an unknown one."""
    pipeline = service.pipes[pipe]
    if not hasattr(pipeline, "prompt"):
        if prompt_name is not None:
            raise ServeError(422, "prompt_name: this model has no prompts.", param="prompt_name")
        return ""
    try:
        return pipeline.prompt(prompt_name)
    except ValueError as error:
        raise ServeError(422, str(error), param="prompt_name") from None


def _tokens(service: Service, text: str, add_special_tokens: bool) -> list[dict[str, Any]]:
    """text-embeddings-inference's ``/tokenize`` answer for one text: ``{"id", "text", "special", "start",
    "stop"}`` per token; ``text`` the characters it covers (a special token's own string, with no span)."""
    encoded = service.tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                                return_special_tokens_mask=True)
    names = service.tokenizer.convert_ids_to_tokens(encoded["input_ids"])
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


def _read(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` as ``model``; 422 naming the fields otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ServeError(422, problems(error.errors())) from None


def problems(errors: list[dict[str, Any]]) -> str:
    """pydantic's errors as one line: ``field: what is wrong; ...`` (the first five)."""
    described = []
    for e in errors:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        described.append(f"{where}: {e.get('msg', 'invalid')}")
    return "; ".join(described[:5])
