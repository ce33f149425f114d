"""The hedge timer: one per event loop, for every transport on that loop.

A hedged request registers its hedge deadline here and runs its primary attempt in
the caller's own task. Most requests answer before their deadline and cancel the
registration: they start no task at all. When a deadline passes first, the timer
calls the race back (synchronously, on the loop) and the race starts its backups in a
*detached* task through :meth:`HedgeTimer.spawn`, in a copy of the caller's context
variables; the race itself guarantees that the caller never returns while that task
runs (``_race.race``).

This package is the one backend-specific place of the library (chosen through
``sniffio``); its modules: ``_types`` (the protocols), ``_heap`` (the deadline heap
both paths share), ``_lag`` (how late the loop serves them: the client's own lag),
``_asyncio`` and ``_trio`` (the two timers) and ``_shielded`` (waits no cancellation
can cut short).

- asyncio: a deadline heap served by one of the loop's own timers (``loop.call_at``),
  armed for the earliest deadline; a backup task is a plain ``asyncio.Task`` kept
  alive by a strong reference until it ends.
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

import sniffio

from hedgeclient._timer._asyncio import asyncio_timer, get_running_loop
from hedgeclient._timer._lag import LAG_EVIDENCE, LAG_MEMORY, LAG_WEIGHT, LoopLag
from hedgeclient._timer._shielded import run_shielded, wait_shielded
from hedgeclient._timer._trio import per_trio_run, trio_timer
from hedgeclient._timer._types import Flag, Handle, HedgeTimer, Scope

__all__ = [
    "LAG_EVIDENCE",
    "LAG_MEMORY",
    "LAG_WEIGHT",
    "Flag",
    "Handle",
    "HedgeTimer",
    "LoopLag",
    "Scope",
    "current_timer",
    "loop_id",
    "now",
    "per_trio_run",
    "run_shielded",
    "wait_shielded",
]

_get_running_loop = get_running_loop


def loop_id() -> int:
    """An identity of the running event loop (a transport may outlive one).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    if sniffio.current_async_library() == "trio":
        import trio

        return id(trio.lowlevel.current_trio_token())

    return id(get_running_loop())


def now() -> float:
    """The running event loop's clock in seconds: ``anyio.current_time()``, found with one
    ``sniffio`` look-up (the default clock of the transport's own pure pieces).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.current_time()
    return _get_running_loop().time()


def current_timer() -> HedgeTimer:
    """Return the hedge timer of the running event loop (created on first use).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    library = sniffio.current_async_library()
    if library == "asyncio":
        return asyncio_timer()
    if library == "trio":
        return trio_timer()
    msg = f"hedgeclient runs on asyncio or trio, not {library!r}"
    raise RuntimeError(msg)
