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

Transports bound under one name are one client: each gauge of the name covers all of
its live transports (the contract in ``_prometheus``): the budgets' balances summed
over distinct budgets, the delay of each route any of their policies gives one
(:func:`route_delay`), the highest loop lag; the replica series merge in ``_fleet``.

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
from hedgeclient.instrumentation._hook import drain
from hedgeclient.instrumentation._readers import distinct
from hedgeclient.instrumentation._series import ClientSeries

if TYPE_CHECKING:
    from hedgeclient._policy.delay import DelaySnapshot
    from hedgeclient.instrumentation._readers import GaugeReaders, TokenBalance

__all__ = ["GaugeCollector", "route_delay"]

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
        """Report ``readers`` while ``owner`` lives, merged with the other live readers
        of its name. ``readers`` must not hold ``owner``, or it never goes."""
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
        """The gauges, one series per client name, merged over the name's live
        transports (:func:`merge_names`)."""
        with self._lock:
            bound = sorted(self._bound.values(), key=lambda item: item[0])
        names: dict[str, list[GaugeReaders]] = {}
        for _, readers in bound:  # in bind order
            names.setdefault(readers.name, []).append(readers)
        delay = GaugeMetricFamily(_DELAY_NAME, _DELAY_HELP, labels=("client", "route"))
        tokens = GaugeMetricFamily(_TOKENS_NAME, _TOKENS_HELP, labels=("client",))
        own = GaugeMetricFamily(_ROUTE_TOKENS_NAME, _ROUTE_TOKENS_HELP, labels=("client", "route"))
        lag = GaugeMetricFamily(_LAG_NAME, _LAG_HELP, labels=("client",))
        retries = CounterMetricFamily(_RETRIES_NAME, _RETRIES_HELP, labels=("client",))
        refused = CounterMetricFamily(_REFUSED_NAME, _REFUSED_HELP, labels=("client",))
        for name in sorted(names):
            group = names[name]
            budgets = distinct(readers.budget for readers in group)
            tokens.add_metric((name,), sum(budget.tokens for budget in budgets))
            routes: dict[str, list[TokenBalance]] = {}
            for readers in group:
                for route, budget in readers.route_budgets.items():
                    routes.setdefault(route, []).append(budget)
            for route in sorted(routes):
                own.add_metric((name, route), sum(b.tokens for b in distinct(routes[route])))
            counted = {id(r.budget): r.retries for r in group if r.retries is not None}
            if counted:
                draws = [read() for read in counted.values()]
                retries.add_metric((name,), sum(allowed for allowed, _ in draws))
                refused.add_metric((name,), sum(refusals for _, refusals in draws))
            lags = [r.event_loop_lag() for r in group if r.event_loop_lag is not None]
            if lags:
                lag.add_metric((name,), _highest(lags))
            state = self._clients.get(name)
            if state is not None:
                _add_delays(delay, name, state, [r.delay_snapshot for r in group])
        caps = {name: state.max_replicas for name, state in self._clients.items()}
        return [delay, tokens, own, lag, retries, refused, *fleet_metrics(names, caps)]


def _highest(lags: list[float]) -> float:
    """The highest loop lag, in seconds; NaN only if every one is (all collected)."""
    known = [seconds for seconds in lags if not math.isnan(seconds)]
    return max(known) if known else math.nan


def _add_delays(
    family: GaugeMetricFamily,
    name: str,
    state: ClientSeries,
    readers: list[Callable[[], DelaySnapshot] | None],
) -> None:
    """One delay sample per route of ``state`` seen eligible for hedging (so at most
    ``max_routes``) that one of the name's policies (``readers``, one per live
    transport; ``None``: a policy without snapshots) gives a delay: see
    :func:`route_delay`. A policy whose snapshot raises is left out, logged."""
    snapshots: list[DelaySnapshot | None] = []
    for reader in readers:
        if reader is None:
            snapshots.append(None)
            continue
        try:
            snapshots.append(reader())
        except Exception:  # a metric never fails a scrape
            policy = getattr(reader, "__self__", reader)  # the policy of a bound method
            logger.warning(
                "hedgeclient: %r.delay_snapshot() failed during a scrape", policy, exc_info=True
            )
    if not snapshots:
        return
    with state.lock:  # the loops' drains may add routes meanwhile
        drain(state)  # the routes and latest delays of the requests that ended
        routes = [(s.route, s.delay) for s in state.routes.values() if s.hedgeable]
    for route, latest in routes:
        found, seconds = route_delay(route, latest, snapshots)
        if found:
            family.add_metric((name, route), math.nan if seconds is None else seconds)


def route_delay(
    route: str, latest: float | None, snapshots: list[DelaySnapshot | None]
) -> tuple[bool, float | None]:
    """The delay gauge of ``route`` over the snapshots of a name's policies:
    ``(shown, seconds)``, ``None`` seconds for a suspended route (NaN).

    A policy gives the route a delay by name when its snapshot lists the route (an
    :class:`~hedgeclient.AdaptiveDelay`'s tracked routes), else a default one when it
    tracks no routes (a :class:`~hedgeclient.FixedDelay`'s; ``None``, a policy without
    snapshots: ``latest``, the route's latest request's delay). The delays by name
    win over the defaults (another transport's fixed delay does not hide the delay an
    adaptive one learned for the route); of several, the highest, a suspension counting
    as the highest: the gauge is then the delay by which every transport of the name
    has sent the route's backup, and NaN while one of them sends none.

    Args:
        route: the route label.
        latest: the delay of the route's latest request, seconds (``None``: cutoff).
        snapshots: one per live transport of the name, in bind order.
    """
    by_name: list[float | None] = []
    defaults: list[float | None] = []
    for snapshot in snapshots:
        if snapshot is None:
            defaults.append(latest)
        elif route in snapshot.routes:
            by_name.append(snapshot.routes[route])
        elif not snapshot.tracks_routes:
            defaults.append(snapshot.default)
    found = by_name or defaults
    if not found:
        return False, None
    if any(seconds is None for seconds in found):
        return True, None
    return True, max(seconds for seconds in found if seconds is not None)
