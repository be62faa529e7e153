"""The door every HTTP request passes first: authentication, the body's limits, the metrics' route label.

A plain ASGI middleware (Starlette's ``BaseHTTPMiddleware`` costs a task group and a body stream per request):

* **Auth** -- with an API key, every request but ``GET /health`` and the page (``GET /``, ``/static/*``) needs
  ``Authorization: Bearer KEY``, compared in constant time; ``/docs``, ``/openapi.json`` and ``/metrics`` too.
* **Body** -- read here, whatever the transport (``Content-Length`` or chunked): 413 as soon as it passes
  ``max_body`` bytes (a larger ``Content-Length`` is refused before a byte is read), 408 when it takes longer
  than ``body_timeout`` seconds. Memory stays within the limit. A JSON body must be UTF-8, parse, nest at most
  :data:`MAX_DEPTH` deep and hold no lone surrogate: otherwise 422 naming the problem. The route then reads the
  same bytes.
* **Metrics** -- each answer is counted under its route's template from the routing table (any other path under
  ``other``): a client cannot add labels.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

from bertkit.serving.errors import ServeError, send_error
from bertkit.serving.metrics import Metrics

#: the largest request body taken (a client's 32 inputs of 512 tokens are ~0.1 MB); beyond: 413
MAX_BODY_BYTES = 16 * 1024 * 1024
#: the deepest JSON nesting a request may have (TEI's bodies nest 3 deep)
MAX_DEPTH = 32
#: an answer given before the body was read ends the connection (the rest of the body is not read)
CLOSE = {"Connection": "close"}
#: methods whose requests carry a body
_WITH_BODY = {"POST", "PUT", "PATCH"}


def is_public(method: str, path: str) -> bool:
    """Whether a request needs no API key: the health check and the page's files."""
    if method not in ("GET", "HEAD"):
        return False
    return path in ("/health", "/") or path.startswith("/static/")


def check_json(raw: bytes) -> None:
    """422 (a :class:`ServeError` naming the problem) unless ``raw`` is UTF-8 JSON, at most :data:`MAX_DEPTH` deep,
    without lone surrogates (which no tokenizer or JSON answer can carry)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ServeError(422, f"the request body is not UTF-8: byte 0x{raw[error.start]:02x} at offset "
                              f"{error.start} ({error.reason}); send JSON encoded as UTF-8.") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ServeError(422, f"the JSON body nests deeper than {MAX_DEPTH} levels.") from None
    except ValueError as error:
        raise ServeError(422, f"the request body is not valid JSON: {error}.") from None
    stack: list[tuple[Any, int, str]] = [(value, 1, "body")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as error:
                    raise ServeError(422, f"{where} holds a lone surrogate (\\u{ord(item[error.start]):04x} at "
                                          f"character {error.start}), which is not text: send valid UTF-16 pairs "
                                          "in JSON escapes.", "Tokenizer", param=where) from None
            continue
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise ServeError(422, f"the JSON body nests deeper than {MAX_DEPTH} levels (at {where}).")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and not key.isascii():
                    stack.append((key, depth, f"{where} key"))
                stack.append((child, depth + 1, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"))


class Gate:
    """The middleware (see the module doc) around ``app``; ``routes`` gives the routing table's paths."""

    def __init__(self, app: Any, *, metrics: Metrics, api_key: str | None, routes: Any,
                 max_body: int = MAX_BODY_BYTES, body_timeout: float = 60.0):
        self.app, self.metrics, self.routes = app, metrics, routes
        self.max_body, self.body_timeout = max_body, body_timeout
        self.authorization = None if api_key is None else f"Bearer {api_key}".encode()
        self._known: set[str] | None = None

    def label(self, path: str) -> str:
        """The metrics label of ``path``: a route of the table, ``/static``, or ``other``."""
        if self._known is None:
            self._known = {p for p in (getattr(r, "path", None) for r in self.routes()) if p}
        if path in self._known:
            return path
        return "/static" if path.startswith("/static/") else "other"

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, path, status = time.perf_counter(), scope["path"], 500

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            replay = await self._admit(scope, receive)
        except ServeError as error:
            await send_error(sending, path, error)
        else:
            await self.app(scope, replay or receive, sending)
        finally:
            if path != "/metrics":
                self.metrics.request(self.label(path), status, time.perf_counter() - start)

    async def _admit(self, scope: dict, receive: Any) -> Any:
        """Check the key and read the body; a ``receive`` that replays the body (None when there is none)."""
        headers = dict(scope["headers"])
        if self.authorization is not None and not is_public(scope["method"], scope["path"]):
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.authorization):
                raise ServeError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'.",
                                 code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        if scope["method"] not in _WITH_BODY:
            return None
        size = headers.get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > self.max_body):
            raise ServeError(413, f"the request body is {size.decode('latin-1')[:20]} bytes; the limit is "
                                  f"{self.max_body} bytes: send fewer or shorter inputs per request.", headers=CLOSE)
        raw = await self._read(receive)
        if raw:
            check_json(raw)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()  # after the body: the client's disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        return replay

    async def _read(self, receive: Any) -> bytes:
        """The whole body, within ``max_body`` bytes and ``body_timeout`` seconds (413 / 408 otherwise)."""
        chunks, size = [], 0
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0.0))
            except asyncio.TimeoutError:  # a class of its own on Python 3.10
                raise ServeError(408, f"the request body did not arrive within {self.body_timeout:g} s.",
                                 headers=CLOSE) from None
            if message["type"] == "http.disconnect":
                raise ServeError(400, "the client went away before sending its whole body.", "Validation")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise ServeError(413, f"the request body passed the limit of {self.max_body} bytes (it was sent "
                                      "without a Content-Length or with a false one): send fewer or shorter inputs "
                                      "per request.", headers=CLOSE)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
