"""OpenTelemetry metrics from each request's record: the semantic-convention
``http.client.request.duration`` per attempt, and hedgeclient's own instruments.

A :class:`~hedgeclient.HedgeHook`, like the Prometheus one, fed by the same
:class:`~hedgeclient.RequestRecord`: neither is derived from the other. The instruments
mirror the Prometheus families one for one (``hedgeclient_requests_total`` is
``hedgeclient.requests``, ...), with the same bounded attributes: ``hedgeclient.client``,
``hedgeclient.route`` (at most ``max_routes`` per client, then ``other``),
``hedgeclient.replica`` (at most ``max_replicas``, then ``other``),
``hedgeclient.attempt.role`` (primary, backup), ``hedgeclient.outcome`` (ok, error) and
``hedgeclient.suppress_reason``; the same observations go into the histograms (see
``hedgeclient.instrumentation._prometheus``). ``http.client.request.duration`` carries
the semantic-convention attributes only, and observes every attempt that ended with
response headers or an error (cancelled attempts have no duration to report).

The meter provider is looked up per request: with none configured the hook returns at
once. Exemplars are the SDK's own (the request's span is current while hooks run).
Unlike the Prometheus consumer, which the transport feeds through a buffer counted off
the request path (``_hook``), this hook runs synchronously as each request ends: it
runs only with OpenTelemetry configured, and the SDK's exemplars need the span current.

Sources: OpenTelemetry semantic conventions v1.44.0, "Semantic conventions for HTTP
metrics"; OpenTelemetry metrics API (instrument naming, advisory bucket boundaries).

Strictly private.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, final

from opentelemetry import metrics

from hedgeclient._compat.otel import meter_provider
from hedgeclient._version import __version__
from hedgeclient.instrumentation import _otel_names as n
from hedgeclient.instrumentation._families import DURATION_BUCKETS, OTHER
from hedgeclient.instrumentation._otel_http import error_type, method_attributes

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hedgeclient._events import RequestRecord

__all__ = ["Instruments", "OtelMetricsHook", "meter_provider_in_force"]

_BUCKETS: Final = tuple(b for b in DURATION_BUCKETS if b != float("inf"))
_MAX_HTTP_KEYS: Final = 10_000  # cached http.client.request.duration attribute sets


def meter_provider_in_force(explicit: metrics.MeterProvider | None) -> metrics.MeterProvider | None:
    """``explicit``, else the global meter provider; ``None`` when none is configured."""
    if explicit is None:
        found: metrics.MeterProvider | None = meter_provider()
        return found
    if isinstance(explicit, metrics.NoOpMeterProvider):
        return None
    return explicit


@final
class Instruments:
    """The instruments of one meter provider. Strictly private."""

    __slots__ = (
        "attempt_duration",
        "attempts",
        "cancelled",
        "event_loop_lag",
        "hedge_delay",
        "hedges",
        "http_duration",
        "lost",
        "request_duration",
        "requests",
        "samples_left_out",
        "suppressed",
        "unsent",
        "wins",
    )

    def __init__(self, meter: metrics.Meter) -> None:
        counter, histogram = meter.create_counter, meter.create_histogram
        self.http_duration = histogram(
            n.HTTP_CLIENT_REQUEST_DURATION,
            unit="s",
            description="Duration of HTTP client requests.",
            explicit_bucket_boundaries_advisory=n.HTTP_DURATION_BUCKETS,
        )
        self.requests = counter(n.REQUESTS, "{request}", "Logical requests ended, by outcome.")
        self.attempts = counter(n.ATTEMPTS_SENT, "{attempt}", "Attempts sent, by role and replica.")
        self.hedges = counter(n.HEDGES, "{request}", "Backup requests sent.")
        self.wins = counter(n.HEDGE_WINS, "{request}", "Requests whose backup answered first.")
        self.suppressed = counter(
            n.HEDGES_SUPPRESSED, "{request}", "Requests whose due backup was not sent, by reason."
        )
        self.cancelled = counter(
            n.CANCELLED_ATTEMPTS, "{attempt}", "Losing attempts cancelled before their headers."
        )
        self.lost = counter(
            n.LOST_ATTEMPTS, "{attempt}", "Losing attempts that had headers, closed unread."
        )
        self.unsent = counter(
            n.UNSENT_ATTEMPTS, "{attempt}", "Attempts that never reached the wire, by role."
        )
        self.request_duration = histogram(
            n.REQUEST_DURATION,
            unit="s",
            description="From the start of a request to the winner's response headers.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.attempt_duration = histogram(
            n.ATTEMPT_DURATION,
            unit="s",
            description="From sending an attempt to its response headers.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.hedge_delay = histogram(
            n.HEDGE_DELAY_METRIC,
            unit="s",
            description="The hedge delay in force for each request that could be hedged.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.event_loop_lag = histogram(
            n.EVENT_LOOP_LAG,
            unit="s",
            description="How late the client's event loop ran lately, as each request ended.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.samples_left_out = counter(
            n.SAMPLES_LEFT_OUT,
            "{request}",
            "Primaries whose latency the delay policy was not given, by reason.",
        )


@final
class _Route:
    """The attribute sets of one (client, route). Strictly private."""

    __slots__ = ("backup", "base", "by_replica", "error", "ok", "primary", "reasons")

    def __init__(self, client: str, route: str) -> None:
        self.base = {n.CLIENT: client, n.ROUTE: route}
        self.ok = {**self.base, n.OUTCOME: "ok"}
        self.error = {**self.base, n.OUTCOME: "error"}
        self.primary = {**self.base, n.ATTEMPT_ROLE: "primary"}
        self.backup = {**self.base, n.ATTEMPT_ROLE: "backup"}
        self.reasons: dict[str, dict[str, str]] = {}
        # (role, replica label) -> (attempts attributes, per-replica attributes)
        self.by_replica: dict[tuple[str, str], tuple[dict[str, str], dict[str, str]]] = {}


@final
class OtelMetricsHook:
    """The :class:`~hedgeclient.HedgeHook` that records OpenTelemetry metrics. Strictly
    private.

    Args:
        provider: a meter provider, or ``None`` for the global one.
        max_routes, max_replicas: the attribute caps, as :class:`PrometheusMetrics`'.
    """

    __slots__ = (
        "_explicit",
        "_http",
        "_instruments",
        "_lock",
        "_max_replicas",
        "_max_routes",
        "_provider",
        "_replica_counts",
        "_replicas",
        "_route_counts",
        "_routes",
    )

    def __init__(
        self, provider: metrics.MeterProvider | None, max_routes: int, max_replicas: int
    ) -> None:
        self._explicit = provider
        self._provider: metrics.MeterProvider | None = None
        self._instruments: Instruments | None = None
        self._max_routes = max_routes
        self._max_replicas = max_replicas
        self._routes: dict[tuple[str, str], _Route] = {}
        self._replicas: dict[tuple[str, str], str] = {}  # (client, origin) -> label
        self._route_counts: dict[str, int] = {}  # client -> routes with their own label
        self._replica_counts: dict[str, int] = {}  # client -> replicas with their own label
        self._http: dict[tuple[str, str, int | None, str | None], Mapping[str, Any]] = {}
        self._lock = threading.Lock()

    def instruments(self) -> Instruments | None:
        """The instruments of the provider in force, or ``None`` when none is configured."""
        provider = meter_provider_in_force(self._explicit)
        if provider is not self._provider:
            instruments = None
            if provider is not None:
                meter = provider.get_meter(n.SCOPE, __version__, schema_url=n.SCHEMA_URL)
                if not isinstance(meter, metrics.NoOpMeter):
                    instruments = Instruments(meter)
            self._instruments, self._provider = instruments, provider
        return self._instruments

    def __call__(self, record: RequestRecord, /) -> None:
        instruments = self.instruments()
        if instruments is None:
            return
        route = self._route(record.client, record.route)
        if record.outcome == "ok":
            instruments.requests.add(1, route.ok)
            instruments.request_duration.record(_seconds(record.duration), route.base)
        else:
            instruments.requests.add(1, route.error)
        reason = record.suppressed
        if reason is not None:
            attributes = route.reasons.get(reason)
            if attributes is None:
                attributes = route.reasons[reason] = {**route.base, n.SUPPRESS_REASON: reason}
            instruments.suppressed.add(1, attributes)
        if record.delay is not None:
            instruments.hedge_delay.record(_seconds(record.delay), route.base)
        instruments.event_loop_lag.record(_seconds(record.event_loop_lag), route.base)
        left_out = record.sample_left_out
        if left_out is not None:
            key = "left_out:" + left_out  # "client_lag" is a suppress reason too
            attributes = route.reasons.get(key)
            if attributes is None:
                attributes = route.reasons[key] = {
                    **route.base,
                    n.SAMPLE_LEFT_OUT_REASON: left_out,
                }
            instruments.samples_left_out.add(1, attributes)
        by_caller = record.cancelled_by_caller
        for attempt in record.attempts:
            kind = attempt.kind
            if attempt.outcome == "unsent":  # no replica saw it: as the Prometheus hook
                instruments.unsent.add(1, route.primary if kind == "primary" else route.backup)
                continue
            sent, per_replica = self._replica(record.client, route, kind, attempt.replica)
            instruments.attempts.add(1, sent)
            outcome = attempt.outcome
            role = route.primary if kind == "primary" else route.backup
            if kind == "backup":
                instruments.hedges.add(1, route.base)
                if outcome == "won":
                    instruments.wins.add(1, route.base)
            if outcome == "cancelled":
                if not by_caller:
                    instruments.cancelled.add(1, per_replica)
                    if kind == "primary":  # censored: as the Prometheus histogram does
                        instruments.attempt_duration.record(_seconds(attempt.duration), role)
                continue
            if attempt.status is not None:
                instruments.attempt_duration.record(_seconds(attempt.duration), role)
                if outcome == "lost":
                    instruments.lost.add(1, per_replica)
            http = self._http_attributes(record, attempt.status, attempt.error_type)
            instruments.http_duration.record(_seconds(attempt.duration), http)

    def _route(self, client: str, route: str) -> _Route:
        found = self._routes.get((client, route))
        if found is not None:
            return found
        with self._lock:
            found = self._routes.get((client, route))
            if found is None:
                count = self._route_counts.get(client, 0)
                if count < self._max_routes:
                    found = self._routes[(client, route)] = _Route(client, route)
                    self._route_counts[client] = count + 1
                else:
                    found = self._routes.get((client, OTHER))
                    if found is None:
                        found = self._routes[(client, OTHER)] = _Route(client, OTHER)
            return found

    def _replica(
        self, client: str, route: _Route, kind: str, origin: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        label = self._replicas.get((client, origin))
        if label is None:
            with self._lock:
                label = self._replicas.get((client, origin))
                if label is None:
                    count = self._replica_counts.get(client, 0)
                    label = OTHER
                    if count < self._max_replicas:
                        label = self._replicas[(client, origin)] = origin
                        self._replica_counts[client] = count + 1
        found = route.by_replica.get((kind, label))
        if found is None:
            found = route.by_replica[(kind, label)] = (
                {**route.base, n.ATTEMPT_ROLE: kind, n.REPLICA: label},
                {**route.base, n.REPLICA: label},
            )
        return found

    def _http_attributes(
        self, record: RequestRecord, status: int | None, error: str | None
    ) -> Mapping[str, Any]:
        key = (record.method, record.origin, status, error)
        found = self._http.get(key)
        if found is not None:
            return found
        import httpx

        attributes: dict[str, Any] = method_attributes(record.method, httpx.URL(record.origin))
        attributes.pop(n.HTTP_REQUEST_METHOD_ORIGINAL, None)  # a span attribute, unbounded
        if status is not None:
            attributes[n.HTTP_RESPONSE_STATUS_CODE] = status
        kind = error if error is not None else error_type(status)
        if kind is not None:
            attributes[n.ERROR_TYPE] = kind
        if len(self._http) < _MAX_HTTP_KEYS:
            self._http[key] = attributes
        return attributes

    def __repr__(self) -> str:
        return f"<hedgeclient OpenTelemetry metrics hook routes={len(self._routes)}>"


def _seconds(value: float) -> float:
    """A duration as histograms take it: never negative, NaN as 0."""
    return value if value > 0.0 else 0.0
