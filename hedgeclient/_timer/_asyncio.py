"""The asyncio hedge timer, the look-up of the running loop's timer, and the waits no
cancellation cuts short: the library's one module of raw asyncio (the trio timer is in
``_trio``, what both share in ``_deadlines``).

**The timer.** The deadline heap served by one loop handle, detached tasks, and two
factories of cancel scopes, whose cancel from another task builds no task repr.

**Why not anyio's cancel as it is.** Since anyio 4.11 a cancel made inside an asyncio
task writes the task's repr into its message (43.5 k instructions, 4 to 8 µs;
``docs/benchmarks.md``, "Unit costs"), and a hedged request cancels across tasks once. So
a detached task (the backup driver) is a :class:`_DetachedTask`, whose repr is
``object``'s (39.7 k instructions less a cancel), and a scope from ``cancel_scope`` (the
backups', cancelled by the caller's task when the primary wins) defers a cancel from
another task to a loop callback, where no task is current (22.5 k less, one more pass of
the loop; the canceller sees ``cancel_called`` false until then). The primary's scope
is anyio's own (``primary_scope``): a winning backup cancels it from its detached task,
where the override would only call ``super()``. Its rare other cancellers build a repr
once (``Race.cancel()`` as the transport closes; a task a program's factory made).

**The look-up.** :func:`current_timer` runs once per request and :func:`now` (the
default clock of the transport's pure pieces) a few times. On asyncio the timer is in a
one-entry cache (most programs run one loop), checked with C calls only; on trio in a
``RunVar`` of the run (:func:`per_trio_run`); the trio module is imported once, when a
trio run first asks, and asked again only when the cache misses.

**Shielded.** anyio's shield stops anyio's and trio's cancellation, but not a native
``task.cancel()`` on asyncio (``asyncio.timeout``, a second cancel while a first one
unwinds): there each such cancellation is absorbed until the work is done
(:func:`wait_shielded`, :func:`run_shielded`), and the last one is raised then, so the
caller still gets its cancellation, only later.

Strictly private.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from heapq import heappop, heappush
from typing import Any, TypeVar

import anyio
import sniffio

from hedgeclient._timer._deadlines import Entry, Heap, LoopLag, run_due, run_logged, wait_until
from hedgeclient._timer._threads import THREADS, shielded_on_thread
from hedgeclient._timer._threads import local as threads_local
from hedgeclient._timer.protocols import Flag, Handle, HedgeTimer, Scope

__all__ = [
    "asyncio_timer",
    "current_timer",
    "loop_id",
    "now",
    "per_trio_run",
    "run_shielded",
    "wait_shielded",
]

_T = TypeVar("_T")

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
    its class and address, built in C (see the module doc). Strictly private."""

    __slots__ = ()

    __repr__ = object.__repr__


_scope_class: Callable[[], Scope] | None = None  # made once, inside the first loop


def _cancel_scope_class() -> Callable[[], Scope]:
    """anyio's asyncio cancel scope class, subclassed so that a cancel from another task
    goes through a loop callback (see the module doc). Made on first use, from a running
    loop: anyio picks its scope class by the running backend."""
    global _scope_class
    if _scope_class is not None:
        return _scope_class
    anyio_scope: Any = type(anyio.CancelScope())

    class _CancelScope(anyio_scope):  # type: ignore[misc]
        """Strictly private: see :func:`_cancel_scope_class`."""

        __slots__ = ()

        def cancel(self, reason: str | None = None) -> None:
            task = asyncio.current_task()
            if task is None or type(task) is _DetachedTask:
                super().cancel(reason)
            else:
                asyncio.get_running_loop().call_soon(super().cancel, reason)

    _scope_class = _CancelScope
    return _scope_class


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
        "primary_scope",
        "task_group",
        "time",
        "wait_until",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Only weak references to the loop, also through what this holds (the loop's
        # timer handles hold the loop): this timer is the value of a WeakKeyDictionary
        # keyed by the loop, and a strong one would keep every loop that ever hedged alive.
        self.loop: Callable[[], Any] = weakref.ref(loop)  # alive while it runs us
        self.time: Callable[[], float] = _clock_of(loop)
        self.cancel_scope: Callable[[], Scope] = _cancel_scope_class()
        self.primary_scope: Callable[[], Scope] = type(anyio.CancelScope())  # anyio's own
        self.event: Callable[[], Flag] = type(anyio.Event())  # without anyio's look-up
        self.deadline: Callable[[], float] = anyio.current_effective_deadline
        self.task_group: Callable[[], Any] = anyio.create_task_group
        self.wait_until = wait_until
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
        heap = self._heap
        if heap and heap[0][0] <= limit:  # (a stale wake-up: nothing due, nothing to run)
            token = sniffio.current_async_library_cvar.set("asyncio")
            try:
                run_due(heap, limit, self.lag, now)  # each: how late it was served
            finally:
                sniffio.current_async_library_cvar.reset(token)
        while heap and not heap[0][2]:  # drop cancelled entries at the head
            heappop(heap)
        if self._heap and self._heap[0][0] < self._armed_at:
            self._arm(self._heap[0][0])

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        loop = self.loop()
        if loop is None:  # collected: it ended (else asyncio raises RuntimeError itself)
            msg = "Event loop is closed"
            raise RuntimeError(msg)
        loop.call_soon_threadsafe(callback)

    def spawn(
        self,
        context: contextvars.Context,
        fn: Callable[[], Coroutine[Any, Any, None]],
        *,
        guarded: bool = False,
    ) -> None:
        loop = self.loop()
        coro = fn() if guarded else run_logged(fn)  # guarded: the task runs fn's own
        if loop.get_task_factory() is None:
            task = _DetachedTask(coro, loop=loop, name="hedgeclient-backup", context=context)
        else:  # the program's own factory (instrumentation, eager tasks) makes it
            task = loop.create_task(coro, name="hedgeclient-backup", context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# -- the look-up ------------------------------------------------------------------------

_library = sniffio.thread_local  # trio names itself here, per thread (sniffio's first rule)
_library_var = sniffio.current_async_library_cvar  # a runner's name (sniffio's second)
_running_loop = asyncio.get_running_loop
_last: Any = None  # the asyncio timer found last (the backend's ``_AsyncioTimer``)
_trio_factory: Callable[[], HedgeTimer] | None = None  # ``_trio.TrioTimer``, once imported
_run_vars: dict[str, Any] = {}  # name -> trio.lowlevel.RunVar (trio is optional)


def current_timer() -> HedgeTimer:
    """Return the hedge timer of the running event loop (created on first use).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    library = _library.name
    if library is None:  # not trio: asyncio, or a runner's name (sniffio's second rule)
        timer = _last
        if timer is not None and _library_var.get() in (None, "asyncio"):
            try:
                if timer.loop() is _running_loop():
                    return timer  # type: ignore[no-any-return]
            except RuntimeError:  # no asyncio loop runs here: ask sniffio below
                pass
    elif library == "trio" and _trio_factory is not None:
        return per_trio_run("hedgeclient_timer", _trio_factory)
    elif library == THREADS:  # a sync client's thread drives its engine (``_threads``)
        return threads_local.timer  # type: ignore[no-any-return]
    return _find()


def _find() -> HedgeTimer:
    """:func:`current_timer`'s look-up when its cache misses: sniffio, then the backend
    (trio's imported here, once: an ``import`` statement run on every call would cost
    more than the look-up)."""
    global _last, _trio_factory  # the caches of current_timer()
    library = sniffio.current_async_library()
    if library == "asyncio":
        timer = _last = asyncio_timer(_running_loop())
        return timer
    if library == "trio":
        from hedgeclient._timer._trio import TrioTimer

        _trio_factory = TrioTimer
        return per_trio_run("hedgeclient_timer", TrioTimer)
    msg = f"hedgeclient runs on asyncio or trio, not {library!r}"
    raise RuntimeError(msg)


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


def now() -> float:
    """The running event loop's clock in seconds: ``anyio.current_time()``, without its
    look-up (the default clock of the transport's own pure pieces).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    library = _library.name  # sniffio's first rule, as in current_timer()
    if library == "trio":
        import trio

        return trio.current_time()
    if library == THREADS:  # a sync client's engine (``_threads``)
        return time.monotonic()
    return _running_loop().time()


def loop_id() -> int:
    """An identity of the running event loop (a transport may outlive one).

    Raises:
        RuntimeError: not called from a running asyncio or trio event loop.
    """
    if sniffio.current_async_library() == "trio":
        import trio

        return id(trio.lowlevel.current_trio_token())
    return id(_running_loop())


# -- waits and clean-up no cancellation cuts short -------------------------------------


async def wait_shielded(event: Flag) -> None:
    """Wait for ``event`` even if the caller is cancelled meanwhile; then re-raise.

    On asyncio each native cancellation is absorbed until ``event`` is set, and the
    last one is raised then (see the module doc).
    """
    if _library.name == THREADS:  # a sync client's engine: nothing cancels it meanwhile
        await shielded_on_thread(event.wait)
        return
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
    its own that the caller waits for, absorbing each native cancellation meanwhile.

    Raises:
        Exception: what ``fn()`` raised.
    """
    if _library.name == THREADS:  # a sync client's engine: nothing cancels it meanwhile
        await shielded_on_thread(fn)
        return
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
