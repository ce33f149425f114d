"""The demo's headline in virtual time: a fixed 30 ms delay halves the lab law's tail.

``hedgeclient demo --latency lab --delay 30ms`` measures this over loopback, where a
loaded machine's scheduling moves every percentile (``tests/cli/test_demo_run.py``
asserts what holds there whatever the load). Here the three replicas are in process,
each attempt sleeping a fresh draw of the lab law (server-owned slowness), and time is
trio's MockClock: the percentiles are those of the draws and the race alone.
"""

from __future__ import annotations

import math
import random
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import HedgedTransport, RequestRecord
from hedgeclient.testing import parse_law

pytestmark = pytest.mark.anyio

LAB = parse_law("lab")  # 10 ms median; 2 % at 120 or 300 ms
REQUESTS = 600  # as the demo test


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


def quantile(values: list[float], q: float) -> float:
    """The smallest value v with P(X > v) <= 1 - q (the demo's convention)."""
    ordered = sorted(values)
    return ordered[math.ceil(q * len(ordered)) - 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_fixed_delay_halves_the_lab_tail(seed: int) -> None:
    """600 requests plain, then 600 hedged at 30 ms with the default budget: the same
    median, and a hedged p99 at most half the plain one."""
    rng = random.Random(seed)

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(LAB.sample(rng))
        return httpx.Response(200)

    records: list[RequestRecord] = []
    durations: dict[bool, list[float]] = {False: [], True: []}
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": ["http://a", "http://b", "http://c"]},
        delay=0.030,
        hooks=[records.append],
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        for hedge in (False, True):
            for i in range(REQUESTS):
                start = anyio.current_time()
                response = await client.get(f"/{i}", extensions={"hedge": hedge})
                took = anyio.current_time() - start
                durations[hedge].append(round(took, 9))  # exact but for float sums
                assert response.status_code == 200
    plain, hedged = durations[False], durations[True]
    # 2 % of the draws are 120 or 300 ms: the plain p99 is one of them.
    assert quantile(plain, 0.99) >= 0.120
    # A hedged request is slower than 50 ms only if its primary is (2 %) and its backup,
    # sent at 30 ms, takes over 20 ms (10 %): 0.2 % of requests, too few to reach the p99.
    assert quantile(hedged, 0.99) <= 0.050
    assert quantile(hedged, 0.99) <= quantile(plain, 0.99) / 2
    assert quantile(hedged, 0.50) == quantile(plain, 0.50)
    # Every request slower than the delay was hedged: the default budget (10 %) held
    # none of them back (about 5 % are due a backup, the draws past the law's p95).
    assert all(r.hedged for r in records[REQUESTS:] if round(r.duration, 9) > 0.030)
    assert all(r.suppressed is None for r in records[REQUESTS:])
    backups = sum(r.hedged for r in records[REQUESTS:])
    assert 0.02 * REQUESTS <= backups <= 0.10 * REQUESTS
