"""HedgedTransport over real sockets against real HTTP replicas on 127.0.0.1.

The replicas are ``hedgeclient.testing.FakeService`` (uvicorn in a background thread),
so these tests run on the real clock: they assert outcomes and order (which replica
won, who saw a disconnect, what the pool holds), never timings, except where a
tolerance is stated with its reason.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient._compat.pool import evict_orphans, orphaned_connections
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"


def generous() -> HedgeBudget:
    """A budget that lets every due backup go (the tests count backups themselves)."""
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def busy_connections(inner: httpx.AsyncHTTPTransport) -> list[str]:
    """The pool's connections that are neither idle nor closed, as httpcore names them."""
    pool = inner._pool
    return [c.info() for c in pool.connections if not (c.is_idle() or c.is_closed())]


async def test_slow_primary_beaten_by_backup_on_another_replica() -> None:
    """Replica 0 takes 2 s; the backup to replica 1 answers; replica 0 sees the disconnect."""
    slow = ReplicaConfig(latency=2.0)
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            response = await client.get("/item", headers={"x-request-id": "r1"})
            assert response.status_code == 200
            assert response.headers["x-replica"] == "1"
            assert response.extensions["hedge"].attempt == 2
            assert response.extensions["hedge"].replica == svc.origins[1]
            # The loser's disconnect reaches the server asynchronously; poll for it
            # (bounded at 2 s, well past the few ms it takes).
            with anyio.fail_after(2.0):
                while svc.stats().replicas[0].abandoned < 1:  # noqa: ASYNC110 - state of another thread
                    await anyio.sleep(0.01)
        stats = svc.stats()
    assert [v.replica for v in stats.requests["r1"]] == [0, 1]
    assert {v.replica: v.outcome for v in stats.requests["r1"]} == {
        0: "abandoned",
        1: "completed",
    }
    assert [v.attempt for v in stats.requests["r1"]] == ["1", "2"]


async def test_thousand_hedged_requests_leave_pool_clean() -> None:
    """1,000 requests, many hedged, max_connections=10: no PoolTimeout, no busy slot left."""
    with FakeService(replicas=3, latency="lab", seed=7) as svc:
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=10))
        records: list[RequestRecord] = []
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=0.012,  # the lab median: about a third of requests hedge
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

            async def worker(n: int) -> None:
                for _ in range(n):
                    response = await client.get("/")
                    assert response.status_code == 200

            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(worker, 50)
            assert busy_connections(inner) == []
            assert orphaned_connections(inner) == []
            assert (await client.get("/")).status_code == 200
    # Backups begun, and losers stopped: a backup still waiting for one of the 10
    # connections when its primary answered never reached the wire ("unsent", not a
    # hedge in the metrics), but it was begun and cancelled all the same.
    hedged = sum(1 for r in records if len(r.attempts) > 1)
    stopped = ("cancelled", "unsent")
    cancelled = sum(1 for r in records for a in r.attempts if a.outcome in stopped)
    assert len(records) == 1001
    # P(X > 12 ms) = 35% on the lab law; with queueing at concurrency 20 it is higher.
    # The point is that many losers were cancelled, not the exact rate.
    assert hedged > 200
    assert cancelled > 100


async def test_pool_guard_survives_cancel_while_connecting() -> None:
    """The upstream hazard: 0.5 ms delay, replicas in 0-4 ms, 2 connections, 2,000 GETs.

    Without the guard this leaves connections stuck in CONNECTING (reproduced on
    asyncio and trio with httpcore 1.0.9); with it the pool ends with no busy
    connection and serves one more request. Every request hedges and every loser
    closes its connection, so this runs at a few hundred requests a second: 2,000 on
    each backend keeps the suite short (``benchmarks/`` is the place for the long run).
    """
    per_worker = 200
    law = "empirical:0.0005=1,0.001=1,0.002=1,0.003=1,0.004=1"
    with FakeService(replicas=2, latency=law, seed=3) as svc:
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=2))
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=0.0005,
            budget=generous(),
            metrics=False,
        )
        timeout = httpx.Timeout(5.0, pool=2.0)
        async with httpx.AsyncClient(
            transport=transport, base_url=SERVICE, timeout=timeout
        ) as client:

            async def worker(n: int) -> None:
                for _ in range(n):
                    assert (await client.get("/")).status_code == 200

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(worker, per_worker)
            assert busy_connections(inner) == []
            assert (await client.get("/")).status_code == 200


async def test_evict_orphans_frees_a_connecting_slot() -> None:
    """A CONNECTING connection no request is assigned to is evicted; the slot is free."""
    import httpcore

    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
    pool = inner._pool
    orphan = httpcore.AsyncHTTPConnection(origin=httpcore.Origin(b"http", b"127.0.0.1", 9))
    pool._connections.append(orphan)  # the state the upstream defect leaves behind
    assert [c.info() for c in pool.connections] == ["CONNECTING"]
    assert orphaned_connections(inner) == [orphan]
    assert await evict_orphans(inner) == 1
    assert pool.connections == []
    await inner.aclose()
