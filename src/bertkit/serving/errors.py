"""Every answer other than 200, in the shape the client expects.

text-embeddings-inference's routes answer ``{"error": str, "error_type": str}`` with ``error_type`` one of TEI's
six (:data:`ERROR_TYPES`); OpenAI's routes (``/v1/*``, ``/embeddings``) answer OpenAI's ``{"error": {"message",
"type", "param", "code"}}`` (what the ``openai`` SDK reads into its exceptions), with TEI's ``message``, ``code``
and ``type`` beside it, as TEI's OpenAI route has them. The status decides the TEI type where no other is given.
"""

from __future__ import annotations

import json
from typing import Any

#: text-embeddings-inference's error types (its openapi.json's ``ErrorType``)
ERROR_TYPES = ("Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty")
#: the status each type has when none is given, and the type a bare status has
_TYPE_OF_STATUS = {400: "Empty", 424: "Backend", 429: "Overloaded", 500: "Backend", 503: "Unhealthy"}
#: OpenAI's error type for a status
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                 429: "rate_limit_error"}


class ServeError(Exception):
    """An answer other than 200: ``status``, a message that says what to change, the TEI ``error_type`` (from the
    status when not given), the request field at fault (``param``) and OpenAI's ``code`` where one applies."""

    def __init__(self, status: int, message: str, error_type: str | None = None, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.param, self.code, self.headers = status, param, code, headers
        self.error_type = error_type or _TYPE_OF_STATUS.get(status, "Validation")
        assert self.error_type in ERROR_TYPES, self.error_type


def is_openai(path: str) -> bool:
    """Whether ``path`` is one of OpenAI's routes (their clients read OpenAI's error shape)."""
    return path.startswith("/v1/") or path == "/embeddings"


def body(path: str, error: ServeError) -> dict[str, Any]:
    """The JSON body of ``error`` on ``path``."""
    message = str(error)
    if not is_openai(path):
        return {"error": message, "error_type": error.error_type}
    kind = _OPENAI_TYPES.get(error.status, "server_error" if error.status >= 500 or error.status == 424
                             else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": error.param, "code": error.code},
            "message": message, "code": error.status, "type": error.error_type}


def encoded(path: str, error: ServeError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """``(status, headers, body bytes)`` of ``error`` for a plain ASGI answer."""
    content = json.dumps(body(path, error), ensure_ascii=True).encode("ascii")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (error.headers or {}).items()]
    return error.status, headers, content


async def send_error(send: Any, path: str, error: ServeError) -> None:
    """Answer ``error`` through an ASGI ``send``."""
    status, headers, content = encoded(path, error)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
