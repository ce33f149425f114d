"""HedgeMiddleware under real servers on 127.0.0.1: uvicorn (HTTP/1.1) and hypercorn
(HTTP/1.1 and HTTP/2, on asyncio and trio), around a Starlette application.

A client that goes away is a raw socket closed mid-request (HTTP/1.1) or an HTTP/2
``RST_STREAM`` on a connection that stays open, so what the server sees is exactly
what a hedging client's cancelled loser looks like. Real clock: these tests assert
what happened and in what order; the one bound on time is a generous ceiling (the
100 ms target is measured by ``benchmarks/bench_server.py``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import h2.config
import h2.connection
import h2.events
import httpx
import pytest
import sniffio
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from hedgeclient.server import HedgeMiddleware

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CEILING = 5.0  # seconds: far above the ~1 ms a disconnect takes, for a loaded machine

SERVERS = [
    pytest.param("uvicorn", "h1", id="uvicorn-h1"),
    pytest.param("hypercorn", "h1", id="hypercorn-h1"),
    pytest.param("hypercorn", "h2", id="hypercorn-h2"),
]


class Log:
    """What the handlers did, and an event per entry for the test to wait on."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.changed = anyio.Event()

    def add(self, entry: str) -> None:
        self.entries.append(entry)
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, entry: str) -> None:
        with anyio.fail_after(CEILING):
            while entry not in self.entries:
                await self.changed.wait()


def application(log: Log) -> HedgeMiddleware:
    async def slow(request: Request) -> PlainTextResponse:
        log.add(f"start {request.state.hedge.number}")
        try:
            await anyio.sleep(30)
            return PlainTextResponse("late")
        except anyio.get_cancelled_exc_class():
            log.add("cancelled")
            raise
        finally:
            log.add("finally")

    async def fast(request: Request) -> PlainTextResponse:
        await anyio.sleep(0.010)  # past nothing: the watch starts at 5 ms
        await anyio.sleep(0.010)
        return PlainTextResponse(f"hello {request.state.hedge.number}")

    async def stream(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                for i in range(int(request.query_params.get("n", "1000"))):
                    yield f"{i}\n".encode()
                    await anyio.sleep(0.010)
            finally:
                log.add("stream finally")

        return StreamingResponse(chunks())

    async def later() -> None:
        try:
            await anyio.sleep(0.200)  # well past the watch start, the client gone
            log.add("background done")
        except anyio.get_cancelled_exc_class():
            log.add("background cancelled")
            raise

    async def background(request: Request) -> PlainTextResponse:
        return PlainTextResponse("sent", background=BackgroundTask(later))

    routes = [Route("/slow", slow), Route("/fast", fast), Route("/stream", stream)]
    routes.append(Route("/background", background))
    return HedgeMiddleware(Starlette(routes=routes), metrics=False)


@asynccontextmanager
async def serving(kind: str, app: Any) -> AsyncIterator[int]:
    """Serve ``app`` with ``kind`` on a free loopback port; yield the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    async with anyio.create_task_group() as tg:
        if kind == "uvicorn":
            import uvicorn

            config = uvicorn.Config(app, lifespan="off", log_config=None, log_level="warning")
            server = uvicorn.Server(config)
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            stop: Any = lambda: setattr(server, "should_exit", True)  # noqa: E731
        else:
            from hypercorn.config import Config

            config_h = Config()
            config_h.bind = [f"fd://{os.dup(sock.fileno())}"]
            config_h.accesslog = None
            config_h.graceful_timeout = 0.5
            sock.close()
            stopping = anyio.Event()
            if sniffio.current_async_library() == "trio":
                from hypercorn.trio import serve as serve_trio

                tg.start_soon(lambda: serve_trio(app, config_h, shutdown_trigger=stopping.wait))
            else:
                from hypercorn.asyncio import serve as serve_asyncio

                tg.start_soon(lambda: serve_asyncio(app, config_h, shutdown_trigger=stopping.wait))
            stop = stopping.set
        with anyio.fail_after(CEILING):
            while True:
                try:
                    probe = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.01)
                    continue
                await probe.aclose()
                break
        try:
            yield port
        finally:
            stop()
    if kind == "uvicorn":
        sock.close()


def backends_for(kind: str, backend: str) -> None:
    if kind == "uvicorn" and backend == "trio":
        pytest.skip("uvicorn runs on asyncio only")


async def leave_mid_request(port: int, protocol: str, log: Log) -> float:
    """Send GET /slow (attempt 2), wait until the handler started, then go away: close
    the connection (h1) or reset the stream (h2). Return when it went away."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    try:
        if protocol == "h1":
            await stream.send(b"GET /slow HTTP/1.1\r\nHost: svc\r\nHedge-Attempt: 2\r\n\r\n")
            await log.wait_for("start 2")
            await stream.aclose()
            return anyio.current_time()
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        headers = [(":method", "GET"), (":path", "/slow"), (":scheme", "http")]
        headers += [(":authority", "svc"), ("hedge-attempt", "2")]
        conn.send_headers(1, headers, end_stream=True)
        await stream.send(conn.data_to_send())
        await log.wait_for("start 2")
        conn.reset_stream(1)
        await stream.send(conn.data_to_send())
        left = anyio.current_time()
        await log.wait_for("finally")  # the connection stays open meanwhile
        return left
    finally:
        await stream.aclose()


@pytest.mark.parametrize(("kind", "protocol"), SERVERS)
async def test_disconnect_cancels_handler(kind: str, protocol: str, anyio_backend: Any) -> None:
    """A client that goes away mid-request gets its handler cancelled (its ``finally``
    runs), well before the handler's 30 s of work, and counted."""
    backends_for(kind, anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend)
    log = Log()
    app = application(log)
    async with serving(kind, app) as port:
        left = await leave_mid_request(port, protocol, log)
        await log.wait_for("finally")
        assert anyio.current_time() - left < CEILING
    assert log.entries == ["start 2", "cancelled", "finally"]
    stats = app.statistics()
    assert (stats.backups, stats.abandoned_backups, stats.cancelled) == (1, 1, 1)


@pytest.mark.parametrize(("kind", "protocol"), SERVERS)
async def test_normal_and_streamed_responses_untouched(
    kind: str, protocol: str, anyio_backend: Any
) -> None:
    """A handler that answers after 20 ms, and a response streamed in 20 chunks over
    200 ms, arrive whole; nothing is cancelled."""
    backends_for(kind, anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend)
    log = Log()
    app = application(log)
    async with serving(kind, app) as port:
        http2 = protocol == "h2"
        async with httpx.AsyncClient(http1=not http2, http2=http2, trust_env=False) as client:
            base = f"http://127.0.0.1:{port}"
            fast = await client.get(f"{base}/fast", headers={"Hedge-Attempt": "1"})
            streamed = await client.get(f"{base}/stream?n=20", headers={"Hedge-Attempt": "1"})
    assert fast.text == "hello 1"
    assert streamed.text == "".join(f"{i}\n" for i in range(20))
    assert fast.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    stats = app.statistics()
    assert (stats.primaries, stats.abandoned, stats.cancelled) == (2, 0, 0)


@pytest.mark.parametrize(("kind", "protocol"), SERVERS)
async def test_streaming_response_stopped_when_client_leaves(
    kind: str, protocol: str, anyio_backend: Any
) -> None:
    """A client that reads a few chunks of an endless stream and leaves: the stream's
    generator is stopped (its ``finally`` runs)."""
    backends_for(kind, anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend)
    log = Log()
    app = application(log)
    async with serving(kind, app) as port:
        await leave_mid_stream(port, protocol)
        await log.wait_for("stream finally")
    assert app.statistics().abandoned == 1


async def leave_mid_stream(port: int, protocol: str) -> None:
    """GET /stream (attempt 2); read until chunk ``3`` arrived, then go away."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    received = b""
    async with stream:
        if protocol == "h1":
            await stream.send(b"GET /stream HTTP/1.1\r\nHost: svc\r\nHedge-Attempt: 2\r\n\r\n")
            with anyio.fail_after(CEILING):
                while b"3\n" not in received:
                    received += await stream.receive()
            return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        headers = [(":method", "GET"), (":path", "/stream"), (":scheme", "http")]
        headers += [(":authority", "svc"), ("hedge-attempt", "2")]
        conn.send_headers(1, headers, end_stream=True)
        await stream.send(conn.data_to_send())
        with anyio.fail_after(CEILING):
            while b"3\n" not in received:
                for event in conn.receive_data(await stream.receive()):
                    if isinstance(event, h2.events.DataReceived):
                        received += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, 1)
                await stream.send(conn.data_to_send())
        conn.reset_stream(1)
        await stream.send(conn.data_to_send())
        await anyio.sleep(0.2)  # the connection stays open a moment: a stream reset only


@pytest.mark.parametrize(("kind", "protocol"), SERVERS)
async def test_work_after_a_complete_response_is_not_cancelled(
    kind: str, protocol: str, anyio_backend: Any
) -> None:
    """A response complete, then 200 ms of background work while the client goes
    away: the work runs to its end (the disconnect came after the response)."""
    backends_for(kind, anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend)
    log = Log()
    app = application(log)
    async with serving(kind, app) as port:
        http2 = protocol == "h2"
        async with httpx.AsyncClient(http1=not http2, http2=http2, trust_env=False) as client:
            response = await client.get(
                f"http://127.0.0.1:{port}/background", headers={"Hedge-Attempt": "2"}
            )
        await log.wait_for("background done")
    assert response.text == "sent"
    assert log.entries == ["background done"]
    stats = app.statistics()
    assert (stats.abandoned, stats.cancelled) == (0, 0)


# -- a write sent once is left alone (issue 23, BH-49) ----------------------------------

H1_SERVERS = [
    pytest.param("uvicorn", id="uvicorn-h1"),
    pytest.param("hypercorn", id="hypercorn-h1"),
]


def two_step_writes(log: Log) -> HedgeMiddleware:
    """A POST handler that applies a write in two steps, waiting between them until its
    client is gone (and a moment more, in which the middleware would cancel it)."""

    async def write(request: Request) -> PlainTextResponse:
        log.add("step 1")
        try:
            # Wait for the disconnect itself, so the client is gone before step 2 for
            # sure, then give the middleware its chance: its poll or watch runs every
            # 2.5 ms, and timers run in deadline order, so 200 ms is ample under load.
            while (await request.receive())["type"] != "http.disconnect":
                pass
            await anyio.sleep(0.200)
            log.add("step 2")
        except anyio.get_cancelled_exc_class():
            log.add("cancelled")
            raise
        return PlainTextResponse("written")

    return HedgeMiddleware(Starlette(routes=[Route("/write", write, methods=["POST"])]))


@pytest.mark.parametrize("kind", H1_SERVERS)
@pytest.mark.parametrize("client", ["plain", "hedged"])
async def test_post_sent_once_completes_when_its_client_times_out(
    kind: str, client: str, anyio_backend: Any
) -> None:
    """A POST whose caller times out between the handler's two write steps is not
    cancelled: both steps run behind hedgeclient, as behind plain httpx (BH-49)."""
    from hedgeclient import HedgedTransport

    backends_for(kind, anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend)
    log = Log()
    app = two_step_writes(log)
    async with serving(kind, app) as port:
        origin = f"http://127.0.0.1:{port}"
        transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(trust_env=False)
        base = origin
        if client == "hedged":  # both sides on their defaults
            transport = HedgedTransport(transport, replicas={"http://svc": [origin]}, metrics=False)
            base = "http://svc"
        timeout = httpx.Timeout(CEILING, read=0.3)  # the caller's own timeout
        async with httpx.AsyncClient(transport=transport, base_url=base, timeout=timeout) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.post("/write", content=b"x=1")
        with anyio.fail_after(CEILING):  # the handler's end, either way
            while not {"step 2", "cancelled"} & set(log.entries):
                await log.changed.wait()
    assert log.entries == ["step 1", "step 2"]
    stats = app.statistics()
    assert (stats.unmarked, stats.primaries, stats.cancelled) == (1, 0, 0)
