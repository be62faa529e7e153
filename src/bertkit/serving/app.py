"""``bertkit serve``'s ASGI app and its uvicorn server.

:func:`create_app` builds the app for a model: the routes (:mod:`.routes`; the contract: ``CONTRACT.md`` beside
this file) behind the :class:`~bertkit.serving.gate.Gate` (auth, body limits, metrics), their bodies read and
their answers written off the event loop when big (:mod:`.bodies`), answered through one
:class:`~bertkit.serving.service.Service`. :func:`app_from_environment` builds it from the settings ``bertkit serve
--workers N`` hands its worker processes; :func:`uvicorn_config` is the server's configuration (the connection
limits of :mod:`.protocol`). Errors are JSON in TEI's shape (OpenAI's on its routes, see :mod:`.errors`); nothing
a client sends stops the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from bertkit.serving import errors
from bertkit.serving.batcher import Overloaded, ShuttingDown
from bertkit.serving.bodies import BodyRoute, first_field, problems
from bertkit.serving.drain import RETRY_AFTER_S, Drain
from bertkit.serving.errors import ServeError
from bertkit.serving.gate import MAX_BODY_BYTES, Gate
from bertkit.serving.routes import add_routes
from bertkit.serving.service import Service
from bertkit.serving.settings import ServeSettings

logger = logging.getLogger("bertkit.serve")
STATIC = Path(__file__).parent / "static"
ENVIRONMENT = "BERTKIT_SERVE_SETTINGS"
#: seconds a stopping server gives the requests in flight: the drain (:mod:`.drain`), then uvicorn's own wait
GRACE_S = 30

__all__ = ["ENVIRONMENT", "MAX_BODY_BYTES", "ServeError", "app_from_environment", "create_app", "uvicorn_config"]


def create_app(model: str | os.PathLike, task: str = "auto", **settings: Any) -> FastAPI:
    """The app serving ``model`` (anything bertkit loads) for ``task`` (``auto``: what the model holds); the
    other ``settings`` are :class:`ServeSettings`' fields. Raises ValueError for bad settings or a model that
    fails its probe (e.g. NaN weights)."""
    checked = ServeSettings(model=os.fspath(model), task=task, **settings).check()
    service = Service(checked)
    drain = Drain(timeout=GRACE_S, active=lambda: service.metrics.in_progress)
    app = FastAPI(title="bertkit serve", summary=f"{service.task}: {checked.name}",
                  lifespan=lambda app: _lifespan(app, service, drain))
    app.state.service = service
    app.router.route_class = BodyRoute  # bodies validated off the loop when big (bertkit.serving.bodies)
    _handlers(app)
    app.add_middleware(Gate, metrics=service.metrics, api_key=checked.api_key, routes=lambda: app.routes,
                       offload=service.offload, body_timeout=checked.body_timeout, drain=drain)
    add_routes(app, service, STATIC)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI, service: Service, drain: Drain):
    """The model's queue runs while the app does; a signal drains the server first (:mod:`.drain`)."""
    async with service.lifespan(app), drain.signals():
        yield


def app_from_environment() -> FastAPI:
    """The app of the settings in ``BERTKIT_SERVE_SETTINGS`` (JSON): each ``--workers`` process builds its own."""
    settings = json.loads(os.environ[ENVIRONMENT])
    return create_app(settings.pop("model"), **settings)


def uvicorn_config(app: Any, settings: ServeSettings, **options: Any) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for ``app`` (an app or an import string) under
    ``settings``: h11 with the connection cap and request deadline of :mod:`bertkit.serving.protocol`."""
    from bertkit.serving.protocol import GuardedH11Protocol

    return dict(app=app, host=settings.host, port=settings.port, http=GuardedH11Protocol,
                limit_concurrency=settings.max_connections, timeout_keep_alive=settings.timeout_keep_alive,
                timeout_graceful_shutdown=GRACE_S, log_level="warning", **options)


def _handlers(app: FastAPI) -> None:
    def answer(request: Request, error: ServeError) -> JSONResponse:
        return JSONResponse(errors.body(request.url.path, error), status_code=error.status, headers=error.headers)

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, error: ServeError):
        return answer(request, error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        found = error.errors()
        return answer(request, ServeError(422, problems(found), param=first_field(found)))

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded):
        return answer(request, ServeError(429, str(error), headers={"Retry-After": "1"}))

    @app.exception_handler(ShuttingDown)
    async def stopping(request: Request, error: ShuttingDown):
        return answer(request, ServeError(503, str(error), headers={"Retry-After": str(RETRY_AFTER_S)}))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return answer(request, ServeError(error.status_code, str(error.detail), "Validation",
                                          headers=getattr(error, "headers", None)))

    @app.exception_handler(Exception)
    async def backend(request: Request, error: Exception):
        logger.exception("model failure on %s", request.url.path)
        return answer(request, ServeError(500, f"the model failed on this request: {type(error).__name__}: "
                                               f"{error}", "Backend"))
