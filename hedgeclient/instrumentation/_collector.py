"""The scrape-time gauges, and what a bound transport must offer to feed them.

The collector runs on Prometheus's scrape thread (or whichever thread calls
``generate_latest``), while requests go on on the event loop. So it reads only values
that are safe from another thread: the budget's ``tokens`` float, the delay policy's
published :class:`~hedgeclient.DelaySnapshot` (never its live structures), and the
delay the hook stored for a policy that publishes none. It never calls
``hedge_delay``.

Strictly private, but for :class:`MetricsSource`, which
``hedgeclient.instrumentation`` exports.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from hedgeclient._policy.delay import SnapshotDelayPolicy
from hedgeclient.instrumentation._fleet import describe_fleet, fleet_metrics
from hedgeclient.instrumentation._series import ClientSeries

__all__ = ["GaugeCollector", "MetricsSource", "TokenBalance"]

logger = logging.getLogger("hedgeclient")

_DELAY_NAME = "hedgeclient_hedge_delay_seconds"
_DELAY_HELP = "The hedge delay the next request of the route gets, in seconds (NaN: cutoff)."
_TOKENS_NAME = "hedgeclient_budget_tokens"
_TOKENS_HELP = "Backups the hedge budget's main bucket holds (0 .. burst)."
_LAG_NAME = "hedgeclient_event_loop_lag_seconds"
_LAG_HELP = (
    "How late the client's event loop typically serves its hedge deadlines lately, in "
    "seconds (the client's own lag)."
)


class TokenBalance(Protocol):
    """A hedge budget as the metrics read it: its main balance, in backups."""

    @property
    def tokens(self) -> float:
        """Backups the main bucket holds (a float, read from the scrape thread)."""
        ...


class MetricsSource(Protocol):
    """What :meth:`PrometheusMetrics.bind` needs of a transport.

    :class:`~hedgeclient.HedgedTransport` satisfies it. The source is held by weak
    reference (so it must support ``weakref``) and read from the scrape thread: each
    attribute must be safe to read there (plain attributes and floats are).

    .. versionadded:: 0.1.0
    """

    @property
    def name(self) -> str:
        """The ``client`` label of its metrics."""
        ...

    @property
    def delay_policy(self) -> object:
        """Its delay policy: a :class:`~hedgeclient.SnapshotDelayPolicy` has a gauge per
        route from its snapshots; any other, the delay of each route's latest request."""
        ...

    @property
    def budget(self) -> TokenBalance:
        """Its hedge budget (``hedgeclient_budget_tokens``)."""
        ...


class GaugeCollector:
    """Reads the scrape-time gauges from the bound sources. Strictly private.

    Holds the sources by weak reference, and never the registry.
    """

    def __init__(self, clients: Mapping[str, ClientSeries]) -> None:
        self._clients = clients
        self._sources: weakref.WeakKeyDictionary[MetricsSource, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._bound = 0

    def add(self, source: MetricsSource) -> None:
        """Report ``source`` from now on (the latest bound wins for its name)."""
        with self._lock:
            self._bound += 1
            self._sources[source] = self._bound

    def __len__(self) -> int:
        with self._lock:
            return len(self._sources)

    def describe(self) -> Iterable[Metric]:
        """The two gauge families, empty (for the registry's duplicate check)."""
        return [
            GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route")),
            GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",)),
            GaugeMetricFamily(_LAG_NAME, _LAG_HELP, labels=("client",)),
            *describe_fleet(),
        ]

    def collect(self) -> Iterable[Metric]:
        """The two gauges, one series per client name (the source bound last)."""
        with self._lock:
            bound = list(self._sources.items())
        latest: dict[str, MetricsSource] = {}
        for source, _ in sorted(bound, key=lambda item: item[1]):
            latest[source.name] = source
        delay = GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route"))
        tokens = GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",))
        lag = GaugeMetricFamily(_LAG_NAME, _LAG_HELP, labels=("client",))
        for name in sorted(latest):
            source = latest[name]
            tokens.add_metric((name,), source.budget.tokens)
            seconds = getattr(source, "event_loop_lag", None)  # optional members
            if isinstance(seconds, float):
                lag.add_metric((name,), seconds)
            state = self._clients.get(name)
            if state is not None:
                self._add_delays(delay, name, state, source.delay_policy)
        caps = {name: state.max_replicas for name, state in self._clients.items()}
        return [delay, tokens, lag, *fleet_metrics(latest, caps)]

    @staticmethod
    def _add_delays(
        family: GaugeMetricFamily, name: str, state: ClientSeries, policy: object
    ) -> None:
        """One delay sample per route of ``state`` seen eligible for hedging."""
        snapshot = None
        if isinstance(policy, SnapshotDelayPolicy):
            try:
                snapshot = policy.delay_snapshot()
            except Exception:  # a metric never fails a scrape
                logger.warning(
                    "hedgeclient: %r.delay_snapshot() failed during a scrape",
                    policy,
                    exc_info=True,
                )
                return
        with state.lock:  # hooks may add routes meanwhile
            routes = list(state.routes.values())
        for series in routes:
            if not series.hedgeable:
                continue
            seconds = series.delay if snapshot is None else snapshot.delay(series.route)
            family.add_metric((name, series.route), math.nan if seconds is None else seconds)
