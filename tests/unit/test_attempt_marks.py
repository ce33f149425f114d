"""What a request carries that the server acts on: the attempt header and the tie
headers go only on a request that may have a twin (issue 23, BH-49)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
import trio
from trio.testing import MockClock

from hedgeclient import HedgeBudget, HedgedTransport, Route, TiedRequests
from hedgeclient.testing import FirstReplica

SERVICE = "http://svc"
MARKS = ("hedge-attempt", "hedge-tie", "hedge-twin")


async def stream() -> AsyncIterator[bytes]:
    yield b"order"


def sent_marks(
    method: str, *, tied: bool = False, transport: dict[str, Any] | None = None, **request: Any
) -> list[dict[str, str]]:
    """The hedge headers of every attempt one request sends, in virtual time: replica a
    answers in 10 ms, b at once (a tied request's twin goes at 2 ms)."""
    seen: list[httpx.Request] = []
    if request.get("content") == "stream":
        request["content"] = stream()

    async def handler(sent: httpx.Request) -> httpx.Response:
        seen.append(sent)
        if sent.url.host == "a":
            await anyio.sleep(0.010)
        return httpx.Response(200)

    async def main() -> None:
        hedged = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={SERVICE: ["http://a", "http://b"]},
            selector=FirstReplica(),
            delay=1.0,
            budget=HedgeBudget(ratio=1.0, burst=10, min_per_second=0),
            tied=TiedRequests() if tied else None,
            metrics=False,
            **(transport or {}),
        )
        async with httpx.AsyncClient(transport=hedged, base_url=SERVICE) as client:
            await client.request(method, "/x", **request)

    trio.run(main, clock=MockClock(autojump_threshold=0))
    return [{k: r.headers[k] for k in MARKS if k in r.headers} for r in seen]


INELIGIBLE = [
    pytest.param("POST", {"content": b"order"}, {}, id="not_idempotent"),
    pytest.param("DELETE", {}, {}, id="not_allow_listed"),
    pytest.param("GET", {"extensions": {"hedge": False}}, {}, id="opted_out"),
    pytest.param("GET", {}, {"routes": [Route(path="/x", hedge=False)]}, id="opted_out_by_route"),
    pytest.param(
        "POST", {"content": "stream", "extensions": {"hedge": True}}, {}, id="unreplayable_body"
    ),
    pytest.param("GET", {}, {"max_hedges": 0}, id="hedging_off"),
]


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize(("method", "request_args", "transport"), INELIGIBLE)
def test_request_sent_once_carries_no_hedge_headers(
    method: str, request_args: dict[str, Any], transport: dict[str, Any], tied: bool
) -> None:
    """A request that is not eligible for hedging is sent once, with no attempt header
    and no tie headers: a server must not treat it as a hedge."""
    assert sent_marks(method, tied=tied, transport=transport, **request_args) == [{}]


def test_eligible_requests_are_marked() -> None:
    """A GET, and a POST opted in, carry ``Hedge-Attempt: 1``; tied, the tie headers too."""
    assert sent_marks("GET") == [{"hedge-attempt": "1"}]
    opted = sent_marks("POST", content=b"order", extensions={"hedge": True})
    assert opted == [{"hedge-attempt": "1"}]
    first, twin = sent_marks("GET", tied=True)
    assert (first["hedge-attempt"], twin["hedge-attempt"]) == ("1", "2")
    assert first["hedge-tie"] == twin["hedge-tie"]
    assert (first["hedge-twin"], twin["hedge-twin"]) == ("http://b", "http://a")


def test_callers_own_header_kept_on_a_request_sent_once() -> None:
    """A caller's own attempt header on a request sent once is passed on unchanged."""
    marks = sent_marks("POST", content=b"order", headers={"Hedge-Attempt": "7"})
    assert marks == [{"hedge-attempt": "7"}]
