"""The replica's ASGI app driven directly, for races a loopback test cannot pin down."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from hedgeclient.testing import CloseMidBody, ReplicaConfig, Reset
from hedgeclient.testing._app import _ReplicaApp
from hedgeclient.testing._asgi import Message
from hedgeclient.testing._config import Fault
from hedgeclient.testing._ledger import _Ledger


class _Transport(asyncio.Transport):
    """uvicorn's transport of a connection, open or already closing (the client left)."""

    def __init__(self, *, closing: bool) -> None:
        super().__init__()
        self.sock = socket.socket()
        if closing:  # as after connection_lost: the socket is closed, setsockopt fails
            self.sock.close()
        self.closing = closing
        self.aborted = self.closed = False

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default

    def abort(self) -> None:
        self.aborted = self.closing = True

    def close(self) -> None:
        self.closed = self.closing = True


class _Cycle:
    """uvicorn's request cycle: ``send`` is bound to it, and it holds the transport."""

    def __init__(self, transport: _Transport) -> None:
        self.transport = transport
        self.sent: list[Message] = []
        self._received = 0

    async def receive(self) -> Message:
        self._received += 1
        if self._received == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        # The disconnect reaches the app a moment after its latency is due.
        await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)


def _serve_one(fault: Fault, *, closing: bool) -> tuple[_Transport, _Ledger]:
    ledger = _Ledger(replicas=1, keep=10)
    config = ReplicaConfig(latency=0.0, slowness="server-owned", fault=fault)
    app = _ReplicaApp(index=0, config=config, ledger=ledger, seed=0, key_header=None)
    cycle = _Cycle(_Transport(closing=closing))
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": []}

    async def main() -> None:
        app.start()
        await app(scope, cycle.receive, cycle.send)

    try:
        asyncio.run(main())
    finally:
        cycle.transport.sock.close()
    return cycle.transport, ledger


@pytest.mark.parametrize("fault", [Reset(), CloseMidBody()], ids=["reset", "close-mid-body"])
def test_drop_after_the_client_left_is_abandoned(fault: Fault) -> None:
    """A connection the client already closed is left alone: no error, counted abandoned.

    This is the race of a Reset with a client that cancels as the latency ends: the
    socket was closed, so setting SO_LINGER on it raised ``OSError: [Errno 9]``.
    """
    transport, ledger = _serve_one(fault, closing=True)
    (replica,) = ledger.snapshot(["http://127.0.0.1:1"]).replicas
    assert (replica.abandoned, replica.failed, replica.in_flight) == (1, 0, 0)
    assert (transport.aborted, transport.closed) == (False, False)


@pytest.mark.parametrize(
    ("fault", "how"), [(Reset(), "aborted"), (CloseMidBody(), "closed")], ids=["reset", "close"]
)
def test_drop_of_a_live_connection_is_failed(fault: Fault, how: str) -> None:
    """With the client still there, the connection is dropped and the visit failed."""
    transport, ledger = _serve_one(fault, closing=False)
    (replica,) = ledger.snapshot(["http://127.0.0.1:1"]).replicas
    assert (replica.abandoned, replica.failed, replica.in_flight) == (0, 1, 0)
    assert getattr(transport, how)
