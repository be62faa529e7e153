"""uvicorn's h11 protocol with the two limits it lacks: a cap on open connections and a deadline for requests.

uvicorn closes a keep-alive connection after ``timeout_keep_alive`` idle seconds, but restarts that clock on
every byte received and never starts it on a new connection: a client that connects and sends nothing, or
sends its headers a byte at a time, holds a connection (and its memory) for ever. Here:

* a connection must deliver a request's headers within ``timeout_keep_alive`` seconds of being opened or of its
  previous answer, however it trickles; otherwise it is closed (a request being answered is never cut);
* past ``limit_concurrency`` open connections, a new one is closed at once (uvicorn itself answers 503 only
  once a request arrives, after holding the connection).

Both numbers are uvicorn's own settings (``bertkit serve --timeout-keep-alive`` / ``--max-connections``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class GuardedH11Protocol(H11Protocol):
    """See the module doc."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = self.config.limit_concurrency
        if limit is not None and len(self.connections) > limit:
            self.connections.discard(self)
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers are in: it is answered, however long that takes
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the next request must come in time too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.timeout_keep_alive, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()
