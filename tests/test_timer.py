"""The per-event-loop hedge timer (``hedgeclient._timer``), on each backend's own path.

On trio the timer is one system task per run serving a deadline heap; on asyncio one
loop handle (``call_at``) armed for the earliest deadline of such a heap, and
``create_task``. trio runs under a fresh
``MockClock(autojump_threshold=0)``, so its instants are exact; asyncio runs in real
time with deadlines of a few milliseconds, and only orders are asserted there.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import logging
import random
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
import sniffio

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient._timer import current_timer
from hedgeclient.testing import FirstReplica

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """asyncio in real time; trio with a fresh MockClock (virtual time)."""
    if request.param == "trio":
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return ("asyncio", {})


def virtual(backend: str) -> bool:
    """Whether instants are exact (trio's MockClock) rather than real."""
    return backend == "trio"


async def test_callbacks_run_in_deadline_order(anyio_backend_name: str) -> None:
    """Deadlines registered out of order run in deadline order, each at its deadline."""
    t0 = anyio.current_time()
    ran: list[tuple[str, float]] = []
    timer = current_timer()

    def note(name: str) -> None:
        ran.append((name, anyio.current_time() - t0))

    for name, offset in (("c", 0.030), ("a", 0.010), ("b", 0.020)):
        timer.call_at(t0 + offset, functools.partial(note, name))
    await anyio.sleep(0.050)
    assert [name for name, _ in ran] == ["a", "b", "c"]
    if virtual(anyio_backend_name):
        assert [round(at, 9) for _, at in ran] == [0.010, 0.020, 0.030]


async def test_many_random_deadlines_run_sorted(anyio_backend_name: str) -> None:
    """Fifty deadlines in a seeded random order run sorted, none twice, none lost."""
    rng = random.Random(15)
    t0 = anyio.current_time()
    offsets = [rng.randrange(1, 40) / 1000 for _ in range(50)]
    ran: list[tuple[float, float]] = []
    timer = current_timer()

    def note(offset: float) -> None:
        ran.append((offset, anyio.current_time() - t0))

    for offset in offsets:
        timer.call_at(t0 + offset, functools.partial(note, offset))
    await anyio.sleep(0.050)
    assert sorted(o for o, _ in ran) == sorted(offsets)
    assert [o for o, _ in ran] == sorted(o for o, _ in ran)
    if virtual(anyio_backend_name):
        assert all(round(at, 9) == o for o, at in ran)


async def test_cancelled_deadline_never_runs() -> None:
    """A cancelled registration (cancelled twice: idempotent) never runs; others do."""
    t0 = anyio.current_time()
    ran: list[str] = []
    timer = current_timer()
    first = timer.call_at(t0 + 0.010, lambda: ran.append("first"))
    timer.call_at(t0 + 0.020, lambda: ran.append("second"))
    first.cancel()
    first.cancel()
    await anyio.sleep(0.030)
    assert ran == ["second"]


async def test_cancelled_head_then_later_deadline() -> None:
    """Cancelling the earliest deadline leaves the timer serving the next one."""
    t0 = anyio.current_time()
    ran: list[str] = []
    timer = current_timer()
    head = timer.call_at(t0 + 0.005, lambda: ran.append("head"))
    head.cancel()
    timer.call_at(t0 + 0.010, lambda: ran.append("next"))
    await anyio.sleep(0.020)
    assert ran == ["next"]


async def test_earlier_deadline_wakes_a_sleeping_timer(anyio_backend_name: str) -> None:
    """The timer asleep until a deadline 10 s away runs a deadline registered later for
    t = 0.010 at 0.010, not at 10 s."""
    t0 = anyio.current_time()
    ran: list[tuple[str, float]] = []
    timer = current_timer()
    far = timer.call_at(t0 + 10.0, lambda: ran.append(("far", anyio.current_time() - t0)))
    await anyio.sleep(0.001)  # the timer is now asleep until t0 + 10
    timer.call_at(t0 + 0.010, lambda: ran.append(("near", anyio.current_time() - t0)))
    await anyio.sleep(0.019)
    assert [name for name, _ in ran] == ["near"]
    if virtual(anyio_backend_name):
        assert round(ran[0][1], 9) == 0.010
    far.cancel()


async def test_callback_may_register_the_next_deadline(anyio_backend_name: str) -> None:
    """A callback that registers another deadline (as a race re-arms its hedge) gets it."""
    t0 = anyio.current_time()
    ran: list[tuple[str, float]] = []
    timer = current_timer()

    both = anyio.Event()

    def second() -> None:
        ran.append(("second", anyio.current_time() - t0))
        both.set()

    def first() -> None:
        ran.append(("first", anyio.current_time() - t0))
        timer.call_at(t0 + 0.015, second)

    timer.call_at(t0 + 0.010, first)
    # Waited for, not assumed run within a fixed sleep: on a busy machine the first
    # wake-up may come late, and the second deadline (already due) runs a pass later.
    with anyio.fail_after(5):
        await both.wait()
    assert [name for name, _ in ran] == ["first", "second"]
    if virtual(anyio_backend_name):
        assert [round(at, 9) for _, at in ran] == [0.010, 0.015]


async def test_failing_callback_is_logged_and_the_timer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A callback raising is logged with its traceback; later deadlines still run."""
    t0 = anyio.current_time()
    ran: list[str] = []

    def boom() -> None:
        msg = "callback bug"
        raise RuntimeError(msg)

    timer = current_timer()
    timer.call_at(t0 + 0.010, boom)
    timer.call_at(t0 + 0.020, lambda: ran.append("after"))
    await anyio.sleep(0.030)
    timer.call_at(anyio.current_time() + 0.010, lambda: ran.append("later"))
    await anyio.sleep(0.020)
    assert ran == ["after", "later"]
    failures = [r for r in caplog.records if r.name == "hedgeclient"]
    assert [r.getMessage() for r in failures] == ["hedgeclient: starting a backup request failed"]
    assert failures[0].exc_info is not None
    assert str(failures[0].exc_info[1]) == "callback bug"


async def test_spawn_runs_in_the_given_context() -> None:
    """A spawned task sees the context variables of the context it is given, not the
    spawner's current values."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    context = contextvars.copy_context()
    var.set("changed after the copy")
    seen: list[str] = []
    done = anyio.Event()

    async def backup() -> None:
        seen.append(var.get())
        done.set()

    current_timer().spawn(context, backup)
    with anyio.fail_after(1):
        await done.wait()
    assert seen == ["caller"]
    assert var.get() == "changed after the copy"


async def test_guarded_spawn_runs_the_coroutine_itself(anyio_backend_name: str) -> None:
    """``guarded=True`` (``fn`` logs its own exceptions): the task's coroutine is ``fn()``'s
    own, with no wrapper, in the context it is given; unguarded, ``run_logged`` wraps it."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    context = contextvars.copy_context()
    var.set("changed after the copy")
    seen: list[tuple[str, str]] = []
    done = anyio.Event()

    async def backup() -> None:
        if anyio_backend_name == "trio":
            import trio

            coro: Any = trio.lowlevel.current_task().coro
        else:
            task = asyncio.current_task()
            assert task is not None
            coro = task.get_coro()
        seen.append((coro.cr_code.co_name, var.get()))
        if len(seen) == 2:
            done.set()

    current_timer().spawn(context, backup, guarded=True)
    current_timer().spawn(context, backup)
    with anyio.fail_after(1):
        await done.wait()
    assert sorted(seen) == [("backup", "caller"), ("run_logged", "caller")]  # in any order


async def test_spawned_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """A spawned task raising is logged; the event loop and the caller go on."""
    done = anyio.Event()

    async def backup() -> None:
        done.set()
        msg = "backup bug"
        raise RuntimeError(msg)

    current_timer().spawn(contextvars.copy_context(), backup)
    with anyio.fail_after(1):
        await done.wait()
    await anyio.sleep(0.001)  # let the task end
    failures = [r for r in caplog.records if r.name == "hedgeclient"]
    assert [r.getMessage() for r in failures] == ["hedgeclient: a backup task failed"]
    assert failures[0].exc_info is not None
    assert str(failures[0].exc_info[1]) == "backup bug"


async def test_one_timer_per_event_loop(anyio_backend_name: str) -> None:
    """The same timer serves every request of a loop; on trio, one system task."""
    timer = current_timer()
    assert current_timer() is timer
    t0 = anyio.current_time()
    handles = [timer.call_at(t0 + 1.0 + i / 100, lambda: None) for i in range(5)]
    await anyio.sleep(0.001)
    if anyio_backend_name == "trio":
        import trio

        root = trio.lowlevel.current_root_task()
        assert root is not None
        names = [t.name for n in root.child_nurseries for t in n.child_tasks]
        assert names.count("hedgeclient-timer") == 1
    for handle in handles:
        handle.cancel()


async def test_backup_attempt_sees_the_callers_context_variables() -> None:
    """A ContextVar set by the caller before ``client.get`` is seen by the backup's
    handler, which runs in the detached backup task."""
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")
    seen: list[tuple[str, str]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request_id.get("unset")))
        # a loses to the backup (sent at 10 ms) on any machine: it is cancelled first
        await anyio.sleep(10.0 if request.url.host == "a" else 0.001)
        return httpx.Response(200, text=request.url.host)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=0.010,
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=10, min_per_second=0),
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        request_id.set("req-42")
        response = await client.get("/")
    assert response.text == "b"
    assert seen == [("a", "req-42"), ("b", "req-42")]


# -- asyncio outside anyio's runner (plain asyncio.run, as uvicorn runs) -----------------


def run_plain_asyncio(main: Callable[[], Any]) -> Any:
    """``asyncio.run(main())`` in an empty context: no sniffio variable set by a runner
    (anyio.run and anyio's pytest plugin set one; asyncio.run and uvicorn do not)."""
    return contextvars.Context().run(asyncio.run, main())


def test_asyncio_callbacks_can_use_anyio_under_plain_asyncio_run() -> None:
    """Under plain ``asyncio.run`` a timer callback (outside any task) can call anyio:
    sniffio names asyncio there (regression: it raised, so no backup was ever sent)."""

    async def main() -> list[str]:
        seen: list[str] = []
        done = asyncio.Event()

        def callback() -> None:
            anyio.current_time()
            seen.append(sniffio.current_async_library())
            done.set()

        current_timer().call_at(asyncio.get_running_loop().time() + 0.001, callback)
        await asyncio.wait_for(done.wait(), 1)
        return seen

    assert run_plain_asyncio(main) == ["asyncio"]


def test_hedges_under_plain_asyncio_run(caplog: pytest.LogCaptureFixture) -> None:
    """Under plain ``asyncio.run`` with httpx's default 5 s timeout, a slow primary is
    hedged and the backup wins (regression: suppressed as ``selector_error``)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        # a loses to the backup (sent at 10 ms) on any machine: it is cancelled first
        await asyncio.sleep(10.0 if request.url.host == "a" else 0.001)
        return httpx.Response(200, text=request.url.host)

    async def main() -> tuple[str, Any]:
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={"http://svc": ["http://a", "http://b"]},
            delay=0.010,
            selector=FirstReplica(),
            budget=HedgeBudget(ratio=1.0, burst=10, min_per_second=0),
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            response = await client.get("/")
        return response.text, response.extensions["hedge"]

    text, info = run_plain_asyncio(main)
    assert (text, info.attempt, info.attempts, info.suppressed) == ("b", 2, 2, None)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_asyncio_timer_does_not_keep_its_loop_alive() -> None:
    """A loop that hedged is garbage once closed (regression: the per-loop registry's
    value held its key, so every loop that ever hedged stayed in memory)."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        current_timer().call_at(asyncio.get_running_loop().time() + 0.001, lambda: None)
        await asyncio.sleep(0.002)

    for _ in range(3):
        run_plain_asyncio(main)
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]


def test_only_asyncio_and_trio_have_a_timer() -> None:
    """Another async library (as sniffio names it) is refused with a clear RuntimeError."""

    def under_curio() -> None:
        sniffio.current_async_library_cvar.set("curio")
        current_timer()

    with pytest.raises(RuntimeError, match=r"^hedgeclient runs on asyncio or trio, not 'curio'$"):
        contextvars.Context().run(under_curio)


async def test_timer_hands_out_the_loops_clock_scopes_and_events(anyio_backend_name: str) -> None:
    """``time`` reads the clock ``anyio.current_time`` reads; ``cancel_scope()`` and
    ``primary_scope()`` stop anyio code inside them; ``event()`` wakes a waiter: the
    backend's own, looked up once."""
    timer = current_timer()
    before, now, after = anyio.current_time(), timer.time(), anyio.current_time()
    assert before <= now <= after
    with timer.cancel_scope() as scope:
        scope.cancel()
        await anyio.sleep(1.0)
        pytest.fail("the scope did not cancel its sleep")  # pragma: no cover - a failure
    with timer.primary_scope() as scope:
        scope.cancel()
        await anyio.sleep(1.0)
        pytest.fail("the scope did not cancel its sleep")  # pragma: no cover - a failure
    assert scope.cancelled_caught  # type: ignore[attr-defined]
    event = timer.event()

    async def set_later() -> None:
        await anyio.sleep(0.001)
        event.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(set_later)
        await event.wait()
    assert event.is_set()


def test_asyncio_deadlines_share_one_loop_handle() -> None:
    """Deadlines registered in time order arm one loop handle between them; an earlier
    one arms another; cancelled ones never run, and the heap does not keep them."""
    ran: list[str] = []
    armed: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        original = loop.call_at

        def counting(when: float, *args: Any, **kwargs: Any) -> Any:
            armed.append(when)
            return original(when, *args, **kwargs)

        loop.call_at = counting  # type: ignore[method-assign]
        timer = current_timer()
        t0 = loop.time()
        handles = [
            timer.call_at(t0 + 0.050 + i * 1e-4, lambda: ran.append("late")) for i in range(100)
        ]
        assert len(armed) == 1
        timer.call_at(t0 + 0.005, lambda: ran.append("early"))
        assert len(armed) == 2
        for handle in handles:
            handle.cancel()
        timer.call_at(t0 + 0.006, lambda: ran.append("next"))
        await asyncio.sleep(0.080)
        assert len(timer._heap) == 0  # type: ignore[attr-defined]

    run_plain_asyncio(main)
    assert ran == ["early", "next"]


def _deadline_seen(timer: Any) -> float:
    """The caller's effective deadline as the timer gives it to a race: read per request
    (``deadline()``), or when a backup is due from the primary's scope (``deadline_of``)."""
    if timer.deadline is not None:
        assert timer.deadline_of(None) == float("inf")  # nothing more to read later
        return float(timer.deadline())
    with timer.primary_scope() as scope:
        return float(timer.deadline_of(scope))


async def test_timer_deadline_is_anyios_effective_deadline(anyio_backend_name: str) -> None:
    """The timer gives a race what ``anyio.current_effective_deadline()`` gives: infinity
    outside any scope with one, the nearest enclosing deadline inside, and -infinity in a
    cancelled scope. On asyncio it is read when a backup is due, from the anyio scopes
    around the primary's: a deadline set after the request began is seen."""
    timer = current_timer()
    assert (timer.deadline is None) == (anyio_backend_name == "asyncio")
    assert _deadline_seen(timer) == anyio.current_effective_deadline() == float("inf")
    with anyio.move_on_after(5.0):
        with anyio.CancelScope(deadline=anyio.current_time() + 10.0):
            assert _deadline_seen(timer) == anyio.current_effective_deadline() < float("inf")
            await anyio.lowlevel.checkpoint()
        with anyio.CancelScope() as scope:
            scope.cancel()
            assert _deadline_seen(timer) == anyio.current_effective_deadline() == float("-inf")
            await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
    if anyio_backend_name == "asyncio":
        with anyio.CancelScope() as outer, timer.primary_scope() as primary:
            outer.deadline = anyio.current_time() + 3.0  # after the primary's scope began
            assert timer.deadline_of(primary) == outer.deadline
            with anyio.CancelScope(deadline=anyio.current_time() + 1.0):  # the attempt's own
                assert timer.deadline_of(primary) == outer.deadline  # not the caller's
                await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()


# -- asyncio: what a cross-task cancel costs (anyio >= 4.11 writes the task's repr) ----


class CountingReprTask(asyncio.Task[Any]):
    """A caller's task that counts how often its repr is built."""

    reprs = 0

    def __repr__(self) -> str:
        CountingReprTask.reprs += 1
        return "<counted>"


def test_asyncio_scope_cancelled_from_a_callers_task_builds_no_repr() -> None:
    """A timer scope cancelled from another task (a caller whose primary won cancels
    the backup driver's scope) is cancelled at once by ``Task.cancel()``: the
    canceller's repr is never built, and the scope's task is interrupted and goes on
    past the scope."""
    CountingReprTask.reprs = 0
    seen: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timer = current_timer()
        scope = timer.cancel_scope()

        async def driver() -> None:
            with scope:
                await asyncio.sleep(10.0)
                seen.append("not cancelled")  # pragma: no cover - a failure
            seen.append(("past the scope", scope.cancelled_caught))  # type: ignore[attr-defined]

        async def caller() -> None:
            await asyncio.sleep(0.001)  # the driver waits in its scope
            scope.cancel()
            seen.append(("cancel called at once", scope.cancel_called))  # type: ignore[attr-defined]

        waiting = loop.create_task(driver())
        await CountingReprTask(caller(), loop=loop)
        await asyncio.wait_for(waiting, 1.0)

    run_plain_asyncio(main)
    assert seen == [("cancel called at once", True), ("past the scope", True)]
    assert CountingReprTask.reprs == 0


def test_asyncio_detached_task_cancels_at_once_and_prints_cheaply() -> None:
    """A detached task (a backup driver whose backup won) cancels a timer scope at once
    (no loop pass); it is named "hedgeclient-backup" and its repr is ``object``'s."""
    seen: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timer = current_timer()
        scope = timer.cancel_scope()
        done = asyncio.Event()

        async def primary() -> None:
            with scope:
                await asyncio.sleep(10.0)
            seen.append(("primary cancelled", scope.cancelled_caught))  # type: ignore[attr-defined]

        async def backup() -> None:
            task = asyncio.current_task()
            assert task is not None
            seen.append(("named", task.get_name()))
            seen.append(("repr", repr(task).split(" at 0x")[0]))
            scope.cancel()
            seen.append(("cancel called at once", scope.cancel_called))  # type: ignore[attr-defined]
            done.set()

        waiting = loop.create_task(primary())
        await asyncio.sleep(0.001)
        timer.spawn(contextvars.copy_context(), backup)
        await asyncio.wait_for(done.wait(), 1.0)
        await asyncio.wait_for(waiting, 1.0)

    run_plain_asyncio(main)
    assert seen == [
        ("named", "hedgeclient-backup"),
        ("repr", "<hedgeclient._timer._asyncio._DetachedTask object"),
        ("cancel called at once", True),
        ("primary cancelled", True),
    ]


def test_asyncio_spawn_keeps_the_programs_task_factory() -> None:
    """A loop with its own task factory makes the detached task (named as ever)."""
    made: list[asyncio.Task[Any]] = []
    seen: list[tuple[bool, str]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            task = asyncio.Task(coro, loop=loop, **kwargs)
            made.append(task)
            return task

        loop.set_task_factory(factory)
        done = asyncio.Event()

        async def backup() -> None:
            task = asyncio.current_task()
            assert task is not None
            seen.append((task in made, task.get_name()))
            done.set()

        current_timer().spawn(contextvars.copy_context(), backup)
        await asyncio.wait_for(done.wait(), 1.0)

    run_plain_asyncio(main)
    assert seen == [(True, "hedgeclient-backup")]


def test_asyncio_time_is_the_loops_clock() -> None:
    """On asyncio's own loop the timer's clock is ``time.monotonic`` itself (what
    ``loop.time()`` returns, without a Python call); a loop reading another clock keeps
    it; ``now()`` reads the same."""
    import time

    from hedgeclient._timer import now

    class ShiftedLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + 1000.0

    async def main() -> tuple[object, list[float]]:
        timer = current_timer()
        loop = asyncio.get_running_loop()
        return timer.time, [loop.time(), timer.time(), now(), loop.time(), time.monotonic()]

    clock, (before, read, read_now, after, monotonic) = run_plain_asyncio(main)
    assert clock is time.monotonic
    assert before <= read <= read_now <= after <= monotonic  # one clock, read in turn
    loop = ShiftedLoop()
    try:
        clock, (before, read, read_now, after, monotonic) = contextvars.Context().run(
            loop.run_until_complete, main()
        )
    finally:
        loop.close()
    assert clock is not time.monotonic
    assert before <= read <= read_now <= after
    assert 999.0 < read - monotonic <= 1000.0  # the loop's own clock, not time.monotonic


def test_asyncio_race_reads_the_callers_deadline_when_a_backup_is_due() -> None:
    """On asyncio the caller's anyio deadline is read when the backup is due, from the
    scopes around the primary's: a deadline 0.1 s after a 0.2 s hedge delay leaves less
    than the delay, so the backup is suppressed as ``deadline`` and only one attempt
    leaves (a late timer, on a busy machine, only leaves less time still)."""
    records: list[Any] = []
    sent: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        await anyio.sleep(5.0)
        return httpx.Response(200)  # pragma: no cover - the caller leaves first

    async def main() -> None:
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={"http://svc": ["http://10.0.0.1:80", "http://10.0.0.2:80"]},
            delay=0.2,
            budget=HedgeBudget(ratio=1.0, burst=1e6, min_per_second=0),
            hooks=[records.append],
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport) as client:
            with anyio.move_on_after(0.3):
                await client.get("http://svc/x")

    anyio.run(main, backend="asyncio")
    assert len(sent) == 1
    assert [(r.suppressed, r.cancelled_by_caller) for r in records] == [("deadline", True)]


@pytest.mark.parametrize(
    ("max_hedges", "fails", "answer", "outcomes"),
    [
        (1, (), "1", ["won", "unsent"]),
        (2, ("1",), "3", ["failed", "unsent", "won"]),  # a backup at once, in the caller's task
        (2, ("1", "3"), "ReadError", ["failed", "unsent", "failed"]),
    ],
)
def test_asyncio_backup_task_cancelled_before_it_ran_ends_the_race(
    max_hedges: int, fails: tuple[str, ...], answer: str, outcomes: list[str]
) -> None:
    """A backups' task cancelled before its first step (a shutdown cancelling every task,
    ``asyncio.run``'s clean-up) never runs the race's code: the race still ends, its
    backup counted unsent (its token back, nothing left in flight), and goes on as if it
    had not been sent: the primary's answer, or after the primary's failure a backup at
    once. Before, the caller waited for it for ever (through its own timeout), and with
    a second backup allowed, for the orphan it still counted in flight."""
    records: list[Any] = []
    seen: list[object] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        number = request.headers["hedge-attempt"]
        await anyio.sleep(0.3 if number == "1" else 0.001)
        if number in fails:
            msg = "the replica's connection broke"
            raise httpx.ReadError(msg, request=request)
        return httpx.Response(200, text=number)

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            task = asyncio.Task(coro, loop=loop, **kwargs)
            if "_backups_from" in getattr(coro, "__qualname__", ""):  # the race's (3.11: no name)
                task.cancel()  # before its first step
            return task

        loop.set_task_factory(factory)
        budget = HedgeBudget(ratio=1.0, burst=10.0, min_per_second=0)
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={"http://svc": [f"http://10.0.0.{i}:80" for i in (1, 2, 3)]},
            delay=0.05,
            max_hedges=max_hedges,
            budget=budget,
            hooks=[records.append],
            metrics=False,
        )
        async with httpx.AsyncClient(transport=transport) as client:
            try:
                response = await asyncio.wait_for(client.get("http://svc/x"), 5.0)
                seen.append(response.text)
            except httpx.ReadError:
                seen.append("ReadError")
        stats = budget.statistics()
        seen.append((stats.backups_in_flight, stats.refunds))

    run_plain_asyncio(main)
    assert seen == [answer, (0, 1)]
    assert [a.outcome for a in records[0].attempts] == outcomes
