"""The watch list: one per event loop, for the requests watched by reading ``receive()``.

Under servers other than uvicorn a request to watch goes into one dict per loop, swept
by one tick every ``WATCH_AFTER / 2`` seconds while the dict is not empty; a sweep
starts the watch of the requests that were already there at the previous sweep (so a
request answered within 2.5 ms costs a dict insert and delete, no clock read and no
timer). On asyncio the ticks are the loop's own timers; on trio they go through the
hedge timer (``_timer``). The running library is told apart by asyncio's running loop
(``None`` under trio), which costs less than ``sniffio``'s context variable lookup and
its fallbacks.

Strictly private.
"""

from __future__ import annotations

import contextvars
import logging
from asyncio.events import _get_running_loop
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, final

import anyio
import sniffio

from hedgeclient._timer import current_timer, per_trio_run
from hedgeclient.server._exchange import WATCH_AFTER
from hedgeclient.server._poll import PerLoop

__all__ = ["LAST", "Loop", "Watch", "Watched", "asyncio_loop", "current_loop", "trio_loop"]

logger = logging.getLogger("hedgeclient.server")

_TICK = WATCH_AFTER / 2


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

    def spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``fn()`` in a detached task; an exception is logged."""


def current_loop() -> Loop:
    """The :class:`Loop` of the running event loop (asyncio or trio)."""
    loop = _get_running_loop()
    if loop is None:  # not asyncio: trio
        return trio_loop()
    last = LAST
    if last[0] is loop:
        cached: Loop = last[1]
        return cached
    return asyncio_loop(loop)


class Watch:
    """The requests to start watching, oldest first (a dict keeps insertion order),
    each with the tick count at its arrival. One tick per loop every
    ``WATCH_AFTER / 2`` seconds, re-armed while the dict is not empty, starts the watch
    of the requests that were already there at the previous tick. A request costs a
    dict insert and a delete; it must be deleted as it ends (:meth:`unwatch`), so that
    nothing outlives its request (a list swept later was measured to cost more in
    garbage collection than it saved). Strictly private: the base of both loops."""

    __slots__ = ("armed", "pending", "ticks")
    # pending, ticks and armed are read by _backend.exchange() too (one frame less per request)

    def __init__(self) -> None:
        self.pending: dict[Watched, int] = {}
        self.armed = False
        self.ticks = 0

    def watch(self, item: Watched) -> dict[Watched, int]:
        due = self.pending
        due[item] = self.ticks
        if not self.armed:
            self.arm()
            due[item] = self.ticks
        return due

    def unwatch(self, item: Watched) -> None:
        self.pending.pop(item, None)

    def arm(self) -> None:
        """Arm the next tick; what is in the dict now starts at the one after."""
        self.armed = True
        self.ticks += 1
        self.call_at(self.now() + _TICK, self._sweep)

    def _sweep(self) -> None:
        ticks = self.ticks
        self.ticks = ticks + 1
        pending = self.pending
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
            self.armed = False

    def now(self) -> float:
        raise NotImplementedError  # pragma: no cover - every subclass has one

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass has one

    def spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        current_timer().spawn(contextvars.copy_context(), fn)


@final
class AsyncioLoop(Watch):
    """Strictly private: the watch list of one asyncio loop, on its own timers."""

    __slots__ = ("_loop",)

    def __init__(self, loop: Any) -> None:
        super().__init__()
        self._loop = loop

    def now(self) -> float:
        return float(self._loop.time())

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        self._loop.call_at(when, _with_sniffio, callback)

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the loop as soon as it can (not from this task)."""
        self._loop.call_soon(callback)


def _with_sniffio(callback: Callable[[], None]) -> None:
    # A loop callback runs in no task: name the library for anyio calls inside it.
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        callback()
    finally:
        sniffio.current_async_library_cvar.reset(token)


asyncio_loop: PerLoop[AsyncioLoop] = PerLoop(AsyncioLoop)
"""The :class:`AsyncioLoop` of an asyncio loop (made on first use)."""
LAST = asyncio_loop.last
"""The asyncio loop seen last and its :class:`AsyncioLoop` (:attr:`PerLoop.last`)."""


@final
class TrioLoop(Watch):
    """Strictly private: the watch list of one ``trio.run``, on the hedge timer."""

    __slots__ = ()

    def now(self) -> float:
        return anyio.current_time()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        current_timer().call_at(when, callback)


def trio_loop() -> TrioLoop:
    """The running ``trio.run``'s :class:`TrioLoop` (made on first use)."""
    return per_trio_run("hedgeclient_server_loop", TrioLoop)
