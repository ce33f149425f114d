"""What one hedged request did, handed to hooks (metrics, logs) when it ends.

Strictly data: no I/O, no imports of optional packages. Times are float seconds.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "AttemptKind",
    "AttemptOutcome",
    "AttemptRecord",
    "BackupTrigger",
    "HedgeHook",
    "HedgeInfo",
    "Payer",
    "RequestRecord",
    "SampleLeftOut",
    "SuppressReason",
]

AttemptKind = Literal["primary", "backup"]
"""``primary`` for the first attempt of a request, ``backup`` for every hedge."""

AttemptOutcome = Literal["won", "failed", "cancelled", "lost", "dropped", "unsent"]
"""How an attempt ended.

- ``won``: its response was returned to the caller.
- ``failed``: a transport error, or a response with a non-fatal status (502/503/504 by
  default) that another attempt could improve on.
- ``cancelled``: still waiting for response headers when another attempt won (the
  replica sees a disconnect), or when the caller cancelled.
- ``lost``: it had response headers, but another attempt won first; its response was
  closed unread.
- ``dropped``: a copy of a tied request (``HedgedTransport(tied=...)``) that its
  replica dropped unexecuted because its twin had started elsewhere; its ``status``
  is 503, but it is neither a failure nor a winner.
- ``unsent``: it never reached the wire: it was still waiting for one of the client's
  own pool connections when the race ended (or the caller left), or gave up waiting
  (``error_type`` ``"PoolTimeout"``). No replica saw it, so it is no extra load: a
  backup that ends so is not counted as a hedge. Known only for an inner transport
  that is an httpcore pool (``httpx.AsyncHTTPTransport``), from its ``trace`` events.
"""

BackupTrigger = Literal["delay", "failure"]
"""Why a backup was sent: ``delay``, no response headers by the hedge delay;
``failure``, an earlier attempt failed (an error, or a non-fatal status such as 503).

.. versionadded:: 0.1.0
"""

Payer = Literal["main", "floor"]
"""The hedge budget's bucket that paid a backup's token (``HedgeBudget.draw``), to which
it goes back if the backup never leaves the client. Strictly private."""

SuppressReason = Literal[
    "not_idempotent",
    "unreplayable_body",
    "opted_out",
    "hedging_off",
    "budget",
    "max_in_flight",
    "no_other_replica",
    "cutoff",
    "pushback",
    "selector_error",
    "deadline",
    "client_lag",
    "vetoed",
    "hook_error",
]
"""Why a backup that was due (no response by the hedge delay, or a failed attempt) was
not sent. A closed set: these are the values of the ``reason`` metric label.
``client_lag``: the client's own event loop was running late by half the hedge delay
or more, and the primary answered while its backup was held back (a backup would start
late and add work to a busy client; it is held back until the primary has waited the
delay plus twice the lag). ``vetoed``: the backup hook (``on_backup``) returned
``None``; ``hook_error``: it raised, or returned something that cannot be sent as the
backup (logged)."""

SampleLeftOut = Literal["queued", "replica_silent", "client_lag"]
"""Why a request's primary attempt was not given to the delay policy as a latency
sample (:attr:`RequestRecord.sample_left_out`). A closed set: the values of the
``reason`` label of ``hedgeclient_delay_samples_left_out_total``.

- ``queued``: it never left the client's own connection-pool queue (no replica saw it).
- ``replica_silent``: it ended in a silence of its replica (no answer for 0.4 of the
  hedge delay) that held it and another attempt all along: what a freeze of the
  replica does to every attempt it holds. Healthy replicas make such a silence by
  chance too (about 8 % of samples at 5 in flight over 3 replicas on a log-normal
  law); leaving those out moved the learned delay by less than its noise
  (``docs/benchmarks.md``).
- ``client_lag``: the client's own event loop typically ran late by a tenth of the
  hedge delay or more as it ended, so the time measured was partly the client's.
"""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a hedged request.

    Attributes:
        kind: ``primary`` or ``backup``.
        replica: the replica origin the attempt was sent to (``"http://10.0.0.7:8080"``).
        started: seconds after the request started at which the attempt was sent (≥ 0).
        duration: seconds from sending to its end (headers, error or cancellation).
        outcome: see :data:`AttemptOutcome`.
        status: the HTTP status, if response headers arrived; else ``None``.
        censored: true when ``duration`` is a lower bound (the attempt was cancelled
            before its headers arrived).
        trigger: why a backup was sent (see :data:`BackupTrigger`); ``None`` for the
            primary attempt.
        error_type: the class name of the exception the attempt failed with
            (``"ConnectError"``, ``"ReadTimeout"``), or ``None``.
        zone: the zone of its replica, or ``None`` when unknown.
        other_connection: true for a backup sent to the address an attempt of the same
            request was still using (a service with one address): it went over another
            connection.
    """

    kind: AttemptKind
    replica: str
    started: float
    duration: float
    outcome: AttemptOutcome
    status: int | None
    censored: bool
    trigger: BackupTrigger | None = None
    error_type: str | None = None
    zone: str | None = None
    other_connection: bool = False


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One logical request through :class:`~hedgeclient.HedgedTransport`.

    Attributes:
        client: the transport's ``name`` (the ``client`` metric label).
        route: the route key (default ``"GET http://catalog"``: method and logical origin).
        outcome: ``ok`` when a response was returned, ``error`` when an exception was.
        duration: seconds from the start of the request to the winner's response
            headers (or to the error).
        delay: the hedge delay in force for this request, seconds; ``None`` when the
            request was not eligible for hedging or hedging was suspended.
        attempts: every attempt sent, in the order sent.
        suppressed: why a due backup was not sent, or ``None``.
        cancelled_by_caller: true when the caller cancelled the request.
        method: the request's HTTP method (``"GET"``).
        origin: the origin the request addressed, as routes name it
            (``"http://catalog"``: the logical origin of a configured service).
        trace_id: the W3C trace id (32 lowercase hex digits) of the request's
            OpenTelemetry span, when hedgeclient traced it and the trace is sampled;
            else ``None``. Prometheus exemplars carry it.
        span_id: the W3C span id (16 lowercase hex digits) of that span, or ``None``.
        single_address: true when the service had one address (see
            :attr:`HedgeInfo.single_address`).
        sample_left_out: why the primary's latency was *not* given to the delay policy
            (:data:`SampleLeftOut`); ``None`` when it was, or when no sample was due
            (a request that may not be hedged, a fixed delay, a primary that failed,
            a caller that cancelled).
        event_loop_lag: how late the client's own event loop typically ran lately as the
            request ended, in seconds (≥ 0): the weighted mean of the lateness its hedge
            timer measured, 0.0 until four deadlines were served since the loop was
            idle (``HedgedTransport.event_loop_lag`` has the same figure). For a sample
            left out as ``client_lag``, the lateness that left it out: the larger of
            that and the latest late wake-up while its primary was on the wire.
    """

    client: str
    route: str
    outcome: Literal["ok", "error"]
    duration: float
    delay: float | None
    attempts: tuple[AttemptRecord, ...]
    suppressed: SuppressReason | None
    cancelled_by_caller: bool = False
    method: str = ""
    origin: str = ""
    trace_id: str | None = None
    span_id: str | None = None
    single_address: bool = False
    sample_left_out: SampleLeftOut | None = None
    event_loop_lag: float = 0.0

    @property
    def crossed_zone(self) -> bool | None:
        """Whether a backup went to another zone than the primary's (see
        :attr:`HedgeInfo.crossed_zone`)."""
        return crossed_zone(self.attempts)

    @property
    def hedged(self) -> bool:
        """True when at least one backup request was sent (reached the wire: a backup
        whose outcome is ``unsent`` loaded no replica)."""
        return any(a.kind == "backup" and a.outcome != "unsent" for a in self.attempts)

    @property
    def backup_won(self) -> bool:
        """True when a backup's response was returned to the caller."""
        return any(a.outcome == "won" and a.kind == "backup" for a in self.attempts)


def crossed_zone(attempts: tuple[AttemptRecord, ...]) -> bool | None:
    """True if a backup went to another zone than the primary's, False if none did,
    None without a backup or with a zone unknown."""
    if len(attempts) < 2:
        return None
    home = attempts[0].zone
    if home is None or any(a.zone is None for a in attempts[1:]):
        return None
    return any(a.zone != home for a in attempts[1:])


@dataclass(slots=True)
class RequestEnd:
    """One finished request as the transport's metrics read it: its
    :class:`RequestRecord`, and the few facts that count a request whose primary
    alone answered (the common case) without one. Strictly private.

    The caller's hooks, the OpenTelemetry metrics and the trace read the record; the
    transport builds it only when one of them is on, or when the request was not a
    primary that alone answered (``sole`` is ``None``). So with metrics on and nothing
    else, most requests build no record. Times in seconds.

    Attributes:
        client, route, outcome, duration, delay, suppressed, sample_left_out: as the
            record's fields of those names.
        sole: ``(replica, status, seconds)`` of the primary attempt when it was the
            request's only attempt and won, and no trace id goes with the request (no
            exemplar to attach); else ``None``. ``seconds`` is its duration.
        record: the request's record; ``None`` only when ``sole`` is set.
    """

    client: str
    route: str
    outcome: Literal["ok", "error"]
    duration: float
    delay: float | None
    suppressed: SuppressReason | None
    sample_left_out: SampleLeftOut | None
    sole: tuple[str, int | None, float] | None
    record: RequestRecord | None


class HedgeHook(Protocol):
    """A sink for :class:`RequestRecord`, called once per request as it ends.

    A hook runs on the event loop inside the request path: keep it cheap. An
    exception raised by a hook is logged and swallowed; it never fails the request.
    """

    def __call__(self, record: RequestRecord, /) -> None:
        """Consume one request's record."""
        ...


@dataclass(frozen=True, slots=True)
class HedgeInfo:
    """How a response was obtained, in ``response.extensions["hedge"]``.

    Attributes:
        attempt: which attempt won, 1 for the primary attempt, 2 for the first backup
            request, and so on (the value of its ``Hedge-Attempt`` header).
        replica: the replica origin that served the response.
        attempts: how many attempts were begun for this request (≥ 1), those that
            never reached the wire included (see :data:`AttemptOutcome`, ``unsent``).
        delay: the hedge delay in force, in seconds, or ``None`` when the request was
            not eligible for hedging or hedging was suspended.
        suppressed: why a backup that was due was not sent (``"budget"``,
            ``"pushback"``, ``"no_other_replica"``, ...; see :data:`SuppressReason`),
            or ``None``.
        single_address: true when the service had one address (a single replica, a
            DNS name with one address, or an origin not in ``replicas``): its backups
            go to that address over another connection, and only a load balancer
            behind it can make them independent (``docs/replicas.md``).
        crossed_zone: true when a backup went to another zone than the primary's,
            false when every backup stayed in the primary's zone, ``None`` when no
            backup was sent or a zone is unknown.

    .. versionadded:: 0.1.0
    """

    attempt: int
    replica: str
    attempts: int
    delay: float | None
    suppressed: SuppressReason | None = None
    single_address: bool = False
    crossed_zone: bool | None = None
