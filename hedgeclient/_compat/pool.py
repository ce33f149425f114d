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
from typing import Any

import anyio

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
    """Return the pool's connections stuck in ``CONNECTING`` with no request assigned."""
    pool = pool_of(transport)
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
    pool = pool_of(transport)
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
