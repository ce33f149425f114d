"""Recover httpcore pool slots orphaned by a cancelled request (an upstream defect).

With httpx 0.28 / httpcore 1.0, when a request waiting in the connection pool's queue
is handed a brand-new connection by another task and is cancelled before it runs, the
pool keeps that connection forever in the ``CONNECTING`` state: neither idle nor
closed, it holds a ``max_connections`` slot, and enough of them make every later
request fail with ``httpx.PoolTimeout`` against a healthy server. A hedging transport
cancels losers on every hedged request, so it meets this constantly (reproduced with
two replicas answering in 0-4 ms, a 0.5 ms hedge delay and ``max_connections=2`` on
trio; the regression test is ``tests/integration/test_transport_loopback.py``).

The fix here is detection and eviction, right after a cancellation: a connection that
never started connecting and that no queued request is assigned to can never be used,
so it is marked failed (which httpcore treats as closed) and the pool is asked to
re-assign its queue, exactly as httpcore does after any request leaves it. This reads
private httpcore attributes; every access is feature-detected, so on an httpcore
whose internals differ the guard does nothing rather than fail a request.

The HTTP/2 repairs are in ``_compat.h2``.

Strictly private.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from typing import Any, NoReturn, final

import anyio
import httpcore
import httpx

try:  # httpx's own response stream and its exception mapping (see ReclaimingStream)
    from httpx._transports.default import AsyncResponseStream, map_httpcore_exceptions
except ImportError:  # pragma: no cover - an httpx without them: no message is added
    AsyncResponseStream = None  # type: ignore[assignment,misc]

logger = logging.getLogger("hedgeclient")


def pool_of(transport: object) -> Any | None:
    """Return the httpcore pool inside ``transport``, or None if it has none we know."""
    pool = getattr(transport, "_pool", None)
    if pool is None or not hasattr(pool, "_connections") or not hasattr(pool, "_requests"):
        return None
    return pool


def has_pool(transport: object) -> bool:
    """True when ``transport`` is an httpcore-pooled transport the guard can inspect."""
    return pool_of(transport) is not None


def orphaned_connections(transport: object) -> list[Any]:
    """Return the pool's connections no request can ever use again.

    Two kinds, neither assigned to any request in the pool:

    - stuck in ``CONNECTING``: a request handed a new connection was cancelled before
      it connected it (encode/httpcore#1093);
    - an HTTP/1.1 connection still ``NEW`` or ``ACTIVE``: its request was cancelled
      by a native asyncio cancel (which anyio's shields do not stop) before it sent
      anything, or while httpcore's own clean-up of it ran; the request has left the
      pool, which removes it only after that clean-up has made the connection ``IDLE``
      or ``CLOSED``. Neither state is idle nor available, so the pool would keep the
      connection, and its slot, forever. Plain httpx leaks these too.
    """
    pool = pool_of(transport)
    if pool is None:
        return []
    # The connections (a few) first, then the requests (thousands may queue) only until
    # each suspect has its request: a connection in use is ACTIVE, and its request is
    # near the head of the pool's list (the oldest). Reading the whole list after every
    # race made the repair O(queue) per request (issue 25).
    suspects = {id(c): c for c in pool._connections if _connecting(c) or _stuck_http11(c)}
    for request in pool._requests:
        if not suspects:
            break
        suspects.pop(id(getattr(request, "connection", None)), None)
    return list(suspects.values())


def _connecting(connection: Any) -> bool:
    # `_connection` is None until connected; `_connect_failed` marks a failed connect.
    # Classes without these attributes (proxies) are never matched.
    return (
        getattr(connection, "_connection", True) is None
        and getattr(connection, "_connect_failed", True) is False
    )


def _stuck_http11(connection: Any) -> bool:
    protocol = getattr(connection, "_connection", None)
    state = getattr(getattr(protocol, "_state", None), "name", None)
    return type(protocol).__name__ == "AsyncHTTP11Connection" and state in ("NEW", "ACTIVE")


async def evict_orphans(transport: object) -> int:
    """Evict orphaned connections from ``transport``'s pool; return how many.

    Each is marked closed (so the pool drops it and hands its slot to a queued
    request), then closed. Runs shielded from cancellation (it is clean-up) and never
    raises.
    """
    pool = pool_of(transport)
    if pool is None:
        return 0
    try:
        orphans = orphaned_connections(transport)
        if not orphans:
            return 0
        connected = []
        for connection in orphans:
            if connection._connection is None:
                connection._connect_failed = True  # is_closed() is now true
            else:  # a stuck HTTP/1.1 connection: CLOSED (of its own state enum)
                protocol = connection._connection
                protocol._state = type(protocol._state)["CLOSED"]
                connected.append(connection)  # the pool drops it unclosed: close it here
        with pool._optional_thread_lock:
            closing = pool._assign_requests_to_connections()
        with anyio.CancelScope(shield=True):
            await pool._close_connections([*closing, *connected])
    except Exception:  # never fail a request over clean-up of a private structure
        logger.warning("hedgeclient: could not evict orphaned pool connections", exc_info=True)
        return 0
    logger.debug("hedgeclient: evicted %d orphaned pool connection(s)", len(orphans))
    return len(orphans)


def evict_orphans_sync(transport: object) -> int:
    """:func:`evict_orphans` for a sync pool (``httpx.HTTPTransport``), whose requests
    time out in its queue on other threads: a request handed a new connection as its
    pool timeout ran out leaves it ``CONNECTING`` (encode/httpcore#1093 on threads; a
    sync client's backups, with their trimmed timeouts, meet it). Never raises."""
    pool = pool_of(transport)
    if pool is None:
        return 0
    try:
        with pool._optional_thread_lock:
            orphans = [c for c in orphaned_connections(transport) if c._connection is None]
            for connection in orphans:
                connection._connect_failed = True  # is_closed() is now true
            closing = pool._assign_requests_to_connections() if orphans else []
        if closing:
            pool._close_connections(closing)
    except Exception:  # never fail a request over clean-up of a private structure
        logger.warning("hedgeclient: could not evict orphaned pool connections", exc_info=True)
        return 0
    return len(orphans)


class _Stopped(Exception):
    """A sync pool's queued request stopped from another thread (:func:`stop_queued`)."""


@final
class _NoConnection:
    """What :func:`stop_queued` hands a queued request in place of a connection."""

    def handle_request(self, request: object) -> NoReturn:
        msg = "hedgeclient: attempt stopped in the pool's queue, another attempt won"
        raise _Stopped(msg)


_NO_CONNECTION = _NoConnection()


def stop_queued(transport: object, extensions: dict[str, Any]) -> bool:
    """Stop the request of ``transport``'s sync pool (an ``httpx.HTTPTransport``) whose
    extensions dict is ``extensions``, if it still waits in the pool's queue; return
    whether it did. From another thread, which then holds the pool's lock briefly.

    httpcore gives no way to stop a sync request waiting for a connection: its thread
    waits on an event until one is free or the pool timeout ends. A sync client's loser
    queued there (its backup found the pool full) would hold its race until then, and
    the winner, holding the only free slot until the race returns, would never free it:
    each hedged request would take the pool timeout (found by a new user's test). So the
    request is handed a stand-in connection whose ``handle_request`` raises: httpcore
    wakes it, removes it from the queue as for any error, and the attempt ends at once.
    Reads ``PoolRequest``'s private fields (httpcore 1.0.x), checked first. Never raises.
    """
    pool = pool_of(transport)
    if pool is None:
        return False
    try:
        with pool._optional_thread_lock:
            for queued in pool._requests:
                if queued.request.extensions is extensions:
                    if queued.connection is not None:  # it got one: it sends, then stops
                        return False
                    queued.assign_to_connection(_NO_CONNECTION)
                    return True
    except Exception:  # never fail a race over a private structure
        logger.warning("hedgeclient: could not stop a queued request", exc_info=True)
    return False


class ReclaimingStream(httpx.AsyncByteStream):
    """A response stream whose interrupted close still gives its connection back, and
    whose read after a local close says so.

    httpcore's ``PoolByteStream.aclose()`` marks itself closed *before* it awaits the
    connection's clean-up, so a second cancellation while a first one unwinds (a native
    ``task.cancel()`` twice on asyncio; anyio's shields do not stop those) leaves the
    HTTP/1.1 connection counted active forever; ten of them fill a ten-connection
    pool (encode/httpcore#1115, encode/httpx#3782). Plain httpx has the same defect.
    This wrapper notices, when its own ``aclose()`` ends by any path, a stream that
    is closed but whose clean-up did not finish (:func:`_interrupted`), and finishes
    the clean-up in a detached task the caller's cancellation cannot reach: the connection is closed
    (its response was not read to the end) and the pool slot freed.

    A body read on a connection this side closed (the client or the transport closed
    mid-body) fails with an ``httpx.ReadError`` whose message is empty on asyncio:
    anyio's asyncio backend raises a bare ``ClosedResourceError()``, and httpcore and
    httpx pass its empty text on (trio's says "this socket was already closed"). Only
    the transport knows who closed it, so the wrapper gives the read error a message
    saying so (:func:`closed_message`), of the same type, the original as its cause.
    To do that without an extra generator frame per chunk it iterates httpcore's
    stream itself, in place of httpx's ``AsyncResponseStream``, under httpx's own
    ``map_httpcore_exceptions`` (both private to httpx; any other stream is iterated
    as it is).

    Strictly private.
    """

    __slots__ = ("_repairs", "_stream")

    def __init__(self, stream: Any, repairs: Any = None) -> None:
        self._stream = stream
        self._repairs = repairs  # its ``closed`` says the transport closed

    def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._stream
        if type(stream) is AsyncResponseStream:  # replaces httpx's generator: no extra frame
            return self._iterate(stream._httpcore_stream)
        iterator: AsyncIterator[bytes] = stream.__aiter__()
        return iterator

    async def _iterate(self, pool_stream: Any) -> AsyncIterator[bytes]:
        """What httpx's ``AsyncResponseStream.__aiter__`` does, with a message for a
        read on a connection closed on this side."""
        with map_httpcore_exceptions():
            try:
                async for part in pool_stream:
                    yield part
            except httpcore.ReadError as exc:
                if not _closed_here(exc):
                    raise
                closed = getattr(self._repairs, "closed", False)
                raise httpcore.ReadError(closed_message(transport_closed=closed)) from exc

    async def aclose(self) -> None:
        ended = False
        try:
            await self._stream.aclose()
            ended = True
        finally:
            stream = getattr(self._stream, "inner", self._stream)  # a FirstByteStream's
            pool_stream = getattr(stream, "_httpcore_stream", None)
            if not ended or _interrupted(pool_stream):
                _spawn_reclaim(pool_stream)


def closed_message(*, transport_closed: bool) -> str:
    """The message of a body read on a connection this side closed."""
    if transport_closed:
        return (
            "the HedgedTransport was closed while the response body was being read "
            "(client.aclose(), or the end of `async with client`), which closed its "
            "connection; read the body before closing the client"
        )
    return "the connection was closed on this side while the response body was being read"


def _closed_here(exc: BaseException) -> bool:
    """Whether httpcore's read error is a read on a socket this side closed: anyio's
    ``ClosedResourceError``, or trio's under httpcore's trio backend (the peer closing
    is ``EndOfStream`` or ``BrokenResourceError`` instead)."""
    cause = exc.args[0] if exc.args else None
    trio = sys.modules.get("trio")
    kinds: tuple[type[BaseException], ...] = (anyio.ClosedResourceError,)
    if trio is not None:
        kinds += (trio.ClosedResourceError,)
    return isinstance(cause, kinds)


def _interrupted(pool_stream: Any) -> bool:
    """True for an httpcore pool stream marked closed whose clean-up did not finish:
    it still holds its pool slot, or its HTTP/1.1 connection is still ``ACTIVE`` with
    no request of the pool on it. The reclaim runs later, in a task of its own: by
    then a clean-up that did finish may have handed the connection to the next request,
    which is ``ACTIVE`` on it, and closing it would close that request's socket."""
    try:
        if not pool_stream._closed:
            return False
        request = pool_stream._pool_request
        requests = pool_stream._pool._requests
        if request in requests:
            return True
        connection = request.connection
        protocol = getattr(connection, "_connection", None)
        if (  # the usual close leaves it idle: no need to read the queue (issue 25)
            type(protocol).__name__ != "AsyncHTTP11Connection"
            or connection.is_idle()
            or connection.is_closed()
        ):
            return False
        return not any(other.connection is connection for other in requests)  # not another's
    except AttributeError:  # not an httpcore PoolByteStream
        return False


def _spawn_reclaim(pool_stream: Any) -> None:
    import contextvars

    from hedgeclient._timer import current_timer

    current_timer().spawn(contextvars.Context(), lambda: reclaim(pool_stream))


async def reclaim(pool_stream: Any) -> None:
    """Finish the clean-up of a pool stream whose close was interrupted (its connection
    closed, its slot freed), then evict any other orphan of its pool; shielded, never
    raises."""
    pool = getattr(pool_stream, "_pool", None)
    if pool is None:
        return
    try:
        with anyio.CancelScope(shield=True):
            if _interrupted(pool_stream):
                request = pool_stream._pool_request
                connection = getattr(request, "connection", None)
                if connection is not None:
                    await connection.aclose()
                with pool._optional_thread_lock:
                    if request in pool._requests:
                        pool._requests.remove(request)
                    closing = pool._assign_requests_to_connections()
                await pool._close_connections(closing)
                logger.debug("hedgeclient: reclaimed a connection whose close was interrupted")
    except Exception:  # never fail over clean-up of a private structure
        logger.warning("hedgeclient: could not reclaim an interrupted connection", exc_info=True)
    await evict_orphans(_PoolHolder(pool))


class _PoolHolder:
    """Lets :func:`evict_orphans` take a bare pool. Strictly private."""

    __slots__ = ("_pool",)

    def __init__(self, pool: Any) -> None:
        self._pool = pool
