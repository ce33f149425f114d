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

:class:`LoopLag` keeps two figures. :attr:`LoopLag.last` is the lateness of the
deadline served last: when that deadline starts a backup, it is exactly how late the
backup starts. :meth:`LoopLag.recent` is the typical lateness lately, an exponentially
weighted mean over the deadlines served (weight :data:`LAG_WEIGHT` for the newest): a
burst or a CPU-starved client makes every deadline late and lifts it within a few,
while one late wake-up (a garbage collection) moves it by a quarter and fades, so a
route with a small delay on a slightly jittery loop still learns. It reads 0 until
:data:`LAG_EVIDENCE` deadlines have been served since the loop was last idle for
:data:`LAG_MEMORY` seconds: the first wake-ups of a program, or after a pause (imports,
a TLS handshake), are one-off work, not a loop that stays late.

Strictly private.
"""

from __future__ import annotations

import math
from typing import final

__all__ = ["LAG_EVIDENCE", "LAG_MEMORY", "LAG_WEIGHT", "LoopLag"]

LAG_MEMORY = 1.0
"""Seconds after the last deadline served at which the lag is forgotten."""

LAG_EVIDENCE = 4
"""Deadlines served since the loop was last idle before :meth:`LoopLag.recent` counts."""

LAG_WEIGHT = 0.25
"""The weight of the newest lateness in :meth:`LoopLag.recent` (an exponentially
weighted mean): after a burst ends, eight on-time deadlines bring it to a tenth."""


@final
class LoopLag:
    """The lateness of one event loop's hedge timer, in seconds. Strictly private.

    Only the loop's own thread writes it; :attr:`last` may be read from any thread (a
    float attribute, replaced whole).
    """

    __slots__ = ("_at", "_served", "_typical", "last")

    def __init__(self) -> None:
        self._served = 0  # deadlines served since the loop was last idle
        self._typical = 0.0
        self._at = -math.inf  # when the last deadline was served
        self.last = 0.0  # how late it was

    def observe(self, late: float, now: float) -> None:
        """The timer served a deadline ``late`` seconds after it was due, at ``now``.

        A negative ``late`` (asyncio runs a handle up to its clock's resolution early)
        is taken as 0.
        """
        late = late if late > 0.0 else 0.0
        if now - self._at > LAG_MEMORY:  # nothing served for a while: start afresh
            self._typical = late
            self._served = 1
        else:
            self._typical += LAG_WEIGHT * (late - self._typical)
            self._served += 1
        self._at = now
        self.last = late

    def recent(self, now: float) -> float:
        """The typical lateness lately, in seconds, at ``now`` (the loop's clock): 0.0
        when no deadline was served over the last :data:`LAG_MEMORY` seconds, or fewer
        than :data:`LAG_EVIDENCE` since the loop was last idle."""
        if now - self._at > LAG_MEMORY or self._served < LAG_EVIDENCE:
            return 0.0
        return self._typical
