"""The cached label children of each client, route and replica, the label caps, and the
statistics of what is cached.

``.labels(...)`` costs a lock and a dict look-up keyed by a tuple of strings: far more
than the increment itself. So every child a request may touch is looked up once and
kept here; the children are the plain accumulators of ``_families``.
The hook updates a client's children under the client's lock (:attr:`ClientSeries.lock`,
reentrant: the look-up paths that add series take it too), so transports of one client
name on event loops in several threads count exactly.

Each client also holds the buffer its transports hand their requests' events to
(:attr:`ClientSeries.pending`, a ``deque``: ``append`` and ``popleft`` are atomic, so
loops on several threads append while another thread drains); ``_hook.drain`` counts
them, oldest first, under the lock.

Strictly private.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from hedgeclient._events import AttemptKind, RequestEnd, SampleLeftOut, SuppressReason
from hedgeclient.instrumentation._families import OTHER, Families

if TYPE_CHECKING:
    from hedgeclient.instrumentation._families import CounterChild, HistogramChild

__all__ = [
    "PENDING_EVENTS",
    "ClientSeries",
    "PrometheusMetricsStatistics",
    "ReplicaSeries",
    "RouteSeries",
]

PENDING_EVENTS = 256
"""Events a client's buffer (:attr:`ClientSeries.pending`) holds before the request that
fills it drains it (on its loop, under the client's lock). Memory stays bounded with
nobody scraping (256 events, tens of kB at most), and that drain, 1-3 µs an event,
holds that one request and its loop about 0.3-0.8 ms once per 256 requests, well under
a typical hedge delay; a larger bound saves nothing more (the drain's own cost is
already a few ns a request) and makes that stall longer."""


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
class ReplicaSeries:
    """The children of one (client, route, kind, replica label). Strictly private."""

    __slots__ = ("attempts", "cancelled", "duration", "families", "key", "lost")

    def __init__(
        self, families: Families, client: str, route: str, kind: AttemptKind, replica: str
    ) -> None:
        self.families = families
        self.key = (client, route, replica)
        self.attempts: CounterChild = families.attempts.labels(client, route, kind, replica)
        self.duration: HistogramChild = families.attempt_duration.labels(client, route, kind)
        # Made on first use: most (route, replica) pairs never lose a race.
        self.cancelled: CounterChild | None = None
        self.lost: CounterChild | None = None

    def make_cancelled(self) -> CounterChild:
        """Create (once) and return the cancelled-attempts child."""
        child = self.cancelled = self.families.cancelled.labels(*self.key)
        return child

    def make_lost(self) -> CounterChild:
        """Create (once) and return the lost-attempts child."""
        child = self.lost = self.families.lost.labels(*self.key)
        return child


@final
class RouteSeries:
    """The children of one (client, route). Strictly private."""

    __slots__ = (
        "backups",
        "delay",
        "duration",
        "error",
        "families",
        "hedgeable",
        "hedges",
        "key",
        "left_out",
        "ok",
        "placements",
        "primaries",
        "route",
        "suppressed",
        "unsent",
        "wins",
    )

    def __init__(self, families: Families, client: str, route: str) -> None:
        self.families = families
        self.route = route
        self.key = (client, route)
        # Initialised to zero at once, so that ratios and rates exist from the start.
        self.ok: CounterChild = families.requests.labels(client, route, "ok")
        self.error: CounterChild = families.requests.labels(client, route, "error")
        self.hedges: CounterChild = families.hedges.labels(client, route)
        self.wins: CounterChild = families.wins.labels(client, route)
        self.duration: HistogramChild = families.request_duration.labels(client, route)
        self.suppressed: dict[str, CounterChild] = {}
        self.left_out: dict[str, CounterChild] = {}
        self.placements: dict[tuple[str, str], CounterChild] = {}
        self.unsent: dict[str, CounterChild] = {}  # by kind, made on first use: rare
        # By the attempt's replica origin (several origins may share the "other" label).
        self.primaries: dict[str, ReplicaSeries] = {}
        self.backups: dict[str, ReplicaSeries] = {}
        # Seen eligible for hedging (a delay, or the cutoff): has a delay gauge. `delay`
        # is the latest such request's delay, for a policy that publishes no snapshot.
        self.hedgeable = False
        self.delay: float | None = None

    def placement_child(self, target: str, zone: str) -> CounterChild:
        """The backup-placement child of ``(target, zone)`` (created once)."""
        child = self.placements.get((target, zone))
        if child is None:
            child = self.families.placements.labels(*self.key, target, zone)
            self.placements[(target, zone)] = child
        return child

    def unsent_child(self, kind: AttemptKind) -> CounterChild:
        """The unsent-attempts child of ``kind`` (created once)."""
        child = self.unsent.get(kind)
        if child is None:
            child = self.unsent[kind] = self.families.unsent.labels(*self.key, kind)
        return child

    def left_out_child(self, reason: SampleLeftOut) -> CounterChild:
        """The samples-left-out child of ``reason`` (created once)."""
        child = self.left_out.get(reason)
        if child is None:
            child = self.left_out[reason] = self.families.left_out.labels(*self.key, reason)
        return child

    def suppressed_child(self, reason: SuppressReason) -> CounterChild:
        """The suppressed-hedges child of ``reason`` (created once)."""
        child = self.suppressed.get(reason)
        if child is None:
            child = self.suppressed[reason] = self.families.suppressed.labels(*self.key, reason)
        return child


@final
class ClientSeries:
    """Every cached series of one ``client`` label value, and the events not counted
    yet (:attr:`pending`). Strictly private."""

    __slots__ = (
        "families",
        "lock",
        "max_replicas",
        "max_routes",
        "name",
        "other",
        "overflowed",
        "pending",
        "replica_labels",
        "replica_other",
        "routes",
    )

    def __init__(self, families: Families, name: str, max_routes: int, max_replicas: int) -> None:
        self.families = families
        self.name = name
        self.max_routes = max_routes
        self.max_replicas = max_replicas
        self.routes: dict[str, RouteSeries] = {}
        self.other: RouteSeries | None = None
        self.overflowed = 0
        self.replica_labels: dict[str, str] = {}
        self.replica_other = False  # whether replica="other" was used
        self.lock = threading.RLock()
        # The events of the requests of this name that ended and are not counted yet,
        # oldest first: the transports append (one C-level call per request), and
        # whatever reads the counts drains it first (``_hook.drain``).
        self.pending: deque[RequestEnd] = deque()

    def route_series(self, route: str) -> RouteSeries:
        """The slow path of a route look-up: add the route, or count it as ``other``."""
        with self.lock:
            series = self.routes.get(route)
            if series is not None:
                return series
            if len(self.routes) < self.max_routes:
                series = self.routes[route] = RouteSeries(self.families, self.name, route)
                return series
            self.overflowed += 1
            if self.other is None:
                self.other = RouteSeries(self.families, self.name, OTHER)
            return self.other

    def replica_series(self, series: RouteSeries, kind: AttemptKind, replica: str) -> ReplicaSeries:
        """The slow path of a replica look-up: cache the children of ``(kind, replica)``."""
        by_replica = series.primaries if kind == "primary" else series.backups
        with self.lock:
            label = self.replica_labels.get(replica)
            if label is None:
                if len(self.replica_labels) < self.max_replicas:
                    label = self.replica_labels[replica] = replica
                else:
                    label = OTHER
                    self.replica_other = True
            found = by_replica.get(label)
            if found is None:
                found = ReplicaSeries(self.families, self.name, series.route, kind, label)
                by_replica[label] = found
            # Origins beyond the cap are not cached under their own name: that would
            # let the cache grow without bound (each look-up then takes this path).
            return found

    def statistics(self) -> tuple[int, int, int]:
        """(routes, replicas, overflowed), ``other`` included in the first two."""
        with self.lock:
            return (
                len(self.routes) + (self.other is not None),
                len(self.replica_labels) + self.replica_other,
                self.overflowed,
            )
