"""The door every HTTP request passes first: authentication, the body's limits, the metrics' route label.

A plain ASGI middleware (Starlette's ``BaseHTTPMiddleware`` costs a task group and a body stream per request):

* **Auth** -- with an API key, every request but ``GET /health`` and the page (``GET /``, ``/static/*``) needs
  ``Authorization: Bearer KEY``, compared in constant time; ``/docs``, ``/openapi.json`` and ``/metrics`` too.
* **Body** -- read here, whatever the transport (``Content-Length`` or chunked): 413 as soon as it passes
  ``max_body`` bytes (a larger ``Content-Length`` is refused before a byte is read), 408 when it takes longer
  than ``body_timeout`` seconds. Memory stays within the limit. A JSON body must be UTF-8, parse, nest at most
  :data:`MAX_DEPTH` deep and hold no lone surrogate: otherwise 422 naming the problem. A body over
  :data:`OFFLOAD_BYTES` is decoded and checked on a thread (``offload``), so the event loop keeps answering; the
  JSON goes to the route in the request's scope (:class:`Parsed` under :data:`PARSED`), never decoded twice.
* **Memory** -- after a request whose body or answer passed :data:`TRIM_BYTES`, the heap's free pages go back to
  the system (:func:`bertkit.serving.bodies.give_back`, on a thread): one big request's peak is not kept.
* **Metrics** -- each answer is counted under its route's template from the routing table (any other path under
  ``other``): a client cannot add labels.
* **Drain** -- while the server stops (:mod:`bertkit.serving.drain`), a new request is answered 503 with
  ``Retry-After`` at the door, and the answers of those already in say ``Connection: close``; the requests past
  the door are counted (``Metrics.in_progress``), so the drain knows when the last one is answered.
"""

from __future__ import annotations

import asyncio
import ctypes
import hmac
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bertkit.serving.drain import RETRY_AFTER_S, Drain
from bertkit.serving.errors import ServeError, send_error
from bertkit.serving.metrics import Metrics

#: the largest request body taken (a client's 32 inputs of 512 tokens are ~0.1 MB); beyond: 413
MAX_BODY_BYTES = 16 * 1024 * 1024
#: the deepest JSON nesting a request may have (TEI's bodies nest 3 deep)
MAX_DEPTH = 32
#: bodies larger than this are decoded and validated on a thread (a TEI request of 32 short texts is ~2 KB)
OFFLOAD_BYTES = 64 * 1024
#: a request whose body or answer passes this many bytes gives the heap's free memory back when it ends
TRIM_BYTES = 4 * 1024 * 1024
#: the scope key of a request's :class:`Parsed` body
PARSED = "bertkit.parsed"
#: an answer given before the body was read ends the connection (the rest of the body is not read)
CLOSE = {"Connection": "close"}
#: methods whose requests carry a body
_WITH_BODY = {"POST", "PUT", "PATCH"}


def is_public(method: str, path: str) -> bool:
    """Whether a request needs no API key: the health check and the page's files."""
    if method not in ("GET", "HEAD"):
        return False
    return path in ("/health", "/") or path.startswith("/static/")


@dataclass
class Parsed:
    """A request's JSON body: its ``value`` and its ``size`` in bytes."""

    value: Any
    size: int

    @property
    def big(self) -> bool:
        """Whether the body is handled on a thread (over :data:`OFFLOAD_BYTES`)."""
        return self.size > OFFLOAD_BYTES


def give_back() -> None:
    """Hand the heap's free pages back to the system: glibc's ``malloc_trim(0)`` (every arena, the model's and
    the tokenization threads' too); nothing where there is no glibc. One call at a time: a second is skipped."""
    if _MALLOC_TRIM is not None and _trimming.acquire(blocking=False):
        try:
            _MALLOC_TRIM(0)
        finally:
            _trimming.release()


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): freed memory stays with malloc
        return None


_MALLOC_TRIM = _malloc_trim()
_trimming = threading.Lock()


def check_json(raw: bytes) -> Any:
    """The JSON value of ``raw``; 422 (a :class:`ServeError` naming the problem) unless it is UTF-8 JSON, at most
    :data:`MAX_DEPTH` deep, without lone surrogates (which no tokenizer or JSON answer can carry)."""
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
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, None, "body")]
    while stack:  # (item, depth, the parent's entry, key): a path is only spelled out for an error
        entry = stack.pop()
        item, depth = entry[0], entry[1]
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as error:
                    where = _where(entry)
                    raise ServeError(422, f"{where} holds a lone surrogate (\\u{ord(item[error.start]):04x} at "
                                          f"character {error.start}), which is not text: send valid UTF-16 pairs "
                                          "in JSON escapes.", "Tokenizer", param=where) from None
            continue
        if depth > MAX_DEPTH:
            raise ServeError(422, f"the JSON body nests deeper than {MAX_DEPTH} levels (at {_where(entry)}).")
        if isinstance(item, dict):
            for key, child in item.items():
                if not key.isascii():
                    stack.append((key, depth, entry, " key"))
                if isinstance(child, _NESTED):
                    stack.append((child, depth + 1, entry, key))
        elif isinstance(item, list):  # its numbers need no look: 2 million token ids stay quick
            stack.extend((child, depth + 1, entry, i) for i, child in enumerate(item) if isinstance(child, _NESTED))
    return value


_NESTED = (str, dict, list)


def _where(entry: tuple) -> str:
    """The path of a stack entry of :func:`check_json`: ``body.inputs[3]``."""
    parts = []
    while entry[2] is not None:
        key = entry[3]
        parts.append(f"[{key}]" if isinstance(key, int) else key if key == " key" else f".{key}")
        entry = entry[2]
    return "body" + "".join(reversed(parts))


class Gate:
    """The middleware (see the module doc) around ``app``; ``routes`` gives the routing table's paths, ``offload``
    runs a function on a thread (:meth:`bertkit.serving.service.Service.offload`)."""

    def __init__(self, app: Any, *, metrics: Metrics, api_key: str | None, routes: Any,
                 offload: Callable[[Callable[[], Any]], Awaitable[Any]], max_body: int = MAX_BODY_BYTES,
                 body_timeout: float = 60.0, drain: Drain | None = None):
        self.app, self.metrics, self.routes, self.offload = app, metrics, routes, offload
        self.drain = drain or Drain(timeout=0.0, active=lambda: metrics.in_progress)
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
        start, path, status, sent = time.perf_counter(), scope["path"], 500, 0

        async def sending(message: dict) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                if self.drain.draining:  # the connection ends with this answer: the client reconnects elsewhere
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            sent += len(message.get("body", b""))
            await send(message)

        if self.drain.draining:
            await send_error(sending, path, ServeError(503, "the server is shutting down: retry in a few seconds "
                                                            "(or on another replica)", "Unhealthy",
                                                       headers={"Retry-After": str(RETRY_AFTER_S)}))
            self.metrics.request(self.label(path), status, time.perf_counter() - start)
            return
        counted = path != "/metrics"  # a scrape does not hold the drain (nor count itself in progress)
        self.metrics.in_progress += counted
        try:
            replay = await self._admit(scope, receive)
        except ServeError as error:
            await send_error(sending, path, error)
        else:
            await self.app(scope, replay or receive, sending)
        finally:
            self.metrics.in_progress -= counted
            if path != "/metrics":
                self.metrics.request(self.label(path), status, time.perf_counter() - start)
            received = scope.pop(PARSED, None)
            size = 0 if received is None else received.size
            del received  # the body's objects go before the heap is trimmed
            if max(sent, size) > TRIM_BYTES:
                await self.offload(give_back)

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
            value = await self.offload(lambda: check_json(raw)) if len(raw) > OFFLOAD_BYTES else check_json(raw)
            scope[PARSED] = Parsed(value, len(raw))
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
