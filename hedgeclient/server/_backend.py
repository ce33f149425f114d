"""The event-loop specifics of the watched path outside uvicorn: asyncio or trio.

The middleware runs on every request of a server, so its watched path must cost as
few Python frames and objects as it can (every one shows on a hello world; the
figures are in ``docs/server.md``). anyio's portable cancel scope costs about as much
as the rest of a hello-world request on asyncio (it creates per-task state for each
new request task), and a timer per request costs a heap entry, so:

- a request to watch goes into its loop's watch list (``_loops``), which starts its
  watch 2.5 to 5 ms in (``_exchange``);
- on asyncio the exchange cancels the request's own task from a loop callback and
  takes that cancellation back when the handler returns (``Task.uncancel()`` on
  3.11+, so that a cancellation from elsewhere, such as a server shutting down, still
  propagates); no cancel scope, no task group;
- on trio it is a native ``trio.CancelScope`` (cheap there).

Under uvicorn the middleware polls uvicorn's request cycles instead (``_poll``).

Strictly private. Like ``hedgeclient._timer``, backend-specific (with ``_loops`` and
``_poll``).
"""

from __future__ import annotations

import sys
from asyncio import CancelledError
from asyncio.events import _get_running_loop
from typing import Any, cast, final

from hedgeclient.server._exchange import Exchange, Receive, Send
from hedgeclient.server._loops import LAST, AsyncioLoop, TrioLoop, asyncio_loop, trio_loop
from hedgeclient.server._poll import current_task
from hedgeclient.server._uvicorn import CYCLES, learn_cycle

__all__ = ["exchange"]

_UNCANCEL = sys.version_info >= (3, 11)  # Task.uncancel()


@final
class _AsyncioExchange(Exchange):
    """asyncio: cancels the request's own task (``task.cancel()`` from a loop callback,
    so never while the task runs), and takes the cancellation back when the handler
    returns (``uncancel()`` on 3.11+, so a cancellation from elsewhere propagates).
    Made by :func:`exchange` without ``__init__``."""

    __slots__ = ("_delivered", "_task")
    _delivered: bool
    _task: Any  # asyncio.Task

    def cancel_handler(self) -> None:
        if not self.ended:
            cast("AsyncioLoop", self._loop).call_soon(self._deliver)

    def _deliver(self) -> None:
        if not (self.ended or self._delivered):
            self._delivered = self.busy = True
            self._task.cancel()

    def caught(self, exc: BaseException) -> bool:
        self.ended = True
        if not self._delivered:
            return False
        self._delivered = False
        others = self._task.uncancel() if _UNCANCEL else 0
        if others or not isinstance(exc, CancelledError):
            return False
        self.cancelled = True
        return True

    def settle(self) -> None:  # delivered, and swallowed by the handler: take it back
        if self._delivered:
            self._delivered = False
            if _UNCANCEL:
                self._task.uncancel()


_new = object.__new__


def exchange(receive: Receive, send: Send) -> Exchange:
    """A new :class:`Exchange` for the current task's request, watched from now.

    On asyncio the object is filled in here rather than by ``__init__``: one Python
    frame less on every watched request.
    """
    loop = _get_running_loop()
    if loop is None:  # not asyncio: trio
        return _TrioExchange(receive, send, trio_loop())
    last = LAST
    watch: AsyncioLoop = last[1] if last[0] is loop else asyncio_loop(loop)
    made: _AsyncioExchange = _new(_AsyncioExchange)
    made._receive = receive
    made._send = send
    made._loop = watch
    made.ended = made.gone = made.complete = made.cancelled = made.busy = False
    made._trailers = made._pump_wanted = made._delivered = False
    made._readers = 0
    made._pump = None
    owner = getattr(send, "__self__", None)  # exchange.server_cycle(send), inlined
    if owner is None:
        made.cycle = None
    else:
        known = CYCLES.get(type(owner))
        made.cycle = owner if (learn_cycle(owner) if known is None else known) else None
    made._task = current_task(loop)
    due = made._due = watch.pending
    if not watch.armed:
        watch.arm()
    due[made] = watch.ticks
    return made


@final
class _TrioExchange(Exchange):
    """trio: a native cancel scope around the handler, entered as the exchange is made
    (in the handler's task) and exited by :meth:`caught` or :meth:`settle`."""

    __slots__ = ("_scope",)

    def __init__(self, receive: Receive, send: Send, loop: TrioLoop) -> None:
        super().__init__(receive, send, loop)
        import trio

        self._scope: trio.CancelScope | None = trio.CancelScope()
        self._scope.__enter__()
        self.busy = True  # the scope is left by caught() or settle()

    def cancel_handler(self) -> None:
        if not self.ended and self._scope is not None:
            self._scope.cancel()

    def caught(self, exc: BaseException) -> bool:
        self.ended = True
        scope, self._scope = self._scope, None
        if scope is None:  # pragma: no cover - left already
            return False
        swallowed = bool(scope.__exit__(type(exc), exc, exc.__traceback__))
        self.cancelled = scope.cancelled_caught
        return swallowed

    def settle(self) -> None:  # the handler returned: leave the scope
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.__exit__(None, None, None)
