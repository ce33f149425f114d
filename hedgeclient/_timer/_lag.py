"""How late the event loop runs, as the hedge timer sees it: a free measure of client lag.

Each deadline the timer serves is an instant it promised to run at; it runs late when
the client itself is busy (a CPU-bound handler, a burst of responses to parse, a
machine short of CPU). That lateness is in every latency measured on the same loop
(an attempt's end is seen only when the loop gets to it) and in every backup the loop
would start. It belongs to the client, not to a replica.

The timer fires at the deadlines of requests in flight, whether or not they were
cancelled meanwhile (a cancelled deadline stays in the heap and the wake-up armed for
it still happens), so while requests flow it measures the lag several times per hedge
delay at no extra cost: no heartbeat task, no extra wake-up.

:class:`LoopLag` keeps the largest lateness seen over the last :data:`LAG_MEMORY`
seconds, in two halves that rotate (a sliding maximum in O(1)): a late loop is
remembered for at least half of that, and forgotten within all of it once the loop is
on time again. With no deadline served for that long it reads 0: a loop with nothing
to do is not late.

Strictly private.
"""

from __future__ import annotations

import math
from typing import final

__all__ = ["LAG_MEMORY", "LoopLag"]

LAG_MEMORY = 1.0
"""Seconds a measured lateness is remembered (at least half of it, at most all)."""

_HALF = LAG_MEMORY / 2


@final
class LoopLag:
    """The recent lateness of one event loop's hedge timer, in seconds. Strictly private.

    Only the loop's own thread writes it; :attr:`last` may be read from any thread (a
    float attribute, replaced whole).
    """

    __slots__ = ("_current", "_previous", "_until", "last")

    def __init__(self) -> None:
        self._current = 0.0  # the largest lateness of the half-window ending at _until
        self._previous = 0.0  # ... of the half-window before it
        self._until = -math.inf
        self.last = 0.0  # the latest measure, for a gauge read by another thread

    def observe(self, late: float, now: float) -> None:
        """The timer ran a deadline ``late`` seconds after it was due, at ``now``.

        A negative ``late`` (asyncio runs a handle up to its clock's resolution early)
        is taken as 0.
        """
        late = late if late > 0.0 else 0.0
        if now >= self._until:  # rotate: the current half becomes the previous one
            self._previous = self._current if now < self._until + _HALF else 0.0
            self._current = 0.0
            self._until = now + _HALF
        if late > self._current:
            self._current = late
        self.last = late

    def recent(self, now: float) -> float:
        """The largest lateness measured over the last :data:`LAG_MEMORY` seconds or so
        (0.0 when none), at ``now`` (the loop's clock, seconds)."""
        if now < self._until:
            return self._current if self._current > self._previous else self._previous
        if now < self._until + _HALF:
            return self._current
        return 0.0
