"""The asyncio hedge timer, the look-up of the running loop's timer, and the waits no
cancellation cuts short: the library's one module of raw asyncio (the trio timer is in
``_trio``, what both share in ``_deadlines``).

**The timer.** The deadline heap served by one loop handle, detached tasks, events
(``asyncio.Event``) and cancel scopes (:class:`_TaskScope`).

**Why not anyio's scope and event.** Entering and leaving an anyio ``CancelScope`` costs
28.9 k instructions, its cross-task cancel 117 k beyond a wake, an anyio ``Event`` 40 k
and a pass of the loop; ``Task.cancel()`` 3.2 k (``docs/benchmarks.md``, "Unit costs").
So :class:`_TaskScope` counts ``Task.cancel()`` and ``uncancel()`` as ``asyncio.timeout``
does: it composes with anyio's scopes and ``asyncio.timeout`` around or inside it, and
never swallows a cancellation not its own. As anyio's delivery does, a cancel waits (a
pass of the loop at a time) while the task is inside an anyio scope with
``shield=True`` entered within this one (httpcore shields its clean-up). That reads
anyio's task state (``_task_states``, a scope's ``_parent_scope``), which also gives
the caller's effective deadline when a backup is due (``deadline_of``), not per request:
anyio's only internals we read; without them a cancel goes at once.

**The look-up.** :func:`current_timer` (once per request) and :func:`now` find the
asyncio timer in a one-entry cache checked with C calls only, trio's in a ``RunVar``
of the run (``_trio.per_trio_run``; the trio module is imported when a run first asks).

**Shielded.** A native ``task.cancel()`` goes through anyio's shields, so
:func:`wait_shielded` and :func:`run_shielded` absorb each one until the work is done,
and raise the last one then: the caller still gets its cancellation, only later.

Strictly private.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import time
import weakref
from collections.abc import Callable, Coroutine
from heapq import heappop, heappush
from typing import Any

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
    "run_shielded",
    "wait_shielded",
]

_timers: weakref.WeakKeyDictionary[Any, _AsyncioTimer] = weakref.WeakKeyDictionary()


def asyncio_timer(loop: asyncio.AbstractEventLoop) -> _AsyncioTimer:
    """The timer of ``loop``, the running one (created on first use; held weakly)."""
    timer = _timers.get(loop)
    if timer is None:
        timer = _timers[loop] = _AsyncioTimer(loop)
    return timer


def _clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time`` without holding the loop: ``time.monotonic`` (a C call) for asyncio's
    own clock, checked once (uvloop's or a test's clock stays the loop's)."""
    if type(loop).time is asyncio.BaseEventLoop.time and abs(loop.time() - time.monotonic()) < 1:
        return time.monotonic
    return lambda: asyncio.get_running_loop().time()


class _DetachedTask(asyncio.Task[None]):
    """A detached task of hedgeclient's (a backup driver), whose repr is ``object``'s, built
    in C: anyio >= 4.11 writes the canceller's repr into a cancel its scopes make there
    (43.5 k instructions; the driver's task group). Strictly private."""

    __slots__ = ()

    __repr__ = object.__repr__


_current_task = asyncio.current_task
_anyio_states: Any = {}  # anyio's asyncio task states: the scope a task runs in (module doc)
with contextlib.suppress(ImportError):  # else no shield is seen, the deadline read at once
    from anyio._backends._asyncio import _task_states as _anyio_states
_deadline = anyio.current_effective_deadline if type(_anyio_states) is dict else None


def _anyio_scope(task: asyncio.Task[Any]) -> Any:
    """The innermost anyio cancel scope ``task`` runs in, or ``None``."""
    state = _anyio_states.get(task)
    return None if state is None else getattr(state, "cancel_scope", None)


class _TaskScope:
    """A cancel scope of one asyncio task (see the module doc). ``cancel()`` from another
    task, or from a loop callback, is delivered at once; from the scope's own task, or
    before the scope is entered, at the task's next suspension inside it. Strictly private.
    """

    # No __init__: made per request by the C constructor, each field its class default
    # until set (a Python call less per scope; issue 25).
    _task: asyncio.Task[Any] | None = None
    _cancelling = 0  # the task's other cancellations pending as it entered
    _outer: Any = None  # anyio's scope around this one: those inside are below it
    _delivered = cancel_called = cancelled_caught = False
    _waits = 0  # passes a cancel waited for a shield to end (``_deliver``)

    def __enter__(self) -> _TaskScope:
        task = self._task = _current_task()
        if task is None:
            msg = "a cancel scope is entered in an asyncio task"
            raise RuntimeError(msg)
        self._cancelling = task.cancelling()
        self._outer = _anyio_scope(task)
        if self.cancel_called:
            _running_loop().call_soon(self._deliver)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> bool:
        task, self._task = self._task, None
        # Ours, delivered: taken back; swallowed unless another cancellation came too.
        if self._delivered and task is not None and task.uncancel() <= self._cancelling:
            self.cancelled_caught = exc_type is asyncio.CancelledError
            return self.cancelled_caught
        return False

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        task = self._task
        if task is None:  # not entered yet (entering delivers it), or left
            return
        if task is _current_task():  # running: the next suspension is inside this scope
            _running_loop().call_soon(self._deliver)
        else:  # suspended inside this scope
            self._deliver()

    def _deliver(self) -> None:
        task = self._task
        if task is None or self._delivered:  # left meanwhile
            return
        scope, outer = _anyio_scope(task), self._outer
        while scope is not None and scope is not outer:  # anyio's scopes inside this one
            if scope.shield:  # look again at once, then every 2 ms at most: unlike anyio
                waits = self._waits = self._waits + 1  # we hear no shield end; each pass spins
                pause = 0.0 if waits <= 16 else min(0.0001 * 2 ** (waits - 16), 0.002)
                _running_loop().call_later(pause, self._deliver)
                return
            scope = scope._parent_scope
        self._delivered = True
        task.cancel()


class _AsyncioTimer:
    """asyncio: a deadline heap served by one ``loop.call_at`` handle armed for its
    earliest deadline (registering and cancelling a deadline is a heap push and a flag;
    the loop's own heap does not fill with cancelled handles), detached tasks. Strictly
    private."""

    __slots__ = (
        "__weakref__", "_armed", "_armed_at", "_heap", "_sequence", "_tasks", "cancel_scope",
        "deadline", "event", "lag", "loop", "primary_scope", "task_group", "time", "wait_until",
    )  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Only weak references to the loop, also through what this holds (its timer
        # handles hold it): a strong one would keep every loop that ever hedged alive.
        self.loop: Callable[[], Any] = weakref.ref(loop)  # alive while it runs us
        self.time: Callable[[], float] = _clock_of(loop)
        self.cancel_scope: Callable[[], Scope] = _TaskScope
        self.primary_scope: Callable[[], Scope] = _TaskScope
        self.event: Callable[[], Flag] = asyncio.Event
        self.deadline: Callable[[], float] | None = _deadline  # None: read in deadline_of
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

    def deadline_of(self, scope: Scope | None) -> float:
        # anyio's current_effective_deadline() as it was where ``scope`` was entered: the
        # anyio scopes around it (``_outer`` on), read when a backup is due, not per request.
        outer, deadline = getattr(scope, "_outer", None), math.inf
        while outer is not None:
            if outer.cancel_called:
                return -math.inf
            deadline = min(deadline, outer.deadline)
            if outer.shield:
                break
            outer = outer._parent_scope
        return deadline

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
        done: Flag | None = None,
    ) -> None:
        loop = self.loop()
        coro = fn() if guarded else run_logged(fn)  # guarded: the task runs fn's own
        if loop.get_task_factory() is None:
            task = _DetachedTask(coro, loop=loop, name="hedgeclient-backup", context=context)
        else:  # the program's own factory (instrumentation, eager tasks) makes it
            task = loop.create_task(coro, name="hedgeclient-backup", context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if done is not None:  # also for a task cancelled before it ran its coroutine
            task.add_done_callback(lambda _: done.set())


# -- the look-up ------------------------------------------------------------------------

_library = sniffio.thread_local  # trio names itself here, per thread (sniffio's first rule)
_library_var = sniffio.current_async_library_cvar  # a runner's name (sniffio's second)
_running_loop = asyncio.get_running_loop
_last: Any = None  # the asyncio timer found last (the backend's ``_AsyncioTimer``)
_trio_timer: Callable[[], HedgeTimer] | None = None  # the run's ``TrioTimer``, once imported


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
    elif library == "trio" and _trio_timer is not None:
        return _trio_timer()
    elif library == THREADS:  # a sync client's thread drives its engine (``_threads``)
        return threads_local.timer  # type: ignore[no-any-return]
    return _find()


def _find() -> HedgeTimer:
    """:func:`current_timer`'s look-up when its cache misses: sniffio, then the backend
    (trio's imported here, once: an ``import`` statement run on every call would cost
    more than the look-up)."""
    global _last, _trio_timer  # the caches of current_timer()
    library = sniffio.current_async_library()
    if library == "asyncio":
        timer = _last = asyncio_timer(_running_loop())
        return timer
    if library == "trio":
        from hedgeclient._timer._trio import TrioTimer, per_trio_run

        _trio_timer = functools.partial(per_trio_run, "hedgeclient_timer", TrioTimer)
        return _trio_timer()
    msg = f"hedgeclient runs on asyncio or trio, not {library!r}"
    raise RuntimeError(msg)


def now() -> float:
    """The running event loop's clock in seconds: ``anyio.current_time()`` without its
    look-up (the default clock of the transport's pure pieces).

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
    """Wait for ``event`` even if the caller is cancelled meanwhile; then re-raise (on
    asyncio the last native cancellation, absorbed until then: see the module doc)."""
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


async def run_shielded(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
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
    task = asyncio.get_running_loop().create_task(fn())
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
