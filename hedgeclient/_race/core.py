"""A race's state and its attempts: beginning one, running it, judging it.

This is the bottom layer of the engine (``_race.race`` -> ``_race.backups`` -> ``_race.core``):
what every attempt does whoever runs it (the caller's task for the primary, the backup
driver for backups). An attempt never raises but cancellation: its error or response
is data for the race. The first attempt whose status is not in the non-fatal set wins.

Strictly private.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Collection

import anyio

from hedgeclient._attempt import (
    CANCELLED,
    FAILED,
    HEADERS,
    PENDING,
    Attempt,
    ExpectedLatency,
    Send,
    records,
)
from hedgeclient._events import (
    AttemptKind,
    AttemptRecord,
    BackupTrigger,
    SuppressReason,
)
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.tied import is_dropped
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service
from hedgeclient._timer import Flag, Handle, HedgeTimer, Scope, current_timer

__all__ = ["RaceCore"]


class RaceCore:
    """One request's attempts and the facts hooks and metrics need. Strictly private.

    Args:
        send: sends one attempt (the transport's, never the transport itself).
        service: the request's service (its replicas are read afresh for each
            attempt), or ``None`` for an origin that is not configured, whose every
            attempt goes to ``origin``.
        origin: the request's own origin, as routes name it.
        delay: hedge delay in seconds, or ``None`` for no backup by delay.
        max_backups: backups this request may send (≥ 0).
        ineligible: why this request may not be sent twice, or ``None`` when it may
            (then a due backup is suppressed with this reason).
        choice, budget, non_fatal: the transport's.
        start: when the transport received the request (the loop's clock, seconds).
        deadline: when the caller stops waiting (same clock); no backup is sent that
            could not answer before it.
        expected_latency: the route's typical latency, for the deadline check;
            default the hedge delay.
        tie_offset: seconds after the primary at which its twin goes (a tied
            request), or ``None`` (default) for no twin.
        timer: the running loop's hedge timer (``_timer``); default: looked up.
    """

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
        "_time",
        "_timer",
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
        timer: HedgeTimer | None = None,
    ) -> None:
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
        self._timer = timer if timer is not None else current_timer()
        self._time: Callable[[], float] = self._timer.time
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
        self._primary_scope: Scope | None = None
        self._driver_scope: Scope | None = None  # the backup driver's, once a backup
        self._driver_done: Flag | None = None  # ... went; set as the driver ends
        self._context: contextvars.Context | None = None
        self._handle: Handle | None = None
        self._settle_scope: anyio.CancelScope | None = None
        self._tie_offset = tie_offset if ineligible is None and max_backups > 0 else None
        self._twin: str | None = None  # the twin's replica, until the twin is sent

    # -- facts for records and metrics --------------------------------------------

    def records(self) -> tuple[AttemptRecord, ...]:
        """Every attempt as an :class:`AttemptRecord`, in the order sent."""
        zones = self._service.zones if self._service is not None else None
        return records(self.attempts, self.start, self.winner, self._non_fatal, zones)

    def zones(self) -> dict[str, str] | None:
        """Each replica's zone, when the service knows any (else ``None``)."""
        return self._service.zones if self._service is not None else None

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

    def loop_lag(self, now: float) -> float:
        """How late the race's event loop ran lately, at ``now`` (seconds, ``_timer``)."""
        return self._timer.lag.recent(now)

    def note_due(self) -> None:
        """A backup would have been due by delay for a request that may not be hedged:
        record why none was sent (the request's own reason)."""
        if self.suppressed is None and self._ineligible is not None:
            self.suppressed = self._ineligible

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
            self._ended(attempt)

    def _ended(self, attempt: Attempt) -> None:
        """Book ``attempt``'s end: its state, its replica's health, who waits for it."""
        attempt.ended = self._time()
        if attempt.state == PENDING:
            attempt.state = CANCELLED
            self.needs_cleanup = True
        self.in_flight -= 1
        if attempt.kind == "backup" and attempt.tie is None:  # a twin is not counted
            self._budget.backup_finished()
        if self._service is not None:  # the replica side books it: health, stalls
            result, held = self._choice.ended(
                attempt,
                self._service.replicas,
                self.delay,
                self.winner,
                stalled=self.primary_stalled,
            )
            if result in ("connect_failed", "connect_stalled"):
                self.connect_failures += 1
            if held:  # a primary held by its replica's stall or silence
                self.primary_stalled = True
        self._finished.append(attempt)
        if self._changed is not None:
            self._changed.set()

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
