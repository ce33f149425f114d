"""A winning backup's body reads get the caller's own timeouts (issue 23, BH-40).

A backup's httpx timeouts are trimmed to the time left before the caller's read
timeout runs out, so that attempts that all hang cost the caller one timeout; the trim
bounds the race (the wait for the response headers) and nothing after it. httpcore
reads ``request.extensions["timeout"]`` for the body: over HTTP/1.1 once, as the body's
iteration starts; over HTTP/2 at each read. The virtual-time tests script both; the
loopback ones run real httpcore against real servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import httpx
import pytest
import trio
from trio.testing import MockClock

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord, Route
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig, SlowBody, large_body

SERVICE = "http://svc"
CHUNKS = 4
CHUNK = 1_000
GAP = 0.9  # seconds between body chunks: under the caller's 1.0, over a backup's 0.8


def generous() -> HedgeBudget:
    """A budget that never binds here."""
    return HedgeBudget(ratio=1.0, burst=100, min_per_second=0)


class SlowChunks(httpx.AsyncByteStream):
    """A body of ``CHUNKS`` chunks ``GAP`` seconds apart whose every wait is bounded by
    the read timeout its request carries, read as httpcore reads it: once, as the
    iteration starts (``per_read=False``, HTTP/1.1), or before each read (HTTP/2)."""

    def __init__(self, request: httpx.Request, *, per_read: bool) -> None:
        self._request = request
        self._per_read = per_read

    def _read_timeout(self) -> float:
        read: float = self._request.extensions["timeout"]["read"]
        return read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = self._read_timeout()
        for i in range(CHUNKS):
            if self._per_read:
                read = self._read_timeout()
            if read < GAP:
                await anyio.sleep(read)
                msg = f"no body chunk within {read} s"
                raise httpx.ReadTimeout(msg, request=self._request)
            await anyio.sleep(GAP)
            yield bytes([i]) * CHUNK


def virtual(main: Any) -> None:
    """Run ``main`` on trio with a fresh MockClock (virtual time)."""
    trio.run(main, clock=MockClock(autojump_threshold=0))


@pytest.mark.parametrize("per_read", [False, True], ids=["http1", "http2"])
@pytest.mark.parametrize("decide_on", ["headers", "first_byte"])
def test_winning_backup_body_gets_the_callers_read_timeout(
    per_read: bool, decide_on: Literal["headers", "first_byte"]
) -> None:
    """Virtual: read timeout 1.0 s, delay 0.2 s, the backup's body chunks 0.9 s apart:
    the whole 4,000 bytes arrive at 0.2 + 4 x 0.9 s, as from one plain request."""
    records: list[RequestRecord] = []
    sent: list[tuple[str, float]] = []  # each attempt's read timeout as it was sent

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.host, request.extensions["timeout"]["read"]))
        if request.url.host == "a":
            await anyio.sleep(60)  # the primary: no headers before the caller gives up
        return httpx.Response(200, stream=SlowChunks(request, per_read=per_read))

    async def main() -> None:
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={SERVICE: ["http://a", "http://b"]},
            delay=0.2,
            selector=FirstReplica(),
            budget=generous(),
            routes=[Route(decide_on=decide_on)],
            hooks=[records.append],
            metrics=False,
        )
        timeout = httpx.Timeout(5.0, read=1.0)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=timeout) as c:
            start = anyio.current_time()
            response = await c.get("/")
            assert response.content == b"".join(bytes([i]) * CHUNK for i in range(CHUNKS))
            assert anyio.current_time() - start == pytest.approx(0.2 + CHUNKS * GAP)
        assert response.extensions["hedge"].attempt == 2

    virtual(main)
    assert sent == [("a", 1.0), ("b", pytest.approx(0.8))]  # the race is still trimmed
    assert [(a.kind, a.outcome) for a in records[0].attempts] == [
        ("primary", "cancelled"),
        ("backup", "won"),
    ]


def test_backup_headers_wait_still_trimmed() -> None:
    """Virtual: a backup with no headers by the caller's read deadline times out then
    (1.0 s), not a whole read timeout after it was sent (1.2 s)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        read = request.extensions["timeout"]["read"]
        await anyio.sleep(read)
        msg = "no headers"
        raise httpx.ReadTimeout(msg, request=request)

    async def main() -> None:
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={SERVICE: ["http://a", "http://b"]},
            delay=0.2,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        timeout = httpx.Timeout(5.0, read=1.0)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=timeout) as c:
            start = anyio.current_time()
            with pytest.raises(httpx.ReadTimeout):
                await c.get("/")
            assert anyio.current_time() - start == pytest.approx(1.0)

    virtual(main)


# -- over loopback sockets, real httpcore -------------------------------------------------

# Real clock: the read timeout is 3.0 s and the backup goes at 1.0 s (2.0 s left, over
# the 1.0 s it is expected to take: no "deadline" suppression, with 1.0 s to spare), so
# its race is trimmed to 2.0 s; its body comes 2.5 s after its headers, in one chunk.
# A trimmed read times out (2.5 > 2.0, more so under load); the caller's own 3.0 s
# leave 0.5 s of margin.
LOOPBACK_READ = 3.0
LOOPBACK_DELAY = 1.0
LOOPBACK_BODY = SlowBody(duration=2.5, chunks=1)


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
async def test_winning_backup_body_whole_over_sockets(http2: bool) -> None:
    """Loopback: a winning backup whose 4,000-byte body comes 2.5 s after its headers,
    under a 3.0 s read timeout, arrives whole (its trimmed 2.0 s timed out before)."""
    records: list[RequestRecord] = []
    overrides = {
        0: ReplicaConfig(latency=10.0),  # the primary: headers only after the caller gave up
        1: ReplicaConfig(latency=0.0, fault=LOOPBACK_BODY),
    }
    with FakeService(replicas=2, replica_overrides=overrides, http2=http2) as svc:
        inner = httpx.AsyncHTTPTransport(http1=not http2, http2=http2, trust_env=False)
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=LOOPBACK_DELAY,
            selector=FirstReplica(),
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        timeout = httpx.Timeout(10.0, read=LOOPBACK_READ)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=timeout) as c:
            response = await c.get("/large", params={"bytes": 4000})
    assert response.content == large_body(4000)
    assert response.headers["x-replica"] == "1"
    assert [(a.kind, a.outcome) for a in records[0].attempts] == [
        ("primary", "cancelled"),
        ("backup", "won"),
    ]
