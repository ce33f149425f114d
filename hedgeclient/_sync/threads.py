"""The engine of a ``SyncHedgedTransport`` on the callers' own threads.

:class:`ThreadEngine` drives the async engine (a ``HedgedTransport``: one request path,
one race, one set of policy objects) on the thread that calls it, with no event loop:
``_timer._threads`` has the idea and the lock. Here is what meets httpx:

- :class:`ThreadInner`, the engine's inner transport: a sync httpx transport (an
  ``httpx.HTTPTransport`` whose sockets ``_compat.sockets`` watches) called with the
  engine's lock let go; an attempt whose scope was cancelled meanwhile (another won, its
  socket shut down) ends as cancelled, as on a loop;
- :class:`AsyncOfSync` and :class:`SyncOfAsync`, a body seen from the other side: the
  engine reads and closes sync bodies (a loser's, a first byte), and a caller reads the
  winner's body on its own thread, outside the engine (the sync body itself, unless the
  engine wrapped it, as a race decided at the first byte does).

The primary attempt runs on the caller's thread; a backup on a worker thread of the
timer's. ``docs/how-it-works.md`` ("The sync client") gives the measured costs.
Strictly private.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar, final

import httpx
import sniffio

from hedgeclient._clock import THREADS
from hedgeclient._compat.pool import evict_orphans_sync, stop_queued
from hedgeclient._compat.sockets import watch
from hedgeclient._timer import ThreadScope, ThreadTimer, drive, engine_thread, thread_state
from hedgeclient._wire.send import OnWire

__all__ = ["AsyncOfSync", "SyncOfAsync", "ThreadEngine", "ThreadInner"]

_T = TypeVar("_T")


@final
class AsyncOfSync(httpx.AsyncByteStream):
    """A sync response body as the engine reads it: each chunk and the close block the
    thread, the engine's lock let go meanwhile."""

    def __init__(self, stream: httpx.SyncByteStream, lock: threading.Lock) -> None:
        self.sync = stream
        self._lock = lock

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = iter(self.sync)
        lock = self._lock
        while True:
            lock.release()
            try:
                chunk = next(chunks, None)
            finally:
                lock.acquire()
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        self._lock.release()
        try:
            self.sync.close()
        finally:
            self._lock.acquire()


@final
class SyncOfAsync(httpx.SyncByteStream):
    """A body the engine wrapped (a first byte read ahead), read by the caller's thread:
    each chunk and the close driven under the engine's lock."""

    def __init__(self, stream: httpx.AsyncByteStream, engine: ThreadEngine) -> None:
        self._stream = stream
        self._engine = engine

    def __iter__(self) -> Iterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            try:
                yield self._engine.run(chunks.__anext__)
            except StopAsyncIteration:
                return

    def close(self) -> None:
        self._engine.run(self._stream.aclose)


@final
class ThreadInner(httpx.AsyncBaseTransport):
    """The engine's inner transport: ``sync``, called with the engine's lock let go.

    Args:
        sync: the sync transport every attempt goes through.
        lock: the engine's lock.
    """

    def __init__(self, sync: httpx.BaseTransport, lock: threading.Lock) -> None:
        self.sync = sync
        self._lock = lock
        # An httpx pool: its sockets watched (losers stopped), and httpcore's trace
        # extension says when an attempt leaves the pool's queue (``_fleet``).
        self.reports_queue = watch(sync)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the sync transport, this thread blocked meanwhile.

        Raises:
            asyncio.CancelledError: the thread's scope was cancelled (another attempt won,
                the transport closed): its socket was shut down, or it was not sent.
            httpx.HTTPError: the sync transport's own error.
        """
        scope: ThreadScope | None = getattr(thread_state, "scope", None)
        if scope is not None and scope.cancelled:
            raise asyncio.CancelledError
        trace = request.extensions.get("trace")
        if isinstance(trace, OnWire):  # the engine's own, async: sync httpcore calls it
            request.extensions["trace"] = self._sync_trace(trace)
        lock = self._lock
        watched = self.reports_queue and scope is not None
        if watched:  # a loser still in the pool's queue must leave it when stopped
            scope.stopper = functools.partial(stop_queued, self.sync, request.extensions)  # type: ignore[union-attr]
        lock.release()
        try:
            response = self.sync.handle_request(request)
        except Exception as exc:
            if self.reports_queue and isinstance(exc, httpx.PoolTimeout):
                evict_orphans_sync(self.sync)  # (httpcore's own defect, ``_compat.pool``)
            if scope is not None and scope.cancelled:  # its socket shut down: it lost
                raise asyncio.CancelledError from exc
            raise
        finally:
            lock.acquire()
            if watched:
                scope.stopper = None  # type: ignore[union-attr]
        stream = response.stream
        if scope is not None and scope.cancelled:  # it lost as its headers came
            if isinstance(stream, httpx.SyncByteStream):
                lock.release()
                try:
                    stream.close()
                finally:
                    lock.acquire()
            raise asyncio.CancelledError
        if isinstance(stream, httpx.SyncByteStream):  # (the response is ours: no copy)
            response.stream = AsyncOfSync(stream, lock)
        return response

    def _sync_trace(self, trace: OnWire) -> Callable[..., None]:
        """The engine's trace callback as sync httpcore calls it: under the lock."""
        lock = self._lock

        def traced(name: str, info: dict[str, Any]) -> None:
            with lock:
                result = trace.note(name, info)
                if result is not None:  # a caller's async callback in a sync client
                    drive(result)

        return traced

    async def aclose(self) -> None:
        """Close the sync transport."""
        self.sync.close()


@final
class ThreadEngine:
    """An async ``HedgedTransport`` driven on the callers' threads. Strictly private.

    Args:
        build: makes the engine around its inner transport (``HedgedTransport(inner,
            **options)``).
        sync: the sync transport every attempt goes through.
        name: the engine's name, in its threads' names.
    """

    def __init__(
        self, build: Callable[[httpx.AsyncBaseTransport], Any], sync: httpx.BaseTransport, name: str
    ) -> None:
        self.lock = threading.Lock()
        self.timer = ThreadTimer(self.lock, name)
        self.inner = ThreadInner(sync, self.lock)
        self.engine = build(self.inner)
        self._closed = False
        self.used = False  # whether a request was sent (a forked child then rebuilds)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a budget it held is free)."""
        return self._closed

    def elsewhere(self) -> bool:
        """Whether the calling thread is not running this engine (a retry library's
        ``try_retry`` then takes the lock: ``HedgeBudget``)."""
        return getattr(thread_state, "timer", None) is not self.timer

    def run(self, func: Callable[[], Any]) -> Any:
        """Run ``func()`` (a plain function, or one returning a coroutine, driven) under
        the engine's lock on this thread, and return its result."""
        with self.lock, engine_thread(self.timer):
            result = func()
            if inspect.iscoroutine(result):
                result = drive(result)
            return result

    def send(self, request: httpx.Request) -> httpx.Response:
        """The engine's response to ``request``, its body the sync transport's own.

        Raises:
            RuntimeError: sent by code this engine runs (a hook, a selector): it holds the
                engine's lock, and the request would wait for it for ever.
            BaseException: what ``HedgedTransport.handle_async_request`` raises.
        """
        state, names = thread_state, sniffio.thread_local
        if getattr(state, "timer", None) is self.timer:
            msg = "a request through a SyncHedgedTransport from code its engine runs (a hook)"
            raise RuntimeError(msg)
        self.used = True
        with self.lock:  # engine_thread(), inline: once per request
            old, old_name = getattr(state, "timer", None), names.name
            state.timer, names.name = self.timer, THREADS
            try:
                response: httpx.Response = drive(self.engine.handle_async_request(request))
            finally:
                state.timer, names.name = old, old_name
        stream = response.stream  # (the response is the inner transport's: no copy)
        if isinstance(stream, AsyncOfSync):
            response.stream = stream.sync
        elif isinstance(stream, httpx.AsyncByteStream):
            response.stream = SyncOfAsync(stream, self)
        return response

    def abandon(self) -> None:
        """Mark closed without stopping or waiting for anything: in a forked child, whose
        copy holds the parent's requests in flight, which no thread will end."""
        self._closed = True

    def close(self) -> None:
        """Stop the requests in flight, close the inner transport, join the threads."""
        if self._closed:
            return
        self._closed = True
        self.run(self.engine.aclose)
        self.timer.close()
