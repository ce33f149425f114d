"""Tied requests and cancelled losers end to end: HedgedTransport against FakeService
replicas that serve through HedgeMiddleware (real uvicorn on 127.0.0.1).

Real clock: outcomes and counts are asserted, never timings.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, TiedRequests
from hedgeclient.testing import Down, FakeService, FirstReplica, ReplicaConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"


def client(origins: list[str], **kwargs: object) -> httpx.AsyncClient:
    transport = HedgedTransport(
        replicas={SERVICE: origins},
        tied=TiedRequests(offset=0.002),
        delay=5.0,  # no backup by delay: only the twin
        metrics=False,
        **kwargs,  # type: ignore[arg-type]
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE, trust_env=False)


async def test_queued_twins_dropped_and_never_returned() -> None:
    """60 tied requests on two replicas of 2 slots each: every answer is a 200 from the
    application (never the dropped 503), one copy of each pair runs, and the pairs
    send at most one tie message each."""
    async with FakeService(replicas=2, latency=0.020, concurrency=2) as svc:
        statuses: list[int] = []
        async with client(svc.origins) as c:

            async def one(i: int) -> None:
                response = await c.get(f"/item/{i}")
                statuses.append(response.status_code)
                assert response.headers["x-replica"] in ("0", "1")

            async with anyio.create_task_group() as tg:
                for i in range(60):
                    tg.start_soon(one, i)
        stats = svc.stats()
    assert statuses == [200] * 60
    servers = [r.server for r in stats.replicas]
    assert all(s is not None for s in servers)
    dropped = sum(
        s.dropped_queued + s.dropped_on_arrival + s.dropped_on_answer for s in servers if s
    )
    sent = sum(s.messages_sent for s in servers if s)
    failed = sum(s.messages_failed for s in servers if s)
    assert sent <= 60
    assert failed == 0
    # One copy of each pair reaches the app; the other is dropped (or, its client gone
    # once the first answered, leaves the queue).
    assert stats.received == 60
    assert dropped <= 60


async def test_one_replica_down_still_answers() -> None:
    """The leader's replica is down: the leader fails to connect, and the follower's
    question to that replica fails too; the follower runs and its answer is returned."""
    overrides = {0: ReplicaConfig(fault=Down())}
    async with (
        FakeService(replicas=2, latency=0.010, concurrency=2, replica_overrides=overrides) as svc,
        client(svc.origins, selector=FirstReplica()) as c,
    ):
        response = await c.get("/x")
        stats = svc.stats()
    assert response.status_code == 200
    assert response.extensions["hedge"].attempt == 2
    server = stats.replicas[1].server
    assert server is not None
    assert (server.messages_sent, server.messages_failed) == (1, 1)


async def test_drop_endpoint_refuses_strangers_over_http() -> None:
    """An unsigned drop message from a stranger gets 401 and is counted as refused."""
    async with FakeService(replicas=2, latency=0.0, concurrency=1) as svc:
        async with httpx.AsyncClient(trust_env=False) as stranger:
            response = await stranger.post(
                svc.origins[0] + "/_hedge/tie", headers={"hedge-tie": "ab" * 16}
            )
        stats = svc.stats()
    assert response.status_code == 401
    server = stats.replicas[0].server
    assert server is not None
    assert (server.messages_refused, server.messages_received) == (1, 0)


@pytest.mark.parametrize(("disconnects", "stopped"), [("middleware", True), ("ignored", False)])
async def test_losers_work_stops_only_with_middleware(disconnects: str, stopped: bool) -> None:
    """A hedged request whose primary draws 1 s and backup 0.010 s: behind the
    middleware the primary's handler stops when the client cancels it; without, it
    works its full second."""
    overrides = {0: ReplicaConfig(latency=1.0), 1: ReplicaConfig(latency=0.010)}
    budget = HedgeBudget(ratio=1.0, burst=10, min_per_second=0)
    async with FakeService(
        replicas=2,
        disconnects=disconnects,
        replica_overrides=overrides,  # type: ignore[arg-type]
    ) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins}, delay=0.050, selector=FirstReplica(),
            budget=budget, metrics=False,
        )  # fmt: skip
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as c:
            response = await c.get("/x")
        with anyio.fail_after(5):
            stats = await svc.wait_stats(lambda s: s.replicas[0].in_flight == 0)
    assert response.extensions["hedge"].attempt == 2
    primary = stats.replicas[0]
    assert primary.abandoned == (1 if stopped else 0)
    # Stopped when the client cancelled it (near 0.06 s on a quiet machine, later on a
    # loaded one, but before its 1 s was up: it was abandoned), or worked its full 1 s.
    assert (primary.busy < 1.0) is stopped
