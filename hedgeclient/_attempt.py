"""One attempt of a hedged request: where it went, when, and how it ended.

Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Literal, final

import httpx

from hedgeclient._events import (
    AttemptKind,
    AttemptOutcome,
    AttemptRecord,
    BackupTrigger,
    Payer,
)

PENDING: Literal[0] = 0
HEADERS: Literal[1] = 1
FAILED: Literal[2] = 2
CANCELLED: Literal[3] = 3

CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)

EarlyHedge = Callable[[], None]
"""Starts a primary's backup now, before its hedge delay: the one effect of a request on
others. ``Choice.begin_primary`` (``_replicas.choice``), choosing for another request, calls
it through ``Choice.hedge_now`` when it finds the primary's replica stalled:
synchronously, on the event loop, before that choice returns, at most once per primary
(``on_stall`` is cleared first), and only for a primary whose own ``hedge_delay`` is no
longer than the chooser's: a silence of 30 ms says nothing of a route whose primaries
take 900 ms (issue 27). It must neither block nor raise."""


@final
class Attempt:
    """One attempt of a request: where it went, when, and how it ended. Mutable.

    ``started`` is when the attempt was sent; ``on_wire`` when it left the client's
    own connection-pool queue (set by the transport from httpcore's ``trace``
    extension; ``started`` when unknown). Its latency runs from ``on_wire``.
    ``trigger`` says why a backup was sent (``None`` for the primary). A copy of
    a tied request (``_policy.tied``) has its ``tie`` id and its ``twin``'s replica; it is
    ``dropped`` when its replica answered that the twin has it.
    ``connecting`` is the instant it began opening a new connection (TCP, then TLS),
    NaN when it is not connecting (reusing one, or its request is already sent).
    ``on_stall``, for a primary that may be hedged, starts its backup now
    (:data:`EarlyHedge`): another request's choice calls it when it finds this
    attempt's replica stalled before the hedge delay has passed. ``off_queue``, for a
    primary whose hedge delay passed while it waited in the client's own pool queue,
    looks at its backup again: the wire calls it once, as the primary leaves that
    queue (a queued request costs no timer meanwhile, issue 25). ``lane`` is 0, or
    k ≥ 1 for a backup sent to a replica that already has k attempts of the request in
    flight (a single address): it must use another connection. ``ok``, set by the race as
    it ends, is what wins: response headers with a status outside the non-fatal set, and
    not a dropped copy.
    """

    # No __init__: ``Attempt()`` is the C constructor, then the race sets the five
    # fields below that have no default (``new_attempt``; the primary's in
    # ``Race._start``, on the path of every request: a Python call less, issue 25).
    # Every other field is its class default until set.
    number: int
    kind: AttemptKind
    replica: str
    started: float
    on_wire: float
    connecting = math.nan
    lane = 0
    on_stall: EarlyHedge | None = None  # a primary's early hedge
    # A primary's hedge delay, seconds: another request's evidence of a stall (a
    # silence of its own delay) hastens only a primary whose delay is no longer.
    hedge_delay = 0.0
    off_queue: Callable[[], None] | None = None  # its hedge, parked in the queue
    ended = math.nan
    state: int = PENDING
    response: httpx.Response | None = None
    error: Exception | None = None
    processed = False
    ok = False
    trigger: BackupTrigger | None = None
    tie: str | None = None
    twin: str | None = None
    dropped = False
    # The backup's own request as the backup hook returned it, until it is sent.
    prepared: httpx.Request | None = None
    payer: Payer = "main"  # a backup's: the budget's bucket that paid its token

    @property
    def duration(self) -> float:
        """Seconds from sending to the end of the attempt (≥ 0 whatever the clock does)."""
        return max(0.0, self.ended - self.started)

    @property
    def latency(self) -> float:
        """Seconds on the wire: from leaving the pool queue to the end (≥ 0)."""
        return max(0.0, self.ended - self.on_wire)


def new_attempt(number: int, kind: AttemptKind, replica: str, started: float) -> Attempt:
    """A new attempt: its ``number`` (1 for the primary), ``kind``, ``replica`` and when it
    was sent (``started``, seconds, the loop's clock; ``on_wire`` too until the wire says)."""
    attempt = Attempt()
    attempt.number, attempt.kind, attempt.replica = number, kind, replica
    attempt.started = attempt.on_wire = started
    return attempt


def backup_of(
    attempts: Sequence[Attempt],
    replica: str,
    started: float,
    trigger: BackupTrigger,
    prepared: object = None,
    *,
    twin: bool = False,
) -> Attempt:
    """A new backup after ``attempts`` (the request's, in the order sent), to ``replica``
    at ``started`` (seconds, the loop's clock), not booked anywhere yet: its number, its
    ``lane`` (the same address again, a single one: another connection), ``prepared``
    if the backup hook made a request (else ignored), and with ``twin`` the tie of the
    primary, whose replica it names (each copy names the other's)."""
    attempt = new_attempt(len(attempts) + 1, "backup", replica, started)
    attempt.trigger = trigger
    if isinstance(prepared, httpx.Request):
        attempt.prepared = prepared
    attempt.lane = sum(1 for a in attempts if a.replica == replica and a.state == PENDING)
    if twin:
        attempt.tie, attempt.twin = attempts[0].tie, attempts[0].replica
    return attempt


Send = Callable[[Attempt], Awaitable[httpx.Response]]
"""Sends one attempt (its ``number`` and ``replica``) and returns at response headers."""


def ended_last(attempt: Attempt) -> tuple[float, int]:
    """Order attempts by when they ended; at the same instant the later-sent one is last."""
    return (attempt.ended, attempt.number)


def outcome_of(
    attempt: Attempt, winner: Attempt | None, non_fatal: Collection[int]
) -> AttemptOutcome:
    """How ``attempt`` ended, for records and metrics."""
    if attempt is winner:
        return "won"
    if math.isnan(attempt.on_wire):  # never off the client's own pool queue (BH-54)
        return "unsent"
    if attempt.dropped:
        return "dropped"
    if attempt.state == CANCELLED:
        return "cancelled"
    response = attempt.response
    if (
        attempt.state == FAILED
        or winner is None
        or response is None
        or response.status_code in non_fatal
    ):
        return "failed"  # an error, or a non-fatal status such as 503
    return "lost"


def records(
    attempts: Sequence[Attempt],
    start: float,
    winner: Attempt | None,
    non_fatal: Collection[int],
    zones: Mapping[str, str] | None = None,
) -> tuple[AttemptRecord, ...]:
    """Every attempt as an :class:`AttemptRecord`, in the order sent; times relative to
    ``start`` and never negative; ``zones`` gives each replica's zone."""
    zones = zones or {}
    built = []
    for a in attempts:
        built.append(
            AttemptRecord(  # positional: a frozen dataclass's keywords cost 0.4 µs more
                a.kind,
                a.replica,
                max(0.0, a.started - start),  # started
                a.duration,
                outcome_of(a, winner, non_fatal),  # outcome
                a.response.status_code if a.response is not None else None,  # status
                a.state == CANCELLED,  # censored
                a.trigger,
                type(a.error).__qualname__ if a.error is not None else None,  # error_type
                zones.get(a.replica),  # zone
                a.lane > 0,  # other_connection
            )
        )
    return tuple(built)


def crossed_zone_of(attempts: Sequence[Attempt], zones: Mapping[str, str] | None) -> bool | None:
    """:func:`~hedgeclient._events.crossed_zone` of ``attempts`` without building their
    records (``HedgeInfo.crossed_zone`` of a request no hook, metric or trace needs a
    record of): ``zones`` gives each replica's zone."""
    if len(attempts) < 2 or not zones:
        return None
    home = zones.get(attempts[0].replica)
    others = [zones.get(a.replica) for a in attempts[1:]]
    if home is None or None in others:
        return None
    return any(zone != home for zone in others)
