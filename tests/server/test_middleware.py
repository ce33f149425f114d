"""HedgeMiddleware in process, in virtual time: ASGI messages in and out, no server.

A scripted client (:class:`Client`) hands the middleware its ``receive`` and ``send``;
``disconnect_at`` makes ``receive()`` answer ``http.disconnect`` at that instant, as
uvicorn and hypercorn do when the connection closes or the stream is reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from hedgeclient.server import HedgeAttempt, HedgeMiddleware, current_attempt
from hedgeclient.server._middleware import _unqueued

pytestmark = pytest.mark.anyio

Message = dict[str, Any]


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


class Client:
    """One request's client side: its body, when it goes away, what it was sent."""

    def __init__(self, *, body: list[bytes] | None = None, disconnect_at: float | None = None):
        self.chunks = list(body or [b""])
        self.disconnect_at = disconnect_at
        self.sent: list[Message] = []
        self.done = anyio.Event()

    async def receive(self) -> Message:
        if self.chunks:
            chunk = self.chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}
        if self.disconnect_at is None:
            await self.done.wait()  # as servers do: a disconnect once the response is done
        else:
            await anyio.sleep_until(self.disconnect_at)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        body = message["type"] == "http.response.body"
        if body and not message.get("more_body", False):
            self.done.set()

    @property
    def status(self) -> int | None:
        starts = [m["status"] for m in self.sent if m["type"] == "http.response.start"]
        return starts[0] if starts else None


def scope(attempt: str | None = "2", path: str = "/x", **extra: Any) -> dict[str, Any]:
    headers = [(b"host", b"svc")]
    if attempt is not None:
        headers.append((b"hedge-attempt", attempt.encode()))
    return {"type": "http", "method": "GET", "path": path, "headers": headers, **extra}


def worker(log: list[tuple[str, float]], seconds: float) -> Callable[..., Any]:
    """An app that works ``seconds`` without reading, then answers 200; logs its life."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        log.append(("start", anyio.current_time()))
        try:
            await anyio.sleep(seconds)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            log.append(("done", anyio.current_time()))
        except anyio.get_cancelled_exc_class():
            log.append(("cancelled", anyio.current_time()))
            raise
        finally:
            log.append(("finally", anyio.current_time()))

    return app


async def test_disconnect_cancels_handler_and_cleanup_runs() -> None:
    """The client goes at 0.100 while the handler works for 1 s: it is cancelled at
    0.100, its ``finally`` runs, and it is counted as abandoned and cancelled."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(worker(log, 1.0), metrics=False)
    client = Client(disconnect_at=0.100)
    await middleware(scope(), client.receive, client.send)
    assert log == [("start", 0.0), ("cancelled", 0.100), ("finally", 0.100)]
    stats = middleware.statistics()
    assert (stats.backups, stats.abandoned, stats.abandoned_backups, stats.cancelled) == (
        1,
        1,
        1,
        1,
    )
    assert client.sent == []


async def test_handler_that_finishes_is_untouched() -> None:
    """A handler that answers at 0.050 sends its whole response; nothing is cancelled."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(worker(log, 0.050), metrics=False)
    client = Client()
    await middleware(scope(), client.receive, client.send)
    assert log == [("start", 0.0), ("done", 0.050), ("finally", 0.050)]
    assert client.status == 200
    assert [m.get("body") for m in client.sent] == [None, b"ok"]
    assert middleware.statistics().cancelled == 0


async def test_disconnect_after_complete_response_cancels_nothing() -> None:
    """The response is complete at 0.010; the handler's cleanup (0.010 to 0.200) then
    runs to its end although the client goes at 0.050."""
    log: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await anyio.sleep(0.010)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        await anyio.sleep(0.190)  # background work after the response
        log.append("after")

    middleware = HedgeMiddleware(app, metrics=False)
    await middleware(scope(), *_io(Client(disconnect_at=0.050)))
    assert log == ["after"]
    assert middleware.statistics().abandoned == 0


async def test_streaming_response_cancelled_mid_stream() -> None:
    """A response streamed one chunk per 0.020 s: the client goes at 0.050 after two
    chunks; the handler is cancelled there and no chunk is sent after it."""
    stopped: list[float] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await anyio.sleep(0.020)
                await send({"type": "http.response.body", "body": b"x", "more_body": True})
        finally:
            stopped.append(anyio.current_time())

    middleware = HedgeMiddleware(app, metrics=False)
    client = Client(disconnect_at=0.050)
    await middleware(scope(), client.receive, client.send)
    assert stopped == [0.050]
    assert [m.get("body") for m in client.sent] == [None, b"x", b"x"]
    assert middleware.statistics().cancelled == 1


async def test_handler_reading_the_body_sees_it_whole() -> None:
    """A handler that sleeps past the watch start then reads gets every chunk in order
    through the pump, then the disconnect, and is not cancelled before it answers."""
    got: list[Message] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await anyio.sleep(0.020)
        while True:
            message = await receive()
            got.append(dict(message))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = HedgeMiddleware(app, metrics=False)
    client = Client(body=[b"a", b"b", b"c"])
    await middleware(scope(), client.receive, client.send)
    assert [m["body"] for m in got] == [b"a", b"b", b"c"]
    assert client.status == 201


@pytest.mark.parametrize(
    ("cancel", "attempt", "cancelled"),
    [
        ("hedged", "1", True),
        ("hedged", None, False),
        ("all", None, True),
        ("none", "2", False),
    ],
)
async def test_which_requests_are_cancelled(
    cancel: Any, attempt: str | None, cancelled: bool
) -> None:
    """``cancel`` chooses: hedged (the attempt header), all, or none."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(worker(log, 0.200), cancel=cancel, metrics=False)
    await middleware(scope(attempt), *_io(Client(disconnect_at=0.050)))
    assert (("cancelled", 0.050) in log) is cancelled


async def test_attempt_reaches_the_handler() -> None:
    """The handler sees HedgeAttempt(2) through current_attempt() and scope state;
    without the header, None."""
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((current_attempt(), scope["state"]["hedge"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = HedgeMiddleware(app, metrics=False)
    await middleware(scope("2"), *_io(Client()))
    await middleware(scope(None), *_io(Client()))
    await middleware(scope("x"), *_io(Client()))  # not a number: as if absent
    assert seen == [(HedgeAttempt(2), HedgeAttempt(2)), (None, None), (None, None)]
    assert HedgeAttempt(2).kind == "backup"
    assert current_attempt() is None
    stats = middleware.statistics()
    assert (stats.primaries, stats.backups, stats.unmarked) == (0, 1, 2)


@pytest.mark.parametrize("cancel", ["hedged", "all", "none"])
async def test_attempt_not_inherited_by_a_request_started_from_send(cancel: Any) -> None:
    """uvicorn starts a pipelined request's task from the previous request's ``send``, so
    that task inherits the previous attempt's context: an unmarked request started so
    still sees ``current_attempt()`` None."""
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(current_attempt())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = HedgeMiddleware(app, cancel=cancel, metrics=False)
    async with anyio.create_task_group() as tg:
        client = Client()

        async def server_send(message: Message) -> None:
            await client.send(message)
            if message["type"] == "http.response.body":  # the next pipelined request
                tg.start_soon(middleware.__call__, scope(None), *_io(Client()))

        await middleware(scope("2"), client.receive, server_send)
    assert seen == [HedgeAttempt(2), None]


async def test_admission_backups_wait_behind_primaries() -> None:
    """One slot, busy until 0.100: a backup (0.001) and a primary (0.002) wait; the
    primary runs first (0.100 to 0.200), then the backup, which waited 0.199 s."""
    order: list[tuple[str, float, float]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        hedge = current_attempt()
        assert hedge is not None
        order.append((scope["path"], anyio.current_time(), hedge.queued))
        await anyio.sleep(0.100)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = HedgeMiddleware(app, max_concurrency=1, pushback_queue=None, metrics=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, scope("1", "/first"), *_io(Client()))
        await anyio.sleep(0.001)
        tg.start_soon(middleware, scope("2", "/backup"), *_io(Client()))
        await anyio.sleep(0.001)
        tg.start_soon(middleware, scope("1", "/primary"), *_io(Client()))
    assert [(p, round(t, 3)) for p, t, _ in order] == [
        ("/first", 0.0),
        ("/primary", 0.100),
        ("/backup", 0.200),
    ]
    assert order[2][2] == pytest.approx(0.199)
    assert middleware.statistics().queue_seconds == pytest.approx(0.098 + 0.199)


async def test_pushback_and_full_queue_answer_503_retry_after() -> None:
    """One slot busy and one request waiting: a backup is pushed back (pushback_queue=1)
    and, with max_queue=1, a primary is refused too; both get 503 with Retry-After: 2."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(
        worker(log, 0.100), max_concurrency=1, max_queue=1, pushback_queue=1,
        retry_after=2, metrics=False,
    )  # fmt: skip
    backup, primary = Client(), Client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, scope("1"), *_io(Client()))
        tg.start_soon(middleware, scope("1"), *_io(Client()))
        await anyio.sleep(0.001)
        await middleware(scope("2"), backup.receive, backup.send)
        await middleware(scope("1"), primary.receive, primary.send)
        assert anyio.current_time() == 0.001  # answered at once
    for refused in (backup, primary):
        assert refused.status == 503
        assert (b"retry-after", b"2") in refused.sent[0]["headers"]
    stats = middleware.statistics()
    assert (stats.rejected_pushback, stats.rejected_full) == (1, 1)


async def test_unqueued_paths_skip_the_admission_queue() -> None:
    """With the one slot busy and one request waiting, a scrape of /metrics (a path in
    ``unqueued_paths``) runs at once, and a request elsewhere still waits its turn."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(
        worker(log, 0.100), max_concurrency=1, unqueued_paths=["/metrics"], metrics=False
    )
    assert _unqueued("/metrics", middleware._unqueued)
    assert _unqueued("/metrics/app", middleware._unqueued)
    assert not _unqueued("/metricsx", middleware._unqueued)  # whole segments only
    scrape, other = Client(), Client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, scope("1"), *_io(Client()))
        await anyio.sleep(0.001)
        tg.start_soon(middleware, scope("1", path="/y"), other.receive, other.send)
        await anyio.sleep(0.001)
        await middleware(scope(None, path="/metrics/app"), scrape.receive, scrape.send)
        assert round(anyio.current_time(), 6) == 0.102  # its own 0.100 of work, no wait
    assert (scrape.status, other.status) == (200, 200)
    starts = [round(t, 6) for event, t in log if event == "start"]
    assert starts == [0.0, 0.002, 0.1]  # the busy one, the scrape at once, /y after the busy one


async def test_a_repeated_attempt_header_names_no_attempt() -> None:
    """Two attempt headers (in whatever order) read as none, as ``1, 2`` in one does:
    the request is unmarked, so the default ``cancel="hedged"`` leaves it alone."""
    seen: list[object] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["state"]["hedge"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = HedgeMiddleware(app, metrics=False)
    for values in ([b"1", b"2"], [b"2", b"1"], [b"1, 2"]):
        client = Client()
        request = scope(None)
        request["headers"] = [(b"hedge-attempt", v) for v in values]
        await middleware(request, client.receive, client.send)
    assert seen == [None, None, None]
    assert middleware.statistics().unmarked == 3


async def test_disconnect_while_queued_leaves_the_queue() -> None:
    """A request queued behind a busy slot whose client goes at 0.050 never runs."""
    log: list[tuple[str, float]] = []
    middleware = HedgeMiddleware(worker(log, 0.100), max_concurrency=1, metrics=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(middleware, scope("1"), *_io(Client()))
        await anyio.sleep(0.001)
        await middleware(scope("1"), *_io(Client(disconnect_at=0.050)))
    assert [e for e, _ in log] == ["start", "done", "finally"]
    stats = middleware.statistics()
    assert (stats.cancelled, stats.running, stats.queued) == (1, 0, 0)


def test_arguments_checked() -> None:
    """Bad arguments are refused early, naming the parameter."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    with pytest.raises(ValueError, match=r"^`cancel` must be 'hedged', 'all' or 'none'"):
        HedgeMiddleware(app, cancel="some", metrics=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^`max_concurrency` must be"):
        HedgeMiddleware(app, max_concurrency=0, metrics=False)
    with pytest.raises(
        ValueError, match=r"^`max_queue`, `pushback_queue` and `unqueued_paths` need"
    ):
        HedgeMiddleware(app, max_queue=3, metrics=False)
    with pytest.raises(
        ValueError, match=r"^`max_queue`, `pushback_queue` and `unqueued_paths` need"
    ):
        HedgeMiddleware(app, unqueued_paths=["/metrics"], metrics=False)
    for bad in ("metrics", "/"):  # "/" would turn the queue off
        with pytest.raises(ValueError, match=r"^`unqueued_paths` must hold absolute URL paths"):
            HedgeMiddleware(app, max_concurrency=1, unqueued_paths=[bad], metrics=False)
    with pytest.raises(TypeError, match=r"^`unqueued_paths` must be a collection of URL paths"):
        HedgeMiddleware(app, max_concurrency=1, unqueued_paths="/metrics", metrics=False)
    with pytest.raises(ValueError, match=r"^`retry_after` must be"):
        HedgeMiddleware(app, retry_after=-1, metrics=False)
    with pytest.raises(TypeError, match=r"^`app` must be an ASGI application"):
        HedgeMiddleware(None, metrics=False)


def _io(client: Client) -> tuple[Any, Any]:
    return client.receive, client.send
