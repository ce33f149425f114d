"""The deadline heap both timers serve, and the wrappers that keep a callback's or a
detached task's exception from reaching the loop (logged instead).

Strictly private.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable

from hedgeclient._timer._lag import LoopLag

__all__ = ["Entry", "Heap", "logged_call", "push", "run_due", "run_logged"]

logger = logging.getLogger("hedgeclient")


async def run_logged(fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    except Exception:  # a detached task must never take its loop down
        logger.exception("hedgeclient: a backup task failed")


class Entry:
    """One registered deadline; ``callback`` is None once cancelled or run."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback: Callable[[], None] | None = callback

    def cancel(self) -> None:
        self.callback = None


# A heap of (deadline, sequence, entry): compared in C, the sequence breaking ties in
# the order of registration. Cancelled entries stay until they reach the head.
Heap = list[tuple[float, int, Entry]]


def push(heap: Heap, deadline: float, sequence: int, entry: Entry) -> None:
    while heap and heap[0][2].callback is None:  # drop cancelled entries at the head
        heapq.heappop(heap)
    heapq.heappush(heap, (deadline, sequence, entry))


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
        callback = entry.callback
        if callback is not None:
            entry.callback = None
            logged_call(callback)
    while heap and heap[0][2].callback is None:
        heapq.heappop(heap)


def logged_call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # one request's failure must not stop the timer
        logger.exception("hedgeclient: starting a backup request failed")
