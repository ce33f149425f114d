"""Recover httpcore pool slots orphaned by a cancelled request (an upstream defect).

With httpx 0.28 / httpcore 1.0, when a request waiting in the connection pool's queue
is handed a brand-new connection by another task and is cancelled before it runs, the
pool keeps that connection forever in the ``CONNECTING`` state: neither idle nor
closed, it holds a ``max_connections`` slot, and enough of them make every later
request fail with ``httpx.PoolTimeout`` against a healthy server. A hedging transport
cancels losers on every hedged request, so it meets this constantly (reproduced with
two replicas answering in 0-4 ms, a 0.5 ms hedge delay and ``max_connections=2`` on
trio; the regression test is ``tests/integration/test_pool_leak.py``).

The fix here is detection and eviction, right after a cancellation: a connection that
never started connecting and that no queued request is assigned to can never be used,
so it is marked failed (which httpcore treats as closed) and the pool is asked to
re-assign its queue, exactly as httpcore does after any request leaves it. This reads
private httpcore attributes; every access is feature-detected, so on an httpcore
whose internals differ the guard does nothing rather than fail a request.

A second defect is HTTP/2's. When a request is cancelled, or its response closed
before its end, httpcore forgets the stream but neither resets it (no ``RST_STREAM``)
nor returns its flow-control credit: the replica keeps working and sending, and the
bytes it sends (already received or still to come) are never acknowledged. Every
cancelled loser so eats into the connection's 16 MB receive window until the window is
empty and every stream multiplexed on the connection stalls (four losers of 4 MB
bodies are enough; ``tests/reliability/test_faults_loopback.py``). The guard resets
such orphaned streams with ``CANCEL`` after a race, acknowledging what they had
received, so the replica sees the cancel and later data is credited back by h2 itself.

Strictly private.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

logger = logging.getLogger("hedgeclient")

_CANCEL = 0x8  # the HTTP/2 error code CANCEL (RFC 9113, section 7)
_WRITE_TIMEOUT = 1.0  # seconds; clean-up never waits longer on a stuck socket


def _pool_of(transport: object) -> Any | None:
    pool = getattr(transport, "_pool", None)
    if pool is None or not hasattr(pool, "_connections") or not hasattr(pool, "_requests"):
        return None
    return pool


def has_pool(transport: object) -> bool:
    """True when ``transport`` is an httpcore-pooled transport the guard can inspect."""
    return _pool_of(transport) is not None


def orphaned_connections(transport: object) -> list[Any]:
    """Return the pool's connections stuck in ``CONNECTING`` with no request assigned."""
    pool = _pool_of(transport)
    if pool is None:
        return []
    assigned = {id(getattr(r, "connection", None)) for r in pool._requests}
    return [
        c
        for c in pool._connections
        # `_connection` is None until connected; `_connect_failed` marks a failed
        # connect. Classes without these attributes (proxies) are never matched.
        if getattr(c, "_connection", True) is None
        and getattr(c, "_connect_failed", True) is False
        and id(c) not in assigned
    ]


async def evict_orphans(transport: object) -> int:
    """Evict orphaned connections from ``transport``'s pool; return how many.

    Runs shielded from cancellation (it is clean-up) and never raises.
    """
    pool = _pool_of(transport)
    if pool is None:
        return 0
    try:
        orphans = orphaned_connections(transport)
        if not orphans:
            return 0
        for connection in orphans:
            connection._connect_failed = True  # is_closed() is now true
        with pool._optional_thread_lock:
            closing = pool._assign_requests_to_connections()
        with anyio.CancelScope(shield=True):
            await pool._close_connections(closing)
    except Exception:  # never fail a request over clean-up of a private structure
        logger.warning("hedgeclient: could not evict orphaned pool connections", exc_info=True)
        return 0
    logger.debug("hedgeclient: evicted %d orphaned pool connection(s)", len(orphans))
    return len(orphans)


def _h2_connections(transport: object) -> list[Any]:
    """Return the pool's HTTP/2 connections (httpcore ``AsyncHTTP2Connection``)."""
    pool = _pool_of(transport)
    if pool is None:
        return []
    found = []
    for connection in pool._connections:
        protocol = getattr(connection, "_connection", None)
        if hasattr(protocol, "_h2_state") and hasattr(protocol, "_events"):
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
    connection's receive window gets them back), then it is reset with ``CANCEL`` and
    the frames are written at once. Runs shielded from cancellation and never raises.
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
            with anyio.CancelScope(shield=True):
                async with connection._write_lock:
                    data = state.data_to_send()
                    if data and connection._write_exception is None:
                        try:
                            await connection._network_stream.write(data, _WRITE_TIMEOUT)
                        except Exception as exc:  # as httpcore does: the connection is done
                            connection._write_exception = exc
                            connection._connection_error = True
        except Exception:  # never fail a request over clean-up of a private structure
            logger.warning("hedgeclient: could not reset orphaned HTTP/2 streams", exc_info=True)
    if reset:
        logger.debug("hedgeclient: reset %d orphaned HTTP/2 stream(s)", reset)
    return reset
