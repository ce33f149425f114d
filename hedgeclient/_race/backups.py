"""A race's backups: when one is due, whether it may go, and the driver that runs them.

The caller's task registers the primary's hedge deadline with the event loop's hedge
timer (``_timer``). When the deadline passes first (or the primary's replica is found
stalled), the timer calls :meth:`Backups._hedge_due` on the loop, and a backup that may
go (:meth:`Backups._veto`, which asks ``_policy.veto_backup``) starts the *backup
driver*: one detached task, in a copy of the caller's context variables, that runs the
backups in an anyio task group and judges them as they end. A backup that wins cancels
the primary's scope. A failed attempt calls for the next backup at once. After the
primary, the caller's task judges what no driver judged (:meth:`Backups._settle`).

A tied request (``_policy.tied``) sends its first backup, the *twin*, ``tie_offset`` seconds
after the primary, to a replica chosen with the primary (each copy names the other's);
the twin draws nothing from the budget.

Strictly private.
"""

from __future__ import annotations

import logging
import math

import anyio
import anyio.abc

from hedgeclient._attempt import CANCELLED, HEADERS, PENDING, Attempt
from hedgeclient._events import BackupTrigger, SuppressReason
from hedgeclient._policy.eligibility import HELD_BACK, veto_backup
from hedgeclient._policy.tied import new_tie_id
from hedgeclient._race.core import RaceCore
from hedgeclient._timer import wait_shielded

__all__ = ["Backups"]

logger = logging.getLogger("hedgeclient")


class Backups(RaceCore):
    """The backups of one race (see the module doc). Strictly private."""

    __slots__ = ()

    def _stall_due(self) -> None:
        """The primary's replica was found stalled by an older attempt of another request
        (``Choice.hedge_now``, this primary's :data:`~hedgeclient._attempt.EarlyHedge`):
        its wait belongs to the pause, not to the route."""
        self.primary_stalled = True
        self._hedge_due()

    def _hedge_due(self) -> None:
        """The hedge delay passed (the timer calls this), or the primary's replica was
        found stalled (:meth:`_stall_due`): start the backup driver."""
        primary = self.attempts[0]
        primary.on_stall = None
        if primary.state != PENDING or self._driver_done is not None or self.aborted:
            return
        interval = self._interval()
        if math.isnan(primary.on_wire) and interval is not None:
            # Still queued for one of the client's own pool connections: no replica is
            # slow yet, and a backup would queue behind it. Look again a delay later.
            self._handle = self._timer.call_at(self._time() + interval, self._hedge_due)
            return
        backup = self._begin_backup("delay")
        if backup is None:
            if self.suppressed in HELD_BACK and self.backups_left > 0:
                # Held back, not dropped: look again a lag later, when the late loop may
                # have caught up; a primary still waiting then gets its backup.
                now = self._time()
                self._handle = self._timer.call_at(
                    now + self._timer.lag.recent(now), self._hedge_due
                )
            return  # else suppressed: the primary goes on alone
        self._driver_done = self._timer.event()
        self._driver_scope = self._timer.cancel_scope()
        assert self._context is not None
        self._timer.spawn(self._context, lambda: self._drive(backup))

    def _interval(self) -> float | None:
        """Seconds from the primary to the next backup by time: the tie offset while
        the twin is due, else the hedge delay (``None``: none by time)."""
        return self._tie_offset if self._twin is not None else self.delay

    def _tie(self, primary: Attempt) -> None:
        """Choose the twin's replica now, so that the primary can name it."""
        try:
            twin = self._choose_backup()
        except Exception:  # a custom ReplicaSelector's bug: no twin, never a lost request
            logger.warning("hedgeclient: the replica selector failed; no twin", exc_info=True)
            return
        if twin is not None and twin != primary.replica:
            primary.tie, primary.twin, self._twin = new_tie_id(), twin, twin

    async def _drive(self, backup: Attempt) -> None:
        """The race after its hedge delay, in the backup driver's task."""
        assert self._driver_done is not None
        assert self._driver_scope is not None
        try:
            with self._driver_scope:
                if self.backups_left <= 0:  # the last backup (max_hedges=1): run it here
                    await self._attempt(backup)
                    primary = self.attempts[0]
                    won = backup.state == HEADERS and self._judge(backup)
                    if won and primary.state == PENDING and self._primary_scope is not None:
                        self._primary_scope.cancel()  # the backup won
                    return  # a failed backup is judged by the caller's _settle
                async with anyio.create_task_group() as tg:  # more may follow: the loop
                    tg.start_soon(self._attempt, backup)
                    await self._loop(tg, self._next_hedge_at(backup.started))
        finally:
            self._driver_done.set()

    async def _stop_driver(self) -> None:
        """Cancel the backup driver, if any, and wait for it to finish; shielded."""
        if self._driver_scope is None or self._driver_done is None:
            return
        self._driver_scope.cancel()
        await wait_shielded(self._driver_done)

    async def _settle(self) -> None:
        """Judge what no loop judged; after a failure, go on with backups sent at once."""
        finished, self._finished = self._finished, []
        self._changed = None
        failed = False
        for attempt in finished:
            if attempt.state == CANCELLED:  # stopped, not failed: no backup for it
                continue
            if self._judge(attempt):
                return
            failed = failed or self._failed(attempt)
        if not failed:
            return
        backup = self._begin_backup("failure")  # a failed attempt: a backup at once, if allowed
        if backup is None:
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._attempt, backup)
            await self._loop(tg, self._next_hedge_at(backup.started))

    async def _loop(self, tg: anyio.abc.TaskGroup, next_at: float) -> None:
        """Wait for attempts and hedge deadlines until a winner or nothing in flight.

        ``in_flight`` counts a primary attempt running in the caller's task too; a
        backup that wins cancels it through its scope.
        """
        if self._changed is None:
            self._changed = anyio.Event()
            if self._finished:
                self._changed.set()
        while True:
            with anyio.CancelScope(deadline=next_at):
                await self._changed.wait()
            if self.winner is not None:  # the caller's primary won meanwhile
                tg.cancel_scope.cancel()
                return
            if self._changed.is_set():
                self._changed = anyio.Event()
            else:  # the hedge delay passed again with no response headers
                next_at = self._hedge(tg, "delay")
            failed = False
            finished, self._finished = self._finished, []
            for attempt in finished:
                if attempt.state == CANCELLED:  # the caller's primary, cancelled: not a failure
                    continue
                if self._judge(attempt):
                    primary = self.attempts[0]
                    if primary.state == PENDING and self._primary_scope is not None:
                        self._primary_scope.cancel()  # a backup won: the caller's attempt
                    if self.in_flight:  # losers to cancel (skipped when none: it costs)
                        tg.cancel_scope.cancel()
                    return
                failed = failed or self._failed(attempt)
            if failed:  # a failed attempt calls for a backup at once
                next_at = self._hedge(tg, "failure")
            if self.in_flight == 0:
                return

    def _hedge(self, tg: anyio.abc.TaskGroup, trigger: BackupTrigger) -> float:
        """Send the next backup now if allowed; return when the one after is due."""
        backup = self._begin_backup(trigger)
        if backup is None:
            return math.inf
        tg.start_soon(self._attempt, backup)
        return self._next_hedge_at(backup.started)

    def _next_hedge_at(self, sent: float) -> float:
        if self.backups_left <= 0 or self.delay is None:
            return math.inf
        return sent + self.delay

    def _begin_backup(self, trigger: BackupTrigger) -> Attempt | None:
        """Begin the next backup, sent because of ``trigger``, or return None when none
        may go (:meth:`_veto`)."""
        try:
            twin, self._twin = self._twin, None
            reason, replica = self._veto(twin, trigger)
            if replica is not None:
                if self.suppressed in HELD_BACK:
                    self.suppressed = None  # held back, then sent: not suppressed
                backup = self._begin(
                    replica, "backup", self._time(), trigger, twin=twin is not None
                )
                if twin is not None:
                    primary = self.attempts[0]
                    backup.tie, backup.twin = primary.tie, primary.replica
                return backup
        except Exception:  # a custom ReplicaSelector's bug: no backup, never a lost request
            logger.warning("hedgeclient: the replica selector failed; no backup", exc_info=True)
            reason = "selector_error"
        if reason is not None and self.suppressed is None:
            self.suppressed = reason
        if reason not in HELD_BACK:  # held back: a later look or a failure may send it
            self.backups_left = 0
        return None

    def _veto(
        self, twin: str | None, trigger: BackupTrigger
    ) -> tuple[SuppressReason | None, str | None]:
        """Whether the due backup goes, and where
        (:func:`~hedgeclient._policy.eligibility.veto_backup`)."""
        now = self._time()
        return veto_backup(
            ineligible=self._ineligible,
            allowed=self.backups_left > 0 and not self.aborted,
            pushback=self.pushback,
            time_left=self.deadline - now,
            expected=self._expected_latency,
            choose=self._choose_backup,
            budget=self._budget,
            twin=twin,
            lag=self._timer.lag.recent(now) if trigger == "delay" else 0.0,
            delay=self.delay,
            waited=now - self.start,
        )

    def _expected_latency(self) -> float:
        return self._expected() if self._expected is not None else (self.delay or 0.0)

    def _choose_backup(self) -> str | None:
        now = self._time()
        return self._choice.backup(self._service, self._origin, self.attempts, self.delay, now)
