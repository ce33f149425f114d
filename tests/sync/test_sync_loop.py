"""The hand-over between a caller's thread and a SyncHedgedTransport's loop thread
(``hedgeclient._sync.loop``): the caller's context variables reach the loop, a call
still on the loop when it stops gets ``RuntimeError`` (never a hang), a caller that
leaves cancels its task, and ``LoopThread.run`` returns a plain function's value."""

from __future__ import annotations

import contextvars
import gc
import threading
import time
import weakref
from collections.abc import Callable

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import SyncHedgedTransport
from hedgeclient._sync import loop as loop_module
from hedgeclient._sync.loop import Backend, LoopThread

BACKENDS: list[Backend] = ["asyncio", "trio"]
SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="unset")


def _never_forked(used: bool) -> str | None:
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_callers_context_variables_reach_its_request_on_the_loop(backend: Backend) -> None:
    """Four threads, each with its own value of a context variable: the inner transport,
    on the loop thread, sees each request's caller's value (an OpenTelemetry span
    current in the caller's thread is carried the same way)."""
    seen: dict[str, str] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.headers["x-caller"]] = SEEN.get()
        assert threading.current_thread().name == "hedgeclient-loop-ctx"
        return httpx.Response(200)

    transport = SyncHedgedTransport(
        httpx.MockTransport(handler), name="ctx", backend=backend, metrics=False
    )
    with httpx.Client(transport=transport) as client:

        def caller(name: str) -> None:
            SEEN.set(name)
            client.get("http://svc/x", headers={"x-caller": name}).raise_for_status()

        threads = [threading.Thread(target=caller, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert seen == {"t0": "t0", "t1": "t1", "t2": "t2", "t3": "t3"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_still_on_the_loop_when_it_stops_gets_runtime_error(backend: Backend) -> None:
    """A call whose task outlives ``stop()``'s last step is failed with the closed
    transport's RuntimeError as the loop ends, not left waiting for ever."""
    loop = LoopThread(backend, "stops", _never_forked)
    started = threading.Event()
    outcome: list[BaseException] = []

    async def forever() -> None:
        started.set()
        await anyio.sleep_forever()

    def caller() -> None:
        try:
            loop.call(forever)
        except BaseException as exc:  # what the caller got is the test
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(10.0)

    async def nothing() -> None:
        pass

    loop.stop(nothing)
    thread.join(10.0)
    assert not thread.is_alive()
    assert [type(exc) for exc in outcome] == [RuntimeError]
    assert str(outcome[0]) == "the SyncHedgedTransport is closed: make a new one"
    with pytest.raises(RuntimeError, match="is closed: make a new one"):
        loop.call(nothing)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_caller_that_leaves_cancels_its_task_on_the_loop(backend: Backend) -> None:
    """An exception raised in the caller's thread while it waits (what SIGINT's
    KeyboardInterrupt does, test_sync_process) cancels the task on the loop: its
    ``finally`` runs there, and the exception reaches the caller unchanged."""
    loop = LoopThread(backend, "leaves", _never_forked)
    started, ended = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    class Leave(Exception):
        pass

    def leave_while_waiting(self: object, timeout: float | None = None) -> object:
        assert started.wait(10.0)  # the task runs on the loop
        raise Leave  # raised in the caller's thread while it waited

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop_module._Call, "result", leave_while_waiting)
        with pytest.raises(Leave):
            loop.call(forever)

    assert ended.wait(10.0)

    async def nothing() -> None:
        pass

    loop.stop(nothing)


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_returns_a_plain_functions_value_and_raises_its_exception(backend: Backend) -> None:
    """``LoopThread.run`` (a budget's ``try_retry`` from a caller's thread) runs on the
    loop thread, returns the value, and raises the function's own exception."""
    loop = LoopThread(backend, "runs", _never_forked)

    async def start() -> None:
        pass

    loop.call(start)
    assert loop.run(lambda: threading.current_thread().name) == "hedgeclient-loop-runs"

    def fails() -> None:
        msg = "from the loop"
        raise ValueError(msg)

    with pytest.raises(ValueError, match=r"^from the loop$"):
        loop.run(fails)
    loop.stop(start)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_on_the_loop_thread_is_refused_and_stops_nothing(backend: Backend) -> None:
    """``close()`` from a hook the transport runs (on its loop thread) could not join
    that thread: a RuntimeError saying so, the loop still serving, and a later stop
    from another thread ends it (a new user's hook left the thread running for ever)."""
    loop = LoopThread(backend, "self-stop", _never_forked)

    async def nothing() -> None:
        pass

    loop.call(nothing)
    with pytest.raises(RuntimeError, match="cannot be closed from its own loop thread"):
        loop.run(lambda: loop.stop(nothing))
    assert not loop.closed
    assert loop.run(lambda: 42) == 42
    loop.stop(nothing)
    assert loop.closed
    assert not [t for t in threading.enumerate() if t.name == "hedgeclient-loop-self-stop"]


def _loop_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"hedgeclient-loop-{name}"]


def _wait_until(done: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    return done()


def _used_unclosed(
    name: str, backend: Backend, metrics: bool | CollectorRegistry
) -> SyncHedgedTransport:
    """A transport named ``name`` that has sent one request, its client dropped unclosed."""
    transport = SyncHedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        name=name,
        backend=backend,
        metrics=metrics,
    )
    httpx.Client(transport=transport).get("http://svc/x").raise_for_status()
    return transport


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unclosed_transport_with_metrics_is_collected_and_its_thread_stops(
    backend: Backend,
) -> None:
    """Dropped without ``close()``, metrics on: the budget the gauges read holds its loop
    thread weakly, so the transport is collected and its loop thread stops (a new user's
    clients made per call each left a thread, a loop and a connection)."""
    registry = CollectorRegistry()

    def dropped() -> weakref.ref[SyncHedgedTransport]:
        transport = _used_unclosed("dropped", backend, metrics=registry)
        assert len(_loop_threads("dropped")) == 1
        return weakref.ref(transport)

    ref = dropped()
    gc.collect()
    assert ref() is None
    assert _wait_until(lambda: not _loop_threads("dropped"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_collecting_an_unclosed_transport_on_another_loop_thread_never_blocks_it(
    backend: Backend,
) -> None:
    """The garbage collector may collect an unclosed transport on another transport's
    loop thread (here, from a hook that runs there): its portal is stopped from a thread
    of its own, so that loop goes on (on trio it deadlocked for ever: anyio cannot stop
    a portal from inside a trio run, and then joined its thread)."""

    def dropped() -> None:
        _used_unclosed("collected", backend, metrics=False)

    collections: list[int] = []
    survivor = SyncHedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        name="survivor",
        backend=backend,
        metrics=False,
        hooks=[lambda record: collections.append(gc.collect())],
    )
    gc.disable()  # the collection happens in the hook, on the survivor's loop thread
    try:
        dropped()
        outcome: list[object] = []
        with httpx.Client(transport=survivor) as client:
            thread = threading.Thread(
                target=lambda: outcome.append(client.get("http://svc/y", timeout=2.0).status_code)
            )
            thread.start()
            thread.join(10.0)
            assert not thread.is_alive(), "the survivor's loop thread is blocked"
    finally:
        gc.enable()
    assert outcome == [200]
    assert len(collections) == 1
    assert _wait_until(lambda: not _loop_threads("collected"))
