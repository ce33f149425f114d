"""The race between a primary attempt and its backup requests.

One hedged request is one anyio task group: the primary attempt starts at once; if no
attempt has response headers by the hedge delay, a backup request goes to another
replica (and the next one a hedge delay after that, up to ``max_hedges``); an attempt
that fails (a transport error, or a status such as 503 that another replica may not
give) triggers the next backup at once. The first attempt whose headers carry a
status that is not in the non-fatal set wins; cancelling the task group's scope then
cancels every other attempt, so the replica sees a disconnect; a loser that already
had headers has its response closed unread. The caller cancelling the request cancels
every attempt the same way.

When the transport was entered (``async with``, as ``httpx.AsyncClient`` does), a
hedged request runs no task group of its own (:meth:`Race.run_scheduled`): the
primary attempt runs in the caller's task under one cancel scope, and the transport's
``BackupScheduler`` calls :meth:`Race.hedge_due` at the hedge deadline; only then is a
task started (:meth:`Race._drive`), which sends the backups and runs the same loop.
If a backup wins, the driver cancels the primary's scope. A request that is answered
before its hedge delay (most of them) thus costs one cancel scope and a heap entry.

A request that cannot be hedged by delay (not idempotent, or its hedge delay is
suspended) takes a sequential path with no task group: one attempt at a time, in the
caller's task, where a failed attempt may still be followed by a backup if the request
is idempotent.

Exceptions never leave as an ``ExceptionGroup``: attempts catch their own errors, and
when every attempt failed the caller gets the last failed response if there was one
(a 503 from every replica is a 503), else the last attempt's own exception, with its
own type (``httpx.ConnectError`` stays ``httpx.ConnectError``).

This module and ``_scheduler`` are the only ones that spawn tasks. Prior art: tower's
``hedge::select`` (the first future to finish wins and the other is dropped); Dean &
Barroso, "The Tail at Scale", CACM 56(2), 2013.

Strictly private.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Collection, Sequence
from typing import Literal, Protocol, final

import anyio
import httpx

from hedgeclient._budget import HedgeBudget
from hedgeclient._events import AttemptKind, AttemptOutcome, AttemptRecord, SuppressReason
from hedgeclient._replicas import ReplicaSelector
from hedgeclient._routing import Service
from hedgeclient._scheduler import BackupScheduler

_PENDING: Literal[0] = 0
_HEADERS: Literal[1] = 1
_FAILED: Literal[2] = 2
_CANCELLED: Literal[3] = 3

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)

logger = logging.getLogger("hedgeclient")


@final
class Attempt:
    """One attempt of a request: where it went, when, and how it ended. Mutable."""

    __slots__ = (
        "ended",
        "error",
        "kind",
        "number",
        "processed",
        "replica",
        "response",
        "started",
        "state",
    )

    def __init__(self, number: int, kind: AttemptKind, replica: str, started: float) -> None:
        self.number = number
        self.kind: AttemptKind = kind
        self.replica = replica
        self.started = started
        self.ended = math.nan
        self.state: int = _PENDING
        self.response: httpx.Response | None = None
        self.error: Exception | None = None
        self.processed = False

    @property
    def duration(self) -> float:
        """Seconds from sending to the end of the attempt."""
        return self.ended - self.started


class AttemptSender(Protocol):
    """What sends a race's attempts: the transport. Strictly private."""

    async def _send_attempt(self, race: Race, number: int, replica: str) -> httpx.Response:
        """Send attempt ``number`` of ``race.request`` to ``replica``; return at headers."""
        ...


class Cancellable(Protocol):
    """What a transport's ``aclose()`` cancels: a cancel scope, or a scheduled race."""

    def cancel(self) -> None:
        """Cancel; synchronous."""


@final
class Race:
    """Runs one request's attempts and keeps the facts hooks and metrics need."""

    __slots__ = (
        "_budget",
        "_changed",
        "_cleanup_needed",
        "_context",
        "_driver_done",
        "_driver_scope",
        "_finished",
        "_non_fatal",
        "_origin",
        "_primary_scope",
        "_replicas",
        "_selector",
        "_sender",
        "_settle_scope",
        "aborted",
        "attempts",
        "backups_left",
        "body",
        "cancelled_by_caller",
        "delay",
        "in_flight",
        "pushback",
        "request",
        "service",
        "start",
        "suppressed",
        "winner",
    )

    def __init__(
        self,
        sender: AttemptSender,
        request: httpx.Request,
        *,
        service: Service | None,
        origin: str,
        body: bytes | None,
        delay: float | None,
        max_backups: int,
        selector: ReplicaSelector,
        budget: HedgeBudget | None,
        non_fatal: Collection[int],
        start: float,
    ) -> None:
        """Prepare the race of ``request``; nothing is sent until :meth:`run`.

        Args:
            sender: sends each attempt (the transport).
            request: the caller's request.
            service: its configured service, or ``None`` for an origin that is not
                configured, whose every attempt goes to ``origin``.
            origin: the request's own origin, as routes name it.
            body: the request's body when it may be sent again, else ``None``.
            delay: hedge delay in seconds, or ``None`` for no backup by delay.
            max_backups: backups this request may send (0 when not idempotent).
            selector, budget, non_fatal: the transport's.
            start: when the transport received the request (anyio clock, seconds).
        """
        self._sender = sender
        self.request = request
        self.service = service
        self._replicas = service.replicas if service is not None else None
        self._origin = origin
        self.body = body
        self.delay = delay
        self._selector = selector
        self._budget = budget
        self._non_fatal = non_fatal
        self.start = start
        self.attempts: list[Attempt] = []
        self.in_flight = 0
        self.backups_left = max_backups
        self.winner: Attempt | None = None
        self.suppressed: SuppressReason | None = None
        self.pushback = False
        self.cancelled_by_caller = False
        self._changed: anyio.Event | None = None  # created by the first loop that waits
        self._finished: list[Attempt] = []
        self._cleanup_needed = False
        self._primary_scope: anyio.CancelScope | None = None
        self._driver_scope: anyio.CancelScope | None = None
        self._driver_done: anyio.Event | None = None
        self._context: contextvars.Context | None = None
        self._settle_scope: anyio.CancelScope | None = None
        self.aborted = False

    # -- public entry points ------------------------------------------------------

    async def run(self) -> httpx.Response:
        """Run the race; return the winner's (or the last failed) response, or raise.

        Raises:
            httpx.HTTPError: the last attempt's own exception, when every attempt
                failed without a response.
        """
        try:
            if self.delay is None:
                await self._run_sequential()
            else:
                first = self._begin(self._choose_primary(), "primary")  # outside: never grouped
                async with anyio.create_task_group() as tg:
                    await self._run_hedged(tg, first)
        except BaseException:
            self.cancelled_by_caller = True
            raise
        finally:
            if len(self.attempts) > 1 or self.cancelled_by_caller:  # else nothing to close
                await self._close_losers()
        return self._result()

    async def run_scheduled(
        self, scheduler: BackupScheduler, active: set[Cancellable]
    ) -> httpx.Response | None:
        """Run the race with the primary attempt in this task; backups via ``scheduler``.

        The race is in ``active`` (what the transport's ``aclose()`` cancels) while it
        runs: :meth:`cancel` then ends every attempt and sends no more.

        Returns:
            The winner's (or the last failed) response; ``None`` when the transport
            was closed before any attempt won.

        Raises:
            httpx.HTTPError: the last attempt's own exception, when every attempt
                failed without a response.
        """
        delay = self.delay
        assert delay is not None
        primary = self._begin(self._choose_primary(), "primary", self.start)
        scope = self._primary_scope = anyio.CancelScope()
        ticket = None
        if self.backups_left > 0:
            self._context = contextvars.copy_context()
            ticket = scheduler.schedule(self.start + delay, self)
        active.add(self)
        try:
            try:
                with scope:
                    await self._attempt(primary)
            finally:
                if ticket is not None:
                    scheduler.cancel(ticket)
            if self._driver_done is None:  # no backup was sent: judge the primary here
                self._finished.clear()
                if primary.state == _HEADERS and self._judge(primary):
                    return self._result()  # the common case, in its shortest form
                self._finished.append(primary)
            else:  # a backup driver judges the race
                await self._driver_done.wait()
            if self.winner is None and not self.aborted:
                with anyio.CancelScope() as self._settle_scope:
                    await self._settle(delay)
            if self.winner is None and self.aborted:  # closed before any attempt won
                self.cancelled_by_caller = True  # as the task-group path records it
                return None
        except BaseException:
            self.cancelled_by_caller = True
            await self._stop_driver()
            raise
        finally:
            active.discard(self)
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

    def hedge_due(self, scheduler: BackupScheduler) -> None:
        """The hedge delay passed: start a backup driver if the primary is still out.

        Called by ``scheduler`` in its own task; synchronous.
        """
        primary = self.attempts[0]
        if primary.state != _PENDING or self._driver_done is not None:
            return
        backup = self._begin_backup()
        if backup is None:  # suppressed (budget, pushback, ...): the primary goes on alone
            return
        self._driver_done = anyio.Event()
        assert self._context is not None

        async def drive(scope: anyio.CancelScope) -> None:
            await self._drive(backup, scope)

        self._driver_scope = scheduler.start_driver(self._context, drive)

    @property
    def needs_pool_cleanup(self) -> bool:
        """True when an attempt was cancelled or a loser's response closed (``_pool_guard``)."""
        return self._cleanup_needed

    def outcome_of(self, attempt: Attempt) -> AttemptOutcome:
        """How ``attempt`` ended, for records and metrics."""
        if attempt is self.winner:
            return "won"
        if attempt.state == _CANCELLED:
            return "cancelled"
        if attempt.state == _FAILED or self.winner is None or not self.is_ok(attempt):
            return "failed"  # an error, or a non-fatal status such as 503
        return "lost"

    def records(self) -> tuple[AttemptRecord, ...]:
        """Every attempt as an :class:`AttemptRecord`, in the order sent."""
        start = self.start
        return tuple(
            AttemptRecord(
                kind=a.kind,
                replica=a.replica,
                started=a.started - start,
                duration=a.duration,
                outcome=self.outcome_of(a),
                status=a.response.status_code if a.response is not None else None,
                censored=a.state == _CANCELLED,
            )
            for a in self.attempts
        )

    def is_ok(self, attempt: Attempt) -> bool:
        """True when ``attempt`` had headers with a status that is not non-fatal."""
        response = attempt.response
        return response is not None and response.status_code not in self._non_fatal

    # -- the two strategies -------------------------------------------------------

    async def _run_sequential(self) -> None:
        replica = self._choose_primary()
        attempt = self._begin(replica, "primary")
        while True:
            await self._attempt(attempt)
            if self._judge(attempt):
                return
            backup = self._begin_backup()
            if backup is None:
                return
            attempt = backup

    async def _run_hedged(self, tg: anyio.abc.TaskGroup, first: Attempt) -> None:
        delay = self.delay
        assert delay is not None
        tg.start_soon(self._attempt, first)
        next_at = self.start + delay if self.backups_left > 0 else math.inf
        await self._loop(tg, delay, next_at)

    async def _drive(self, backup: Attempt, scope: anyio.CancelScope) -> None:
        """The scheduled race after its hedge delay: the backups, in their own task."""
        delay = self.delay
        assert delay is not None
        assert self._driver_done is not None
        try:
            with scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._attempt, backup)
                    next_at = backup.started + delay if self.backups_left > 0 else math.inf
                    await self._loop(tg, delay, next_at)
        finally:
            self._driver_done.set()

    async def _stop_driver(self) -> None:
        """Cancel the backup driver, if any, and wait for it to finish; shielded."""
        if self._driver_scope is None or self._driver_done is None:
            return
        self._driver_scope.cancel()
        with anyio.CancelScope(shield=True):
            await self._driver_done.wait()

    async def _settle(self, delay: float) -> None:
        """Judge what no loop judged; if nothing won, go on as the hedged path would."""
        finished, self._finished = self._finished, []
        self._changed = None
        failed = False
        for attempt in finished:
            if attempt.state == _CANCELLED:  # stopped, not failed: no backup for it
                continue
            if self._judge(attempt):
                return
            failed = True
        if not failed or self.backups_left <= 0:
            return
        async with anyio.create_task_group() as tg:  # a failed attempt: a backup at once
            next_at = self._hedge(tg, delay)
            if self.in_flight:
                await self._loop(tg, delay, next_at)

    async def _loop(self, tg: anyio.abc.TaskGroup, delay: float, next_at: float) -> None:
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
            if self._changed.is_set():
                self._changed = anyio.Event()
            else:  # the hedge delay passed with no response headers
                next_at = self._hedge(tg, delay)
            failed = False
            finished, self._finished = self._finished, []
            for attempt in finished:
                if attempt.state == _CANCELLED:  # the caller's primary, cancelled: not a failure
                    continue
                if self._judge(attempt):
                    primary = self.attempts[0]
                    if primary.state == _PENDING and self._primary_scope is not None:
                        self._primary_scope.cancel()  # a backup won: the caller's attempt
                    if self.in_flight:  # losers to cancel (skipped when none: it costs)
                        tg.cancel_scope.cancel()
                    return
                failed = True
            if failed:  # a failed attempt calls for a backup at once
                next_at = self._hedge(tg, delay) if self.backups_left > 0 else next_at
            if self.in_flight == 0:
                return

    # -- pieces ---------------------------------------------------------------------

    def _hedge(self, tg: anyio.abc.TaskGroup, delay: float) -> float:
        """Send the next backup now if allowed; return when the one after is due."""
        backup = self._begin_backup()
        if backup is None:
            return math.inf
        tg.start_soon(self._attempt, backup)
        return anyio.current_time() + delay if self.backups_left > 0 else math.inf

    def _begin_backup(self) -> Attempt | None:
        """Begin the next backup; None if none may go (noted) or the selector failed."""
        try:
            replica = self._next_backup_replica()
            return None if replica is None else self._begin(replica, "backup")
        except Exception:  # a custom ReplicaSelector's bug: no backup, never a lost request
            logger.warning("hedgeclient: the replica selector failed; no backup", exc_info=True)
            self.backups_left = 0
            if self.suppressed is None:
                self.suppressed = "selector_error"
            return None

    def _choose_primary(self) -> str:
        replicas = self._replicas
        if replicas is None:
            return self._origin
        chosen = self._selector.choose(replicas, ())
        if chosen is None:
            return replicas[0]
        if chosen not in replicas:
            raise _not_a_replica(self._selector, chosen, replicas)
        return chosen

    def _choose_backup(self) -> str | None:
        """An untried replica if any, else one with no attempt of ours in flight."""
        replicas = self._replicas
        if replicas is None:  # an unconfigured origin: the same origin again
            return self._origin
        chosen = self._selector.choose(replicas, {a.replica for a in self.attempts})
        if chosen is None:
            busy = {a.replica for a in self.attempts if a.state == _PENDING}
            chosen = self._selector.choose(replicas, busy)
        if chosen is not None and chosen not in replicas:
            raise _not_a_replica(self._selector, chosen, replicas)
        return chosen

    def _next_backup_replica(self) -> str | None:
        """Return the replica for the next backup, or None (noting why) if none may go."""
        if self.backups_left <= 0:
            return None
        reason: SuppressReason | None = None
        replica = None
        budget = self._budget
        if self.pushback:
            reason = "pushback"
        elif (replica := self._choose_backup()) is None:
            reason = "no_other_replica"
        elif budget is not None and budget.in_flight_full:
            reason = "max_in_flight"
        elif budget is not None and not budget.try_withdraw():
            reason = "budget"
        if reason is not None or replica is None:
            if self.suppressed is None:
                self.suppressed = reason
            self.backups_left = 0
            return None
        return replica

    def _begin(self, replica: str, kind: AttemptKind, now: float | None = None) -> Attempt:
        """Count a new attempt as sent; its task (or the caller) then runs :meth:`_attempt`."""
        if self._replicas is not None:  # first: a selector that raises leaves no trace
            self._selector.attempt_started(replica)
        if now is None:
            now = anyio.current_time()
        attempt = Attempt(len(self.attempts) + 1, kind, replica, now)
        self.attempts.append(attempt)
        self.in_flight += 1
        if kind == "backup":
            self.backups_left -= 1
            if self._budget is not None:
                self._budget.backup_started()
        return attempt

    async def _attempt(self, attempt: Attempt) -> None:
        """Run one attempt to its response headers; never raises but cancellation."""
        try:
            send = self._sender._send_attempt
            attempt.response = await send(self, attempt.number, attempt.replica)
            attempt.state = _HEADERS
        except Exception as exc:  # an attempt's error is data for the race
            attempt.error = exc
            attempt.state = _FAILED
        finally:
            attempt.ended = anyio.current_time()
            if attempt.state == _PENDING:
                attempt.state = _CANCELLED
                self._cleanup_needed = True
            self.in_flight -= 1
            if attempt.kind == "backup" and self._budget is not None:
                self._budget.backup_finished()
            if self._replicas is not None:
                self._selector.attempt_finished(
                    attempt.replica, connect_failed=isinstance(attempt.error, _CONNECT_ERRORS)
                )
            self._finished.append(attempt)
            if self._changed is not None:
                self._changed.set()

    def _judge(self, attempt: Attempt) -> bool:
        """Record ``attempt``'s result; return True if it wins the race."""
        attempt.processed = True
        response = attempt.response
        if response is not None:
            if response.status_code not in self._non_fatal:
                self.winner = attempt
                return True
            if response.status_code == 429 or "retry-after" in response.headers:
                self.pushback = True
        return False

    async def _close_losers(self) -> None:
        """Close every response but the one :meth:`_result` will return; shielded."""
        keep = self._kept()
        losers = [a.response for a in self.attempts if a.response is not None and a is not keep]
        if not losers:
            return
        self._cleanup_needed = True  # an HTTP/2 stream closed unread
        with anyio.CancelScope(shield=True):
            for response in losers:
                await response.aclose()

    def _kept(self) -> Attempt | None:
        if self.cancelled_by_caller:
            return None
        if self.winner is not None:
            return self.winner
        failed = [a for a in self.attempts if a.response is not None and a.processed]
        return max(failed, key=_last) if failed else None

    def _result(self) -> httpx.Response:
        kept = self._kept()
        if kept is not None:
            assert kept.response is not None
            return kept.response
        errors = [a for a in self.attempts if a.error is not None]
        last = max(errors, key=_last)
        assert last.error is not None
        raise last.error


def _not_a_replica(
    selector: ReplicaSelector, chosen: object, replicas: Sequence[str]
) -> ValueError:
    """The error for a selector that chose outside ``replicas`` (a bug in the selector)."""
    msg = (
        f"{selector!r}.choose() returned {chosen!r}: a ReplicaSelector must return one of "
        f"the replicas it is given ({list(replicas)!r}) or None"
    )
    return ValueError(msg)


def _last(attempt: Attempt) -> tuple[float, int]:
    """Order attempts by when they ended; at the same instant the later-sent one is last."""
    return (attempt.ended, attempt.number)
