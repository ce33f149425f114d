"""Policy per route and per request on both backends (asyncio and trio, real clock).

The virtual-time module (``test_route_policy.py``) asserts instants on trio; these
assert outcomes only, with tiny real delays, so they hold on a loaded machine: the
primary never answers before it is cancelled, a backup answers at once.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, HedgePolicy, Route

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"


async def primary_hangs(request: httpx.Request) -> httpx.Response:
    """Attempt 1 waits until it is cancelled (60 s); every backup answers at once."""
    if request.headers.get("hedge-attempt", "1") == "1":
        await anyio.sleep(60)
    return httpx.Response(200, text=request.headers.get("x-backup", "-"))


def client(**kwargs: object) -> httpx.AsyncClient:
    transport = HedgedTransport(
        httpx.MockTransport(primary_hangs),
        replicas={SERVICE: ["http://a", "http://b", "http://c"]},
        delay=0.001,
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        metrics=False,
        **kwargs,  # type: ignore[arg-type]
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


async def test_request_then_route_then_transport() -> None:
    """A route's hook and delay apply to its requests; a request's own policy wins."""

    def mark(value: str) -> object:
        def hook(request: httpx.Request) -> httpx.Request:
            request.headers["X-Backup"] = value
            return request

        return hook

    routes = [Route(path="/r/*", on_backup=mark("route"), delay=0.002)]
    async with client(routes=routes, on_backup=mark("transport")) as c:
        plain = await c.get("/x")
        routed = await c.get("/r/1")
        own = await c.get("/r/2", extensions={"hedge": {"on_backup": mark("request")}})
    assert (plain.text, routed.text, own.text) == ("transport", "route", "request")
    assert routed.extensions["hedge"].delay == pytest.approx(0.002)


async def test_a_veto_and_a_request_without_backups_answer_from_the_primary_alone() -> None:
    """A vetoed backup and ``max_hedges=0`` leave the request to its primary; with a
    primary that answers, both come back from it (no backup, a reason each)."""

    async def answers(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(0.200)  # long past the delay, even a held-back one (client_lag)
        return httpx.Response(200)

    transport = HedgedTransport(
        httpx.MockTransport(answers),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=0.020,
        metrics=False,
        on_backup=lambda request: None,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as c:
        vetoed = await c.get("/x")
        off = await c.get("/x", extensions={"hedge": HedgePolicy(max_hedges=0)})
    assert (vetoed.extensions["hedge"].attempts, vetoed.extensions["hedge"].suppressed) == (
        1,
        "vetoed",
    )
    assert (off.extensions["hedge"].attempts, off.extensions["hedge"].suppressed) == (
        1,
        "hedging_off",
    )
