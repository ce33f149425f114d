"""One burst must not poison the adaptive delay (issue 14, item 2).

A burst larger than the connection pool makes requests queue for the client's own
connections. That wait is the client's queueing, not a replica's latency: the delay
policy must not see it, and hedging must go on after the burst.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from hedgeclient import AdaptiveDelay, HedgedTransport, RequestRecord
from hedgeclient.testing import FakeService

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"
ROUTE = f"GET {SERVICE}"
# 2 ms, plus a 1 s pause owned by the replica in 3 % of requests: the p95 is 2 ms.
# The pause is long so that the hedge delay after the burst, which on-the-wire
# latencies of a CPU-saturated client inflate (to 0.3 s on a heavily loaded 2-core
# machine), stays well below it.
LAW = "pauses:service=0.002,pause=1.0,p=0.03"


def _on_a_small_pool(
    svc: FakeService, policy: AdaptiveDelay, records: list[RequestRecord]
) -> HedgedTransport:
    """The transport of a burst test: 20 pooled connections to ``svc``'s replicas."""
    return HedgedTransport(
        httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=20)),
        replicas={SERVICE: svc.origins},
        delay=policy,
        hooks=[records.append],
        metrics=False,
    )


class Recording(AdaptiveDelay):
    """The default adaptive delay, keeping every latency it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[float] = []

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        self.samples.append(seconds)
        super().record(route, seconds, censored=censored)


async def test_a_burst_on_a_small_pool_does_not_suspend_hedging() -> None:
    """300 sequential GETs, a gather of 400 on 20 connections, 400 sequential GETs:
    the wait for a pool connection is not counted as latency, hedging is never
    suspended, and the slow requests after the burst are still hedged."""
    records: list[RequestRecord] = []
    policy = Recording()
    with FakeService(replicas=3, latency=LAW, seed=7) as svc:
        transport = _on_a_small_pool(svc, policy, records)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for _ in range(300):
                await client.get("/")
            before = len(policy.samples)
            start = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for _ in range(400):
                    tg.start_soon(client.get, "/")
            burst = anyio.current_time() - start
            in_burst = sorted(policy.samples[before:])
            after_burst = policy.hedge_delay(ROUTE)
            del records[:]
            for _ in range(400):
                await client.get("/")
    # 400 requests through 20 connections: the median request waits about half the
    # burst for a connection. Counted as latency (as before this fix) the median
    # sample would be near burst / 2; on the wire it is a small part of it (the
    # client's own CPU is saturated during the burst, so not ~2 ms either).
    # Since issue 24 the client's lag leaves most of them out (``client_lag``): what is
    # left must still be on the wire, not the pool's queue.
    assert in_burst == [] or in_burst[len(in_burst) // 2] < burst / 4
    assert after_burst is not None  # never suspended by the cut-off
    assert all(r.suppressed != "cutoff" for r in records)
    # 3 % of 400 requests meet a 1 s pause: they are hedged, not left to wait it out.
    hedged = [r for r in records if len(r.attempts) > 1]
    assert len(hedged) >= 5
    # Every request slow enough to have met a pause was hedged (its backup may meet a
    # pause too, 3 % of the time: then it is slow all the same), unless the delay in
    # force was itself near the pause: on-the-wire latencies of a CPU-saturated client
    # can inflate the p95 of a window that still holds the burst.
    unhedged = [
        r
        for r in records
        if r.duration >= 0.9 and len(r.attempts) == 1 and (r.delay is None or r.delay < 0.8)
    ]
    # A backup the budget refused is the budget at work: the burst's own backups (sent
    # once their primaries had waited the delay plus twice the client's lag, issue 24)
    # may have spent its burst allowance, which refills at 10 % of each request; one such
    # request in 400 was seen on a fresh clone, 4 on a machine at load 4-5 (its burst
    # sent more backups). Any other reason is a defect; most slow requests are hedged.
    assert [r for r in unhedged if r.suppressed != "budget"] == [], [
        (r.duration, r.delay, r.suppressed) for r in unhedged
    ]
    assert len(unhedged) < len(hedged)
    assert sum(r.duration >= 0.9 for r in records) < len(hedged) / 2


# The lab's median (12 ms) and p95 (30 ms) on a smooth law: its p95 has no atom to jump
# from, so the delay before and after the burst can be compared.
SMOOTH = "lognormal:median=0.012,sigma=0.557"


async def test_the_delay_after_a_burst_is_the_delay_before_it() -> None:
    """Issue 24: 300 sequential GETs, a gather of 400 on 20 connections (the client's
    loop is late: every response it reads in the burst is read late), then sequential
    GETs: the burst's samples are left out as ``client_lag``, and the delay after it is
    the delay before it, within 25 % (before the fix it tripled: 29 -> 94 ms). On a
    busy machine more samples are left out, before the burst too; the comparison holds
    all the same (both may be the initial delay)."""
    records: list[RequestRecord] = []
    policy = AdaptiveDelay()
    # The replicas in a process of their own: in ours, the burst would slow them too.
    with FakeService(replicas=3, latency=SMOOTH, seed=7, mode="process") as svc:
        transport = _on_a_small_pool(svc, policy, records)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for _ in range(300):
                await client.get("/")
            before = policy.hedge_delay(ROUTE)
            del records[:]
            async with anyio.create_task_group() as tg:
                for _ in range(400):
                    tg.start_soon(client.get, "/")
            in_burst = [r.sample_left_out for r in records]
            for _ in range(100):  # a second's worth: the refresh interval has passed
                await client.get("/")
            after = policy.hedge_delay(ROUTE)
    assert before is not None
    assert after is not None
    assert abs(after - before) <= 0.25 * before, (before, after)
    assert in_burst.count("client_lag") >= 200  # most of the burst: the client's time
    assert transport.samples_left_out["client_lag"] >= in_burst.count("client_lag")
