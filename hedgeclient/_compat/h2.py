"""Repair what cancelling one HTTP/2 request does to its neighbours (upstream defects).

Cancelling one request of a shared HTTP/2 connection damages its neighbours,
in four ways (httpcore 1.0.9; each reproduced by the reliability suite,
``tests/reliability/test_faults_loopback.py``, and fixed here):

1. No reset: httpcore forgets a cancelled (or closed-early) stream without
   ``RST_STREAM`` and without returning its flow-control credit, so the replica keeps
   working, and every loser eats into the connection's 16 MB receive window until all
   its streams stall (encode/httpcore#943, #1022). :func:`reset_orphaned_streams`
   acknowledges what such a stream received and resets it with ``CANCEL``.
2. Lost frames: httpcore takes every frame queued on the connection (other streams'
   included) and then writes them; a write cancelled at its first checkpoint drops
   them, and a lost header block desynchronises HPACK, so the server ends the whole
   connection. :func:`make_writes_cancel_safe` shields network writes up to the
   writer's own deadline (a write to a stalled server still ends there).
3. Surplus stream permits: a request cancelled while it sets a new connection up
   leaves the max-streams semaphore with extra permits; a neighbour later fails with
   ``ValueError: semaphore released too many times``. :func:`repair_stream_permits`.
4. A dropped connection: a request cancelled while *waiting* on a connection being
   connected marks it failed; the pool forgets it, still open, and leaks its socket.
   :func:`readopt_connecting`.

Repairs 3 and 4 must run in the cancelled task before its next checkpoint
(:func:`repair_after_cancel`); 1 runs after each race. All of them read private
httpcore and h2 attributes, feature-detected, and never raise.

Strictly private.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.lowlevel
import httpcore

from hedgeclient._compat.pool import pool_of

logger = logging.getLogger("hedgeclient")

_CANCEL = 0x8  # the HTTP/2 error code CANCEL (RFC 9113, section 7)
_WRITE_TIMEOUT = 1.0  # seconds; clean-up never waits longer on a stuck socket
_WRITE_GRACE = 0.05  # seconds a shielded write may run past its writer's deadline
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113, section 3.4


def _h2_connections(transport: object) -> list[Any]:
    """Return the pool's open HTTP/2 connections (httpcore ``AsyncHTTP2Connection``)."""
    pool = pool_of(transport)
    if pool is None:
        return []
    found = []
    for connection in pool._connections:
        protocol = getattr(connection, "_connection", None)
        state = getattr(protocol, "_h2_state", None)
        if state is not None and hasattr(protocol, "_events"):
            machine = getattr(state, "state_machine", None)
            if getattr(getattr(machine, "state", None), "name", "CLOSED") != "CLOSED":
                found.append(protocol)
    return found


def orphaned_streams(connection: Any) -> list[int]:
    """Return the ids of the streams h2 still holds open that httpcore has forgotten."""
    events = connection._events
    return [
        stream_id
        for stream_id, stream in list(connection._h2_state.streams.items())
        if not stream.closed and stream_id not in events
    ]


async def reset_orphaned_streams(transport: object) -> int:
    """Reset the orphaned HTTP/2 streams of ``transport``'s pool; return how many.

    Each one's unacknowledged received bytes are acknowledged first (so the
    connection's receive window gets them back), then it is reset with ``CANCEL``, and
    the frames are written at once unless another task holds the connection's write
    lock for more than a second (they then leave with the connection's next write).
    Runs shielded from cancellation and never raises.
    """
    reset = 0
    for connection in _h2_connections(transport):
        try:
            orphans = orphaned_streams(connection)
            if not orphans:
                continue
            state = connection._h2_state
            for stream_id in orphans:
                window = getattr(state.streams[stream_id], "_inbound_window_manager", None)
                if window is not None:
                    unread = window.max_window_size - window.current_window_size
                    unread -= getattr(window, "_bytes_processed", 0)
                    if unread > 0:
                        state.acknowledge_received_data(unread, stream_id)
                state.reset_stream(stream_id, error_code=_CANCEL)
            reset += len(orphans)
            await _flush(connection)
        except Exception:  # never fail a request over clean-up of a private structure
            logger.warning("hedgeclient: could not reset orphaned HTTP/2 streams", exc_info=True)
    if reset:
        logger.debug("hedgeclient: reset %d orphaned HTTP/2 stream(s)", reset)
    return reset


async def _flush(connection: Any) -> None:
    """Write the h2 frames queued on ``connection``, as httpcore's own writes do."""
    lock = connection._write_lock
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_WRITE_TIMEOUT) as waiting:
            await lock.__aenter__()
        if waiting.cancelled_caught:  # not ours: the frames go with the next write
            return
        try:
            data = connection._h2_state.data_to_send()
            if data and connection._write_exception is None:
                try:
                    await connection._network_stream.write(data, _WRITE_TIMEOUT)
                except Exception as exc:  # as httpcore does: the connection is done
                    connection._write_exception = exc
                    connection._connection_error = True
        finally:
            await lock.__aexit__()


def repair_after_cancel(transport: object) -> None:
    """Undo what cancelling one request does to its neighbours in httpcore's pool.

    Call it synchronously in the cancelled task, as the cancellation leaves the
    inner transport and before the task's next checkpoint: the two repairs below must
    happen before another task can run. Never raises.
    """
    readopt_connecting(transport)
    repair_stream_permits(transport)


def readopt_connecting(transport: object) -> int:
    """Put back into the pool a connection being connected that the pool dropped.

    A connection that may serve HTTP/2 is shared while it connects: several requests
    wait on it while the first one connects. A *waiting* request that is cancelled
    marks it failed, so the pool drops it from its list (unclosed), and the request
    that then connects it leaves a live connection the pool can neither reuse nor
    close (a leaked socket, a ``ResourceWarning`` when it is collected). A connection
    still assigned to a request, not connected, marked failed, with its connect lock
    held (a connect under way or handed to the next waiter) is this case: it is
    marked healthy and put back. Returns how many were put back; never raises.
    """
    pool = pool_of(transport)
    if pool is None:
        return 0
    readopted = 0
    try:
        with pool._optional_thread_lock:
            known = {id(c) for c in pool._connections}
            for pool_request in pool._requests:
                connection = getattr(pool_request, "connection", None)
                if (
                    connection is not None
                    and id(connection) not in known
                    and getattr(connection, "_connection", True) is None
                    and getattr(connection, "_connect_failed", False) is True
                    and lock_held(getattr(connection, "_request_lock", None))
                ):
                    connection._connect_failed = False
                    pool._connections.append(connection)
                    known.add(id(connection))
                    readopted += 1
    except Exception:  # never fail a request over clean-up of a private structure
        logger.warning("hedgeclient: could not re-adopt a pool connection", exc_info=True)
    if readopted:
        logger.debug("hedgeclient: put %d connecting connection(s) back in the pool", readopted)
    return readopted


def repair_stream_permits(transport: object) -> int:
    """Take back the stream permits a cancelled HTTP/2 connection set-up left behind.

    httpcore sets up a new HTTP/2 connection inside its first request: it creates the
    connection's max-streams semaphore full (100 permits) and takes back all but one
    in a loop, one checkpoint each. A request cancelled in that loop leaves the
    surplus behind, and when the server's SETTINGS later release permits up to its
    stream limit, the semaphore overflows: a *neighbouring* request fails with
    ``ValueError: semaphore released too many times``. Outside that loop the free
    permits equal the stream limit minus the streams open, so a surplus on a
    connection the calling task set up (it wrote the connection preface, see
    :class:`_CancelSafeStream`) is this damage. Call it synchronously in the cancelled
    task, before a checkpoint lets another task read the server's SETTINGS. Never
    raises.

    Returns:
        The permits taken back.
    """
    repaired = 0
    task = anyio.get_current_task().id
    for connection in _h2_connections(transport):
        try:
            if getattr(connection._network_stream, "initializer", None) != task:
                continue
            semaphore = getattr(connection, "_max_streams_semaphore", None)  # set up yet?
            inner = getattr(semaphore, "_trio_semaphore", None) or getattr(
                semaphore, "_anyio_semaphore", None
            )
            if inner is None:
                continue
            surplus = inner.value - (connection._max_streams - len(connection._events))
            for _ in range(max(0, surplus)):
                inner.acquire_nowait()
            repaired += max(0, surplus)
        except Exception:  # never fail a request over clean-up of a private structure
            logger.warning("hedgeclient: could not repair HTTP/2 stream permits", exc_info=True)
    if repaired:
        logger.debug("hedgeclient: took back %d HTTP/2 stream permit(s)", repaired)
    return repaired


def lock_held(lock: Any) -> bool:
    """Whether an httpcore ``AsyncLock`` is held (by any task, or handed to a waiter)."""
    inner = getattr(lock, "_trio_lock", None) or getattr(lock, "_anyio_lock", None)
    return inner is not None and bool(inner.locked())


class _CancelSafeStream(httpcore.AsyncNetworkStream):
    """A network stream whose writes complete even if the writing task is cancelled.

    httpcore's HTTP/2 connection takes every frame queued on the connection (other
    streams' included) before it writes; a write cancelled at its first checkpoint
    drops them all, and the lost header block desynchronises HPACK, so the server ends
    the whole connection. A shielded write still ends at its write timeout, and at the
    writing task's effective deadline (``anyio.fail_after``, an httpx timeout enforced
    by a cancel scope): then it raises ``httpcore.WriteError``, which closes the
    connection as any failed write does.
    Strictly private.
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        # The id of the task that wrote the HTTP/2 connection preface: the one that
        # sets the connection up (see repair_stream_permits).
        self.initializer: int | None = None
        self.broken = False  # a write was abandoned half-way: nothing more goes over it

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's interface
        if self.broken:
            msg = "HTTP/2 connection closed after a write abandoned at its deadline"
            raise httpcore.ReadError(msg)
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's interface
        if self.broken:
            msg = "HTTP/2 connection closed after a write abandoned at its deadline"
            raise httpcore.WriteError(msg)
        if self.initializer is None and buffer.startswith(_H2_PREFACE):
            self.initializer = anyio.get_current_task().id
        # Shielded from a cancel (frames of other streams ride on this write), but not
        # for long past the writer's own deadline: a write to a stalled server ends
        # there, while a write that merely straddles the deadline still completes.
        now = anyio.current_time()
        deadline = anyio.current_effective_deadline()
        if deadline == -math.inf:  # cancelled already, not by a deadline: a short grace
            deadline = now + _WRITE_TIMEOUT
        else:
            deadline = max(deadline, now) + _WRITE_GRACE
        with anyio.CancelScope(shield=True, deadline=deadline) as scope:
            await self._stream.write(buffer, timeout)
        if scope.cancelled_caught:  # frames lost mid-write: the connection is unusable
            self.broken = True
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            await anyio.lowlevel.checkpoint()  # the writer's own cancellation, due by now
            msg = "HTTP/2 write abandoned at the writer's deadline"
            raise httpcore.WriteError(msg)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return _CancelSafeStream(stream)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CancelSafeBackend(httpcore.AsyncNetworkBackend):
    """A network backend whose streams are :class:`_CancelSafeStream`. Strictly private."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _CancelSafeStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _CancelSafeStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def make_writes_cancel_safe(transport: object) -> bool:
    """Give an HTTP/2-capable pool cancel-safe writes (see :class:`_CancelSafeStream`).

    Only pools with HTTP/2 enabled are changed: an HTTP/1.1 connection whose write is
    cancelled is closed anyway. Idempotent. Returns whether the pool is now covered.
    """
    pool = pool_of(transport)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or backend is None or not getattr(pool, "_http2", False):
        return False
    if not isinstance(backend, _CancelSafeBackend):
        pool._network_backend = _CancelSafeBackend(backend)
    return True
