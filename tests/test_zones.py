"""Zones in virtual time: primaries stay in the caller's zone, backups cross to another.

Replicas are scripted in process; a and b run in zone z1, c and d in z2, the caller in
z1. Exact outcomes under trio's MockClock.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, PowerOfTwoChoices, Replica, RequestRecord
from hedgeclient.testing import Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
A, B, C, D = "http://a", "http://b", "http://c", "http://d"
ZONES = {A: "z1", B: "z1", C: "z2", D: "z2"}


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


def zoned(script: ScriptedReplicas, records: list[RequestRecord], **kwargs: Any) -> HedgedTransport:
    kwargs.setdefault("zones", ZONES)
    kwargs.setdefault("zone", "z1")
    return HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: [A, B, C, D]},
        delay=0.030,
        budget=HedgeBudget(ratio=1.0, burst=10_000, min_per_second=0),
        selector=PowerOfTwoChoices(rng=random.Random(4)),
        hooks=[records.append],
        metrics=False,
        **kwargs,
    )


async def run(transport: HedgedTransport, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        return [await client.get(f"/{i}") for i in range(n)]


def slow_every_other(latency: float = 0.100) -> list[float | Reply]:
    """Replies alternating slow (past the delay) and fast."""
    return [latency, 0.005] * 500


async def test_primaries_stay_in_the_callers_zone() -> None:
    """Every primary goes to a replica of the caller's zone while one is healthy."""
    script = ScriptedReplicas({h: [0.005] for h in "abcd"})
    records: list[RequestRecord] = []
    await run(zoned(script, records), 200)
    assert {r.attempts[0].replica for r in records} == {A, B}
    assert {r.attempts[0].zone for r in records} == {"z1"}


async def test_backups_cross_zones_when_a_replica_there_is_healthy() -> None:
    """With backup_zone="other" (the default), >= 99 % of backups go to the other zone,
    and HedgeInfo and the record say so."""
    script = ScriptedReplicas(
        {"a": slow_every_other(), "b": slow_every_other(), "c": [0.005], "d": [0.005]}
    )
    records: list[RequestRecord] = []
    responses = await run(zoned(script, records), 400)
    backups = [a for r in records for a in r.attempts if a.kind == "backup"]
    crossed = [a for a in backups if a.zone == "z2"]
    assert len(backups) >= 100  # half the primaries are slow
    assert len(crossed) / len(backups) >= 0.99
    hedged = [r for r in responses if r.extensions["hedge"].attempts > 1]
    assert all(r.extensions["hedge"].crossed_zone is True for r in hedged)
    assert all(r.crossed_zone is True for r in records if r.hedged)


async def test_backups_fall_back_to_the_same_zone() -> None:
    """When the other zone's replicas are ejected, a backup goes to the primary's zone."""
    down = Reply(0.001, error=httpx.ConnectError)
    script = ScriptedReplicas(
        {"a": slow_every_other(), "b": slow_every_other(), "c": [down], "d": [down]}
    )
    records: list[RequestRecord] = []
    transport = zoned(script, records, zone=None)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for i in range(300):
            await client.get(f"/{i}")
    late = [a for r in records[-100:] for a in r.attempts if a.kind == "backup"]
    assert late
    assert all(a.zone == "z1" for a in late if a.outcome != "failed")


async def test_any_zone_lets_backups_stay_home() -> None:
    """backup_zone="any": backups are not steered; some stay in the primary's zone."""
    script = ScriptedReplicas({h: slow_every_other() for h in "abcd"})
    records: list[RequestRecord] = []
    await run(zoned(script, records, backup_zone="any", zone=None), 400)
    relations = {a.zone == r.attempts[0].zone for r in records for a in r.attempts[1:]}
    assert relations == {True, False}


async def test_a_caller_zone_with_its_replicas_ejected_goes_elsewhere() -> None:
    """Primaries prefer the caller's zone, but not an ejected replica there: with both
    z1 replicas refusing, primaries move to z2 once they are ejected (half the service
    may be: here, both of z1)."""
    down = Reply(0.001, error=httpx.ConnectError)
    script = ScriptedReplicas({"a": [down], "b": [down], "c": [0.005], "d": [0.005]})
    records: list[RequestRecord] = []
    transport = zoned(script, records)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for i in range(100):
            assert (await client.get(f"/{i}")).status_code == 200
            await anyio.sleep(0.001)
    late = {r.attempts[0].replica for r in records[-50:]}
    assert late <= {C, D}  # both z1 replicas ejected: two of four is the most allowed
    assert transport.selector.statistics().ejections["connect_failed"] == 2  # type: ignore[attr-defined]


def test_zones_from_replica_objects_win_over_the_mapping() -> None:
    """A Replica's own zone is kept; the zones mapping fills only the ones without."""
    records: list[RequestRecord] = []
    script = ScriptedReplicas({"a": [0.005], "b": [0.005]})
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: [Replica(A, zone="east"), B]},
        zones={A: "west", B: "west"},
        hooks=[records.append],
        metrics=False,
    )
    service = next(iter(transport._services.values()))
    assert service.zones == {A: "east", B: "west"}
