"""The race between a primary attempt and its backup requests: the one engine.

The primary attempt runs in the caller's own task, under one cancel scope. If it may
be hedged, its hedge deadline is registered with the event loop's hedge timer
(``_timer``). Most requests answer first: they cancel the registration and start no
task at all. When the deadline passes first and a backup may go (:meth:`Race._veto`
says why not otherwise), the timer starts a *backup driver*: one detached task, in a
copy of the caller's context variables, that runs the backups in an anyio task group
and judges the race. If a backup wins, the driver cancels the primary's scope.

An attempt that fails (a transport error, or a status such as 503 that another replica
may not give) triggers the next backup at once. The first attempt whose headers carry
a status that is not in the non-fatal set wins; every other attempt is cancelled, so
the replica sees a disconnect, and a loser that already had headers has its response
closed unread (shielded).

A tied request (``_tied``) sends its first backup, the *twin*, ``tie_offset`` seconds
after the primary, to a replica chosen with the primary (each copy names the other's);
the twin draws nothing from the budget. A copy whose replica answers "dropped" (its
twin started elsewhere) is neither a winner nor a failure while another attempt is in
flight, and gives its backup back; with nothing else in flight it counts as failed.

Guarantees, whatever the caller's task does:

- the caller never returns (nor raises) while its backup driver runs: on every exit
  path it cancels the driver and waits for it, shielded;
- the caller's own cancellation (anyio, trio, or a native ``asyncio`` cancel such as
  ``asyncio.timeout``) is what it gets back, never another exception;
- exceptions never leave as an ``ExceptionGroup``: attempts catch their own errors,
  and when every attempt failed the caller gets the last failed response if there was
  one (a 503 from every replica is a 503), else the last attempt's own exception with
  its own type (``httpx.ConnectError`` stays ``httpx.ConnectError``).

This module and ``_timer`` are the only ones that start tasks. Prior art: tower's
``hedge::select`` (the first future to finish wins and the other is dropped);
Finagle's ``BackupRequestFilter``; Dean & Barroso, "The Tail at Scale", CACM 56(2),
2013.

Strictly private.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import Collection
from typing import final

import anyio
import anyio.abc
import httpx

from hedgeclient._attempt import (
    CANCELLED,
    CONNECT_ERRORS,
    FAILED,
    HEADERS,
    PENDING,
    Attempt,
    ExpectedLatency,
    Send,
    ended_last,
    records,
)
from hedgeclient._budget import HedgeBudget
from hedgeclient._choice import Choice
from hedgeclient._events import AttemptKind, AttemptRecord, BackupTrigger, SuppressReason
from hedgeclient._policy import veto_backup
from hedgeclient._replicas import AttemptResult
from hedgeclient._routing import Service
from hedgeclient._tied import is_dropped, new_tie_id
from hedgeclient._timer import Handle, current_timer, run_shielded, wait_shielded

logger = logging.getLogger("hedgeclient")


@final
class Race:
    """Runs one request's attempts and keeps the facts hooks and metrics need."""

    __slots__ = (
        "_budget",
        "_changed",
        "_choice",
        "_context",
        "_driver_done",
        "_driver_scope",
        "_expected",
        "_finished",
        "_handle",
        "_ineligible",
        "_non_fatal",
        "_origin",
        "_primary_scope",
        "_send",
        "_service",
        "_settle_scope",
        "_tie_offset",
        "_twin",
        "aborted",
        "attempts",
        "backups_left",
        "cancelled_by_caller",
        "connect_failures",
        "deadline",
        "delay",
        "in_flight",
        "needs_cleanup",
        "primary_stalled",
        "pushback",
        "start",
        "suppressed",
        "winner",
    )

    def __init__(
        self,
        send: Send,
        *,
        service: Service | None,
        origin: str,
        delay: float | None,
        max_backups: int,
        ineligible: SuppressReason | None,
        choice: Choice,
        budget: HedgeBudget,
        non_fatal: Collection[int],
        start: float,
        deadline: float = math.inf,
        expected_latency: ExpectedLatency | None = None,
        tie_offset: float | None = None,
    ) -> None:
        """Prepare a race; nothing is sent until :meth:`run`.

        Args:
            send: sends one attempt (the transport's, never the transport itself).
            service: the request's service (its replicas are read afresh for each
                attempt), or ``None`` for an origin that is not configured, whose every
                attempt goes to ``origin``.
            origin: the request's own origin, as routes name it.
            delay: hedge delay in seconds, or ``None`` for no backup by delay.
            max_backups: backups this request may send (≥ 0).
            ineligible: why this request may not be sent twice, or ``None`` when it
                may (then a due backup is suppressed with this reason).
            choice, budget, non_fatal: the transport's.
            start: when the transport received the request (anyio clock, seconds).
            deadline: when the caller stops waiting (anyio clock, seconds); no backup
                is sent that could not answer before it.
            expected_latency: the route's typical latency, for the deadline check;
                default the hedge delay.
            tie_offset: seconds after the primary at which its twin goes (a tied
                request), or ``None`` (default) for no twin.
        """
        self._send = send
        self._service = service
        self._origin = origin
        self.delay = delay
        self.backups_left = max_backups if ineligible is None else 0
        self._ineligible: SuppressReason | None = ineligible
        self._choice = choice
        self._budget = budget
        self._non_fatal = non_fatal
        self.start = start
        self.deadline = deadline
        self._expected = expected_latency
        self.attempts: list[Attempt] = []
        self.in_flight = 0
        self.winner: Attempt | None = None
        self.suppressed: SuppressReason | None = None
        self.pushback = False
        self.primary_stalled = False
        self.connect_failures = 0  # attempts whose connection failed or stalled
        self.cancelled_by_caller = False
        self.aborted = False
        self.needs_cleanup = False
        self._changed: anyio.Event | None = None  # created by the first loop that waits
        self._finished: list[Attempt] = []
        self._primary_scope: anyio.CancelScope | None = None
        self._driver_scope: anyio.CancelScope | None = None
        self._driver_done: anyio.Event | None = None
        self._context: contextvars.Context | None = None
        self._handle: Handle | None = None
        self._settle_scope: anyio.CancelScope | None = None
        self._tie_offset = tie_offset if ineligible is None and max_backups > 0 else None
        self._twin: str | None = None  # the twin's replica, until the twin is sent

    # -- the entry point ----------------------------------------------------------

    async def run(self) -> httpx.Response | None:
        """Run the race in the caller's task.

        Returns:
            The winner's (or the last failed) response; ``None`` when :meth:`cancel`
            (the transport closing) stopped the race before any attempt won.

        Raises:
            httpx.HTTPError: the last attempt's own exception, when every attempt
                failed without a response.
            ValueError: the selector chose a replica it was not given (primary).
        """
        replica = self._choice.primary(self._service, self._origin, self.delay, self.start)
        primary = self._begin(replica, "primary", self.start)
        scope = self._primary_scope = anyio.CancelScope()
        if self._tie_offset is not None:
            self._tie(primary)
        first = self._interval()
        if first is not None and self.backups_left > 0:
            self._context = contextvars.copy_context()
            self._handle = current_timer().call_at(self.start + first, self._hedge_due)
            primary.on_stall = self._stall_due
        try:
            try:
                with scope:
                    await self._attempt(primary)
            finally:
                if self._handle is not None:
                    self._handle.cancel()
            if self._driver_done is None:  # no backup was sent: judge the primary here
                if primary.state == HEADERS and self._judge(primary):
                    self._finished.clear()
                    return primary.response  # the common case, in its shortest form
            else:  # a backup is out: the first to win stops the other
                if primary.state == HEADERS and self._judge(primary):
                    assert self._driver_scope is not None
                    self._driver_scope.cancel()  # the primary won: its backups lose
                await self._driver_done.wait()
            if self.winner is None and not self.aborted:
                with anyio.CancelScope() as self._settle_scope:
                    await self._settle()
            if self.winner is None and self.aborted:  # closed before any attempt won
                self.cancelled_by_caller = True
                return None
        except BaseException:
            self.cancelled_by_caller = True
            await self._stop_driver()
            raise
        finally:
            if len(self.attempts) > 1 or self.cancelled_by_caller:  # else nothing to close
                await self._close_losers()
        return self._result()

    def cancel(self) -> None:
        """The transport is closing: end every attempt, send no more. Synchronous."""
        self.aborted = True
        self.backups_left = 0
        for scope in (self._primary_scope, self._driver_scope, self._settle_scope):
            if scope is not None:
                scope.cancel()

    # -- facts for records and metrics --------------------------------------------

    def records(self) -> tuple[AttemptRecord, ...]:
        """Every attempt as an :class:`AttemptRecord`, in the order sent."""
        zones = self._service.zones if self._service is not None else None
        return records(self.attempts, self.start, self.winner, self._non_fatal, zones)

    @property
    def single_address(self) -> bool:
        """Whether the service has one address (or is an origin not configured)."""
        return self._service is None or self._service.single

    def is_ok(self, attempt: Attempt) -> bool:
        """True when ``attempt`` had headers with a status that is not non-fatal."""
        response = attempt.response
        return (
            response is not None
            and not attempt.dropped
            and response.status_code not in self._non_fatal
        )

    def was_cancelled(self, attempt: Attempt) -> bool:
        """True when ``attempt`` was still waiting for headers as the race ended."""
        return attempt.state == CANCELLED

    def note_due(self) -> None:
        """A backup would have been due by delay for a request that may not be hedged:
        record why none was sent (the request's own reason)."""
        if self.suppressed is None and self._ineligible is not None:
            self.suppressed = self._ineligible

    # -- backups ------------------------------------------------------------------

    def _stall_due(self) -> None:
        """The primary's replica was found stalled by an older attempt of another request
        (``InFlight.hedge_now``): its wait belongs to the pause, not to the route."""
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
            now = anyio.current_time()
            self._handle = current_timer().call_at(now + interval, self._hedge_due)
            return
        backup = self._begin_backup("delay")
        if backup is None:  # suppressed: the primary goes on alone
            return
        self._driver_done = anyio.Event()
        self._driver_scope = anyio.CancelScope()
        assert self._context is not None
        current_timer().spawn(self._context, lambda: self._drive(backup))

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
            reason, replica = self._veto(twin)
            if replica is not None:
                backup = self._begin(
                    replica, "backup", anyio.current_time(), trigger, twin=twin is not None
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
        self.backups_left = 0
        return None

    def _veto(self, twin: str | None) -> tuple[SuppressReason | None, str | None]:
        """Whether the due backup goes, and where (:func:`~hedgeclient._policy.veto_backup`)."""
        return veto_backup(
            ineligible=self._ineligible,
            allowed=self.backups_left > 0 and not self.aborted,
            pushback=self.pushback,
            time_left=self.deadline - anyio.current_time(),
            expected=self._expected_latency,
            choose=self._choose_backup,
            budget=self._budget,
            twin=twin,
        )

    def _expected_latency(self) -> float:
        return self._expected() if self._expected is not None else (self.delay or 0.0)

    def _choose_backup(self) -> str | None:
        now = anyio.current_time()
        return self._choice.backup(self._service, self._origin, self.attempts, self.delay, now)

    # -- attempts -----------------------------------------------------------------

    def _begin(
        self,
        replica: str,
        kind: AttemptKind,
        now: float,
        trigger: BackupTrigger | None = None,
        *,
        twin: bool = False,
    ) -> Attempt:
        """Count a new attempt as sent; its task (or the caller) then runs :meth:`_attempt`.

        A ``twin`` (a tied request's) is not counted by the budget."""
        attempt = Attempt(len(self.attempts) + 1, kind, replica, now, trigger)
        if kind == "backup":  # the same address again (a single one): another connection
            attempt.lane = sum(
                1 for a in self.attempts if a.replica == replica and a.state == PENDING
            )
        if self._service is not None:  # first: a selector that raises leaves no trace
            self._choice.started(attempt)
        self.attempts.append(attempt)
        self.in_flight += 1
        if kind == "backup":
            self.backups_left -= 1
            if not twin:
                self._budget.backup_started()
        return attempt

    async def _attempt(self, attempt: Attempt) -> None:
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
            attempt.ended = anyio.current_time()
            if attempt.state == PENDING:
                attempt.state = CANCELLED
                self.needs_cleanup = True
            self.in_flight -= 1
            if attempt.kind == "backup" and attempt.tie is None:  # a twin is not counted
                self._budget.backup_finished()
            if self._service is not None:
                result = self._health(attempt)
                if result in ("connect_failed", "connect_stalled"):
                    self.connect_failures += 1
                inflight = self._choice.inflight
                if attempt.number == 1 and self.delay is not None:  # before it leaves
                    self.primary_stalled = self.primary_stalled or inflight.stalled_besides(
                        attempt, self.delay, attempt.ended
                    )
                inflight.discard(attempt)
                self._choice.selector.attempt_finished(attempt.replica, result=result)
            self._finished.append(attempt)
            if self._changed is not None:
                self._changed.set()

    def _health(self, attempt: Attempt) -> AttemptResult:
        """What ``attempt`` says of its replica's health (:data:`AttemptResult`)."""
        if attempt.dropped:  # it did no work: says nothing of the replica's health
            return "cancelled"
        if attempt.state == HEADERS:
            assert attempt.response is not None
            return "unhealthy_status" if attempt.response.status_code in self._non_fatal else "ok"
        error = attempt.error
        if error is None or isinstance(error, httpx.PoolTimeout):  # cancelled, or our own queue
            connecting = attempt.connecting  # a black hole: connecting past the hedge delay
            if self.delay is not None and attempt.ended - connecting > self.delay:
                return "connect_stalled"
            return "cancelled"
        return "connect_failed" if isinstance(error, CONNECT_ERRORS) else "failed"

    def _judge(self, attempt: Attempt) -> bool:
        """Record ``attempt``'s result; return True if it wins the race (the first one
        judged a winner stays the winner)."""
        if self.winner is not None:
            return attempt is self.winner
        first, attempt.processed = not attempt.processed, True
        response = attempt.response
        if attempt.dropped:  # the twin has it: this copy gives its backup back (once)
            self.backups_left += first
            return False
        if response is not None:
            if response.status_code not in self._non_fatal:
                self.winner = attempt
                return True
            if response.status_code == 429 or "retry-after" in response.headers:
                self.pushback = True
        return False

    def _failed(self, attempt: Attempt) -> bool:
        """Whether ``attempt``, judged and not the winner, calls for a backup at once: a
        dropped copy does only when nothing else is in flight."""
        return not attempt.dropped or self.in_flight == 0

    async def _close_losers(self) -> None:
        """Close every response but the one :meth:`_result` will return; shielded."""
        keep = self._kept()
        losers = [a.response for a in self.attempts if a.response is not None and a is not keep]
        if not losers:
            return
        self.needs_cleanup = True  # an HTTP/2 stream closed unread

        async def close() -> None:
            for response in losers:
                await response.aclose()

        try:
            await run_shielded(close)
        except BaseException:  # cancelled meanwhile: nobody will take the kept response
            if keep is not None and keep.response is not None:
                self.cancelled_by_caller = True
                with contextlib.suppress(BaseException):  # the first exception goes on
                    await run_shielded(keep.response.aclose)
            raise

    def _kept(self) -> Attempt | None:
        if self.cancelled_by_caller:
            return None
        if self.winner is not None:
            return self.winner
        failed = [
            a for a in self.attempts if a.response is not None and a.processed and not a.dropped
        ]
        return max(failed, key=ended_last) if failed else None

    def _result(self) -> httpx.Response:
        kept = self._kept()
        if kept is not None:
            assert kept.response is not None
            return kept.response
        errors = [a for a in self.attempts if a.error is not None]
        if not errors:  # only dropped copies: replicas that broke the tie protocol
            msg = "every copy of the tied request was dropped, none answered"
            raise httpx.RemoteProtocolError(msg)
        last = max(errors, key=ended_last)
        assert last.error is not None
        raise last.error
