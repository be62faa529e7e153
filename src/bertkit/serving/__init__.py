"""``bertkit serve``: an HTTP server for a model (optional extra ``bertkit[serve]``: FastAPI and uvicorn).

:func:`create_app` builds the ASGI app (routes: ``CONTRACT.md`` beside this file); the ``bertkit serve``
command runs it on uvicorn. Imported lazily: ``import bertkit`` never needs FastAPI.
"""

from __future__ import annotations

from typing import Any


def create_app(model: Any, task: str = "auto", **settings: Any):
    """The ASGI app serving ``model``; see :func:`bertkit.serving.app.create_app`."""
    try:
        from bertkit.serving.app import create_app as build
    except ImportError as error:
        raise ImportError(f"bertkit serve needs FastAPI and uvicorn ({error.name} is missing): "
                          "pip install 'bertkit[serve]'") from error
    return build(model, task, **settings)


__all__ = ["create_app"]
