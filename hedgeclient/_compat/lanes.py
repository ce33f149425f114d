"""Connections apart from the pool's choice: a second pool, and closing idle connections.

**A second pool (HTTP/2).** httpcore's pool sends every request to one origin over a
single HTTP/2 connection, so a backup to a single address (one hostname behind a load
balancer) would travel with its primary, and an L4 balancer would hand it to the same
backend. For an ``httpx.AsyncHTTPTransport`` whose pool speaks HTTP/2,
:func:`second_pool` builds a sibling pool with the same settings (TLS context, limits,
network backend, socket options): backups to an address their primary is using go
through it, on a connection of their own. Over HTTP/1.1 no second pool is needed: a
connection carries one request at a time, so the pool never gives a backup the
connection its primary holds.

**Closing idle connections.** When discovery removes a replica, :func:`close_idle`
closes the pool's idle connections to it at once, rather than when they expire.

Both read private httpcore attributes, gated like the other repairs (the tested
httpcore versions, a pool of the expected structure); where they cannot apply,
``second_pool`` returns None (the backup shares the pool, said once in the log) and
``close_idle`` closes nothing (the connections expire as usual).

Strictly private.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import httpcore
import httpx

from hedgeclient._compat.pool import pool_of

__all__ = ["close_idle", "h2_over_tls_only", "second_pool"]

logger = logging.getLogger("hedgeclient")

_TESTED = ((1, 0, 5), (1, 0, 9))


def _tested(version: str = httpcore.__version__) -> bool:
    parts = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])
    return _TESTED[0] <= parts <= _TESTED[1]


def h2_over_tls_only(inner: object) -> bool:
    """True when ``inner``'s pool offers HTTP/2 beside HTTP/1.1 (``http2=True`` with the
    default ``http1=True``): it then speaks HTTP/2 only where TLS negotiates it (ALPN,
    RFC 9113, section 3.2), and HTTP/1.1 to every ``http://`` origin; HTTP/2 over
    cleartext needs prior knowledge, ``http1=False`` (section 3.3). False for a
    transport that is not an httpcore pool."""
    pool = pool_of(inner)
    return bool(getattr(pool, "_http2", False) and getattr(pool, "_http1", False))


def second_pool(inner: object) -> httpx.AsyncHTTPTransport | None:
    """A transport whose pool is a sibling of ``inner``'s HTTP/2 pool, or None when
    ``inner`` does not multiplex (HTTP/1.1 only, not an httpcore pool) or the sibling
    cannot be built (an untested httpcore, a pool of another structure: logged)."""
    pool = pool_of(inner)
    if pool is None or type(pool) is not httpcore.AsyncConnectionPool:
        return None
    if not getattr(pool, "_http2", False):
        return None
    if not _tested():
        logger.warning(
            "hedgeclient: httpcore %s is untested for a second HTTP/2 pool; backups to a "
            "single address share their primary's connection",
            httpcore.__version__,
        )
        return None
    try:
        sibling = httpcore.AsyncConnectionPool(
            ssl_context=pool._ssl_context,
            proxy=getattr(pool, "_proxy", None),
            max_connections=pool._max_connections,
            max_keepalive_connections=pool._max_keepalive_connections,
            keepalive_expiry=pool._keepalive_expiry,
            http1=pool._http1,
            http2=pool._http2,
            retries=pool._retries,
            local_address=pool._local_address,
            uds=pool._uds,
            network_backend=pool._network_backend,
            socket_options=pool._socket_options,
        )
    except (AttributeError, TypeError):
        logger.warning(
            "hedgeclient: cannot build a second HTTP/2 pool (httpcore %s); backups to a "
            "single address share their primary's connection",
            httpcore.__version__,
        )
        return None
    lane = httpx.AsyncHTTPTransport(http2=True)
    lane._pool = sibling
    return lane


def _origin(text: str) -> httpcore.Origin:
    url = httpx.URL(text)
    port = url.port if url.port is not None else {"http": 80, "https": 443}[url.scheme]
    return httpcore.Origin(url.raw_scheme, url.raw_host, port)


async def close_idle(
    transport: object, origins: Collection[str], busy: set[str] | None = None
) -> int:
    """Close ``transport``'s idle pooled connections to ``origins``; return how many.

    ``busy``, when given, receives the origins that still have a connection that is
    not idle (carrying a request): they are closed by a later call, once idle.
    Never raises: on a pool it cannot read it closes nothing.
    """
    pool: Any = pool_of(transport)
    if pool is None or not origins:
        return 0
    try:
        wanted = [(o, _origin(o)) for o in origins]
        closing = []
        with pool._optional_thread_lock:
            for connection in list(pool._connections):
                origin = next((o for o, w in wanted if connection.can_handle_request(w)), None)
                if origin is None:
                    continue
                if connection.is_idle():
                    closing.append(connection)
                    pool._connections.remove(connection)
                elif busy is not None and not connection.is_closed():
                    busy.add(origin)
        await pool._close_connections(closing)
    except Exception:  # clean-up: the connections would expire anyway
        logger.debug("hedgeclient: closing idle connections failed", exc_info=True)
        return 0
    return len(closing)
