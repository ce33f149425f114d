"""Requests queued for the client's own pool connections, in virtual time (issue 25).

A request waiting for one of the client's own connections is not on its replica yet:
its hedge delay starts again when it leaves the queue, and meanwhile it costs no
timer callback. The race is driven with a scripted ``send`` that plays a pool of one
connection the way ``_wire.send`` and httpcore's trace report it: the attempt is
marked queued (``on_wire`` NaN), then ``OnWire`` sees it leave the queue; the choice
knows the pool reports its queue (``Choice(queues=True)``, as over an httpx pool).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget
from hedgeclient._attempt import CANCELLED, Attempt
from hedgeclient._race.race import Race
from hedgeclient._race.rules import RaceRules
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service
from hedgeclient._timer import HedgeTimer, current_timer
from hedgeclient._wire.send import OnWire
from hedgeclient.testing import FirstReplica

pytestmark = pytest.mark.anyio

A, B = "http://a", "http://b"
SERVICE = Service(("http", "svc", 80), [("http", r[7:], 80) for r in (A, B)])
NON_FATAL = frozenset({502, 503, 504})


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


class OneConnection:
    """A pool of one connection: each attempt waits its turn, then holds it for its
    replica's latency (``latency(attempt)``, seconds) and gets a 200."""

    def __init__(self, choice: Choice, latency: Callable[[Attempt], float]) -> None:
        self._choice = choice
        self._latency = latency
        self._lock = anyio.Lock()  # first come, first served (trio's locks are fair)

    async def send(self, attempt: Attempt) -> httpx.Response:
        attempt.on_wire = math.nan  # as _wire.send marks it, until the trace's first event
        trace = OnWire(attempt, {}, self._choice)
        async with self._lock:
            await trace("http11.send_request_headers.started", {})
            await anyio.sleep(self._latency(attempt))
        return httpx.Response(200)


class CountingTimer:
    """The loop's hedge timer, counting the deadlines registered with it."""

    def __init__(self, timer: HedgeTimer) -> None:
        self._timer = timer
        self.registered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._timer, name)

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Any:
        self.registered += 1
        return self._timer.call_at(deadline, callback)


def race(
    send: Callable[[Attempt], Any], choice: Choice, delay: float | None, timer: Any = None
) -> Race:
    """One race over ``SERVICE`` with one backup allowed and an unlimited budget."""
    rules = RaceRules(
        choice=choice,
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        non_fatal=NON_FATAL,
        max_backups=1,
    )
    return Race(
        send,
        rules,
        service=SERVICE,
        origin="http://svc",
        delay=delay,
        ineligible=None,
        start=anyio.current_time(),
        timer=current_timer() if timer is None else timer,
    )


def new_choice() -> Choice:
    """The choice of a transport over an httpx pool, with FirstReplica."""
    return Choice(FirstReplica(), zone=None, backup_zone="any", non_fatal=NON_FATAL, queues=True)


async def test_a_queued_primary_gets_its_backup_a_delay_after_it_leaves_the_queue() -> None:
    """The second request waits 40 ms for the one connection (its 30 ms delay passes
    in the queue), then is slow on its replica: its backup goes at 0.070, one delay
    after it went on the wire, not at 0.030 (no replica was slow then) nor at 0.060
    (the next multiple of the delay, as when the queue was polled)."""
    choice = new_choice()
    start = anyio.current_time()
    pool = OneConnection(choice, lambda a: 0.040 if a is first.attempts[0] else 0.100)
    first = race(pool.send, choice, delay=None)  # holds the connection for 40 ms
    second = race(pool.send, choice, delay=0.030)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await anyio.sleep(0.001)  # the first has the connection
        tg.start_soon(second.run)
    primary, backup = second.attempts
    assert primary.on_wire - start == pytest.approx(0.040)
    assert (backup.replica, backup.started - start) == (B, pytest.approx(0.070))
    assert second.winner is primary  # answered at 0.140, before the backup
    assert backup.state == CANCELLED


async def test_queued_requests_register_no_deadline_while_they_wait() -> None:
    """100 requests at once through one connection, 4 ms each, with a 10 ms hedge delay:
    each registers its hedge deadline once, and once more when its delay passes before
    it has been on the wire that long (in the queue, or since leaving it); none is
    hedged (4 ms on the wire). Polling the queue every delay registered about 2,000
    (the n-th request waits 4n ms)."""
    choice = new_choice()
    pool = OneConnection(choice, lambda a: 0.004)
    timer = CountingTimer(current_timer())
    start = anyio.current_time()
    races = [race(pool.send, choice, delay=0.010, timer=timer) for _ in range(100)]
    async with anyio.create_task_group() as tg:
        for one in races:
            tg.start_soon(one.run)
    assert [len(r.attempts) for r in races] == [1] * 100
    on_wire = sorted(r.attempts[0].on_wire - start for r in races)
    assert on_wire == pytest.approx([0.004 * n for n in range(100)])
    # the first two answered within their delay (at 4 and 8 ms); the third, on the wire
    # at 8 ms, looks again at 18 ms; every other left the queue after its delay
    assert timer.registered == 100 + 98


class LateTimer(CountingTimer):
    """The loop's hedge timer, on a loop that runs ``late`` seconds late lately."""

    def __init__(self, timer: HedgeTimer, late: float) -> None:
        super().__init__(timer)
        self.lag = FixedLag(late)


class FixedLag:
    """A loop lag that reads ``late`` seconds whenever asked."""

    def __init__(self, late: float) -> None:
        self.late = late
        self.typical = late  # LoopLag's bound on recent(), read before calling it

    def recent(self, now: float) -> float:
        return self.late


async def test_a_late_client_holds_a_queued_primarys_backup_from_the_wire() -> None:
    """On a loop 20 ms late, a backup by delay is held back (``client_lag``) until the
    primary has waited its delay plus twice the lag: on the wire, not in the client's
    own queue. A primary queued 100 ms (a busy client) has not waited on its replica."""
    choice = new_choice()
    start = anyio.current_time()
    pool = OneConnection(choice, lambda a: 0.100 if a is first.attempts[0] else 1.0)
    first = race(pool.send, choice, delay=None)  # holds the connection for 100 ms
    second = race(pool.send, choice, delay=0.030, timer=LateTimer(current_timer(), 0.020))
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await anyio.sleep(0.001)
        tg.start_soon(second.run)
    primary, backup = second.attempts
    assert primary.on_wire - start == pytest.approx(0.100)
    # due at 0.130, held at 0.130 and 0.150; at 0.170 it has waited 0.030 + 2 * 0.020
    # on the wire (at the edge, where rounding may hold it one lag more)
    assert round(backup.started - primary.on_wire, 6) in (0.070, 0.090)
    assert second.suppressed is None  # held back, then sent
