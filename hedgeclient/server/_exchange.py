"""One request's ``receive`` and ``send`` as the handler sees them, watched for the
client going away.

ASGI servers tell an application that its client went away (the connection closed,
an HTTP/2 stream reset) only through ``receive()``, which returns
``{"type": "http.disconnect"}``; a handler that is not reading never hears it. The
exchange reads for the handler, but only for a request still running once the loop's
watch list reaches it (:data:`WATCH_AFTER`): a request answered sooner starts
nothing, as a hedged request answered before its hedge delay starts no backup. Then a
*pump* task takes over the server's ``receive()``, queues what it reads for the
handler's own ``receive()`` calls, and on ``http.disconnect`` before the response is
complete cancels the handler (the backend's :meth:`Exchange.cancel_handler`). While
the handler itself is inside ``receive()`` the pump waits, so only one task reads from
the server at a time (a disconnect then reaches the handler's own read, and the
exchange cancels it the same way).

The pump reads ahead at most :data:`READ_AHEAD` bytes of request body the handler has
not taken yet, so the server's flow control still holds; a handler that leaves a
larger body unread is not watched until it reads on.

A response is complete once its last message is handed to the server (the body with
``more_body`` false, the last trailers, or a ``pathsend``): a disconnect after that
cancels nothing. Sends after the client went away are dropped (there is no one to
send to), so a cancelled handler's cleanup may still call ``send``.

Under uvicorn the handler gets the server's own ``send``, unwrapped: uvicorn's
request cycle (the object whose bound method ``send`` is) already records that the
response is complete (``response_complete``, set as the last body is handed to it)
and already drops sends after the client went away, so the exchange reads the first
and needs no wrapper for the second (``_uvicorn.server_cycle``). Any other server, or a
``send`` wrapped by an outer middleware, gets the wrapper.

Cost: the watched path runs on every watched request, so what a request answered
before the watch starts pays is kept to one object, one dict insert and delete, and a
plain (not ``async``) ``send`` wrapper that hands back the server's own awaitable;
everything the pump needs is made only when the pump starts.

Strictly private.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import TYPE_CHECKING, Any, final

import anyio

from hedgeclient.server._uvicorn import response_complete, server_cycle

if TYPE_CHECKING:
    from hedgeclient.server._loops import Loop

__all__ = ["READ_AHEAD", "WATCH_AFTER", "Exchange", "Message", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

READ_AHEAD = 65_536
"""Bytes of request body the pump reads ahead of the handler, at most."""

WATCH_AFTER = 0.005
"""Seconds after a request starts by which the middleware watches it, at the latest:
the watch list ticks every half of it and starts the requests older than one tick,
so a request is watched from 2.5 to 5 ms after it started."""


@final
class _Done:
    """An awaitable that is already done (a send dropped after the client left)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]  # an empty iterator: done at once


_DONE = _Done()


@final
class _Pump:
    """What the pump needs, made when it starts. Strictly private."""

    __slots__ = ("buffer", "buffered", "done", "drained", "readable", "scope")

    def __init__(self) -> None:
        self.buffer: deque[Message] = deque()
        self.buffered = 0
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.readable: anyio.Event | None = None
        self.drained: anyio.Event | None = None


class Exchange:
    """The handler's ``receive``/``send`` for one request. Strictly private.

    A backend subclass (``_backend``) adds :meth:`cancel_handler`, :meth:`caught` and
    :meth:`settle`.

    Args:
        receive: the server's ``receive``.
        send: the server's ``send``.
        loop: the event loop's watch list and detached tasks.
    """

    __slots__ = (
        "_due",
        "_loop",
        "_pump",
        "_pump_wanted",
        "_readers",
        "_receive",
        "_send",
        "_trailers",
        "busy",
        "cancelled",
        "complete",
        "cycle",
        "ended",
        "gone",
    )

    def __init__(self, receive: Receive, send: Send, loop: Loop) -> None:
        self._receive = receive
        self._send = send
        self._loop = loop
        self.ended = self.gone = self.complete = self.cancelled = self.busy = False
        self._trailers = self._pump_wanted = False
        self._readers = 0
        self._pump: _Pump | None = None
        self.cycle = server_cycle(send)  # not None: hand the handler ``send`` itself
        self._due = loop.watch(self)

    # -- the backend's part -----------------------------------------------------------
    # The cancellation is armed as the exchange is made, in the handler's task; the
    # middleware then awaits the handler as::
    #
    #     try:
    #         handler_send = send if exchange.cycle is not None else exchange.send
    #         await app(scope, exchange.receive, handler_send)
    #     except BaseException as exc:
    #         if not exchange.caught(exc):
    #             raise
    #     finally:
    #         if exchange.stop():
    #             await exchange.finish()
    #
    # (no coroutine of its own, no cancel scope on asyncio; ``busy`` is set once a pump
    # runs or a cancellation is pending, and on trio).

    def cancel_handler(self) -> None:
        """Cancel the handler (synchronous; from any task of the loop)."""
        raise NotImplementedError  # pragma: no cover - every backend's subclass has one

    def caught(self, exc: BaseException) -> bool:
        """The handler raised ``exc``: True when it is this exchange's cancellation,
        to be swallowed (``cancelled`` is then true); any other propagates. Sets
        ``ended``."""
        raise NotImplementedError  # pragma: no cover - every backend's subclass has one

    def settle(self) -> None:
        """Disarm the cancellation once the handler returned (idempotent)."""
        raise NotImplementedError  # pragma: no cover - every backend's subclass has one

    # -- the middleware's part --------------------------------------------------------

    def stop(self) -> bool:
        """The handler returned: stop watching (synchronous). True when ``busy``: then
        await :meth:`finish`."""
        self.ended = True
        self._due.pop(self, None)  # the watch list's own dict: Loop.unwatch, inlined
        return self.busy

    async def finish(self) -> None:
        """After :meth:`stop` returned True: disarm the
        cancellation, stop the pump and wait (shielded) until it has ended."""
        self.busy = False
        self.settle()
        pump = self._pump
        if pump is not None:
            pump.scope.cancel()
            with anyio.CancelScope(shield=True):
                await pump.done.wait()

    # -- the handler's side ---------------------------------------------------------

    async def receive(self) -> Message:
        """The handler's ``receive()``."""
        pump = self._pump
        if pump is None:  # nobody reads for us yet: read directly
            self._readers += 1
            try:
                message = await self._receive()
            finally:
                self._readers -= 1
            if message["type"] == "http.disconnect":
                self._disconnected()
            elif self._pump_wanted and not self._readers and not self._complete():
                self._start_pump()
            return message
        while not pump.buffer:
            pump.readable = anyio.Event()
            await pump.readable.wait()
        message = pump.buffer[0]
        if message["type"] != "http.disconnect":  # a disconnect is repeated to every read
            pump.buffer.popleft()
            pump.buffered -= len(message.get("body", b""))
            if pump.drained is not None:
                pump.drained.set()
        return message

    def send(self, message: Message) -> Awaitable[None]:
        """The handler's ``send()``: notes when the response is complete, and hands back
        the server's ``send(message)`` to await (no coroutine of its own)."""
        if self.gone:
            return _DONE
        kind = message["type"]
        if kind == "http.response.body":
            if not self._trailers:
                self.complete = not message.get("more_body", False)
        elif kind == "http.response.start":
            self._trailers = bool(message.get("trailers", False))
        elif kind == "http.response.trailers":
            self.complete = not message.get("more_trailers", False)
        elif kind == "http.response.pathsend":
            self.complete = True
        return self._send(message)

    def _complete(self) -> bool:
        cycle = self.cycle
        return self.complete or (cycle is not None and response_complete(cycle))

    # -- the pump ---------------------------------------------------------------------

    def due(self) -> None:
        """The watch starts (the loop's watch list calls this)."""
        if self.ended:
            return
        complete = self._complete()
        if self._readers or complete:
            self._pump_wanted = not complete
        else:
            self._start_pump()

    def _start_pump(self) -> None:
        self._pump_wanted = False
        if self.ended or self._pump is not None:
            return
        self._pump = _Pump()
        self.busy = True
        self._loop.spawn(self._run_pump)

    async def _run_pump(self) -> None:
        pump = self._pump
        assert pump is not None
        try:
            with pump.scope:
                while True:
                    while pump.buffered >= READ_AHEAD:
                        pump.drained = anyio.Event()
                        await pump.drained.wait()
                    message = await self._receive()
                    pump.buffer.append(message)
                    pump.buffered += len(message.get("body", b""))
                    if pump.readable is not None:
                        pump.readable.set()
                    if message["type"] == "http.disconnect":
                        self._disconnected()
                        return
        finally:
            pump.done.set()

    def _disconnected(self) -> None:
        if not (self.gone or self.ended or self._complete()):
            self.gone = True
            self.cancel_handler()
