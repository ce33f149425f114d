"""What the delay learns from a request whose caller left (a timeout, a cancelled task).

A caller's deadline cuts short exactly the slowest requests. Dropping them took the tail
out of the window and pulled the delay below it (a new user measured -14 % at a deadline
near the delay). A primary that had waited the hedge delay on the wire when its caller
left is a censored sample (its latency is longer), as a primary whose backup won is; one
whose caller left sooner says nothing of the tail and teaches nothing. Virtual time
(trio's MockClock): every instant is exact.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import AdaptiveDelay, HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SVC = "http://svc"


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test here runs on trio with a fresh MockClock."""
    return virtual_time


def _transport(
    scripted: ScriptedReplicas, policy: AdaptiveDelay, records: list[RequestRecord]
) -> HedgedTransport:
    """Replicas a and b, primaries on a, a budget that never binds, ``records`` kept."""
    return HedgedTransport(
        httpx.MockTransport(scripted.handler),
        replicas={SVC: ["http://a", "http://b"]},
        selector=FirstReplica(),
        delay=policy,
        budget=HedgeBudget(ratio=1.0, burst=100, min_per_second=0),
        hooks=[records.append],
        metrics=False,
    )


async def _learned(
    waits: list[float], then: Reply | None = None
) -> tuple[AdaptiveDelay, list[RequestRecord]]:
    """Twenty 10 ms requests teach the delay (10 ms), then one request per entry of
    ``waits`` to replicas that take 1 s (its backup as well; the primary's reply is
    ``then`` if given), its caller leaving after that many seconds."""
    policy = AdaptiveDelay(min_samples=10, initial_delay=0.050)
    records: list[RequestRecord] = []
    scripted = ScriptedReplicas({"a": [0.010] * 20 + [then or Reply(1.0)], "b": [1.0]})
    transport = _transport(scripted, policy, records)
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        for _ in range(20):
            await client.get("/")
        for wait in waits:
            with anyio.move_on_after(wait):
                await client.get("/")
    return policy, records


async def test_a_caller_that_leaves_after_the_delay_gives_a_censored_sample() -> None:
    """Callers leaving at 50 and 200 ms, past the 10 ms delay: two censored samples,
    and the records say none was left out."""
    policy, records = await _learned([0.050, 0.200])
    route = policy.statistics().routes[f"GET {SVC}"]
    assert (route.recorded, route.censored) == (22, 2)
    assert [(r.cancelled_by_caller, r.sample_left_out) for r in records[20:]] == [
        (True, None),
        (True, None),
    ]


async def test_a_caller_that_leaves_before_the_delay_teaches_nothing() -> None:
    """A caller leaving at 5 ms, before the 10 ms delay: no sample (its primary's
    latency may be anything above 5 ms)."""
    policy, _ = await _learned([0.005])
    route = policy.statistics().routes[f"GET {SVC}"]
    assert (route.recorded, route.censored) == (20, 0)


@pytest.mark.parametrize(
    ("error", "at", "taught"),
    [(httpx.ReadTimeout, 0.100, (21, 1)), (httpx.ReadTimeout, 0.005, (20, 0)),
     (httpx.RemoteProtocolError, 0.100, (20, 0))],
)  # fmt: skip
async def test_the_callers_own_read_timeout_after_the_delay_is_a_censored_sample(
    error: type[Exception], at: float, taught: tuple[int, int]
) -> None:
    """The caller's own httpx read timeout is its deadline too: a primary that times out
    reading after the 10 ms delay is a censored sample; before it, or another failure,
    teaches nothing (an httpx timeout gave none: a new user's delay ended 10-13 % below
    the tail)."""
    policy, _ = await _learned([10.0], then=Reply(at, error=error))
    route = policy.statistics().routes[f"GET {SVC}"]
    assert (route.recorded, route.censored) == taught


async def test_callers_leaving_slow_requests_keep_a_cut_off_route_suspended() -> None:
    """A route suspended above its 50 ms cut-off (half its requests take 150 ms): callers
    that leave those at 100 ms give censored samples above the cut-off, so the fast half
    alone does not resume hedging; one that leaves below it says nothing (a new user's
    route resumed at 9 ms when abandoned requests taught nothing)."""
    policy = AdaptiveDelay(
        max_delay=0.050, initial_delay=0.050, min_samples=10, recovery_samples=10
    )
    slow_fast = [0.150, 0.008] * 40
    transport = _transport(ScriptedReplicas({"a": slow_fast, "b": slow_fast}), policy, [])
    route = f"GET {SVC}"
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        for _ in range(20):  # suspended: a p95 of 150 ms is above the cut-off
            await client.get("/")
        assert policy.hedge_delay(route) is None
        before = policy.statistics().routes[route].censored  # backups won as it warmed up
        for _ in range(20):  # half of them abandoned at 100 ms, the rest fast
            with anyio.move_on_after(0.100):
                await client.get("/")
        stats = policy.statistics().routes[route]
        assert (policy.hedge_delay(route), stats.recoveries) == (None, 0)
        assert stats.censored - before == 10
        for _ in range(4):  # abandoned at 30 ms, below the cut-off: no sample
            with anyio.move_on_after(0.030):
                await client.get("/")
        assert policy.statistics().routes[route].censored - before == 10
