"""Tied requests in the race, in virtual time: the twin at the offset, and the
"dropped" answer that neither wins nor fails.

Replicas are scripted (``ScriptedReplicas``); a dropped copy is scripted as the
middleware answers it: 503 with ``Hedge-Tie-Dropped``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord, TiedRequests
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
DROPPED = Reply(0.002, status=503, headers={"Hedge-Tie-Dropped": "x"})


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


def empty_budget() -> HedgeBudget:
    """A budget with no token left (a request deposits 0.01 of one)."""
    budget = HedgeBudget(ratio=0.01, burst=1, min_per_second=0)
    assert budget.try_withdraw()
    return budget


def tied(
    script: ScriptedReplicas,
    records: list[RequestRecord] | None = None,
    *,
    offset: float = 0.002,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """A client that ties requests to ``http://svc`` over the scripted replicas a, b (c)."""
    kwargs.setdefault("budget", empty_budget())
    kwargs.setdefault("delay", 0.050)
    kwargs.setdefault("selector", FirstReplica())
    seen: list[httpx.Request] = kwargs.pop("seen", [])

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await script.handler(request)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: kwargs.pop("replicas", ["http://a", "http://b"])},
        tied=TiedRequests(offset=offset),
        metrics=False,
        hooks=[records.append] if records is not None else (),
        **kwargs,
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


async def test_twin_sent_at_offset_with_each_others_replica() -> None:
    """Both copies carry one tie id; each names the other's replica; the twin goes at
    the offset, outside a budget that allows no backup at all."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    seen: list[httpx.Request] = []
    async with tied(script, seen=seen) as client:
        script.start_clock()
        response = await client.get("/x")
    assert script.sent() == [(0.0, "a", "1"), (0.002, "b", "2")]
    first, twin = seen
    assert first.headers["hedge-tie"] == twin.headers["hedge-tie"]
    assert len(first.headers["hedge-tie"]) == 32
    assert (first.headers["hedge-twin"], twin.headers["hedge-twin"]) == ("http://b", "http://a")
    assert response.extensions["hedge"].attempt == 1


async def test_twin_whose_start_the_selector_fails_is_lost_never_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A custom selector that raises as the twin starts: logged, reason ``selector_error``,
    no twin and no other backup; the primary answers alone."""

    class Failing(FirstReplica):
        def attempt_started(self, replica: str) -> None:
            if replica != "http://a":
                msg = "selector bug"
                raise RuntimeError(msg)

    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    async with tied(script, selector=Failing()) as client:
        script.start_clock()
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.suppressed) == ("a", 1, "selector_error")
    assert script.sent() == [(0.0, "a", "1")]
    assert "hedgeclient: the replica selector failed; no backup" in caplog.text


async def test_dropped_answer_is_neither_winner_nor_failure() -> None:
    """The twin comes back dropped at 0.004: no backup goes at once, the primary's 200
    at 0.030 is returned, and the record says ``dropped``."""
    script = ScriptedReplicas({"a": [0.030], "b": [DROPPED]})
    records: list[RequestRecord] = []
    async with tied(script, records) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.status_code == 200
    assert script.sent() == [(0.0, "a", "1"), (0.002, "b", "2")]
    outcomes = [(a.kind, a.outcome, a.status) for a in records[0].attempts]
    assert outcomes == [("primary", "won", 200), ("backup", "dropped", 503)]


async def test_dropped_primary_then_twin_wins() -> None:
    """The primary is dropped (its twin started first); the twin's answer is returned."""
    script = ScriptedReplicas({"a": [DROPPED], "b": [0.020]})
    async with tied(script) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.status_code == 200
    assert response.extensions["hedge"].attempt == 2
    assert script.sent() == [(0.0, "a", "1"), (0.002, "b", "2")]


async def test_dropped_copy_gives_its_backup_back_when_the_twin_fails() -> None:
    """The twin is dropped, then the primary fails with a 502 at 0.030: the backup the
    dropped copy gave back goes at once, to c, whose 200 is returned (never the 503)."""
    script = ScriptedReplicas({"a": [Reply(0.030, status=502)], "b": [DROPPED], "c": [0.010]})
    budget = HedgeBudget(ratio=1.0, burst=10, min_per_second=0)
    async with tied(script, replicas=["http://a", "http://b", "http://c"], budget=budget) as c:
        script.start_clock()
        response = await c.get("/x")
    assert response.status_code == 200
    assert script.sent() == [(0.0, "a", "1"), (0.002, "b", "2"), (0.030, "c", "3")]


async def test_dropped_answer_is_never_returned() -> None:
    """The twin is dropped and the primary fails with a connect error, with no backup
    left (an empty budget): the caller gets the ConnectError, never the dropped 503."""
    script = ScriptedReplicas({"a": [Reply(0.030, error=httpx.ConnectError)], "b": [DROPPED]})
    async with tied(script) as client:
        script.start_clock()
        with pytest.raises(httpx.ConnectError):
            await client.get("/x")


async def test_non_idempotent_request_is_never_tied() -> None:
    """A POST goes once, untied, with no tie headers and no attempt header."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    seen: list[httpx.Request] = []
    async with tied(script, seen=seen) as client:
        script.start_clock()
        response = await client.post("/x", content=b"order")
    assert response.status_code == 200
    assert script.sent() == [(0.0, "a", None)]
    assert "hedge-tie" not in seen[0].headers


async def test_non_idempotent_request_tied_when_opted_in() -> None:
    """A POST with ``extensions={"hedge": True}`` is tied like a GET."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with tied(script) as client:
        script.start_clock()
        response = await client.post("/x", content=b"order", extensions={"hedge": True})
    assert response.extensions["hedge"].attempt == 2
    assert script.sent() == [(0.0, "a", "1"), (0.002, "b", "2")]


async def test_tie_false_sends_untied_and_hedges_by_delay() -> None:
    """``extensions={"tie": False}``: no twin; the backup goes by the 0.050 s delay."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    budget = HedgeBudget(ratio=1.0, burst=10, min_per_second=0)
    seen: list[httpx.Request] = []
    async with tied(script, budget=budget, seen=seen) as client:
        script.start_clock()
        await client.get("/x", extensions={"tie": False})
    assert script.sent() == [(0.0, "a", "1"), (0.050, "b", "2")]
    assert all("hedge-tie" not in r.headers for r in seen)


def test_offset_checked() -> None:
    """The offset is seconds in [0, 1]; anything else is refused by name."""
    with pytest.raises(ValueError, match=r"^`offset` must be a number of seconds in \[0, 1\]"):
        TiedRequests(offset=2.0)
    with pytest.raises(TypeError, match=r"^`offset` must be a number of seconds"):
        TiedRequests(offset="1ms")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^`tied` must be a TiedRequests or None"):
        HedgedTransport(tied=0.002)  # type: ignore[arg-type]
