"""The backup driver: the task that runs a race's backups, made only when one goes.

The race (``_race.race``) makes a driver when a backup goes. At the hedge deadline the
driver runs detached (the timer spawns it, in a copy of the caller's context) while the
primary goes on in the caller's task; after a failure once the primary ended, the
caller's task runs it. The driver runs the backups in a task group and waits for an
attempt to end or for the next hedge deadline; it asks its race to judge what ended,
and for the next backup (by delay, or at once after a failure), until an attempt won
or none is in flight. Its ``scope`` is the race's to cancel; ``done`` is set as it ends.

What it asks of its race is :class:`Driven`: the race keeps every fact; the driver only
waits, and starts the backups the race begins.

Strictly private.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol, final

import anyio
import anyio.abc

from hedgeclient._attempt import HEADERS, Attempt
from hedgeclient._events import BackupTrigger
from hedgeclient._timer import Flag, HedgeTimer, Scope, wait_shielded

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

    async def attempt(self, attempt: Attempt, /) -> None:
        """Run one attempt to its response headers; never raises but cancellation."""

    @property
    def unjudged(self) -> bool:
        """Whether attempts ended that no one judged yet."""

    def judge(self, attempt: Attempt, /) -> bool:
        """Record ``attempt``'s verdict; True if it wins (the primary is then cancelled)."""

    def judge_ended(self) -> Literal["won", "failed"] | None:
        """Judge the attempts ended since last asked."""

    def begin_backup(self, trigger: BackupTrigger, /) -> Attempt | None:
        """Begin the next backup if it may go, else None (the race records why)."""

    def next_hedge_at(self, sent: float, /) -> float:
        """When the backup after one sent at ``sent`` is due by delay (``math.inf``: never)."""


@final
class BackupDriver:
    """Runs one race's backups (see the module doc). Strictly private.

    Args:
        race: the race whose backups it runs.
        timer: the running loop's hedge timer.
    """

    __slots__ = ("_race", "changed", "done", "scope")

    def __init__(self, race: Driven, timer: HedgeTimer) -> None:
        self._race = race
        self.scope: Scope = timer.cancel_scope()
        self.done: Flag = timer.event()
        # Set by the race as each attempt ends, while the loop waits (not in the fast
        # path of the last backup, which waits for nothing else).
        self.changed: anyio.Event | None = None

    async def drive(self, backup: Attempt) -> None:
        """Run the backups from ``backup`` on: the detached task of the hedge delay."""
        race = self._race
        try:
            with self.scope:
                if race.backups_left <= 0:  # the last backup (max_hedges=1): run it here
                    await race.attempt(backup)
                    if backup.state == HEADERS:
                        race.judge(backup)  # a winner cancels the primary
                    return  # a failed backup is judged by the caller's task
                await self._run(backup)
        finally:
            self.done.set()

    async def settle(self, backup: Attempt) -> None:
        """Run the backups from ``backup`` on, in the caller's task after a failure."""
        try:
            with self.scope:
                await self._run(backup)
        finally:
            self.done.set()

    async def stop(self) -> None:
        """Cancel the driver and wait for it to finish; shielded."""
        self.scope.cancel()
        await wait_shielded(self.done)

    async def _run(self, backup: Attempt) -> None:
        """Wait for attempts and hedge deadlines until a winner or nothing in flight."""
        race = self._race
        changed = self.changed = anyio.Event()
        if race.unjudged:  # ended before the loop began
            changed.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(race.attempt, backup)
            next_at = race.next_hedge_at(backup.started)
            while True:
                with anyio.CancelScope(deadline=next_at):
                    await changed.wait()
                if race.winner is not None:  # the caller's primary won meanwhile
                    tg.cancel_scope.cancel()
                    return
                if changed.is_set():
                    changed = self.changed = anyio.Event()
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

    def _hedge(self, tg: anyio.abc.TaskGroup, trigger: BackupTrigger) -> float:
        """Send the next backup now if the race begins one; return when the one after is due."""
        backup = self._race.begin_backup(trigger)
        if backup is None:
            return math.inf
        tg.start_soon(self._race.attempt, backup)
        return self._race.next_hedge_at(backup.started)
