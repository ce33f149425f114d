"""Prometheus metrics: exact counter and histogram values from hand-built records, one
instance per registry, bounded series, and gauges read at scrape time.

Every test uses a fresh ``CollectorRegistry`` and reads it with ``get_sample_value``
(the client_python testing idiom). End-to-end tests drive a real ``HedgedTransport``
around scripted in-process replicas under trio's ``MockClock``.
"""

from __future__ import annotations

import ast
import gc
import itertools
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import hedgeclient._report
from hedgeclient import (
    AdaptiveDelay,
    AttemptRecord,
    DelaySnapshot,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    RequestRecord,
    Route,
)
from hedgeclient.instrumentation import (
    DURATION_BUCKETS,
    PrometheusMetrics,
    PrometheusMetricsStatistics,
    _prometheus,
)
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "hedgeclient-rules.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "hedgeclient-dashboard.json"
CLIENT = "catalog"
ROUTE = "GET http://svc"
A, B, C = "http://a", "http://b", "http://c"

DOCUMENTED = {
    "hedgeclient_requests": "counter",
    "hedgeclient_attempts": "counter",
    "hedgeclient_hedges": "counter",
    "hedgeclient_hedge_wins": "counter",
    "hedgeclient_hedges_suppressed": "counter",
    "hedgeclient_cancelled_attempts": "counter",
    "hedgeclient_lost_attempts": "counter",
    "hedgeclient_request_duration_seconds": "histogram",
    "hedgeclient_attempt_duration_seconds": "histogram",
    "hedgeclient_hedge_delay_seconds": "gauge",
    "hedgeclient_budget_tokens": "gauge",
    "hedgeclient_route_budget_tokens": "gauge",
    "hedgeclient_budget_retries": "counter",
    "hedgeclient_budget_retries_refused": "counter",
    "hedgeclient_backup_placements": "counter",
    "hedgeclient_unsent_attempts": "counter",
    "hedgeclient_replicas": "gauge",
    "hedgeclient_replica_ejected": "gauge",
    "hedgeclient_replica_ejections": "counter",
    "hedgeclient_replica_ejections_refused": "counter",
    "hedgeclient_discovery_refreshes": "counter",
    "hedgeclient_discovery_errors": "counter",
    "hedgeclient_discovery_family_errors": "counter",
    "hedgeclient_event_loop_lag_seconds": "gauge",
    "hedgeclient_delay_samples_left_out": "counter",
}


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Async tests here run on trio with a fresh MockClock."""
    return virtual_time


def attempt(
    kind: str = "primary",
    replica: str = A,
    *,
    started: float = 0.0,
    duration: float = 0.011,
    outcome: str = "won",
    status: int | None = 200,
) -> AttemptRecord:
    """An AttemptRecord with typical defaults (a primary that won in 11 ms)."""
    return AttemptRecord(
        kind=kind,  # type: ignore[arg-type]
        replica=replica,
        started=started,
        duration=duration,
        outcome=outcome,  # type: ignore[arg-type]
        status=status,
        censored=outcome == "cancelled",
    )


def record(*attempts: AttemptRecord, **kwargs: Any) -> RequestRecord:
    """A RequestRecord of client ``catalog``, route ``GET http://svc``."""
    fields: dict[str, Any] = {
        "client": CLIENT,
        "route": ROUTE,
        "outcome": "ok",
        "duration": 0.011,
        "delay": 0.030,
        "attempts": attempts or (attempt(),),
        "suppressed": None,
    }
    fields.update(kwargs)
    return RequestRecord(**fields)


def backup_won() -> RequestRecord:
    """Primary on a cancelled at 0.045 s; backup on b sent at 0.030 s won in 0.015 s."""
    return record(
        attempt(duration=0.045, outcome="cancelled", status=None),
        attempt("backup", B, started=0.030, duration=0.015),
        duration=0.045,
    )


class Sink:
    """A hook that forwards to hooks added after the transport is built."""

    def __init__(self) -> None:
        self.hooks: list[Any] = []

    def __call__(self, rec: RequestRecord, /) -> None:
        for hook in self.hooks:
            hook(rec)


def transport(name: str = CLIENT, **kwargs: Any) -> tuple[HedgedTransport, Sink]:
    """A HedgedTransport over a never-called MockTransport, with a late-bound sink."""
    sink = Sink()
    kwargs.setdefault("delay", 0.030)
    kwargs.setdefault("metrics", False)
    built = HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas={"http://svc": [A, B, C]},
        hooks=[sink],
        name=name,
        **kwargs,
    )
    return built, sink


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """``registry.get_sample_value`` with keyword labels."""
    return registry.get_sample_value(name, labels)


def series_count(registry: CollectorRegistry) -> int:
    """Samples exposed by the registry (one per series)."""
    return sum(len(m.samples) for m in registry.collect())


# -- counters and histograms from hand-built records ----------------------------------


def test_unhedged_request_counts(registry: CollectorRegistry) -> None:
    """A primary that won counts one ok request, one attempt and one duration."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(record())
    assert (
        value(registry, "hedgeclient_requests_total", client=CLIENT, route=ROUTE, outcome="ok") == 1
    )
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_requests_total", **labels, outcome="error") == 0
    assert value(registry, "hedgeclient_attempts_total", **labels, kind="primary", replica=A) == 1
    assert value(registry, "hedgeclient_hedges_total", **labels) == 0
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 0
    name = "hedgeclient_request_duration_seconds"
    assert value(registry, f"{name}_count", **labels) == 1
    assert value(registry, f"{name}_sum", **labels) == pytest.approx(0.011)
    assert value(registry, f"{name}_bucket", **labels, le="0.01") == 0
    assert value(registry, f"{name}_bucket", **labels, le="0.012") == 1
    name = "hedgeclient_attempt_duration_seconds"
    assert value(registry, f"{name}_count", **labels, kind="primary") == 1


def test_backup_won_counts(registry: CollectorRegistry) -> None:
    """A backup that won counts a hedge, a win and a cancelled primary, observed censored."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(backup_won())
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_total", **labels) == 1
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 1
    assert value(registry, "hedgeclient_attempts_total", **labels, kind="backup", replica=B) == 1
    assert value(registry, "hedgeclient_cancelled_attempts_total", **labels, replica=A) == 1
    assert value(registry, "hedgeclient_lost_attempts_total", **labels, replica=A) is None
    name = "hedgeclient_attempt_duration_seconds"
    assert value(registry, f"{name}_sum", **labels, kind="primary") == pytest.approx(0.045)
    assert value(registry, f"{name}_sum", **labels, kind="backup") == pytest.approx(0.015)
    assert value(registry, "hedgeclient_request_duration_seconds_sum", **labels) == 0.045


def test_primary_won_cancels_backup_unobserved(registry: CollectorRegistry) -> None:
    """A backup cancelled because the primary won is counted but not observed."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(
        record(
            attempt(duration=0.035),
            attempt("backup", B, started=0.030, duration=0.005, outcome="cancelled", status=None),
            duration=0.035,
        )
    )
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_total", **labels) == 1
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 0
    assert value(registry, "hedgeclient_cancelled_attempts_total", **labels, replica=B) == 1
    name = "hedgeclient_attempt_duration_seconds_count"
    assert value(registry, name, **labels, kind="backup") == 0


def test_lost_attempt_counted_apart(registry: CollectorRegistry) -> None:
    """A loser closed unread counts as lost, not cancelled, and its time is observed."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(
        record(
            attempt(duration=0.0301, outcome="lost"),
            attempt("backup", B, started=0.030, duration=0.0001),
            duration=0.0301,
        )
    )
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_lost_attempts_total", **labels, replica=A) == 1
    assert value(registry, "hedgeclient_cancelled_attempts_total", **labels, replica=A) is None
    name = "hedgeclient_attempt_duration_seconds_count"
    assert value(registry, name, **labels, kind="primary") == 1


def test_caller_cancelled_request(registry: CollectorRegistry) -> None:
    """A request the caller cancelled is an error; its attempts are not losers."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(
        record(
            attempt(duration=0.020, outcome="cancelled", status=None),
            outcome="error",
            duration=0.020,
            cancelled_by_caller=True,
        )
    )
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_requests_total", **labels, outcome="error") == 1
    assert value(registry, "hedgeclient_requests_total", **labels, outcome="ok") == 0
    assert value(registry, "hedgeclient_cancelled_attempts_total", **labels, replica=A) is None
    assert value(registry, "hedgeclient_request_duration_seconds_count", **labels) == 0
    name = "hedgeclient_attempt_duration_seconds_count"
    assert value(registry, name, **labels, kind="primary") == 0


def test_failed_without_headers_unobserved(registry: CollectorRegistry) -> None:
    """A connect error is an attempt but has no time to headers; a 503 has one."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(
        record(
            attempt(duration=0.001, outcome="failed", status=None),
            attempt("backup", B, started=0.001, duration=0.004, outcome="failed", status=503),
            attempt("backup", C, started=0.005, duration=0.010),
            duration=0.015,
        )
    )
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_total", **labels) == 2
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 1
    name = "hedgeclient_attempt_duration_seconds_count"
    assert value(registry, name, **labels, kind="primary") == 0
    assert value(registry, name, **labels, kind="backup") == 2


@pytest.mark.parametrize("reason", ["budget", "cutoff", "not_idempotent", "max_in_flight"])
def test_suppressed_by_reason(registry: CollectorRegistry, reason: str) -> None:
    """A suppressed hedge counts once under its reason."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(record(attempt(duration=0.050), duration=0.050, suppressed=reason))
    name = "hedgeclient_hedges_suppressed_total"
    assert value(registry, name, client=CLIENT, route=ROUTE, reason=reason) == 1
    assert value(registry, "hedgeclient_hedges_total", client=CLIENT, route=ROUTE) == 0


def test_exposition_matches_documented_names(registry: CollectorRegistry) -> None:
    """The exposed families are exactly the documented ones, with their types."""
    built, _ = transport()
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    hook(backup_won())
    hook(record(suppressed="budget"))
    hook(record(attempt(outcome="lost"), attempt("backup", B), duration=0.011))
    text = generate_latest(registry).decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    families = {n: t for n, t in families.items() if not n.endswith("_created")}
    assert families == DOCUMENTED
    for name in DOCUMENTED:
        assert name in (_prometheus.__doc__ or "")


def test_buckets_are_documented() -> None:
    """The bucket list is log-spaced from 1 ms to 10 s and written in the docstring."""
    assert DURATION_BUCKETS[0] == 0.001
    assert DURATION_BUCKETS[-2:] == (10.0, math.inf)
    finite = DURATION_BUCKETS[:-1]
    assert all(1.15 < b / a <= 1.5 for a, b in itertools.pairwise(finite))
    doc = " ".join((_prometheus.__doc__ or "").split())
    for bound in finite:
        assert re.search(rf"(?<![\d.]){re.escape(_fmt(bound))}(?![\d])", doc), bound


def _fmt(bound: float) -> str:
    """A bucket bound as the docstring writes it (0.010, 0.0015, 1.0)."""
    if bound >= 1:
        return f"{bound:.1f}"
    text = f"{bound:.4f}"
    return text[:-1] if text.endswith("0") else text


# -- one instance per registry ---------------------------------------------------------


def test_for_registry_is_cached(registry: CollectorRegistry) -> None:
    """for_registry returns one instance per registry, and a new one for another."""
    metrics = PrometheusMetrics.for_registry(registry)
    assert PrometheusMetrics.for_registry(registry) is metrics
    assert PrometheusMetrics.for_registry(CollectorRegistry()) is not metrics


def test_for_registry_none_is_global() -> None:
    """for_registry() and for_registry(None) are the instance of prometheus_client.REGISTRY."""
    assert PrometheusMetrics.for_registry() is PrometheusMetrics.for_registry(REGISTRY)
    assert PrometheusMetrics.for_registry(None) is PrometheusMetrics.for_registry(REGISTRY)


def test_registry_not_kept_alive() -> None:
    """The per-registry cache holds a registry weakly: a dropped registry is collected."""
    registry = CollectorRegistry()
    PrometheusMetrics.for_registry(registry).bind(transport()[0])(record())
    ref = weakref.ref(registry)
    del registry
    gc.collect()
    assert ref() is None


def test_second_instance_refused(registry: CollectorRegistry) -> None:
    """Constructing a second instance on a registry says to use for_registry."""
    PrometheusMetrics(registry)
    with pytest.raises(ValueError, match=r"^this registry already holds hedgeclient metrics"):
        PrometheusMetrics(registry)


def test_foreign_metric_conflict_leaves_registry_clean(registry: CollectorRegistry) -> None:
    """A registry that already has one of the names raises and keeps no partial metrics."""
    Counter("hedgeclient_hedges_total", "someone else's", registry=registry)
    before = {m.name for m in registry.collect()}
    with pytest.raises(ValueError, match=r"^Duplicated timeseries in CollectorRegistry"):
        PrometheusMetrics.for_registry(registry)
    assert {m.name for m in registry.collect()} == before


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_routes": 0}, ValueError, r"^`max_routes` must be >= 1, got 0$"),
        ({"max_replicas": 1.5}, TypeError, r"^`max_replicas` must be an int >= 1, got 1.5$"),
        ({"max_routes": True}, TypeError, r"^`max_routes` must be an int >= 1, got True$"),
    ],
)
def test_caps_validated(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    """The caps are validated at construction."""
    with pytest.raises(error, match=match):
        PrometheusMetrics(CollectorRegistry(), **kwargs)


def test_registry_type_validated() -> None:
    """A registry that is not a CollectorRegistry is refused."""
    with pytest.raises(TypeError, match=r"^`registry` must be a prometheus_client Collector"):
        PrometheusMetrics("registry")  # type: ignore[arg-type]


def test_three_transports_share_a_registry(registry: CollectorRegistry) -> None:
    """Three transports in one registry scrape cleanly, one budget gauge each."""
    metrics = PrometheusMetrics.for_registry(registry)
    transports = [transport(name)[0] for name in "abc"]  # kept alive for the gauges
    hooks = [metrics.bind(t) for t in transports]
    for name, hook in zip("abc", hooks, strict=True):
        hook(record(client=name))
    generate_latest(registry)  # raises on a duplicate sample
    for name in "abc":
        assert value(registry, "hedgeclient_budget_tokens", client=name) == 10.0
        assert (
            value(registry, "hedgeclient_requests_total", client=name, route=ROUTE, outcome="ok")
            == 1
        )


def test_gauges_of_a_name_cover_its_live_transports(registry: CollectorRegistry) -> None:
    """Two live transports with one name expose one gauge series, their budgets summed
    (more in tests/instrumentation/test_shared_names.py)."""
    metrics = PrometheusMetrics.for_registry(registry)
    first, _ = transport(budget=HedgeBudget(burst=3))
    second, _ = transport(budget=HedgeBudget(burst=7))
    metrics.bind(first)
    metrics.bind(second)
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 3.0 + 7.0
    text = generate_latest(registry).decode()
    assert text.count("hedgeclient_budget_tokens{") == 1


def test_retries_drawn_and_refused_by_the_budget_are_counted(registry: CollectorRegistry) -> None:
    """A retry library's draws on the transport's budget: allowed and refused, scraped."""
    budget = HedgeBudget(ratio=0.1, burst=2, min_per_second=0)
    hedged, _ = transport(budget=budget)
    PrometheusMetrics.for_registry(registry).bind(hedged)
    assert [budget.try_retry() for _ in range(3)] == [True, False, False]
    assert value(registry, "hedgeclient_budget_retries_total", client=CLIENT) == 1.0
    assert value(registry, "hedgeclient_budget_retries_refused_total", client=CLIENT) == 2.0


# -- bounded series ---------------------------------------------------------------------


def test_ten_thousand_routes_bounded(registry: CollectorRegistry) -> None:
    """10,000 distinct routes keep 1,000 route labels plus 'other'."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    for i in range(10_000):
        hook(record(route=f"GET /items/{i}"))
    metrics = PrometheusMetrics.for_registry(registry)
    stats = metrics.statistics()
    assert (stats.routes, stats.overflowed) == (1001, 9000)
    routes = {
        s.labels["route"]
        for m in registry.collect()
        if m.name == "hedgeclient_requests"
        for s in m.samples
    }
    assert len(routes) == 1001
    assert "other" in routes
    name = "hedgeclient_requests_total"
    assert value(registry, name, client=CLIENT, route="other", outcome="ok") == 9000
    assert value(registry, name, client=CLIENT, route="GET /items/999", outcome="ok") == 1
    one = CollectorRegistry()
    PrometheusMetrics.for_registry(one).bind(transport()[0])(record(route="GET /items/0"))
    assert series_count(registry) == 1001 * series_count(one)  # the same series per route


def test_replica_label_capped(registry: CollectorRegistry) -> None:
    """Replicas beyond max_replicas are counted under replica='other'."""
    metrics = PrometheusMetrics(registry, max_replicas=2)
    hook = metrics.bind(transport()[0])
    for replica in ("http://r1", "http://r2", "http://r3", "http://r4"):
        hook(record(attempt(replica=replica)))
    labels = {"client": CLIENT, "route": ROUTE, "kind": "primary"}
    assert value(registry, "hedgeclient_attempts_total", **labels, replica="http://r2") == 1
    assert value(registry, "hedgeclient_attempts_total", **labels, replica="other") == 2
    assert value(registry, "hedgeclient_attempts_total", **labels, replica="http://r3") is None
    assert metrics.statistics().replicas == 3


def test_renamed_transport_reports_new_name(registry: CollectorRegistry) -> None:
    """A record whose client differs from the bound name is counted under its own."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(record(client="renamed"))
    name = "hedgeclient_requests_total"
    assert value(registry, name, client="renamed", route=ROUTE, outcome="ok") == 1
    assert value(registry, name, client=CLIENT, route=ROUTE, outcome="ok") is None


# -- gauges read at scrape time -----------------------------------------------------------


def test_budget_tokens_read_at_scrape(registry: CollectorRegistry) -> None:
    """The budget gauge shows the balance at scrape time, with no request in between."""
    budget = HedgeBudget(burst=5, min_per_second=0)
    built, _ = transport(budget=budget)
    PrometheusMetrics.for_registry(registry).bind(built)
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 5.0
    assert budget.try_withdraw()
    assert budget.try_withdraw()
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 3.0


def test_budget_gauges_include_what_requests_earned(registry: CollectorRegistry) -> None:
    """Each request earns its budget ``ratio`` tokens as it is sent, counted without a
    call and earned as the budget is next drawn on or read: a scrape with no draw since
    the requests shows them, for the transport's budget and a route's own."""
    budget = HedgeBudget(ratio=0.5, burst=5, min_per_second=0)
    own = HedgeBudget(ratio=0.25, burst=2, min_per_second=0)
    routes = [Route(path="/export/*", name="export", budget=own)]
    built, _ = transport(routes=routes, budget=budget, metrics=registry)
    while budget.try_withdraw():
        pass
    assert own.try_withdraw()
    assert own.try_withdraw()

    async def main() -> None:
        async with httpx.AsyncClient(transport=built) as client:
            for path in ("/a", "/b", "/c", "/export/1"):
                (await client.get(f"http://svc{path}")).raise_for_status()

    anyio.run(main)
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 1.5
    labels = {"client": CLIENT, "route": "export"}
    assert value(registry, "hedgeclient_route_budget_tokens", **labels) == 0.25
    assert budget.statistics().deposits == 3
    assert budget.try_withdraw()  # 1.5 tokens: one backup
    assert budget.tokens == 0.5
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 0.5


def test_a_routes_own_budget_has_its_gauge(registry: CollectorRegistry) -> None:
    """A route with a budget of its own: its balance under its label, read at scrape
    time; the transport's budget stays under ``hedgeclient_budget_tokens``; a route
    without one (the transport's budget) has none."""
    own = HedgeBudget(burst=7, min_per_second=0)
    routes = [
        Route(path="/export/*", name="export", budget=own),
        Route(method="POST", path="/orders", budget=HedgeBudget(burst=2, min_per_second=0)),
        Route(path="/search", name="search"),
    ]
    built, _ = transport(
        routes=routes, budget=HedgeBudget(burst=5, min_per_second=0), metrics=registry
    )  # held: a transport garbage collected drops its gauges
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 5.0
    labels = {"client": CLIENT, "route": "export"}
    assert value(registry, "hedgeclient_route_budget_tokens", **labels) == 7.0
    assert own.try_withdraw()
    assert value(registry, "hedgeclient_route_budget_tokens", **labels) == 6.0
    unnamed = {"client": CLIENT, "route": "Route(method='POST', path='/orders')"}
    assert value(registry, "hedgeclient_route_budget_tokens", **unnamed) == 2.0
    text = generate_latest(registry).decode()
    assert text.count("hedgeclient_route_budget_tokens{") == 2  # none for "search"
    assert built.name == CLIENT


def test_fixed_delay_gauge(registry: CollectorRegistry) -> None:
    """A fixed delay is reported for every route seen eligible, and no other."""
    built, _ = transport(delay=0.05)
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    assert value(registry, "hedgeclient_hedge_delay_seconds", client=CLIENT, route=ROUTE) is None
    hook(record(delay=0.05))
    hook(record(route="POST http://svc", delay=None, suppressed="not_idempotent"))
    assert value(registry, "hedgeclient_hedge_delay_seconds", client=CLIENT, route=ROUTE) == 0.05
    name = "hedgeclient_hedge_delay_seconds"
    assert value(registry, name, client=CLIENT, route="POST http://svc") is None


class FakeClock:
    """A hand-advanced clock, in seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_adaptive_delay_gauge_follows_policy(registry: CollectorRegistry) -> None:
    """The adaptive delay is read from the policy at scrape time, NaN at the cutoff."""
    clock = FakeClock()
    policy = AdaptiveDelay(min_samples=10, max_delay=0.5, initial_delay=0.1, clock=clock)
    built, _ = transport(delay=policy)
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    policy.record(ROUTE, 0.020, censored=False)  # the request's primary, as the transport does
    hook(record(delay=0.1))
    name = "hedgeclient_hedge_delay_seconds"
    assert value(registry, name, client=CLIENT, route=ROUTE) == 0.1  # warming up
    for _ in range(20):
        policy.record(ROUTE, 0.020, censored=False)
    assert value(registry, name, client=CLIENT, route=ROUTE) == pytest.approx(0.020, rel=0.01)
    clock.now = 120.0  # the window has slid past the fast samples
    for _ in range(20):
        policy.record(ROUTE, 2.0, censored=False)
    assert policy.hedge_delay(ROUTE) is None
    gauge = value(registry, name, client=CLIENT, route=ROUTE)
    assert gauge is not None
    assert math.isnan(gauge)


def delay_routes(registry: CollectorRegistry) -> dict[str, float]:
    """The ``hedgeclient_hedge_delay_seconds`` series of ``CLIENT``: route -> value."""
    return {
        sample.labels["route"]: sample.value
        for metric in registry.collect()
        if metric.name == "hedgeclient_hedge_delay_seconds"
        for sample in metric.samples
        if sample.labels["client"] == CLIENT
    }


def test_delay_gauge_drops_the_routes_the_policy_evicted(registry: CollectorRegistry) -> None:
    """An adaptive delay tracking 3 routes of 10 seen: the gauge shows those 3 (a
    warming one at ``initial_delay``), not a series per route ever seen."""
    clock = FakeClock()
    policy = AdaptiveDelay(min_samples=5, max_routes=3, initial_delay=0.1, clock=clock)
    built, _ = transport(delay=policy)
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    for i in range(10):
        route = f"GET http://r{i}"
        for _ in range(5 if i < 9 else 1):  # the last route is still warming up
            policy.record(route, 0.020, censored=False)
        hook(record(route=route, delay=policy.hedge_delay(route)))
    assert delay_routes(registry) == pytest.approx(
        {"GET http://r7": 0.020, "GET http://r8": 0.020, "GET http://r9": 0.1}, rel=1 / 128
    )
    assert PrometheusMetrics.for_registry(registry).statistics().routes == 10  # counters stay


def test_delay_gauge_without_snapshot_is_capped_at_max_routes(
    registry: CollectorRegistry,
) -> None:
    """A policy without snapshots: the gauge shows the latest delay of the first
    ``max_routes`` routes, like the counters; later routes go to ``other``, which has no
    delay gauge."""
    built, _ = transport(delay=LiveStateForbidden(None))
    hook = PrometheusMetrics(registry, max_routes=3).bind(built)
    for i in range(10):
        hook(record(route=f"GET http://r{i}", delay=0.030 + i / 1000))
    assert delay_routes(registry) == {
        "GET http://r0": 0.030,
        "GET http://r1": 0.031,
        "GET http://r2": 0.032,
    }
    labels = {"client": CLIENT, "route": "other", "outcome": "ok"}
    assert value(registry, "hedgeclient_requests_total", **labels) == 7


def test_fixed_delay_gauge_is_capped_at_max_routes(registry: CollectorRegistry) -> None:
    """A fixed delay tracks no route: each route seen eligible, up to ``max_routes``."""
    built, _ = transport(delay=0.05)
    hook = PrometheusMetrics(registry, max_routes=2).bind(built)
    for i in range(5):
        hook(record(route=f"GET http://r{i}", delay=0.05))
    assert delay_routes(registry) == {"GET http://r0": 0.05, "GET http://r1": 0.05}


def test_cutoff_route_has_delay_gauge(registry: CollectorRegistry) -> None:
    """A route only ever seen at the cutoff still gets its (NaN) delay series."""
    policy = AdaptiveDelay(min_samples=1, max_delay=0.5, initial_delay=0.1, clock=FakeClock())
    policy.record(ROUTE, 2.0, censored=False)
    built, _ = transport(delay=policy)
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    hook(record(delay=None, suppressed="cutoff"))
    gauge = value(registry, "hedgeclient_hedge_delay_seconds", client=CLIENT, route=ROUTE)
    assert gauge is not None
    assert math.isnan(gauge)


def test_failing_snapshot_skipped_at_scrape(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """A delay policy whose snapshot raises during a scrape drops its series and is logged."""

    class Broken:
        def hedge_delay(self, route: str) -> float | None:
            return 0.030

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            """Learn nothing."""

        def delay_snapshot(self) -> DelaySnapshot:
            raise RuntimeError

        def __repr__(self) -> str:
            return "Broken()"

    built, _ = transport(delay=Broken())
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    hook(record())
    assert value(registry, "hedgeclient_hedge_delay_seconds", client=CLIENT, route=ROUTE) is None
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 10.0
    assert "Broken().delay_snapshot() failed during a scrape" in caplog.text


class LiveStateForbidden:
    """A delay policy whose event-loop methods raise: a scrape may only use the snapshot."""

    def __init__(self, snapshot: DelaySnapshot | None) -> None:
        self.snapshot = snapshot
        self.scrape = False

    def hedge_delay(self, route: str) -> float | None:
        if self.scrape:
            raise AssertionError(route)
        return 0.040

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Learn nothing."""

    def delays(self) -> dict[str, float | None]:
        raise AssertionError

    def statistics(self) -> object:
        raise AssertionError


def test_scrape_reads_only_the_published_snapshot(registry: CollectorRegistry) -> None:
    """The delay gauge comes from delay_snapshot(), never from hedge_delay or live state."""

    class Snapshotting:
        def __init__(self, inner: LiveStateForbidden) -> None:
            self.inner = inner

        def hedge_delay(self, route: str) -> float | None:
            return self.inner.hedge_delay(route)

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            """Learn nothing."""

        def delay_snapshot(self) -> DelaySnapshot:
            assert self.inner.snapshot is not None
            return self.inner.snapshot

    routes = MappingProxyType({ROUTE: 0.025, "GET http://cut": None})
    inner = LiveStateForbidden(DelaySnapshot(routes=routes, default=0.1))
    built, _ = transport(delay=Snapshotting(inner))
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    for route in (ROUTE, "GET http://cut", "GET http://new"):
        hook(record(route=route))
    inner.scrape = True
    name = "hedgeclient_hedge_delay_seconds"
    assert value(registry, name, client=CLIENT, route=ROUTE) == 0.025
    assert value(registry, name, client=CLIENT, route="GET http://new") == 0.1
    cut = value(registry, name, client=CLIENT, route="GET http://cut")
    assert cut is not None
    assert math.isnan(cut)


def test_policy_without_snapshot_reports_the_latest_delay(registry: CollectorRegistry) -> None:
    """A policy without delay_snapshot: the gauge is the route's latest request's delay."""
    policy = LiveStateForbidden(None)
    built, _ = transport(delay=policy)
    hook = PrometheusMetrics.for_registry(registry).bind(built)
    hook(record(delay=0.040))
    hook(record(delay=0.045))
    hook(record(delay=None, suppressed="opted_out"))  # not eligible: the gauge stays
    policy.scrape = True
    name = "hedgeclient_hedge_delay_seconds"
    assert value(registry, name, client=CLIENT, route=ROUTE) == 0.045
    hook(record(delay=None, suppressed="cutoff"))
    gauge = value(registry, name, client=CLIENT, route=ROUTE)
    assert gauge is not None
    assert math.isnan(gauge)


def test_bind_takes_any_metrics_source(registry: CollectorRegistry) -> None:
    """bind() needs a name, a delay policy and a budget, not a HedgedTransport."""

    class Source:
        name = "bare"
        delay_policy = FixedDelay(0.020)
        budget = HedgeBudget(burst=4)

    source = Source()
    hook = PrometheusMetrics.for_registry(registry).bind(source)
    hook(record(client="bare"))
    assert value(registry, "hedgeclient_budget_tokens", client="bare") == 4.0
    assert value(registry, "hedgeclient_hedge_delay_seconds", client="bare", route=ROUTE) == 0.02


def test_negative_and_nan_durations_are_observed_as_zero(registry: CollectorRegistry) -> None:
    """A clock that stepped back never makes a histogram's _sum decrease."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    hook(
        record(
            attempt(duration=-0.5, outcome="cancelled", status=None),
            attempt("backup", B, started=0.030, duration=math.nan),
            duration=-0.25,
        )
    )
    labels = {"client": CLIENT, "route": ROUTE}
    name = "hedgeclient_request_duration_seconds"
    assert value(registry, f"{name}_sum", **labels) == 0.0
    assert value(registry, f"{name}_bucket", **labels, le="0.001") == 1
    name = "hedgeclient_attempt_duration_seconds"
    for kind in ("primary", "backup"):
        assert value(registry, f"{name}_sum", **labels, kind=kind) == 0.0
        assert value(registry, f"{name}_bucket", **labels, kind=kind, le="0.001") == 1


def test_instrumentation_never_imports_the_transport() -> None:
    """The instrumentation package imports only events, delay snapshots, checks, the
    version, and the other packages' private names (``_compat.otel``, the
    OpenTelemetry provider look-up; ``_compat.prometheus``, the ``_created`` switch)."""
    package = ROOT / "hedgeclient" / "instrumentation"
    imported: set[str] = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    ours = {m for m in imported if m.split(".")[0] == "hedgeclient"}
    outside = {m for m in ours if not m.startswith("hedgeclient.instrumentation")}
    assert outside == {
        "hedgeclient._checks",
        "hedgeclient._policy.delay",
        "hedgeclient._events",
        "hedgeclient._compat.otel",
        "hedgeclient._compat.prometheus",
        "hedgeclient._version",
    }


def test_collected_transport_drops_gauges(registry: CollectorRegistry) -> None:
    """A garbage-collected transport's gauge series disappear; its counters stay."""
    built, sink = transport()
    sink.hooks.append(PrometheusMetrics.for_registry(registry).bind(built))
    sink(record())
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 10.0
    del built, sink
    gc.collect()
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) is None
    assert value(registry, "hedgeclient_hedge_delay_seconds", client=CLIENT, route=ROUTE) is None
    assert value(registry, "hedgeclient_hedges_total", client=CLIENT, route=ROUTE) == 0


def _reachable(root: object, limit: int = 200_000) -> list[object]:
    """Every object reachable from ``root`` through references (classes, modules and
    functions' globals aside: the walk follows data, not code)."""
    seen = {id(root)}
    found = [root]
    queue = [root]
    while queue and len(found) < limit:
        for referent in gc.get_referents(queue.pop()):
            if isinstance(referent, (type, types.ModuleType)) or id(referent) in seen:
                continue
            if isinstance(referent, dict) and "__builtins__" in referent:  # a module's
                continue
            seen.add(id(referent))
            found.append(referent)
            queue.append(referent)
    return found


def test_the_scrape_never_reaches_the_transport(registry: CollectorRegistry) -> None:
    """The registry (its collectors, the gauges' readers, the hook) holds no reference,
    strong or weak, to the transport that feeds it: the gauges read callables of its
    parts (issue 25)."""
    built = HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas={"http://svc": [A, B]},
        metrics=registry,
        name=CLIENT,
    )
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == 10.0
    assert value(registry, "hedgeclient_replicas", client=CLIENT, service="http://svc") == 2
    reached = _reachable(registry)
    assert not any(found is built for found in reached)
    assert not any(isinstance(found, weakref.ref) and found() is built for found in reached)


def test_hook_repr(registry: CollectorRegistry) -> None:
    """The hook and the metrics say what they are in logs."""
    metrics = PrometheusMetrics.for_registry(registry)
    hook = metrics.bind(transport()[0])
    assert repr(hook) == "<hedgeclient Prometheus hook client='catalog'>"
    assert repr(metrics) == "PrometheusMetrics(max_routes=1000, max_replicas=100, clients=1)"


# -- end to end through HedgedTransport ------------------------------------------------------


@pytest.fixture
def client_factory(registry: CollectorRegistry) -> Callable[..., httpx.AsyncClient]:
    """Build clients whose transport reports to the test's registry (``metrics=``)."""

    def build(script: ScriptedReplicas, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("budget", HedgeBudget(ratio=1.0, burst=100, min_per_second=0))
        built = HedgedTransport(
            httpx.MockTransport(script.handler),
            replicas={"http://svc": ["http://a", "http://b"]},
            delay=0.030,
            metrics=registry,
            **{"name": CLIENT, **kwargs},
        )
        return httpx.AsyncClient(transport=built, base_url="http://svc")

    return build


@pytest.mark.anyio
async def test_end_to_end_backup_wins(registry: CollectorRegistry, client_factory: Any) -> None:
    """A backup that answers first adds exactly one hedge and one win."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with client_factory(script, selector=FirstReplica()) as client:
        response = await client.get("/x")
    assert response.status_code == 200
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_total", **labels) == 1
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 1
    assert value(registry, "hedgeclient_cancelled_attempts_total", **labels, replica=A) == 1
    sent = value(registry, "hedgeclient_request_duration_seconds_sum", **labels)
    assert sent == pytest.approx(0.040)  # the backup at 0.030 answered 0.010 later


@pytest.mark.anyio
async def test_end_to_end_budget_suppressed(
    registry: CollectorRegistry, client_factory: Any
) -> None:
    """A backup refused by an empty budget adds one suppressed hedge, reason budget."""
    budget = HedgeBudget(ratio=0.01, burst=1, min_per_second=0)
    assert budget.try_withdraw()  # empty it
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with client_factory(script, selector=FirstReplica(), budget=budget) as client:
        await client.get("/x")
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_suppressed_total", **labels, reason="budget") == 1
    assert value(registry, "hedgeclient_hedges_total", **labels) == 0
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) == pytest.approx(0.01)


@pytest.mark.anyio
async def test_a_lone_primary_builds_no_record_for_the_metrics(
    registry: CollectorRegistry, client_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With metrics on and no hook or trace, a request whose primary alone answered is
    counted from its event, no RequestRecord built; a hedged one builds its record once."""
    built: list[str] = []
    record_of = hedgeclient._report.RequestRecord

    def counting(*fields: Any) -> RequestRecord:
        built.append(fields[1])  # the route
        return record_of(*fields)

    monkeypatch.setattr(hedgeclient._report, "RequestRecord", counting)
    script = ScriptedReplicas({"a": [0.001, 0.100], "b": [0.010]})
    async with client_factory(script, selector=FirstReplica()) as client:
        await client.get("/x")  # the primary answers
        await client.get("/x")  # the backup wins
    assert built == [ROUTE]
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_requests_total", **labels, outcome="ok") == 2
    assert value(registry, "hedgeclient_attempts_total", **labels, kind="primary", replica=A) == 2
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 1
    name = "hedgeclient_attempt_duration_seconds_count"
    assert value(registry, name, **labels, kind="primary") == 2  # one answer, one censored


@pytest.mark.anyio
async def test_hundred_rebuilt_transports(registry: CollectorRegistry, client_factory: Any) -> None:
    """A transport built 100 times with metrics= registers once and leaks no gauge series."""
    script = ScriptedReplicas({"a": [0.001], "b": [0.001]})
    for _ in range(100):
        async with client_factory(script) as client:
            await client.get("/x")
        del client
    gc.collect()
    metrics = PrometheusMetrics.for_registry(registry)
    assert metrics.statistics() == PrometheusMetricsStatistics(
        clients=1, routes=1, replicas=2, transports=0, overflowed=0
    )
    name = "hedgeclient_requests_total"
    assert value(registry, name, client=CLIENT, route=ROUTE, outcome="ok") == 100
    assert value(registry, "hedgeclient_budget_tokens", client=CLIENT) is None


@pytest.mark.anyio
async def test_three_live_transports_end_to_end(
    registry: CollectorRegistry, client_factory: Any
) -> None:
    """Three transports with metrics=registry serve side by side and scrape cleanly."""
    script = ScriptedReplicas({"a": [0.001], "b": [0.001]})
    clients = [client_factory(script, name=name) for name in ("x", "y", "z")]
    for client in clients:
        await client.get("/x")
    text = generate_latest(registry).decode()
    assert text.count("hedgeclient_budget_tokens{") == 3
    for client in clients:
        await client.aclose()


def test_import_hedgeclient_imports_no_instrumentation() -> None:
    """Importing hedgeclient and building a transport with metrics=False imports neither
    hedgeclient.instrumentation nor prometheus_client."""
    code = (
        "import sys, hedgeclient\n"
        "hedgeclient.HedgedTransport(metrics=False)\n"
        "loaded = {'hedgeclient.instrumentation', 'prometheus_client'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the dashboard and the rules files (checked against Prometheus in tests/integration) ---

RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")


def recorded_names() -> list[str]:
    """The ``record:`` names of the rules file."""
    return re.findall(r"^\s*- record: (\S+)$", RULES.read_text(), flags=re.MULTILINE)


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard, as JSON."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_dashboard_datasource_is_a_variable() -> None:
    """Every panel and target uses the ${datasource} variable of type prometheus."""
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"client", "route"} <= variables.keys()
    expected = {"type": "prometheus", "uid": "${datasource}"}
    for panel in board["panels"]:
        assert panel["datasource"] == expected, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == expected, panel["title"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


def test_dashboard_reads_only_recorded_series() -> None:
    """Panel expressions use recorded series only, each defined in the rules file, and
    only the dashboard's own variables."""
    board = dashboard()
    records = set(recorded_names())
    defined = {v["name"] for v in board["templating"]["list"]}
    texts = [t["expr"] for p in board["panels"] for t in p["targets"]]
    texts += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    for expr in texts:
        assert "hedgeclient_" not in RECORDED.sub("", expr), expr  # no raw metric
        assert set(RECORDED.findall(expr)) <= records, expr
        assert set(re.findall(r"\$(\w+)", expr)) <= defined, expr


def test_every_rule_is_used() -> None:
    """Each recorded series feeds the dashboard, another rule or an alert."""
    board = dashboard()
    text = RULES.read_text()
    used = set(RECORDED.findall(json.dumps(board)))
    used |= set(RECORDED.findall(re.sub(r"^\s*- record: \S+$", "", text, flags=re.MULTILINE)))
    assert set(recorded_names()) <= used


def test_rules_read_documented_metrics() -> None:
    """The rules read only metrics this module exposes."""
    text = RECORDED.sub("", RULES.read_text())
    raw = set(re.findall(r"\bhedgeclient_[a-z_]+\b", text))
    assert raw
    for name in raw:
        family = re.sub(r"_(total|bucket)$", "", name)
        assert family in DOCUMENTED, name


# -- one path, the _created series and threads --------------------------------------------


def scraped(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the hook feeds but ``_created``, by name and labels."""
    scraped_at_scrape_time = {
        "gauge",
        "hedgeclient_replica_ejections",
        "hedgeclient_delay_samples_left_out",
        "hedgeclient_budget_retries",  # read from the budget at scrape time
    }
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for m in registry.collect()
        for s in m.samples
        if not s.name.endswith("_created")
        and not {m.type, m.name.removesuffix("_refused")} & scraped_at_scrape_time
    }


@pytest.mark.anyio
async def test_transport_counts_as_its_records(registry: CollectorRegistry) -> None:
    """The transport's own metrics (``metrics=registry``, no other hook) give the same
    samples as its records handed to a bound hook: one event, whoever consumes it."""
    replies = {  # no duration on a bucket bound: the second run starts at another instant
        "a": [0.100, 0.0012, Reply(0.0021, status=503), Reply(0.0011, error=httpx.ConnectError)],
        "b": [0.0113, 0.0043, 0.0033],
    }
    by_records = CollectorRegistry()
    other = HedgedTransport(metrics=False, name=CLIENT)
    hook = PrometheusMetrics.for_registry(by_records).bind(other)
    for metrics, hooks in ((registry, []), (False, [hook])):
        built = HedgedTransport(
            httpx.MockTransport(ScriptedReplicas(replies).handler),
            replicas={"http://svc": [A, B]},
            delay=0.030,
            budget=HedgeBudget(ratio=1.0, burst=100, min_per_second=0),
            selector=FirstReplica(),
            metrics=metrics,
            hooks=hooks,
            name=CLIENT,
        )
        async with httpx.AsyncClient(transport=built, base_url="http://svc") as client:
            for path in ("/a", "/b", "/c", "/d"):
                await client.get(path)
                # past the hush a lost primary leaves on its replica (issue 24), so that
                # each primary goes to the first replica, as scripted
                await anyio.sleep(0.050)
    own, records = scraped(registry), scraped(by_records)
    assert own.keys() == records.keys()
    for key, got in own.items():
        assert got == pytest.approx(records[key], abs=1e-9), key
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedge_wins_total", **labels) == 3  # all but /b
    assert value(registry, "hedgeclient_requests_total", **labels, outcome="ok") == 4


@pytest.mark.parametrize("disabled", [False, True])
def test_created_series_follow_prometheus_client(disabled: bool) -> None:
    """``_created`` series come and go with prometheus-client's own switch, as its
    Counter's and Histogram's do."""
    code = (
        "import prometheus_client as pc\n"
        "from hedgeclient import HedgedTransport, RequestRecord\n"
        "from hedgeclient.instrumentation import PrometheusMetrics\n"
        "ours, theirs = pc.CollectorRegistry(), pc.CollectorRegistry()\n"
        "hook = PrometheusMetrics.for_registry(ours).bind(HedgedTransport(metrics=False))\n"
        "hook(RequestRecord('default', 'r', 'ok', 0.01, None, (), None))\n"
        "pc.Counter('c', 'c', registry=theirs).inc()\n"
        "text = pc.generate_latest(ours).decode()\n"
        "print('_created' in text, '_created' in pc.generate_latest(theirs).decode())\n"
    )
    env = {"PROMETHEUS_DISABLE_CREATED_SERIES": "True"} if disabled else {}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    ).stdout.split()
    assert out == [str(not disabled)] * 2


def test_created_series_are_the_child_creation_times(registry: CollectorRegistry) -> None:
    """Each counter and histogram series has a ``_created`` sample, its creation time."""
    hook = PrometheusMetrics.for_registry(registry).bind(transport()[0])
    before = time.time()
    hook(record())
    labels = {"client": CLIENT, "route": ROUTE}
    created = value(registry, "hedgeclient_requests_created", **labels, outcome="ok")
    assert created is not None
    assert before <= created <= time.time()
    name = "hedgeclient_request_duration_seconds_created"
    assert value(registry, name, **labels) == pytest.approx(created, abs=1.0)


def test_threads_sharing_a_client_count_exactly(registry: CollectorRegistry) -> None:
    """Hooks of one client name called from several threads lose no increment, and a
    scrape meanwhile sees counts that never decrease."""
    metrics = PrometheusMetrics.for_registry(registry)
    hooks = [metrics.bind(transport()[0]) for _ in range(4)]
    rounds = 5_000
    seen: list[float] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            seen.append(
                value(registry, "hedgeclient_hedges_total", client=CLIENT, route=ROUTE) or 0.0
            )

    def drive(hook: Any) -> None:
        for _ in range(rounds):
            hook(backup_won())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: between any two bytecodes
    try:
        scraper = threading.Thread(target=scrape)
        scraper.start()
        workers = [threading.Thread(target=drive, args=(hook,)) for hook in hooks]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        stop.set()
        scraper.join()
    finally:
        sys.setswitchinterval(interval)
    total = 4 * rounds
    labels = {"client": CLIENT, "route": ROUTE}
    assert value(registry, "hedgeclient_hedges_total", **labels) == total
    assert value(registry, "hedgeclient_request_duration_seconds_count", **labels) == total
    name = "hedgeclient_attempt_duration_seconds_sum"
    assert value(registry, name, **labels, kind="backup") == pytest.approx(0.015 * total)
    assert seen == sorted(seen)
