"""The client's own lag (issue 24): measured by the hedge timer, never learned as latency.

A late event loop is the client's time, not a replica's. The hedge timer measures how
late it serves its deadlines (``_timer/_deadlines``); while that lateness is a large share
of the hedge delay, primaries' times are left out of the delay's samples
(``client_lag``), and from half the delay backups by delay are suppressed with the
reason ``client_lag``. In virtual time (trio's MockClock) a late loop is a task that
jumps the clock without yielding, so the timer wakes exactly that late; one asyncio
test blocks its real loop and asserts only what holds on a busy machine too.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import (
    AdaptiveDelay,
    HedgeBudget,
    HedgedTransport,
    HedgeInfo,
    RequestRecord,
    hedge_info,
)
from hedgeclient._timer import (
    LAG_EVIDENCE,
    LAG_MARK,
    LAG_MEMORY,
    LAG_WEIGHT,
    LoopLag,
    current_timer,
)
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SVC = "http://svc"


def test_loop_lag_is_the_typical_lateness_once_there_is_evidence() -> None:
    """The recent lag is an exponentially weighted mean of the lateness of the deadlines
    served; it reads 0 until four have been served since the loop was idle, and again
    once none has been for a lag memory. A negative lateness is 0."""
    lag = LoopLag()
    assert lag.recent(0.0) == 0.0
    for i in range(LAG_EVIDENCE - 1):
        lag.observe(0.020, now=10.0 + 0.1 * i)
        assert lag.recent(10.0 + 0.1 * i) == 0.0  # not yet evidence of a late loop
    lag.observe(0.020, now=10.3)
    assert lag.recent(10.3) == pytest.approx(0.020)
    lag.observe(-0.001, now=10.4)  # asyncio may run a handle a little early: on time
    assert lag.last == 0.0
    assert lag.recent(10.4) == pytest.approx(0.020 * (1 - LAG_WEIGHT))
    assert lag.recent(10.4 + LAG_MEMORY) == pytest.approx(0.015)
    assert lag.recent(10.41 + LAG_MEMORY) == 0.0  # nothing served for a while: not late
    lag.observe(0.050, now=12.0)  # after a pause: one late wake-up is not evidence
    assert lag.recent(12.0) == 0.0


def test_the_lag_over_a_span_is_its_latest_late_wake_up_or_the_typical_lag() -> None:
    """``during(start, end)``: the latest wake-up at least ``LAG_MARK`` late served in
    ``start .. end``, or the typical lag at ``end`` if larger (issue 24: a burst's
    typical lateness understates what its responses wait)."""
    lag = LoopLag()
    lag.observe(LAG_MARK / 2, now=1.000)  # a quiet loop's jitter: not remembered
    assert lag.marked == -math.inf  # nothing for during() to find: callers skip it
    lag.observe(0.004, now=1.010)
    lag.observe(0.002, now=1.015)
    assert lag.marked == 1.015  # the latest wake-up remembered
    assert lag.recent(1.020) == 0.0  # three wake-ups: no evidence of a late loop yet
    assert lag.during(1.005, 1.020) == 0.004  # both inside: the later one is not larger
    assert lag.during(1.011, 1.020) == 0.002  # the 4 ms one was before the span
    assert lag.during(0.990, 1.009) == 0.0  # ... and after this one
    assert lag.during(1.000, 1.000) == 0.0  # the jitter was never remembered
    lag.observe(0.010, now=1.020)  # the fourth wake-up: evidence
    typical = LAG_MARK / 2
    for late in (0.004, 0.002, 0.010):
        typical += LAG_WEIGHT * (late - typical)
    assert lag.recent(1.030) == pytest.approx(typical)  # 3.6 ms
    assert lag.during(1.025, 1.030) == pytest.approx(typical)  # none in the span: typical
    assert lag.during(1.016, 1.030) == 0.010


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


async def _late_deadlines(clock: Any, late: float) -> None:
    """Make the loop serve its next :data:`LAG_EVIDENCE` deadlines ``late`` seconds late
    (a task that keeps the loop busy past each)."""
    timer = current_timer()
    for _ in range(LAG_EVIDENCE):
        timer.call_at(anyio.current_time() + 0.001, lambda: None)
        clock.jump(0.001 + late)  # no checkpoint: the loop is busy past the deadline
        await anyio.sleep(0.001)  # ... and then serves it, ``late`` s late


async def _get_on_a_late_loop(
    transport: HedgedTransport, scripted: ScriptedReplicas, clock: Any, late: float
) -> tuple[httpx.Response, HedgeInfo]:
    """One GET on a loop that served its last deadlines ``late`` seconds late; the
    clock of ``scripted`` starts as it is sent."""
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        await _late_deadlines(clock, late)
        scripted.start_clock()
        response = await client.get("/")
    info = hedge_info(response)
    assert info is not None
    return response, info


@pytest.mark.parametrize(("late", "hedged"), [(0.010, True), (0.030, False)])
async def test_a_backup_due_on_a_late_loop_is_held_back_as_client_lag(
    anyio_backend: tuple[str, dict[str, Any]], late: float, hedged: bool
) -> None:
    """Delay 30 ms, on a loop that served its last deadlines ``late`` s late, a primary
    answering at 50 ms: 10 ms late (typically 7.5 ms once its own on-time deadline is
    counted, a quarter of the delay) the backup goes at 30 ms; 30 ms late (22.5 ms, above
    half the delay) it is held back, the primary answers before the race looks again,
    and the request counts as suppressed with the reason ``client_lag``."""
    clock = anyio_backend[1]["clock"]
    records: list[RequestRecord] = []
    transport, scripted = _transport(
        {"a": [0.050], "b": [0.030]}, delay=0.030, metrics=False, hooks=[records.append]
    )
    _, info = await _get_on_a_late_loop(transport, scripted, clock, late)
    # the typical lateness, once its own deadline (served on time) is counted too
    assert records[0].event_loop_lag == pytest.approx((1 - LAG_WEIGHT) * late)
    if hedged:
        assert (info.attempts, info.replica, info.suppressed) == (2, "http://a", None)
        assert [e.at for e in scripted.events if e.event == "sent"] == [0.0, 0.03]
    else:
        assert (info.attempts, info.replica, info.suppressed) == (1, "http://a", "client_lag")
        assert [e.event for e in scripted.events] == ["sent", "answered"]


async def test_a_held_back_backup_still_rescues_a_primary_that_hangs(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """On a loop 30 ms late (22.5 ms typically) a primary that never answers: its backup
    is held back at 30 ms, and goes once the primary has waited the delay plus twice the
    lag (a fresh test found requests stuck on a 10 s replica until their timeout)."""
    clock = anyio_backend[1]["clock"]
    transport, scripted = _transport({"a": [10.0], "b": [0.010]}, delay=0.030, metrics=False)
    _, info = await _get_on_a_late_loop(transport, scripted, clock, 0.030)
    assert (info.attempts, info.replica, info.suppressed) == (2, "http://b", None)
    sent = [e.at for e in scripted.events if e.event == "sent"]
    assert sent[0] == 0.0
    assert 0.030 + 2 * 0.0127 <= sent[1] <= 0.030 + 2 * 0.0225  # held, then sent


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
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten requests whose loop was late by 5 ms against a 100 ms delay (under a
    tenth) and ten by 60 ms (above; the primaries answer in 10 ms, so no backup is
    due): the first ten are samples, the second ten are left out as ``client_lag``
    (one warning), and once the loop has been idle for a lag memory the next ten are
    samples again."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
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
            for _ in range(LAG_EVIDENCE):  # the loop served its last deadlines late
                current_timer().lag.observe(late, anyio.current_time())
            await client.get("/")

    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        await burst(0.005)
        await burst(0.060)
        await anyio.sleep(2 * LAG_MEMORY)
        await burst(0.0)
    left_out = [r.sample_left_out for r in records]
    assert left_out == [None] * 10 + ["client_lag"] * 10 + [None] * 10
    assert [r.event_loop_lag > 0.025 for r in records] == [False] * 10 + [True] * 10 + [False] * 10
    assert policy.statistics().recorded == 20
    assert transport.samples_left_out == {"client_lag": 10}
    labels = {"client": "lagging", "route": "GET http://svc", "reason": "client_lag"}
    assert registry.get_sample_value("hedgeclient_delay_samples_left_out_total", labels) == 10
    warnings = [r.getMessage() for r in caplog.records if "runs late" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("hedgeclient: client 'lagging' runs late by")
    # What happens now (samples left out) apart from what would at a larger lag.
    assert "from a lag of 50 % of the delay, backups are held back too" in warnings[0]


async def test_a_primary_that_saw_one_late_wake_up_on_the_wire_is_left_out() -> None:
    """One wake-up 20 ms late while a primary is on the wire (a delay of 100 ms: above a
    tenth of it) leaves its sample out as ``client_lag``, though the loop's typical lag
    is still 0 (one wake-up is no evidence of a loop that stays late); the next
    request, on the wire after that wake-up, is a sample."""
    policy = AdaptiveDelay(initial_delay=0.100, min_samples=1000)
    records: list[RequestRecord] = []
    transport, _ = _transport({"a": [0.010], "b": [0.010]}, delay=policy, hooks=[records.append])

    async def late_wake_up() -> None:
        await anyio.sleep(0.005)  # the primary is on the wire
        current_timer().lag.observe(0.020, anyio.current_time())

    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(late_wake_up)
            await client.get("/")
        assert current_timer().lag.recent(anyio.current_time()) == 0.0
        await client.get("/")
    assert [r.sample_left_out for r in records] == ["client_lag", None]
    # The record says what left it out, not the typical lag (0 here): a new user saw 0.
    assert [r.event_loop_lag for r in records] == [pytest.approx(0.020), 0.0]
    assert policy.statistics().recorded == 1
    assert transport.samples_left_out == {"client_lag": 1}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_blocked_asyncio_loop_is_measured_and_suppresses_the_backup(
    anyio_backend: str,
) -> None:
    """On a real asyncio loop, handlers that block the loop for 90 ms around each
    request's 20 ms hedge deadline: the timer measures at least 80 ms of lateness (a
    busy machine only adds to it). The first request's late deadline is no evidence
    yet (its backup goes); by the fifth the loop is known to be late, and its backup
    is suppressed as ``client_lag``."""

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
    infos = []
    async with httpx.AsyncClient(transport=transport, base_url=SVC) as client:
        for _ in range(LAG_EVIDENCE + 1):
            info = hedge_info(await client.get("/"))
            assert info is not None
            infos.append((info.attempts, info.suppressed))
            await anyio.sleep(0.2)  # past the hush a's lost primary leaves (issue 24)
    assert infos[0] == (2, None)
    assert infos[-1] == (1, "client_lag")
    # the hedge deadlines were served 80 ms late or more (blocked 10..100 ms, due at
    # 20 ms), the re-checks of a held backup about on time: a weighted mean of both
    assert transport.event_loop_lag >= 0.03


async def test_a_backup_vetoed_by_the_lag_leaves_the_failure_backup(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """On a late loop the backup due at the delay is suppressed as ``client_lag``; the
    primary's 503 a little later still calls for a backup, which goes (a fresh user
    found the 503 returned while two replicas were free)."""
    clock = anyio_backend[1]["clock"]
    transport, scripted = _transport(
        {"a": [Reply(0.040, status=503)], "b": [0.010]}, delay=0.030, metrics=False
    )
    response, info = await _get_on_a_late_loop(transport, scripted, clock, 0.030)
    assert (response.status_code, info.attempts, info.replica) == (200, 2, "http://b")
    assert info.suppressed is None  # held back at the delay, sent at the failure
    assert [(e.at, e.replica, e.event) for e in scripted.events if e.event == "sent"] == [
        (0.0, "a", "sent"),
        (0.04, "b", "sent"),  # at the failure, not at the delay
    ]


async def test_a_freeze_after_a_quiet_spell_counts_every_deadline_it_held(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """A fresh client whose loop freezes for 0.5 s with ten requests in flight: the one
    wake-up after the freeze serves their ten deadlines late, which is evidence enough
    at once; their backups are suppressed and their samples left out (with one measure
    per wake-up, the freeze went unseen: a fresh user's delay learned 0.56 s)."""
    clock = anyio_backend[1]["clock"]
    records: list[RequestRecord] = []
    policy = AdaptiveDelay(initial_delay=0.030)
    transport, _ = _transport(
        {"a": [0.600], "b": [0.600]}, delay=policy, hooks=[records.append], metrics=False
    )
    async with (
        httpx.AsyncClient(transport=transport, base_url=SVC) as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(10):
            tg.start_soon(client.get, "/")
        await anyio.sleep(0.002)
        clock.jump(0.5)  # the client's loop is frozen: no checkpoint for 0.5 s
    assert [(r.suppressed, r.sample_left_out) for r in records] == [
        ("client_lag", "client_lag")
    ] * 10
    assert policy.statistics().recorded == 0
