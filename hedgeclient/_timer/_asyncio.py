"""The asyncio half of the timer package: the hedge timer (a deadline heap served by one
loop handle) and the waits a native cancellation cannot cut short. Strictly private."""

from __future__ import annotations

import asyncio
import contextvars
import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import sniffio

from hedgeclient._timer._heap import Entry, Heap, push, run_due, run_logged
from hedgeclient._timer._lag import LoopLag
from hedgeclient._timer._types import Flag, Handle, Scope

__all__ = ["absorb_cancellation_until", "asyncio_timer", "get_running_loop", "run_in_own_task"]

get_running_loop = asyncio.get_running_loop
_get_running_loop = get_running_loop


_asyncio_timers: weakref.WeakKeyDictionary[Any, _AsyncioTimer] = weakref.WeakKeyDictionary()
_last_asyncio: _AsyncioTimer | None = None  # the last one found: most programs have one loop


def asyncio_timer() -> _AsyncioTimer:
    """The running asyncio loop's timer (created on first use; held weakly by the loop)."""
    global _last_asyncio  # a one-entry cache of the lookup below
    loop = _get_running_loop()
    timer = _last_asyncio
    if timer is not None and timer.loop() is loop:
        return timer
    timer = _asyncio_timers.get(loop)
    if timer is None:
        timer = _asyncio_timers[loop] = _AsyncioTimer(loop)
    _last_asyncio = timer
    return timer


def _effective_deadline() -> Callable[[], float]:
    """anyio's asyncio backend's own ``current_effective_deadline`` (its ``AsyncBackend``
    class, which ``anyio.current_effective_deadline()`` looks up on every call), else
    that function."""
    module = sys.modules.get(type(anyio.CancelScope()).__module__)
    backend = getattr(module, "backend_class", None)
    found = getattr(backend, "current_effective_deadline", None)
    return found if callable(found) else anyio.current_effective_deadline


def _asyncio_time() -> float:
    return _get_running_loop().time()


class _AsyncioTimer:
    """asyncio: a deadline heap served by one ``loop.call_at`` handle armed for its
    earliest deadline, and ``create_task``. Strictly private.

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

    def __init__(self, loop: Any) -> None:
        self.time: Callable[[], float] = _asyncio_time
        # anyio.CancelScope() looks the backend up on every call, then builds this class.
        self.cancel_scope: Callable[[], Scope] = type(anyio.CancelScope())
        self.event: Callable[[], Flag] = type(anyio.Event())
        self.deadline: Callable[[], float] = _effective_deadline()
        # Only weak references to the loop, also through what this holds (the loop's
        # timer handles hold the loop): this timer is the value of a WeakKeyDictionary
        # keyed by the loop, and a strong one would keep every loop that ever hedged alive.
        self.loop: Callable[[], Any] = weakref.ref(loop)  # alive while it runs us
        self._tasks: set[Any] = set()  # strong references: the loop keeps only weak ones
        self._heap: Heap = []
        self._sequence = 0
        self._armed = 0  # which loop handle is the current one (older ones are stale)
        self._armed_at = math.inf  # its deadline
        self.lag = LoopLag()

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        self._sequence += 1
        entry = Entry(callback)
        push(self._heap, deadline, self._sequence, entry)
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
        # Task() copies the context current at creation: run create_task inside ours
        # (the `context=` argument of create_task needs Python 3.11).
        task = context.run(self.loop().create_task, run_logged(fn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# -- waits a native cancellation cannot cut short (see ``_shielded``) -----------------


async def absorb_cancellation_until(event: Flag) -> None:
    """Wait for ``event``, absorbing each native ``CancelledError`` meanwhile; then raise
    the last one (anyio's shield does not stop a native ``task.cancel()``)."""
    cancelled: BaseException | None = None
    while not event.is_set():
        try:
            await event.wait()
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled


async def run_in_own_task(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn()`` in a task of its own and wait for it to end, absorbing each native
    ``CancelledError`` meanwhile; then raise the last one, or what ``fn()`` raised."""

    async def run() -> None:
        await fn()

    task = asyncio.get_running_loop().create_task(run())
    with anyio.CancelScope(shield=True):
        cancelled: BaseException | None = None
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError as exc:
                cancelled = exc
    if cancelled is not None:
        raise cancelled
    task.result()
