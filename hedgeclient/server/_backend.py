"""The event-loop specifics of the middleware's request path: asyncio or trio.

The middleware runs on every request of a server, so its watched path must cost a few
microseconds. anyio's portable cancel scope costs about as much as the rest of a
hello-world request on asyncio (it creates per-task state for each new request
task), and a timer per request costs a heap entry, so:

- a request to watch goes into one ordered dict per loop, swept by one deadline that
  re-arms itself while the dict is not empty (a request answered within
  :data:`WATCH_AFTER` costs an insert and a delete);
- on asyncio the guard cancels the request's own task from a loop callback and takes
  that cancellation back at its exit (``Task.uncancel()`` on 3.11+, so that a
  cancellation from elsewhere, such as a server shutting down, still propagates);
- on trio the guard is a cancel scope (native, cheap) and deadlines go through the
  hedge timer (``_timer``).

Strictly private. Like ``hedgeclient._timer``, the only backend-specific module of
its package.
"""

from __future__ import annotations

import logging
import sys
import weakref
from asyncio import CancelledError, current_task, get_running_loop
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Protocol, final

import anyio
import sniffio

from hedgeclient._timer import current_timer, per_trio_run

__all__ = ["WATCH_AFTER", "Guard", "Loop", "Watched", "current_loop"]

logger = logging.getLogger("hedgeclient.server")


class Guard(Protocol):
    """A context manager around the handler that :meth:`cancel` cancels."""

    cancelled: bool  # true once the cancellation it delivered was caught at its exit

    def cancel(self) -> None:
        """Cancel what runs inside, from the next loop step on (synchronous; from any
        task of the loop, the guarded one included); nothing once it has exited."""

    def __enter__(self) -> Guard: ...

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool: ...


class Watched(Protocol):
    """What the watch list holds: a request whose watch starts with :meth:`due`."""

    def due(self) -> None:
        """Start watching; called on the loop, never from a task."""


class Loop(Protocol):
    """The current event loop's clock, watch list, detached tasks and guards."""

    def now(self) -> float:
        """Seconds, on the loop's clock (``anyio.current_time()``)."""

    def watch(self, item: Watched) -> None:
        """Call ``item.due()`` on the loop :data:`WATCH_AFTER` seconds from now, unless
        :meth:`unwatch` forgets it first."""

    def unwatch(self, item: Watched) -> None:
        """Forget ``item`` (idempotent)."""

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn()`` in a detached task; an exception is logged."""

    def guard(self) -> Guard:
        """A new :class:`Guard` for the current task."""


WATCH_AFTER = 0.005
"""Seconds after a request starts at which the middleware starts watching it."""


def current_loop() -> Loop:
    """The :class:`Loop` of the running event loop (asyncio or trio)."""
    try:
        loop = get_running_loop()
    except RuntimeError:  # not asyncio: trio
        return _trio_loop()
    last = _last_asyncio
    if last[0] is loop:
        cached: Loop = last[1]
        return cached
    found = _asyncio_loops.get(loop)
    if found is None:
        found = _asyncio_loops[loop] = _AsyncioLoop(loop)
    _last_asyncio[:] = [loop, found]
    return found


class _Watch:
    """The requests to start watching, in the order they are due (one deadline per
    loop, re-armed as it fires: a request costs a dict insert and delete, no timer)."""

    __slots__ = ("_armed", "_due")

    def __init__(self) -> None:
        self._due: dict[Watched, float] = {}  # insertion order is due order
        self._armed = False

    def watch(self, item: Watched) -> None:
        at = self._due[item] = self.now() + WATCH_AFTER
        if not self._armed:
            self._armed = True
            self.call_at(at, self._sweep)

    def unwatch(self, item: Watched) -> None:
        self._due.pop(item, None)

    def _sweep(self) -> None:
        pending = self._due
        now = self.now()
        while pending:
            item, at = next(iter(pending.items()))
            if at > now:
                self.call_at(at, self._sweep)
                return
            del pending[item]
            try:
                item.due()
            except Exception:  # one request's failure must not stop the others' watch
                logger.exception("hedgeclient.server: watching a request failed")
        self._armed = False

    def now(self) -> float:
        raise NotImplementedError  # pragma: no cover - every subclass has one

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass has one


@final
class _AsyncioLoop(_Watch):
    __slots__ = ("_loop",)

    def __init__(self, loop: Any) -> None:
        super().__init__()
        self._loop = loop

    def now(self) -> float:
        return float(self._loop.time())

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        self._loop.call_at(when, _with_sniffio, callback)

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        import contextvars

        current_timer().spawn(contextvars.copy_context(), fn)

    def guard(self) -> Guard:
        return _TaskGuard(self._loop)


def _with_sniffio(callback: Callable[[], None]) -> None:
    # A loop callback runs in no task: name the library for anyio calls inside it.
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        callback()
    finally:
        sniffio.current_async_library_cvar.reset(token)


@final
class _TaskGuard:
    """asyncio: cancels the request's own task (``task.cancel()`` from a loop callback,
    so never while the task runs), and takes the cancellation back at its exit
    (``uncancel()`` on 3.11+, so a cancellation from elsewhere still propagates)."""

    __slots__ = ("_delivered", "_ended", "_loop", "_task", "cancelled")

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._task: Any = current_task(loop)
        self._delivered = self._ended = self.cancelled = False

    def cancel(self) -> None:
        if not self._ended:
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        if not (self._ended or self._delivered):
            self._delivered = True
            self._task.cancel()

    def __enter__(self) -> _TaskGuard:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._ended = True
        if not self._delivered:
            return False
        others = self._task.uncancel() if sys.version_info >= (3, 11) else 0
        if isinstance(e, CancelledError) and others == 0:
            self.cancelled = True
            return True
        return False


_asyncio_loops: weakref.WeakKeyDictionary[Any, _AsyncioLoop] = weakref.WeakKeyDictionary()
_last_asyncio: list[Any] = [None, None]  # the loop seen last and its _AsyncioLoop


@final
class _TrioLoop(_Watch):
    __slots__ = ()

    def now(self) -> float:
        return anyio.current_time()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        current_timer().call_at(when, callback)

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        import contextvars

        current_timer().spawn(contextvars.copy_context(), fn)

    def guard(self) -> Guard:
        return _ScopeGuard()


def _trio_loop() -> _TrioLoop:
    return per_trio_run("hedgeclient_server_loop", _TrioLoop)


@final
class _ScopeGuard:
    """trio: a cancel scope."""

    __slots__ = ("_scope", "cancelled")

    def __init__(self) -> None:
        self._scope = anyio.CancelScope()
        self.cancelled = False

    def cancel(self) -> None:
        self._scope.cancel()

    def __enter__(self) -> _ScopeGuard:
        self._scope.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool:
        swallowed = bool(self._scope.__exit__(et, e, tb))
        self.cancelled = self._scope.cancelled_caught
        return swallowed
