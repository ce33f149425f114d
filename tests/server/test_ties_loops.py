"""One middleware on several event loops in turn (a test suite's loop per test, a
server restarted in process): tie messages go out on each, on asyncio and trio, also
after ``aclose()``; a message that cannot be sent never fails the request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import anyio
import trio

from hedgeclient.server import HedgeMiddleware, Ties

SECRET = b"0123456789abcdef0123456789abcdef"


class _Peer(BaseHTTPRequestHandler):
    """A leader's replica that has not seen the tie: answers every message ``unknown``
    (HTTP/1.0: the connection closes after each answer, so no loop leaves one open)."""

    received: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        _Peer.received.append(self.headers["hedge-tie"])
        body = b'{"result": "unknown"}'
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def peer() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Peer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _follower(app: HedgeMiddleware, twin: str, tie: str) -> Any:
    """A coroutine function sending one follower copy through ``app``; returns its status."""
    scope = {
        "type": "http", "method": "GET", "path": "/x",
        "headers": [(b"hedge-attempt", b"2"), (b"hedge-tie", tie.encode()),
                    (b"hedge-twin", twin.encode())],
    }  # fmt: skip

    async def run() -> int:
        sent: list[dict[str, Any]] = []
        given = False

        async def receive() -> dict[str, Any]:  # a client that never goes away
            nonlocal given
            if given:
                await anyio.sleep_forever()
            given = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        return int(sent[0]["status"])

    return run


def test_tie_messages_go_out_on_each_event_loop_in_turn() -> None:
    """asyncio, asyncio again, trio, then ``aclose()`` and asyncio: every follower asks
    its leader's replica (a real socket each time) and runs; none fails."""
    _Peer.received.clear()
    with peer() as url:
        app = HedgeMiddleware(_ok, ties=Ties(peers=[url], secret=SECRET), metrics=False)
        ties = [f"{n:032x}" for n in range(1, 5)]
        statuses = [
            asyncio.run(_follower(app, url, ties[0])()),
            asyncio.run(_follower(app, url, ties[1])()),
            trio.run(_follower(app, url, ties[2])),
        ]
        trio.run(app.aclose)
        statuses.append(asyncio.run(_follower(app, url, ties[3])()))
        asyncio.run(app.aclose())
    stats = app.statistics()
    assert statuses == [200, 200, 200, 200]
    assert _Peer.received == ties
    assert (stats.messages_sent, stats.messages_failed) == (4, 0)


def test_a_message_that_cannot_be_sent_lets_the_follower_run() -> None:
    """Whatever sending the message raises (here: its client closed on the loop under
    it), the follower runs and the failure is counted, never raised into the request."""
    with peer() as url:
        app = HedgeMiddleware(_ok, ties=Ties(peers=[url], secret=SECRET), metrics=False)

        async def main() -> int:
            status = await _follower(app, url, "a" * 32)()
            assert app._book is not None
            assert app._book._client is not None
            await app._book._client.aclose()  # closed, yet still the loop's client
            return await _follower(app, url, "b" * 32)() * 1000 + status

        assert asyncio.run(main()) == 200_200
    stats = app.statistics()
    assert (stats.messages_sent, stats.messages_failed) == (2, 1)
