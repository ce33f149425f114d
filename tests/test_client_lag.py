"""The client's own lag (issue 24): measured by the hedge timer, never learned as latency.

A late event loop is the client's time, not a replica's. The hedge timer measures how
late it serves its deadlines (``_timer/_lag``); while that lateness is a large share
of the hedge delay, primaries' times are left out of the delay's samples
(``client_lag``), and from half the delay backups by delay are suppressed with the
reason ``client_lag``. In virtual time (trio's MockClock) a late loop is a task that
jumps the clock without yielding, so the timer wakes exactly that late; one asyncio
test blocks its real loop and asserts only what holds on a busy machine too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import AdaptiveDelay, HedgeBudget, HedgedTransport, RequestRecord, hedge_info
from hedgeclient._timer import LAG_MEMORY, LoopLag, current_timer
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SVC = "http://svc"


def test_loop_lag_remembers_the_largest_lateness_for_a_while() -> None:
    """The recent lag is the largest lateness of the last half-window or two; it reads
    0 once a whole memory has passed without one, and a negative lateness is 0."""
    lag = LoopLag()
    assert lag.recent(0.0) == 0.0
    lag.observe(0.020, now=10.0)
    lag.observe(0.005, now=10.1)
    lag.observe(-0.001, now=10.2)  # asyncio may run a handle a little early
    assert lag.last == 0.0
    assert lag.recent(10.2) == 0.020
    lag.observe(0.001, now=10.0 + LAG_MEMORY / 2)  # a new half: the old one is kept
    assert lag.recent(10.0 + LAG_MEMORY / 2) == 0.020
    lag.observe(0.001, now=10.0 + LAG_MEMORY)  # a new half again: the 20 ms is gone
    assert lag.recent(10.0 + LAG_MEMORY) == 0.001
    assert lag.recent(10.0 + 3 * LAG_MEMORY) == 0.0  # no deadline served: not late


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every async test here runs on trio with a fresh MockClock."""
    return virtual_time


def _transport(replies: dict[str, list[Any]], **kwargs: Any) -> tuple[HedgedTransport, Any]:
    scripted = ScriptedReplicas(replies)
    hedged = HedgedTransport(
        httpx.MockTransport(scripted.handler),
        replicas={SVC: ["http://a", "http://b"]},
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=100, min_per_second=0),
        **kwargs,
    )
    return hedged, scripted


async def _late_loop(clock: Any, at: float, late: float) -> None:
    """Keep the loop from running anything between ``at`` and ``at + late`` (virtual)."""
    await anyio.sleep(at)
    clock.jump(late)  # no checkpoint: every other task runs that much later


@pytest.mark.parametrize(("late", "hedged"), [(0.015, True), (0.030, False)])
async def test_a_backup_due_on_a_late_loop_is_suppressed_as_client_lag(
    anyio_backend: tuple[str, dict[str, Any]], late: float, hedged: bool
) -> None:
    """Delay 30 ms, the loop blocked from t = 20 ms: for 15 ms, the deadline is served
    5 ms late (a sixth of the delay) and the backup goes; for 30 ms, 20 ms late (two
    thirds, above one half), it is suppressed with the reason ``client_lag`` and the
    primary answers alone."""
    clock = anyio_backend[1]["clock"]
    transport, scripted = _transport({"a": [0.100], "b": [0.010]}, delay=0.030, metrics=False)
    async with (
        httpx.AsyncClient(transport=transport, base_url=SVC) as client,
        anyio.create_task_group() as tg,
    ):
        scripted.start_clock()
        tg.start_soon(_late_loop, clock, 0.020, late)
        response = await client.get("/")
    info = hedge_info(response)
    assert info is not None
    assert transport.event_loop_lag == pytest.approx(late - 0.010)  # due at 30 ms
    if hedged:
        assert (info.attempts, info.replica, info.suppressed) == (2, "http://b", None)
    else:
        assert (info.attempts, info.replica, info.suppressed) == (1, "http://a", "client_lag")
        assert [e.event for e in scripted.events] == ["sent", "answered"]


async def test_a_failed_primary_gets_its_backup_however_late_the_loop() -> None:
    """A backup after a failure is what the caller needs: the loop's lag never
    suppresses it (only backups by delay)."""
    transport, _ = _transport({"a": [Reply(0.005, status=503)], "b": [0.010]}, delay=0.030)
    current_timer().lag.observe(1.0, anyio.current_time())  # a very late loop
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        response = await client.get("/")
    info = hedge_info(response)
    assert info is not None
    assert (response.status_code, info.attempts, info.replica) == (200, 2, "http://b")


async def test_samples_on_a_late_loop_are_left_out_and_learning_resumes(
    anyio_backend: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """Ten requests whose loop was late by 20 ms against a 100 ms delay (a fifth: no
    suppression yet) and ten by 30 ms (above a quarter): the first ten are samples,
    the second ten are left out as ``client_lag`` (one warning), and once the loop has
    been on time for a lag memory the next ten are samples again."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    clock = anyio_backend[1]["clock"]
    policy = AdaptiveDelay(initial_delay=0.100, min_samples=1000)
    records: list[RequestRecord] = []
    registry = CollectorRegistry()
    transport, _ = _transport(
        {"a": [0.010], "b": [0.010]},
        delay=policy,
        hooks=[records.append],
        metrics=registry,
        name="lagging",
    )

    async def burst(late: float) -> None:
        for _ in range(10):
            # A deadline due in 1 ms that the loop serves ``late`` s later: the timer
            # measures ``late - 0.001`` as the request begins.
            current_timer().call_at(anyio.current_time() + 0.001, lambda: None)
            clock.jump(late)
            await client.get("/")

    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        await burst(0.020)
        await burst(0.030)
        await anyio.sleep(2 * LAG_MEMORY)
        await burst(0.0)
    left_out = [r.sample_left_out for r in records]
    assert left_out == [None] * 10 + ["client_lag"] * 10 + [None] * 10
    assert [r.event_loop_lag > 0.025 for r in records] == [False] * 10 + [True] * 10 + [False] * 10
    assert policy.statistics().recorded == 20
    assert transport.samples_left_out == {"client_lag": 10}
    labels = {"client": "lagging", "reason": "client_lag"}
    assert registry.get_sample_value("hedgeclient_delay_samples_left_out_total", labels) == 10
    warnings = [r.getMessage() for r in caplog.records if "runs late" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("hedgeclient: the event loop of client 'lagging' runs late by")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_blocked_asyncio_loop_is_measured_and_suppresses_the_backup(
    anyio_backend: str,
) -> None:
    """On a real asyncio loop, a handler that blocks the loop for 80 ms past a 20 ms
    hedge delay: the timer measures at least that lateness (a busy machine only adds
    to it), and the backup is suppressed as ``client_lag``."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            await anyio.sleep(0.010)
            time.sleep(0.090)  # noqa: ASYNC251 - the point: the client blocks its own loop
            await anyio.sleep(0.050)
        return httpx.Response(200, text=request.url.host)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SVC: ["http://a", "http://b"]},
        selector=FirstReplica(),
        delay=0.020,
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        response = await client.get("/")
    info = hedge_info(response)
    assert info is not None
    assert transport.event_loop_lag >= 0.075  # blocked 10..100 ms, due at 20 ms
    assert (info.attempts, info.suppressed) == (1, "client_lag")
