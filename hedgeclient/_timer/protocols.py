"""The protocols of the hedge timer: deadlines, cancel scopes, events, the timer.

The race (``_race``) types its timer with them; the backends (``_asyncio``, ``_trio``) implement
them. Strictly private.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from hedgeclient._timer._deadlines import LoopLag

__all__ = ["Flag", "Handle", "HedgeTimer", "Scope"]


class Handle(Protocol):
    """A registered deadline; :meth:`cancel` forgets it (idempotent, synchronous)."""

    def cancel(self) -> None:
        """Forget the deadline; its callback will not run."""


class Scope(Protocol):
    """A cancel scope: ``with scope:`` runs code that :meth:`cancel` interrupts."""

    def cancel(self) -> None:
        """Cancel the code running in the scope (from any task of the loop)."""

    def __enter__(self) -> Any:
        """Enter the scope."""

    def __exit__(self, *exc_info: Any) -> bool | None:
        """Leave the scope, swallowing its own cancellation."""


class Flag(Protocol):
    """An event: :meth:`set` once, and tasks :meth:`wait` for it."""

    def set(self) -> None:
        """Set the flag; wake every waiter."""

    def is_set(self) -> bool:
        """Whether the flag is set."""

    async def wait(self) -> Any:
        """Wait until the flag is set."""


class HedgeTimer(Protocol):
    """Deadlines, detached tasks, the clock and cancel scopes of the current event loop."""

    time: Callable[[], float]
    """The loop's clock in seconds: what ``anyio.current_time()`` returns, read without
    looking the backend up again (asyncio ``loop.time()``, ``trio.current_time()``)."""

    cancel_scope: Callable[[], Scope]
    """A new cancel scope of the backend: on asyncio ``_asyncio._TaskScope``
    (``Task.cancel()`` and ``uncancel()``, counted as ``asyncio.timeout`` counts them);
    on trio ``trio.CancelScope`` (what anyio's wraps). Both stop anyio, trio and native
    asyncio code alike. For a scope cancelled from another task (the backups', which
    the caller's task cancels when the primary wins)."""

    primary_scope: Callable[[], Scope]
    """A new cancel scope for the primary attempt, which a winning backup cancels from its
    detached task: the same class as :attr:`cancel_scope`'s."""

    deadline: Callable[[], float] | None
    """The calling task's effective deadline, as ``anyio.current_effective_deadline()``
    gives it (trio's own, without anyio's look-up); ``None`` where :meth:`deadline_of`
    reads it when a backup is due instead (asyncio; a sync client's threads: none)."""

    event: Callable[[], Flag]
    """A new event of the backend, without anyio's per-call backend look-up
    (asyncio's own ``Event``; ``trio.Event``)."""

    lag: LoopLag
    """How late this loop has served its deadlines lately (``_deadlines``): the client's
    own lateness, which is in every latency measured on the loop."""

    task_group: Callable[[], Any]
    """A new task group, as ``anyio.create_task_group()`` gives one (``start_soon``,
    ``cancel_scope.cancel()``, ``async with``): the backup driver's."""

    async def wait_until(self, flag: Any, deadline: float) -> Any:
        """Wait for ``flag`` (one of :attr:`event`'s) until ``deadline`` at most
        (:attr:`time`'s clock, seconds)."""

    def deadline_of(self, scope: Scope | None) -> float:
        """The effective deadline (:attr:`time`'s clock, seconds; ``-math.inf``: cancelled)
        of the code around ``scope``, one of this timer's scopes, entered: on asyncio
        anyio's scopes around it, read now; ``math.inf`` where :attr:`deadline` is read
        per request instead."""

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        """Call ``callback()`` on the loop at ``deadline`` (:attr:`time`'s clock, seconds).
        The callback must not block; an exception from it is logged."""

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on this timer's loop soon, from any thread (a sync
        transport's callers: ``_sync.loop``): one hand-over, no wait. The callback must
        not block, nor raise (trio would end the run).

        Raises:
            RuntimeError: the loop has ended.
        """

    def spawn(
        self,
        context: contextvars.Context,
        fn: Callable[[], Coroutine[Any, Any, None]],
        *,
        guarded: bool = False,
        done: Flag | None = None,
    ) -> None:
        """Start ``fn()`` in a new task that runs in ``context`` (a copy of the caller's
        context variables). An exception from it is logged, never raised: here, or by
        ``fn`` itself when ``guarded``.

        Args:
            context: the task's context variables.
            fn: the task's work; its coroutine runs in the task.
            guarded: ``fn()``'s coroutine catches every ``Exception`` itself and logs it
                (:func:`~hedgeclient._timer._deadlines.log_task_failure`), as the race's
                backups do: it is then the task's own coroutine, with no wrapper around
                it (one call less per backup, issue 25). Default ``False``: an
                exception is logged here.
            done: set when the task has ended, or ``None``. On asyncio a task cancelled
                before its first step (a shutdown cancelling every task) ends without
                running ``fn``'s coroutine at all, so its own ``finally`` never runs;
                trio's and the threads' tasks always run it (they ignore ``done``).
        """
