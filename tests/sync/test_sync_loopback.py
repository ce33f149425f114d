"""SyncHedgedTransport under httpx.Client, against real fake replicas on 127.0.0.1.

Each guarantee the async path tests over loopback has its sync twin here: the backup
wins and the loser leaves (the server sees its disconnect), a POST is never sent twice,
the winner's body arrives whole, the caller gets the last attempt's own exception type,
the caller's timeout raises what plain httpx.Client raises, and many threads sharing one
client with timeouts at random instants leave no thread, connection or busy pool slot.

Each runs on both engines (``backend``): on the callers' threads (the default), where a
loser's socket is shut down, and on a private event-loop thread.

Real clock: the tests assert outcomes and order; where a bound on time is asserted, its
comment says why it holds beside two CPU burners.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from hedgeclient import (
    HedgeBudget,
    HedgeInfo,
    RequestRecord,
    SyncHedgedTransport,
    TransportClosedError,
)
from hedgeclient.testing import (
    Down,
    FakeService,
    FirstReplica,
    ReplicaConfig,
    large_body_sha256,
)

pytestmark = pytest.mark.slow

SERVICE = "http://svc"
TEN_MB = 10 * 1024 * 1024


BACKENDS = ["threads", "asyncio"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Where the sync transport runs its engine: the callers' threads, or a loop thread."""
    return str(request.param)


def inner_for(backend: str, **settings: object) -> httpx.HTTPTransport | httpx.AsyncHTTPTransport:
    """The inner transport with ``settings`` that ``backend`` takes: sync on threads."""
    if backend == "threads":
        return httpx.HTTPTransport(**settings)  # type: ignore[arg-type]
    return httpx.AsyncHTTPTransport(**settings)  # type: ignore[arg-type]


def generous() -> HedgeBudget:
    """A budget that lets every due backup go (the tests count backups themselves)."""
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> float:
    """Poll ``condition`` every millisecond; return the seconds it took to hold.

    Raises:
        AssertionError: it did not hold within ``timeout`` seconds.
    """
    start = time.perf_counter()
    while not condition():
        assert time.perf_counter() - start < timeout, "the condition never held"
        time.sleep(0.001)
    return time.perf_counter() - start


def busy_connections(transport: SyncHedgedTransport) -> list[str]:
    """The inner pool's connections neither idle nor closed, as httpcore names them."""
    inner = transport.engine.inner
    if not isinstance(inner, httpx.AsyncHTTPTransport):  # the threads' (``_sync.threads``)
        inner = inner.sync  # type: ignore[attr-defined]
        assert isinstance(inner, httpx.HTTPTransport)
    pool = inner._pool
    return [c.info() for c in pool.connections if not (c.is_idle() or c.is_closed())]


def test_backup_wins_and_the_loser_leaves(backend: str) -> None:
    """Replica 0 takes 2 s; the backup to replica 1 wins; replica 0 sees the primary
    leave, and the winner's HedgeInfo is on the response."""
    slow = ReplicaConfig(latency=2.0)
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            response = client.get("/item", headers={"x-request-id": "r1"})
            answered = time.perf_counter()
            assert response.status_code == 200
            assert response.headers["x-replica"] == "1"
            info = response.extensions["hedge"]
            assert isinstance(info, HedgeInfo)
            assert (info.attempt, info.replica, info.attempts) == (2, svc.origins[1], 2)
            wait_for(lambda: svc.stats().replicas[0].abandoned == 1)
            left_after = time.perf_counter() - answered
        stats = svc.stats()
    assert [(v.replica, v.outcome, v.attempt) for v in stats.requests["r1"]] == [
        (0, "abandoned", "1"),
        (1, "completed", "2"),
    ]
    # The engine cancels the loser before it returns the winner; what is left is the
    # kernel's FIN and the server's loop, a few ms; 100 ms holds beside two burners,
    # as the async twin's bound (tests/reliability/test_faults_loopback.py).
    assert left_after < 0.100


def test_a_post_is_never_sent_twice(backend: str) -> None:
    """A POST to a slow replica is sent once: no backup, whatever the delay."""
    slow = ReplicaConfig(latency=0.3)
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=0.010,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            response = client.post("/write", content=b"x", headers={"x-request-id": "w"})
            streamed = client.post(
                "/write", content=iter([b"a", b"b"]), headers={"x-request-id": "s"}
            )
        stats = svc.stats()
    assert (response.status_code, streamed.status_code) == (200, 200)
    assert response.extensions["hedge"].attempts == 1
    assert [v.replica for v in stats.requests["w"]] == [0]
    assert [v.replica for v in stats.requests["s"]] == [0]
    assert stats.received == 2


def test_the_winners_large_body_arrives_whole(backend: str) -> None:
    """A backup streaming 10 MB wins: every byte read from the caller's thread, in
    order; the loser's replica sees it leave."""
    overrides = {0: ReplicaConfig(latency=2.0)}
    with FakeService(replicas=2, latency=0.005, replica_overrides=overrides) as svc:
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        digest = hashlib.sha256()
        received = 0
        with (
            httpx.Client(transport=transport, base_url=SERVICE) as client,
            client.stream("GET", f"/large?bytes={TEN_MB}") as response,
        ):
            assert response.headers["x-replica"] == "1"
            for chunk in response.iter_raw():
                digest.update(chunk)
                received += len(chunk)
            wait_for(lambda: svc.stats().replicas[0].abandoned == 1)
            assert busy_connections(transport) == []
        stats = svc.stats()
    assert (received, digest.hexdigest()) == (TEN_MB, large_body_sha256(TEN_MB))
    assert (stats.replicas[0].abandoned, stats.replicas[1].completed) == (1, 1)


def test_a_body_left_unread_gives_its_connection_back(backend: str) -> None:
    """A streamed response closed before its end closes its connection on the loop: no
    busy slot, and the next request goes through a one-connection pool."""
    with FakeService(replicas=2, latency=0.002) as svc:
        inner = inner_for(backend, limits=httpx.Limits(max_connections=1))
        transport = SyncHedgedTransport(
            inner, backend=backend, replicas={SERVICE: svc.origins}, metrics=False
        )
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            with client.stream("GET", f"/large?bytes={TEN_MB}") as response:
                first = next(response.iter_raw())
            assert first
            assert busy_connections(transport) == []
            assert client.get("/item").status_code == 200


def test_every_replica_refusing_raises_connect_error_itself(backend: str) -> None:
    """Every replica refusing: the caller gets httpx.ConnectError itself, not a group."""
    with FakeService(replicas=3, fault=Down()) as svc:
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=1.0,
            max_hedges=2,
            budget=generous(),
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            for index in range(3):
                with pytest.raises(httpx.ConnectError) as caught:
                    client.get(f"/{index}")
                assert type(caught.value) is httpx.ConnectError


def test_the_callers_timeout_raises_read_timeout_and_both_attempts_leave(backend: str) -> None:
    """Both replicas take 2 s, the caller's read timeout is 0.3 s: httpx.ReadTimeout, as
    plain httpx.Client raises, and every attempt leaves its replica."""
    with FakeService(replicas=2, latency=2.0) as svc:
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=0.3) as client:
            start = time.perf_counter()
            with pytest.raises(httpx.ReadTimeout) as caught:
                client.get("/item", headers={"x-request-id": "t"})
            waited = time.perf_counter() - start
            assert type(caught.value) is httpx.ReadTimeout
            assert str(caught.value) == "timed out"  # plain httpx.Client's message
            # Every attempt sent leaves: two, or one when a busy machine's event-loop
            # lag held the backup back (docs/choosing-the-delay.md), as beside burners.
            wait_for(lambda: 0 < svc.stats().received == svc.stats().abandoned)
            assert busy_connections(transport) == []
        stats = svc.stats()
    assert [v.outcome for v in stats.requests["t"]] in (["abandoned"], ["abandoned"] * 2)
    # 0.3 s and the loop's hand-over; 1 s of slack holds beside two CPU burners, and
    # stays well below the 2 s the replicas would take.
    assert 0.3 <= waited < 1.3


def test_many_threads_with_timeouts_at_random_instants_leave_nothing(backend: str) -> None:
    """Eight threads share one client; each request has a timeout drawn at random
    around the lab latencies, so attempts end at every stage. Afterwards: no busy pool
    slot, no request in flight at any replica, and after close() no thread of ours."""
    threads_before = set(threading.enumerate())
    with FakeService(replicas=3, latency="lab", seed=11) as svc:
        inner = inner_for(backend, limits=httpx.Limits(max_connections=6))
        records: list[RequestRecord] = []
        transport = SyncHedgedTransport(
            inner,
            backend=backend,
            replicas={SERVICE: svc.origins},
            delay=0.012,  # the lab median: about a third of the requests hedge
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        threads_with_service = set(threading.enumerate())
        outcomes: dict[str, int] = {"ok": 0, "timeout": 0}
        lock = threading.Lock()
        client = httpx.Client(transport=transport, base_url=SERVICE)

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(40):
                timeout = rng.uniform(0.002, 0.060)
                try:
                    client.get("/item", timeout=timeout).raise_for_status()
                    kind = "ok"
                except httpx.TimeoutException:
                    kind = "timeout"
                with lock:
                    outcomes[kind] += 1

        workers = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        # A caller's timeout returns at once; its attempts unwind on the loop thread
        # just after (a loaded machine may take a while): then nothing is left busy.
        wait_for(lambda: busy_connections(transport) == [])
        wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0)
        assert client.get("/item", timeout=5.0).status_code == 200
        client.close()
        # None of ours is left (other libraries' idle threads may end meanwhile).
        assert set(threading.enumerate()) <= threads_with_service
    assert set(threading.enumerate()) <= threads_before
    assert sum(outcomes.values()) == 320
    # Timeouts from 2 to 60 ms against a law whose median is ~12 ms: both kinds occur
    # (under load more time out; neither count reaches 0 or 320).
    assert 0 < outcomes["timeout"] < 320
    assert len(records) == 321


def test_close_stops_what_is_in_flight_and_joins_the_loop_thread(backend: str) -> None:
    """A thread waits on a 5 s replica; close() from another thread: that request raises
    TransportClosedError, the loop thread is joined, a later request raises
    RuntimeError, and a second close() is a no-op."""
    with FakeService(replicas=2, latency=5.0) as svc:
        before = set(threading.enumerate())
        transport = SyncHedgedTransport(
            backend=backend, replicas={SERVICE: svc.origins}, metrics=False
        )
        client = httpx.Client(transport=transport, base_url=SERVICE, timeout=10.0)
        caught: list[BaseException] = []

        def waiting() -> None:
            try:
                client.get("/item")
            except BaseException as exc:
                caught.append(exc)

        thread = threading.Thread(target=waiting)
        thread.start()
        wait_for(lambda: svc.stats().received >= 1)
        start = time.perf_counter()
        client.close()
        thread.join(timeout=5.0)
        # The loop cancels the attempt and closes its connection: milliseconds; 2 s is
        # far above what two CPU burners add, far below the replica's 5 s.
        assert time.perf_counter() - start < 2.0
        assert [type(exc) for exc in caught] == [TransportClosedError]
        assert set(threading.enumerate()) == before
        wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0)
        with pytest.raises(RuntimeError, match=r"^the SyncHedgedTransport is closed"):
            transport.handle_request(httpx.Request("GET", f"{SERVICE}/item"))
        transport.close()


def test_http2_losers_are_reset_and_their_neighbours_go_on() -> None:
    """h2c under httpx.Client, 4 threads sharing one client: every loser's stream is
    reset (its replica sees it leave) while the other streams on the same connection
    answer whole; one connection per replica stays open, nothing left in flight."""
    slow_sometimes = ReplicaConfig(latency="pauses:service=0.005,pause=0.5,p=0.3")
    records: list[RequestRecord] = []
    with FakeService(
        replicas=2, http2=True, latency=0.005, replica_overrides={0: slow_sometimes}, seed=11
    ) as svc:
        inner = httpx.AsyncHTTPTransport(http1=False, http2=True)
        transport = SyncHedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        failures: list[BaseException] = []
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=10.0) as client:

            def worker(w: int) -> None:
                try:
                    for i in range(10):
                        rid = f"{w}-{i}"
                        response = client.get(f"/{rid}", headers={"x-request-id": rid})
                        assert response.status_code == 200
                        assert response.http_version == "HTTP/2"
                        assert response.json()["request_id"] == rid
                except BaseException as exc:  # reported in the caller's thread
                    failures.append(exc)

            threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30.0)
            assert failures == []
            # Multiplexed: one connection per replica, both still open and usable.
            assert sorted(c.info().split(", ")[1:3][0] for c in inner._pool.connections) == [
                "HTTP/2",
                "HTTP/2",
            ]
            assert busy_connections(transport) == []
            wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0)
        stats = svc.stats()
    assert (len(records), len(stats.requests), stats.failed) == (40, 40, 0)
    assert all(
        any(v.outcome == "completed" and v.status == 200 for v in visits)
        for visits in stats.requests.values()
    )
    # Every slow primary (a 0.5 s pause, p = 0.3 on replica 0, seeded) lost to its
    # backup: its stream was reset, so the replica saw the cancel and stopped (without
    # the reset it would complete). A loser answered as its winner did may complete.
    slow = [v for visits in stats.requests.values() for v in visits if v.latency >= 0.5]
    assert len(slow) >= 1  # 5-10 in runs beside two burners (not vacuous)
    assert {v.outcome for v in slow} == {"abandoned"}
    cancelled = sum(1 for r in records for a in r.attempts if a.outcome == "cancelled")
    assert cancelled >= len(slow)


def test_the_options_reach_the_engine(backend: str) -> None:
    """Hooks, the delay, the budget and the selector given to the sync transport are
    the engine's own objects (one set of policy objects, not a copy)."""
    budget = generous()
    selector = FirstReplica()
    records: list[RequestRecord] = []
    with FakeService(replicas=2, latency=0.002) as svc:
        origins = svc.origins
        transport = SyncHedgedTransport(
            backend=backend,
            replicas={SERVICE: origins},
            delay=0.5,
            budget=budget,
            selector=selector,
            hooks=[records.append],
            name="sync",
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            assert client.get("/item").headers["x-replica"] == "0"
    assert transport.budget is budget is transport.engine.budget
    assert transport.selector is selector
    assert transport.name == "sync"
    assert transport.delay_policy.hedge_delay("GET http://svc") == 0.5
    assert [r.attempts[0].replica for r in records] == [origins[0]]
    # The engine's lag and left-out samples, read from any thread.
    assert transport.event_loop_lag == transport.engine.event_loop_lag >= 0.0
    assert transport.samples_left_out == transport.engine.samples_left_out == {}


def test_trio_backend() -> None:
    """The loop thread can run trio: the backup still wins, the loser still leaves."""
    slow = ReplicaConfig(latency=2.0)
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
        transport = SyncHedgedTransport(
            replicas={SERVICE: svc.origins},
            backend="trio",
            delay=0.050,
            selector=FirstReplica(),
            budget=generous(),
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            response = client.get("/item")
            assert (response.headers["x-replica"], response.text.startswith("{")) == ("1", True)
            wait_for(lambda: svc.stats().replicas[0].abandoned == 1)
