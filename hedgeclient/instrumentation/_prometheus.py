"""Prometheus metrics for :class:`~hedgeclient.HedgedTransport`.

A hook (:class:`~hedgeclient.HedgeHook`) turns each request's
:class:`~hedgeclient.RequestRecord` into counter increments and histogram
observations, and a custom collector reads two gauges from the bound transports at
scrape time. The metric names, types and labels below are public API.

==================================== ========= ============== ======================================
Name                                 Type      Labels         Meaning
==================================== ========= ============== ======================================
hedgeclient_requests_total           counter   client, route, Logical requests ended; outcome is ok
                                               outcome        (a response was returned) or error (an
                                                              exception was).
hedgeclient_attempts_total           counter   client, route, Attempts sent; kind is primary or
                                               kind, replica  backup.
hedgeclient_hedges_total             counter   client, route  Backup requests sent (the extra load).
hedgeclient_hedge_wins_total         counter   client, route  Requests whose backup answered first.
hedgeclient_hedges_suppressed_total  counter   client, route, Requests whose due backup was not
                                               reason         sent, by SuppressReason.
hedgeclient_cancelled_attempts_total counter   client, route, Losers cancelled before their response
                                               replica        headers (the replica saw a
                                                              disconnect).
hedgeclient_lost_attempts_total      counter   client, route, Losers that had response headers,
                                               replica        closed unread (the replica did all the
                                                              work).
hedgeclient_request_duration_seconds histogram client, route  Seconds from the start of a request to
                                                              the winner's response headers.
hedgeclient_attempt_duration_seconds histogram client, route, Seconds from sending an attempt to its
                                               kind           response headers.
hedgeclient_hedge_delay_seconds      gauge     client, route  Seconds: the hedge delay the route's
                                                              next request gets (scrape time).
hedgeclient_budget_tokens            gauge     client         Backups the budget's main bucket holds
                                                              (scrape time).
==================================== ========= ============== ======================================

Labels, all from bounded sets:

- ``client``: the transport's ``name`` (default ``"default"``). Transports with the
  same name share their series.
- ``route``: :attr:`RequestRecord.route` (default ``"GET http://catalog"``). At most
  ``max_routes`` distinct values per client (default 1,000); later routes are counted
  under ``route="other"``.
- ``replica``: the replica origin (``"http://10.0.0.7:8080"``): configured, so bounded;
  at most ``max_replicas`` distinct values per client (default 100, for requests to
  origins that are not configured), later ones under ``replica="other"``.
- ``kind``: ``primary`` or ``backup``. ``outcome``: ``ok`` or ``error``. ``reason``:
  ``not_idempotent``, ``unreplayable_body``, ``opted_out``, ``budget``,
  ``max_in_flight``, ``no_other_replica``, ``cutoff``, ``pushback``,
  ``selector_error``.

What is counted where:

- ``hedgeclient_request_duration_seconds`` observes requests with outcome ``ok`` (it
  has a response); its ``_count`` equals ``hedgeclient_requests_total{outcome="ok"}``.
  Errors are counted by ``hedgeclient_requests_total{outcome="error"}`` only.
- ``hedgeclient_attempt_duration_seconds`` observes every attempt that had response
  headers (outcome ``won``, ``lost``, or ``failed`` with a status such as 503), and
  one kind of censored attempt: a **primary cancelled because its backup won**,
  observed at its elapsed time, a lower bound on its latency (above the hedge delay).
  Leaving those out would remove samples from above the delay only and pull the
  ``kind="primary"`` quantiles below the delay, the bias ``docs/how-it-works.md`` warns of; with
  them, ``histogram_quantile(0.95, ...)`` of the primaries is unbiased at the delay,
  the same samples :class:`~hedgeclient.AdaptiveDelay` records. Other censored attempts
  (backups cancelled because the primary won, attempts cancelled by the caller) and
  attempts that failed without headers (a connect error) are left out; cancelled
  losers are counted by ``hedgeclient_cancelled_attempts_total``.
- ``hedgeclient_cancelled_attempts_total`` counts attempts with outcome ``cancelled``
  when the caller did not cancel the request (``cancelled_by_caller`` false): losers
  cut off before their headers, whose replica could stop work early. Losers with
  outcome ``lost`` had their headers already: they are *not* counted there but in
  ``hedgeclient_lost_attempts_total``, because cancelling them saved the replica
  nothing.
- ``hedgeclient_hedges_total`` counts every backup attempt (with ``max_hedges`` > 1 a
  request may send several), so ``hedges / requests`` is the extra load.
  ``hedgeclient_hedge_wins_total`` counts requests whose winning attempt was a backup.
- ``hedgeclient_hedges_suppressed_total`` counts at most one reason per request (the
  first one).

The two gauges are read when Prometheus scrapes, from every live bound transport
(held by weak references: a transport that is garbage collected drops its gauge
series):

- ``hedgeclient_hedge_delay_seconds`` calls the transport's delay policy's
  ``hedge_delay(route)`` for every route of the client seen eligible for hedging: the
  fixed value for a :class:`~hedgeclient.FixedDelay`, the route's current estimate for
  an :class:`~hedgeclient.AdaptiveDelay` (``initial_delay`` while it warms up). It is
  ``NaN`` while hedging of the route is suspended (``hedge_delay`` returned ``None``,
  the ``cutoff`` reason): the series stays, Grafana draws a gap. The ``other`` route
  has no delay gauge. The policy is read from the scraping thread, so a custom
  :class:`~hedgeclient.DelayPolicy` must keep ``hedge_delay`` read-only (both built-in
  ones are).
- ``hedgeclient_budget_tokens`` is :attr:`HedgeBudget.tokens`, the main bucket's
  balance in backups (0 .. ``burst``); the floor bucket is not included. A budget shared
  by several clients is reported under each.

When several live transports share a ``client`` name, the gauges report the one bound
most recently (a name is one series). Counters keep their series for the life of the
registry, as Prometheus counters should.

Histogram buckets (seconds, :data:`DURATION_BUCKETS`), log-spaced from 1 ms to 10 s,
each bound 1.2-1.5 times the one before, so that ``histogram_quantile(0.99, ...)``,
which interpolates inside a bucket, lands within one bucket (20-50 %) of the true p99
anywhere in that range:
0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.010, 0.012, 0.015, 0.020,
0.025, 0.030, 0.040, 0.050, 0.060, 0.080, 0.100, 0.120, 0.150, 0.200, 0.250, 0.300,
0.400, 0.500, 0.600, 0.800, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, +Inf.

Counters also expose the ``*_created`` series of ``prometheus_client``; set
``PROMETHEUS_DISABLE_CREATED_SERIES=True`` in the environment to drop them.

Cost: the hook caches every ``.labels(...)`` child, so a request costs a few dict
look-ups, counter increments and two histogram observations: about 3 µs for an
unhedged record and 6 µs for a hedged one measured alone, 7-8 µs per request inside a
running client (``benchmarks/bench_metrics_cost.py``; calling ``.labels()`` every
time would cost 2.3 times as much). With metrics disabled nothing of this module runs
or is imported.

Prior art: Prometheus "Metric and label naming" and "Instrumentation" best practices
(base units, ``_total`` counters, bounded labels, initialise series to zero);
the ``prometheus_client`` documentation (custom collectors, ``CollectorRegistry``);
stamina's ``stamina_retries_total``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from hedgeclient._events import AttemptKind, HedgeHook, RequestRecord, SuppressReason

if TYPE_CHECKING:
    from prometheus_client.metrics import MetricWrapperBase

    from hedgeclient._transport import HedgedTransport

__all__ = ["DURATION_BUCKETS", "OTHER", "PrometheusMetrics", "PrometheusMetricsStatistics"]

logger = logging.getLogger("hedgeclient")

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.010, 0.012, 0.015, 0.020, 0.025, 0.030, 0.040, 0.050, 0.060, 0.080,
    0.100, 0.120, 0.150, 0.200, 0.250, 0.300, 0.400, 0.500, 0.600, 0.800,
    1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, math.inf,
)  # fmt: skip
"""Upper bounds of the duration histograms' buckets, in seconds (1 ms .. 10 s, +Inf)."""

OTHER: Final = "other"
"""The ``route`` (or ``replica``) label value of series beyond the per-client cap."""

_DELAY_NAME = "hedgeclient_hedge_delay_seconds"
_DELAY_HELP = "The hedge delay the next request of the route gets, in seconds (NaN: cutoff)."
_TOKENS_NAME = "hedgeclient_budget_tokens"
_TOKENS_HELP = "Backups the hedge budget's main bucket holds (0 .. burst)."


@final
@dataclass(frozen=True, slots=True)
class PrometheusMetricsStatistics:
    """A snapshot of a :class:`PrometheusMetrics`.

    Attributes:
        clients: distinct ``client`` label values seen.
        routes: distinct ``route`` label values over all clients, ``other`` included.
        replicas: distinct ``replica`` label values over all clients, ``other``
            included.
        transports: bound transports still alive (read by the scrape-time gauges).
        overflowed: requests counted under ``route="other"`` because their client
            had ``max_routes`` routes already.

    .. versionadded:: 0.1.0
    """

    clients: int
    routes: int
    replicas: int
    transports: int
    overflowed: int


@final
class _Families:
    """The labelled metric families of one registry. Strictly private."""

    __slots__ = (
        "attempt_duration",
        "attempts",
        "cancelled",
        "hedges",
        "lost",
        "request_duration",
        "requests",
        "suppressed",
        "wins",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        made: list[MetricWrapperBase] = []
        try:
            self.requests = Counter(
                "hedgeclient_requests_total",
                "Logical requests ended, by outcome (ok: a response; error: an exception).",
                ("client", "route", "outcome"),
                registry=registry,
            )
            made.append(self.requests)
            self.attempts = Counter(
                "hedgeclient_attempts_total",
                "Attempts sent, by kind (primary, backup) and replica.",
                ("client", "route", "kind", "replica"),
                registry=registry,
            )
            made.append(self.attempts)
            self.hedges = Counter(
                "hedgeclient_hedges_total",
                "Backup requests sent.",
                ("client", "route"),
                registry=registry,
            )
            made.append(self.hedges)
            self.wins = Counter(
                "hedgeclient_hedge_wins_total",
                "Requests whose backup answered first.",
                ("client", "route"),
                registry=registry,
            )
            made.append(self.wins)
            self.suppressed = Counter(
                "hedgeclient_hedges_suppressed_total",
                "Requests whose due backup was not sent, by reason.",
                ("client", "route", "reason"),
                registry=registry,
            )
            made.append(self.suppressed)
            self.cancelled = Counter(
                "hedgeclient_cancelled_attempts_total",
                "Losing attempts cancelled before their response headers.",
                ("client", "route", "replica"),
                registry=registry,
            )
            made.append(self.cancelled)
            self.lost = Counter(
                "hedgeclient_lost_attempts_total",
                "Losing attempts that had response headers, closed unread.",
                ("client", "route", "replica"),
                registry=registry,
            )
            made.append(self.lost)
            self.request_duration = Histogram(
                "hedgeclient_request_duration_seconds",
                "Seconds from the start of a request to the winner's response headers.",
                ("client", "route"),
                registry=registry,
                buckets=DURATION_BUCKETS,
            )
            made.append(self.request_duration)
            self.attempt_duration = Histogram(
                "hedgeclient_attempt_duration_seconds",
                "Seconds from sending an attempt to its response headers "
                "(primaries cancelled by a winning backup: elapsed time, a lower bound).",
                ("client", "route", "kind"),
                registry=registry,
                buckets=DURATION_BUCKETS,
            )
            made.append(self.attempt_duration)
        except BaseException:
            for metric in made:  # leave the registry as it was
                registry.unregister(metric)
            raise


@final
class _ReplicaSeries:
    """Cached children of one (route, kind, replica). Strictly private."""

    __slots__ = ("_cancelled", "_lost", "attempts", "duration", "families", "key")

    def __init__(
        self, families: _Families, key: tuple[str, str], kind: AttemptKind, replica: str
    ) -> None:
        self.families = families
        self.key = (*key, replica)  # (client, route, replica)
        self.attempts = families.attempts.labels(key[0], key[1], kind, replica)
        self.duration = families.attempt_duration.labels(key[0], key[1], kind)
        self._cancelled: Counter | None = None
        self._lost: Counter | None = None

    def cancelled(self) -> Counter:
        child = self._cancelled
        if child is None:
            child = self._cancelled = self.families.cancelled.labels(*self.key)
        return child

    def lost(self) -> Counter:
        child = self._lost
        if child is None:
            child = self._lost = self.families.lost.labels(*self.key)
        return child


@final
class _RouteSeries:
    """Cached children of one (client, route). Strictly private."""

    __slots__ = (
        "error",
        "families",
        "hedgeable",
        "hedges",
        "key",
        "ok",
        "replicas",
        "request_duration",
        "route",
        "suppressed",
        "wins",
    )

    def __init__(self, families: _Families, client: str, route: str) -> None:
        self.families = families
        self.route = route
        self.key = (client, route)
        # Initialised to zero at once, so that ratios and rates exist from the start.
        self.ok = families.requests.labels(client, route, "ok")
        self.error = families.requests.labels(client, route, "error")
        self.hedges = families.hedges.labels(client, route)
        self.wins = families.wins.labels(client, route)
        self.request_duration = families.request_duration.labels(client, route)
        self.suppressed: dict[str, Counter] = {}
        self.replicas: dict[tuple[str, str], _ReplicaSeries] = {}
        # Seen eligible for hedging (a delay, or the cutoff): has a delay gauge.
        self.hedgeable = False

    def suppressed_child(self, reason: SuppressReason) -> Counter:
        child = self.suppressed.get(reason)
        if child is None:
            child = self.suppressed[reason] = self.families.suppressed.labels(*self.key, reason)
        return child


@final
class _ClientSeries:
    """Every cached series of one ``client`` label value. Strictly private."""

    __slots__ = (
        "families",
        "lock",
        "max_replicas",
        "max_routes",
        "name",
        "other",
        "overflowed",
        "replica_labels",
        "replica_other",
        "routes",
    )

    def __init__(self, families: _Families, name: str, max_routes: int, max_replicas: int) -> None:
        self.families = families
        self.name = name
        self.max_routes = max_routes
        self.max_replicas = max_replicas
        self.routes: dict[str, _RouteSeries] = {}
        self.other: _RouteSeries | None = None
        self.overflowed = 0
        self.replica_labels: dict[str, str] = {}
        self.replica_other = False  # whether replica="other" was used
        self.lock = threading.Lock()

    def route_series(self, route: str) -> _RouteSeries:
        """The slow path of a route look-up: add the route, or count it as ``other``."""
        with self.lock:
            series = self.routes.get(route)
            if series is not None:
                return series
            if len(self.routes) < self.max_routes:
                series = self.routes[route] = _RouteSeries(self.families, self.name, route)
                return series
            self.overflowed += 1
            if self.other is None:
                self.other = _RouteSeries(self.families, self.name, OTHER)
            return self.other

    def replica_series(
        self, series: _RouteSeries, kind: AttemptKind, replica: str
    ) -> _ReplicaSeries:
        """The slow path of a replica look-up: cache the children of ``(kind, replica)``."""
        with self.lock:
            label = self.replica_labels.get(replica)
            if label is None:
                if len(self.replica_labels) < self.max_replicas:
                    label = self.replica_labels[replica] = replica
                else:
                    label = OTHER
                    self.replica_other = True
            replica_series = series.replicas.get((kind, label))
            if replica_series is None:
                replica_series = _ReplicaSeries(self.families, series.key, kind, label)
                series.replicas[kind, label] = replica_series
            if label != replica:  # cap the cache as well as the series
                return replica_series
            series.replicas[kind, replica] = replica_series
            return replica_series


@final
class _Hook:
    """The :class:`~hedgeclient.HedgeHook` one transport calls. Strictly private."""

    __slots__ = ("_metrics", "_state")

    def __init__(self, metrics: PrometheusMetrics, state: _ClientSeries) -> None:
        self._metrics = metrics
        self._state = state

    def __call__(self, record: RequestRecord, /) -> None:
        state = self._state
        if record.client != state.name:  # the transport was renamed after bind()
            state = self._metrics._client(record.client)
        series = state.routes.get(record.route)
        if series is None:
            series = state.route_series(record.route)
        if record.outcome == "ok":
            series.ok.inc()
            series.request_duration.observe(record.duration)
        else:
            series.error.inc()
        suppressed = record.suppressed
        if suppressed is not None:
            series.suppressed_child(suppressed).inc()
        if not series.hedgeable and (record.delay is not None or suppressed == "cutoff"):
            series.hedgeable = True
        by_caller = record.cancelled_by_caller
        replicas = series.replicas
        for attempt in record.attempts:
            kind = attempt.kind
            replica = replicas.get((kind, attempt.replica))
            if replica is None:
                replica = state.replica_series(series, kind, attempt.replica)
            replica.attempts.inc()
            outcome = attempt.outcome
            if kind == "backup":
                series.hedges.inc()
                if outcome == "won":
                    series.wins.inc()
            if outcome == "cancelled":
                if not by_caller:
                    replica.cancelled().inc()
                    if kind == "primary":  # censored: see the module docstring
                        replica.duration.observe(attempt.duration)
            elif attempt.status is not None:
                replica.duration.observe(attempt.duration)
                if outcome == "lost":
                    replica.lost().inc()

    def __repr__(self) -> str:
        return f"<hedgeclient Prometheus hook client={self._state.name!r}>"


@final
class _GaugeCollector:
    """Reads the scrape-time gauges from the bound transports. Strictly private.

    Holds the transports by weak reference, and never the registry.
    """

    def __init__(self, clients: dict[str, _ClientSeries]) -> None:
        self._clients = clients
        self._transports: weakref.WeakKeyDictionary[HedgedTransport, int] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._bound = 0

    def add(self, transport: HedgedTransport) -> None:
        with self._lock:
            self._bound += 1
            self._transports[transport] = self._bound

    def __len__(self) -> int:
        with self._lock:
            return len(self._transports)

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route")),
            GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",)),
        ]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            bound = list(self._transports.items())
        latest: dict[str, HedgedTransport] = {}
        for transport, _ in sorted(bound, key=lambda item: item[1]):
            latest[transport.name] = transport  # the most recently bound wins
        delay = GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route"))
        tokens = GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",))
        for name in sorted(latest):
            transport = latest[name]
            tokens.add_metric((name,), transport.budget.tokens)
            state = self._clients.get(name)
            if state is None:
                continue
            policy = transport.delay_policy
            for series in list(state.routes.values()):  # a copy: hooks run meanwhile
                if not series.hedgeable:
                    continue
                try:
                    seconds = policy.hedge_delay(series.route)
                except Exception:  # a metric never fails a scrape
                    logger.warning(
                        "hedgeclient: hedge_delay(%r) failed during a scrape",
                        series.route,
                        exc_info=True,
                    )
                    continue
                delay.add_metric((name, series.route), math.nan if seconds is None else seconds)
        return [delay, tokens]


@final
class PrometheusMetrics:
    """The hedgeclient metrics of one Prometheus registry, and the hooks that feed them.

    Get the instance of a registry with :meth:`for_registry` (one per registry, so any
    number of transports can share it without "Duplicated timeseries" errors), then
    :meth:`bind` each transport. The metrics are listed in the module docstring of
    ``hedgeclient.instrumentation._prometheus``.

    Example usage::

        registry = prometheus_client.CollectorRegistry()
        metrics = PrometheusMetrics.for_registry(registry)
        transport = HedgedTransport(replicas=..., name="catalog")
        hook = metrics.bind(transport)  # HedgedTransport(metrics=...) does this

    Construct it directly only to change the caps, once per registry and before any
    :meth:`for_registry` call on it.

    Args:
        registry: the registry to register the metrics in; default (``None``) the
            global ``prometheus_client.REGISTRY``.
        max_routes: distinct ``route`` label values per client, ≥ 1; beyond them
            requests are counted under ``route="other"``. Default 1,000.
        max_replicas: distinct ``replica`` label values per client, ≥ 1; beyond them
            ``replica="other"``. Default 100.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a cap is below 1, or the registry already holds hedgeclient
            metrics (from :meth:`for_registry` or another instance).

    .. versionadded:: 0.1.0
    """

    _instances: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, PrometheusMetrics]] = (
        weakref.WeakKeyDictionary()
    )
    _instances_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_routes: int = 1000,
        max_replicas: int = 100,
    ) -> None:
        if registry is None:
            registry = REGISTRY
        if not isinstance(registry, CollectorRegistry):
            msg = f"`registry` must be a prometheus_client CollectorRegistry, got {registry!r}"
            raise TypeError(msg)
        self._max_routes = _check_cap("max_routes", max_routes)
        self._max_replicas = _check_cap("max_replicas", max_replicas)
        self._clients: dict[str, _ClientSeries] = {}
        self._lock = threading.Lock()
        self._collector = _GaugeCollector(self._clients)
        with PrometheusMetrics._instances_lock:
            if registry in PrometheusMetrics._instances:
                msg = (
                    "this registry already holds hedgeclient metrics; "
                    "use PrometheusMetrics.for_registry(registry)"
                )
                raise ValueError(msg)
            # The registry holds the families and the collector; this object holds
            # neither the registry nor a transport, so both can be garbage collected.
            self._families = _Families(registry)
            try:
                registry.register(self._collector)
            except BaseException:
                for family in self._families_list():
                    registry.unregister(family)
                raise
            PrometheusMetrics._instances[registry] = self

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> PrometheusMetrics:
        """Return the instance of ``registry``, creating it (with default caps) once.

        Thread-safe. The cache is keyed by the registry's identity and holds it weakly.

        Args:
            registry: a ``CollectorRegistry``; ``None`` for ``prometheus_client.REGISTRY``.

        Returns:
            The one :class:`PrometheusMetrics` of that registry.

        Raises:
            ValueError: the registry already holds metrics of these names that
                hedgeclient did not register.
        """
        if registry is None:
            registry = REGISTRY
        with cls._instances_lock:
            existing = cls._instances.get(registry)
            return existing if existing is not None else cls(registry)

    def bind(self, transport: HedgedTransport) -> HedgeHook:
        """Register ``transport`` for the scrape-time gauges; return its hook.

        The transport is held by weak reference: once it is garbage collected its
        gauge series disappear. Counter series live on under its ``client`` name.

        Args:
            transport: the :class:`~hedgeclient.HedgedTransport` to report; its
                ``name`` is the ``client`` label.

        Returns:
            The hook to give the transport (``hooks=[...]``): a callable taking a
            :class:`~hedgeclient.RequestRecord`, costing a few microseconds per
            request.
        """
        self._collector.add(transport)
        return _Hook(self, self._client(transport.name))

    def statistics(self) -> PrometheusMetricsStatistics:
        """Return a snapshot of the series cached so far."""
        with self._lock:
            clients = list(self._clients.values())
        routes = replicas = overflowed = 0
        for state in clients:
            with state.lock:
                routes += len(state.routes) + (state.other is not None)
                replicas += len(state.replica_labels) + state.replica_other
                overflowed += state.overflowed
        return PrometheusMetricsStatistics(
            clients=len(clients),
            routes=routes,
            replicas=replicas,
            transports=len(self._collector),
            overflowed=overflowed,
        )

    def _client(self, name: str) -> _ClientSeries:
        state = self._clients.get(name)
        if state is None:
            with self._lock:
                state = self._clients.get(name)
                if state is None:
                    state = _ClientSeries(
                        self._families, name, self._max_routes, self._max_replicas
                    )
                    self._clients[name] = state
        return state

    def _families_list(self) -> Sequence[MetricWrapperBase]:
        f = self._families
        return (
            f.requests,
            f.attempts,
            f.hedges,
            f.wins,
            f.suppressed,
            f.cancelled,
            f.lost,
            f.request_duration,
            f.attempt_duration,
        )

    def __repr__(self) -> str:
        return (
            f"PrometheusMetrics(max_routes={self._max_routes}, "
            f"max_replicas={self._max_replicas}, clients={len(self._clients)})"
        )


def _check_cap(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"`{name}` must be an int >= 1, got {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"`{name}` must be >= 1, got {value!r}"
        raise ValueError(msg)
    return value
