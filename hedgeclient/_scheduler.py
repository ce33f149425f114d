"""One task per entered transport that starts backup requests when hedge delays pass.

Why it exists: most requests never need a backup (with the p95 as hedge delay, 95 in
100 answer first), so the race should cost nothing on their path. A hedged request
that runs its own task group pays for a task group, a task and a wake-up per request
(about 25-50 µs on CPython, a third of a bare httpx request). With the scheduler the
primary attempt runs in the caller's own task under one cancel scope, and the
request only pushes its hedge deadline onto a heap; the scheduler's task sleeps
until the earliest live deadline and, if that request still has no response headers
then, starts a *backup driver* task (``Race.drive_backups``) in its task group.

Deadlines are cancelled lazily: a finished request blanks its heap entry and pops the
dead entries at the head, so the scheduler wakes about once per hedge delay under
steady traffic, not once per request; it is woken early only when a new deadline is
earlier than the one it sleeps to (a heap that was empty, or a shorter delay).

The task group lives from ``HedgedTransport.__aenter__`` to ``__aexit__`` (the way
``httpx.AsyncClient`` enters and exits its transport), so it must be exited in the
task that entered it; when it is not (a test framework that runs fixture set-up and
tear-down in different tasks), :meth:`BackupScheduler.aclose` stops the tasks and
waits for them instead. A transport that was never entered keeps one task group per
hedged request (``Race.run``), with the same behaviour.

Strictly private.
"""

from __future__ import annotations

import contextvars
import heapq
import logging
import math
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, final

import anyio
import anyio.abc

logger = logging.getLogger("hedgeclient")


class Due(Protocol):
    """What the scheduler calls when a request's hedge deadline passes."""

    def hedge_due(self, scheduler: BackupScheduler) -> None:
        """Start a backup if the request still needs one; must not block or raise."""


MISNESTED = (
    "hedgeclient: a HedgedTransport(scheduler_task=True) was exited out of nesting order "
    "(its task group opened when it was entered): exit clients in the reverse order they "
    "were entered, after any task group or timeout entered since, or build the transport "
    "with scheduler_task=False"
)

NEVER_EXITED = (
    "hedgeclient: a HedgedTransport(scheduler_task=True) was entered but never exited: its "
    "task group is still open in the task that entered it. Close the client with `async "
    "with` (aclose() alone does not exit it), or build the transport with "
    "scheduler_task=False"
)

Ticket = list[Any]  # [deadline: float, sequence: int, request: Due | None]; blanked on cancel


@final
class BackupScheduler:
    """A heap of hedge deadlines and the task group backup drivers run in."""

    __slots__ = (
        "_drivers",
        "_heap",
        "_host",
        "_idle",
        "_live_tasks",
        "_sequence",
        "_sleep",
        "_stop",
        "_tg",
        "running",
    )

    def __init__(self) -> None:
        self._heap: list[Ticket] = []
        self._sequence = 0
        self._sleep: anyio.CancelScope | None = None
        self._stop = anyio.CancelScope()
        self._drivers: set[anyio.CancelScope] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._host: int | None = None
        self._live_tasks = 0
        self._idle = anyio.Event()
        self.running = False

    # -- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        """Enter the task group in the current task and start the timer task."""
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._host = anyio.get_current_task().id
        self.running = True
        self._live_tasks += 1
        tg.start_soon(self._timer, name="hedgeclient-scheduler")

    def stop(self) -> None:
        """Stop scheduling: cancel the timer task and every backup driver. Synchronous."""
        self.running = False
        self._stop.cancel()
        for scope in list(self._drivers):
            scope.cancel()

    async def aclose(self) -> None:
        """Stop, then wait for the tasks; exit the task group if this is its task."""
        self.stop()
        tg, self._tg = self._tg, None
        if tg is None:
            return
        if anyio.get_current_task().id == self._host:
            # Not under a shield: the group's scope encloses any scope entered here.
            try:
                await tg.__aexit__(None, None, None)
            except (RuntimeError, AssertionError) as exc:  # anyio's and trio's nesting checks
                raise RuntimeError(MISNESTED) from exc
            return
        logger.debug("hedgeclient: transport exited in another task than the one it entered")
        with anyio.CancelScope(shield=True):  # leave the group; wait for its tasks
            if self._live_tasks:
                await self._idle.wait()

    def __del__(self) -> None:
        """Warn (``ResourceWarning``) if the task group was opened and never exited."""
        if self._tg is not None:
            warnings.warn(NEVER_EXITED, ResourceWarning, stacklevel=1)

    # -- deadlines --------------------------------------------------------------------

    def schedule(self, deadline: float, request: Due) -> Ticket:
        """Call ``request.hedge_due(self)`` at ``deadline`` (anyio clock, seconds)."""
        self._sequence += 1
        ticket: Ticket = [deadline, self._sequence, request]
        heapq.heappush(self._heap, ticket)
        sleep = self._sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Forget ``ticket``; pop the dead entries at the head of the heap."""
        ticket[2] = None
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)

    def start_driver(
        self,
        context: contextvars.Context,
        driver: Callable[[anyio.CancelScope], Awaitable[None]],
    ) -> anyio.CancelScope:
        """Start ``driver(scope)`` in the task group, in a copy of the caller's ``context``.

        The copy keeps the caller's context variables (tracing spans, for example)
        in the backup's task, as a task of the caller's own task group would.
        """
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._drivers.add(scope)
        self._live_tasks += 1
        context.run(self._tg.start_soon, self._run_driver, driver, scope)
        return scope

    # -- tasks ------------------------------------------------------------------------

    async def _run_driver(
        self, driver: Callable[[anyio.CancelScope], Awaitable[None]], scope: anyio.CancelScope
    ) -> None:
        try:
            await driver(scope)
        except Exception:  # a driver must never cancel the host task's group
            logger.exception("hedgeclient: a backup driver failed")
        finally:
            self._drivers.discard(scope)
            self._task_done()

    async def _timer(self) -> None:
        heap = self._heap
        try:
            with self._stop:
                while True:
                    deadline = heap[0][0] if heap else math.inf
                    with anyio.CancelScope(deadline=deadline) as sleep:
                        self._sleep = sleep
                        await anyio.sleep_forever()
                    self._sleep = None
                    now = anyio.current_time()
                    while heap and heap[0][0] <= now:
                        request = heapq.heappop(heap)[2]
                        if request is not None:
                            self._fire(request)
        finally:
            self._sleep = None
            self.running = False
            self._task_done()

    def _fire(self, request: Due) -> None:
        try:
            request.hedge_due(self)
        except Exception:  # never let one request stop the scheduler
            logger.exception("hedgeclient: starting a backup request failed")

    def _task_done(self) -> None:
        self._live_tasks -= 1
        if self._live_tasks == 0 and not self.running:
            self._idle.set()
