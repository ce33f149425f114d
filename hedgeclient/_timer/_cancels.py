"""Cross-task cancels on asyncio that build no task repr: the asyncio timer's detached
task class and the factory of its backups' cancel scopes (``_asyncio``).

**Why not anyio's cancel as it is.** Since anyio 4.11, ``CancelScope.cancel()`` on
asyncio writes the cancelling task into its cancel message (``f"... by {task}"``):
``asyncio.Task.__repr__`` formats the task's coroutine and where it is suspended
(43.5 k instructions, 4 to 8 µs; ``docs/benchmarks.md``, "Unit costs"), on every first
cancel of a scope made inside a task. A hedged request cancels across tasks once: the
backup driver cancels the primary's scope when a backup wins, the caller's task the
driver's scope when the primary wins. So here:

- a detached task (:meth:`_AsyncioTimer.spawn`, the backup driver) is a
  :class:`DetachedTask`, whose repr is ``object``'s (its class and address, no
  Python code): a cancel it makes costs 39.7 k instructions less;
- a scope from :attr:`_AsyncioTimer.cancel_scope` (``_CancelScope``, anyio's own
  asyncio scope) cancelled from any other task defers its cancel to a loop callback,
  where no task is current: 22.5 k instructions less, one more pass of the loop
  included. The cancelled code cannot tell it from a cancel that found it busy (anyio
  delivers a cross-task cancel at the target's next wait either way); the canceller
  sees ``cancel_called`` false until that pass.

Which scope is which: the backups' scope comes from :attr:`_AsyncioTimer.cancel_scope`,
since the caller's task cancels it when the primary wins (deferred, as above). The
primary's scope comes from :attr:`_AsyncioTimer.primary_scope`, anyio's asyncio scope
class itself: a backup that wins cancels it from the detached task, where the override
would only call ``super()``, so the cancel goes to anyio directly (one call less per
backup won, issue 25). Its rare other cancellers build a task repr once: ``Race.cancel()``
as the transport closes (4 to 8 µs per race still in flight), and a detached task that a
program's own task factory made (not a :class:`DetachedTask`).

Strictly private.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio

from hedgeclient._timer.protocols import Scope

__all__ = ["DetachedTask", "cancel_scope_class"]


class DetachedTask(asyncio.Task[None]):
    """A detached task of hedgeclient's (a backup driver), whose repr is ``object``'s:
    its class and address, built in C, since anyio writes it into the message of every
    cancel the task makes (see the module doc). Strictly private."""

    __slots__ = ()

    __repr__ = object.__repr__


_scope_class: Callable[[], Scope] | None = None  # made once, inside the first loop


def cancel_scope_class() -> Callable[[], Scope]:
    """anyio's asyncio cancel scope class, subclassed so that a cancel from another task
    goes through a loop callback (no task current, no task repr built: see the module
    doc). Made on first use, from a running loop: anyio picks its scope class by the
    running backend, so none can be had at import."""
    global _scope_class
    if _scope_class is not None:
        return _scope_class
    anyio_scope: Any = type(anyio.CancelScope())

    class _CancelScope(anyio_scope):  # type: ignore[misc]
        """Strictly private: see :func:`cancel_scope_class`."""

        __slots__ = ()

        def cancel(self, reason: str | None = None) -> None:
            task = asyncio.current_task()
            if task is None or type(task) is DetachedTask:
                super().cancel(reason)
            else:
                asyncio.get_running_loop().call_soon(super().cancel, reason)

    _scope_class = _CancelScope
    return _scope_class
