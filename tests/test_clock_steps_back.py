"""No negative latency, whatever the clock does: a clock that steps back mid-race.

The clocks the library reads (the event loop's clock as the hedge timer hands it to
each request, ``HedgeTimer.time``, which the race, the request path and the report
read; and ``anyio.current_time``, which the pure pieces read by default) are both
replaced by one that a replica's handler steps back by one second while an
attempt is in flight, so that the attempt ends "before" it started. Every duration
the library reports (``AttemptRecord.started`` and ``duration``,
``RequestRecord.duration``, the latency given to the ``DelayPolicy``, the Prometheus
histograms) is then 0, never negative; with the clock steady again, durations are
exact again.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient._timer import current_timer
from hedgeclient.testing import FirstReplica

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
ROUTE = "GET http://svc"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """asyncio in real time; trio with a fresh MockClock (virtual time)."""
    if request.param == "trio":
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return ("asyncio", {})


class SteppingClock:
    """The event loop's clock plus an offset that :meth:`step_back` lowers."""

    def __init__(self) -> None:
        self._real = anyio.current_time
        self.offset = 0.0

    def __call__(self) -> float:
        return self._real() + self.offset

    def step_back(self, seconds: float) -> None:
        self.offset -= seconds


class Recording:
    """A DelayPolicy with a delay the test sets (0.030 s, or 10 s for a request that
    must not be hedged however late a loaded machine runs it) that records every
    latency it is given."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, float, bool]] = []
        self.delay = 0.030

    def hedge_delay(self, route: str) -> float:
        return self.delay

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        self.recorded.append((route, seconds, censored))


async def test_no_negative_latency_when_the_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch, anyio_backend_name: str
) -> None:
    """A clock stepped back 1 s during a primary that wins, during a backup that wins,
    and before a backup is sent: every reported instant and duration is 0, never
    negative; then exact again."""
    clock = SteppingClock()
    monkeypatch.setattr(anyio, "current_time", clock)
    monkeypatch.setattr(current_timer(), "time", clock)
    # (path, replica) -> (latency in seconds, steps the clock back on arrival). The
    # primaries that must lose take 1 s against a backup answering at 40 ms: they lose
    # on any machine (and are cancelled, so their second costs nothing).
    script = {
        ("/primary", "a"): (0.010, True),
        ("/backup", "a"): (1.0, False),
        ("/backup", "b"): (0.010, True),
        ("/early", "a"): (1.0, True),
        ("/early", "b"): (0.010, False),
        ("/after", "a"): (0.020, False),
    }
    # Hedged at 30 ms, or never (10 s): a request's role, not the machine's speed.
    delays = {"/primary": 10.0, "/backup": 0.030, "/early": 0.030, "/after": 10.0}

    async def handler(request: httpx.Request) -> httpx.Response:
        latency, steps_back = script[request.url.path, request.url.host]
        if steps_back:
            clock.step_back(1.0)
        await anyio.sleep(latency)
        return httpx.Response(200, text=request.url.host)

    policy = Recording()
    records: list[RequestRecord] = []
    registry = CollectorRegistry()
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=policy,
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=10, min_per_second=0),
        hooks=[records.append],
        metrics=registry,
    )
    texts = []
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for path in ("/primary", "/backup", "/early", "/after"):
            policy.delay = delays[path]
            texts.append((await client.get(path)).text)
            # Forward again between requests: the loop's own timers (the hedge timer
            # among them) keep the real clock, so each request starts in agreement.
            clock.offset = 0.0
    assert texts == ["a", "b", "b", "a"]

    attempts = [a for r in records for a in r.attempts]
    assert all(a.started >= 0.0 and a.duration >= 0.0 for a in attempts)
    assert all(r.duration >= 0.0 for r in records)
    assert all(seconds >= 0.0 for _, seconds, _ in policy.recorded)
    primary, backup, early, after = records
    # Stepped back mid-attempt: the attempt (and the request it wins) lasted 0 s.
    assert (primary.duration, [a.duration for a in primary.attempts]) == (0.0, [0.0])
    assert backup.duration == 0.0
    assert [(a.replica, a.duration, a.outcome) for a in backup.attempts] == [
        ("http://a", 0.0, "cancelled"),  # ended after the step: "before" it started
        ("http://b", 0.0, "won"),
    ]
    # Stepped back before the backup was sent: it started "before" the request did.
    assert early.duration == 0.0
    assert [(a.started, a.outcome) for a in early.attempts] == [(0.0, "cancelled"), (0.0, "won")]
    assert policy.recorded[:3] == [(ROUTE, 0.0, False), (ROUTE, 0.0, True), (ROUTE, 0.0, True)]
    # The clock steady again: exact durations again.
    assert [a.duration for a in after.attempts] == [pytest.approx(after.duration)]
    assert policy.recorded[3][::2] == (ROUTE, False)
    assert policy.recorded[3][1] == pytest.approx(after.duration)
    if anyio_backend_name == "trio":  # virtual time
        assert [a.started for a in backup.attempts] == [0.0, 0.030]
        assert [a.duration for a in early.attempts] == [0.0, pytest.approx(0.010, abs=1e-9)]
        assert after.duration == pytest.approx(0.020, abs=1e-9)
        assert policy.recorded[3][1] == pytest.approx(0.020, abs=1e-9)

    for name, labels in (
        ("hedgeclient_request_duration_seconds", {"client": "default", "route": ROUTE}),
        (
            "hedgeclient_attempt_duration_seconds",
            {"client": "default", "route": ROUTE, "kind": "primary"},
        ),
        (
            "hedgeclient_attempt_duration_seconds",
            {"client": "default", "route": ROUTE, "kind": "backup"},
        ),
    ):
        total = registry.get_sample_value(f"{name}_sum", labels)
        assert total is not None
        assert total >= 0.0
        # The stepped-back observations fall in the lowest bucket (0 s), not below it.
        lowest = registry.get_sample_value(f"{name}_bucket", {**labels, "le": "0.005"})
        assert lowest is not None
        assert lowest >= 1.0
