"""Stopping: SIGTERM or Ctrl-C drains the server before uvicorn shuts it down.

uvicorn, told to stop, closes its listening socket at once: a client that connects then is refused, and one
whose connection was waiting to be accepted is reset. A :class:`Drain` goes first:

1. the server keeps listening, and every request that arrives is answered 503 ``Unhealthy`` with ``Retry-After``
   and ``Connection: close`` (``/health`` too, so a load balancer takes the replica out);
2. the requests already being answered are answered, their responses with ``Connection: close``;
3. once none is left (at most ``timeout`` seconds; a second signal cuts it short), uvicorn's own shutdown runs:
   the socket closes (a client is refused from then on), idle connections close, the model's queue is finished
   and the process exits.

The :class:`~bertkit.serving.gate.Gate` counts the requests and answers the 503s; :meth:`Drain.signals`, entered
in the app's lifespan, stands between the signals and uvicorn's handlers (which it calls when the drain is over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from types import FrameType

logger = logging.getLogger("bertkit.serve")
#: what a client is told to wait before it retries, seconds (another replica, or this one restarted)
RETRY_AFTER_S = 5
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Drain:
    """The drain of one server process (see the module doc): ``draining`` once a signal came; ``active()``: the
    requests past the door (:class:`~bertkit.serving.gate.Gate`) and not yet answered."""

    def __init__(self, timeout: float, active: Callable[[], int]):
        self.timeout, self.active = timeout, active
        self.draining = False
        self._signal: tuple[int, FrameType | None] | None = None
        self._hurry = False

    @contextlib.asynccontextmanager
    async def signals(self) -> AsyncIterator[None]:
        """For the app's lifespan: SIGINT and SIGTERM begin the drain; the server's own handler (uvicorn's) runs
        when it is over. Nothing changes off the main thread (signals reach only that one) or for a signal the
        server does not handle itself."""
        handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS} \
            if threading.current_thread() is threading.main_thread() else {}
        handlers = {sig: handler for sig, handler in handlers.items() if callable(handler)}
        for sig in handlers:
            signal.signal(sig, self._received)
        watcher = asyncio.create_task(self._watch(handlers)) if handlers else None
        try:
            yield
        finally:
            if watcher is not None:
                watcher.cancel()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _received(self, sig: int, frame: FrameType | None) -> None:
        if self._signal is None:
            self._signal = (sig, frame)
            self.draining = True
        else:  # a second Ctrl-C: stop waiting for the requests in flight
            self._hurry = True

    async def _watch(self, handlers: dict) -> None:
        loop = asyncio.get_running_loop()
        while self._signal is None:
            await asyncio.sleep(0.05)
        sig, frame = self._signal
        if self.active():
            logger.warning("%s: answering the %d request(s) in flight (at most %g s; new ones get 503), then "
                           "stopping", signal.Signals(sig).name, self.active(), self.timeout)
        deadline = loop.time() + self.timeout
        while self.active() and not self._hurry and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for other, handler in handlers.items():  # a signal from now on is the server's (uvicorn: Ctrl-C forces)
            signal.signal(other, handler)
        handlers[sig](sig, frame)
