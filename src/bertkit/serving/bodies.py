"""Request bodies in, answers out, without holding the event loop.

* **In** -- the :class:`~bertkit.serving.gate.Gate` has decoded and checked the JSON (a
  :class:`~bertkit.serving.gate.Parsed` in the request's scope). :func:`validated` reads it as a route's model:
  the one validator of every field of every route, by the schemas' strict rule (:mod:`bertkit.serving.schemas`),
  with a 422 naming the field otherwise. :class:`BodyRoute` runs it for each route with a ``body`` parameter
  before FastAPI would (FastAPI then takes the validated model as it is: pydantic does not validate an instance
  again), and ``POST /`` for the parts it reads. A body over :data:`~bertkit.serving.gate.OFFLOAD_BYTES` is
  validated on a tokenization thread, as the Gate decoded it there: the loop keeps answering meanwhile.
* **Out** -- :func:`respond` encodes an answer as compact JSON on a tokenization thread, one item of a list at a
  time (an iterator's items are made there too, one at a time), and refuses with 413 naming the route and the
  limit as soon as it passes ``--max-response-bytes``. :class:`JSONPieces` sends the pieces without joining them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pydantic_core
from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from bertkit.serving.errors import ServeError
from bertkit.serving.gate import PARSED

Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


# ------------------------------------------------------------------------------------------------------- in
async def validated(model: type[BaseModel], data: Any, *, big: bool, offload: Offload) -> Any:
    """``data`` (decoded JSON) as ``model``, on a thread when ``big``; a 422 :class:`ServeError` naming the fields
    otherwise (``param``: the first)."""
    def validate() -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as error:
            found = error.errors(include_url=False)
            raise ServeError(422, problems(found, model), param=first_field(found)) from None

    return await offload(validate) if big else validate()


def problems(errors: list[dict[str, Any]], model: type[BaseModel] | None = None) -> str:
    """pydantic's errors as one line, ``field: what is wrong (got ...)``, for the first five fields. A field none of
    whose forms fits (a union: pydantic reports each form) is named once, with the forms its ``model`` field
    describes."""
    described: dict[str, str] = {}
    for e in errors:
        where, union = _where(e.get("loc", ()))
        if where in described:
            continue
        if union:
            field = model.model_fields.get(where) if model is not None else None
            forms = field.description if field is not None and field.description else "one of its forms"
            whole = next((f for f in errors if _where(f.get("loc", ()))[0] == where and _is_tag(f["loc"][-1])), None)
            described[where] = f"{where}: must be {forms}{'' if whole is None else _got(whole['input'])}"
        else:
            got = "" if e.get("type") == "missing" else _got(e.get("input"))
            described[where] = f"{where}: {e.get('msg', 'invalid')}{got}"
    return "; ".join(list(described.values())[:5])


def first_field(errors: list[dict[str, Any]]) -> str | None:
    """The top-level field of the first error (OpenAI's ``param``)."""
    return next((str(p) for e in errors for p in e.get("loc", ()) if p != "body"), None)


def _where(loc: tuple) -> tuple[str, bool]:
    """A pydantic location as a path (``texts[0]``, ``parameters.truncate``), cut before a union's form tag
    (``str``, ``list[int]``); and whether it was cut there."""
    path = ""
    for part in loc:
        if part == "body":
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif _is_tag(part):
            return path or "body", True
        else:
            path += f".{part}" if path else part
    return path or "body", False


def _is_tag(part: Any) -> bool:
    """Whether a location part is the tag of a union's form (no field of the schemas is named so)."""
    return isinstance(part, str) and (part in _TAGS or "[" in part)


_TAGS = {"str", "int", "bool", "float", "list", "dict", "none", "function-after", "literal"}


def _got(value: Any) -> str:
    """`` (got VALUE)``, the value as JSON cut to 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return ""
    return f" (got {text if len(text) <= 40 else text[:37] + '...'})"


class _Validated(Request):
    """A request whose JSON is its validated model."""

    def __init__(self, request: Request, model: Any):
        super().__init__(request.scope, request.receive)
        self.model = model

    async def json(self) -> Any:
        return self.model


class BodyRoute(APIRoute):
    """FastAPI's route, with its ``body`` parameter read by :func:`validated` (see the module doc)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        body = inspect.signature(self.endpoint, eval_str=True).parameters.get("body")
        if body is None:
            return handler
        model = body.annotation

        async def handle(request: Request) -> Response:
            parsed = request.scope.get(PARSED)
            if parsed is None:  # no body: FastAPI says what is missing
                return await handler(request)
            offload = request.app.state.service.offload
            return await handler(_Validated(request, await validated(model, parsed.value, big=parsed.big,
                                                                     offload=offload)))

        return handle


# ------------------------------------------------------------------------------------------------------ out
class JSONPieces(Response):
    """A JSON answer encoded in pieces, sent one after another under one ``Content-Length``."""

    media_type = "application/json"

    def __init__(self, pieces: list[bytes]):
        super().__init__(status_code=200)
        self.pieces = pieces
        self.headers["content-length"] = str(sum(len(p) for p in pieces))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        last = len(self.pieces) - 1
        for i, piece in enumerate(self.pieces):
            await send({"type": "http.response.body", "body": piece, "more_body": i < last})
        if self.background is not None:
            await self.background()


async def respond(answer: Any, route: str, *, limit: int, offload: Offload) -> JSONPieces:
    """``answer`` (JSON-able; a list or an iterator of items) encoded on a thread by :func:`encode`."""
    return JSONPieces(await offload(lambda: encode(answer, route, limit)))


def encode(answer: Any, route: str, limit: int) -> list[bytes]:
    """``answer`` as compact UTF-8 JSON: one piece per item of a list or an iterator (whose items are made here,
    one at a time), else one piece. Raises a 413 :class:`ServeError` naming ``route`` and ``limit`` as soon as the
    pieces pass ``limit`` bytes, so at most ``limit`` bytes and one item are ever held."""
    if not isinstance(answer, list | Iterator):
        pieces = [_dumps(answer)]
        _within(len(pieces[0]), route, limit)
        return pieces
    pieces, size = [b"["], 2
    for i, item in enumerate(answer):
        piece = _dumps(item) if i == 0 else b"," + _dumps(item)
        size += len(piece)
        _within(size, route, limit)
        pieces.append(piece)
    pieces.append(b"]")
    return pieces


def _within(size: int, route: str, limit: int) -> None:
    if size > limit:
        raise ServeError(413, f"the answer of {route} passes {limit} bytes (--max-response-bytes): send fewer or "
                              "shorter inputs per request, or start the server with a larger --max-response-bytes.",
                         "Validation", code="response_too_large")


def _dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON by pydantic's serializer: FastAPI's own output, ~8x faster than ``json.dumps`` on floats
    (non-finite numbers, which the pipelines refuse anyway, become null, as FastAPI wrote them)."""
    return pydantic_core.to_json(value, inf_nan_mode="null", fallback=_plain)


def _plain(value: Any) -> Any:
    """numpy numbers and arrays as Python's (the pipelines answer Python's; this is the safety net)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")
