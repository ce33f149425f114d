"""What both hedge timers share: the deadline heap a timer serves, and how late the loop
serves it (the client's own lag). No backend code: the look-up of the running loop's
timer and the asyncio timer are in ``_asyncio``, the trio timer in ``_trio``.

**The heap.** A list of ``(deadline, sequence, entry)`` compared in C, the sequence
breaking ties in the order of registration. A cancelled :class:`Entry` stays until it
reaches the head. :func:`run_due` runs what is due, each callback's exception logged
(one request's failure must not stop the timer).

**The lag.** Each deadline the timer serves is an instant it promised to run at; it runs
late when the client itself is busy (a CPU-bound handler, a burst of responses to parse,
a machine short of CPU). That lateness is in every latency measured on the same loop
and in every backup the loop would start: it belongs to the client, not to a replica.
The timer serves the deadlines of requests in flight, cancelled or not (a cancelled
deadline stays in the heap and the wake-up armed for it still happens), so while
requests flow it measures the lag several times per hedge delay, at no extra wake-up and
no heartbeat task: each wake-up is one measure, as late as its earliest due deadline,
and each deadline it serves is evidence (after a freeze that held several requests, one
wake-up serves them all).

:class:`LoopLag` keeps two figures: :attr:`LoopLag.last`, the lateness of the deadline
served last, and :meth:`LoopLag.recent`, the typical lateness lately, an exponentially
weighted mean over the deadlines served (weight :data:`LAG_WEIGHT` for the newest): a
burst or a CPU-starved client makes every deadline late and lifts it within a few,
while one late wake-up (a garbage collection) moves it by a quarter and fades, so a
route with a small delay on a slightly jittery loop still learns. It reads 0 until
:data:`LAG_EVIDENCE` deadlines have been served since the loop was last idle for
:data:`LAG_MEMORY` seconds: one late deadline after a pause (imports, a TLS handshake)
is one-off work, not a loop that stays late; a freeze that holds several requests
serves several deadlines late at once, and counts at once.

Strictly private.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, final

import anyio

__all__ = [
    "LAG_EVIDENCE",
    "LAG_MARK",
    "LAG_MEMORY",
    "LAG_WEIGHT",
    "Entry",
    "Heap",
    "LoopLag",
    "log_task_failure",
    "run_due",
    "run_logged",
    "wait_until",
]

logger = logging.getLogger("hedgeclient")

# -- the heap ---------------------------------------------------------------------------


class Entry(list[Callable[[], None]]):
    """One registered deadline: a list of its callback, emptied once cancelled or run.

    A list, so that registering (``Entry((callback,))``) and cancelling
    (:meth:`cancel`, ``list.clear``) a deadline, which nearly every request does, run
    no Python code.
    """

    __slots__ = ()

    cancel = list.clear


Heap = list[tuple[float, int, Entry]]
"""(deadline, sequence, entry), a ``heapq``; cancelled entries stay until the head."""


def run_due(heap: Heap, limit: float, lag: LoopLag, now: float) -> None:
    """Run (and drop) every entry due by ``limit``, in deadline order, once ``lag`` has
    been told how late this wake-up served them at ``now``: as late as the earliest (a
    cancelled one too: its deadline was a promise the loop kept late or on time all the
    same), and how many deadlines it served (after a freeze that held several requests,
    each is evidence). All are measured before any runs: after a freeze, the first
    backup decided knows the whole of it."""
    due: list[Entry] = []
    earliest = limit
    while heap and heap[0][0] <= limit:
        deadline, _, entry = heapq.heappop(heap)
        if not due:
            earliest = deadline  # popped in deadline order: the first is the earliest
        due.append(entry)
    if due:
        lag.observe(now - earliest, now, len(due))
    for entry in due:
        if entry:
            callback = entry.pop()
            try:
                callback()
            except Exception:  # one request's failure must not stop the timer
                logger.exception("hedgeclient: starting a backup request failed")
    while heap and not heap[0][2]:  # drop cancelled entries at the head
        heapq.heappop(heap)


async def wait_until(flag: Any, deadline: float) -> None:
    """Wait for ``flag`` (an anyio or trio event) until ``deadline`` at most (the loop's
    clock): the asyncio and trio timers' ``wait_until`` (anyio's scope, no backend code)."""
    with anyio.CancelScope(deadline=deadline):
        await flag.wait()


async def run_logged(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn()``, a detached task's work: an exception is logged, never raised."""
    try:
        await fn()
    except Exception:  # a detached task must never take its loop down
        log_task_failure()


def log_task_failure() -> None:
    """Log the exception being handled as a detached task's failure (``hedgeclient: a
    backup task failed``, with its traceback). Called from an ``except`` clause, by
    :func:`run_logged` and by a task's coroutine that catches its own exceptions (one
    spawned ``guarded``: the race's backups)."""
    logger.exception("hedgeclient: a backup task failed")


# -- the lag ----------------------------------------------------------------------------

LAG_MEMORY = 1.0
"""Seconds after the last deadline served at which the lag is forgotten."""

LAG_EVIDENCE = 4
"""Deadlines served since the loop was last idle before :meth:`LoopLag.recent` counts."""

LAG_MARK = 0.001
"""Seconds: a wake-up at least this late is remembered for :meth:`LoopLag.during`.
Every Python event loop serves its timers a fraction of a millisecond late; on a quiet
loop nothing is remembered, and :meth:`LoopLag.during` costs one comparison."""

LAG_MARKS = 64
"""Late wake-ups remembered: a request's life spans a few wake-ups of a busy loop
(a hedge delay holds several), so the oldest are long past any request in flight."""

LAG_WEIGHT = 0.25
"""The weight of the newest lateness in :meth:`LoopLag.recent` (an exponentially
weighted mean): after a burst ends, eight on-time deadlines bring it to a tenth."""


@final
class LoopLag:
    """The lateness of one event loop's hedge timer, in seconds. Strictly private.

    Only the loop's own thread writes it; :attr:`last` and :attr:`typical` may be read
    from any thread (float attributes, replaced whole). :attr:`typical` bounds
    :meth:`recent` and :attr:`marked` tells whether :meth:`during` may find a late
    wake-up, so a caller with a threshold reads them before calling (a quiet loop: no
    call).
    """

    __slots__ = ("_at", "_marks", "_served", "_typical", "last", "marked", "typical")

    def __init__(self) -> None:
        # (when, how late) of the late wake-ups lately, oldest first
        self._marks: deque[tuple[float, float]] = deque(maxlen=LAG_MARKS)
        self._served = 0  # deadlines served since the loop was last idle
        self._typical = 0.0
        self._at = -math.inf  # when the last deadline was served
        self.last = 0.0  # how late it was
        self.typical = 0.0  # recent() as of that deadline, for a gauge on another thread
        self.marked = -math.inf  # when the latest wake-up remembered for during() was

    def observe(self, late: float, now: float, served: int = 1) -> None:
        """The timer woke ``late`` seconds after its earliest due deadline, at ``now``,
        and served ``served`` deadlines (each counts as evidence; the wake-up's lateness
        is weighed once: a wake-up late by L serves its later deadlines less late, but
        the loop was just as busy).

        A negative ``late`` (asyncio runs a handle up to its clock's resolution early)
        is taken as 0.
        """
        late = late if late > 0.0 else 0.0
        if late >= LAG_MARK:
            self._marks.append((now, late))
            self.marked = now
        if now - self._at > LAG_MEMORY:  # nothing served for a while: start afresh
            self._typical = late
            self._served = served
        else:
            self._typical += LAG_WEIGHT * (late - self._typical)
            self._served += served
        self._at = now
        self.last = late
        self.typical = self._typical if self._served >= LAG_EVIDENCE else 0.0

    def recent(self, now: float) -> float:
        """The typical lateness lately, in seconds, at ``now`` (the loop's clock): 0.0
        when no deadline was served over the last :data:`LAG_MEMORY` seconds, or fewer
        than :data:`LAG_EVIDENCE` since the loop was last idle."""
        if now - self._at > LAG_MEMORY or self._served < LAG_EVIDENCE:
            return 0.0
        return self._typical

    def during(self, start: float, end: float) -> float:
        """How late the loop ran over ``start`` .. ``end`` (the loop's clock, seconds):
        the larger of :meth:`recent` at ``end`` and the latest wake-up served in between
        (at least :data:`LAG_MARK` late; 0.0 if none).

        For a latency measured over that span (issue 24). The typical lateness alone
        understates what a busy loop adds to it: reading a response takes several turns
        of the loop, and in a burst of 400 GETs on 20 connections the wake-ups' median
        lateness was 2.2 ms (trio) while the samples it let through were 10 ms above the
        replicas' own (``benchmarks/bench_burst.py``). One wake-up that late while the
        request was out means the loop was that busy while its response may have
        waited; a request that saw none is judged by the typical lateness as before.
        """
        late = self.recent(end)
        for when, mark in reversed(self._marks):
            if when < start:
                break
            if mark > late and when <= end:
                late = mark
        return late
