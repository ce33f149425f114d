"""The private event-loop thread of a ``SyncHedgedTransport``: anyio's blocking portal,
one per transport, started on its first use (again in a forked child).

A call from a caller's thread waits for its task on the loop; an exception raised in
the caller's thread while it waits (``KeyboardInterrupt``, or whatever a signal handler
raises) cancels that task before it propagates, as the caller's own cancellation would
on the async path. A forked child finds the parent's portal without its thread (a fork
copies only the forking thread), so it forgets it and starts its own.

The portal starts and stops the loop; a request goes to the loop in one hand-over of
the loop's hedge timer (``HedgeTimer.call_soon_threadsafe``), its task detached there in
a copy of the caller's context variables (an OpenTelemetry span current in the caller's
thread is the request's parent, as with the portal). ``BlockingPortal.start_task_soon``
waits for the loop twice, once to spawn the task and once for its result: 67-146 µs of
CPU per call against 27-38 for one hand-over (``docs/benchmarks.md``, issue 26).

Strictly private.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeVar, final

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from hedgeclient._timer import HedgeTimer, Scope, current_timer

__all__ = ["Backend", "LoopThread"]

_T = TypeVar("_T")

Backend = Literal["asyncio", "trio"]


@final
class LoopThread:
    """One event loop on a thread of its own. Strictly private.

    Args:
        backend: the loop, ``"asyncio"`` or ``"trio"``.
        name: the thread's name, ``hedgeclient-loop-<name>`` (the transport's name),
            for thread dumps and profilers.
        on_fork: called (under the lock) in a forked child before its first call, with
            whether the parent had started its loop; returns why the child may not
            send (every call then raises ``RuntimeError`` with it), or ``None``.
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_calls",
        "_closed",
        "_cm",
        "_finalizer",
        "_lock",
        "_name",
        "_on_fork",
        "_pid",
        "_portal",
        "_refusal",
        "_thread_id",
        "_timer",
    )

    def __init__(self, backend: Backend, name: str, on_fork: Callable[[bool], str | None]) -> None:
        self._backend = backend
        self._name = f"hedgeclient-loop-{name}"
        self._on_fork = on_fork
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._cm: AbstractContextManager[BlockingPortal] | None = None
        self._pid = os.getpid()
        self._closed = False
        self._refusal: str | None = None
        self._thread_id: int | None = None  # the loop thread's, once it runs
        self._timer: HedgeTimer | None = None  # the loop's hedge timer, once it runs
        # The calls waiting in callers' threads: any left when the loop has ended (handed
        # over as it stopped) are failed then, never left waiting.
        self._calls: set[Future[Any]] = set()
        # Stops the portal from a thread of its own if this is collected unclosed: the
        # portal's own clean-up, run by the garbage collector wherever it runs, blocks
        # on a trio loop thread for ever (a new user's deadlock: anyio cannot stop a
        # portal from inside a trio run, and then joins its thread).
        self._finalizer: weakref.finalize[Any, Any] | None = None
        _LIVE.add(self)

    @property
    def running(self) -> bool:
        """Whether this process's loop thread runs (a forked child's does not, yet)."""
        return self._portal is not None and self._pid == os.getpid()

    @property
    def closed(self) -> bool:
        """Whether :meth:`stop` was called: the thread serves no more (a budget it held is free)."""
        return self._closed

    def elsewhere(self) -> bool:
        """Whether the calling thread is not the running loop thread (``False`` while no
        loop thread runs in this process: then nothing else touches the engine's state).
        With :meth:`run`, what a :class:`~hedgeclient.HedgeBudget` shared with a retry
        library in the caller's threads needs (``HedgeBudget.try_retry``)."""
        return self.running and threading.get_ident() != self._thread_id

    def run(self, func: Callable[[], _T]) -> _T:
        """Run the plain function ``func()`` on the loop thread and return its result
        (:meth:`call` of a coroutine that calls it: one hand-over, a retry's only).

        Raises:
            RuntimeError: as :meth:`call`.
        """

        async def on_the_loop() -> _T:
            return func()

        return self.call(on_the_loop)

    def call(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Run ``func(*args)`` on the loop and wait for it in this thread.

        Raises:
            RuntimeError: the loop thread was stopped (:meth:`stop`), or ``on_fork``
                refused.
            BaseException: what ``func`` raised; or, raised in this thread while it
                waited, after the task on the loop was cancelled.
        """
        future: _Call[_T] = _Call()
        self._calls.add(future)
        try:
            timer = self._hand_over(
                functools.partial(_spawn, future, contextvars.copy_context(), func, args)
            )
            try:
                return future.result()
            except BaseException:
                if future.cancel():  # still running: cancel its scope on the loop
                    _cancel_soon(timer, future)
                raise
        finally:
            self._calls.discard(future)

    def _hand_over(self, callback: Callable[[HedgeTimer], None]) -> HedgeTimer:
        """Call ``callback(timer)`` on the loop soon; return the loop's timer."""
        timer = self._timer
        if timer is None or self._pid != os.getpid():
            timer = self._timer_now()  # (a close() meanwhile: its loop refuses, below)
        try:
            timer.call_soon_threadsafe(functools.partial(callback, timer))
        except RuntimeError as exc:  # the loop has ended: stopped meanwhile
            raise RuntimeError(_CLOSED) from exc
        return timer

    def _timer_now(self) -> HedgeTimer:
        """The loop's hedge timer, its loop thread started first if need be.

        Raises:
            RuntimeError: as :meth:`call`.
        """
        # Started in a thread of its own, which the caller waits for: a KeyboardInterrupt
        # in the caller's thread then leaves no half-started portal, whose thread would
        # be left running and hold the caller (a new user's Ctrl-C at the first request).
        outcome: list[HedgeTimer | BaseException] = []
        starter = threading.Thread(
            target=self._start, args=(outcome,), name=f"{self._name}-start", daemon=True
        )
        starter.start()
        starter.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _start(self, outcome: list[HedgeTimer | BaseException]) -> None:
        """The loop's timer (its portal started now if need be), or why not, into
        ``outcome``; in the starter thread (:meth:`_timer_now`)."""
        try:
            outcome.append(self._started())
        except BaseException as exc:  # the caller's thread raises it
            outcome.append(exc)

    def _started(self) -> HedgeTimer:
        """The timer of this process's loop thread, which is started now if need be.

        Raises:
            RuntimeError: the loop thread was stopped, or ``on_fork`` refused.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(_CLOSED)
            if self._pid != os.getpid():
                used = self._portal is not None
                # The parent's portal has no thread here. Its context manager is
                # kept for ever: collected (or stopped by its finalizer), it would
                # wait on that thread's loop, which never answers.
                _PARENTS.append(self._cm)
                if self._finalizer is not None:
                    self._finalizer.detach()
                self._portal = self._cm = self._timer = self._finalizer = None
                self._refusal = self._on_fork(used)
                self._pid = os.getpid()
            if self._refusal is not None:
                raise RuntimeError(self._refusal)
            if self._portal is None:
                cm = start_blocking_portal(self._backend)
                portal = cm.__enter__()
                self._finalizer = weakref.finalize(self, _stop_unclosed, cm)
                self._finalizer.atexit = False  # at exit, as before: the threads are daemons
                # anyio names it "<backend>-portal-<id>"; its `name=` is not in every
                # anyio this package allows (>= 4.4), so the thread renames itself.
                self._thread_id = portal.call(_rename, self._name)
                self._timer = portal.call(_timer_of_loop)
                self._cm, self._portal = cm, portal  # last: read unlocked elsewhere
            assert self._timer is not None  # set with the portal, under the lock
            return self._timer

    def stop(self, last: Callable[[], Awaitable[None]]) -> None:
        """Run ``last()`` on the loop (if it runs in this process), then stop the loop and
        join its thread. Idempotent, from any thread but the loop thread; later calls
        raise ``RuntimeError``.

        Raises:
            RuntimeError: called on the loop thread itself (a hook of the transport), which
                could not join itself; nothing is stopped.
        """
        if self.running and threading.get_ident() == self._thread_id:
            msg = (
                "a SyncHedgedTransport cannot be closed from its own loop thread (a hook or "
                "callback it runs): close it from another thread"
            )
            raise RuntimeError(msg)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, cm = self._portal, self._cm
            self._portal = self._cm = self._timer = None
            if self._finalizer is not None:
                self._finalizer.detach()  # stopped here instead
            if self._pid != os.getpid():  # a child that never sent: the parent's are not ours
                _PARENTS.append(cm)  # never closed here (see _PARENTS)
                return
        if portal is None or cm is None:
            return
        try:
            portal.call(last)
        finally:
            cm.__exit__(None, None, None)
            for future in list(self._calls):  # handed over as the loop ended: never run
                # Pending only: the stdlib logs a done future's state at CRITICAL.
                if not future.done() and future.set_running_or_notify_cancel():
                    future.set_exception(RuntimeError(_CLOSED))


_CLOSED = "the SyncHedgedTransport is closed: make a new one"


class _Call(Future[_T]):
    """The future of one :meth:`LoopThread.call`, with its task's cancel scope once the
    task runs (which the caller's thread cancels through the loop: :func:`_cancel_soon`)."""

    scope: Scope | None = None


async def _timer_of_loop() -> HedgeTimer:
    """The hedge timer of the loop it runs on (the loop thread's)."""
    return current_timer()


def _spawn(
    future: _Call[_T],
    context: contextvars.Context,
    func: Callable[..., Awaitable[_T]],
    args: tuple[Any, ...],
    timer: HedgeTimer,
) -> None:
    """On the loop, in a callback: start ``func(*args)``'s task for ``future``, in the
    caller's ``context`` (a detached task that delivers every outcome to ``future``)."""
    if not future.cancelled():  # cancelled before it began: nothing to start
        timer.spawn(context, functools.partial(_run, future, func, args, timer), guarded=True)


async def _run(
    future: _Call[_T], func: Callable[..., Awaitable[_T]], args: tuple[Any, ...],
    timer: HedgeTimer,
) -> None:  # fmt: skip
    """The task of one call: ``func(*args)`` under a cancel scope that the caller's
    thread cancels (:func:`_cancel_soon`), its result or exception into ``future``,
    which stays pending until then (a pending future can still be cancelled)."""
    scope = timer.cancel_scope()
    future.scope = scope
    try:
        with scope:
            if future.cancelled():  # in the meantime
                return
            result = await func(*args)
            if future.set_running_or_notify_cancel():
                future.set_result(result)
    except BaseException as exc:
        if future.set_running_or_notify_cancel():  # the loop's cancellation, at its end:
            ended = isinstance(exc, anyio.get_cancelled_exc_class())  # "closed" to the caller
            future.set_exception(RuntimeError(_CLOSED) if ended else exc)
        if not isinstance(exc, Exception):
            raise


def _cancel_soon(timer: HedgeTimer, future: _Call[Any]) -> None:
    """Cancel the task of ``future`` (cancelled in the caller's thread) on the loop; a
    task not begun yet sees the future cancelled as it begins (:func:`_run`)."""

    def cancel(_: HedgeTimer) -> None:
        if future.scope is not None:
            future.scope.cancel()

    with contextlib.suppress(RuntimeError):  # the loop has ended, and the task with it
        timer.call_soon_threadsafe(functools.partial(cancel, timer))


def _rename(name: str) -> int:
    """Name the loop thread (it runs there); return its identity."""
    threading.current_thread().name = name
    return threading.get_ident()


_PARENTS: list[object] = []
"""In a forked child, the portals of the parent, never to be closed here: their
clean-up would wait for a loop thread the child does not have."""

_LIVE: weakref.WeakSet[LoopThread] = weakref.WeakSet()
"""The loop threads of this process, whose locks a forked child renews."""


def _renew_locks() -> None:
    """In a forked child: a lock another thread of the parent held is held forever;
    the parent's calls in flight are not the child's."""
    for loop in list(_LIVE):
        loop._lock = threading.Lock()
        loop._calls = set()
        if loop._finalizer is not None:  # the parent's portal: never stopped here
            loop._finalizer.detach()
            loop._finalizer = None


def _stop_unclosed(cm: AbstractContextManager[BlockingPortal]) -> None:
    """The finalizer of a loop thread collected unclosed: stop its portal from a new
    daemon thread, never the collecting one (a trio loop thread cannot stop a portal,
    and none should wait on another's thread)."""
    threading.Thread(
        target=cm.__exit__, args=(None, None, None), name="hedgeclient-stop", daemon=True
    ).start()


os.register_at_fork(after_in_child=_renew_locks)
