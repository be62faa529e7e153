"""Dynamic batching: requests wait in a bounded queue; one worker runs the model on batches of them.

Every request's inputs become work items with their token counts. The worker takes the oldest item and
every waiting item with the same call parameters while the batch stays within ``max_batch_tokens``, runs
the model on a thread (the event loop keeps accepting and answering), and resolves each item's future;
a request awaits its items, so answers come back in its own order. The pipeline sorts each batch by length.
Requests past ``max_concurrent_requests`` in flight are refused at once (:class:`Overloaded`), and
:meth:`DynamicBatcher.close` stops new requests and finishes those in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bertkit.serving.metrics import Metrics


class Overloaded(Exception):
    """More requests in flight than the server takes; the client should retry later."""


class ShuttingDown(Exception):
    """The server is stopping and takes no new request."""


@dataclass
class _Work:
    item: Any
    tokens: int
    key: Hashable
    params: dict[str, Any]
    future: asyncio.Future


class DynamicBatcher:
    """Batches ``run(items, params) -> answers`` calls across requests (see the module doc)."""

    def __init__(self, run: Callable[[list[Any], dict[str, Any]], list[Any]], *, max_batch_tokens: int,
                 max_concurrent_requests: int, metrics: Metrics | None = None):
        self.run, self.max_batch_tokens = run, max_batch_tokens
        self.max_concurrent_requests, self.metrics = max_concurrent_requests, metrics or Metrics()
        self.pending: deque[_Work] = deque()
        self.in_flight = 0
        self.closing = False
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-model")

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._worker = asyncio.create_task(self._loop(), name="bertkit-batcher")

    def admit(self) -> None:
        """Raise :class:`Overloaded` (or :class:`ShuttingDown`) unless a new request can be queued: called before
        a request's inputs are tokenized, so refusing one costs next to nothing."""
        if self.closing:
            raise ShuttingDown("the server is shutting down")
        if self.in_flight >= self.max_concurrent_requests:
            raise Overloaded(f"{self.in_flight} requests in flight, the limit (--max-concurrent-requests) is "
                             f"{self.max_concurrent_requests}; retry shortly")

    async def submit(self, items: list[Any], tokens: list[int], params: dict[str, Any]) -> list[Any]:
        """The answers for ``items`` (token counts ``tokens``) under ``params``, in order."""
        self.admit()
        loop = asyncio.get_running_loop()
        key = repr(sorted(params.items()))
        work = [_Work(item, n, key, params, loop.create_future()) for item, n in zip(items, tokens)]
        self.in_flight += 1
        self.pending.extend(work)
        self.metrics.queue_depth = len(self.pending)
        self._wakeup.set()
        try:
            return list(await asyncio.gather(*(w.future for w in work)))
        finally:
            self.in_flight -= 1
            for w in work:  # a client that went away: its items need not run
                w.future.cancel()

    async def close(self) -> None:
        """Refuse new requests, finish every item already queued, stop the worker."""
        self.closing = True
        if self._worker is not None:
            self._wakeup.set()
            await self._worker
        self._executor.shutdown(wait=True)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = self._take()
            if not batch:
                if self.closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self.metrics.batch(len(batch), sum(w.tokens for w in batch))
            try:
                answers = await loop.run_in_executor(self._executor, self.run, [w.item for w in batch],
                                                     batch[0].params)
            except Exception as error:  # the requests of this batch fail; the server goes on
                for w in batch:
                    if not w.future.done():
                        w.future.set_exception(error)
                continue
            for w, answer in zip(batch, answers):
                if not w.future.done():
                    w.future.set_result(answer)

    def _take(self) -> list[_Work]:
        """The oldest live item and the waiting items with its parameters, within the token budget."""
        while self.pending and self.pending[0].future.done():
            self.pending.popleft()
        if not self.pending:
            return []
        first = self.pending.popleft()
        batch, tokens, kept = [first], first.tokens, deque()
        while self.pending:
            w = self.pending.popleft()
            if w.future.done():
                continue
            if w.key == first.key and tokens + w.tokens <= self.max_batch_tokens:
                batch.append(w)
                tokens += w.tokens
            else:
                kept.append(w)
        self.pending = kept
        self.metrics.queue_depth = len(self.pending)
        return batch
