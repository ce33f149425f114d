"""Health and stalls in virtual time: black holes are ejected, stalled replicas skipped.

The race is driven with a scripted ``send`` that plays a replica's connection the way
the transport's httpcore trace reports it (``on_wire``, ``connecting``), so instants
are exact under trio's MockClock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Sequence
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AdaptiveDelay,
    AttemptResult,
    HedgeBudget,
    HedgedTransport,
    PowerOfTwoChoices,
    RequestRecord,
)
from hedgeclient._attempt import Attempt
from hedgeclient._race.race import Race
from hedgeclient._race.rules import RaceRules
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._replicas.services import Service
from hedgeclient._timer import current_timer
from hedgeclient.testing import FirstReplica, ScriptedReplicas

pytestmark = pytest.mark.anyio

A, B, C = "http://a", "http://b", "http://c"
NON_FATAL = frozenset({502, 503, 504})  # the transport's default non-fatal statuses


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


class Recording:
    """A ReplicaSelector that wraps another and logs every result."""

    def __init__(self, inner: ReplicaSelector) -> None:
        self.inner = inner
        self.results: list[tuple[str, AttemptResult]] = []

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        return self.inner.choose(replicas, exclude)

    def attempt_started(self, replica: str) -> None:
        self.inner.attempt_started(replica)

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        self.results.append((replica, result))
        self.inner.attempt_finished(replica, result=result)


def service(*replicas: str) -> Service:
    """The service http://svc with the given replica origins."""
    return Service(("http", "svc", 80), [("http", r[7:], 80) for r in replicas])


async def black_hole_send(attempt: Attempt) -> httpx.Response:
    """Replica a never completes a connection; b and c answer in 10 ms."""
    now = anyio.current_time()
    attempt.on_wire = now
    if attempt.replica == A:
        attempt.connecting = now  # connect_tcp.started, never .complete
        await anyio.sleep_forever()
    await anyio.sleep(0.010)
    return httpx.Response(200, text=attempt.replica)


async def run(send: Any, choice: Choice, svc: Service, delay: float = 0.030) -> Race:
    """Run one race to its end; return it."""
    rules = RaceRules(
        choice=choice,
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        non_fatal=NON_FATAL,
        max_backups=1,
    )
    race = Race(
        send,
        rules,
        service=svc,
        origin="http://svc",
        delay=delay,
        ineligible=None,
        start=anyio.current_time(),
        timer=current_timer(),
    )
    response = await race.run()
    assert response is not None
    return race


async def test_connect_pending_past_the_delay_is_connect_stalled() -> None:
    """A primary still connecting when its backup wins reports connect_stalled."""
    selector = Recording(FirstReplica())
    choice = Choice(selector, zone=None, backup_zone="any", non_fatal=NON_FATAL)
    race = await run(black_hole_send, choice, service(A, B))
    assert [a.replica for a in race.attempts] == [A, B]
    assert selector.results == [(B, "ok"), (A, "connect_stalled")]


async def test_a_backup_cancelled_while_connecting_briefly_proves_nothing() -> None:
    """A backup to the black hole cancelled 20 ms into its connect is only cancelled."""

    async def send(attempt: Attempt) -> httpx.Response:
        attempt.on_wire = anyio.current_time()
        if attempt.replica == A:
            attempt.connecting = attempt.on_wire
            await anyio.sleep_forever()
        await anyio.sleep(0.050)  # the primary, on b, answers 20 ms after the backup left
        return httpx.Response(200)

    selector = Recording(FirstReplica())
    choice = Choice(selector, zone=None, backup_zone="any", non_fatal=NON_FATAL)
    race = await run(send, choice, service(B, A))
    assert [a.replica for a in race.attempts] == [B, A]
    assert selector.results == [(B, "ok"), (A, "cancelled")]


async def test_a_black_hole_is_ejected_after_three_primaries() -> None:
    """Three primaries to the black hole eject it: no primary goes there for its
    cool-down, and from then on every request takes what the good replicas take (the
    latency half of tests/integration/test_health_loopback.py, exact here)."""
    selector = PowerOfTwoChoices(rng=random.Random(3), cooldown=5.0)
    choice = Choice(selector, zone=None, backup_zone="any", non_fatal=NON_FATAL)
    svc = service(A, B, C)
    primaries: list[tuple[float, str, float]] = []  # (start, primary's replica, duration)
    start = anyio.current_time()
    for _ in range(60):
        race = await run(black_hole_send, choice, svc)
        took = anyio.current_time() - race.start
        primaries.append((race.start - start, race.attempts[0].replica, took))
        await anyio.sleep(0.010)
    to_a = [t for t, replica, _ in primaries if replica == A]
    assert len(to_a) == 3
    assert selector.statistics().ejections["connect_stalled"] == 1
    assert all(t < to_a[-1] + 5.0 for t, _, _ in primaries)  # all inside the cool-down
    assert selector.cooling_down() == {A}
    # A primary in the black hole costs its hedge delay: its backup answers at 0.040.
    # Every other request, all of those after the ejection among them, takes the good
    # replicas' 10 ms exactly: the ejected replica costs nothing more.
    assert [round(took, 9) for _, replica, took in primaries if replica == A] == [0.040] * 3
    assert {round(took, 9) for _, replica, took in primaries if replica != A} == {0.010}
    assert sum(t > to_a[-1] for t, _, _ in primaries) >= 40  # most of the 60 came after


async def test_stalled_replica_gets_no_new_primary() -> None:
    """A replica holding a 40 ms old attempt and silent since gets no primary, and the
    younger primary already there gets its backup at once, not at its hedge delay."""
    script = ScriptedReplicas({"a": [1.0], "b": [0.010]})
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={"http://svc": [A, B]},
        delay=0.030,
        selector=FirstReplica(),
        metrics=False,
    )
    responses: dict[str, httpx.Response] = {}

    async def get(path: str, **kwargs: Any) -> None:
        responses[path] = await client.get(path, **kwargs)

    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        script.start_clock()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: get("/stuck", extensions={"hedge": False}))  # 1 s on a
            await anyio.sleep(0.020)
            tg.start_soon(get, "/young")  # a's attempt is 20 ms old: a is not stalled
            await anyio.sleep(0.020)
            await get("/late")  # 40 ms old and a never answered: stalled
            await anyio.sleep(0.020)  # /young's backup, sent at 0.040, answers at 0.050
            tg.cancel_scope.cancel()  # /stuck
    assert responses["/young"].extensions["hedge"].attempt == 2  # its primary went to a
    assert responses["/late"].extensions["hedge"].replica == B
    assert script.sent() == [
        (0.0, "a", None),  # hedge=False: sent once, unmarked
        (0.020, "a", "1"),
        (0.040, "b", "1"),
        (0.040, "b", "2"),  # /young's backup: a was found stalled as /late chose
    ]


async def test_a_replica_that_keeps_answering_is_not_stalled() -> None:
    """One slow request does not mark a replica stalled while it answers others."""
    script = ScriptedReplicas({"a": [1.0, 0.005, 0.005], "b": [0.010]})
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={"http://svc": [A, B]},
        delay=0.030,
        selector=FirstReplica(),
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        script.start_clock()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.get("/slow", extensions={"hedge": False}))
            await anyio.sleep(0.020)
            first = await client.get("/one")  # on a, answers at 0.025
            await anyio.sleep(0.030)
            second = await client.get("/two")  # a's slow one is 55 ms old; a answered 30 ms ago
            tg.cancel_scope.cancel()
    assert first.extensions["hedge"].replica == A
    assert second.extensions["hedge"].replica == A
    assert math.isclose(script.sent()[2][0], 0.055)


async def test_a_loser_silent_past_the_delay_is_outpaced() -> None:
    """A primary on the wire past its hedge delay, its replica answering nothing, that
    loses to its backup reports ``outpaced``; a quick loser only ``cancelled``."""

    async def send(attempt: Attempt) -> httpx.Response:
        attempt.on_wire = anyio.current_time()
        if attempt.replica == A:
            await anyio.sleep_forever()  # accepts the request, never answers
        await anyio.sleep(0.010)
        return httpx.Response(200)

    selector = Recording(FirstReplica())
    choice = Choice(selector, zone=None, backup_zone="any", non_fatal=NON_FATAL)
    await run(send, choice, service(A, B))
    assert selector.results == [(B, "ok"), (A, "outpaced")]


async def test_a_loser_whose_replica_answered_meanwhile_is_only_cancelled() -> None:
    """The same slow primary, while its replica answered another request of the
    transport: a slow request on a live replica, ``cancelled``."""
    answered_by_a = False

    async def send(attempt: Attempt) -> httpx.Response:
        nonlocal answered_by_a
        attempt.on_wire = anyio.current_time()
        if attempt.replica == A and not answered_by_a:
            answered_by_a = True
            await anyio.sleep_forever()  # this request is slow on a
        await anyio.sleep(0.010)
        return httpx.Response(200)

    selector = Recording(FirstReplica())
    choice = Choice(selector, zone=None, backup_zone="any", non_fatal=NON_FATAL)
    svc = service(A, B)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, send, choice, svc)  # its primary on a, slow
        await anyio.sleep(0.005)
        other = await run(send, choice, svc)  # a answers this one at 0.015
    assert [a.replica for a in other.attempts] == [A]
    assert (A, "ok") in selector.results
    assert selector.results[-1] == (A, "cancelled")


class _ThirdToB(FirstReplica):
    """FirstReplica, but the third primary goes to replica b."""

    def __init__(self) -> None:
        self.chosen = 0

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        self.chosen += 1
        return B if self.chosen == 3 else super().choose(replicas, exclude)


_HELD = {"/first": 0.090, "/second": 0.091, "/peer": 0.005}


async def _two_primaries_held_by_a_freeze(
    *, peer: bool = True
) -> tuple[list[RequestRecord], AdaptiveDelay]:
    """Two GETs at once on replica a, which freezes: it answers the first at 90 ms and
    the second 1 ms later, before their 100 ms hedge delay; meanwhile (``peer``) replica
    b answers a third GET, sent at 10 ms, in 5 ms: a's silence is its own. The records
    of a's two, and the delay policy that was to learn from them."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(_HELD[request.url.path])
        return httpx.Response(200)

    policy = AdaptiveDelay(initial_delay=0.100, min_samples=1000)
    records: list[RequestRecord] = []
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": [A, B]},
        delay=policy,
        selector=_ThirdToB(),
        hooks=[records.append],
        metrics=False,
    )
    client = httpx.AsyncClient(transport=transport, base_url="http://svc")
    async with client, anyio.create_task_group() as tg:
        tg.start_soon(client.get, "/first")
        tg.start_soon(client.get, "/second")
        if peer:
            await anyio.sleep(0.010)
            tg.start_soon(client.get, "/peer")
    return [r for r in records if r.attempts[0].replica == A], policy


async def test_a_primary_answered_late_in_a_freezes_burst_is_no_sample() -> None:
    """The first answer after the freeze shows both primaries held 90 ms in one silence
    (EARLY of the delay is 85 ms): the first ends in that silence beside the second, the
    second 1 ms after the first answer, where its replica looks live; both are left out
    as ``replica_silent`` (issue 24: the second was a 91 ms sample)."""
    records, policy = await _two_primaries_held_by_a_freeze()
    assert sorted((r.duration, r.sample_left_out) for r in records) == [
        (pytest.approx(0.090), "replica_silent"),
        (pytest.approx(0.091), "replica_silent"),
    ]
    assert policy.statistics().recorded == 1  # b's 5 ms only


async def test_a_silence_every_replica_shares_is_a_sample() -> None:
    """The same 90 ms with no other replica answering meanwhile: a service slower than
    its delay, not a freeze of one replica (issue 24: a client still warming up on a
    service slower than its initial delay, or a broad slowdown, left every sample out
    and never learnt the service). Both are samples."""
    records, policy = await _two_primaries_held_by_a_freeze(peer=False)
    assert sorted((r.duration, r.sample_left_out) for r in records) == [
        (pytest.approx(0.090), None),
        (pytest.approx(0.091), None),
    ]
    assert policy.statistics().recorded == 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_primary_answered_late_in_a_freezes_burst_is_no_sample_on_asyncio(
    anyio_backend: str,
) -> None:
    """The same freeze on a real asyncio loop: a late loop only lengthens what both
    primaries spent beside each other, so both are left out however busy the machine."""
    records, policy = await _two_primaries_held_by_a_freeze()
    assert [r.sample_left_out for r in records] == ["replica_silent"] * 2
    assert policy.statistics().recorded == 1  # b's 5 ms only


async def test_a_freeze_that_began_after_the_primary_left_keeps_new_primaries_away() -> None:
    """A primary sent to a at 0, a answers another request at 6 ms and then freezes: the
    primary's backup wins on b at 40 ms, and the loser cancelled in a's silence leaves a
    hush from a's last answer on (6 ms), so the request sent at 50 ms avoids a (issue 24:
    before, an attempt sent before its replica's last answer left none, and new
    primaries walked into the rest of the freeze)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "b":
            await anyio.sleep(0.010)
        elif request.url.path == "/quick":
            await anyio.sleep(0.005)
        else:
            await anyio.sleep(1.0)  # a is frozen after its answer at 6 ms
        return httpx.Response(200, text=request.url.host)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": [A, B]},
        delay=0.030,
        selector=FirstReplica(),
        metrics=False,
    )
    responses: dict[str, httpx.Response] = {}

    async def get(path: str) -> None:
        responses[path] = await client.get(path)

    client = httpx.AsyncClient(transport=transport, base_url="http://svc")
    async with client, anyio.create_task_group() as tg:
        tg.start_soon(get, "/held")
        await anyio.sleep(0.001)
        tg.start_soon(get, "/quick")  # a answers it at 6 ms
        await anyio.sleep(0.049)
        await get("/next")
    seen = [(p, r.text, r.extensions["hedge"].attempts) for p, r in responses.items()]
    assert seen == [
        ("/quick", "a", 1),
        ("/held", "b", 2),
        ("/next", "b", 1),
    ]


async def _slower_than_its_delay(
    work: Callable[[float], float], seconds: float
) -> tuple[AdaptiveDelay, list[RequestRecord], list[tuple[float, float | None]]]:
    """8 workers of sequential GETs on 3 healthy replicas, none frozen, each attempt
    taking ``work(now)`` (seeded log-normal draws), for ``seconds`` of virtual time:
    the default adaptive delay, its records, and the delay read each second."""
    rng = random.Random(5)
    policy = AdaptiveDelay()
    route = "GET http://svc"
    records: list[RequestRecord] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(work(anyio.current_time()) * rng.lognormvariate(0.0, 0.3))
        return httpx.Response(200)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": [A, B, "http://c"]},
        delay=policy,
        selector=PowerOfTwoChoices(rng=random.Random(6)),
        hooks=[records.append],
        metrics=False,
    )
    start = anyio.current_time()
    delays: list[tuple[float, float | None]] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:

        async def worker() -> None:
            while anyio.current_time() - start < seconds:
                await client.get("/")

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(worker)
            while anyio.current_time() - start < seconds:
                await anyio.sleep(1.0)
                delays.append((round(anyio.current_time() - start), policy.hedge_delay(route)))
    return policy, records, delays


async def test_a_service_slower_than_the_initial_delay_is_learnt() -> None:
    """Issue 24 (a new user's report): a healthy service with a 250 ms median (p95
    about 410 ms) under the 100 ms initial delay, 8 in flight on 3 replicas. Every
    replica is as quiet as the others, so no sample is left out as ``replica_silent``
    for that: the delay leaves its warm-up and lands near the p95, and the extra load
    is near 5 %. Before, 98 % of the samples were left out and the delay stayed at
    100 ms, with a backup due for every request."""
    _, records, delays = await _slower_than_its_delay(lambda now: 0.250, 40.0)
    left_out = sum(r.sample_left_out == "replica_silent" for r in records)
    assert left_out <= 0.10 * len(records), (left_out, len(records))
    final = delays[-1][1]
    assert final is not None
    assert 0.33 <= final <= 0.50, final
    backups = sum(len(r.attempts) - 1 for r in records[len(records) // 2 :])
    assert backups <= 0.10 * (len(records) - len(records) // 2)


async def test_the_delay_follows_a_broad_slowdown() -> None:
    """Issue 24 (a new user's report): every replica 5 times slower from 20 s on. The
    delay rises with the new samples (the p95 of a 60 s window that fills with them)
    instead of staying at the old p95 while the slow samples are left out."""

    def work(now: float) -> float:
        return 0.012 if now < 20.0 else 0.060

    _, records, delays = await _slower_than_its_delay(work, 40.0)
    before = dict(delays)[19.0]
    assert before is not None
    assert 0.015 <= before <= 0.030, before
    after = delays[-1][1]  # 20 s into the slowdown
    assert after is not None
    assert after >= 2.0 * before, (before, after)
    slow = [r for r in records if r.duration > 0.050]
    assert sum(r.sample_left_out == "replica_silent" for r in slow) <= 0.10 * len(slow)
