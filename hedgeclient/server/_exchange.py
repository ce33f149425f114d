"""One request's ``receive`` and ``send`` as the handler sees them, watched for the
client going away.

ASGI servers tell an application that its client went away (the connection closed,
an HTTP/2 stream reset) only through ``receive()``, which returns
``{"type": "http.disconnect"}``; a handler that is not reading never hears it. The
exchange reads for the handler: :data:`WATCH_AFTER` seconds after the request
started (a request answered sooner starts nothing, as a hedged request answered
before its hedge delay starts no backup), a *pump* task takes over the server's
``receive()``, queues what it reads for the handler's own ``receive()`` calls, and on
``http.disconnect`` before the response is complete cancels the handler (its
``_backend.Guard``). While the handler itself is inside ``receive()`` the pump waits, so only one
task reads from the server at a time (a disconnect then reaches the handler's own
read, and the exchange cancels it the same way).

The pump reads ahead at most :data:`READ_AHEAD` bytes of request body the handler has
not taken yet, so the server's flow control still holds; a handler that leaves a
larger body unread is not watched until it reads on.

A response is complete once its last message is handed to the server (the body with
``more_body`` false, the last trailers, or a ``pathsend``): a disconnect after that
cancels nothing. Sends after the client went away are dropped (there is no one to
send to), so a cancelled handler's cleanup may still call ``send``.

Strictly private.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, final

import anyio

from hedgeclient.server._backend import WATCH_AFTER, Loop

__all__ = ["READ_AHEAD", "WATCH_AFTER", "Exchange", "Message", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

READ_AHEAD = 65_536
"""Bytes of request body the pump reads ahead of the handler, at most."""


@final
class Exchange:
    """The handler's ``receive``/``send`` for one request. Strictly private.

    Args:
        receive: the server's ``receive``.
        send: the server's ``send``.
        cancel: cancels the handler; called when the client goes away before the
            response is complete.
        loop: the event loop's specifics.
    """

    __slots__ = (
        "_buffer",
        "_buffered",
        "_cancel",
        "_drained",
        "_ended",
        "_loop",
        "_pump_done",
        "_pump_scope",
        "_pump_wanted",
        "_readable",
        "_readers",
        "_receive",
        "_send",
        "_trailers",
        "_watched",
        "complete",
        "gone",
    )

    def __init__(
        self, receive: Receive, send: Send, cancel: Callable[[], None], loop: Loop
    ) -> None:
        self._receive = receive
        self._send = send
        self._cancel = cancel
        self._loop = loop
        self._ended = False
        self.gone = False  # the client went away before the response was complete
        self.complete = False
        self._trailers = False
        self._buffer: deque[Message] = deque()
        self._buffered = 0
        self._readers = 0
        self._pump_wanted = False
        self._pump_scope: anyio.CancelScope | None = None
        self._pump_done: anyio.Event | None = None
        self._readable: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        self._watched = False

    def watch(self) -> None:
        """Start watching :data:`WATCH_AFTER` seconds from now."""
        self._watched = True
        self._loop.watch(self)

    def stop(self) -> bool:
        """Stop watching (synchronous); True when a pump runs: then :meth:`wait_stopped`."""
        self._ended = True
        if self._watched:
            self._watched = False
            self._loop.unwatch(self)
        if self._pump_scope is None:
            return False
        self._pump_scope.cancel()
        return True

    async def wait_stopped(self) -> None:
        """Wait, shielded, until the pump has ended."""
        assert self._pump_done is not None
        with anyio.CancelScope(shield=True):
            await self._pump_done.wait()

    # -- the handler's side ---------------------------------------------------------

    async def receive(self) -> Message:
        """The handler's ``receive()``."""
        if self._pump_scope is None:  # nobody reads for us yet: read directly
            self._readers += 1
            try:
                message = await self._receive()
            finally:
                self._readers -= 1
            if message["type"] == "http.disconnect":
                self._disconnected()
            elif self._pump_wanted and not self._readers:
                self._start_pump()
            return message
        while not self._buffer:
            self._readable = anyio.Event()
            await self._readable.wait()
        message = self._buffer[0]
        if message["type"] != "http.disconnect":  # a disconnect is repeated to every read
            self._buffer.popleft()
            self._buffered -= len(message.get("body", b""))
            if self._drained is not None:
                self._drained.set()
        return message

    async def send(self, message: Message) -> None:
        """The handler's ``send()``: notes when the response is complete."""
        if self.gone:
            return
        kind = message["type"]
        if kind == "http.response.start":
            self._trailers = bool(message.get("trailers", False))
        elif kind == "http.response.body" and not self._trailers:
            self.complete = not message.get("more_body", False)
        elif kind == "http.response.trailers":
            self.complete = not message.get("more_trailers", False)
        elif kind == "http.response.pathsend":
            self.complete = True
        await self._send(message)

    # -- the pump ---------------------------------------------------------------------

    def due(self) -> None:
        """The watch starts (the loop's watch list calls this)."""
        self._watched = False
        if self._readers or self.complete:
            self._pump_wanted = not self.complete
        else:
            self._start_pump()

    def _start_pump(self) -> None:
        self._pump_wanted = False
        self._pump_scope = anyio.CancelScope()
        self._pump_done = anyio.Event()
        self._loop.spawn(self._pump)

    async def _pump(self) -> None:
        assert self._pump_scope is not None
        assert self._pump_done is not None
        try:
            with self._pump_scope:
                while True:
                    while self._buffered >= READ_AHEAD:
                        self._drained = anyio.Event()
                        await self._drained.wait()
                    message = await self._receive()
                    self._buffer.append(message)
                    self._buffered += len(message.get("body", b""))
                    if self._readable is not None:
                        self._readable.set()
                    if message["type"] == "http.disconnect":
                        self._disconnected()
                        return
        finally:
            self._pump_done.set()

    def _disconnected(self) -> None:
        if not (self.complete or self.gone or self._ended):
            self.gone = True
            self._cancel()
