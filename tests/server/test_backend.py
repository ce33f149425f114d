"""The middleware's watched path on each event loop (``_backend``; uvicorn's poll,
``_poll``): asyncio cancels the request's own task and takes the cancellation back,
trio uses a native cancel scope. Every test runs on asyncio and on trio (uvicorn's on
asyncio), on the real clock with small delays: it asserts what happened, never how
long it took.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from hedgeclient.server import HedgeMiddleware
from hedgeclient.server._answers import BY_VALUE, parse_attempt
from hedgeclient.server._poll import poller_of
from hedgeclient.server._uvicorn import server_cycle

pytestmark = pytest.mark.anyio

CEILING = 5.0  # seconds: far above the few milliseconds each test takes, for a loaded machine


class Client:
    """One request's client: no body; goes away ``leave_after`` seconds in (or never)."""

    def __init__(self, leave_after: float | None = None) -> None:
        self.leave_after = leave_after
        self.sent: list[dict[str, Any]] = []
        self.done = anyio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.leave_after is None:
            await self.done.wait()
        else:
            await anyio.sleep(self.leave_after)
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.done.set()


def scope(attempt: str = "2") -> dict[str, Any]:
    headers = [(b"host", b"svc"), (b"hedge-attempt", attempt.encode())]
    return {"type": "http", "method": "GET", "path": "/x", "headers": headers}


async def test_disconnect_cancels_and_the_task_goes_on() -> None:
    """The client leaves 20 ms in while the handler works 30 s: the handler is
    cancelled, its ``finally`` runs, the middleware returns normally, and the task
    that called it is not left cancelled (its next ``await`` works)."""
    log: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        finally:
            log.append("finally")

    middleware = HedgeMiddleware(app, metrics=False)
    client = Client(leave_after=0.020)
    with anyio.fail_after(CEILING):
        await middleware(scope(), client.receive, client.send)
        await anyio.sleep(0.001)  # would raise if a cancellation were left pending
    log.append("after")
    assert log == ["finally", "after"]
    stats = middleware.statistics()
    assert (stats.abandoned, stats.cancelled) == (1, 1)


async def test_cancellation_from_outside_propagates() -> None:
    """A server that cancels the request (shutting down) while the handler works: the
    cancellation is not the middleware's, so it propagates; nothing counts as
    abandoned."""
    log: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        finally:
            log.append("finally")

    middleware = HedgeMiddleware(app, metrics=False)
    client = Client()
    with anyio.fail_after(CEILING):
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware.__call__, scope(), client.receive, client.send)
            await anyio.sleep(0.020)  # the watch has started: a pump reads for the handler
            tg.cancel_scope.cancel()
    assert log == ["finally"]
    assert middleware.statistics().abandoned == 0


async def test_handler_that_swallows_the_cancellation() -> None:
    """A handler that catches its cancellation and returns: the middleware returns
    normally and the calling task's next ``await`` is not cancelled."""
    log: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            log.append("swallowed")

    middleware = HedgeMiddleware(app, metrics=False)
    client = Client(leave_after=0.020)
    with anyio.fail_after(CEILING):
        await middleware(scope(), client.receive, client.send)
        await anyio.sleep(0.001)
    assert log == ["swallowed"]
    assert middleware.statistics().abandoned == 1


async def test_fast_requests_start_no_pump_and_finish_untouched() -> None:
    """200 requests answered at once, every one watched (``cancel="all"``): each gets
    its whole response, none is cancelled, and their watch ends with them."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = HedgeMiddleware(app, cancel="all", metrics=False)
    clients = [Client() for _ in range(200)]
    with anyio.fail_after(CEILING):
        for client in clients:
            await middleware(scope("1"), client.receive, client.send)
        await anyio.sleep(0.020)  # past the watch start: nothing left to watch
    assert all([m.get("body") for m in c.sent] == [None, b"ok"] for c in clients)
    stats = middleware.statistics()
    assert (stats.primaries, stats.abandoned, stats.cancelled) == (200, 0, 0)


@pytest.mark.parametrize("module", ["httptools_impl", "h11_impl"])
def test_uvicorn_cycle_recognised(module: str) -> None:
    """Under uvicorn (either HTTP/1.1 implementation) the handler gets the server's own
    ``send``: its request cycle records the response's completion; any other ``send``
    (a function, another object's method) is wrapped."""
    import importlib

    kind = importlib.import_module(f"uvicorn.protocols.http.{module}").RequestResponseCycle
    cycle = object.__new__(kind)
    cycle.response_complete = cycle.disconnected = False
    assert server_cycle(cycle.send) is cycle
    client = Client()
    assert server_cycle(client.send) is None


def uvicorn_cycle() -> Any:
    """A bare uvicorn request cycle: its ``send`` tells the middleware to poll it (the
    handlers below never call it); the test plays the connection by its flags."""
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    cycle = object.__new__(RequestResponseCycle)
    cycle.response_complete = cycle.disconnected = False
    return cycle


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio only
@pytest.mark.parametrize("swallow", [False, True])
async def test_uvicorn_request_polled_and_cancelled(swallow: bool) -> None:
    """Under uvicorn the request is polled: its connection lost 20 ms in (the cycle's
    ``disconnected`` flag), the handler is cancelled at the next poll, its ``finally``
    runs (or it swallows the cancellation), the middleware returns normally, and the
    calling task is not left cancelled."""
    log: list[str] = []
    cycle = uvicorn_cycle()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            log.append("cancelled")
            if not swallow:
                raise
        finally:
            log.append("finally")

    async def lose_connection() -> None:
        await anyio.sleep(0.020)
        cycle.disconnected = True

    middleware = HedgeMiddleware(app, metrics=False)
    with anyio.fail_after(CEILING):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lose_connection)
            await middleware(scope(), Client().receive, cycle.send)
        await anyio.sleep(0.001)  # would raise if a cancellation were left pending
    assert log == ["cancelled", "finally"]
    stats = middleware.statistics()
    assert (stats.abandoned, stats.cancelled) == (1, 0 if swallow else 1)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio only
async def test_uvicorn_request_outside_cancellation_propagates() -> None:
    """A polled request cancelled from outside (the server shutting down), its client
    still there: the cancellation propagates; nothing counts as abandoned."""
    log: list[str] = []
    cycle = uvicorn_cycle()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        finally:
            log.append("finally")

    middleware = HedgeMiddleware(app, metrics=False)
    with anyio.fail_after(CEILING):
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware.__call__, scope(), Client().receive, cycle.send)
            await anyio.sleep(0.020)
            tg.cancel_scope.cancel()
    assert log == ["finally"]
    assert middleware.statistics().abandoned == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio only
@pytest.mark.parametrize(
    ("complete", "abandoned"), [(False, 1), (True, 0)], ids=["before_complete", "after"]
)
async def test_uvicorn_client_gone_before_the_poll(complete: bool, abandoned: int) -> None:
    """A polled request whose connection is lost while the handler runs, the handler
    returning before any poll: abandoned (not cancelled) if its response was not
    complete, untouched if it was; nothing stays polled."""
    cycle = uvicorn_cycle()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        cycle.response_complete = complete
        cycle.disconnected = True

    middleware = HedgeMiddleware(app, metrics=False)
    await middleware(scope(), Client().receive, cycle.send)
    stats = middleware.statistics()
    assert (stats.abandoned, stats.cancelled) == (abandoned, 0)
    poller = poller_of(asyncio.get_running_loop())
    assert (poller.polled, poller.delivered) == ({}, set())


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio only
async def test_uvicorn_two_middlewares_polling_one_request() -> None:
    """Two middlewares around one uvicorn request, its connection lost 20 ms in: the
    inner one's handler is cancelled (counted there), the outer one counts it
    abandoned, the caller goes on, and nothing stays polled."""
    cycle = uvicorn_cycle()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await anyio.sleep(30)

    async def lose_connection() -> None:
        await anyio.sleep(0.020)
        cycle.disconnected = True

    inner = HedgeMiddleware(app, metrics=False)
    outer = HedgeMiddleware(inner, metrics=False)
    with anyio.fail_after(CEILING):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lose_connection)
            await outer(scope(), Client().receive, cycle.send)
        await anyio.sleep(0.001)  # would raise if a cancellation were left pending
    assert (inner.statistics().abandoned, inner.statistics().cancelled) == (1, 1)
    assert (outer.statistics().abandoned, outer.statistics().cancelled) == (1, 0)
    poller = poller_of(asyncio.get_running_loop())
    assert (poller.polled, poller.delivered) == ({}, set())


@pytest.mark.parametrize(
    ("value", "number"),
    [(b"1", 1), (b"8", 8), (b"9", 9), (b"999", 999), (b"01", 1), (b"0", None),
     (b"1000", None), (b"", None), (b"-1", None), (b"\xb9", None),
     (b"2 ", 2), (b"\t2", 2), (b" 12 ", 12), (b"1, 2", None), (b" ", None)],
)  # fmt: skip
def test_attempt_header_values(value: bytes, number: int | None) -> None:
    """The attempt header's value: 1 to 3 ASCII digits naming 1 and up, spaces and tabs
    around them allowed (some servers pass them on); anything else reads as no header."""
    found = BY_VALUE.get(value) or parse_attempt(value)
    assert (found.number if found else None) == number
