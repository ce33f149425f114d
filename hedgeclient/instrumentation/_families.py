"""The labelled metric families of one registry, and the duration buckets.

The names, types, labels and buckets are public API, listed in the module docstring of
``hedgeclient.instrumentation._prometheus``.

Strictly private.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, final

from prometheus_client import CollectorRegistry, Counter, Histogram

if TYPE_CHECKING:
    from collections.abc import Sequence

    from prometheus_client.metrics import MetricWrapperBase

__all__ = ["DURATION_BUCKETS", "OTHER", "Families"]

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.010, 0.012, 0.015, 0.020, 0.025, 0.030, 0.040, 0.050, 0.060, 0.080,
    0.100, 0.120, 0.150, 0.200, 0.250, 0.300, 0.400, 0.500, 0.600, 0.800,
    1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, math.inf,
)  # fmt: skip
"""Upper bounds of the duration histograms' buckets, in seconds (1 ms .. 10 s, +Inf)."""

OTHER: Final = "other"
"""The ``route`` (or ``replica``) label value of series beyond the per-client cap."""


@final
class Families:
    """The counters and histograms of one registry. Strictly private.

    Registers all of them or none: on a name conflict the ones already registered are
    unregistered and the error propagates.
    """

    __slots__ = (
        "attempt_duration",
        "attempts",
        "cancelled",
        "hedges",
        "lost",
        "placements",
        "request_duration",
        "requests",
        "suppressed",
        "wins",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        made: list[MetricWrapperBase] = []

        def counter(name: str, documentation: str, labels: tuple[str, ...]) -> Counter:
            metric = Counter(name, documentation, labels, registry=registry)
            made.append(metric)
            return metric

        def histogram(name: str, documentation: str, labels: tuple[str, ...]) -> Histogram:
            metric = Histogram(
                name, documentation, labels, registry=registry, buckets=DURATION_BUCKETS
            )
            made.append(metric)
            return metric

        try:
            self.requests = counter(
                "hedgeclient_requests_total",
                "Logical requests ended, by outcome (ok: a response; error: an exception).",
                ("client", "route", "outcome"),
            )
            self.attempts = counter(
                "hedgeclient_attempts_total",
                "Attempts sent, by kind (primary, backup) and replica.",
                ("client", "route", "kind", "replica"),
            )
            self.hedges = counter(
                "hedgeclient_hedges_total", "Backup requests sent.", ("client", "route")
            )
            self.wins = counter(
                "hedgeclient_hedge_wins_total",
                "Requests whose backup answered first.",
                ("client", "route"),
            )
            self.suppressed = counter(
                "hedgeclient_hedges_suppressed_total",
                "Requests whose due backup was not sent, by reason.",
                ("client", "route", "reason"),
            )
            self.cancelled = counter(
                "hedgeclient_cancelled_attempts_total",
                "Losing attempts cancelled before their response headers.",
                ("client", "route", "replica"),
            )
            self.lost = counter(
                "hedgeclient_lost_attempts_total",
                "Losing attempts that had response headers, closed unread.",
                ("client", "route", "replica"),
            )
            self.placements = counter(
                "hedgeclient_backup_placements_total",
                "Backups sent, by target (other_replica; other_connection: the same "
                "address, one service address) and zone (crossed, same, unknown).",
                ("client", "route", "target", "zone"),
            )
            self.request_duration = histogram(
                "hedgeclient_request_duration_seconds",
                "Seconds from the start of a request to the winner's response headers.",
                ("client", "route"),
            )
            self.attempt_duration = histogram(
                "hedgeclient_attempt_duration_seconds",
                "Seconds from sending an attempt to its response headers "
                "(primaries cancelled by a winning backup: elapsed time, a lower bound).",
                ("client", "route", "kind"),
            )
        except BaseException:
            for metric in made:  # leave the registry as it was
                registry.unregister(metric)
            raise

    def all(self) -> Sequence[MetricWrapperBase]:
        """Every family, in registration order."""
        return (
            self.requests,
            self.attempts,
            self.hedges,
            self.wins,
            self.suppressed,
            self.cancelled,
            self.lost,
            self.placements,
            self.request_duration,
            self.attempt_duration,
        )
