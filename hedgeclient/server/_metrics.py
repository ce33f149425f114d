"""Prometheus metrics of :class:`~hedgeclient.server.HedgeMiddleware`, read at scrape time.

One collector per registry reads the counters of every live middleware bound to it
(weakly held) and sums those that share a ``server`` name. A middleware that is
garbage-collected leaves its final counts behind, so that a counter never goes back
(an application rebuilt under the same name, as test suites do, adds to it). The
request path only increments plain integers. Names, types and labels are public API (listed in
:mod:`hedgeclient.server`).

Strictly private.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from hedgeclient.server._stats import Counters, ServerStatistics

__all__ = ["bind"]

_COUNTERS: tuple[tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    (
        "hedgeclient_server_requests",
        "Requests by attempt kind (primary, backup; unmarked: no attempt header).",
        ("kind",),
        (("primaries", ("primary",)), ("backups", ("backup",)), ("unmarked", ("unmarked",))),
    ),
    (
        "hedgeclient_server_abandoned",
        "Requests whose client went away before the response completed.",
        (),
        (("abandoned", ()),),
    ),
    (
        "hedgeclient_server_abandoned_backups",
        "Backups whose client went away before the response completed.",
        (),
        (("abandoned_backups", ()),),
    ),
    (
        "hedgeclient_server_cancelled",
        "Handlers (or queued requests) cancelled because their client went away.",
        (),
        (("cancelled", ()),),
    ),
    (
        "hedgeclient_server_rejected",
        "Requests answered 503 with Retry-After: pushback (a backup, the queue long) "
        "or queue_full.",
        ("reason",),
        (("rejected_pushback", ("pushback",)), ("rejected_full", ("queue_full",))),
    ),
    (
        "hedgeclient_server_queue_wait_seconds",
        "Seconds spent waiting in the admission queue, summed.",
        (),
        (("queue_seconds", ()),),
    ),
    (
        "hedgeclient_server_tie_drops",
        "Tied copies dropped unexecuted: from the queue, on arrival, or on the answer.",
        ("when",),
        (
            ("dropped_queued", ("queued",)),
            ("dropped_on_arrival", ("arrival",)),
            ("dropped_on_answer", ("answer",)),
        ),
    ),
    (
        "hedgeclient_server_tie_messages",
        "Tie messages: sent, failed (no answer), received (authenticated), refused, "
        "twin_running (received for a leader already running).",
        ("event",),
        (
            ("messages_sent", ("sent",)),
            ("messages_failed", ("failed",)),
            ("messages_received", ("received",)),
            ("messages_refused", ("refused",)),
            ("twins_running", ("twin_running",)),
        ),
    ),
)
_GAUGES = (
    (
        "hedgeclient_server_running",
        "Requests running now, past the admission queue (with max_concurrency only).",
        "running",
    ),
    (
        "hedgeclient_server_queued",
        "Requests waiting in the admission queue now (with max_concurrency only).",
        "queued",
    ),
)


class _Collector(Collector):
    """Strictly private: the middlewares bound to one registry."""

    def __init__(self) -> None:
        self.servers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._retired: dict[str, dict[str, float]] = {}  # name -> field -> the collected ones' sum
        self._lock = threading.Lock()  # finalizers run in whichever thread collects

    def retire(self, name: str, counters: Counters) -> None:
        """A middleware named ``name`` was garbage-collected: keep its final counts."""
        final = counters.snapshot()
        with self._lock:
            sums = self._retired.setdefault(name, {})
            for _, _, _, series in _COUNTERS:
                for field, _ in series:
                    sums[field] = sums.get(field, 0) + getattr(final, field)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            retired = {name: dict(sums) for name, sums in self._retired.items()}
        live: dict[str, list[ServerStatistics]] = {}
        queued: dict[str, list[ServerStatistics]] = {}  # those with an admission queue
        for server in list(self.servers):
            stats = server.statistics()
            live.setdefault(server.name, []).append(stats)
            if server.admits:
                queued.setdefault(server.name, []).append(stats)
        names = sorted(live.keys() | retired.keys())
        for name, documentation, labels, series in _COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=("server", *labels))
            for server in names:
                stats, gone = live.get(server, []), retired.get(server, {})
                for field, values in series:
                    total = sum(getattr(s, field) for s in stats) + gone.get(field, 0)
                    family.add_metric([server, *values], total)
            yield family
        for name, documentation, field in _GAUGES:  # now: live ones with a queue only
            gauge = GaugeMetricFamily(name, documentation, labels=("server",))
            for server, stats in sorted(queued.items()):
                gauge.add_metric([server], sum(getattr(s, field) for s in stats))
            yield gauge


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _Collector] = weakref.WeakKeyDictionary()


def bind(middleware: Any, metrics: bool | CollectorRegistry) -> None:
    """Export ``middleware``'s counters to ``metrics`` (True: the default registry).

    Raises:
        TypeError: ``metrics`` is neither a bool nor a ``CollectorRegistry``.
    """
    if metrics is True:
        registry = REGISTRY
    elif isinstance(metrics, CollectorRegistry):
        registry = metrics
    else:
        msg = f"`metrics` must be a bool or a CollectorRegistry, got {metrics!r}"
        raise TypeError(msg)
    collector = _collectors.get(registry)
    if collector is None:
        collector = _collectors[registry] = _Collector()
        registry.register(collector)
    collector.servers.add(middleware)
    weakref.finalize(middleware, collector.retire, middleware.name, middleware._counters)
