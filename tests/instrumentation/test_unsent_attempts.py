"""A backup that never reached the wire is not a hedge (issue 23, BH-54).

A backup that waits for one of the client's own pool connections until the race ends
(or until its pool timeout) loaded no replica: its outcome is ``unsent``, and the
metrics count it in ``hedgeclient_unsent_attempts_total``, not as a hedge, an attempt,
a placement or a cancelled loser. Over loopback sockets with a real httpcore pool of
one connection, so that the wait is the pool's own (``tests/otel/test_metrics.py``
has the OpenTelemetry side).
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import AttemptRecord, HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.instrumentation import PrometheusMetrics
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

SERVICE = "http://svc"
ROUTE = "GET http://svc"


def generous() -> HedgeBudget:
    """A budget that never binds here."""
    return HedgeBudget(ratio=1.0, burst=100, min_per_second=0)


def first_then_backup(
    svc: FakeService,
    budget: HedgeBudget,
    records: list[RequestRecord],
    inner: httpx.AsyncBaseTransport | None = None,
    metrics: bool | CollectorRegistry = False,
) -> HedgedTransport:
    """Primaries to replica 0, one backup at 50 ms to the other; records kept."""
    return HedgedTransport(
        inner,
        replicas={SERVICE: svc.origins},
        delay=0.050,
        max_hedges=1,
        selector=FirstReplica(),
        budget=budget,
        hooks=[records.append],
        metrics=metrics,
    )


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """``registry.get_sample_value`` with keyword labels (client ``default``)."""
    return registry.get_sample_value(name, {"client": "default", "route": ROUTE, **labels})


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("ending", ["race_won", "pool_timeout"])
async def test_backup_that_never_got_a_connection_is_not_a_hedge(ending: str) -> None:
    """Loopback, one pool connection held by the primary (1 s): the backup sent at
    50 ms waits for it until the primary's answer ends the race (or until its 0.2 s
    pool timeout): outcome ``unsent``, counted apart, no hedge, no attempt, no load;
    its token goes back to the budget (a new user's busy client spent its budget on
    backups that never left, then saw them refused as ``budget``)."""
    records: list[RequestRecord] = []
    budget = generous()
    registry = CollectorRegistry()
    overrides = {0: ReplicaConfig(latency=1.0)}
    with FakeService(replicas=2, latency=0.002, replica_overrides=overrides) as svc:
        inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
        transport = first_then_backup(svc, budget, records, inner, metrics=registry)
        pool = 10.0 if ending == "race_won" else 0.2  # the backup's pool wait ends first
        timeout = httpx.Timeout(10.0, pool=pool)
        async with httpx.AsyncClient(
            transport=transport, base_url=SERVICE, timeout=timeout
        ) as client:
            response = await client.get("/")
        stats = svc.stats()
        primary_replica, backup_replica = svc.origins
    assert response.headers["x-replica"] == "0"
    ((primary, backup),) = [r.attempts for r in records]
    assert (primary.kind, primary.outcome) == ("primary", "won")
    assert (backup.kind, backup.outcome) == ("backup", "unsent")
    assert backup.error_type == (None if ending == "race_won" else "PoolTimeout")
    assert not records[0].hedged
    assert stats.replicas[1].received == 0  # no replica saw the backup
    assert (budget.statistics().withdrawals, budget.tokens) == (1, 100.0)  # given back
    assert value(registry, "hedgeclient_unsent_attempts_total", kind="backup") == 1.0
    assert value(registry, "hedgeclient_unsent_attempts_total", kind="primary") is None
    assert value(registry, "hedgeclient_hedges_total") == 0.0
    sent = "hedgeclient_attempts_total"
    assert value(registry, sent, kind="primary", replica=primary_replica) == 1.0
    assert value(registry, sent, kind="backup", replica=backup_replica) is None
    assert value(registry, "hedgeclient_cancelled_attempts_total", replica=backup_replica) is None
    placements = value(
        registry, "hedgeclient_backup_placements_total", target="other_replica", zone="unknown"
    )
    assert placements is None


def unsent_record() -> RequestRecord:
    """A primary on a that won in 50 ms, and a backup to b that never left the pool."""
    return RequestRecord(
        client="default",
        route=ROUTE,
        outcome="ok",
        duration=0.050,
        delay=0.030,
        attempts=(
            AttemptRecord("primary", "http://a", 0.0, 0.050, "won", 200, False),
            AttemptRecord(
                "backup", "http://b", 0.030, 0.020, "unsent", None, True, trigger="delay"
            ),
        ),
        suppressed=None,
    )


class _Source:
    """A minimal metrics source for binding the Prometheus hook."""

    name = "default"
    delay_policy = None

    class budget:
        tokens = 10.0


def test_unsent_backup_counts_in_prometheus_from_a_record() -> None:
    """From a record: an ``unsent`` backup is one unsent attempt and nothing else."""
    registry = CollectorRegistry()
    hook = PrometheusMetrics(registry).bind(_Source())
    hook(unsent_record())
    assert value(registry, "hedgeclient_unsent_attempts_total", kind="backup") == 1.0
    assert value(registry, "hedgeclient_hedges_total") == 0.0
    assert value(registry, "hedgeclient_hedge_wins_total") == 0.0
    assert value(registry, "hedgeclient_attempts_total", kind="backup", replica="http://b") is None
    assert value(registry, "hedgeclient_attempts_total", kind="primary", replica="http://a") == 1.0
    assert value(registry, "hedgeclient_attempt_duration_seconds_count", kind="backup") is None


@pytest.mark.anyio
@pytest.mark.slow
async def test_backup_cancelled_while_its_connection_opens_gives_its_token_back() -> None:
    """Loopback: the backup goes at 50 ms to a black hole (a full accept queue: its TCP
    connect hangs), the primary answers at 0.3 s and the backup is cancelled still
    connecting. No replica saw its request, so its token goes back to the bucket that
    paid it (a new user counted 5-13 tokens kept of 31-68 such backups before)."""
    from hedgeclient.testing import BlackHole

    records: list[RequestRecord] = []
    budget = generous()
    overrides = {0: ReplicaConfig(latency=0.3), 1: ReplicaConfig(fault=BlackHole())}
    async with FakeService(replicas=2, latency=0.002, replica_overrides=overrides) as svc:
        transport = first_then_backup(svc, budget, records)
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            response = await client.get("/")
    assert response.headers["x-replica"] == "0"
    ((primary, backup),) = [r.attempts for r in records]
    assert (primary.outcome, backup.kind, backup.outcome) == ("won", "backup", "cancelled")
    statistics = budget.statistics()
    assert (statistics.withdrawals, statistics.refunds, budget.tokens) == (1, 1, 100.0)
