"""How late the event loop runs, as the hedge timer sees it: a free measure of client lag.

Each deadline the timer serves is an instant it promised to run at; it runs late when
the client itself is busy (a CPU-bound handler, a burst of responses to parse, a
machine short of CPU). That lateness is in every latency measured on the same loop
(an attempt's end is seen only when the loop gets to it) and in every backup the loop
would start. It belongs to the client, not to a replica.

The timer serves the deadlines of requests in flight, whether or not they were
cancelled meanwhile (a cancelled deadline stays in the heap and the wake-up armed for
it still happens), so while requests flow it measures the lag several times per hedge
delay, at no extra wake-up and no heartbeat task: each wake-up is one measure, as late
as its earliest due deadline, and each deadline it serves is evidence (after a freeze
that held several requests, one wake-up serves them all).

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

    Only the loop's own thread writes it; :attr:`last` and :attr:`typical` may be read
    from any thread (float attributes, replaced whole).
    """

    __slots__ = ("_at", "_served", "_typical", "last", "typical")

    def __init__(self) -> None:
        self._served = 0  # deadlines served since the loop was last idle
        self._typical = 0.0
        self._at = -math.inf  # when the last deadline was served
        self.last = 0.0  # how late it was
        self.typical = 0.0  # recent() as of that deadline, for a gauge on another thread

    def observe(self, late: float, now: float, served: int = 1) -> None:
        """The timer woke ``late`` seconds after its earliest due deadline, at ``now``,
        and served ``served`` deadlines (each counts as evidence; the wake-up's lateness
        is weighed once: a wake-up late by L serves its later deadlines less late, but
        the loop was just as busy).

        A negative ``late`` (asyncio runs a handle up to its clock's resolution early)
        is taken as 0.
        """
        late = late if late > 0.0 else 0.0
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
