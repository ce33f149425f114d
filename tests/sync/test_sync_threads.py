"""The engine on the callers' threads (``backend="threads"``): its pieces with real
threads and sockets (``_timer._threads``, ``_timer._thread_timer``), and the guarantees
only it has to keep (a loser blocked in a read or a connect, a signal in the caller's
thread, a hook that closes the transport).

Real clock and real threads: the tests assert outcomes; where a bound on time is
asserted, its comment says why it holds beside two CPU burners.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import random
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import httpcore
import httpx
import pytest

from hedgeclient import (
    HedgeBudget,
    PowerOfTwoChoices,
    RequestRecord,
    Route,
    SyncHedgedTransport,
)
from hedgeclient._timer import ThreadScope, ThreadTimer, drive, engine_thread, thread_state
from hedgeclient._timer._threads import ThreadFlag
from hedgeclient.testing import (
    BlackHole,
    FakeService,
    FirstReplica,
    Generation,
    Pareto,
    ReplicaConfig,
)

SERVICE = "http://svc"


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    start = time.perf_counter()
    while not condition():
        assert time.perf_counter() - start < timeout, "the condition never held"
        time.sleep(0.001)


def generous() -> HedgeBudget:
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def on_first_replica(origins: list[str]) -> SyncHedgedTransport:
    """Every primary to the first replica, a backup at 50 ms, a budget that never binds."""
    return SyncHedgedTransport(
        replicas={SERVICE: origins},
        delay=0.050,
        selector=FirstReplica(),
        budget=generous(),
        metrics=False,
    )


def ours() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("hedgeclient-"))


# -- the pieces ---------------------------------------------------------------------------


def test_drive_refuses_a_coroutine_that_suspends() -> None:
    """A coroutine that awaits an event loop cannot run on a thread: RuntimeError."""

    async def suspends() -> int:
        await asyncio.sleep(0)  # yields to a loop that is not there
        return 1

    async def blocks() -> int:
        return 2

    with pytest.raises(RuntimeError, match="awaited an event loop"):
        drive(suspends())
    assert drive(blocks()) == 2


def test_a_cancelled_scope_shuts_down_the_socket_its_thread_blocks_on() -> None:
    """A thread blocked in recv() inside a scope: cancel() from another thread ends the
    read at once (b"", the socket shut down), with nothing sent by the peer."""
    a, b = socket.socketpair()
    scope = ThreadScope()
    got: list[bytes] = []
    blocked = threading.Event()

    def reader() -> None:
        with scope:
            scope.sock = a
            blocked.set()
            got.append(a.recv(10))

    thread = threading.Thread(target=reader)
    thread.start()
    blocked.wait(5.0)
    time.sleep(0.01)  # (in recv() or about to be: a shut socket returns b"" either way)
    scope.cancel()
    thread.join(5.0)
    assert (got, scope.cancel_called, thread.is_alive()) == ([b""], True, False)
    a.close()
    b.close()


def test_a_flag_wakes_its_waiter_on_set_and_on_its_scopes_cancel() -> None:
    """A thread waiting on a flag lets go of the lock meanwhile; set() wakes it with
    True, a cancel of its scope with the cancellation."""
    lock = threading.Lock()
    outcomes: list[object] = []

    def waiter(flag: ThreadFlag, scope: ThreadScope) -> None:
        with lock, scope:
            try:
                outcomes.append(drive(flag.wait()))
            except asyncio.CancelledError:
                outcomes.append("cancelled")
            outcomes.append(lock.locked())  # held again on the way out

    for wake in ("set", "cancel"):
        flag, scope = ThreadFlag(lock), ThreadScope()
        thread = threading.Thread(target=waiter, args=(flag, scope))
        thread.start()
        wait_for(lambda: scope.waker is not None)  # noqa: B023 (this iteration's)
        with lock:  # the waiter let go of it
            flag.set() if wake == "set" else scope.cancel()
        thread.join(5.0)
    assert outcomes == [True, True, "cancelled", True]


def test_the_timer_thread_serves_a_deadline_under_the_lock_and_skips_a_cancelled_one() -> None:
    """Deadlines run on the engine's timer thread, holding the engine's lock, as the
    engine's thread (current_timer() finds the timer); a cancelled one never runs;
    close() joins the thread."""
    lock = threading.Lock()
    timer = ThreadTimer(lock, "unit")
    ran: list[tuple[str, str, bool, object]] = []
    done = threading.Event()

    def due(name: str) -> Callable[[], None]:
        def callback() -> None:
            ran.append((name, threading.current_thread().name, lock.locked(), thread_state.timer))
            done.set()

        return callback

    with lock:
        now = timer.time()
        cancelled = timer.call_at(now + 0.010, due("cancelled"))
        timer.call_at(now + 0.050, due("due"))
        cancelled.cancel()
    assert done.wait(5.0)
    timer.close()
    assert ran == [("due", "hedgeclient-timer-unit", True, timer)]
    assert "hedgeclient-timer-unit" not in ours()


def test_engine_thread_marks_the_thread_and_restores_it() -> None:
    """Inside engine_thread() the thread's timer is the engine's; after, as before."""
    timer = ThreadTimer(threading.Lock(), "mark")
    before = getattr(thread_state, "timer", None)
    with engine_thread(timer):
        assert thread_state.timer is timer
    assert getattr(thread_state, "timer", None) is before


# -- the guarantees -------------------------------------------------------------------------


def test_a_black_hole_primary_is_hedged_by_the_timer_thread() -> None:
    """The primary hangs in connect() (its replica's accept queue is full): no read to
    time the hedge by, so the timer thread sends the backup at the delay, which wins."""
    hole = ReplicaConfig(fault=BlackHole())
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: hole}) as svc:
        origins = svc.origins
        transport = on_first_replica(svc.origins)
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            start = time.perf_counter()
            response = client.get("/item")
            waited = time.perf_counter() - start
    assert (response.status_code, response.extensions["hedge"].attempts) == (200, 2)
    assert response.extensions["hedge"].replica == origins[1]
    # 50 ms and the backup's own few ms; 2 s holds beside two burners and stays far
    # below the 5 s connect timeout the primary would wait without a hedge.
    assert waited < 2.0


def test_a_signal_in_the_callers_thread_stops_both_attempts() -> None:
    """A KeyboardInterrupt raised by a signal handler while the caller's thread blocks
    in its primary's read: it propagates, and both attempts leave their replicas (the
    backup's socket shut down on its worker); nothing stays busy, no thread stays."""
    with FakeService(replicas=2, latency=5.0) as svc:
        transport = on_first_replica(svc.origins)
        client = httpx.Client(transport=transport, base_url=SERVICE, timeout=10.0)

        def interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)  # after the backup went (50 ms)
            with pytest.raises(KeyboardInterrupt):
                client.get("/item", headers={"x-request-id": "k"})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        wait_for(lambda: svc.stats().abandoned == 2)
        pool = transport.engine.inner.sync._pool  # type: ignore[attr-defined]
        assert [c.info() for c in pool.connections if not (c.is_idle() or c.is_closed())] == []
        client.close()
        stats = svc.stats()
    assert [v.outcome for v in stats.requests["k"]] == ["abandoned", "abandoned"]
    assert ours() == []


@pytest.mark.parametrize(
    ("call", "refusal"),
    [
        ("close", "SyncHedgedTransport.close() was called by code its engine runs (a hook)"),
        ("send", "a request through a SyncHedgedTransport from code its engine runs (a hook)"),
    ],
)
def test_code_the_engine_runs_may_neither_close_it_nor_send_through_it(
    call: str, refusal: str
) -> None:
    """A hook runs under the engine's lock: its close() or a request through the same
    transport (which would wait for that lock for ever) raise RuntimeError there;
    nothing is closed or sent, and the transport serves the next request."""
    seen: list[str] = []
    client: httpx.Client
    transport: SyncHedgedTransport

    def hook(record: RequestRecord) -> None:
        try:
            transport.close() if call == "close" else client.get("/nested")
        except RuntimeError as exc:
            seen.append(str(exc))

    with FakeService(replicas=2, latency=0.002) as svc:
        transport = SyncHedgedTransport(
            replicas={SERVICE: svc.origins}, hooks=[hook], metrics=False
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            assert client.get("/a").status_code == 200
            assert client.get("/b").status_code == 200
        received = svc.stats().received
    assert seen == [refusal] * 2
    assert received == 2


def test_the_policy_objects_see_one_thread_at_a_time() -> None:
    """Eight threads share one client on a law that hedges about a third of the
    requests: the selector's in-flight counts return to zero and every request is
    recorded once (the engine's state, guarded by its lock, stays whole)."""
    records: list[RequestRecord] = []
    selector = PowerOfTwoChoices(rng=random.Random(3))
    with FakeService(replicas=3, latency="lab", seed=5) as svc:
        transport = SyncHedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=0.012,
            selector=selector,
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=10.0) as client:

            def worker(seed: int) -> None:
                for i in range(25):
                    assert client.get(f"/{seed}-{i}").status_code == 200

            threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30.0)
            wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0)
            assert [selector.outstanding(o) for o in svc.origins] == [0, 0, 0]
    assert len(records) == 200
    hedged = sum(1 for r in records if len(r.attempts) > 1)
    assert 0 < hedged < 200  # both kinds occur (about a third hedged, more under load)
    assert ours() == []


# The dropped client's pooled socket is collected unclosed: the user's doing, warned of
# as plain httpx.Client's would be.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_transport_dropped_unclosed_leaves_no_thread() -> None:
    """A transport that sent requests (its timer thread started) and is dropped without
    close(): collected, and its timer thread ends (it looks at least once a second)."""
    with FakeService(replicas=2, latency=0.002) as svc:
        transport = SyncHedgedTransport(
            replicas={SERVICE: svc.origins}, delay=0.5, name="dropped", metrics=False
        )
        client = httpx.Client(transport=transport, base_url=SERVICE)
        assert client.get("/item").status_code == 200
        assert "hedgeclient-timer-dropped" in ours()
        collected = threading.Event()
        weakref.finalize(transport, collected.set)
        del client, transport
        gc.collect()
        assert collected.is_set()
        # IDLE_CHECK (1 s) and a thread's exit; 5 s holds beside two burners.
        wait_for(lambda: "hedgeclient-timer-dropped" not in ours(), timeout=5.0)


def test_streamed_races_on_the_first_byte_read_whole_winners() -> None:
    """Streamed completions decided on the first body byte (a heavy-tailed time to first
    token, up to two backups), 4 threads: each caller reads exactly its winner's text
    from its own thread, the losers are cut off, and no pool slot stays busy."""
    law = Pareto(scale=0.004, alpha=1.2, cap=0.5)
    generation = Generation(tokens_per_second=400, tokens=8)
    route = Route(method="POST", path="/v1/chat/completions", hedge=True, decide_on="first_byte")
    records: list[RequestRecord] = []
    with FakeService(replicas=3, latency=law, generation=generation, seed=17) as svc:
        transport = SyncHedgedTransport(
            replicas={"http://llm": svc.origins},
            routes=[route],
            delay=0.020,
            max_hedges=2,
            budget=generous(),
            hooks=[records.append],
            metrics=False,
        )
        texts: dict[str, tuple[str, str]] = {}
        with httpx.Client(transport=transport, base_url="http://llm", timeout=10.0) as client:

            def worker(first: int) -> None:
                for index in range(first, 60, 4):
                    rid = f"r{index}"
                    body: dict[str, Any] = {"model": "fake", "stream": True}
                    body["messages"] = [{"role": "user", "content": rid}]
                    with client.stream(
                        "POST", "/v1/chat/completions", json=body, headers={"x-request-id": rid}
                    ) as response:
                        assert response.status_code == 200
                        lines = list(response.iter_lines())
                    text = ""
                    for line in lines:
                        if line.startswith("data: {"):
                            choices = json.loads(line[6:])["choices"]
                            text += choices[0]["delta"].get("content", "") if choices else ""
                    texts[rid] = (str(response.extensions["hedge"].attempt), text)

            threads = [threading.Thread(target=worker, args=(f,)) for f in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60.0)
            wait_for(lambda: sum(r.in_flight for r in svc.stats().replicas) == 0, timeout=10.0)
            pool = transport.engine.inner.sync._pool  # type: ignore[attr-defined]
            assert [c.info() for c in pool.connections if not (c.is_idle() or c.is_closed())] == []
        stats = svc.stats()
    assert len(texts) == 60
    assert any(len(r.attempts) > 1 for r in records)  # the tail is heavy: some backups
    for rid, (won, text) in texts.items():
        visits = stats.visits(rid)
        (winner,) = [v for v in visits if v.attempt == won]
        assert winner.outcome == "completed"
        assert hashlib.sha256(text.encode()).hexdigest() == winner.text_sha256
        assert {v.outcome for v in visits if v is not winner} <= {"abandoned", "completed"}


def test_a_loser_queued_for_a_full_pool_leaves_the_queue_at_once() -> None:
    """A pool of one connection: each backup waits in the pool's queue while its primary
    holds the connection; the primary wins, and the backup leaves the queue at once,
    never sent (it had held the race until the pool timeout, 2 s here, each request:
    found by a new user's test)."""
    with FakeService(replicas=2, latency=0.050) as svc:
        inner = httpx.HTTPTransport(limits=httpx.Limits(max_connections=1))
        transport = SyncHedgedTransport(
            inner, replicas={SERVICE: svc.origins}, delay=0.010, budget=generous(), metrics=False
        )
        timeout = httpx.Timeout(5.0, pool=2.0)
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=timeout) as client:
            waits = []
            for index in range(3):
                start = time.perf_counter()
                response = client.get(f"/{index}")
                waits.append(time.perf_counter() - start)
                assert (response.status_code, response.extensions["hedge"].attempt) == (200, 1)
        received = svc.stats().received
    assert received == 3  # the queued backups were never sent
    # 50 ms each; 1 s holds beside two burners and stays far below the 2 s pool timeout.
    assert max(waits) < 1.0


def test_closing_a_connection_wakes_the_attempt_reading_it() -> None:
    """httpcore's sync pool may close a connection (as idle) on one thread while an
    attempt on another blocks reading it: the close shuts the socket down first, so the
    read ends at once rather than at its timeout, where no cancel could reach it (a new
    user's test saw a request hold its backup's answer for the 2 s read timeout)."""
    from hedgeclient._compat import sockets

    a, b = socket.socketpair()
    stream = sockets._WatchedStream(sockets._SyncStream(a))  # httpcore's own stream
    got: list[object] = []

    def reader() -> None:
        start = time.perf_counter()
        try:
            got.append(stream.read(10, timeout=5.0))
        except httpcore.ReadError as exc:
            got.append(type(exc))
        got.append(time.perf_counter() - start)

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.05)  # (blocked in recv, or about to be: a shut socket ends it either way)
    stream.close()
    thread.join(5.0)
    b.close()
    assert got[0] in (b"", httpcore.ReadError)
    assert got[1] < 2.0  # at once; 2 s holds beside two burners, far below the 5 s timeout
