"""Replica metrics: backup placements from records, and replica sets, ejections and
discovery read from the transport at scrape time."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import (
    AttemptRecord,
    DiscoveryFailedError,
    HedgedTransport,
    PolledReplicas,
    PowerOfTwoChoices,
    RequestRecord,
)
from hedgeclient.instrumentation import PrometheusMetrics

CLIENT = "catalog"
ROUTE = "GET http://svc"
A, B, C = "http://a", "http://b", "http://c"


def attempt(kind: str, replica: str, zone: str | None, *, other: bool = False) -> AttemptRecord:
    return AttemptRecord(
        kind=kind,  # type: ignore[arg-type]
        replica=replica,
        started=0.0,
        duration=0.010,
        outcome="won",
        status=200,
        censored=False,
        zone=zone,
        other_connection=other,
    )


def record(*attempts: AttemptRecord) -> RequestRecord:
    return RequestRecord(
        client=CLIENT,
        route=ROUTE,
        outcome="ok",
        duration=0.010,
        delay=0.030,
        attempts=attempts,
        suppressed=None,
    )


def placements(registry: CollectorRegistry, target: str, zone: str) -> float | None:
    return registry.get_sample_value(
        "hedgeclient_backup_placements_total",
        {"client": CLIENT, "route": ROUTE, "target": target, "zone": zone},
    )


def test_backup_placements_by_target_and_zone(registry: CollectorRegistry) -> None:
    """Each backup counts once: crossed or same zone as its primary, unknown without
    zones, other_connection for a backup to its primary's address."""
    transport = HedgedTransport(replicas={"http://svc": [A, B, C]}, metrics=False, name=CLIENT)
    hook = PrometheusMetrics.for_registry(registry).bind(transport)
    hook(record(attempt("primary", A, "z1"), attempt("backup", B, "z2")))
    hook(record(attempt("primary", A, "z1"), attempt("backup", B, "z2")))
    hook(record(attempt("primary", A, "z1"), attempt("backup", C, "z1")))
    hook(record(attempt("primary", A, None), attempt("backup", B, "z2")))
    hook(record(attempt("primary", A, None), attempt("backup", A, None, other=True)))
    assert placements(registry, "other_replica", "crossed") == 2
    assert placements(registry, "other_replica", "same") == 1
    assert placements(registry, "other_replica", "unknown") == 1
    assert placements(registry, "other_connection", "unknown") == 1
    assert record(attempt("primary", A, "z1"), attempt("backup", B, "z2")).crossed_zone is True
    assert record(attempt("primary", A, "z1")).crossed_zone is None


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"client": CLIENT, **labels})


def test_replica_sets_and_ejections_at_scrape_time(registry: CollectorRegistry) -> None:
    """The replicas of each service, which of them are ejected, and ejections by cause."""
    selector = PowerOfTwoChoices(rng=random.Random(1), clock=lambda: 0.0)
    transport = HedgedTransport(
        replicas={"http://svc": [A, B, C], "http://solo": ["http://d"]},
        selector=selector,
        metrics=registry,
        name=CLIENT,
    )
    selector.choose([A, B, C], ())
    for _ in range(3):
        selector.attempt_started(B)
        selector.attempt_finished(B, result="connect_stalled")
    assert sample(registry, "hedgeclient_replicas", service="http://svc") == 3
    assert sample(registry, "hedgeclient_replicas", service="http://solo") == 1
    ejected = "hedgeclient_replica_ejected"
    assert sample(registry, ejected, service="http://svc", replica=B) == 1
    assert sample(registry, ejected, service="http://svc", replica=A) == 0
    total = "hedgeclient_replica_ejections_total"
    assert sample(registry, total, cause="connect_stalled") == 1
    assert sample(registry, total, cause="connect_failed") == 0
    assert sample(registry, "hedgeclient_replica_ejections_refused_total") == 0
    assert transport.selector is selector


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_discovery_refreshes_and_errors_at_scrape_time(
    registry: CollectorRegistry, anyio_backend: Any
) -> None:
    """A discovered service reports its refreshes and failures by error kind."""
    answers: list[Any] = [[A, B], "garbage"]

    async def fetch() -> Any:
        return answers.pop(0)

    transport = HedgedTransport(
        replicas={"http://svc": PolledReplicas(fetch)}, metrics=registry, name=CLIENT
    )
    await transport.refresh_replicas()
    with pytest.raises(DiscoveryFailedError) as failed:
        await transport.refresh_replicas()
    assert "must give an iterable" in failed.value.failures["http://svc"]
    refreshes = "hedgeclient_discovery_refreshes_total"
    assert sample(registry, refreshes, service="http://svc") == 1
    errors = "hedgeclient_discovery_errors_total"
    assert sample(registry, errors, service="http://svc", error="invalid") == 1
    assert sample(registry, errors, service="http://svc", error="timeout") == 0
    assert sample(registry, "hedgeclient_replicas", service="http://svc") == 2
    await transport.aclose()
