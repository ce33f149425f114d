"""The labelled metric families of one registry, their plain accumulators, and the
duration buckets.

The names, types, labels and buckets are public API, listed in the module docstring of
``hedgeclient.instrumentation._prometheus``.

Each series is a plain accumulator (:class:`CounterChild`, :class:`HistogramChild`)
that the hook updates on the event loop, under its client's lock, without
prometheus-client's per-value locks or its Python loop over the buckets. A custom
collector (:class:`Families`) exports them: it runs on the scrape thread and reads
**snapshots**: the children of a family through one ``dict.copy()``, a histogram's
buckets and exemplars through one ``list(...)`` each, all single C-level calls, atomic
under the GIL. It never iterates a structure the event loop mutates. The samples are
those prometheus-client's ``Counter`` and ``Histogram`` would expose: the same names,
labels, float values, ``_created`` series (dropped as prometheus-client drops them:
``PROMETHEUS_DISABLE_CREATED_SERIES`` or ``disable_created_metrics()``, a flag read in
``_compat.prometheus``) and exemplars.

Why not prometheus-client's own ``Counter`` and ``Histogram`` children (cached
``.labels()``): each ``inc()`` takes a lock and each ``observe()`` walks the buckets
in Python; the hook fed a typical record (one primary that won) cost 3.2 times as much
with them, a hedged one 4.7 times (8.0 against 2.5 µs, 17.7 against 3.7 µs, measured
side by side on a loaded box: ``docs/benchmarks.md``, issue 25). Metrics are on by
default, and the gap between the floor and the cheapest peer is about 17 µs per
request.

Strictly private.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Final, final

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar, Sample

from hedgeclient._compat.prometheus import use_created

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from prometheus_client import CollectorRegistry

__all__ = [
    "DURATION_BUCKETS",
    "OTHER",
    "CounterChild",
    "CounterFamily",
    "Families",
    "HistogramChild",
    "HistogramFamily",
]

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.010, 0.012, 0.015, 0.020, 0.025, 0.030, 0.040, 0.050, 0.060, 0.080,
    0.100, 0.120, 0.150, 0.200, 0.250, 0.300, 0.400, 0.500, 0.600, 0.800,
    1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, math.inf,
)  # fmt: skip
"""Upper bounds of the duration histograms' buckets, in seconds (1 ms .. 10 s, +Inf)."""

OTHER: Final = "other"
"""The ``route`` (or ``replica``) label value of series beyond the per-client cap."""

_LE: Final = tuple("+Inf" if bound == math.inf else repr(bound) for bound in DURATION_BUCKETS)
"""The ``le`` label of each bucket, as prometheus-client writes it (``floatToGoString``)."""
_EXEMPLAR_MAX_RUNES: Final = 128  # OpenMetrics: label names and values together


def check_exemplar(labels: dict[str, str]) -> None:
    """Refuse exemplar labels that prometheus-client would refuse.

    Raises:
        ValueError: the label names and values are longer than 128 characters together.
    """
    runes = sum(len(key) + len(value) for key, value in labels.items())
    if runes > _EXEMPLAR_MAX_RUNES:
        msg = f"Exemplar labels have {runes} UTF-8 characters, exceeding the limit of 128"
        raise ValueError(msg)


@final
class CounterChild:
    """One counter series: ``value`` (an int, incremented on the event loop) and its
    creation time (``created``, Unix seconds). Strictly private."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()


@final
class HistogramChild:
    """One duration histogram series over :data:`DURATION_BUCKETS`. Strictly private.

    ``buckets[i]`` counts the observations in bucket ``i`` alone (not cumulative);
    ``exemplars[i]`` is the latest exemplar observed in it, or ``None``; ``sum`` is
    the sum of the observations, in seconds; ``created`` its creation time (Unix
    seconds). The hook observes into it (``_hook.observe``).
    """

    __slots__ = ("buckets", "created", "exemplars", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * len(DURATION_BUCKETS)
        self.exemplars: list[Exemplar | None] = [None] * len(DURATION_BUCKETS)
        self.sum = 0.0
        self.created = time.time()


@final
class CounterFamily:
    """A counter's children by label values, in creation order. Strictly private."""

    __slots__ = ("children", "documentation", "labelnames", "lock", "name")

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.children: dict[tuple[str, ...], CounterChild] = {}
        self.lock = threading.Lock()

    def labels(self, *values: str) -> CounterChild:
        """The child of these label values, created (at 0) on first use. Thread-safe."""
        with self.lock:
            child = self.children.get(values)
            if child is None:
                child = self.children[values] = CounterChild()
            return child

    def empty(self) -> CounterMetricFamily:
        """The family without samples (for the registry's duplicate check)."""
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self, created: bool) -> CounterMetricFamily:
        """A snapshot of every child, as floats; ``created``: with ``_created``."""
        family = self.empty()
        for values, child in self.children.copy().items():
            family.add_metric(values, float(child.value), child.created if created else None)
        return family


@final
class HistogramFamily:
    """A duration histogram's children by label values, in creation order. Strictly
    private."""

    __slots__ = ("children", "documentation", "labelnames", "lock", "name")

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.children: dict[tuple[str, ...], HistogramChild] = {}
        self.lock = threading.Lock()

    def labels(self, *values: str) -> HistogramChild:
        """The child of these label values, created (empty) on first use. Thread-safe."""
        with self.lock:
            child = self.children.get(values)
            if child is None:
                child = self.children[values] = HistogramChild()
            return child

    def empty(self) -> HistogramMetricFamily:
        """The family without samples (for the registry's duplicate check)."""
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self, created: bool) -> HistogramMetricFamily:
        """A snapshot of every child: cumulative buckets with their exemplars,
        ``_count``, ``_sum`` and (``created``) ``_created``."""
        family = self.empty()
        for values, child in self.children.copy().items():
            counts = list(child.buckets)  # one C-level copy each: atomic under the GIL
            exemplars = list(child.exemplars)
            total = child.sum
            buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
            seen = 0.0
            for le, count, exemplar in zip(_LE, counts, exemplars, strict=True):
                seen += count
                buckets.append((le, seen) if exemplar is None else (le, seen, exemplar))
            family.add_metric(values, buckets, total)
            if created:
                labels = dict(zip(self.labelnames, values, strict=True))
                family.samples.append(Sample(self.name + "_created", labels, child.created))
        return family


@final
class Families:
    """The counters and histograms of one registry, and their collector. Strictly
    private.

    Registered in the registry as one collector: on a name conflict nothing is
    registered and ``ValueError`` (prometheus-client's "Duplicated timeseries")
    propagates. Each collect first calls ``drain`` (it counts the requests' buffered
    events, ``_hook.drain_all``; it must not raise).
    """

    __slots__ = (
        "__weakref__",
        "attempt_duration",
        "attempts",
        "cancelled",
        "drain",
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

    def __init__(self, registry: CollectorRegistry, drain: Callable[[], None]) -> None:
        self.drain = drain
        self.requests = CounterFamily(
            "hedgeclient_requests_total",
            "Logical requests ended, by outcome (ok: a response; error: an exception).",
            ("client", "route", "outcome"),
        )
        self.attempts = CounterFamily(
            "hedgeclient_attempts_total",
            "Attempts sent, by kind (primary, backup) and replica.",
            ("client", "route", "kind", "replica"),
        )
        self.hedges = CounterFamily(
            "hedgeclient_hedges_total", "Backup requests sent.", ("client", "route")
        )
        self.wins = CounterFamily(
            "hedgeclient_hedge_wins_total",
            "Requests whose backup answered first.",
            ("client", "route"),
        )
        self.suppressed = CounterFamily(
            "hedgeclient_hedges_suppressed_total",
            "Requests whose due backup was not sent, by reason.",
            ("client", "route", "reason"),
        )
        self.left_out = CounterFamily(
            "hedgeclient_delay_samples_left_out_total",
            "Primaries whose latency the delay policy was not given, by reason "
            "(queued, replica_silent, client_lag).",
            ("client", "route", "reason"),
        )
        self.cancelled = CounterFamily(
            "hedgeclient_cancelled_attempts_total",
            "Losing attempts cancelled before their response headers.",
            ("client", "route", "replica"),
        )
        self.lost = CounterFamily(
            "hedgeclient_lost_attempts_total",
            "Losing attempts that had response headers, closed unread.",
            ("client", "route", "replica"),
        )
        self.placements = CounterFamily(
            "hedgeclient_backup_placements_total",
            "Backups sent, by target (other_replica; other_connection: the same "
            "address, one service address) and zone (crossed, same, unknown).",
            ("client", "route", "target", "zone"),
        )
        self.unsent = CounterFamily(
            "hedgeclient_unsent_attempts_total",
            "Attempts that never reached the wire (they waited for one of the client's own "
            "pool connections until the race ended, or timed out), by kind.",
            ("client", "route", "kind"),
        )
        self.request_duration = HistogramFamily(
            "hedgeclient_request_duration_seconds",
            "Seconds from the start of a request to the winner's response headers.",
            ("client", "route"),
        )
        self.attempt_duration = HistogramFamily(
            "hedgeclient_attempt_duration_seconds",
            "Seconds from sending an attempt to its response headers "
            "(primaries cancelled by a winning backup: elapsed time, a lower bound).",
            ("client", "route", "kind"),
        )
        registry.register(self)

    def all(self) -> tuple[CounterFamily | HistogramFamily, ...]:
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
        return [family.empty() for family in self.all()]

    def collect(self) -> Iterable[Metric]:
        """A snapshot of every family (on the scrape thread), after the buffered events
        are counted. Never raises."""
        self.drain()
        created = use_created()
        return [family.collect(created) for family in self.all()]
