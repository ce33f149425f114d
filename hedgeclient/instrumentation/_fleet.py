"""The scrape-time metrics of replica sets: membership, ejections, discovery.

Read when Prometheus scrapes (another thread than the requests'), through two
optional readers of a client's
:class:`~hedgeclient.instrumentation._readers.GaugeReaders`: ``replicas`` (each
service's source and replicas, built from plain counters and tuples) and
``ejections``, the selector's ``statistics()``, which must be safe from any thread
(:class:`~hedgeclient.PowerOfTwoChoices` publishes a frozen copy of its ejected set
for this). A client without them, or one whose reader raises, adds nothing: a metric
never fails a scrape.

A client name's series cover all of its live transports: the union of their services
and replicas (``hedgeclient_replicas`` counts the union), a replica ejected while any
of their selectors ejected it, the counters summed over distinct selectors (ejections)
and over the transports (discovery: each refreshes on its own).

Strictly private.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from hedgeclient.instrumentation._readers import GaugeReaders, ServiceReplicas

__all__ = ["describe_fleet", "fleet_metrics"]

logger = logging.getLogger("hedgeclient")

_REPLICAS = ("hedgeclient_replicas", "Replicas of the service known now (static or discovered).")
_EJECTED = (
    "hedgeclient_replica_ejected",
    "1 while the replica is ejected by outlier detection (as of the selector's last look), "
    "else 0; one series per replica of the service now.",
)
_EJECTIONS = (
    "hedgeclient_replica_ejections",
    "Replicas ejected by outlier detection, by cause (the result that ended the run).",
)
_OVERFLOW = (
    "hedgeclient_replica_ejections_refused",
    "Ejections refused because max_ejected of the service was ejected already.",
)
_REFRESHES = (
    "hedgeclient_discovery_refreshes",
    "Refreshes of a discovered service that gave a replica set.",
)
_ERRORS = (
    "hedgeclient_discovery_errors",
    "Refreshes of a discovered service that failed (the last good set kept), by error.",
)
_FAMILY_ERRORS = (
    "hedgeclient_discovery_family_errors",
    "Refreshes of a DNS-discovered service that gave a set although the query of one "
    "address family failed (the set holds the other family's addresses), by family.",
)


class _Families:
    """The fleet families of one scrape. Strictly private."""

    __slots__ = (
        "ejected",
        "ejections",
        "errors",
        "family_errors",
        "overflow",
        "refreshes",
        "replicas",
    )

    def __init__(self) -> None:
        self.replicas = GaugeMetricFamily(*_REPLICAS, labels=("client", "service"))
        self.ejected = GaugeMetricFamily(*_EJECTED, labels=("client", "service", "replica"))
        self.ejections = CounterMetricFamily(*_EJECTIONS, labels=("client", "cause"))
        self.overflow = CounterMetricFamily(*_OVERFLOW, labels=("client",))
        self.refreshes = CounterMetricFamily(*_REFRESHES, labels=("client", "service"))
        self.errors = CounterMetricFamily(*_ERRORS, labels=("client", "service", "error"))
        self.family_errors = CounterMetricFamily(
            *_FAMILY_ERRORS, labels=("client", "service", "family")
        )

    def all(self) -> list[Metric]:
        """Every family, in exposition order."""
        return [
            self.replicas,
            self.ejected,
            self.ejections,
            self.overflow,
            self.refreshes,
            self.errors,
            self.family_errors,
        ]


def describe_fleet() -> list[Metric]:
    """The families, empty (for the registry's duplicate check)."""
    return _Families().all()


def fleet_metrics(
    clients: Mapping[str, Sequence[GaugeReaders]], max_replicas: Mapping[str, int]
) -> Iterable[Metric]:
    """The families, with one client's series per ``clients`` entry, merged over its
    live transports.

    Args:
        clients: client name -> the readers of its live transports, in bind order.
        max_replicas: client name -> its cap on ``replica`` label values.
    """
    families = _Families()
    for name, group in clients.items():
        _add(families, name, group, max_replicas.get(name, 100))
    return families.all()


@final
class _Service:
    """One service of a client name, merged over its transports. Strictly private."""

    __slots__ = ("discovered", "errors", "family_errors", "refreshes", "replicas")

    def __init__(self) -> None:
        self.replicas: dict[str, None] = {}  # the union, in first-seen order
        self.discovered = False
        self.refreshes = 0
        self.errors: Counter[str] = Counter()
        self.family_errors: Counter[str] = Counter()

    def merge(self, stats: ServiceReplicas) -> None:
        """Add one transport's view of the service: its replicas to the union, its
        discovery counts to the sums (each transport refreshes on its own)."""
        self.replicas.update(dict.fromkeys(stats.replicas))
        if stats.source != "static":
            self.discovered = True
            self.refreshes += stats.refreshes
            self.errors.update(dict(stats.errors.items()))
            self.family_errors.update(dict(stats.family_errors.items()))


def _add(families: _Families, name: str, group: Sequence[GaugeReaders], cap: int) -> None:
    """The series of client ``name`` over its transports ``group``: the union of
    their services and replicas, a replica ejected while any of their selectors
    ejected it, the counters summed (a selector two transports share, once). A
    transport whose reader raises is left out, logged."""
    ejected: set[str] = set()
    causes: Counter[str] = Counter()
    overflow: int | None = None
    services: dict[str, _Service] = {}
    selectors: set[int] = set()  # ids of the selectors read (the readers hold them)
    for readers in group:
        try:
            if readers.ejections is not None and id(readers.selector) not in selectors:
                selectors.add(id(readers.selector))
                snapshot = readers.ejections()
                if snapshot is not None:
                    ejected.update(snapshot.ejected)
                    causes.update(dict(snapshot.ejections.items()))
                    overflow = (overflow or 0) + snapshot.overflow
            if readers.replicas is not None:
                for service, stats in readers.replicas().items():
                    services.setdefault(service, _Service()).merge(stats)
        except Exception:  # a metric never fails a scrape
            logger.warning("hedgeclient: reading the replicas of %r failed", name, exc_info=True)
    for cause, count in sorted(causes.items()):
        families.ejections.add_metric((name, cause), count)
    if overflow is not None:
        families.overflow.add_metric((name,), overflow)
    shown = 0
    for service, merged in sorted(services.items()):
        families.replicas.add_metric((name, service), len(merged.replicas))
        for replica in merged.replicas:
            if shown < cap:  # bounded: at most max_replicas series per client
                families.ejected.add_metric(
                    (name, service, replica), 1.0 if replica in ejected else 0.0
                )
                shown += 1
        if merged.discovered:
            families.refreshes.add_metric((name, service), merged.refreshes)
            for error, count in sorted(merged.errors.items()):
                families.errors.add_metric((name, service, error), count)
            for family, count in sorted(merged.family_errors.items()):
                families.family_errors.add_metric((name, service, family), count)
