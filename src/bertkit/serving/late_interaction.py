"""The routes of a late-interaction (ColBERT) model, and the index a server searches (``bertkit serve MODEL --index
DIR``). The contract: ``CONTRACT.md`` beside this file.

A ColBERT directory is served by :class:`~bertkit.pipelines.multi_vector.MultiVectorPipeline`: ``/embed_all``
answers each text's token vectors after the projection and the skiplist (``task``: ``query`` or ``document``, the
default: the vectors an index holds), ``/rerank`` the MaxSim of the query with each text (TEI's answer, best
first), ``/search`` the best ``k`` documents of the index for each query, ``/tokenize`` the tokens of a side with
``scored`` per token (whether its vector is on ``/embed_all``). A BGE-M3 directory's ``/embed_all`` answers its
``colbert_vecs`` through the same pipeline. Each side has its own width (the query's: its expansion length), so
inputs are counted and cut here by :meth:`MultiVectorPipeline.fit`, markers included, exactly at either end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastapi.responses import Response

from bertkit.serving import schemas
from bertkit.serving.bodies import respond
from bertkit.serving.errors import ServeError
from bertkit.serving.inputs import ADVICE, CHARS_PER_TOKEN, Prepared

#: the formats of a multi-vector index's manifest -> the class that loads it
INDEX_CLASSES = {"bertkit-multivector-index": "bertkit.retrieval.multivector:MultiVectorIndex",
                 "bertkit-plaid-index": "bertkit.retrieval.plaid:PlaidIndex"}


# ------------------------------------------------------------------------------------------------- the index
def open_index(directory: str | os.PathLike, model: str | os.PathLike, dim: int) -> Any:
    """The exact or PLAID index in ``directory`` (its manifest's format decides), checked built by ``model`` (the
    digest of its files, :func:`~bertkit.retrieval.sparse_corpus.model_fingerprint`) with vectors of width ``dim``;
    ValueError, one line naming ``--index``, for anything else."""
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.tasks.table import resolve

    manifest = Path(directory) / "manifest.json"
    try:
        kind = json.loads(manifest.read_text()).get("format")
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"--index {os.fspath(directory)}: no readable manifest.json ({type(error).__name__}); give a "
                         "directory that `bertkit index` built (an exact or PLAID index).") from None
    if kind not in INDEX_CLASSES:
        raise ValueError(f"--index {os.fspath(directory)}: a {kind!r} index, not a multi-vector one "
                         f"({', '.join(INDEX_CLASSES)}); build one with this model.")
    try:
        return resolve(INDEX_CLASSES[kind]).load(directory, dim=dim, model=model_fingerprint(model))
    except ValueError as error:
        raise ValueError(f"--index: {error}") from None


def index_info(index: Any) -> dict[str, Any]:
    """``/info``'s ``multi_vector.index``: what the server searches."""
    manifest = index.manifest
    return {"format": manifest["format"], "documents": index.documents, "tokens": index.tokens, "dim": index.dim,
            "model": index.model, "ids": bool(manifest.get("ids")), "nbits": manifest.get("nbits")}


def multi_vector_info(service: Any) -> dict[str, Any]:
    """``/info``'s ``multi_vector`` (bertkit's): the kind, the vectors' width, each side's width and prompt, the
    similarity, the skiplist's size, and the index searched (null: none)."""
    pipe = service.pipes["colbert"]
    model = pipe.model
    colbert = pipe.colbert
    return {"kind": service.multi_vector, "dimensions": pipe.dimension,
            "query_length": pipe.width("query"), "document_length": pipe.width("document"),
            "query_expansion": model.query_expansion if colbert else None,
            "prompts": {"query": pipe.prompt(None, "query"), "document": pipe.prompt(None, "document")},
            "similarity": "meanmaxsim" if pipe.mean_maxsim else "maxsim",
            "skiplist": sorted(model.skiplist_words) if colbert else [],
            "routes": ["/embed_all", "/rerank", "/search"] if service.task == "colbert" else ["/embed_all"],
            "index": index_info(service.index) if service.index is not None else None}


# ----------------------------------------------------------------------------------------------- the inputs
async def fitted(service: Any, texts: list[Any], task: str | None, prompt_name: str | None, truncate: bool | None,
                 side: str, field: str = "inputs") -> tuple[Prepared, str]:
    """``(Prepared, prefix)``: ``texts`` (the request's ``field``) counted on side ``task`` and refused (422 naming
    the text and the side's width) or cut exactly (``truncate``, else ``--auto-truncate``) at ``side``."""
    pipe = service.pipes["colbert"]
    try:
        prefix = pipe.prompt(prompt_name, task)
    except ValueError as error:
        raise ServeError(422, str(error), param="prompt_name") from None
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise ServeError(422, f"{field}[{bad}]: a multi-vector model takes texts (it adds its markers and query "
                              "expansion to them), not token ids.", param=field)
    truncate, width = service.truncation(truncate), pipe.width(task)
    what = f"this model's {'query' if task == 'query' else 'document'} width"
    for i, text in enumerate(texts):
        if not truncate and len(text) > CHARS_PER_TOKEN * width:
            raise ServeError(422, f"{field}[{i}] has {len(text)} characters; {what} ({width} tokens) takes "
                                  f"at most {CHARS_PER_TOKEN * width} without truncation. Shorten it, or {ADVICE}.",
                             param=field, code="context_length_exceeded")

    def fit() -> tuple[list[str], list[int]]:
        try:
            return pipe.fit(texts, prefix, task, side, truncate)
        except ValueError as error:
            raise ServeError(422, str(error), param="prompt_name") from None

    kept, counts = await service.offload(fit)
    over = next((i for i, n in enumerate(counts) if n > width), None)
    if over is not None:
        raise ServeError(422, f"{field}[{over}] has {counts[over]} tokens; {what} is {width} tokens (markers and "
                              f"special tokens included). Shorten it, or "
                              f"{ADVICE} (the server cuts it at the truncation_direction end).", param=field,
                         code="context_length_exceeded")
    return Prepared(kept, [max(n, width) if task == "query" else n for n in counts]), prefix


def _task(task: str | None, field: str = "task") -> str | None:
    if task not in ("query", "document", None):
        raise ServeError(422, f"{field} must be \"query\" or \"document\" (null: document), got {task!r}.",
                         param=field)
    return task


async def _answer(service: Any, route: str, value: Any) -> Response:
    return await respond(value, route, limit=service.settings.max_response_bytes, offload=service.offload)


# ------------------------------------------------------------------------------------------------ the routes
async def embed_all(service: Any, body: schemas.EmbedAllRequest) -> Response:
    """Each input's token vectors on its side, as the model scores them: ``[[[float]]]``."""
    task = _task(body.task)
    texts = [body.inputs] if isinstance(body.inputs, str) else list(body.inputs)
    service.check_batch(texts)
    prepared, _ = await fitted(service, texts, task, body.prompt_name, body.truncate,
                               body.truncation_direction.lower())
    answers = await service.answer(prepared, {"task": task, "prompt_name": body.prompt_name, "output": "tokens"},
                                   "colbert")
    return await _answer(service, "/embed_all", answers)


async def rerank(service: Any, body: schemas.RerankRequest) -> Response:
    """TEI's ``/rerank`` answer scored by MaxSim: ``[{index, score, text?}]`` best first (``raw_scores`` changes
    nothing: a MaxSim is not squashed)."""
    service.check_batch(body.texts, "texts")
    side = body.truncation_direction.lower()
    query, _ = await fitted(service, [body.query], "query", None, body.truncate, side, "query")
    texts, _ = await fitted(service, body.texts, "document", None, body.truncate, side, "texts")
    pairs = Prepared([(query.items[0], text) for text in texts.items], [query.tokens[0] + n for n in texts.tokens])
    scores = await service.answer(pairs, {"output": "scores"}, "colbert")
    ranked = [{"index": i, "score": score, **({"text": body.texts[i]} if body.return_text else {})}
              for i, score in enumerate(scores)]
    return await _answer(service, "/rerank", sorted(ranked, key=lambda r: r["score"], reverse=True))


async def search(service: Any, body: schemas.SearchRequest) -> Response:
    """The best ``k`` documents of the server's index for each query: ``[[{id, score}]]`` (``id``: the document's
    id, or its position where the index has none), best first."""
    service.serves("/search")
    index = service.index
    if index is None:
        raise ServeError(424, f"/search needs an index: start the server with --index DIR (an index this model "
                              f"built); this one runs {service.settings.name} without one.", "Backend")
    plaid = "nbits" in index.manifest
    if not plaid and (body.nprobe is not None or body.candidates is not None):
        raise ServeError(422, "nprobe and candidates tune a PLAID index's search; this server's index is exact: "
                              "leave them out.", param="nprobe" if body.nprobe is not None else "candidates")
    texts = [body.inputs] if isinstance(body.inputs, str) else list(body.inputs)
    service.check_batch(texts)
    prepared, _ = await fitted(service, texts, "query", body.prompt_name, body.truncate,
                               body.truncation_direction.lower())
    queries = await service.answer(prepared, {"task": "query", "prompt_name": body.prompt_name, "output": "arrays"},
                                   "colbert")
    options = {"nprobe": body.nprobe or 4, "candidates": max(body.candidates or 256, body.k)} if plaid else {}

    def run() -> list[list[dict[str, Any]]]:
        found = index.search(queries, body.k, **options)
        named = bool(index.manifest.get("ids"))
        return [[{"id": doc, "score": float(score)} for doc, score in
                 zip(index.ids(positions) if named else positions.tolist(), scores.tolist())]
                for scores, positions in found]

    return await _answer(service, "/search", await service.offload(run))


def tokenize(service: Any, body: schemas.TokenizeRequest, texts: list[str]) -> list[list[dict[str, Any]]]:
    """``/tokenize`` of a ColBERT model: the tokens of each text on side ``task`` as the model encodes them (prompt,
    marker, expansion), spans into the prompt and the text as the other routes give them, and bertkit's ``scored``
    (whether the token's vector is on ``/embed_all``); special and expansion tokens have no span."""
    pipe = service.pipes["colbert"]
    task = _task(body.task)
    try:
        prefix = pipe.prompt(body.prompt_name, task)
    except ValueError as error:
        raise ServeError(422, str(error), param="prompt_name") from None
    kept, _ = pipe.fit(texts, prefix, task, "right", True)
    marker = next((m for m in pipe.model.marker_ids if prefix.startswith(m)), "")
    tokenizer, special_ids = service.tokenizer, set(service.tokenizer.all_special_ids)
    out = []
    for text, row in zip(kept, pipe.model.features(kept, prefix, task)):
        full = prefix + text
        encoded = tokenizer(full[len(marker):], add_special_tokens=False, return_offsets_mapping=True)
        spans = iter([(a + len(marker), b + len(marker)) for a, b in encoded["offset_mapping"]])
        tokens = []
        for position, (token, name, scored) in enumerate(zip(row["input_ids"],
                                                             tokenizer.convert_ids_to_tokens(row["input_ids"]),
                                                             row["scored"])):
            span = (None, None)
            if marker and position == 1:
                span = (0, len(marker))
            elif token not in special_ids:
                span = next(spans, (None, None))
            special = span[0] is None
            tokens.append({"id": token, "text": name if special else full[span[0]:span[1]], "special": special,
                           "start": span[0], "stop": span[1], "scored": bool(scored)})
        out.append(tokens if body.add_special_tokens else [t for t in tokens if not t["special"]])
    return out
