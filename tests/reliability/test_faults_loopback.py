"""Faults survived, over real loopback sockets: down, reset, 503, mid-body close.

The replicas are ``hedgeclient.testing.FakeService`` (uvicorn, or hypercorn for h2c,
in a background thread). Real clock: the tests assert outcomes and order; the few
timing bounds are commented with their reason and are generous.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from hedgeclient import (
    HedgeBudget,
    HedgedTransport,
    PowerOfTwoChoices,
    RequestRecord,
    TransportClosedError,
)
from hedgeclient.testing import (
    CloseMidBody,
    Down,
    ErrorStatus,
    FakeService,
    ReplicaConfig,
    Reset,
    large_body_sha256,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"
TEN_MB = 10 * 1024 * 1024


def generous() -> HedgeBudget:
    """A budget that lets every due backup go (the tests count backups themselves)."""
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def busy_connections(inner: httpx.AsyncHTTPTransport) -> list[str]:
    """The pool's connections that are neither idle nor closed, as httpcore names them."""
    return [c.info() for c in inner._pool.connections if not (c.is_idle() or c.is_closed())]


async def wait_for(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` (server accounting, updated by another thread) until true."""
    # The bound only stops a broken test from hanging; the events take milliseconds.
    with anyio.fail_after(within):
        while not await anyio.to_thread.run_sync(predicate):  # noqa: ASYNC110 - another thread's state
            await anyio.sleep(0.005)


# -- 1. one replica of three down --------------------------------------------------------


async def test_down_replica_is_passed_over_then_retried(
    tally: Any, count_tasks: Callable[[], int]
) -> None:
    """A refusing replica costs one connect, is passed over after 3 failures, then retried;
    failing again, it is passed over twice as long."""
    cooldown = 0.5
    selector = PowerOfTwoChoices(failure_threshold=3, cooldown=cooldown, rng=random.Random(5))
    records: list[RequestRecord] = []
    down_config = ReplicaConfig(fault=Down())
    with FakeService(replicas=3, latency=0.002, replica_overrides={1: down_config}) as svc:
        down = svc.origins[1]
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=1.0,  # long: a request that waited for it would be obvious
            max_hedges=2,
            selector=selector,
            hooks=[records.append],
            metrics=False,
        )
        hits: list[list[int]] = [[], [], []]  # per phase: indices of requests that hit it
        # (sent, ended) of each request, by phase and index: an ejection happens inside
        # the request that hit the replica, so its cool-down, which ends at `until`,
        # began between the two.
        spans: dict[tuple[int, int], tuple[float, float]] = {}

        async def one(client: httpx.AsyncClient, phase: int, index: int) -> None:
            sent = anyio.current_time()
            response = await client.get(f"/p{phase}/{index}")
            spans[phase, index] = (sent, anyio.current_time())
            assert response.status_code == 200
            if any(a.replica == down for a in records[-1].attempts):
                hits[phase].append(index)

        def until() -> float:
            return selector.statistics().ejected[down]

        lengths: list[tuple[float, float]] = []  # each cool-down's length: (at least, at most)

        def ejected_by(phase: int) -> None:
            sent, ended = spans[phase, hits[phase][-1]]
            lengths.append((until() - ended, until() - sent))

        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            # Phase 0: until the replica has failed failure_threshold times in a row.
            for index in range(60):
                await one(client, 0, index)
                if len(hits[0]) == 3:
                    break
            assert down in selector.cooling_down()
            ejected_by(0)
            # Cooling down: never tried. Up to 20 requests (milliseconds), none sent in
            # the cool-down's last 0.1 s: a loaded machine may make them outlast it.
            cooled = until()
            for index in range(20):
                if anyio.current_time() >= cooled - 0.1:
                    break
                await one(client, 0, 100 + index)
            assert (0, 100) in spans  # at least one was sent while it cooled down
            assert len(hits[0]) == 3
            # Phase 1: the cool-down over, it is tried once more and cools down again.
            await anyio.sleep_until(until())
            assert selector.cooling_down() == frozenset()
            for index in range(60):
                await one(client, 1, index)
                if hits[1]:
                    break
            assert len(hits[1]) == 1
            assert down in selector.cooling_down()
            ejected_by(1)
            # Phase 2: back up; it is passed over until its second cool-down (twice the
            # first: the fault persisted) ends, then tried, answers, and is cleared.
            svc.set_fault(None, replicas=1)
            await anyio.sleep_until(until())
            for index in range(60):
                await one(client, 2, index)
                if hits[2]:
                    break
            assert len(hits[2]) == 1
            assert selector.cooling_down() == frozenset()
        stats = svc.stats()
    # The cool-downs: 0.5 s, then twice that (each within the request that began it).
    for (least, most), length in zip(lengths, (cooldown, 2 * cooldown), strict=True):
        assert least - 1e-9 <= length <= most + 1e-9
    refused = [a for r in records for a in r.attempts if a.replica == down and a.status is None]
    assert len(refused) == 4
    assert all(a.outcome == "failed" for a in refused)
    # A request that hit the refusing replica sent its next attempt at once, for the
    # failure, not at the 1 s hedge delay.
    for record in records:
        if record.attempts[0].replica == down and record.attempts[0].status is None:
            assert record.attempts[1].trigger == "failure"
    assert stats.replicas[1].received == 1  # only the request after it came back
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F1 one replica of three down", leaked_tasks=leaked, faults=4, requests=len(records))


# -- 2. reset, 503, mid-body close; all 503; all refused -----------------------------------


@pytest.mark.parametrize(
    ("fault", "first_status"),
    [pytest.param(Reset(), None, id="reset"), pytest.param(ErrorStatus(503), 503, id="503")],
)
async def test_failing_primary_is_replaced_by_backup(
    fault: Any,
    first_status: int | None,
    first_replica: Any,
    tally: Any,
    count_tasks: Callable[[], int],
) -> None:
    """A primary reset mid-request or answering 503: the backup goes at once and answers."""
    records: list[RequestRecord] = []
    with FakeService(
        replicas=3, latency=0.002, replica_overrides={0: ReplicaConfig(fault=fault)}
    ) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=1.0,
            max_hedges=2,
            selector=first_replica(),  # every primary meets the fault
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for index in range(20):
                response = await client.get(f"/{index}")
                assert response.status_code == 200
                assert response.headers["x-replica"] == "1"
        stats = svc.stats()
    assert [[(a.outcome, a.status) for a in r.attempts] for r in records] == [
        [("failed", first_status), ("won", 200)]
    ] * 20
    # Requests the faulty replica received, by how they ended there.
    ended = stats.replicas[0]
    assert (ended.received, ended.failed + ended.completed) == (20, 20)
    assert stats.replicas[1].completed == 20
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally(
        f"F2 primary {'reset' if first_status is None else 'answers 503'}",
        leaked_tasks=leaked,
        faults=20,
        requests=20,
    )


async def test_mid_body_close_reaches_caller_as_protocol_error(
    first_replica: Any, tally: Any, count_tasks: Callable[[], int]
) -> None:
    """Headers, then a close mid-body: the race ended at headers; the caller gets the error."""
    records: list[RequestRecord] = []
    overrides = {0: ReplicaConfig(fault=CloseMidBody())}
    with FakeService(replicas=3, latency=0.002, replica_overrides=overrides) as svc:
        inner = httpx.AsyncHTTPTransport()
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=1.0,
            selector=first_replica(),
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            tasks = count_tasks()
            for index in range(10):
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get(f"/{index}")
            # The client stays healthy: a request opted out of the faulty replica works.
            response = await client.get(f"{svc.origins[1]}/after")
            assert response.status_code == 200
            assert busy_connections(inner) == []
            assert count_tasks() == tasks
    # The headers won the race: one attempt each, and no backup was due.
    assert [[a.outcome for a in r.attempts] for r in records[:10]] == [["won"]] * 10
    tally(
        "F2 winner closes mid-body (caller sees the error)", faults=10, requests=11, leaked_tasks=0
    )


async def test_all_replicas_503_returns_503(tally: Any, count_tasks: Callable[[], int]) -> None:
    """Every replica answering 503: each is tried once and the caller gets a 503 response."""
    records: list[RequestRecord] = []
    with FakeService(replicas=3, latency=0.002, fault=ErrorStatus(503)) as svc:
        origins = svc.origins
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=1.0,
            max_hedges=2,
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for index in range(5):
                response = await client.get(f"/{index}")
                assert response.status_code == 503
                assert response.extensions["hedge"].attempts == 3
    for record in records:
        assert sorted(a.replica for a in record.attempts) == sorted(origins)
        assert [a.outcome for a in record.attempts] == ["failed"] * 3
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F2 all replicas 503", leaked_tasks=leaked, faults=15, requests=5)


async def test_all_replicas_refuse_raises_connect_error(
    tally: Any, count_tasks: Callable[[], int]
) -> None:
    """Every replica refusing: the caller gets httpx.ConnectError itself, not a group."""
    with FakeService(replicas=3, fault=Down()) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=1.0,
            max_hedges=2,
            budget=generous(),
            metrics=False,
        )
        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for index in range(5):
                with pytest.raises(httpx.ConnectError) as caught:
                    await client.get(f"/{index}")
                assert type(caught.value) is httpx.ConnectError
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F2 all replicas refuse", leaked_tasks=leaked, faults=15, requests=5)


# -- 3. a 10 MB winner while the loser is cancelled ---------------------------------------


async def test_large_winner_streams_intact_while_loser_disconnects(
    first_replica: Any, tally: Any, count_tasks: Callable[[], int]
) -> None:
    """A backup streaming 10 MB wins: bytes intact; the loser's replica sees the disconnect."""
    overrides = {0: ReplicaConfig(latency=2.0)}  # the primary: slow, cancelled
    with FakeService(replicas=2, latency=0.005, replica_overrides=overrides) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=first_replica(),
            budget=generous(),
            metrics=False,
        )
        digest = hashlib.sha256()
        received = 0
        disconnect_after = float("nan")
        client = httpx.AsyncClient(transport=transport, base_url=SERVICE)
        tasks = count_tasks()  # before the client starts its scheduler task
        async with client, client.stream("GET", f"/large?bytes={TEN_MB}") as response:
            headers_at = anyio.current_time()
            assert response.headers["x-replica"] == "1"

            async def watch_loser() -> None:
                nonlocal disconnect_after
                await wait_for(lambda: svc.stats().replicas[0].abandoned == 1)
                disconnect_after = anyio.current_time() - headers_at

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_loser)
                async for chunk in response.aiter_raw():
                    digest.update(chunk)
                    received += len(chunk)
        stats = svc.stats()
    assert (received, digest.hexdigest()) == (TEN_MB, large_body_sha256(TEN_MB))
    assert (stats.replicas[0].abandoned, stats.replicas[1].completed) == (1, 1)
    # The bound: the loser's replica stops work within 100 ms of the winner's
    # headers (the loser is cancelled before the headers are returned; the rest is the
    # kernel's FIN and the server's event loop, a millisecond or two, plus polling).
    assert disconnect_after < 0.100
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F3 10 MB winner, loser cancelled", leaked_tasks=leaked, faults=1, requests=1)


# -- 5. the caller cancels ----------------------------------------------------------------


class Written:
    """A caller's httpcore ``trace`` callback (hedgeclient passes it to every attempt):
    counts the attempts whose request headers were written to their connection, and
    sets ``done`` once ``want`` of them were.

    A GET has no body: once its headers are written, the whole request is in the
    kernel's buffers and the replica will receive it, whenever the caller leaves. One
    cancelled before that (still connecting, on a machine too busy to get there in
    time) never reaches the replica's app: the replica cannot abandon it.
    """

    def __init__(self, want: int = 0) -> None:
        self.count = 0
        self.want = want
        self.done = anyio.Event()

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == "http11.send_request_headers.complete":
            self.count += 1
            if self.count == self.want:
                self.done.set()


async def test_caller_cancel_cancels_every_attempt(
    tally: Any, count_tasks: Callable[[], int], caplog: pytest.LogCaptureFixture
) -> None:
    """A caller timeout or task cancel ends every attempt: abandoned at the server, no task left."""
    caplog.set_level(logging.WARNING)
    records: list[RequestRecord] = []
    written: list[Written] = []

    def traced(want: int = 0) -> dict[str, Any]:
        written.append(trace := Written(want))
        return {"trace": trace}

    async def get_until_written(client: httpx.AsyncClient, extensions: dict[str, Any]) -> None:
        """GET under fail_after, its deadline moved to now once ``want`` attempts are
        written."""

        async def deadline_once_written(scope: anyio.CancelScope) -> None:
            await extensions["trace"].done.wait()
            scope.deadline = anyio.current_time()

        with anyio.fail_after(30.0) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(deadline_once_written, scope)
                await client.get("/", extensions=extensions)

    with FakeService(replicas=3, latency=2.0) as svc:
        inner = httpx.AsyncHTTPTransport()
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=0.020,
            max_hedges=2,
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        before = count_tasks()
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            tasks = count_tasks()
            # By fail_after, before the first backup is due, and between it and the
            # deadline, which leaves it less than its expected latency (the delay).
            for timeout in (0.010, 0.030):
                with pytest.raises(TimeoutError), anyio.fail_after(timeout):
                    await client.get("/", extensions=traced())
            # By fail_after, its deadline passing once all three attempts are on the wire
            # (not at a fixed instant: on a loaded machine the backups may be late).
            for _ in range(2):
                with pytest.raises(TimeoutError):
                    await get_until_written(client, traced(want=3))
            # By cancelling the task that awaits the request, all three on the wire.
            extensions = traced(want=3)
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(client.get, "/", extensions=extensions))
                with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
                    await extensions["trace"].done.wait()
                tg.cancel_scope.cancel()
            # An attempt cancelled before its request was written never reached a
            # replica's app; every one written is received, then abandoned there.
            sent = sum(a.outcome != "unsent" for r in records for a in r.attempts)
            whole = sum(w.count for w in written)
            await wait_for(lambda: svc.stats().abandoned == whole)
            assert busy_connections(inner) == []
            assert count_tasks() == tasks
        stats = svc.stats()
    gc.collect()  # a pending task or unclosed stream would complain now
    # The deadline at 0.010 comes before the 0.020 delay, and at 0.030 leaves too little
    # after it: no backup is ever sent past what the deadline allows. Whether the hedge
    # timer looked (suppressed as `deadline`) or the caller's cancellation came first
    # (None) is timing: on a loaded machine both are due when the loop wakes. The exact
    # instants and reasons: tests/test_race.py, in virtual time.
    assert [len(r.attempts) for r in records] == [1, 1, 3, 3, 3]
    assert {records[0].suppressed, records[1].suppressed} <= {None, "deadline"}
    assert [r.suppressed for r in records[2:]] == [None, None, None]
    assert all(r.cancelled_by_caller and r.outcome == "error" for r in records)
    assert {a.outcome for r in records for a in r.attempts} <= {"cancelled", "unsent"}
    assert [w.count for w in written[2:]] == [3, 3, 3]
    assert 9 <= whole <= sent
    assert (stats.received, stats.abandoned, stats.completed) == (whole, whole, 0)
    assert not [r for r in caplog.records if "destroyed" in r.getMessage()]
    tally("F5 caller cancels", faults=5, requests=5, leaked_tasks=count_tasks() - before)


# -- 7. aclose() with requests in flight --------------------------------------------------


async def test_aclose_fails_in_flight_requests_clearly(
    tally: Any, count_tasks: Callable[[], int]
) -> None:
    """aclose() ends in-flight requests with TransportClosedError; later ones get RuntimeError."""
    records: list[RequestRecord] = []
    errors: list[BaseException] = []
    with FakeService(replicas=3, latency=2.0) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=0.020,
            max_hedges=2,
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        tasks = count_tasks()  # before the client starts its scheduler task (aclose stops it)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            # Closed once all 18 attempts (3 each: backups at 20 and 40 ms) are on the
            # wire, not at a fixed instant a loaded machine could reach before them.
            written = Written(want=18)

            async def call(index: int) -> None:
                try:
                    await client.get(f"/{index}", extensions={"trace": written})
                except httpx.HTTPError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for index in range(6):
                    tg.start_soon(call, index)
                with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
                    await written.done.wait()
                await transport.aclose()
            with pytest.raises(
                RuntimeError,
                match=r"^Cannot send a request, as the HedgedTransport has been closed\.$",
            ):
                await client.get("/after")
            await wait_for(lambda: svc.stats().abandoned == 18)
            leaked = count_tasks() - tasks
        stats = svc.stats()
    assert [type(e) for e in errors] == [TransportClosedError] * 6
    assert {str(e) for e in errors} == {
        "The HedgedTransport was closed while the request was in flight."
    }
    assert (stats.received, stats.completed) == (18, 0)  # 3 attempts each, all abandoned
    assert leaked == 0
    tally("F7 aclose with requests in flight", faults=1, requests=7, leaked_tasks=leaked)


# -- 6. HTTP/2: a cancelled loser stream and its neighbours -------------------------------


def h2_transport(
    svc: FakeService, **kwargs: Any
) -> tuple[httpx.AsyncHTTPTransport, HedgedTransport]:
    """An h2c (prior knowledge) inner transport, and a hedged transport over it."""
    inner = httpx.AsyncHTTPTransport(http1=False, http2=True)
    kwargs.setdefault("budget", generous())
    kwargs.setdefault("metrics", False)
    return inner, HedgedTransport(inner, replicas={SERVICE: svc.origins}, **kwargs)


async def test_h2_cancelled_loser_does_not_disturb_neighbours(
    first_replica: Any, tally: Any, count_tasks: Callable[[], int]
) -> None:
    """h2c: 200 requests on 2 connections; cancelled losers are reset, neighbours intact."""
    slow_sometimes = ReplicaConfig(latency="pauses:service=0.005,pause=0.5,p=0.3")
    records: list[RequestRecord] = []
    with FakeService(
        replicas=2, http2=True, latency=0.005, replica_overrides={0: slow_sometimes}, seed=11
    ) as svc:
        inner, transport = h2_transport(
            svc, delay=0.050, selector=first_replica(), hooks=[records.append]
        )
        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

            async def worker(w: int) -> None:
                for i in range(10):
                    rid = f"{w}-{i}"
                    response = await client.get(f"/{rid}", headers={"x-request-id": rid})
                    assert response.status_code == 200
                    assert response.http_version == "HTTP/2"
                    assert response.json()["request_id"] == rid

            async with anyio.create_task_group() as tg:
                for w in range(20):
                    tg.start_soon(worker, w)
            # Multiplexed: one connection per replica, both still open and usable.
            assert [c.info().split(", ")[1:3] for c in inner._pool.connections] == [
                ["HTTP/2", "IDLE"]
            ] * 2
            assert (await client.get("/after")).status_code == 200
            await wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0)
        stats = svc.stats()
    cancelled = sum(1 for r in records for a in r.attempts if a.outcome == "cancelled")
    assert (len(records), stats.failed) == (201, 0)
    # Every request reached a replica that answered it in full (its body was checked
    # against its own request id above).
    assert len(stats.requests) == 200
    assert all(
        any(v.outcome == "completed" and v.status == 200 for v in visits)
        for visits in stats.requests.values()
    )
    # Every slow primary (0.5 s) lost to its backup: its stream was reset, so the
    # replica saw the cancel and stopped (without the reset it would complete).
    slow = [v for visits in stats.requests.values() for v in visits if v.latency >= 0.5]
    assert len(slow) > 20  # about 30% of 200
    assert {v.outcome for v in slow} == {"abandoned"}
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F6 h2 cancelled loser streams", leaked_tasks=leaked, faults=cancelled, requests=201)


async def test_h2_loser_bodies_do_not_stall_the_connection(
    first_replica: Any, tally: Any, count_tasks: Callable[[], int]
) -> None:
    """h2c: cancelled losers of 4 MB bodies never starve the connection's flow-control window."""
    size = 4_000_000
    # Every primary loses: its backup, sent at 20 ms, answers in 2 ms (300 ms leaves a
    # loaded machine's scheduling far behind), and the loser's replica would send its
    # 4 MB at 300 ms if its stream were not reset.
    overrides = {0: ReplicaConfig(latency=0.300)}
    with FakeService(replicas=2, http2=True, latency=0.002, replica_overrides=overrides) as svc:
        _, transport = h2_transport(svc, delay=0.020, selector=first_replica())
        tasks = count_tasks()  # before the client starts its scheduler task
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            for _ in range(6):  # 24 MB of loser bodies: more than the 16 MB window
                response = await client.get(f"/large?bytes={size}")
                assert response.extensions["hedge"].attempt == 2
                await anyio.sleep(0.320)  # let the loser's replica answer (or not)
            # A request on the losers' connection, not hedged: it must not hang.
            response = await client.get(f"/large?bytes={size}", extensions={"hedge": False})
            assert response.headers["x-replica"] == "0"
            assert hashlib.sha256(response.content).hexdigest() == large_body_sha256(size)
        stats = svc.stats()
    assert (stats.replicas[0].abandoned, stats.replicas[0].completed) == (6, 1)
    leaked = count_tasks() - tasks
    assert leaked == 0
    tally("F6 h2 loser bodies vs flow control", leaked_tasks=leaked, faults=6, requests=7)
