"""Repairs of upstream httpcore defects that a hedging client meets on every hedge.

A hedging client cancels a loser on every hedged request, so it meets httpcore's
cancellation defects far more often than other code. Each repair names its defect:

- ``pool.evict_orphans``: a request cancelled after the pool handed it a new connection
  leaves that connection ``CONNECTING`` forever, holding a pool slot
  (encode/httpcore#1093).
- ``h2.reset_orphaned_streams``: a cancelled HTTP/2 stream is forgotten without
  ``RST_STREAM`` and without returning its flow-control credit (encode/httpcore#943,
  #1022).
- ``h2.make_writes_cancel_safe``: a cancelled HTTP/2 write drops the frames of other
  streams queued with it, desynchronising HPACK (the server then ends the connection).
- ``h2.repair_stream_permits``: a request cancelled while setting up an HTTP/2
  connection leaves surplus stream permits ("semaphore released too many times").
- ``h2.readopt_connecting``: a request cancelled while waiting on an HTTP/2 connection
  being connected makes the pool drop it, still open (a leaked socket).
- ``pool.ReclaimingStream``: a response close interrupted by a second cancellation
  leaves its connection counted active forever (encode/httpcore#1115); and a body read
  on a connection closed on this side (the client closed mid-body) fails with an
  ``httpx.ReadError`` whose message is empty on asyncio (anyio's bare
  ``ClosedResourceError()``, passed on by httpcore and httpx): it is given one.

Beside them, ``_compat.httpx`` builds each attempt's ``httpx.Request`` through httpx's
private attributes where the public API costs too much per attempt (each shortcut
feature-detected, with its reason and measured cost); ``_compat.lanes`` keeps a second
pool and closes idle connections.

The repairs read and write private httpcore and h2 attributes, so they are **gated**: they
apply only to an ``httpx.AsyncHTTPTransport`` whose httpcore version is in
:data:`TESTED_HTTPCORE` (the range this project's tests ran) and whose pool has the
structure they read. Where they cannot apply, :func:`repairs_for` logs one warning when
the transport is built, saying what will go wrong; never silently. A transport that is
not an httpcore pool (a ``MockTransport``, a custom transport) needs none of them.

Beside the repairs, two modules read other packages' private names, each with its
upstream reason: ``otel`` (OpenTelemetry's global providers and suppress-instrumentation
keys) and ``prometheus`` (prometheus-client's ``_created`` switch).

Strictly private.
"""

from __future__ import annotations

import logging
from typing import final

import httpcore
import httpx

from hedgeclient._compat import h2, pool

__all__ = ["TESTED_HTTPCORE", "Repairs", "repairs_for", "reports_queue"]

logger = logging.getLogger("hedgeclient")

TESTED_HTTPCORE = ((1, 0, 5), (1, 0, 9))
"""The httpcore versions (inclusive) the repairs were tested against; pyproject pins
``httpcore>=1.0.5,<1.1``."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@final
class Repairs:
    """The repairs that apply to one inner transport. Strictly private.

    Attributes:
        active: whether the repairs run at all (an httpcore pool they can read).
        traced: whether httpcore's ``trace`` extension reports when an attempt leaves
            the pool's queue (true for any httpcore pool, repaired or not).
        closed: the transport was closed (set by its request path).
    """

    __slots__ = ("_inner", "active", "closed", "traced")

    def __init__(self, inner: object, *, active: bool, traced: bool) -> None:
        self._inner = inner
        self.active = active
        self.traced = traced
        self.closed = False  # the transport closed: a body read then fails, saying so

    def after_cancel(self) -> None:
        """In a task whose attempt was just cancelled, before its next checkpoint."""
        if self.active:
            h2.repair_after_cancel(self._inner)

    def guard(self, response: httpx.Response) -> None:
        """Make the caller's response give its connection back even if its close is
        interrupted, and say who closed it if a body read finds it closed
        (``pool.ReclaimingStream``)."""
        if self.active:
            response.stream = pool.ReclaimingStream(response.stream, self)

    async def after_race(self) -> None:
        """After a race that cancelled an attempt or closed a loser; shielded, never raises."""
        if self.active:
            await pool.evict_orphans(self._inner)
            await h2.reset_orphaned_streams(self._inner)


def reports_queue(inner: object) -> bool:
    """Whether ``inner`` is an httpx pool, which reports through httpcore's ``trace``
    extension when a request leaves its queue (``Repairs.traced``)."""
    return (
        pool.pool_of(inner) is not None
        or (type(inner).__module__.startswith("httpx") and hasattr(inner, "_pool"))
        or getattr(inner, "reports_queue", None) is True  # a sync client's watched pool
    )


def repairs_for(inner: object, *, version: str = httpcore.__version__) -> Repairs:
    """Return the repairs for ``inner``; log one warning if it needs them and they
    cannot apply (an untested httpcore, or a pool whose internals moved)."""
    if getattr(inner, "reports_queue", None) is True:  # a sync client's (``_sync.threads``)
        return Repairs(inner, active=False, traced=True)
    if pool.pool_of(inner) is None:
        is_httpx_pool = reports_queue(inner)
        if is_httpx_pool:
            logger.warning(
                "hedgeclient: this httpcore's connection pool is not the one its repairs know "
                "(httpcore %s); cancelled losers may leak pool slots (encode/httpcore#1093) "
                "and, over HTTP/2, damage neighbouring streams. Pin httpcore>=1.0.5,<1.1.",
                version,
            )
        return Repairs(inner, active=False, traced=is_httpx_pool)
    low, high = TESTED_HTTPCORE
    if not low <= _version(version) <= high:
        logger.warning(
            "hedgeclient: httpcore %s is outside the versions its repairs were tested with "
            "(%s to %s); they are off: cancelled losers may leak pool slots "
            "(encode/httpcore#1093) and, over HTTP/2, damage neighbouring streams.",
            version,
            ".".join(map(str, low)),
            ".".join(map(str, high)),
        )
        return Repairs(inner, active=False, traced=True)
    h2.make_writes_cancel_safe(inner)
    return Repairs(inner, active=True, traced=True)
