"""One address behind a load balancer: backups go to it over another connection.

A service with a single address (here one replica of the fake service, as a load
balancer's address would be) is hedged; every backup travels on a connection that is
not carrying its primary, which the server sees (the client end of each connection:
``Visit.connection``). Over HTTP/1.1 the pool guarantees it (a connection carries one
request at a time); over HTTP/2 the transport sends such backups through a second pool.
Real clock on loopback: outcomes are asserted, not timings.
"""

from __future__ import annotations

import uuid

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FakeService

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def hedge_one_address(
    svc: FakeService, inner: httpx.AsyncBaseTransport
) -> tuple[list[RequestRecord], dict[str, list[str | None]], list[httpx.Response]]:
    """120 requests, 4 at a time, to the single-address service; return the records,
    the connections each request id arrived on (attempt order) and the responses."""
    records: list[RequestRecord] = []
    responses: list[httpx.Response] = []
    transport = HedgedTransport(
        inner,
        replicas={"http://lb": svc.origins},
        delay=0.010,  # the lab law's median: about a third of requests are hedged
        budget=HedgeBudget(ratio=1.0, burst=10_000, min_per_second=0),
        hooks=[records.append],
        metrics=False,
    )
    ids: list[str] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://lb") as client:

        async def worker(n: int) -> None:
            for _ in range(n):
                request_id = uuid.uuid4().hex
                ids.append(request_id)
                responses.append(await client.get("/", headers={"x-request-id": request_id}))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(worker, 30)
        with anyio.fail_after(5.0):  # losers' disconnects reach the server
            await svc.wait_stats(lambda s: sum(r.in_flight for r in s.replicas) == 0)
    stats = svc.stats()
    connections = {
        i: [v.connection for v in sorted(stats.visits(i), key=lambda v: v.attempt or "")]
        for i in ids
    }
    return records, connections, responses


def check(
    records: list[RequestRecord],
    connections: dict[str, list[str | None]],
    responses: list[httpx.Response],
) -> None:
    hedged = [c for c in connections.values() if len(c) > 1]
    assert len(hedged) >= 10  # enough backups to mean something
    assert all(None not in c and len(set(c)) == len(c) for c in hedged)
    assert all(r.extensions["hedge"].single_address for r in responses)
    backups = [a for r in records for a in r.attempts if a.kind == "backup"]
    assert backups
    assert all(a.other_connection for a in backups)


async def test_http11_backups_take_another_connection() -> None:
    """HTTP/1.1: every backup arrives on a connection other than its primary's."""
    async with FakeService(replicas=1, latency="lab", seed=3) as svc:
        check(*await hedge_one_address(svc, httpx.AsyncHTTPTransport()))


async def test_http2_backups_take_a_second_connection() -> None:
    """HTTP/2 (h2c, one multiplexed connection per pool): every backup arrives on
    another connection, the second pool's."""
    async with FakeService(replicas=1, latency="lab", seed=3, http2=True) as svc:
        inner = httpx.AsyncHTTPTransport(http1=False, http2=True)
        records, connections, responses = await hedge_one_address(svc, inner)
    check(records, connections, responses)
    primaries = {c[0] for c in connections.values()}
    backups = {c[1] for c in connections.values() if len(c) > 1}
    assert primaries.isdisjoint(backups)
    assert len(primaries) == 1  # one multiplexed connection for every primary
