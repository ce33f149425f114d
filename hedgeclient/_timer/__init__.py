"""The hedge timer: one per event loop, for every transport on that loop.

A hedged request registers its hedge deadline here and runs its primary attempt in
the caller's own task. Most requests answer before their deadline and cancel the
registration: they start no task at all. When a deadline passes first, the timer
calls the race back (synchronously, on the loop) and the race starts its backups in a
*detached* task through :meth:`HedgeTimer.spawn`, in a copy of the caller's context
variables; the race itself guarantees that the caller never returns while that task
runs (``_race.race``). The race's coroutine is that task's own (spawned ``guarded``: it
logs its exceptions itself, :func:`log_task_failure`), with no wrapper between.

This package is the one backend-specific place of the library (chosen through
``sniffio``). A request runs through two of its modules: ``_deadlines`` (what both
backends share: the deadline heap, how late the loop serves it; no backend code) and
``_asyncio`` (the look-up of the loop's timer, the asyncio timer, the waits no
cancellation can cut short: the one module of raw asyncio), or on trio ``_trio`` too;
``protocols`` has the protocols, which the race types its timer with.

- asyncio: a deadline heap served by one of the loop's own timers (``loop.call_at``),
  armed for the earliest deadline; a backup task is an ``asyncio.Task`` kept alive by
  a strong reference until it ends; a cross-task cancel builds no task repr (anyio
  >= 4.11 would: ``_asyncio``).
- trio: trio has no callback timers, so one *system task* per ``trio.run`` sleeps
  until the earliest deadline of a heap (entries are cancelled lazily); a backup task
  is a system task (``trio.lowlevel.spawn_system_task(context=...)``). An exception
  escaping a system task would end the whole run, so every callback and task here is
  wrapped: an ``Exception`` is logged, never raised.

Both paths see the same clock as ``anyio.current_time()``, and each timer hands it out
as :attr:`HedgeTimer.time` (with its backend's cancel scopes and events), so that a
request looks its backend up once. Strictly private.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hedgeclient._timer._asyncio import (
    current_timer,
    loop_id,
    now,
    run_shielded,
    wait_shielded,
)
from hedgeclient._timer._deadlines import (
    LAG_EVIDENCE,
    LAG_MARK,
    LAG_MEMORY,
    LAG_WEIGHT,
    LoopLag,
    log_task_failure,
)
from hedgeclient._timer._thread_timer import ThreadTimer
from hedgeclient._timer._threads import (
    ThreadScope,
    cancelled_class,
    drive,
    engine_thread,
    shield,
)
from hedgeclient._timer._threads import local as thread_state
from hedgeclient._timer._trio import per_trio_run
from hedgeclient._timer.protocols import Flag, Handle, HedgeTimer, Scope

__all__ = [
    "LAG_EVIDENCE",
    "LAG_MARK",
    "LAG_MEMORY",
    "LAG_WEIGHT",
    "Flag",
    "Handle",
    "HedgeTimer",
    "LoopLag",
    "Scope",
    "ThreadScope",
    "ThreadTimer",
    "cancelled_class",
    "close_unread",
    "current_timer",
    "drive",
    "engine_thread",
    "log_task_failure",
    "loop_id",
    "now",
    "per_trio_run",
    "run_shielded",
    "shield",
    "thread_state",
    "wait_shielded",
]


async def close_unread(response: Any) -> None:
    """Close ``response`` (an ``httpx.Response`` whose caller is gone, unread) to its end
    even if the caller is cancelled meanwhile (:func:`run_shielded`); what it raises is
    dropped: the caller's own exception is the one that goes on."""
    with contextlib.suppress(BaseException):
        await run_shielded(response.aclose)
