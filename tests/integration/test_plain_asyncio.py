"""A program started by ``asyncio.run`` (not ``anyio.run``) hedges as well.

The hedge timer's callbacks run in no task on asyncio, where anyio cannot tell which
library runs unless ``anyio.run`` started the program; this checks the plain case.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

pytestmark = pytest.mark.slow

SERVICE = "http://svc"


def test_backup_is_sent_under_plain_asyncio_run() -> None:
    """Under ``asyncio.run``: replica 0 takes 2 s, the backup at 50 ms to replica 1 wins."""
    records: list[RequestRecord] = []

    async def main() -> tuple[str, int]:
        slow = ReplicaConfig(latency=2.0)
        with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
            transport = HedgedTransport(
                replicas={SERVICE: svc.origins},
                delay=0.050,
                selector=FirstReplica(),
                budget=HedgeBudget(ratio=1.0, burst=10, min_per_second=0),
                hooks=[records.append],
                metrics=False,
            )
            async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
                response = await client.get("/")
                return response.headers["x-replica"], response.extensions["hedge"].attempt

    assert asyncio.run(main()) == ("1", 2)
    (record,) = records
    assert [a.outcome for a in record.attempts] == ["cancelled", "won"]
    assert record.suppressed is None
