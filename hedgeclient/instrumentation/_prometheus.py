"""Prometheus metrics for :class:`~hedgeclient.HedgedTransport`.

Each request's end becomes counter increments and histogram observations, counted off
the request path before any read (a scrape, ``get_sample_value``: a read sees every
request that has returned); a collector reads the gauges at scrape time through
callables each bound client gave (never the transport). Names, types, labels: public API.

==================================== ========= ============== ======================================
Name                                 Type      Labels         Meaning
==================================== ========= ============== ======================================
hedgeclient_requests_total           counter   client, route, Logical requests ended; outcome is ok
                                               outcome        (a response was returned) or error (an
                                                              exception was).
hedgeclient_attempts_total           counter   client, route, Attempts sent (that reached the wire);
                                               kind, replica  kind is primary or backup.
hedgeclient_hedges_total             counter   client, route  Backup requests sent (that reached
                                                              the wire): the extra load.
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
hedgeclient_route_budget_tokens      gauge     client, route  The same, for a route's own budget
                                                              (Route(budget=...); scrape time).
hedgeclient_budget_retries_total     counter   client         Retries a retry library drew from
                                                              the hedge budget (try_retry; scraped).
hedgeclient_budget_retries_refused_  counter   client         Retries the hedge budget refused
total                                                         (scrape time).
hedgeclient_backup_placements_total  counter   client, route, Backups sent, by target (other_replica
                                               target, zone   or other_connection: the same address,
                                                              a service with one address) and zone
                                                              (crossed, same, unknown).
hedgeclient_unsent_attempts_total    counter   client, route, Attempts that never reached the wire
                                               kind           (outcome unsent): no replica saw them.
hedgeclient_replicas                 gauge     client,        Replicas of the service known now
                                               service        (scrape time).
hedgeclient_replica_ejected          gauge     client,        1 while the replica is ejected by
                                               service,       outlier detection, else 0; one series
                                               replica        per current replica (scrape time).
hedgeclient_replica_ejections_total  counter   client, cause  Ejections by outlier detection, by
                                                              cause: connect_failed,
                                                              connect_stalled, unhealthy_status,
                                                              failed, outpaced (scrape time).
hedgeclient_replica_ejections_       counter   client         Ejections refused: max_ejected of the
refused_total                                                 service was ejected (scrape time).
hedgeclient_discovery_refreshes_     counter   client,        Refreshes of a discovered service that
total                                          service        gave a replica set (scrape time).
hedgeclient_discovery_errors_total   counter   client,        Failed refreshes (the last good set
                                               service, error kept), by DiscoveryError (scraped).
hedgeclient_discovery_family_errors_ counter   client,        Refreshes of a DNS source that gave a
total                                          service,       set although one address family's
                                               family         query failed (scrape time).
hedgeclient_event_loop_lag_seconds   gauge     client         Seconds the client's event loop is
                                                              typically late serving its hedge
                                                              deadlines lately: the client's
                                                              own lag (scrape time).
hedgeclient_delay_samples_left_out_  counter   client, route, Primaries whose latency the delay
total                                          reason         policy was not given: queued,
                                                              replica_silent, client_lag.
==================================== ========= ============== ======================================

Labels, all from bounded sets:

- ``client``: the transport's ``name`` (default ``"default"``). Transports with the
  same name share their series (the gauges merge them: below).
- ``route``: :attr:`RequestRecord.route` (default ``"GET http://catalog"``). At most
  ``max_routes`` distinct values per client (default 1,000); later routes are counted
  under ``route="other"``.
- ``replica``: the replica origin (``"http://10.0.0.7:8080"``): configured, so bounded;
  at most ``max_replicas`` distinct values per client (default 100, for requests to
  origins that are not configured), later ones under ``replica="other"``.
- ``service``: a logical origin of ``replicas=`` (configured, so bounded).
  ``replica`` on the scrape-time replica series: the replicas of the service now, at
  most ``max_replicas`` series per client (discovery may replace replicas, but the
  series shown are only the current ones).
- ``target``: ``other_replica`` or ``other_connection``; ``zone``: ``crossed``,
  ``same`` or ``unknown`` (a zone of the primary or the backup unknown); ``cause``:
  ``connect_failed``, ``connect_stalled``, ``unhealthy_status``, ``failed``,
  ``outpaced``;
  ``error``: ``not_found``, ``empty``, ``timeout``, ``server_error``, ``invalid``,
  ``source_error``; ``family``: ``ipv4`` (A) or ``ipv6`` (AAAA).
- ``kind``: ``primary`` or ``backup``. ``outcome``: ``ok`` or ``error``. ``reason``:
  ``not_idempotent``, ``unreplayable_body``, ``opted_out``, ``budget``,
  ``max_in_flight``, ``no_other_replica``, ``cutoff``, ``pushback``,
  ``selector_error``, ``deadline``, ``client_lag``, ``vetoed``, ``hook_error``
  (suppressed backups); ``queued``,
  ``replica_silent``, ``client_lag`` (samples left out).

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
  as :class:`~hedgeclient.AdaptiveDelay` records them. Other censored attempts (backups
  cancelled because the primary won, attempts cancelled by the caller) and
  attempts that failed without headers (a connect error) are left out; cancelled
  losers are counted by ``hedgeclient_cancelled_attempts_total``.
- ``hedgeclient_cancelled_attempts_total`` counts attempts with outcome ``cancelled``
  when the caller did not cancel the request (``cancelled_by_caller`` false): losers
  cut off before their headers, whose replica could stop work early. Losers with
  outcome ``lost`` had their headers already: they are *not* counted there but in
  ``hedgeclient_lost_attempts_total``, because cancelling them saved the replica
  nothing.
- A copy of a tied request that its replica dropped unexecuted (outcome ``dropped``,
  ``HedgedTransport(tied=...)``) is counted in ``hedgeclient_attempts_total`` (a
  twin is a backup, so in ``hedgeclient_hedges_total`` too) but is neither cancelled
  nor lost, and its 503 is not a latency: it is not observed in the durations.
- An attempt that never reached the wire (outcome ``unsent``: it waited for one of the
  client's own pool connections until the race ended, or timed out) loaded no replica:
  it is counted in ``hedgeclient_unsent_attempts_total`` only, and in none of the other
  families (issue 23).
- ``hedgeclient_hedges_total`` counts every backup attempt that reached the wire (with
  ``max_hedges`` > 1 a request may send several), so ``hedges / requests`` is the
  extra load.
  ``hedgeclient_hedge_wins_total`` counts requests whose winning attempt was a backup.
- ``hedgeclient_hedges_suppressed_total`` counts at most one reason per request (the
  first one).

Durations are never negative: a duration below 0 (a clock that stepped back) or NaN is
observed as 0.

The gauges are read when Prometheus scrapes, for every live bound transport (one
garbage collected drops out of its gauge series), through callables it gave when
bound. The scrape runs on another thread than the requests, so the gauges read only
what is safe there, never the delay policy's live state:

- ``hedgeclient_hedge_delay_seconds`` is the delay a route's next request gets, for
  the routes of the client seen eligible for hedging (so at most ``max_routes``; the
  ``other`` route has none), from the policy's :class:`~hedgeclient.DelaySnapshot`
  (a :class:`~hedgeclient.SnapshotDelayPolicy`, as both built-in ones are): for an
  :class:`~hedgeclient.AdaptiveDelay` (``tracks_routes``), only the routes it tracks
  (a recorded sample, at most its ``max_routes``: a route it evicted leaves the gauge)
  at their estimate (``initial_delay`` while warming up); for a
  :class:`~hedgeclient.FixedDelay`, every such route at the fixed value. For a policy
  without snapshots, the delay of the route's latest request. ``NaN`` while the
  route's hedging is suspended (``cutoff``): Grafana draws a gap.
- ``hedgeclient_budget_tokens`` is :attr:`HedgeBudget.tokens`, the main bucket's
  balance in backups (0 .. ``burst``); the floor bucket is not included. A budget shared
  by several client names is reported under each. ``hedgeclient_route_budget_tokens`` is
  the same for each route with a budget of its own (``Route(budget=...)``), labelled
  with the route's ``name``, else its criteria (``Route(method='POST',
  path='/orders')``); a budget two routes share is reported under each.

The replica metrics are read at scrape time too, from the transport's
``replica_statistics()`` and its ``selector``'s ``statistics()`` (which must be safe
from the scrape thread, as :class:`~hedgeclient.PowerOfTwoChoices`'s is: it reads a
published copy of the ejected set, so a cool-down that ended since the selector last
looked at the replica still shows as ejected until it does).

Counters keep their series for the life of the registry, as Prometheus counters should.

Transports sharing a ``client`` name are one client: its counters add up, and each
scrape-time series covers every live transport of the name. The budget gauges (main,
and per route label) and retry counters sum their distinct budgets (a budget two of
them share, once). The delay gauge shows each route that one of their policies
gives a delay: by name (an ``AdaptiveDelay``'s tracked routes, a snapshot's ``routes``) in
preference to a default (a ``FixedDelay``'s; a snapshot-less policy's latest request's
delay); of several, the highest, ``NaN`` if one suspends the route: the delay by which
each of them has sent the route's backup (the transport that recorded last is not
known at scrape time, and the highest does not flip with bind order). The loop lag is
the highest of their loops': a late loop is not hidden by a quick one. The replica
series are the union of their services and replicas, a replica ejected while any of
their selectors ejects it; ``hedgeclient_replica_ejections_total`` and
``hedgeclient_replica_ejections_refused_total`` sum distinct selectors, the discovery
counters the transports (each refreshes on its own). A sum drops when a transport is
collected (``rate()`` takes it for a counter reset).

Histogram buckets (seconds, :data:`DURATION_BUCKETS`), log-spaced from 1 ms to 10 s,
each bound 1.2-1.5 times the one before, so that ``histogram_quantile(0.99, ...)``,
which interpolates inside a bucket, lands within one bucket (20-50 %) of the true p99
anywhere in that range:
0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.010, 0.012, 0.015, 0.020,
0.025, 0.030, 0.040, 0.050, 0.060, 0.080, 0.100, 0.120, 0.150, 0.200, 0.250, 0.300,
0.400, 0.500, 0.600, 0.800, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, +Inf.

Counters also expose the ``*_created`` series of ``prometheus_client``; set
``PROMETHEUS_DISABLE_CREATED_SERIES=True`` in the environment to drop them.

Cost: a C-level append per request, counted in batches (``_hook``); none with metrics off.

Prior art: Prometheus "Metric and label naming" and "Instrumentation" practices (base
units, ``_total`` counters, bounded labels, series initialised to zero); the
``prometheus_client`` docs (custom collectors); stamina's ``stamina_retries_total``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import weakref
from functools import partial
from typing import ClassVar, final

from prometheus_client import REGISTRY, CollectorRegistry

from hedgeclient._checks import check_int, shown
from hedgeclient._events import HedgeHook
from hedgeclient.instrumentation._collector import GaugeCollector
from hedgeclient.instrumentation._families import DURATION_BUCKETS, OTHER, Families
from hedgeclient.instrumentation._hook import Hook, drain, drain_all
from hedgeclient.instrumentation._readers import GaugeReaders, MetricsSource, readers_of
from hedgeclient.instrumentation._series import ClientSeries, PrometheusMetricsStatistics

__all__ = [  # noqa: RUF022 - plain sorted(), as tests/test_exports.py asserts
    "DURATION_BUCKETS",
    "MetricsSource",
    "OTHER",
    "PrometheusMetrics",
    "PrometheusMetricsStatistics",
]


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
            msg = f"`registry` must be a prometheus_client CollectorRegistry, got {shown(registry)}"
            raise TypeError(msg)
        self._max_routes = check_int("max_routes", max_routes, 1)
        self._max_replicas = check_int("max_replicas", max_replicas, 1)
        self._clients: dict[str, ClientSeries] = {}
        self._lock = threading.Lock()
        self._collector = GaugeCollector(self._clients)
        with PrometheusMetrics._instances_lock:
            if registry in PrometheusMetrics._instances:
                msg = (
                    "this registry already holds hedgeclient metrics; "
                    "use PrometheusMetrics.for_registry(registry)"
                )
                raise ValueError(msg)
            # The registry holds the families and the collector; this object holds
            # neither the registry nor a transport, so both can be garbage collected.
            self._families = Families(registry, partial(drain_all, self._clients))
            try:
                registry.register(self._collector)
            except BaseException:
                registry.unregister(self._families)
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

    def bind(self, transport: MetricsSource) -> HedgeHook:
        """Register ``transport`` for the scrape-time gauges; return its hook.

        Its name, budget, delay policy and selector are read now; the gauges then read
        the budget's balance and the policy's snapshots at scrape time. The transport
        is held by weak reference: once it is garbage collected its gauge series
        disappear. Counter series live on under its ``client`` name.

        Args:
            transport: the :class:`~hedgeclient.HedgedTransport` to report (any
                :class:`MetricsSource`); its ``name`` is the ``client`` label.

        Returns:
            The hook to give the transport (``hooks=[...]``): a callable taking a
            :class:`~hedgeclient.RequestRecord`.
        """
        return self._bind(transport, readers_of(transport))

    def _bind(self, owner: object, readers: GaugeReaders) -> Hook:
        """Report the gauges ``readers`` reads while ``owner`` lives (held weakly);
        return the hook of the client ``readers.name``. ``readers`` must not hold
        ``owner``, or its gauges never go."""
        self._collector.add(owner, readers)
        return Hook(self._client(readers.name), self._client)

    def statistics(self) -> PrometheusMetricsStatistics:
        """Return a snapshot of the series cached so far (requests ended included)."""
        with self._lock:
            clients = list(self._clients.values())
        routes = replicas = overflowed = 0
        for state in clients:
            drain(state)  # the series its buffered events add
            counts = state.statistics()
            routes += counts[0]
            replicas += counts[1]
            overflowed += counts[2]
        return PrometheusMetricsStatistics(
            clients=len(clients),
            routes=routes,
            replicas=replicas,
            transports=len(self._collector),
            overflowed=overflowed,
        )

    def _client(self, name: str) -> ClientSeries:
        state = self._clients.get(name)
        if state is None:
            with self._lock:
                state = self._clients.get(name)
                if state is None:
                    state = ClientSeries(self._families, name, self._max_routes, self._max_replicas)
                    self._clients[name] = state
        return state

    def __repr__(self) -> str:
        return (
            f"PrometheusMetrics(max_routes={self._max_routes}, "
            f"max_replicas={self._max_replicas}, clients={len(self._clients)})"
        )


def hook_for(registry: CollectorRegistry | None, owner: object, readers: GaugeReaders) -> Hook:
    """The Prometheus hook of one transport (``HedgedTransport(metrics=...)``, which
    appends its events to ``Hook.pending``), whose gauges ``readers`` reads (callables,
    never the transport) while ``owner`` (its reporter) lives. Strictly private.

    Args:
        registry: the registry; ``None`` for ``prometheus_client.REGISTRY``.
        owner: held weakly; its gauge series go with it.
        readers: the client's gauges.
    """
    return PrometheusMetrics.for_registry(registry)._bind(owner, readers)
