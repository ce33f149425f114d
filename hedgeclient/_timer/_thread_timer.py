"""The timer of an engine on threads (``_threads`` has the idea): the deadline heap
served by one timer thread, backups on a pool of worker threads, and the task group of
the backup driver on those workers.

Strictly private.
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from heapq import heappop, heappush
from typing import Any, Final, final

from hedgeclient._timer._deadlines import Entry, Heap, LoopLag, log_task_failure, run_due
from hedgeclient._timer._threads import ThreadFlag, ThreadScope, drive, engine_thread, local

__all__ = ["WORKERS", "ThreadTimer"]

WORKERS: Final = 16
"""Worker threads per engine for backups (started as backups need them, idle ones kept).
A backup holds one from its hedge deadline until it answers or is stopped (a shut-down
socket: at once); at 5 % extra load and 30 ms per backup that is about 1.5 per 1,000
requests a second. A backup that finds none free waits in the pool's queue."""


@final
class _TaskGroup:
    """anyio's task group, as the backup driver uses it, on worker threads: children
    started with :meth:`start_soon`, cancelled by :attr:`cancel_scope`, waited for on
    exit. Strictly private."""

    def __init__(self, timer: ThreadTimer) -> None:
        self._timer = timer
        self._children: list[ThreadScope] = []
        self._running = 0
        self._idle = ThreadFlag(timer.lock)
        self.cancel_scope = self  # what the driver cancels

    def cancel(self) -> None:
        for child in self._children:
            child.cancel()

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        scope = ThreadScope()
        self._children.append(scope)
        self._running += 1
        self._timer.spawn(
            contextvars.copy_context(), functools.partial(self._child, scope, fn, *args)
        )

    async def _child(
        self, scope: ThreadScope, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any
    ) -> None:
        try:
            with scope:
                await fn(*args)
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def __aenter__(self) -> _TaskGroup:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.cancel()
        outer, local.scope = getattr(local, "scope", None), None  # shielded: wait for all
        try:
            while self._running:  # a fresh flag: the last child to end sets it
                self._idle = ThreadFlag(self._timer.lock)
                await self._idle.wait()
        finally:
            local.scope = outer


@final
class ThreadTimer:
    """The hedge timer of an engine on threads (module doc). Strictly private.

    Args:
        lock: the engine's lock.
        name: the engine's name, in its threads' names.
    """

    def __init__(self, lock: threading.Lock, name: str) -> None:
        self.lock = lock
        self.time: Callable[[], float] = time.monotonic
        self.deadline: Callable[[], float] | None = None  # a sync caller has none
        self.cancel_scope: Callable[[], ThreadScope] = ThreadScope
        self.primary_scope: Callable[[], ThreadScope] = ThreadScope
        self.lag = LoopLag()
        self._name = name
        self._heap: Heap = []
        self._sequence = 0
        self._wake = threading.Condition(lock)
        self._sleeping_until = math.inf  # the timer thread's (inf: awake, or none)
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.closed = False

    def event(self) -> ThreadFlag:
        """A new event (:class:`ThreadFlag`)."""
        return ThreadFlag(self.lock)

    def task_group(self) -> _TaskGroup:
        """A new task group of worker threads (the backup driver's)."""
        return _TaskGroup(self)

    async def wait_until(self, flag: ThreadFlag, deadline: float) -> None:
        """Wait for ``flag`` until ``deadline`` at most (``time.monotonic``)."""
        await flag.wait(None if deadline == math.inf else max(0.0, deadline - time.monotonic()))

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Entry:
        """Call ``callback()`` at ``deadline`` (``time.monotonic``), on the timer thread
        under the lock; a new earliest deadline wakes the thread."""
        self._sequence += 1
        entry = Entry((callback,))
        heap = self._heap
        while heap and not heap[0][2]:  # drop cancelled entries at the head
            heappop(heap)
        heappush(heap, (deadline, self._sequence, entry))
        if deadline < self._sleeping_until:
            if self._thread is None:
                self._start()
            else:
                self._wake.notify()
        return entry

    def deadline_of(self, scope: object) -> float:
        return math.inf

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Not used on threads (there is no loop to hand work to)."""
        raise NotImplementedError

    def spawn(
        self,
        context: contextvars.Context,
        fn: Callable[[], Coroutine[Any, Any, None]],
        *,
        guarded: bool = False,
        done: object = None,  # its coroutine always runs: fn's own clean-up is its end
    ) -> None:
        """Run ``fn()`` on a worker thread, in ``context``, driven under the lock; an
        exception is logged (by ``fn`` itself when ``guarded``)."""
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(WORKERS, f"hedgeclient-backup-{self._name}")
        pool.submit(context.run, self._run, fn)

    def _run(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        with self.lock, engine_thread(self):
            try:
                drive(fn())
            except Exception:  # a worker must never die of a request's failure
                log_task_failure()

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=_serve,
            args=(weakref.ref(self), self.lock, self._wake),
            name=f"hedgeclient-timer-{self._name}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the timer thread and the workers (join them); from outside the lock."""
        with self.lock:
            self.closed = True
            self._heap.clear()
            self._wake.notify()
            thread, self._thread = self._thread, None
            pool, self._pool = self._pool, None
        if thread is not None:
            thread.join()
        if pool is not None:
            pool.shutdown(wait=True)


def _serve(ref: weakref.ref[ThreadTimer], lock: threading.Lock, wake: threading.Condition) -> None:
    """The timer thread: serve the due deadlines, sleep until the next. It holds its
    timer only while awake, and wakes at least every :data:`IDLE_CHECK` seconds, so the
    timer of a transport dropped unclosed is collected and its thread ends."""
    with lock:
        while (timer := ref()) is not None and not timer.closed:
            heap = timer._heap
            while heap and not heap[0][2]:  # cancelled: nothing to wait for
                heappop(heap)
            now = time.monotonic()
            if heap and heap[0][0] <= now:
                with engine_thread(timer):
                    run_due(heap, now, timer.lag, now)  # each: how late it was served
                continue
            timer._sleeping_until = until = heap[0][0] if heap else math.inf
            del timer, heap  # not held while asleep
            wake.wait(min(until - now, IDLE_CHECK))
            if (timer := ref()) is not None:
                timer._sleeping_until = -math.inf  # awake: a new deadline need not wake it
            del timer


IDLE_CHECK: Final = 1.0
"""Seconds the timer thread sleeps at most before it looks whether its timer is still
alive (a transport dropped without ``close()``)."""
