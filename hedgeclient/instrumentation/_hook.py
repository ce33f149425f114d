"""The Prometheus consumer of the requests' events: counters and histograms from each
request's :class:`~hedgeclient.RequestRecord`, or from the few facts of a request whose
primary alone answered (:attr:`RequestEnd.sole`), for which the transport builds no
record.

What is counted where is the public contract in the module docstring of
``hedgeclient.instrumentation._prometheus``. A duration below 0 (a clock that stepped
back) or NaN is observed as 0: no histogram ever sees a negative latency, whose
``_sum`` would then decrease like a counter reset.

Off the request path: ``HedgedTransport(metrics=...)`` does not call this module per
request. Its reporter (``_report``) appends each request's ``RequestEnd`` to its
client's buffer (:attr:`ClientSeries.pending`, a ``deque``: one C-level call), and
:func:`drain` counts the buffered events, oldest first (so the delay gauge of a route
without snapshots still shows its latest request's delay), under the client's lock:

- whenever the counts are read: the registry's collectors at each scrape (and so
  ``registry.get_sample_value``), ``PrometheusMetrics.statistics``; a reader never
  misses a request that had returned to its caller;
- on the request path, when the buffer holds ``_report.PENDING_EVENTS`` events (memory
  stays bounded with nobody scraping), for a traced request (below), and when the
  transport closes (its final counts complete).

A :class:`Hook` given as a hook (:meth:`PrometheusMetrics.bind`) counts each record at
once, after its client's buffered events.

Exemplars: when the request was traced and sampled (:attr:`RequestRecord.trace_id`),
each duration it observes carries the exemplar ``{trace_id, span_id}`` of its request
span, so a latency bucket (a p99 panel) leads to a trace of a request in it. Exemplars
are exposed in the OpenMetrics format only (``prometheus_client.openmetrics``). Their
timestamp is the wall time they are counted at; so that it is the request's own end,
the transport drains the buffer at once for a traced request (which already pays for
its spans, far more than a drain).

Cost: every series touched is cached, and each is a plain accumulator (an int
counter; a histogram's bucket counts, found by ``bisect``, and sum), updated under the
client's lock, once per drain rather than per request, without prometheus-client's
per-value locks (``_families`` gives the figures that chose them over
prometheus-client's own children). A custom collector, registered in the registry in
place of prometheus-client ``Counter`` and ``Histogram`` objects, drains, then exports
the accumulators from snapshots, with the samples those would give.
``benchmarks/bench_overhead.py`` and ``benchmarks/bench_metrics_cost.py`` measure the
cost and ``docs/benchmarks.md`` gives the figures. With metrics disabled nothing of
this package runs or is imported.

Strictly private.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, final

from prometheus_client.samples import Exemplar

from hedgeclient._events import RequestEnd, RequestRecord, SampleLeftOut, SuppressReason
from hedgeclient.instrumentation._families import DURATION_BUCKETS, check_exemplar

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from hedgeclient.instrumentation._families import HistogramChild
    from hedgeclient.instrumentation._series import ClientSeries, RouteSeries

__all__ = ["Hook", "drain", "drain_all", "observe"]

logger = logging.getLogger("hedgeclient")


@final
class Hook:
    """The :class:`~hedgeclient.HedgeHook` one transport calls. Strictly private.

    Args:
        state: the series of the client the transport was bound under.
        client: returns the series of another client name (a record of another name).
    """

    __slots__ = ("_client", "_state")

    def __init__(self, state: ClientSeries, client: Callable[[str], ClientSeries]) -> None:
        self._state = state
        self._client = client

    def __call__(self, record: RequestRecord, /) -> None:
        """Count ``record`` in its client's series at once, under the client's lock (so
        that transports of one name on several threads count exactly), after the
        name's buffered events (older).

        Raises:
            ValueError: the record's exemplar labels (its trace and span ids) are
                longer than OpenMetrics allows; nothing is counted then.
        """
        state = self._state
        client = record.client
        if client is not state.name and client != state.name:  # another name than bound
            state = self._client(client)
        with state.lock:
            if state.pending:  # the name's buffered events are older: count them first
                drain(state)
            _count_record(state, record)

    @property
    def pending(self) -> deque[RequestEnd]:
        """The bound client's buffer (:attr:`ClientSeries.pending`), which
        ``HedgedTransport(metrics=...)`` appends each request's event to;
        :meth:`drain` counts them."""
        return self._state.pending

    def drain(self) -> None:
        """Count the bound client's buffered events (:func:`drain`). Never raises."""
        drain(self._state)

    def __repr__(self) -> str:
        return f"<hedgeclient Prometheus hook client={self._state.name!r}>"


def drain(state: ClientSeries) -> None:
    """Count the events buffered in ``state.pending``, oldest first, under the client's
    lock: those there when the lock is taken (loops that keep appending cannot hold
    the drainer forever).

    Each reader of the counts calls it first (the registry's two collectors,
    ``PrometheusMetrics.statistics``), so a reader never misses a request that had
    returned to its caller; and it holds the lock while it counts, so a reader that
    comes meanwhile waits for the counts in flight. The transport calls it too when
    the buffer is full, for a traced request and when it closes (``_report``).

    An event that fails to count (exemplar labels too long, :func:`check_exemplar`:
    nothing of it counted; a bug: what it counted before the error stays) is dropped,
    and the failures are logged once per drain with their number: a metric never fails
    a request, nor a scrape. Never raises.
    """
    pending = state.pending
    failed = 0
    first: Exception | None = None
    with state.lock:
        for _ in range(len(pending)):  # no other drainer pops meanwhile: the lock
            event = pending.popleft()
            try:
                _count_event(state, event)
            except Exception as error:  # a metric never fails a request, nor a scrape
                failed += 1
                if first is None:
                    first = error
    if first is not None:
        logger.warning(
            "hedgeclient: counting the Prometheus metrics of %d request(s) of client %r "
            "failed; they are left out",
            failed,
            state.name,
            exc_info=first,
        )


def drain_all(clients: dict[str, ClientSeries]) -> None:
    """:func:`drain` every client of ``clients`` (a registry's, by name). Never raises."""
    for state in tuple(clients.copy().values()):  # one C-level copy: clients may be added
        drain(state)


def _count_event(state: ClientSeries, event: RequestEnd) -> None:
    """Count one request's event in ``state`` (its client's: the buffer's owner), under
    the client's lock: its record, or for a primary that alone answered
    (:attr:`RequestEnd.sole`) the same counts from the event's facts.

    Raises:
        ValueError: as :meth:`Hook.__call__`.
    """
    sole = event.sole
    if sole is None:
        if event.record is not None:  # always, when sole is None
            _count_record(state, event.record)
        return
    replica, status, seconds = sole
    series = _count_request(  # what _count_record counts of a record of that one attempt
        state,
        event.route,
        event.outcome == "ok",
        event.duration,
        event.delay,
        event.suppressed,
        event.sample_left_out,
        None,
    )
    found = series.primaries.get(replica)
    if found is None:
        found = state.replica_series(series, "primary", replica)
    found.attempts.value += 1
    if status is not None:
        observe(found.duration, seconds, None)


def _count_record(state: ClientSeries, record: RequestRecord) -> None:
    """Count ``record`` in ``state``, under the client's lock; its durations carry the
    exemplar of its trace, if it has one (timestamped now, ``observe``).

    Raises:
        ValueError: as :meth:`Hook.__call__`; nothing is counted then.
    """
    exemplar = None
    if record.trace_id is not None:
        exemplar = {"trace_id": record.trace_id, "span_id": record.span_id or ""}
        check_exemplar(exemplar)
    series = _count_request(
        state,
        record.route,
        record.outcome == "ok",
        record.duration,
        record.delay,
        record.suppressed,
        record.sample_left_out,
        exemplar,
    )
    _count_attempts(state, series, record, exemplar)


def _count_request(
    state: ClientSeries,
    route: str,
    ok: bool,
    duration: float,
    delay: float | None,
    suppressed: SuppressReason | None,
    left_out: SampleLeftOut | None,
    exemplar: dict[str, str] | None,
) -> RouteSeries:
    """The request-level updates, under the client's lock: the outcome, the duration
    of an ``ok`` request, the suppress reason, the sample left out and the delay gauge.
    Returns the route's series for the per-attempt updates."""
    series = state.routes.get(route)
    if series is None:
        series = state.route_series(route)
    if ok:
        series.ok.value += 1
        observe(series.duration, duration, exemplar)
    else:
        series.error.value += 1
    if suppressed is not None:
        (series.suppressed.get(suppressed) or series.suppressed_child(suppressed)).value += 1
    if left_out is not None:
        (series.left_out.get(left_out) or series.left_out_child(left_out)).value += 1
    if delay is not None or suppressed == "cutoff":
        series.hedgeable = True
        series.delay = delay
    return series


def _count_attempts(
    state: ClientSeries,
    series: RouteSeries,
    record: RequestRecord,
    exemplar: dict[str, str] | None,
) -> None:
    """The per-attempt updates of one request, under the client's lock: attempts sent,
    hedges and wins, backup placements, cancelled and lost losers, attempt durations,
    unsent attempts."""
    attempts = record.attempts
    home = attempts[0].zone if attempts else None
    by_caller = record.cancelled_by_caller
    for attempt in attempts:
        kind = attempt.kind
        outcome = attempt.outcome
        if outcome == "unsent":  # no replica saw it: neither a hedge nor an attempt
            # sent, only counted apart (issue 23, BH-54)
            (series.unsent.get(kind) or series.unsent_child(kind)).value += 1
            continue
        primary = kind == "primary"
        replica = (series.primaries if primary else series.backups).get(attempt.replica)
        if replica is None:
            replica = state.replica_series(series, kind, attempt.replica)
        replica.attempts.value += 1
        if not primary:
            series.hedges.value += 1
            if outcome == "won":
                series.wins.value += 1
            zone = attempt.zone
            relation = (
                "unknown" if home is None or zone is None else "same" if zone == home else "crossed"
            )
            target = "other_connection" if attempt.other_connection else "other_replica"
            (
                series.placements.get((target, relation))
                or series.placement_child(target, relation)
            ).value += 1
        if outcome == "cancelled":
            if by_caller:
                continue
            (replica.cancelled or replica.make_cancelled()).value += 1
            if not primary:
                continue  # observed: primaries only (censored, see _prometheus)
        elif attempt.status is None or outcome == "dropped":
            continue  # no headers, or no work: no sample
        elif outcome == "lost":
            (replica.lost or replica.make_lost()).value += 1
        observe(replica.duration, attempt.duration, exemplar)


def observe(child: HistogramChild, seconds: float, exemplar: dict[str, str] | None) -> None:
    """Count ``seconds`` (a duration) in its bucket of ``child``, as prometheus-client's
    ``Histogram.observe`` does.

    A duration below 0 or NaN is observed as 0. ``exemplar`` (labels, checked by
    :func:`check_exemplar`) becomes the bucket's latest exemplar. Never raises.
    """
    if not seconds > 0.0:  # below 0 (a clock stepped back) or NaN
        seconds = 0.0
    index = bisect_left(DURATION_BUCKETS, seconds)  # the first bound >= seconds
    child.buckets[index] += 1
    child.sum += seconds
    if exemplar is not None:
        child.exemplars[index] = Exemplar(exemplar, seconds, time.time())
