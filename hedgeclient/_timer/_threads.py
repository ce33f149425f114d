"""The hedge timer on threads: the async engine driven by a sync client's own threads.

``SyncHedgedTransport`` runs the engine's request path (``_request``, the race) on the
caller's thread, with no event loop. The path is a coroutine that awaits only what this
module and the inner transport give it: a send, a body read or close, a scope, an event.
Each of those *blocks the thread* instead of suspending, so the coroutine never suspends:
:func:`drive` runs a whole request with one ``send(None)``. What runs beside it (a
backup, the backups of a driver) runs on a worker thread, driven the same way.

**One thread at a time.** The engine was written for one event loop. So a thread holds
the engine's **lock** while it runs engine code, and lets go of it only where it blocks:
the inner sync transport's call and a body's read or close (``_sync.threads``), an
event's wait (:class:`ThreadFlag`), the timer thread's sleep. The policy objects (delay,
budget, selector, health, reports) then see one thread at a time, as on a loop, and need
no lock of their own; user code the engine calls (hooks, a selector) runs under it and
must not block, as on a loop.

**Cancellation.** A :class:`ThreadScope` belongs to the thread that entered it. The
socket its thread blocks on is noted on it (``_compat.sockets``); :meth:`ThreadScope.cancel`
(from any thread, under the lock) shuts that socket down, so the blocked read returns at
once, httpcore closes the connection (the replica sees the client leave) and frees its
pool slot, and the attempt ends as cancelled: ``asyncio.CancelledError``, the exception
anyio's asyncio backend names (:func:`cancelled_class`), which the scope swallows as
anyio's does. A thread waiting on an event wakes with it too. A thread that is not
blocked finds the scope cancelled at its next send, read or wait.

**The deadlines** (``_thread_timer``). One timer thread per engine (started with the
first deadline) sleeps until the earliest live deadline of the heap (``_deadlines``) and
serves what is due, under the lock. Registering or cancelling a deadline wakes it only
when the new one is earlier than its sleep: a request that answers before its hedge
delay costs a heap push and a flag, and the thread wakes about once per hedge delay,
not once per request.

Prior art: trio's ``from_thread``/``to_thread`` and anyio's blocking portal hand work to
a loop; here there is no loop to hand it to. Strictly private.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar, final

import anyio
import sniffio

from hedgeclient._clock import THREADS

__all__ = [
    "THREADS",
    "ThreadFlag",
    "ThreadScope",
    "cancelled_class",
    "drive",
    "engine_thread",
    "local",
    "shield",
    "shielded_on_thread",
]

_T = TypeVar("_T")

logger = logging.getLogger("hedgeclient")


local = threading.local()
"""Per thread: ``timer``, the engine it drives (``None`` outside); ``scope``, its
innermost :class:`ThreadScope` (``None``: nothing can cancel what it does)."""


def drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end in this thread, where every await blocks and none suspends.

    Raises:
        RuntimeError: the coroutine suspended (it awaited something of an event loop).
        BaseException: whatever the coroutine raised.
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except BaseException:
        coro.close()  # not started (an interrupt before its first step): no warning left
        raise
    coro.close()
    msg = "hedgeclient: the engine awaited an event loop on a sync client's thread"
    raise RuntimeError(msg)


@contextlib.contextmanager
def engine_thread(timer: Any) -> Iterator[None]:
    """This thread drives ``timer``'s engine (a ``ThreadTimer``) until the block ends
    (its lock held)."""
    old, old_name = getattr(local, "timer", None), sniffio.thread_local.name
    local.timer, sniffio.thread_local.name = timer, THREADS
    try:
        yield
    finally:
        local.timer, sniffio.thread_local.name = old, old_name


@final
class ThreadScope:
    """A cancel scope of the thread that enters it (module doc). Strictly private."""

    __slots__ = ("_parent", "cancel_called", "cancelled_caught", "sock", "stopper", "waker")

    def __init__(self) -> None:
        self.cancel_called = False
        self.cancelled_caught = False
        self.sock: socket.socket | None = None  # what its thread blocks on now
        self.waker: threading.Event | None = None  # what its thread waits on now
        # Stops its thread's request if it waits in its pool's queue (no socket yet).
        self.stopper: Callable[[], object] | None = None
        self._parent: ThreadScope | None = None

    def __enter__(self) -> ThreadScope:
        self._parent = getattr(local, "scope", None)
        if self._parent is not None and self._parent.cancelled:
            self.cancel_called = True  # inside a cancelled scope: cancelled too
        local.scope = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        local.scope = self._parent
        if (
            exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
            and self.cancel_called
            and (self._parent is None or not self._parent.cancelled)
        ):
            self.cancelled_caught = True
            return True  # its own cancellation, as anyio's scope swallows it
        return False

    @property
    def cancelled(self) -> bool:
        """Whether this scope or one it is inside was cancelled."""
        scope: ThreadScope | None = self
        while scope is not None:
            if scope.cancel_called:
                return True
            scope = scope._parent
        return False

    def cancel(self) -> None:
        """Cancel what the scope's thread runs (from any thread): its blocked socket is
        shut down, its wait woken, its request taken out of its pool's queue."""
        self.cancel_called = True
        sock, waker, stopper = self.sock, self.waker, self.stopper
        if stopper is not None:
            stopper()
        if sock is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to stop
                sock.shutdown(socket.SHUT_RDWR)
        if waker is not None:
            waker.set()


def cancelled_class() -> type[BaseException]:
    """The running backend's cancellation exception: ``anyio.get_cancelled_exc_class()``,
    or ``asyncio.CancelledError`` on an engine thread (what this module raises)."""
    if sniffio.thread_local.name == THREADS:
        return asyncio.CancelledError
    return anyio.get_cancelled_exc_class()


async def shielded_on_thread(fn: Callable[[], Awaitable[Any]]) -> None:
    """``fn()`` on an engine thread, with no scope that could cancel it meanwhile."""
    with _no_scope():
        await fn()


@contextlib.contextmanager
def _no_scope() -> Iterator[None]:
    scope, local.scope = getattr(local, "scope", None), None
    try:
        yield
    finally:
        local.scope = scope


def shield() -> contextlib.AbstractContextManager[Any]:
    """A scope that nothing outside cancels: anyio's shielded ``CancelScope``, or on an
    engine thread no scope at all while it runs."""
    if sniffio.thread_local.name == THREADS:
        return _no_scope()
    return anyio.CancelScope(shield=True)


def check_cancelled() -> None:
    """Raise the cancellation if the calling thread's scope was cancelled."""
    scope: ThreadScope | None = getattr(local, "scope", None)
    if scope is not None and scope.cancelled:
        raise asyncio.CancelledError


@final
class ThreadFlag:
    """An event whose :meth:`wait` blocks the thread, the lock let go meanwhile; a
    cancel of the waiter's scope wakes it with the cancellation. Strictly private."""

    __slots__ = ("_lock", "_set", "_waiters")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._set = False
        self._waiters: list[threading.Event] = []

    def set(self) -> None:
        """Set the flag and wake every waiter (under the lock)."""
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._set

    async def wait(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (it blocks)
        """Wait until the flag is set (``timeout`` seconds at most); return whether it is.

        Raises:
            asyncio.CancelledError: the waiting thread's scope was cancelled first.
        """
        if self._set:
            return True
        check_cancelled()
        scope: ThreadScope | None = getattr(local, "scope", None)
        waiter = threading.Event()
        self._waiters.append(waiter)
        if scope is not None:
            scope.waker = waiter
        self._lock.release()
        try:
            waiter.wait(timeout)
        finally:
            self._lock.acquire()
            if scope is not None:
                scope.waker = None
            with contextlib.suppress(ValueError):  # set() took it already
                self._waiters.remove(waiter)
        if not self._set:
            check_cancelled()
        return self._set
