"""The scrape-time metrics of replica sets: membership, ejections, discovery.

Read when Prometheus scrapes (another thread than the requests'), through two
optional readers of a client's
:class:`~hedgeclient.instrumentation._readers.GaugeReaders`: ``replicas`` (each
service's source and replicas, built from plain counters and tuples) and
``ejections``, the selector's ``statistics()``, which must be safe from any thread
(:class:`~hedgeclient.PowerOfTwoChoices` publishes a frozen copy of its ejected set
for this). A client without them, or one whose reader raises, adds nothing: a metric
never fails a scrape.

Strictly private.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from hedgeclient.instrumentation._readers import GaugeReaders

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
    clients: Mapping[str, GaugeReaders], max_replicas: Mapping[str, int]
) -> Iterable[Metric]:
    """The families, with one client's series per ``clients`` entry (name -> readers).

    Args:
        clients: client name -> the readers bound last under it.
        max_replicas: client name -> its cap on ``replica`` label values.
    """
    families = _Families()
    for name, readers in clients.items():
        try:
            _add(families, name, readers, max_replicas.get(name, 100))
        except Exception:  # a metric never fails a scrape
            logger.warning("hedgeclient: reading the replicas of %r failed", name, exc_info=True)
    return families.all()


def _add(families: _Families, name: str, readers: GaugeReaders, cap: int) -> None:
    snapshot = readers.ejections() if readers.ejections is not None else None
    ejected: Mapping[str, float] = {}
    if snapshot is not None:
        ejected = snapshot.ejected
        for cause, count in sorted(snapshot.ejections.items()):
            families.ejections.add_metric((name, cause), count)
        families.overflow.add_metric((name,), snapshot.overflow)
    if readers.replicas is None:
        return
    shown = 0
    for service, stats in sorted(readers.replicas().items()):
        families.replicas.add_metric((name, service), len(stats.replicas))
        for replica in stats.replicas:
            if shown < cap:  # bounded: at most max_replicas series per client
                families.ejected.add_metric(
                    (name, service, replica), 1.0 if replica in ejected else 0.0
                )
                shown += 1
        if stats.source != "static":
            families.refreshes.add_metric((name, service), stats.refreshes)
            for error, count in sorted(stats.errors.items()):
                families.errors.add_metric((name, service, error), count)
            for family, count in sorted(stats.family_errors.items()):
                families.family_errors.add_metric((name, service, family), count)
