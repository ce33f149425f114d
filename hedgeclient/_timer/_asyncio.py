"""The asyncio hedge timer: the deadline heap served by one loop handle, detached tasks,
and cancel scopes whose cancel from another task builds no task repr.

**Why not anyio's cancel as it is.** Since anyio 4.11, ``CancelScope.cancel()`` on
asyncio writes the cancelling task into its cancel message (``f"... by {task}"``):
``asyncio.Task.__repr__`` formats the task's coroutine and where it is suspended
(43.5 k instructions, 4 to 8 µs; ``docs/benchmarks.md``, "Unit costs"), on every first
cancel of a scope made inside a task. A hedged request cancels across tasks once: the
backup driver cancels the primary's scope when a backup wins, the caller's task the
driver's scope when the primary wins. So here:

- a detached task (:meth:`_AsyncioTimer.spawn`, the backup driver) is a
  :class:`_DetachedTask`, whose repr is ``object``'s (its class and address, no
  Python code): a cancel it makes costs 39.7 k instructions less;
- a scope from :attr:`_AsyncioTimer.cancel_scope` (:class:`_CancelScope`, anyio's own
  asyncio scope) cancelled from any other task defers its cancel to a loop callback,
  where no task is current: 22.5 k instructions less, one more pass of the loop
  included. The cancelled code cannot tell it from a cancel that found it busy (anyio
  delivers a cross-task cancel at the target's next wait either way); the canceller
  sees ``cancel_called`` false until that pass.

Strictly private.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from heapq import heappop, heappush
from typing import Any

import anyio
import sniffio

from hedgeclient._timer._deadlines import Entry, Heap, LoopLag, run_due, run_logged
from hedgeclient._timer._types import Flag, Handle, Scope

__all__ = ["asyncio_timer"]

_timers: weakref.WeakKeyDictionary[Any, _AsyncioTimer] = weakref.WeakKeyDictionary()


def asyncio_timer(loop: asyncio.AbstractEventLoop) -> _AsyncioTimer:
    """The timer of ``loop``, the running one (created on first use; held weakly by
    the loop)."""
    timer = _timers.get(loop)
    if timer is None:
        timer = _timers[loop] = _AsyncioTimer(loop)
    return timer


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time`` without holding the loop: ``time.monotonic`` itself (a C call) when
    the loop keeps asyncio's own clock, whose ``time()`` is ``time.monotonic()`` (checked
    once: a loop that reads another clock, uvloop's or a test's, keeps its own)."""
    if type(loop).time is asyncio.BaseEventLoop.time and abs(loop.time() - time.monotonic()) < 1:
        return time.monotonic
    return _loop_time


class _DetachedTask(asyncio.Task[None]):
    """A detached task of hedgeclient's (a backup driver), whose repr is ``object``'s:
    its class and address, built in C, since anyio writes it into the message of every
    cancel the task makes (see the module doc). Strictly private."""

    __slots__ = ()

    __repr__ = object.__repr__


_AnyioScope: Any = type(anyio.CancelScope())  # anyio's CancelScope class for asyncio


class _CancelScope(_AnyioScope):  # type: ignore[misc]
    """anyio's asyncio cancel scope, cancelled from another task through a loop
    callback (no task current, no task repr built: see the module doc). Strictly
    private."""

    __slots__ = ()

    def cancel(self, reason: str | None = None) -> None:
        task = asyncio.current_task()
        if task is None or type(task) is _DetachedTask:
            super().cancel(reason)
        else:
            asyncio.get_running_loop().call_soon(super().cancel, reason)


class _AsyncioTimer:
    """asyncio: a deadline heap served by one ``loop.call_at`` handle armed for its
    earliest deadline, and detached tasks. Strictly private.

    One loop handle for all deadlines rather than one per request: registering and
    cancelling a deadline is then a heap push and a flag, and the loop's own heap does
    not fill with cancelled handles.
    """

    __slots__ = (
        "__weakref__",
        "_armed",
        "_armed_at",
        "_heap",
        "_sequence",
        "_tasks",
        "cancel_scope",
        "deadline",
        "event",
        "lag",
        "loop",
        "time",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Only weak references to the loop, also through what this holds (the loop's
        # timer handles hold the loop): this timer is the value of a WeakKeyDictionary
        # keyed by the loop, and a strong one would keep every loop that ever hedged alive.
        self.loop: Callable[[], Any] = weakref.ref(loop)  # alive while it runs us
        self.time: Callable[[], float] = _clock_of(loop)
        self.cancel_scope: Callable[[], Scope] = _CancelScope
        self.event: Callable[[], Flag] = type(anyio.Event())  # without anyio's look-up
        self.deadline: Callable[[], float] = anyio.current_effective_deadline
        self._tasks: set[Any] = set()  # strong references: the loop keeps only weak ones
        self._heap: Heap = []
        self._sequence = 0
        self._armed = 0  # which loop handle is the current one (older ones are stale)
        self._armed_at = math.inf  # its deadline
        self.lag = LoopLag()

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        self._sequence += 1
        entry = Entry((callback,))
        heap = self._heap
        while heap and not heap[0][2]:  # drop cancelled entries at the head
            heappop(heap)
        heappush(heap, (deadline, self._sequence, entry))
        if deadline < self._armed_at:
            self._arm(deadline)
        return entry

    def _arm(self, deadline: float) -> None:
        # A later handle armed before stays in the loop and fires stale: harmless.
        self._armed += 1
        self._armed_at = deadline
        self.loop().call_at(deadline, self._fire, self._armed, deadline)

    def _fire(self, armed: int, deadline: float) -> None:
        if armed == self._armed:
            self._armed_at = math.inf
        # The loop runs a handle up to its clock resolution early: due is due.
        now = self.loop().time()
        limit = max(deadline, now)
        # A loop callback runs in no task, where sniffio (hence anyio) finds no library
        # unless the program was started by anyio.run: name it for the callbacks.
        token = sniffio.current_async_library_cvar.set("asyncio")
        try:
            run_due(self._heap, limit, self.lag, now)  # each: how late it was served
        finally:
            sniffio.current_async_library_cvar.reset(token)
        if self._heap and self._heap[0][0] < self._armed_at:
            self._arm(self._heap[0][0])

    def spawn(self, context: contextvars.Context, fn: Callable[[], Awaitable[None]]) -> None:
        loop = self.loop()
        coro = run_logged(fn)
        if loop.get_task_factory() is None:
            task = _DetachedTask(coro, loop=loop, name="hedgeclient-backup", context=context)
        else:  # the program's own factory (instrumentation, eager tasks) makes it
            task = loop.create_task(coro, name="hedgeclient-backup", context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
