"""The backup driver: the loop that runs a race's backups when it may send several.

The race (``_race.race``) runs its backups under a cancel scope of its own: detached at
the hedge deadline (the timer spawns the task, in a copy of the caller's context) while
the primary goes on in the caller's task, or in the caller's task after a failure once
the primary ended. A request's last backup (``max_hedges=1``, the default: nearly
every backup) the race runs itself, with nothing else to wait for. With more to send,
it makes a driver: the driver runs the backups in a task group and waits for an
attempt to end or for the next hedge deadline; it asks its race to judge what ended,
and for the next backup (by delay, or at once after a failure), until an attempt won
or none is in flight.

What it asks of its race is :class:`Driven`: the race keeps every fact; the driver only
waits, and starts the backups the race begins.

Strictly private.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol, final

from hedgeclient._attempt import Attempt
from hedgeclient._events import BackupTrigger
from hedgeclient._timer.protocols import Flag, HedgeTimer

__all__ = ["BackupDriver", "Driven"]


class Driven(Protocol):
    """What a :class:`BackupDriver` asks of its race (``_race.race.Race``)."""

    @property
    def winner(self) -> Attempt | None:
        """The attempt that won, once one did."""

    @property
    def in_flight(self) -> int:
        """Attempts still running, the primary in the caller's task included."""

    @property
    def backups_left(self) -> int:
        """Backups the request may still send."""

    @property
    def delay(self) -> float | None:
        """The request's hedge delay in seconds, or ``None`` for no backup by delay."""

    async def attempt(self, attempt: Attempt, /) -> None:
        """Run one attempt to its response headers; never raises but cancellation."""

    def judge_ended(self) -> Literal["won", "failed"] | None:
        """Judge the attempts ended since last asked."""

    def begin_backup(self, trigger: BackupTrigger, /) -> Attempt | None:
        """Begin the next backup if it may go, else None (the race records why)."""


@final
class BackupDriver:
    """Runs one race's backups when it may send several (see the module doc). Strictly
    private.

    Args:
        race: the race whose backups it runs.
    """

    __slots__ = ("_race", "_timer", "changed")

    def __init__(self, race: Driven, timer: HedgeTimer) -> None:
        self._race = race
        self._timer = timer  # the race's: its events, task group and waits
        # Set by the race as each attempt ends, while the loop waits.
        self.changed: Flag | None = None

    async def run(self, backup: Attempt, *, unjudged: bool) -> None:
        """Run the backups from ``backup`` on (``unjudged``: attempts ended that the race
        has not judged yet): wait for attempts and hedge deadlines until a winner or
        nothing in flight."""
        race, timer = self._race, self._timer
        changed = self.changed = timer.event()
        if unjudged:  # ended before the loop began
            changed.set()
        async with timer.task_group() as tg:
            tg.start_soon(race.attempt, backup)
            next_at = self._next_at(backup.started)
            while True:
                await timer.wait_until(changed, next_at)
                if race.winner is not None:  # the caller's primary won meanwhile
                    tg.cancel_scope.cancel()
                    return
                if changed.is_set():
                    changed = self.changed = timer.event()
                else:  # the hedge delay passed again with no response headers
                    next_at = self._hedge(tg, "delay")
                verdict = race.judge_ended()
                if verdict == "won":  # the race cancelled the primary
                    if race.in_flight:  # losers to cancel (skipped when none: it costs)
                        tg.cancel_scope.cancel()
                    return
                if verdict == "failed":  # a failed attempt calls for a backup at once
                    next_at = self._hedge(tg, "failure")
                if race.in_flight == 0:
                    return

    def _hedge(self, tg: Any, trigger: BackupTrigger) -> float:
        """Send the next backup now if the race begins one; return when the one after is due."""
        backup = self._race.begin_backup(trigger)
        if backup is None:
            return math.inf
        tg.start_soon(self._race.attempt, backup)
        return self._next_at(backup.started)

    def _next_at(self, sent: float) -> float:
        """When the backup after one sent at ``sent`` is due by delay (``math.inf``: never)."""
        race = self._race
        return math.inf if race.backups_left <= 0 or race.delay is None else sent + race.delay
