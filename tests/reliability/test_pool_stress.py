"""Many hedged requests through a small pool: no PoolTimeout, no connection left busy.

Real loopback replicas (``FakeService`` in a subprocess, so that the server's work does
not compete with the client for the GIL) and a real httpcore pool. Outcomes only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient._compat.pool import orphaned_connections
from hedgeclient.testing import Constant, FakeService, Mixture

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"
WORKERS = 20


def busy_connections(inner: httpx.AsyncHTTPTransport) -> list[str]:
    """The pool's connections that are neither idle nor closed, as httpcore names them."""
    return [c.info() for c in inner._pool.connections if not (c.is_idle() or c.is_closed())]


async def test_ten_thousand_requests_leave_pool_clean(
    anyio_backend_name: str, tally: Any, count_tasks: Callable[[], int]
) -> None:
    """10,000 requests (3,000 on trio), about 30 % hedged, 20 connections: all 200,
    pool clean.

    Measured on 2 cores (Python 3.11): trio is about 1.6 times slower per request, so
    trio runs 3,000 (the issue's split for a run above 30 s). A replica answers at once
    70 % of the time and after 100 ms otherwise; the hedge delay is a fixed 10 ms, so
    about 30 % of the requests hedge whatever the machine's speed: a busy client's lag
    (issue 24) holds a backup back by twice the lag at most, far less than the 90 ms
    it has to win (with an adaptive delay over instant answers, the delay was about the
    lag and a loaded machine held most backups back: 443 losers of 10,000). Each
    cancelled HTTP/1.1 loser closes its connection: the pool churns constantly.
    """
    total = 10_000 if anyio_backend_name == "asyncio" else 3_000
    records: list[RequestRecord] = []
    law = Mixture([(0.7, Constant(0.0)), (0.3, Constant(0.100))])
    with FakeService(replicas=3, latency=law, mode="process") as svc:
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=20))
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=FixedDelay(0.010),
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            hooks=[records.append],
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            tasks = count_tasks()
            statuses: dict[int, int] = {}

            async def worker(n: int) -> None:
                for _ in range(n):
                    status = (await client.get("/")).status_code
                    statuses[status] = statuses.get(status, 0) + 1

            async with anyio.create_task_group() as tg:
                for _ in range(WORKERS):
                    tg.start_soon(worker, total // WORKERS)
            assert busy_connections(inner) == []
            assert orphaned_connections(inner) == []
            assert len(inner._pool.connections) <= 20
            assert (await client.get("/")).status_code == 200
            assert count_tasks() == tasks
    assert statuses == {200: total}
    # Losers stopped: on the wire ("cancelled") or still waiting for one of the 20
    # connections ("unsent"): the pool churns either way.
    stopped = ("cancelled", "unsent")
    cancelled = sum(1 for r in records for a in r.attempts if a.outcome in stopped)
    assert cancelled > total // 10  # many losers cancelled (about 30 %: the slow draws)
    tally(
        "F4 hedged requests through 20 connections",
        faults=cancelled,
        requests=total + 1,
        leaked_tasks=0,
    )
