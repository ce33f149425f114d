"""The scrape-time gauges of the bound clients.

The collector runs on Prometheus's scrape thread (or whichever thread calls
``generate_latest``), while requests go on on the event loop. It reads each client's
gauges through its :class:`~hedgeclient.instrumentation._readers.GaugeReaders`
(callables safe on that thread), never a transport, and never calls ``hedge_delay``:
for a policy that publishes no snapshot, the delay gauge is the delay the hook stored.

Each client's readers are held as long as their owner lives (weakly): the transport's
reporter for ``HedgedTransport(metrics=...)``, the source given to
:meth:`PrometheusMetrics.bind`. The readers never hold their owner, so a transport
that is garbage collected drops its gauge series.

Strictly private.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from hedgeclient.instrumentation._fleet import describe_fleet, fleet_metrics
from hedgeclient.instrumentation._series import ClientSeries

if TYPE_CHECKING:
    from hedgeclient._policy.delay import DelaySnapshot
    from hedgeclient.instrumentation._readers import GaugeReaders

__all__ = ["GaugeCollector"]

logger = logging.getLogger("hedgeclient")

_DELAY_NAME = "hedgeclient_hedge_delay_seconds"
_DELAY_HELP = "The hedge delay the next request of the route gets, in seconds (NaN: cutoff)."
_TOKENS_NAME = "hedgeclient_budget_tokens"
_TOKENS_HELP = "Backups the hedge budget's main bucket holds (0 .. burst)."
_ROUTE_TOKENS_NAME = "hedgeclient_route_budget_tokens"
_ROUTE_TOKENS_HELP = "Backups the main bucket of a route's own hedge budget holds (0 .. burst)."
_RETRIES_NAME = "hedgeclient_budget_retries"
_RETRIES_HELP = "Retries a retry library drew from the hedge budget (HedgeBudget.try_retry)."
_REFUSED_NAME = "hedgeclient_budget_retries_refused"
_REFUSED_HELP = "Retries the hedge budget refused (HedgeBudget.try_retry returned False)."
_LAG_NAME = "hedgeclient_event_loop_lag_seconds"
_LAG_HELP = (
    "How late the client's event loop typically serves its hedge deadlines lately, in "
    "seconds (the client's own lag)."
)


class GaugeCollector:
    """Reads the scrape-time gauges of the bound clients. Strictly private.

    Holds each client's :class:`GaugeReaders` as long as its owner lives (by weak
    reference to the owner), and never the registry.
    """

    def __init__(self, clients: Mapping[str, ClientSeries]) -> None:
        self._clients = clients
        self._bound: weakref.WeakKeyDictionary[object, tuple[int, GaugeReaders]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._count = 0

    def add(self, owner: object, readers: GaugeReaders) -> None:
        """Report ``readers`` while ``owner`` lives (the latest bound wins for its
        name). ``readers`` must not hold ``owner``, or it never goes."""
        with self._lock:
            self._count += 1
            self._bound[owner] = (self._count, readers)

    def __len__(self) -> int:
        with self._lock:
            return len(self._bound)

    def describe(self) -> Iterable[Metric]:
        """The gauge families, empty (for the registry's duplicate check)."""
        return [
            GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route")),
            GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",)),
            GaugeMetricFamily(_ROUTE_TOKENS_NAME, _ROUTE_TOKENS_HELP, labels=("client", "route")),
            GaugeMetricFamily(_LAG_NAME, _LAG_HELP, labels=("client",)),
            CounterMetricFamily(_RETRIES_NAME, _RETRIES_HELP, labels=("client",)),
            CounterMetricFamily(_REFUSED_NAME, _REFUSED_HELP, labels=("client",)),
            *describe_fleet(),
        ]

    def collect(self) -> Iterable[Metric]:
        """The gauges, one series per client name (the readers bound last)."""
        with self._lock:
            bound = list(self._bound.values())
        latest: dict[str, GaugeReaders] = {}
        for _, readers in sorted(bound, key=lambda item: item[0]):
            latest[readers.name] = readers
        delay = GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route"))
        tokens = GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",))
        own = GaugeMetricFamily(_ROUTE_TOKENS_NAME, _ROUTE_TOKENS_HELP, labels=("client", "route"))
        lag = GaugeMetricFamily(_LAG_NAME, _LAG_HELP, labels=("client",))
        retries = CounterMetricFamily(_RETRIES_NAME, _RETRIES_HELP, labels=("client",))
        refused = CounterMetricFamily(_REFUSED_NAME, _REFUSED_HELP, labels=("client",))
        for name in sorted(latest):
            readers = latest[name]
            tokens.add_metric((name,), readers.tokens())
            if readers.route_tokens is not None:
                for route, balance in sorted(readers.route_tokens().items()):
                    own.add_metric((name, route), balance)
            if readers.retries is not None:
                allowed, refusals = readers.retries()
                retries.add_metric((name,), allowed)
                refused.add_metric((name,), refusals)
            if readers.event_loop_lag is not None:
                lag.add_metric((name,), readers.event_loop_lag())
            state = self._clients.get(name)
            if state is not None:
                _add_delays(delay, name, state, readers.delay_snapshot)
        caps = {name: state.max_replicas for name, state in self._clients.items()}
        return [delay, tokens, own, lag, retries, refused, *fleet_metrics(latest, caps)]


def _add_delays(
    family: GaugeMetricFamily,
    name: str,
    state: ClientSeries,
    reader: Callable[[], DelaySnapshot] | None,
) -> None:
    """One delay sample per route of ``state`` seen eligible for hedging (so at most
    ``max_routes``), and, for a policy whose snapshot ``tracks_routes``, tracked by it:
    a route it evicted leaves the gauge."""
    snapshot = None
    if reader is not None:
        try:
            snapshot = reader()
        except Exception:  # a metric never fails a scrape
            policy = getattr(reader, "__self__", reader)  # the policy of a bound method
            logger.warning(
                "hedgeclient: %r.delay_snapshot() failed during a scrape", policy, exc_info=True
            )
            return
    with state.lock:  # hooks may add routes meanwhile
        routes = list(state.routes.values())
    tracked = snapshot.routes if snapshot is not None and snapshot.tracks_routes else None
    for series in routes:
        if not series.hedgeable or (tracked is not None and series.route not in tracked):
            continue
        seconds = series.delay if snapshot is None else snapshot.delay(series.route)
        family.add_metric((name, series.route), math.nan if seconds is None else seconds)
