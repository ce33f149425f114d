"""The labelled counter and histogram families of one registry, and the duration buckets.

The names, types, labels and buckets are public API, listed in the module docstring of
``hedgeclient.instrumentation._prometheus``.

Each family is a prometheus-client ``Counter`` or ``Histogram`` built unregistered, and
registered in the registry as one collector (:class:`Families`), so that a name
conflict registers none of them. Their children (``.labels(...)``) are what the hook
updates; their samples, ``_created`` series (and prometheus-client's switch that drops
them) and exemplars are prometheus-client's own.

Strictly private.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, final

from prometheus_client import Counter, Histogram

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = ["DURATION_BUCKETS", "OTHER", "Families", "check_exemplar"]

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.010, 0.012, 0.015, 0.020, 0.025, 0.030, 0.040, 0.050, 0.060, 0.080,
    0.100, 0.120, 0.150, 0.200, 0.250, 0.300, 0.400, 0.500, 0.600, 0.800,
    1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, math.inf,
)  # fmt: skip
"""Upper bounds of the duration histograms' buckets, in seconds (1 ms .. 10 s, +Inf)."""

OTHER: Final = "other"
"""The ``route`` (or ``replica``) label value of series beyond the per-client cap."""

_EXEMPLAR_MAX_RUNES: Final = 128  # OpenMetrics: label names and values together


def check_exemplar(labels: dict[str, str]) -> None:
    """Refuse exemplar labels that prometheus-client would refuse, before anything of
    the request is counted.

    Raises:
        ValueError: the label names and values are longer than 128 characters together.
    """
    runes = sum(len(key) + len(value) for key, value in labels.items())
    if runes > _EXEMPLAR_MAX_RUNES:
        msg = f"Exemplar labels have {runes} UTF-8 characters, exceeding the limit of 128"
        raise ValueError(msg)


@final
class Families:
    """The counters and histograms of one registry, registered as one collector.
    Strictly private.

    On a name conflict nothing is registered and ``ValueError`` (prometheus-client's
    "Duplicated timeseries") propagates.
    """

    __slots__ = (
        "__weakref__",
        "attempt_duration",
        "attempts",
        "cancelled",
        "hedges",
        "left_out",
        "lost",
        "placements",
        "request_duration",
        "requests",
        "suppressed",
        "unsent",
        "wins",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = _counter(
            "hedgeclient_requests_total",
            "Logical requests ended, by outcome (ok: a response; error: an exception).",
            ("client", "route", "outcome"),
        )
        self.attempts = _counter(
            "hedgeclient_attempts_total",
            "Attempts sent, by kind (primary, backup) and replica.",
            ("client", "route", "kind", "replica"),
        )
        self.hedges = _counter("hedgeclient_hedges_total", "Backup requests sent.")
        self.wins = _counter(
            "hedgeclient_hedge_wins_total", "Requests whose backup answered first."
        )
        self.suppressed = _counter(
            "hedgeclient_hedges_suppressed_total",
            "Requests whose due backup was not sent, by reason.",
            ("client", "route", "reason"),
        )
        self.left_out = _counter(
            "hedgeclient_delay_samples_left_out_total",
            "Primaries whose latency the delay policy was not given, by reason "
            "(queued, replica_silent, client_lag).",
            ("client", "route", "reason"),
        )
        self.cancelled = _counter(
            "hedgeclient_cancelled_attempts_total",
            "Losing attempts cancelled before their response headers.",
            ("client", "route", "replica"),
        )
        self.lost = _counter(
            "hedgeclient_lost_attempts_total",
            "Losing attempts that had response headers, closed unread.",
            ("client", "route", "replica"),
        )
        self.placements = _counter(
            "hedgeclient_backup_placements_total",
            "Backups sent, by target (other_replica; other_connection: the same "
            "address, one service address) and zone (crossed, same, unknown).",
            ("client", "route", "target", "zone"),
        )
        self.unsent = _counter(
            "hedgeclient_unsent_attempts_total",
            "Attempts that never reached the wire (they waited for one of the client's own "
            "pool connections until the race ended, or timed out), by kind.",
            ("client", "route", "kind"),
        )
        self.request_duration = _histogram(
            "hedgeclient_request_duration_seconds",
            "Seconds from the start of a request to the winner's response headers.",
            ("client", "route"),
        )
        self.attempt_duration = _histogram(
            "hedgeclient_attempt_duration_seconds",
            "Seconds from sending an attempt to its response headers "
            "(primaries cancelled by a winning backup: elapsed time, a lower bound).",
            ("client", "route", "kind"),
        )
        registry.register(self)

    def all(self) -> tuple[Counter | Histogram, ...]:
        """Every family, in exposition order."""
        return (
            self.requests,
            self.attempts,
            self.hedges,
            self.wins,
            self.suppressed,
            self.left_out,
            self.cancelled,
            self.lost,
            self.placements,
            self.unsent,
            self.request_duration,
            self.attempt_duration,
        )

    def describe(self) -> Iterable[Metric]:
        """Every family, empty (for the registry's duplicate check)."""
        return [metric for family in self.all() for metric in family.describe()]

    def collect(self) -> Iterable[Metric]:
        """Every family's samples (on the scrape thread; prometheus-client's own
        locking makes each series consistent)."""
        return [metric for family in self.all() for metric in family.collect()]


def _counter(
    name: str, documentation: str, labels: tuple[str, ...] = ("client", "route")
) -> Counter:
    """A counter family, not registered (:class:`Families` registers them together)."""
    return Counter(name, documentation, labels, registry=None)


def _histogram(name: str, documentation: str, labels: tuple[str, ...]) -> Histogram:
    """A duration histogram family over :data:`DURATION_BUCKETS`, not registered."""
    return Histogram(name, documentation, labels, registry=None, buckets=DURATION_BUCKETS)
