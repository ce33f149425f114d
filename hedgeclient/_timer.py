"""The hedge timer: one per event loop, for every transport on that loop.

A hedged request registers its hedge deadline here and runs its primary attempt in
the caller's own task. Most requests answer before their deadline and cancel the
registration: they start no task at all. When a deadline passes first, the timer
calls the race back (synchronously, on the loop) and the race starts its backups in a
*detached* task through :meth:`HedgeTimer.spawn`, in a copy of the caller's context
variables; the race itself guarantees that the caller never returns while that task
runs (``_race``).

This is the one backend-specific module of the library (chosen through ``sniffio``):

- asyncio: a deadline heap served by one of the loop's own timers (``loop.call_at``),
  armed for the earliest deadline; a backup task is a plain ``asyncio.Task`` kept
  alive by a strong reference until it ends.
- trio: trio has no callback timers, so one *system task* per ``trio.run`` sleeps
  until the earliest deadline of a heap (entries are cancelled lazily); a backup task
  is a system task (``trio.lowlevel.spawn_system_task(context=...)``). An exception
  escaping a system task would end the whole run, so every callback and task here is
  wrapped: an ``Exception`` is logged, never raised.

Both paths see the same clock as ``anyio.current_time()``, and each timer hands it out
as :attr:`HedgeTimer.time`, so that a request looks its backend up once. Strictly private.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import logging
import math
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio
import sniffio

__all__ = [
    "Flag",
    "Handle",
    "HedgeTimer",
    "Scope",
    "current_timer",
    "loop_id",
    "now",
    "run_shielded",
    "wait_shielded",
]

logger = logging.getLogger("hedgeclient")
_T = TypeVar("_T")
_get_running_loop = asyncio.get_running_loop


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
    """A new cancel scope of the backend, without anyio's per-call backend look-up: on
    asyncio anyio's own ``CancelScope`` class for asyncio; on trio ``trio.CancelScope``
    (what anyio's wraps). Both stop anyio, trio and native asyncio code alike."""

    event: Callable[[], Flag]
    """A new event of the backend, without anyio's per-call backend look-up (anyio's
    ``Event`` class for asyncio; ``trio.Event``)."""

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        """Call ``callback()`` on the loop at ``deadline`` (:attr:`time`'s clock, seconds).
        The callback must not block; an exception from it is logged."""

    def spawn(self, context: contextvars.Context, fn: Callable[[], Awaitable[None]]) -> None:
        """Start ``fn()`` in a new task that runs in ``context`` (a copy of the caller's
        context variables). An exception from it is logged, never raised."""


def loop_id() -> int:
    """An identity of the running event loop (a transport may outlive one).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    if sniffio.current_async_library() == "trio":
        import trio

        return id(trio.lowlevel.current_trio_token())

    return id(asyncio.get_running_loop())


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
        return _asyncio_timer()
    if library == "trio":
        return _trio_timer()
    msg = f"hedgeclient runs on asyncio or trio, not {library!r}"
    raise RuntimeError(msg)


async def _run_logged(fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    except Exception:  # a detached task must never take its loop down
        logger.exception("hedgeclient: a backup task failed")


class _Entry:
    """One registered deadline; ``callback`` is None once cancelled or run."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback: Callable[[], None] | None = callback

    def cancel(self) -> None:
        self.callback = None


# A heap of (deadline, sequence, entry): compared in C, the sequence breaking ties in
# the order of registration. Cancelled entries stay until they reach the head.
_Heap = list[tuple[float, int, _Entry]]


def _push(heap: _Heap, deadline: float, sequence: int, entry: _Entry) -> None:
    while heap and heap[0][2].callback is None:  # drop cancelled entries at the head
        heapq.heappop(heap)
    heapq.heappush(heap, (deadline, sequence, entry))


def _run_due(heap: _Heap, limit: float) -> None:
    """Run (and drop) every entry due by ``limit``, in deadline order."""
    while heap and heap[0][0] <= limit:
        entry = heapq.heappop(heap)[2]
        callback = entry.callback
        if callback is not None:
            entry.callback = None
            _logged_call(callback)
    while heap and heap[0][2].callback is None:
        heapq.heappop(heap)


def _logged_call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # one request's failure must not stop the timer
        logger.exception("hedgeclient: starting a backup request failed")


# -- asyncio ------------------------------------------------------------------------

_asyncio_timers: weakref.WeakKeyDictionary[Any, _AsyncioTimer] = weakref.WeakKeyDictionary()
_last_asyncio: _AsyncioTimer | None = None  # the last one found: most programs have one loop


def _asyncio_timer() -> _AsyncioTimer:
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
        "event",
        "loop",
        "time",
    )

    def __init__(self, loop: Any) -> None:
        self.time: Callable[[], float] = _asyncio_time
        # anyio.CancelScope() looks the backend up on every call, then builds this class.
        self.cancel_scope: Callable[[], Scope] = type(anyio.CancelScope())
        self.event: Callable[[], Flag] = type(anyio.Event())
        # Only weak references to the loop, also through what this holds (the loop's
        # timer handles hold the loop): this timer is the value of a WeakKeyDictionary
        # keyed by the loop, and a strong one would keep every loop that ever hedged alive.
        self.loop: Callable[[], Any] = weakref.ref(loop)  # alive while it runs us
        self._tasks: set[Any] = set()  # strong references: the loop keeps only weak ones
        self._heap: _Heap = []
        self._sequence = 0
        self._armed = 0  # which loop handle is the current one (older ones are stale)
        self._armed_at = math.inf  # its deadline

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        self._sequence += 1
        entry = _Entry(callback)
        _push(self._heap, deadline, self._sequence, entry)
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
        limit = max(deadline, self.loop().time())
        # A loop callback runs in no task, where sniffio (hence anyio) finds no library
        # unless the program was started by anyio.run: name it for the callbacks.
        token = sniffio.current_async_library_cvar.set("asyncio")
        try:
            _run_due(self._heap, limit)
        finally:
            sniffio.current_async_library_cvar.reset(token)
        if self._heap and self._heap[0][0] < self._armed_at:
            self._arm(self._heap[0][0])

    def spawn(self, context: contextvars.Context, fn: Callable[[], Awaitable[None]]) -> None:
        # Task() copies the context current at creation: run create_task inside ours
        # (the `context=` argument of create_task needs Python 3.11).
        task = context.run(self.loop().create_task, _run_logged(fn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# -- trio ---------------------------------------------------------------------------

_run_vars: dict[str, Any] = {}  # name -> trio.lowlevel.RunVar (trio is optional)


def per_trio_run(name: str, factory: Callable[[], _T]) -> _T:
    """The object ``name`` of the running ``trio.run``, made by ``factory()`` on first use
    (one hedge timer, one server loop, ... per run)."""
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


def _trio_timer() -> _TrioTimer:
    return per_trio_run("hedgeclient_timer", _TrioTimer)


class _TrioTimer:
    """trio: a heap of deadlines served by one system task per run. Strictly private."""

    __slots__ = ("_heap", "_sequence", "_sleep", "_started", "cancel_scope", "event", "time")

    def __init__(self) -> None:
        import trio

        self.time: Callable[[], float] = trio.current_time
        self.cancel_scope: Callable[[], Scope] = trio.CancelScope
        self.event: Callable[[], Flag] = trio.Event
        self._heap: _Heap = []
        self._sequence = 0
        self._sleep: Any = None  # the CancelScope the timer task sleeps in
        self._started = False

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Handle:
        self._sequence += 1
        entry = _Entry(callback)
        _push(self._heap, deadline, self._sequence, entry)
        if not self._started:
            import trio

            self._started = True
            trio.lowlevel.spawn_system_task(self._serve, name="hedgeclient-timer")
        elif self._sleep is not None and deadline < self._sleep.deadline:
            self._sleep.deadline = deadline
        return entry

    def spawn(self, context: contextvars.Context, fn: Callable[[], Awaitable[None]]) -> None:
        import trio

        trio.lowlevel.spawn_system_task(_run_logged, fn, name="hedgeclient-backup", context=context)

    async def _serve(self) -> None:
        import trio

        heap = self._heap
        while True:
            deadline = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=deadline) as sleep:
                self._sleep = sleep
                await trio.sleep_forever()
            self._sleep = None
            _run_due(heap, trio.current_time())


# -- waits no cancellation can cut short -------------------------------------------


async def wait_shielded(event: Flag) -> None:
    """Wait for ``event`` even if the caller is cancelled meanwhile; then re-raise.

    anyio's shield stops anyio's and trio's cancellation, but not a native
    ``task.cancel()`` on asyncio (``asyncio.timeout``, a second cancel while a first
    one unwinds). On asyncio each such cancellation is absorbed until ``event`` is
    set, and the last one is raised then, so the caller still gets its cancellation,
    only later.
    """
    with anyio.CancelScope(shield=True):
        if sniffio.current_async_library() != "asyncio":
            await event.wait()
            return

        cancelled: BaseException | None = None
        while not event.is_set():
            try:
                await event.wait()
            except asyncio.CancelledError as exc:
                cancelled = exc
        if cancelled is not None:
            raise cancelled


async def run_shielded(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn()`` to its end even if the caller is cancelled meanwhile; then re-raise.

    Clean-up (closing a loser's response, repairing the pool) must not stop half-way.
    On trio (and for anyio's own cancellation) a shielded scope is enough; a native
    asyncio cancellation goes through shields, so there ``fn()`` runs in a task of
    its own that the caller waits for as :func:`wait_shielded` does.

    Raises:
        Exception: what ``fn()`` raised.
    """
    if sniffio.current_async_library() != "asyncio":
        with anyio.CancelScope(shield=True):
            await fn()
        return

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
