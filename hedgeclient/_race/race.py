"""One request's race, :class:`Race` (the package ``_race`` describes it). Strictly private."""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable
from typing import Literal, final

import httpx

from hedgeclient._attempt import CANCELLED, FAILED, HEADERS, PENDING, Attempt, Send, backup_of
from hedgeclient._events import BackupTrigger, Payer, SuppressReason
from hedgeclient._policy import eligibility
from hedgeclient._policy.eligibility import HELD_BACK, no_delay_reason, unsent_reason, veto_backup
from hedgeclient._policy.tied import is_dropped, new_tie_id
from hedgeclient._race.driver import BackupDriver
from hedgeclient._race.rules import RaceRules
from hedgeclient._race.verdict import as_raised, calls_for_backup, failure, last_failed, pushback
from hedgeclient._replicas.services import Service
from hedgeclient._timer import close_unread, log_task_failure, run_shielded, wait_shielded
from hedgeclient._timer.protocols import Flag, Handle, HedgeTimer, Scope

__all__ = ["Race"]


@final
class Race:
    """Runs one request's attempts and keeps the facts hooks and metrics need; nothing
    is sent until :meth:`run`. Strictly private.

    Args:
        send: sends one attempt (the transport's, never the transport itself).
        rules: the transport's.
        service: the request's service (its replicas read afresh for each attempt; the
            report reads its zones), or ``None``: an origin not configured (to ``origin``).
        origin: the request's own origin, as routes name it.
        delay: hedge delay in seconds, or ``None`` for no backup by delay.
        ineligible: why this request may not be sent twice, or ``None`` when it may.
        start: when the transport received the request (the loop's clock, seconds).
        deadline: when the caller stops waiting (same clock): no backup that cannot answer by then.
        tie_offset: seconds after the primary at which its twin goes, or ``None``.
        timer: the running loop's hedge timer (``_timer``).
        vet: ``(number, replica) -> request | None``, the backup hook's step, which
            ``veto_backup`` asks (``None``: vetoed); ``None`` (default): no hook.
    """

    __slots__ = (
        "_backups", "_context", "_driver", "_finished", "_handle", "_ineligible", "_origin",
        "_primary_scope", "_rules", "_send", "_tie_offset", "_timer", "_twin", "_vet", "aborted",
        "attempts", "backups_left", "cancelled_by_caller", "connect_failures", "deadline",
        "delay", "hastened", "in_flight", "needs_cleanup", "primary_stalled", "pushback",
        "service", "start", "suppressed", "winner",
    )  # fmt: skip

    def __init__(
        self,
        send: Send,
        rules: RaceRules,
        *,
        service: Service | None,
        origin: str,
        delay: float | None,
        ineligible: SuppressReason | None,
        start: float,
        deadline: float = math.inf,
        tie_offset: float | None = None,
        timer: HedgeTimer,
        vet: Callable[[int, str], httpx.Request | None] | None = None,
    ) -> None:
        self._send, self._rules, self.service, self._origin = send, rules, service, origin
        self.delay, self._ineligible, self.start, self.deadline = delay, ineligible, start, deadline
        self.backups_left = rules.max_backups if ineligible is None else 0
        self._tie_offset, self._vet = (tie_offset if self.backups_left > 0 else None), vet
        self._timer = timer
        self.attempts: list[Attempt] = []
        self._finished: list[Attempt] = []  # ended, not judged yet
        self.in_flight = self.connect_failures = 0  # running; connections failed
        self.winner: Attempt | None = None
        self.suppressed = None if delay is not None else no_delay_reason(ineligible)
        self.pushback = self.primary_stalled = self.needs_cleanup = self.hastened = False
        self.cancelled_by_caller = self.aborted = False
        self._primary_scope: Scope | None = None
        self._backups: tuple[Scope, Flag] | None = None  # their scope and end, once one went
        self._driver: BackupDriver | None = None  # the loop of several backups, if any
        self._context: contextvars.Context | None = None  # the caller's, for the backups
        self._handle: Handle | None = None  # the next backup's deadline on the timer
        self._twin: str | None = None  # the twin's replica, until the twin is sent

    async def run(self) -> httpx.Response | None:
        """Run the race in the caller's task (then ``rules``' repair, if needed).

        Returns:
            The winner's (or the last failed) response; ``None`` when :meth:`cancel`
            (the transport closing) stopped the race before any attempt won.

        Raises:
            httpx.HTTPError: the last attempt's own, when every attempt failed without a response.
            ValueError: the selector chose a replica it was not given (primary).
        """
        primary, scope = self._start()
        response = None
        try:
            try:
                with scope:
                    await self.attempt(primary)
            finally:
                if self._handle is not None:
                    self._handle.cancel()
                    primary.on_stall = primary.off_queue = None  # each held the race: a cycle
            won = primary.state == HEADERS and self.judge(primary)
            backups = self._backups
            if backups is None:  # no backup went
                if won:
                    self._finished.clear()
                    response = primary.response  # the common case, in its shortest form
                    return response
            else:  # a backup is out: the first to win stops the other
                if won:
                    backups[0].cancel()  # the primary won: its backups lose
                await backups[1].wait()
                self._orphans_ended()
            if self.winner is None and not self.aborted:
                await self._settle()
            if self.winner is None and self.aborted:  # closed before any attempt won
                self.cancelled_by_caller = True
                return None
            keep = self.winner or last_failed(self.attempts)
            response = None if keep is None else keep.response
        except BaseException as exc:
            self.cancelled_by_caller = True
            if self._backups is not None:  # stop them, and wait until they have ended
                self._backups[0].cancel()
                await wait_shielded(self._backups[1])
                self._orphans_ended()
            raise as_raised(exc)  # noqa: B904 (itself, or the cancellation it groups)
        finally:
            if len(self.attempts) > 1 or self.cancelled_by_caller or self.needs_cleanup:
                await self._end(response)
        if response is None:
            raise failure(self.attempts)
        return response

    def cancel(self) -> None:
        """The transport is closing: end every attempt, send no more. Synchronous."""
        self.aborted, self.backups_left = True, 0
        if self._primary_scope is not None:
            self._primary_scope.cancel()
        if self._backups is not None:
            self._backups[0].cancel()

    def _orphans_ended(self) -> None:
        """A backup still pending as its task ended never ran (``HedgeTimer.spawn``'s ``done``)."""
        for orphan in [a for a in self.attempts if a.state == PENDING and a.kind == "backup"]:
            orphan.on_wire = math.nan  # it never left the client
            self._ended(orphan)

    def hedge_early(self) -> None:
        """The race's ``EarlyHedge`` (``Choice.hedge_now``): its primary's replica stalled."""
        self.hastened = True
        self._hedge_due()

    def settle_ineligible(self, due: Callable[[], float | None]) -> None:
        """After :meth:`run`, an ineligible request: its reason if a backup was due by ``due()``."""
        reason = self._ineligible
        if reason is not None and self.suppressed is None:
            self.suppressed = unsent_reason(reason, self.attempts[0].latency, due())

    def _start(self) -> tuple[Attempt, Scope]:
        """Begin the primary (and choose a tied twin); register its hedge deadline if any."""
        primary = Attempt()  # as new_attempt() makes it, without the call
        primary.number, primary.kind, primary.replica = 1, "primary", self._origin
        primary.started = primary.on_wire = self.start
        self._rules.choice.begin_primary(primary, self.service, self.delay)  # chosen, booked
        self.attempts.append(primary)
        self.in_flight += 1
        scope = self._primary_scope = self._timer.primary_scope()
        if self._tie_offset is not None:  # tied: the twin's replica is chosen with it
            twin = self._rules.twin(self.service, self._origin, primary, self.delay)
            if twin is not None:  # each copy names the other's replica
                primary.tie, primary.twin, self._twin = new_tie_id(), twin, twin
        first = self.delay if self._twin is None else self._tie_offset
        if first is not None and self.backups_left > 0:
            self._context = contextvars.copy_context()
            self._handle = self._timer.call_at(self.start + first, self._hedge_due)
            primary.on_stall, primary.hedge_delay = self.hedge_early, first  # its EarlyHedge
        return primary, scope

    async def _end(self, response: httpx.Response | None) -> None:
        """Close every response but the one the caller gets (shielded), then repair the
        pool if an attempt was cut short; close ``response`` if the caller left meanwhile."""
        if len(self.attempts) > 1 or self.cancelled_by_caller:
            keep = None if self.cancelled_by_caller else self.winner or last_failed(self.attempts)
            losers = [a.response for a in self.attempts if a.response is not None and a is not keep]
            if losers:
                self.needs_cleanup = True  # an HTTP/2 stream closed unread

                async def close() -> None:
                    for loser in losers:
                        await loser.aclose()

                try:
                    await run_shielded(close)
                except BaseException:  # cancelled meanwhile: nobody will take the kept one
                    if keep is not None and keep.response is not None:
                        self.cancelled_by_caller = True
                        await close_unread(keep.response)
                    raise
        repair = self._rules.repair
        if self.needs_cleanup and repair is not None:
            try:
                await repair()
            except BaseException:
                if response is not None:  # won, but the caller is gone
                    self.cancelled_by_caller = True
                    await close_unread(response)
                raise

    async def _settle(self) -> None:
        """Judge what no backup judged; after a failure, go on with a backup at once."""
        if self.judge_ended() == "failed":
            backup = self.begin_backup("failure")
            if backup is not None:  # in the caller's task
                self._backups = (self._timer.cancel_scope(), self._timer.event())
                await self._backups_from(backup, detached=False)

    async def _backups_from(self, backup: Attempt, *, detached: bool = True) -> None:
        """Run the backups from ``backup`` on under ``_backups`` (set as it began), in the
        detached task (``guarded``: it logs an exception) or the caller's: the last alone."""
        assert self._backups is not None
        scope, done = self._backups
        try:
            with scope:
                if detached and self.backups_left <= 0:  # read as the task starts
                    await self.attempt(backup)
                    if backup.state == HEADERS:
                        self.judge(backup)
                    return
                self._driver = BackupDriver(self, self._timer)
                await self._driver.run(backup, unjudged=bool(self._finished))
        except Exception:
            if not detached:  # the caller's task: raised to the caller
                raise
            log_task_failure()  # a detached task must never take its loop down
        finally:
            done.set()

    def _begin(
        self, replica: str, prepared: object, payer: Payer | None, *, now: float,
        trigger: BackupTrigger, twin: bool,
    ) -> Attempt:  # fmt: skip
        """Count a new backup as sent (``prepared``: the hook's; ``payer``: ``None``, a twin)."""
        attempt = backup_of(self.attempts, replica, now, trigger, prepared, twin=twin)
        if self.service is not None:  # first: a selector that raises leaves no trace
            self._rules.choice.started(attempt)
        self.attempts.append(attempt)
        self.in_flight += 1
        self.backups_left -= 1
        if payer is not None:  # a twin draws no budget
            attempt.payer = payer
            self._rules.budget.backup_started()
        if self.suppressed in HELD_BACK:
            self.suppressed = None  # held back, then sent: not suppressed
        return attempt

    async def attempt(self, attempt: Attempt) -> None:
        """Run one attempt to its response headers; never raises but cancellation."""
        try:
            attempt.response = await self._send(attempt)
            attempt.state = HEADERS
            if attempt.tie is not None:
                attempt.dropped = is_dropped(attempt.response)
        except Exception as exc:  # an attempt's error is data for the race
            attempt.error = exc
            attempt.state = FAILED
        finally:
            self._ended(attempt)

    def _ended(self, attempt: Attempt) -> None:
        """Book ``attempt``'s end: its verdict, its replica's health, who waits for it."""
        attempt.ended = self._timer.time()
        if attempt.state == PENDING:
            attempt.state = CANCELLED
            self.needs_cleanup = True
        self.in_flight -= 1
        rules, service, response = self._rules, self.service, attempt.response
        if attempt.kind == "backup" and attempt.tie is None:  # a twin is not counted
            # Cancelled still connecting: unsent too. Failed connecting: a storm the budget caps.
            unsent = attempt.state == CANCELLED and not math.isnan(attempt.connecting)
            unsent = unsent or math.isnan(attempt.on_wire)
            rules.budget.backup_finished(unsent=unsent, payer=attempt.payer)
        attempt.ok = (  # what wins: headers with a status outside the non-fatal set
            response is not None
            and not attempt.dropped
            and response.status_code not in rules.non_fatal
        )
        if service is not None:  # the replica side books it: its health, its stalls
            result, held = rules.choice.ended(
                attempt, service.replicas, self.delay, self.winner, stalled=self.primary_stalled
            )
            self.connect_failures += result in ("connect_failed", "connect_stalled")
            if held:  # a primary its replica held: its wait is no latency sample
                self.primary_stalled = True
        self._finished.append(attempt)
        if self._driver is not None and self._driver.changed is not None:
            self._driver.changed.set()  # a driver's loop waits for it

    def judge(self, attempt: Attempt) -> bool:
        """Record ``attempt``'s verdict; True if it wins (the first winner stays): then
        the primary, if it still waits in the caller's task, is cancelled."""
        if self.winner is not None:
            return attempt is self.winner
        first, attempt.processed = not attempt.processed, True
        if attempt.dropped:  # the twin has it: this copy gives its backup back (once)
            self.backups_left += first
            return False
        if attempt.ok:
            self.winner = attempt
            if self.attempts[0].state == PENDING and self._primary_scope is not None:
                self._primary_scope.cancel()  # a backup won
            return True
        if attempt.response is not None and pushback(attempt.response):
            self.pushback = True
        return False

    def judge_ended(self) -> Literal["won", "failed"] | None:
        """The attempts ended since last asked: one ``won``, one ``failed`` (a backup now)."""
        finished, self._finished = self._finished, []
        failed = False
        for attempt in (a for a in finished if a.state != CANCELLED):
            if self.judge(attempt):
                return "won"
            failed = failed or calls_for_backup(attempt, self.in_flight)
        return "failed" if failed else None

    def _hedge_due(self) -> None:
        """The timer's callback (or :meth:`hedge_early`): start the driver if a backup goes."""
        primary = self.attempts[0]
        primary.on_stall = None
        if primary.state != PENDING or self._backups is not None or self.aborted:
            return
        timer, wire = self._timer, primary.on_wire
        interval = self.delay if self._twin is None else self._tie_offset  # the twin's first
        if math.isnan(wire) and interval is not None:
            # Still in the client's own pool queue: parked, the wire calls this as it leaves.
            primary.off_queue = self._hedge_due
            return
        if interval is not None and wire > self.start and not self.hastened:
            due = wire + interval  # a delay on the wire, where its latency is measured from
            if timer.time() < due:  # (read only for a primary that waited for the wire)
                self._handle = timer.call_at(due, self._hedge_due)
                primary.on_stall = self.hedge_early  # on its replica now: a stall hastens it
                return
        backup = self.begin_backup("delay")
        if backup is None:
            if self.suppressed in HELD_BACK and self.backups_left > 0:
                # Held back, not dropped: look again once the late loop may have caught up.
                now = timer.time()
                self._handle = timer.call_at(now + timer.lag.recent(now), self._hedge_due)
            return  # else suppressed: the primary goes on alone
        self._backups = (timer.cancel_scope(), timer.event())  # now: run() waits for them
        assert self._context is not None
        backups = functools.partial(self._backups_from, backup)
        timer.spawn(self._context, backups, guarded=True, done=self._backups[1])

    def begin_backup(self, trigger: BackupTrigger) -> Attempt | None:
        """Begin the next backup if ``veto_backup`` lets it go; else record its reason."""
        twin, self._twin = self._twin, None
        now, wire = self._timer.time(), self.attempts[0].on_wire  # NaN: still queued
        rules, delay, service, origin = self._rules, self.delay, self.service, self._origin
        loop = self._timer.lag
        reason, go = veto_backup(  # (partials, not lambdas: it calls them directly)
            ineligible=self._ineligible,
            allowed=self.backups_left > 0 and not self.aborted,
            pushback=self.pushback,
            time_left=min(self.deadline, self._timer.deadline_of(self._primary_scope)) - now,
            expected=delay or 0.0,
            choose=functools.partial(
                rules.choice.backup, service, origin, self.attempts, delay, now
            ),
            budget=rules.budget,
            vet=None if self._vet is None else functools.partial(self._vet, len(self.attempts) + 1),
            twin=twin,
            lag=loop.recent(now) if trigger == "delay" and loop.typical else 0.0,  # 0: no call
            delay=delay,
            waited=now - (self.start if math.isnan(wire) else wire),  # on its replica
        )
        if go is not None:  # it goes, begun here
            try:
                return self._begin(*go, now=now, trigger=trigger, twin=twin is not None)
            except Exception:  # Choice.started: a custom ReplicaSelector's bug
                reason = eligibility.selector_failed()  # no backup, never a lost request
                if go[2] is not None:  # a token spent on a backup never sent: back to its payer
                    rules.budget.refund(go[2])
        if reason is not None and (self.suppressed is None or self.suppressed in HELD_BACK):
            self.suppressed = reason  # held back, then refused: the refusal's reason
        if reason not in HELD_BACK:  # held back: a later look or a failure may send it
            self.backups_left = 0
        return None
