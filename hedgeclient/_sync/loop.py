"""The private event-loop thread of a ``SyncHedgedTransport``: anyio's blocking portal,
one per transport, started on its first use (again in a forked child).

A call from a caller's thread waits for its task on the loop; an exception raised in
the caller's thread while it waits (``KeyboardInterrupt``, or whatever a signal handler
raises) cancels that task before it propagates, as the caller's own cancellation would
on the async path. A forked child finds the parent's portal without its thread (a fork
copies only the forking thread), so it forgets it and starts its own.

Strictly private.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeVar, final

from anyio.from_thread import BlockingPortal, start_blocking_portal

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
        "_closed",
        "_cm",
        "_lock",
        "_name",
        "_on_fork",
        "_pid",
        "_portal",
        "_refusal",
        "_thread_id",
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
        """Run the plain function ``func()`` on the loop thread and return its result.

        Raises:
            RuntimeError: as :meth:`call`.
        """
        return self._portal_now().call(func)

    def call(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Run ``func(*args)`` on the loop and wait for it in this thread.

        Raises:
            RuntimeError: the loop thread was stopped (:meth:`stop`), or ``on_fork``
                refused.
            BaseException: what ``func`` raised; or, raised in this thread while it
                waited, after the task on the loop was cancelled.
        """
        future: Future[_T] = self._portal_now().start_task_soon(func, *args)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # cancels the task's scope on the loop (a no-op once done)
            raise

    def _portal_now(self) -> BlockingPortal:
        portal = self._portal
        if portal is not None and self._pid == os.getpid():
            return portal
        with self._lock:
            if self._closed:
                msg = "the SyncHedgedTransport is closed: make a new one"
                raise RuntimeError(msg)
            if self._pid != os.getpid():
                used = self._portal is not None
                # The parent's portal has no thread here. Its context manager is kept
                # for ever: collected, its generator's clean-up would wait on that
                # thread's loop, which never answers (a hang at the child's first call).
                _PARENTS.append(self._cm)
                self._portal = self._cm = None
                self._refusal = self._on_fork(used)
                self._pid = os.getpid()
            if self._refusal is not None:
                raise RuntimeError(self._refusal)
            if self._portal is None:
                self._cm = start_blocking_portal(self._backend)
                self._portal = self._cm.__enter__()
                # anyio names it "<backend>-portal-<id>"; its `name=` is not in every
                # anyio this package allows (>= 4.4), so the thread renames itself.
                self._thread_id = self._portal.call(_rename, self._name)
            return self._portal

    def stop(self, last: Callable[[], Awaitable[None]]) -> None:
        """Run ``last()`` on the loop (if it runs in this process), then stop the loop and
        join its thread. Idempotent, from any thread; later calls raise ``RuntimeError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, cm = self._portal, self._cm
            self._portal = self._cm = None
            if self._pid != os.getpid():  # a child that never sent: the parent's are not ours
                _PARENTS.append(cm)  # never closed here (see _PARENTS)
                return
        if portal is None or cm is None:
            return
        try:
            portal.call(last)
        finally:
            cm.__exit__(None, None, None)


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
    """In a forked child: a lock another thread of the parent held is held forever."""
    for loop in list(_LIVE):
        loop._lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_locks)
