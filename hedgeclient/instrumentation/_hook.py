"""The hook a transport calls once per request: counters and histograms from its record,
or (:meth:`Hook.count`) from the request's facts when no other hook or trace needs a
:class:`~hedgeclient.RequestRecord`, so that none is built for the metrics alone.

What is counted where is the public contract in the module docstring of
``hedgeclient.instrumentation._prometheus``. A duration below 0 (a clock that stepped
back) or NaN is observed as 0: no histogram ever sees a negative latency, whose
``_sum`` would then decrease like a counter reset.

Exemplars: when the request was traced and sampled (:attr:`RequestRecord.trace_id`),
each duration it observes carries the exemplar ``{trace_id, span_id}`` of its request
span, so a latency bucket (a p99 panel) leads to a trace of a request in it. Exemplars
are exposed in the OpenMetrics format only (``prometheus_client.openmetrics``).

Strictly private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from hedgeclient._events import AttemptFacts, RequestRecord, SampleLeftOut, SuppressReason
from hedgeclient.instrumentation._families import check_exemplar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hedgeclient.instrumentation._series import ClientSeries, RouteSeries

__all__ = ["Hook"]


@final
class Hook:
    """The :class:`~hedgeclient.HedgeHook` one transport calls. Strictly private.

    Args:
        state: the series of the client the transport was bound under.
        client: returns the series of another client name (a renamed transport).
    """

    __slots__ = ("_client", "_state")

    def __init__(self, state: ClientSeries, client: Callable[[str], ClientSeries]) -> None:
        self._state = state
        self._client = client

    def __call__(self, record: RequestRecord, /) -> None:
        """Count ``record`` in its client's series (see :meth:`count`).

        Raises:
            ValueError: the record's exemplar labels (its trace and span ids) are
                longer than OpenMetrics allows; nothing is counted then.
        """
        trace_id = record.trace_id
        self.count(
            record.client,
            record.route,
            record.outcome == "ok",
            record.duration,
            record.delay,
            record.suppressed,
            record.cancelled_by_caller,
            [
                (a.kind, a.replica, a.outcome, a.status, a.duration, a.zone, a.other_connection)
                for a in record.attempts
            ],
            None if trace_id is None else {"trace_id": trace_id, "span_id": record.span_id or ""},
            record.sample_left_out,
        )

    def count(
        self,
        client: str,
        route: str,
        ok: bool,
        duration: float,
        delay: float | None,
        suppressed: SuppressReason | None,
        cancelled_by_caller: bool,
        attempts: Sequence[AttemptFacts],
        exemplar: dict[str, str] | None = None,
        left_out: SampleLeftOut | None = None,
    ) -> None:
        """Count one request from its facts, without a :class:`RequestRecord`.

        Args:
            client, route, duration, delay, suppressed, cancelled_by_caller: as the
                record's fields of those names (``duration`` and ``delay`` in seconds).
            ok: the record's ``outcome`` is ``ok``.
            attempts: every attempt, in the order sent (see :data:`AttemptFacts`).
            exemplar: the labels of the exemplar of each duration observed, or ``None``.
            left_out: the record's ``sample_left_out``.

        Raises:
            ValueError: ``exemplar`` is longer than OpenMetrics allows; nothing is
                counted then.
        """
        state = self._state
        if client is not state.name and client != state.name:  # renamed after bind()
            state = self._client(client)
        if exemplar is not None:
            check_exemplar(exemplar)
        with state.lock:
            series = _count_request(
                state, route, ok, duration, delay, suppressed, exemplar, left_out
            )
            home = attempts[0][5] if attempts else None
            for kind, origin, outcome, status, elapsed, zone, other_connection in attempts:
                if outcome == "unsent":  # no replica saw it: neither a hedge nor an
                    # attempt sent, only counted apart (issue 23, BH-54)
                    (series.unsent.get(kind) or series.unsent_child(kind)).value += 1
                    continue
                primary = kind == "primary"
                replica = (series.primaries if primary else series.backups).get(origin)
                if replica is None:
                    replica = state.replica_series(series, kind, origin)
                replica.attempts.value += 1
                if not primary:
                    series.hedges.value += 1
                    if outcome == "won":
                        series.wins.value += 1
                    relation = (
                        "unknown"
                        if home is None or zone is None
                        else "same"
                        if zone == home
                        else "crossed"
                    )
                    target = "other_connection" if other_connection else "other_replica"
                    (
                        series.placements.get((target, relation))
                        or series.placement_child(target, relation)
                    ).value += 1
                if outcome == "cancelled":
                    if cancelled_by_caller:
                        continue
                    (replica.cancelled or replica.make_cancelled()).value += 1
                    if not primary:
                        continue  # observed: primaries only (censored, see _prometheus)
                elif status is None or outcome == "dropped":
                    continue  # no headers, or no work: no sample
                elif outcome == "lost":
                    (replica.lost or replica.make_lost()).value += 1
                replica.duration.observe(elapsed, exemplar)

    def count_won(
        self,
        client: str,
        route: str,
        ok: bool,
        duration: float,
        delay: float | None,
        suppressed: SuppressReason | None,
        replica: str,
        status: int | None,
        seconds: float,
        left_out: SampleLeftOut | None = None,
    ) -> None:
        """Count a request of one attempt, its primary, that won: :meth:`count` with
        ``attempts=[("primary", replica, "won", status, seconds, None, False)]``, no
        exemplar, without building the facts. Never raises.

        Args:
            replica: the primary's replica origin.
            status: its HTTP status, or ``None`` (no headers: nothing observed).
            seconds: its duration, from sending to its response headers.
            left_out: why its latency was not given to the delay policy, or ``None``.
        """
        state = self._state
        if client is not state.name and client != state.name:  # renamed after bind()
            state = self._client(client)
        with state.lock:  # the same updates as count()'s, for this one case
            series = _count_request(state, route, ok, duration, delay, suppressed, None, left_out)
            found = series.primaries.get(replica)
            if found is None:
                found = state.replica_series(series, "primary", replica)
            found.attempts.value += 1
            if status is not None:
                found.duration.observe(seconds, None)

    def __repr__(self) -> str:
        return f"<hedgeclient Prometheus hook client={self._state.name!r}>"


def _count_request(
    state: ClientSeries,
    route: str,
    ok: bool,
    duration: float,
    delay: float | None,
    suppressed: SuppressReason | None,
    exemplar: dict[str, str] | None,
    left_out: SampleLeftOut | None = None,
) -> RouteSeries:
    """The request-level updates of :meth:`Hook.count` and :meth:`Hook.count_won`, under
    ``state.lock``: the outcome, the duration of an ``ok`` request, the suppress reason,
    the sample left out and the delay gauge. Returns the route's series for the
    per-attempt updates."""
    series = state.routes.get(route)
    if series is None:
        series = state.route_series(route)
    if ok:
        series.ok.value += 1
        series.duration.observe(duration, exemplar)
    else:
        series.error.value += 1
    if suppressed is not None:
        series.suppressed_child(suppressed).value += 1
    if left_out is not None:
        (series.left_out.get(left_out) or series.left_out_child(left_out)).value += 1
    if delay is not None or suppressed == "cutoff":
        series.hedgeable = True
        series.delay = delay
    return series
