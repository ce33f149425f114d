"""Origins not named in ``replicas=``, single-replica services, and a mistyped origin
(issue 14, items 4 and 8)."""

from __future__ import annotations

import logging

import anyio.lowlevel
import httpx
import pytest

from hedgeclient import HedgedTransport

pytestmark = pytest.mark.anyio

REPLICAS = {"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]}


def test_other_origins_default_follows_replicas() -> None:
    """``other_origins=None`` means "pass" when replicas are named, "hedge" when not."""
    assert "other_origins='pass'" in repr(HedgedTransport(replicas=REPLICAS, metrics=False))
    assert "other_origins='hedge'" in repr(HedgedTransport(metrics=False))
    both = HedgedTransport(replicas=REPLICAS, other_origins="hedge", metrics=False)
    assert "other_origins='hedge'" in repr(both)


def test_other_origins_refuses_anything_else() -> None:
    """A value other than "pass", "hedge" or None is a ValueError naming the parameter."""
    with pytest.raises(
        ValueError, match=r"^`other_origins` must be 'pass', 'hedge' or None, got 'skip'$"
    ):
        HedgedTransport(other_origins="skip", metrics=False)  # type: ignore[arg-type]


def test_single_address_service_says_where_its_backups_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A service with one address is accepted, and an info line says that its backups go
    to it over another connection."""
    caplog.set_level(logging.INFO, logger="hedgeclient")
    HedgedTransport(replicas={"http://solo": ["http://10.0.0.9:80"]}, metrics=False)
    assert [r.getMessage() for r in caplog.records] == [
        "hedgeclient: replicas['http://solo'] lists one address: its backups go to it over "
        "another connection (docs/replicas.md, 'One address')"
    ]


async def test_mistyped_origin_names_the_configured_ones() -> None:
    """``base_url`` "http://catalogue" against replicas for "http://catalog": the DNS
    error carries a note naming the configured logical origins."""

    def handler(request: httpx.Request) -> httpx.Response:
        msg = "[Errno -2] Name or service not known"
        raise httpx.ConnectError(msg, request=request)

    transport = HedgedTransport(httpx.MockTransport(handler), replicas=REPLICAS, metrics=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://catalogue") as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get("/items/1")
    notes = getattr(caught.value, "__notes__", [])
    if hasattr(caught.value, "add_note"):  # Python 3.11+
        assert notes == [
            "hedgeclient: 'http://catalogue' is not one of the logical origins in "
            "replicas= ('http://catalog'); it was sent unchanged"
        ]
    await anyio.lowlevel.checkpoint()


async def test_a_request_sent_once_to_its_own_origin_is_not_copied() -> None:
    """With no replicas (an origin hedged against itself, a load balancer's), a POST is
    sent once and unchanged: the inner transport gets the caller's own request, as plain
    httpx sends it; a GET, which may be sent twice, gets its attempt's copy."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    transport = HedgedTransport(httpx.MockTransport(handler), metrics=False)
    post = httpx.Request("POST", "http://lb/orders", content=b"{}")
    get = httpx.Request("GET", "http://lb/orders/1")
    for request in (post, get):
        response = await transport.handle_async_request(request)
        await response.aclose()
    await transport.aclose()
    assert seen[0] is post
    assert seen[1] is not get
    assert (seen[1].url, seen[1].headers["hedge-attempt"]) == (get.url, "1")
    assert "hedge-attempt" not in seen[0].headers
