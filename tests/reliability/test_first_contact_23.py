"""What a third new user tripped over, each now refused early or said plainly (issue 23)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import anyio
import httpcore
import httpx
import pytest
import stamina

import hedgeclient
from hedgeclient import (
    DiscoveryFailedError,
    DnsReplicas,
    HedgedTransport,
    HedgeInfo,
    PolledReplicas,
    hedge_info,
)
from hedgeclient._extensions import KNOWN_EXTENSIONS, near_miss
from hedgeclient.testing import FakeNameserver, FakeService, Generation

NOT_SYNC = (
    "HedgedTransport is an async transport (an httpx.AsyncBaseTransport): use it with "
    "httpx.AsyncClient; with httpx.Client use SyncHedgedTransport, which takes the "
    "same arguments"
)


# -- item 6: a sync httpx.Client -------------------------------------------------------


def test_a_sync_client_is_refused_at_with() -> None:
    """``with httpx.Client(transport=HedgedTransport())`` raises a TypeError saying to
    use httpx.AsyncClient, not an AttributeError about ``__enter__``."""
    client = httpx.Client(transport=HedgedTransport(metrics=False))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"), client:
        pytest.fail("the body of `with client:` ran")


def test_a_sync_client_is_refused_at_its_first_request_and_close() -> None:
    """Without ``with``, the first request and ``close()`` raise the same TypeError,
    before anything is sent; mounts go the same way."""
    transport = HedgedTransport(metrics=False)
    client = httpx.Client(transport=transport)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        client.get("http://127.0.0.1:9/")
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        client.close()
    mounted = httpx.Client(mounts={"http://": transport})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        mounted.get("http://127.0.0.1:9/")


# -- item 7: refresh_replicas() fails early ---------------------------------------------


@pytest.mark.anyio
async def test_refresh_replicas_raises_naming_each_failing_origin() -> None:
    """Against a real DNS server (FakeNameserver), a name that does not exist makes
    ``refresh_replicas()`` raise DiscoveryFailedError naming that origin, its source
    and why, while the name that resolves gets its set."""
    async with FakeNameserver({"api.test": ["127.0.0.2"]}) as server:
        good = DnsReplicas(nameserver=server.nameserver)
        bad = DnsReplicas(nameserver=server.nameserver)
        transport = HedgedTransport(
            replicas={"http://api.test:8080": good, "http://nothere.test:8080": bad},
            metrics=False,
        )
        message = (
            "hedgeclient: refreshing the replicas failed for 1 of 2 discovered service(s): "
            f"'http://nothere.test:8080' (DnsReplicas('nothere.test', family='any', "
            f"nameserver='{server.nameserver}')): nothere.test does not exist (NXDOMAIN); "
            "it has no replica yet"
        )
        with pytest.raises(DiscoveryFailedError, match=rf"^{re.escape(message)}$") as raised:
            await transport.refresh_replicas()
        assert raised.value.failures == {
            "http://nothere.test:8080": "nothere.test does not exist (NXDOMAIN)"
        }
        stats = transport.replica_statistics()
        assert stats["http://api.test:8080"].replicas == ("http://127.0.0.2:8080",)
        assert stats["http://nothere.test:8080"].replicas == ()
        server.set_records({})  # now api.test fails too, with a set to keep
        with pytest.raises(DiscoveryFailedError, match=r"it keeps its last 1 replica\(s\)"):
            await transport.refresh_replicas()
        assert transport.replica_statistics()["http://api.test:8080"].replicas == (
            "http://127.0.0.2:8080",
        )
        await transport.aclose()


@pytest.mark.anyio
async def test_refresh_replicas_is_quiet_when_every_set_resolves() -> None:
    """A transport whose discovered services all resolve, or that has only static
    lists, returns from ``refresh_replicas()`` without an error."""
    async with FakeNameserver({"api.test": ["127.0.0.2"]}) as server:
        source = DnsReplicas(nameserver=server.nameserver)
        transport = HedgedTransport(replicas={"http://api.test:8080": source}, metrics=False)
        assert await transport.refresh_replicas() is None
        await transport.aclose()
    static = HedgedTransport(replicas={"http://s": ["http://a", "http://b"]}, metrics=False)
    assert await static.refresh_replicas() is None
    await static.aclose()


# -- item 8: https:// to http:// replicas ----------------------------------------------


def test_an_https_origin_with_an_http_replica_is_refused_at_construction() -> None:
    """``{"https://catalog": [..., "http://..."]}`` would send what the caller addressed
    to https:// in plaintext: refused, naming the origin and the replica."""
    message = (
        "`replicas['https://catalog']` maps an https:// origin to the http:// replica "
        "'http://10.0.0.8:8080': its requests would travel in plaintext. List https:// "
        "replicas, or pass allow_plaintext=True if TLS ends before the replicas (a "
        "sidecar, a mesh)"
    )
    replicas = {"https://catalog": ["https://10.0.0.7:8443", "http://10.0.0.8:8080"]}
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        HedgedTransport(replicas=replicas, metrics=False)
    with pytest.raises(TypeError, match=r"^`allow_plaintext` must be a bool, got 'yes'$"):
        HedgedTransport(replicas=replicas, metrics=False, allow_plaintext="yes")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_allow_plaintext_sends_an_https_origin_to_http_replicas() -> None:
    """With ``allow_plaintext=True`` the same mapping is taken, and a request to
    ``https://catalog`` is answered by a plain-HTTP replica on 127.0.0.1."""
    async with FakeService(replicas=2) as service:
        transport = HedgedTransport(
            replicas={"https://catalog": service.origins}, allow_plaintext=True, metrics=False
        )
        async with httpx.AsyncClient(transport=transport, base_url="https://catalog") as client:
            response = await client.get("/items/42")
        assert response.status_code == 200
        info = hedge_info(response)
        assert info is not None
        assert info.replica in service.origins


@pytest.mark.anyio
async def test_a_discovered_http_replica_of_an_https_origin_is_refused() -> None:
    """A source that gives an https:// service an http:// replica: the set is refused
    as ``invalid`` (the service keeps its last good set), and ``refresh_replicas()``
    says why."""
    answers: list[list[str]] = [["https://10.0.0.7:8443"], ["http://10.0.0.8:8080"]]

    async def fetch() -> list[str]:
        return answers.pop(0)

    transport = HedgedTransport(replicas={"https://catalog": PolledReplicas(fetch)}, metrics=False)
    await transport.refresh_replicas()
    message = (
        "the http:// replica 'http://10.0.0.8:8080' for the https:// origin "
        "'https://catalog' would carry its requests in plaintext (pass "
        "allow_plaintext=True if TLS ends before the replicas)"
    )
    with pytest.raises(DiscoveryFailedError) as raised:
        await transport.refresh_replicas()
    assert raised.value.failures == {"https://catalog": message}
    stats = transport.replica_statistics()["https://catalog"]
    assert stats.replicas == ("https://10.0.0.7:8443",)
    assert stats.errors["invalid"] == 1
    await transport.aclose()


# -- item 12: a typed accessor for extensions["hedge"] ---------------------------------


@pytest.mark.anyio
async def test_hedge_info_reads_the_race_and_none_for_a_pass_through() -> None:
    """``hedge_info`` returns the response's HedgeInfo for a configured service, and
    ``None`` for an origin passed through unchanged."""
    async with FakeService(replicas=3) as service:
        primary, *others = service.origins
        transport = HedgedTransport(  # no backup, however slow a loaded machine answers
            replicas={"http://catalog": others}, max_hedges=0, metrics=False
        )
        async with httpx.AsyncClient(transport=transport) as client:
            hedged = await client.get("http://catalog/items/42")
            passed = await client.get(f"{primary}/items/42")
    info = hedge_info(hedged)
    assert isinstance(info, HedgeInfo)
    assert info is hedged.extensions["hedge"]
    assert (info.attempt, info.attempts) == (1, 1)
    assert info.replica in others
    assert passed.status_code == 200
    assert hedge_info(passed) is None


def test_hedge_info_refuses_what_is_not_a_response_or_not_ours() -> None:
    """A non-response, or another library's value under ``extensions["hedge"]``, is a
    TypeError naming it, never a silent ``None``."""
    with pytest.raises(TypeError, match=r"^`response` must be an httpx.Response, got 'x'$"):
        hedge_info("x")  # type: ignore[arg-type]
    foreign = httpx.Response(200, extensions={"hedge": {"attempt": 1}})
    with pytest.raises(
        TypeError,
        match=r"^`response.extensions\['hedge'\]` must be a HedgeInfo or absent, "
        r"got \{'attempt': 1\}$",
    ):
        hedge_info(foreign)


# -- item 13: a misspelt extension key ---------------------------------------------------


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("hedged", "hedge"),
        ("Hedge", "hedge"),
        ("hedging", "hedge"),
        ("hegde", "hedge"),
        ("hedge-decide-on", "hedge_decide_on"),
        ("hedge_decideon", "hedge_decide_on"),
        ("decide_on", "hedge_decide_on"),
        ("ties", "tie"),
        ("TIE", "tie"),
        ("hedge_delay", ""),
    ],
)
def test_a_near_miss_names_the_key_meant(key: str, meant: str) -> None:
    """A key one slip from ours (case, separator, a letter, an inflection) or in our
    ``hedg`` namespace is a near miss, with the key meant when one is close."""
    assert near_miss(key) == meant


@pytest.mark.parametrize(
    "key", ["timeout", "trace", "sni_hostname", "time", "tip", "tier", "edge", "retry", "x"]
)
def test_other_keys_are_none_of_our_business(key: str) -> None:
    """httpx's keys and words near our short ``tie`` are not near misses."""
    assert near_miss(key) is None


@pytest.mark.anyio
async def test_a_misspelt_hedge_key_is_refused_before_anything_is_sent() -> None:
    """``extensions={"hedged": False}`` on a GET raises a ValueError saying to write
    ``"hedge"``, and no replica sees the request; httpx's and other libraries' keys
    pass."""
    message = (
        "`extensions['hedged']` is not an extension hedgeclient reads: did you mean "
        "'hedge'? (hedgeclient reads 'hedge', 'hedge_decide_on', 'tie'; other keys pass "
        "untouched)"
    )
    async with FakeService(replicas=2) as service:
        transport = HedgedTransport(replicas={"http://catalog": service.origins}, metrics=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:
            with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
                await client.get("/reports/daily", extensions={"hedged": False})
            assert service.stats().received == 0
            seen: list[str] = []

            async def trace(event: str, info: object) -> None:
                seen.append(event)

            others = {"trace": trace, "tier": "gold", "my_library": 1, "hedge": False}
            response = await client.get("/reports/daily", extensions=others)
        assert response.status_code == 200
        assert "http11.send_request_headers.started" in seen
        assert service.stats().received == 1


# -- item 11: HTTP/2 to http:// replicas -------------------------------------------------

HTTP11_WARNING = (
    "hedgeclient: the inner transport has http2=True beside http1=True, so it speaks "
    "HTTP/1.1 to the http:// replicas of 'http://catalog' (HTTP/2 without TLS needs "
    "prior knowledge: httpx.AsyncHTTPTransport(http1=False, http2=True); "
    "docs/quickstart.md, 'HTTP/2')"
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_http2_beside_http1_towards_http_replicas_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An inner ``AsyncHTTPTransport(http2=True)`` with http:// replicas logs one
    warning naming the service and the fix; ``http1=False``, https:// replicas and
    the default transport log none."""
    caplog.set_level(logging.INFO, logger="hedgeclient")
    plain = {"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]}
    tls = {"https://catalog": ["https://10.0.0.7:8443", "https://10.0.0.8:8443"]}
    HedgedTransport(httpx.AsyncHTTPTransport(http2=True), replicas=plain, metrics=False)
    assert _warnings(caplog) == [HTTP11_WARNING]
    caplog.clear()
    HedgedTransport(
        httpx.AsyncHTTPTransport(http1=False, http2=True), replicas=plain, metrics=False
    )
    HedgedTransport(httpx.AsyncHTTPTransport(http2=True), replicas=tls, metrics=False)
    HedgedTransport(replicas=plain, metrics=False)
    assert _warnings(caplog) == []


@pytest.mark.anyio
async def test_prior_knowledge_speaks_http2_to_h2c_replicas() -> None:
    """Against h2c replicas on 127.0.0.1, ``http2=True`` alone answers over HTTP/1.1
    and ``http1=False, http2=True`` over HTTP/2, hedged alike."""
    versions = []
    async with FakeService(replicas=2, http2=True) as service:
        for inner in (
            httpx.AsyncHTTPTransport(http2=True),
            httpx.AsyncHTTPTransport(http1=False, http2=True),
        ):
            transport = HedgedTransport(
                inner, replicas={"http://catalog": service.origins}, metrics=False
            )
            async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as c:
                response = await c.get("/items/42")
            assert hedge_info(response) is not None
            versions.append(response.http_version)
    assert versions == ["HTTP/1.1", "HTTP/2"]


# -- item 18: closing the client mid-body ------------------------------------------------

TRANSPORT_CLOSED = (
    "the HedgedTransport was closed while the response body was being read "
    "(client.aclose(), or the end of `async with client`), which closed its connection; "
    "read the body before closing the client"
)


@pytest.mark.anyio
async def test_a_body_read_after_the_client_closed_says_so() -> None:
    """Closing the client between two chunks of a streamed body, then reading on: an
    ``httpx.ReadError`` whose message says the transport was closed (it was empty on
    asyncio), with httpcore's error as its cause."""
    async with FakeService(replicas=2) as service:
        transport = HedgedTransport(replicas={"http://catalog": service.origins}, metrics=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://catalog")
        async with client.stream("GET", "/large", params={"bytes": 50_000_000}) as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__()
            await client.aclose()
            with pytest.raises(httpx.ReadError, match=rf"^{re.escape(TRANSPORT_CLOSED)}$") as e:
                async for _ in chunks:
                    pass
    assert isinstance(e.value.__cause__, httpcore.ReadError)


@pytest.mark.anyio
async def test_a_body_read_waiting_when_another_task_closes_says_so() -> None:
    """A task waiting for the next token of a slow stream when another task closes the
    client gets the same message."""
    slow = Generation(tokens_per_second=5, tokens=100)  # a token every 0.2 s
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with FakeService(replicas=2, generation=slow) as service:
        transport = HedgedTransport(replicas={"http://llm": service.origins}, metrics=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://llm")
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.aclose)  # while the reader waits for a token
                with pytest.raises(httpx.ReadError, match=rf"^{re.escape(TRANSPORT_CLOSED)}$"):
                    async for _ in chunks:
                        pass


@pytest.mark.anyio
async def test_a_body_read_after_the_inner_transport_closed_says_this_side_closed() -> None:
    """The inner transport closed under a streamed body (not the HedgedTransport): the
    message says the connection was closed on this side."""
    message = "the connection was closed on this side while the response body was being read"
    async with FakeService(replicas=2) as service:
        transport = HedgedTransport(replicas={"http://catalog": service.origins}, metrics=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://catalog")
        async with client.stream("GET", "/large", params={"bytes": 50_000_000}) as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__()
            await transport.inner.aclose()
            with pytest.raises(httpx.ReadError, match=rf"^{re.escape(message)}$"):
                async for _ in chunks:
                    pass
        await client.aclose()


# -- item 20: retries around hedging multiply --------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("tries", "max_hedges"), [(1, 1), (3, 1), (3, 0), (2, 2)])
async def test_retries_around_hedging_multiply(tries: int, max_hedges: int) -> None:
    """stamina retrying a hedged GET against replicas that all answer 503: each try
    is a race of 1 + max_hedges attempts, so the replicas see tries x (1 + max_hedges)
    requests (6 for stamina's 3 tries and one backup)."""
    retry = stamina.retry(
        on=httpx.HTTPStatusError, attempts=tries, wait_initial=0.001, wait_jitter=0
    )
    async with FakeService(replicas=3) as service:
        transport = HedgedTransport(
            replicas={"http://catalog": service.origins}, max_hedges=max_hedges, metrics=False
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:

            @retry
            async def get_item() -> httpx.Response:
                return (await client.get("/status/503")).raise_for_status()

            with pytest.raises(httpx.HTTPStatusError) as raised:
                await get_item()
        assert raised.value.response.status_code == 503
        assert service.stats().received == tries * (1 + max_hedges)


def test_every_extension_the_code_reads_is_known() -> None:
    """Each request extension key the package reads is one of ours or httpx's, so a
    key added later is never refused as a near miss of itself."""
    package = Path(hedgeclient.__file__).parent
    pattern = re.compile(
        r"""extensions(?:\.get\(|\[)\s*["']([A-Za-z_]+)["']|_EXTENSION = ["'](\w+)["']"""
    )
    read = {
        key
        for path in [*package.glob("*.py"), *package.glob("_*/*.py")]  # the core's folders
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
        for key in match.groups()
        if key
    }
    assert {"hedge", "hedge_decide_on", "tie", "timeout", "trace"} <= read
    assert read <= KNOWN_EXTENSIONS
