"""Raw ASGI helpers of the fake service: types, short answers, a trickled body, dropping
a connection.

Strictly private. Dropping needs the transport, which ASGI does not expose: uvicorn's
``send`` is a bound method of its request cycle, whose ``transport`` is used here
(a TCP RST is ``SO_LINGER`` 0 then ``abort()``). Hypercorn offers no such handle.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Literal, TypeVar

from hedgeclient.testing._faults import SlowBody
from hedgeclient.testing._stats import Outcome

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a TCP RST
Wake = Literal["due", "disconnect", "halt"]
Wait = Callable[["asyncio.Future[Message]", float], Awaitable[Wake]]
"""Waits until a loop-clock instant, a disconnect or a halt, and says which came first."""


class _BadRequest(Exception):
    """Strictly private: a special path with a bad argument (answered with 400)."""


_T = TypeVar("_T", int, float)


def _parse(raw: str, kind: type[_T], form: str) -> _T:
    """Return ``kind(raw)``; raise :class:`_BadRequest` naming ``form`` if it fails."""
    try:
        return kind(raw)
    except ValueError:
        msg = f"{form}: not a number: {raw!r}"
        raise _BadRequest(msg) from None


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a whole response at once."""
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _drop(
    send: Send, watcher: asyncio.Future[Message], *, reset: bool, started: bool
) -> bool:
    """Drop the connection: a TCP RST when ``reset``, else a close after pending data.

    Uses uvicorn's transport (the cycle behind ``send``). Hypercorn exposes none: if
    no response started, headers announcing one byte are sent, then the app returns
    and hypercorn ends the stream short (the client sees a protocol error).

    Returns:
        True if dropped; False if the client had gone already (the transport was
        closing), in which case its socket is left alone.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if not isinstance(transport, asyncio.Transport):
        if not started:
            headers = [(b"content-length", b"1")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        return True
    # Closing already: the client went away (uvicorn closes no connection while the app
    # runs) and its socket may be closed, but ``watcher`` has not seen it yet.
    gone = transport.is_closing()
    if not gone and reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # a socket the peer reset meanwhile
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        transport.abort()
    elif not gone:
        transport.close()
    # Let uvicorn see the disconnect before the app returns, so it logs no error.
    await asyncio.wait((watcher,), timeout=1.0)
    return not gone


def _forget(watcher: asyncio.Future[Message]) -> None:
    """Cancel the disconnect watcher, its exception (if any) retrieved."""
    if watcher.done() and not watcher.cancelled():
        watcher.exception()  # retrieved: never "Task exception was never retrieved"
    watcher.cancel()


async def _trickle(
    send: Send, watcher: asyncio.Future[Message], body: bytes, fault: SlowBody, wait: Wait
) -> Outcome:
    """Send ``body`` in ``fault.chunks`` pieces spread over ``fault.duration``."""
    start = asyncio.get_running_loop().time()
    step = -(-len(body) // fault.chunks) or 1
    for i in range(fault.chunks):
        wake = await wait(watcher, start + (i + 1) * fault.duration / fault.chunks)
        if wake == "disconnect":
            return "abandoned"
        if wake == "halt":
            dropped = await _drop(send, watcher, reset=True, started=True)
            return "failed" if dropped else "abandoned"
        piece = body[i * step : (i + 1) * step]
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
    return "completed"
