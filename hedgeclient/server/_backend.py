"""The event-loop specifics of the middleware's watched path: asyncio or trio.

The middleware runs on every request of a server, so its watched path must cost as
few Python frames and objects as it can (every one shows on a hello world; the
figures are in ``docs/server.md``). anyio's portable cancel scope costs
about as much as the rest of a hello-world request on asyncio (it creates per-task
state for each new request task), and a timer per request costs a heap entry, so:

- under uvicorn on asyncio a request is not read at all: uvicorn marks a request cycle
  whose connection was lost (``disconnected``), so the request's task goes into one
  dict per loop that one poll reads every :data:`POLL_EVERY` seconds, cancelling
  the tasks it finds (:func:`poll`; the handler keeps uvicorn's ``receive`` and
  ``send``);
- under other servers a request to watch goes into one dict per loop, swept by one tick every
  ``WATCH_AFTER / 2`` seconds while the dict is not empty; a sweep starts the watch of
  the requests that were already there at the previous sweep (so a request answered
  within 2.5 ms costs a dict insert and delete, no clock read and no timer);
- on asyncio the exchange cancels the request's own task from a loop callback and
  takes that cancellation back when the handler returns (``Task.uncancel()`` on
  3.11+, so that a cancellation from elsewhere, such as a server shutting down, still
  propagates); no cancel scope, no task group;
- on trio it is a native ``trio.CancelScope`` (cheap there), and ticks go through the
  hedge timer (``_timer``).

The running library is told apart by asyncio's running loop (``None`` under trio),
which costs less than ``sniffio``'s context variable lookup and its fallbacks.

Strictly private. Like ``hedgeclient._timer``, the only backend-specific module of
its package.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import weakref
from asyncio import CancelledError
from asyncio.events import _get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast, final

import anyio
import sniffio

from hedgeclient._timer import current_timer, per_trio_run
from hedgeclient.server._exchange import CYCLES, WATCH_AFTER, Exchange, Receive, Send, learn_cycle

__all__ = [
    "POLL_EVERY",
    "POLL_MAX",
    "WATCH_AFTER",
    "Loop",
    "Watched",
    "current_loop",
    "exchange",
    "poll",
    "unpoll",
]

logger = logging.getLogger("hedgeclient.server")

_TICK = WATCH_AFTER / 2
_UNCANCEL = sys.version_info >= (3, 11)  # Task.uncancel()

if sys.version_info >= (3, 12):  # pragma: no cover - the venv runs 3.11
    from asyncio import current_task as _current_task  # a C function since 3.12
else:  # 3.10, 3.11: skip the Python wrapper (and its get_running_loop) around this dict
    from asyncio.tasks import _current_tasks  # type: ignore[attr-defined]

    _current_task = _current_tasks.get


class Watched(Protocol):
    """What the watch list holds: a request whose watch starts with :meth:`due`."""

    def due(self) -> None:
        """Start watching; called on the loop, never from a task."""


class Loop(Protocol):
    """The current event loop's clock, watch list and detached tasks."""

    def now(self) -> float:
        """Seconds, on the loop's clock (``anyio.current_time()``)."""

    def watch(self, item: Watched) -> dict[Watched, int]:
        """Call ``item.due()`` on the loop between ``WATCH_AFTER / 2`` and
        :data:`WATCH_AFTER` seconds from now, unless :meth:`unwatch` forgets it first
        (or it is popped from the dict returned, the watch list's own)."""

    def unwatch(self, item: Watched) -> None:
        """Forget ``item`` (idempotent)."""

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn()`` in a detached task; an exception is logged."""


def current_loop() -> Loop:
    """The :class:`Loop` of the running event loop (asyncio or trio)."""
    loop = _get_running_loop()
    if loop is None:  # not asyncio: trio
        return _trio_loop()
    last = _last_asyncio
    if last[0] is loop:
        cached: Loop = last[1]
        return cached
    return _asyncio_loop(loop)


class _Watch:
    """The requests to start watching, oldest first (a dict keeps insertion order),
    each with the tick count at its arrival. One tick per loop every
    ``WATCH_AFTER / 2`` seconds, re-armed while the dict is not empty, starts the watch
    of the requests that were already there at the previous tick. A request costs a
    dict insert and a delete; it must be deleted as it ends (:meth:`unwatch`), so that
    nothing outlives its request (a list swept later was measured to cost more in
    garbage collection than it saved)."""

    __slots__ = ("_armed", "_due", "_ticks")
    # _due, _ticks and _armed are read by exchange() too (one frame less per request)

    def __init__(self) -> None:
        self._due: dict[Watched, int] = {}
        self._armed = False
        self._ticks = 0

    def watch(self, item: Watched) -> dict[Watched, int]:
        due = self._due
        due[item] = self._ticks
        if not self._armed:
            self.arm()
            due[item] = self._ticks
        return due

    def unwatch(self, item: Watched) -> None:
        self._due.pop(item, None)

    def arm(self) -> None:
        """Arm the next tick; what is in the dict now starts at the one after."""
        self._armed = True
        self._ticks += 1
        self.call_at(self.now() + _TICK, self._sweep)

    def _sweep(self) -> None:
        ticks = self._ticks
        self._ticks = ticks + 1
        pending = self._due
        while pending:
            item = next(iter(pending))
            if pending[item] >= ticks:  # came since the last tick: at the next one
                break
            del pending[item]
            try:
                item.due()
            except Exception:  # one request's failure must not stop the others' watch
                logger.exception("hedgeclient.server: watching a request failed")
        if pending:
            self.call_at(self.now() + _TICK, self._sweep)
        else:
            self._armed = False

    def now(self) -> float:
        raise NotImplementedError  # pragma: no cover - every subclass has one

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass has one

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        current_timer().spawn(contextvars.copy_context(), fn)


# -- asyncio ----------------------------------------------------------------------------


@final
class _AsyncioLoop(_Watch):
    __slots__ = ("_delivered", "_loop", "_poll_armed", "polled")

    def __init__(self, loop: Any) -> None:
        super().__init__()
        self._loop = loop
        self.polled: dict[Any, Any] = {}  # request task -> its uvicorn request cycle
        self._delivered: set[Any] = set()  # tasks cancelled for their client's going
        self._poll_armed = False

    def arm_poll(self) -> None:
        """Arm the next poll of the uvicorn requests (:func:`poll`)."""
        self._poll_armed = True
        period = min(POLL_MAX, max(POLL_EVERY, len(self.polled) * _POLL_PER_REQUEST))
        self._loop.call_at(self._loop.time() + period, self._poll)

    def _poll(self) -> None:
        delivered = self._delivered
        for task, cycle in self.polled.items():
            if cycle.disconnected and not cycle.response_complete and task not in delivered:
                delivered.add(task)
                task.cancel()  # a loop callback: the task waits at an await
        if self.polled:
            self.arm_poll()
        else:
            self._poll_armed = False

    def unpoll(self, task: Any, exc: BaseException | None) -> int:
        """See :func:`unpoll`."""
        cycle = self.polled.pop(task, None)
        gone = cycle is not None and cycle.disconnected and not cycle.response_complete
        if task in self._delivered:
            self._delivered.discard(task)
            others = task.uncancel() if _UNCANCEL else 0
            if isinstance(exc, CancelledError) and not others:
                return 2
            return 1
        return 1 if gone else 0

    def now(self) -> float:
        return float(self._loop.time())

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        self._loop.call_at(when, _with_sniffio, callback)

    def call_soon(self, callback: Callable[[], None]) -> None:
        self._loop.call_soon(callback)


def _with_sniffio(callback: Callable[[], None]) -> None:
    # A loop callback runs in no task: name the library for anyio calls inside it.
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        callback()
    finally:
        sniffio.current_async_library_cvar.reset(token)


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
            cast("_AsyncioLoop", self._loop).call_soon(self._deliver)

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
        return _TrioExchange(receive, send, _trio_loop())
    last = _last_asyncio
    watch: _AsyncioLoop = last[1] if last[0] is loop else _asyncio_loop(loop)
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
    made._task = _current_task(loop)
    due = made._due = watch._due
    if not watch._armed:
        watch.arm()
    due[made] = watch._ticks
    return made


def _asyncio_loop(loop: Any) -> _AsyncioLoop:
    found = _asyncio_loops.get(loop)
    if found is None:
        found = _asyncio_loops[loop] = _AsyncioLoop(loop)
    _last_asyncio[:] = [loop, found]
    return found


POLL_EVERY = 0.0025
"""Seconds between two polls of the uvicorn requests in flight, at least: the lag of
their cancellation, at most, with up to 250 requests in flight. The period grows by
10 µs per request in flight (so a poll costs at most about 1 % of a core), up to
:data:`POLL_MAX`."""
POLL_MAX = 0.050
"""Seconds between two polls at most (with 5,000 requests in flight or more)."""
_POLL_PER_REQUEST = 10e-6  # seconds of period per request in flight


def poll(send: Send) -> Any:
    """Under uvicorn on asyncio: watch the current request by polling its request cycle.

    ``send`` is uvicorn's own (a bound method of its ``RequestResponseCycle``, see
    ``_exchange.server_cycle``): uvicorn sets ``cycle.disconnected`` when the
    connection is lost before the response is complete. A poll every
    :data:`POLL_EVERY` seconds (one per loop, while requests are polled) cancels the
    task of each such request, so the handler gets the server's own ``receive`` and
    ``send`` and the request costs a dict insert and a delete: no object, no wrapper,
    no pump. Returns the request's task (then :func:`unpoll` it as the handler
    returns), or ``None`` when this is not uvicorn on asyncio (then use
    :func:`exchange`).
    """
    owner = getattr(send, "__self__", None)
    if owner is None:
        return None
    known = CYCLES.get(type(owner))
    if not (learn_cycle(owner) if known is None else known):
        return None
    loop = _get_running_loop()
    if loop is None:  # pragma: no cover - uvicorn runs on asyncio only
        return None
    last = _last_asyncio
    polls: _AsyncioLoop = last[1] if last[0] is loop else _asyncio_loop(loop)
    task = _current_task(loop)
    polls.polled[task] = owner
    if not polls._poll_armed:
        polls.arm_poll()
    return task


def unpoll(task: Any, exc: BaseException | None) -> int:
    """The polled request's handler returned (``exc`` ``None``) or raised ``exc``:
    stop polling it. 0: its client stayed; 1: its client went away before the
    response was complete (abandoned), and the handler was not cancelled for it, or
    ``exc`` is not that cancellation (re-raise it); 2: abandoned, and ``exc`` is the
    cancellation the poll delivered (swallow it)."""
    loop = task.get_loop()
    last = _last_asyncio
    polls: _AsyncioLoop = last[1] if last[0] is loop else _asyncio_loop(loop)
    return polls.unpoll(task, exc)


_asyncio_loops: weakref.WeakKeyDictionary[Any, _AsyncioLoop] = weakref.WeakKeyDictionary()
_last_asyncio: list[Any] = [None, None]  # the loop seen last and its _AsyncioLoop


# -- trio -------------------------------------------------------------------------------


@final
class _TrioLoop(_Watch):
    __slots__ = ()

    def now(self) -> float:
        return anyio.current_time()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        current_timer().call_at(when, callback)


def _trio_loop() -> _TrioLoop:
    return per_trio_run("hedgeclient_server_loop", _TrioLoop)


@final
class _TrioExchange(Exchange):
    """trio: a native cancel scope around the handler, entered as the exchange is made
    (in the handler's task) and exited by :meth:`caught` or :meth:`settle`."""

    __slots__ = ("_scope",)

    def __init__(self, receive: Receive, send: Send, loop: _TrioLoop) -> None:
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
