"""The scrape-time metrics of replica sets: membership, ejections, discovery.

Read from the bound transports when Prometheus scrapes (another thread than the
requests'), through two optional members of a :class:`MetricsSource`:
``replica_statistics()`` (each service's source and replicas, built from plain
counters and tuples) and ``selector``, whose ``statistics()`` must be safe from any
thread (:class:`~hedgeclient.PowerOfTwoChoices` publishes a frozen copy of its
ejected set for this). A source without them, or one that raises, adds nothing: a
metric never fails a scrape.

Strictly private.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["fleet_metrics"]

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


def _families() -> dict[str, Any]:
    return {
        "replicas": GaugeMetricFamily(*_REPLICAS, labels=("client", "service")),
        "ejected": GaugeMetricFamily(*_EJECTED, labels=("client", "service", "replica")),
        "ejections": CounterMetricFamily(*_EJECTIONS, labels=("client", "cause")),
        "overflow": CounterMetricFamily(*_OVERFLOW, labels=("client",)),
        "refreshes": CounterMetricFamily(*_REFRESHES, labels=("client", "service")),
        "errors": CounterMetricFamily(*_ERRORS, labels=("client", "service", "error")),
        "family_errors": CounterMetricFamily(
            *_FAMILY_ERRORS, labels=("client", "service", "family")
        ),
    }


def describe_fleet() -> list[Metric]:
    """The families, empty (for the registry's duplicate check)."""
    return list(_families().values())


def fleet_metrics(
    sources: Mapping[str, object], max_replicas: Mapping[str, int]
) -> Iterable[Metric]:
    """The families, with one client's series per ``sources`` entry (name -> source).

    Args:
        sources: client name -> the transport bound last under it.
        max_replicas: client name -> its cap on ``replica`` label values.
    """
    families = _families()
    for name, source in sources.items():
        try:
            _add(families, name, source, max_replicas.get(name, 100))
        except Exception:  # a metric never fails a scrape
            logger.warning("hedgeclient: reading the replicas of %r failed", name, exc_info=True)
    return list(families.values())


def _add(families: dict[str, Any], name: str, source: object, cap: int) -> None:
    statistics = getattr(source, "replica_statistics", None)
    selector = getattr(source, "selector", None)
    health = getattr(selector, "statistics", None) if selector is not None else None
    snapshot = health() if callable(health) else None
    ejected = getattr(snapshot, "ejected", {}) or {}
    if snapshot is not None and hasattr(snapshot, "ejections"):
        for cause, count in sorted(snapshot.ejections.items()):
            families["ejections"].add_metric((name, cause), count)
        families["overflow"].add_metric((name,), snapshot.overflow)
    if not callable(statistics):
        return
    shown = 0
    for service, stats in sorted(statistics().items()):
        families["replicas"].add_metric((name, service), len(stats.replicas))
        for replica in stats.replicas:
            if shown < cap:  # bounded: at most max_replicas series per client
                families["ejected"].add_metric(
                    (name, service, replica), 1.0 if replica in ejected else 0.0
                )
                shown += 1
        if stats.source != "static":
            families["refreshes"].add_metric((name, service), stats.refreshes)
            for error, count in sorted(stats.errors.items()):
                families["errors"].add_metric((name, service, error), count)
            for family, count in sorted(getattr(stats, "family_errors", {}).items()):
                families["family_errors"].add_metric((name, service, family), count)
