"""The trio hedge timer: a deadline heap served by one system task per run.

Strictly private.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Coroutine
from heapq import heappop, heappush
from typing import Any, TypeVar

import anyio

from hedgeclient._timer._deadlines import Entry, Heap, LoopLag, run_due, run_logged, wait_until
from hedgeclient._timer.protocols import Flag, Handle, Scope

__all__ = ["TrioTimer", "per_trio_run"]

_T = TypeVar("_T")
_run_vars: dict[str, Any] = {}  # name -> trio.lowlevel.RunVar (trio is optional)


def per_trio_run(name: str, factory: Callable[[], _T]) -> _T:
    """The object ``name`` of the running ``trio.run``, made by ``factory()`` on first use
    (one hedge timer, one server loop, ... per run).

    Raises:
        RuntimeError: not called from a running ``trio.run``.
    """
    import trio

    var = _run_vars.get(name)
    if var is None:
        var = _run_vars[name] = trio.lowlevel.RunVar(name)
    try:
        found: _T = var.get()
    except LookupError:
        found = factory()
        var.set(found)
    return found


class TrioTimer:
    """trio: a heap of deadlines served by one system task per run (one per run:
    ``_asyncio.current_timer`` keeps it in a ``RunVar``). Strictly private."""

    __slots__ = (
        "_heap",
        "_sequence",
        "_sleep",
        "_started",
        "_token",
        "cancel_scope",
        "deadline",
        "event",
        "lag",
        "primary_scope",
        "task_group",
        "time",
        "wait_until",
    )

    def __init__(self) -> None:
        import trio

        self.time: Callable[[], float] = trio.current_time
        self.cancel_scope: Callable[[], Scope] = trio.CancelScope
        self.primary_scope: Callable[[], Scope] = trio.CancelScope
        self.event: Callable[[], Flag] = trio.Event
        self.deadline: Callable[[], float] | None = trio.current_effective_deadline
        self.task_group: Callable[[], Any] = anyio.create_task_group
        self.wait_until = wait_until
        self._heap: Heap = []
        self._sequence = 0
        self._sleep: Any = None  # the CancelScope the timer task sleeps in
        self._started = False
        self._token = trio.lowlevel.current_trio_token()  # the run's, for other threads
        self.lag = LoopLag()

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        self._sequence += 1
        entry = Entry((callback,))
        heap = self._heap
        while heap and not heap[0][2]:  # drop cancelled entries at the head
            heappop(heap)
        heappush(heap, (deadline, self._sequence, entry))
        if not self._started:
            import trio

            self._started = True
            trio.lowlevel.spawn_system_task(self._serve, name="hedgeclient-timer")
        elif self._sleep is not None and deadline < self._sleep.deadline:
            self._sleep.deadline = deadline
        return entry

    def deadline_of(self, scope: Scope | None) -> float:
        return math.inf  # read at once: ``deadline``

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        self._token.run_sync_soon(callback)  # trio.RunFinishedError: a RuntimeError

    def spawn(
        self,
        context: contextvars.Context,
        fn: Callable[[], Coroutine[Any, Any, None]],
        *,
        guarded: bool = False,
        done: object = None,  # its coroutine always runs: fn's own clean-up is its end
    ) -> None:
        import trio

        # An exception escaping a system task would end the whole run: caught by fn itself
        # when guarded (its coroutine is the task's), else by run_logged.
        if guarded:
            trio.lowlevel.spawn_system_task(fn, name="hedgeclient-backup", context=context)
        else:
            trio.lowlevel.spawn_system_task(
                run_logged, fn, name="hedgeclient-backup", context=context
            )

    async def _serve(self) -> None:
        import trio

        heap = self._heap
        while True:
            deadline = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=deadline) as sleep:
                self._sleep = sleep
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            run_due(heap, now, self.lag, now)  # each: how late it was served
