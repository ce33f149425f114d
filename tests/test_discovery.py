"""Replica sources of your own in virtual time: polled functions, watches, bad input.

Replicas are scripted in process (``ScriptedReplicas``) and time is trio's MockClock,
so refresh instants are exact.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AttemptResult,
    DnsReplicas,
    HedgedTransport,
    PolledReplicas,
    Replica,
    SrvReplicas,
    WatchedReplicas,
)
from hedgeclient.testing import ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
A, B, C = "http://a", "http://b", "http://c"


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every async test in this module runs on trio with a fresh MockClock."""
    return virtual_time


class Members:
    """A selector that records replicas_changed and picks the first free replica."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, list[str]]] = []

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        return next((r for r in replicas if r not in exclude), None)

    def attempt_started(self, replica: str) -> None:
        pass

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        pass

    def replicas_changed(self, service: str, replicas: Sequence[Replica]) -> None:
        self.changes.append((service, [r.origin for r in replicas]))


def scripted(source: Any, **kwargs: Any) -> tuple[httpx.AsyncClient, HedgedTransport]:
    """A client for http://svc whose replicas come from ``source``; every replica
    answers in 5 ms."""
    script = ScriptedReplicas({"a": [0.005], "b": [0.005], "c": [0.005]})
    kwargs.setdefault("metrics", False)
    kwargs.setdefault("delay", 0.030)
    transport = HedgedTransport(
        httpx.MockTransport(script.handler), replicas={SERVICE: source}, **kwargs
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE), transport


async def test_a_polled_function_is_asked_again_after_its_interval() -> None:
    """The function is called by the first request, again by the first request after
    its interval, and the new set is used from then on."""
    sets = [[A], [B]]
    calls: list[float] = []

    async def fetch() -> list[str]:
        calls.append(anyio.current_time())
        return sets[min(len(calls), 2) - 1]

    http, transport = scripted(PolledReplicas(fetch, interval=5.0))
    async with http:
        start = anyio.current_time()
        first = await http.get("/")
        await anyio.sleep(4.9)
        still = await http.get("/")
        await anyio.sleep(0.2)
        await http.get("/")  # starts the refresh; answered by the old set
        await anyio.sleep(0.001)
        later = await http.get("/")
    assert [round(t - start, 3) for t in calls] == [0.0, 5.11]  # the first request after 5 s
    assert [r.extensions["hedge"].replica for r in (first, still, later)] == [A, A, B]
    assert transport.replica_statistics()[SERVICE].changes == 2


class Answer(list[SimpleNamespace]):
    """What DnsReplicas reads of a dnspython answer's rrset: its records and TTL."""

    def __init__(self, addresses: list[str], ttl: int) -> None:
        super().__init__(SimpleNamespace(address=a) for a in addresses)
        self.ttl = ttl


async def test_a_dns_name_is_resolved_again_when_its_ttl_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DnsReplicas, its nameserver scripted (TTL 1 s, as in tests/discovery), a request
    every 0.1 s. The first request after the TTL runs out asks again (answered by the
    set it has); the set that comes back is used from the next request: an address
    added at 0.1 gets a primary at 1.1, one removed at 1.3 gets none after 2.0, each
    within TTL + 1 s of its change (issue 16). The dnsmasq versions (tests/discovery)
    assert the order of these events, which a loaded machine keeps."""
    answer = ["10.0.0.1", "10.0.0.2"]
    queries: list[float] = []

    async def query(self: DnsReplicas, name: str, rdtype: str, *, missing_ok: bool) -> Any:
        assert (name, rdtype) == ("svc", "A")
        queries.append(round(anyio.current_time() - start, 3))
        return SimpleNamespace(rrset=Answer(list(answer), ttl=1))

    monkeypatch.setattr(DnsReplicas, "_query", query)

    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(0.005)
        return httpx.Response(200)

    source = DnsReplicas(family="ipv4", nameserver="127.0.0.1:53")
    transport = HedgedTransport(
        httpx.MockTransport(handler), replicas={SERVICE: source}, selector=Members(), metrics=False
    )
    primaries: list[tuple[float, str]] = []
    start = anyio.current_time()
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as http:
        for i in range(26):  # 0.0 .. 2.5
            await anyio.sleep_until(start + i * 0.1)
            if i == 1:
                answer.insert(0, "10.0.0.0")  # first in the set: Members picks it
            if i == 13:
                answer.remove("10.0.0.0")
            sent = round(anyio.current_time() - start, 3)
            response = await http.get("/")
            primaries.append((sent, response.extensions["hedge"].replica))
    assert queries == [0.0, 1.0, 2.0]  # the first requests at or after each TTL's end
    new = "http://10.0.0.0"
    to_new = [t for t, replica in primaries if replica == new]
    assert to_new[0] == 1.1  # added at 0.1, seen by the query at 1.0: <= 0.1 + 2
    assert to_new[-1] == 2.0  # removed at 1.3, seen by the query at 2.0: <= 1.3 + 2
    assert len(to_new) == 10


@pytest.mark.parametrize(
    ("value", "kind", "message"),
    [
        ("http://a", "invalid", "must give an iterable of origin strings or Replica"),
        ([A, 42], "invalid", "must be an origin string like 'http://host:port'"),
        (["ftp://x"], "invalid", "must be an absolute http:// or https:// origin"),
        ([], "empty", "gave no replica"),
    ],
)
async def test_garbage_from_a_source_keeps_the_last_set(
    value: object, kind: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A set that is not a set of replicas is logged and counted; the last good one stays."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    answers: list[object] = [[A, B], value]

    async def fetch() -> object:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    http, transport = scripted(PolledReplicas(fetch, interval=1.0))  # type: ignore[arg-type]
    async with http:
        await http.get("/")
        await anyio.sleep(1.0)
        await http.get("/")  # starts the refresh that gets the garbage
        await anyio.sleep(0.001)
        response = await http.get("/")
    stats = transport.replica_statistics()[SERVICE]
    assert response.status_code == 200
    assert stats.replicas == (A, B)
    assert stats.errors[kind] == 1  # type: ignore[index]
    assert stats.last_error is not None
    assert message in stats.last_error
    assert "keeping the last 2 replica(s)" in caplog.records[-1].getMessage()


async def test_a_source_that_raises_or_hangs_keeps_the_last_set() -> None:
    """An exception is counted as source_error, a call past its timeout as timeout; each
    retry waits twice as long as the one before (1, 2, ... s)."""
    calls: list[float] = []

    async def fetch() -> list[str]:
        calls.append(anyio.current_time())
        if len(calls) == 1:
            return [A, B]
        if len(calls) == 2:
            msg = "config service down"
            raise RuntimeError(msg)
        await anyio.sleep(60)
        return [C]

    http, transport = scripted(PolledReplicas(fetch, interval=1.0, timeout=0.5))
    async with http:
        start = anyio.current_time()
        for _ in range(40):
            assert (await http.get("/")).status_code == 200
            await anyio.sleep(0.1)
    stats = transport.replica_statistics()[SERVICE]
    assert stats.replicas == (A, B)
    assert stats.errors["source_error"] == 1
    assert stats.errors["timeout"] >= 1
    assert stats.last_error is not None
    assert "took over 0.5 s" in stats.last_error
    # Requests every 0.105 s: the first call, the first request after the interval
    # (1.05), the first one 1 s after that failure (2.10); that call times out at 2.60,
    # and the back-off is capped at the interval (1 s): the next request after 3.60.
    assert [round(t - start, 2) for t in calls[:4]] == [0.0, 1.05, 2.1, 3.67]


async def test_the_first_request_fails_when_no_set_comes() -> None:
    """A source that never gives a set: the first request waits its timeout, then fails
    with httpx.ConnectError saying why."""

    async def fetch() -> list[str]:
        msg = "no route to the config service"
        raise OSError(msg)

    http, _ = scripted(PolledReplicas(fetch))
    async with http:
        with pytest.raises(
            httpx.ConnectError,
            match=r"^hedgeclient: no replica known for http://svc \(PolledReplicas\(.*\)\): "
            r".* raised OSError\('no route to the config service'\)$",
        ):
            await http.get("/")


async def test_a_watch_applies_each_set_while_requests_go_on() -> None:
    """An async generator's sets take effect as they come; a removed replica gets no new
    attempt, and the selector hears every change."""

    async def watch() -> AsyncIterator[list[Any]]:
        yield [A, B]
        await anyio.sleep(1.0)
        yield [B, Replica(C, zone="z2")]
        await anyio.sleep(math.inf)

    members = Members()
    http, transport = scripted(watch, selector=members)
    async with http:
        first = await http.get("/")
        await anyio.sleep(1.5)
        second = await http.get("/")
        await transport.aclose()
    assert first.extensions["hedge"].replica == A
    assert second.extensions["hedge"].replica == B
    assert members.changes == [(SERVICE, [A, B]), (SERVICE, [B, C])]
    assert transport.replica_statistics()[SERVICE].replicas == (B, C)


async def test_a_watch_that_fails_is_started_again() -> None:
    """A watch that raises is counted, then iterated afresh after `retry` seconds."""
    runs: list[float] = []

    async def watch() -> AsyncIterator[list[str]]:
        runs.append(anyio.current_time())
        yield [A] if len(runs) == 1 else [B]
        if len(runs) == 1:
            msg = "stream reset"
            raise ConnectionError(msg)
        await anyio.sleep(math.inf)

    http, transport = scripted(WatchedReplicas(watch, retry=2.0))
    async with http:
        start = anyio.current_time()
        await http.get("/")
        await anyio.sleep(2.5)
        response = await http.get("/")
        await transport.aclose()
    assert [round(t - start, 3) for t in runs] == [0.0, 2.0]
    assert response.extensions["hedge"].replica == B
    assert transport.replica_statistics()[SERVICE].errors["source_error"] == 1


def test_static_lists_take_zones_and_weights() -> None:
    """Replica objects in a static list carry zones; the zones mapping fills the rest."""
    transport = HedgedTransport(
        replicas={SERVICE: [Replica(A, zone="z1", weight=3), B]},
        zones={B: "z2", "http://other": "z3"},
        metrics=False,
    )
    stats = transport.replica_statistics()[SERVICE]
    assert stats.source == "static"
    assert stats.replicas == (A, B)


def _sync_generator() -> Iterator[list[str]]:
    yield [A]


async def _async_generator() -> AsyncIterator[list[str]]:
    yield [A]


BAD = [
    (lambda: DnsReplicas("bad..name"), ValueError, r"^`name` must be a DNS name: "),
    (lambda: DnsReplicas("x" * 64), ValueError, r"^`name` must be a DNS name: "),
    (lambda: DnsReplicas(42), TypeError, r"^`name` must be a DNS name \(str\), got 42$"),  # type: ignore[arg-type]
    (
        lambda: DnsReplicas("a.test", min_ttl=10, max_ttl=5),
        ValueError,
        r"^`max_ttl` \(5\) must be >= `min_ttl` \(10\)$",
    ),
    (
        lambda: DnsReplicas("a.test", min_ttl=0),
        ValueError,
        r"^`min_ttl` must be a number of seconds in \(0, 3600\], got 0$",
    ),
    (
        lambda: DnsReplicas("a.test", nameserver="dns.example"),
        ValueError,
        r"^`nameserver` must be an IP address with an optional port",
    ),
    (
        lambda: DnsReplicas("a.test", nameserver="127.0.0.1:99999"),
        ValueError,
        r"^`nameserver` must be an IP address with an optional port",
    ),
    (
        lambda: DnsReplicas("a.test", port=0),
        ValueError,
        r"^`port` must be in \[1, 65535\] or None, got 0$",
    ),
    (
        lambda: DnsReplicas("a.test", family="ipv5"),  # type: ignore[arg-type]
        ValueError,
        r"^`family` must be 'any', 'ipv4' or 'ipv6', got 'ipv5'$",
    ),
    (
        lambda: DnsReplicas("127.0.0.1"),
        ValueError,
        r"^`name` must be a DNS name, got the IP address '127\.0\.0\.1'$",
    ),
    (
        lambda: HedgedTransport(replicas={"http://[::1]:8080": DnsReplicas()}, metrics=False),
        ValueError,
        r"^`replicas\['http://\[::1\]:8080'\]` is a DnsReplicas\(\) that takes its name "
        r"from the origin, whose host '::1' is an IP address, not a DNS name: ",
    ),
    (
        lambda: HedgedTransport(replicas={SERVICE: _sync_generator}, metrics=False),
        TypeError,
        r"^`replicas\['http://svc'\]` must be an async callable returning replicas or an "
        r"async generator function, got a generator function <function _sync_generator ",
    ),
    (
        lambda: PolledReplicas(_sync_generator),  # type: ignore[arg-type]
        TypeError,
        r"^`fetch` must be an async callable returning replicas or an async generator "
        r"function, got a generator function ",
    ),
    (
        lambda: PolledReplicas(_async_generator),  # type: ignore[arg-type]
        TypeError,
        r"^`fetch` must be an async callable returning replicas, got an async generator "
        r"function .*: wrap it in WatchedReplicas, or pass it bare$",
    ),
    (
        lambda: SrvReplicas(None),  # type: ignore[arg-type]
        TypeError,
        r"^`name` must be the SRV name \(str\), got None$",
    ),
    (
        lambda: PolledReplicas(42),  # type: ignore[arg-type]
        TypeError,
        r"^`fetch` must be an async callable returning replicas, got 42$",
    ),
    (
        lambda: PolledReplicas(list, interval=0),
        ValueError,
        r"^`interval` must be a number of seconds in \(0, 3600\], got 0$",
    ),
    (
        lambda: WatchedReplicas([A]),  # type: ignore[arg-type]
        TypeError,
        r"^`source` must be an async iterable or an async generator function, got",
    ),
    (
        lambda: HedgedTransport(replicas={SERVICE: 42}, metrics=False),
        TypeError,
        r"^`replicas\['http://svc'\]` must be a list of origins, a DnsReplicas, a SrvReplicas",
    ),
    (
        lambda: HedgedTransport(replicas={SERVICE: [A]}, zones={A: ""}, metrics=False),
        ValueError,
        r"^`zones\['http://a'\]` must be a string of 1 to 128 characters, got ''$",
    ),
    (
        lambda: HedgedTransport(zones=42, metrics=False),  # type: ignore[arg-type]
        TypeError,
        r"^`zones` must be a mapping of replica origin to zone",
    ),
    (
        lambda: HedgedTransport(zone="", metrics=False),
        ValueError,
        r"^`zone` must be a string of 1 to 128 characters or None, got ''$",
    ),
    (
        lambda: HedgedTransport(backup_zone="same", metrics=False),  # type: ignore[arg-type]
        ValueError,
        r"^`backup_zone` must be 'other' or 'any', got 'same'$",
    ),
    (
        lambda: Replica(A, zone=""),
        ValueError,
        r"^`zone` must be a string of 1 to 128 characters, got ''$",
    ),
    (
        lambda: Replica(A, weight=0),
        ValueError,
        r"^`weight` must be in \(0, 65535\], got 0$",
    ),
    (
        lambda: Replica("http://a/path"),
        ValueError,
        r"^`origin` must be an origin \(scheme, host and port only",
    ),
]


@pytest.mark.parametrize(("build", "error", "message"), BAD)
def test_bad_sources_are_refused_at_construction(
    build: Any, error: type[Exception], message: str
) -> None:
    """What can be known at construction raises there, naming the parameter."""
    with pytest.raises(error, match=message):
        build()


async def test_a_watch_whose_first_value_is_invalid_makes_the_first_request_wait() -> None:
    """A watch yields [] and then, 0.5 s later, a good set: the first request skips the
    empty one and is answered once the good set comes (it waits at most `timeout`)."""

    async def watch() -> AsyncIterator[list[str]]:
        yield []
        await anyio.sleep(0.5)
        yield [A]
        await anyio.sleep(math.inf)

    http, transport = scripted(WatchedReplicas(watch, timeout=5))
    async with http:
        start = anyio.current_time()
        response = await http.get("/")
        answered = anyio.current_time() - start
        await transport.aclose()
    assert response.extensions["hedge"].replica == A
    assert round(answered, 3) == 0.505  # the set at 0.5, the replica's 5 ms
    assert transport.replica_statistics()[SERVICE].errors["empty"] == 1


async def test_a_watch_with_no_valid_set_fails_the_first_request_after_its_timeout() -> None:
    """A watch that yields only invalid values: the first request waits `timeout`
    seconds, then fails with httpx.ConnectError saying why."""

    async def watch() -> AsyncIterator[list[str]]:
        while True:
            yield []
            await anyio.sleep(1.0)

    http, transport = scripted(WatchedReplicas(watch, timeout=3))
    async with http:
        start = anyio.current_time()
        with pytest.raises(httpx.ConnectError, match=r"gave no replica$"):
            await http.get("/")
        failed = anyio.current_time() - start
        await transport.aclose()
    assert round(failed, 3) == 3.0


async def test_a_service_that_never_had_a_set_is_asked_again_each_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cold start: a source that fails until t = 7.6 s, a request every 0.2 s. While
    the service has no set, a request finding none asks again at most once a second
    (no exponential back-off): the first success comes at t = 8.0. Of the 8 failures
    in a row, the 1st, 2nd, 4th and 8th are logged as warnings."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    calls: list[float] = []
    start = anyio.current_time()

    async def fetch() -> list[str]:
        calls.append(round(anyio.current_time() - start, 3))
        if anyio.current_time() - start < 7.6:
            msg = "no pod ready"
            raise LookupError(msg)
        return [A]

    http, _ = scripted(PolledReplicas(fetch, interval=30.0))
    first_success = None
    async with http:
        for i in range(60):
            await anyio.sleep_until(start + i * 0.2)
            try:
                await http.get("/")
            except httpx.ConnectError:
                continue
            first_success = round(anyio.current_time() - start, 3)
            break
    assert first_success == 8.005  # asked at 8.0, the replica's 5 ms
    assert calls == [float(s) for s in range(9)]
    warned = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert [m.split("; ")[1] for m in warned] == [
        "1 in a row)",
        "2 in a row)",
        "4 in a row)",
        "8 in a row)",
    ]


async def test_a_plain_function_is_a_polled_source() -> None:
    """A plain (synchronous) function is accepted as documented: its set is used."""

    def fetch() -> list[str]:
        return [B]

    http, _ = scripted(fetch)
    async with http:
        response = await http.get("/")
    assert response.extensions["hedge"].replica == B


def test_localhost_may_take_its_name_from_the_origin() -> None:
    """DnsReplicas() for http://localhost is accepted: localhost is a name."""
    transport = HedgedTransport(replicas={"http://localhost:8080": DnsReplicas()}, metrics=False)
    assert transport.replica_statistics()["http://localhost:8080"].replicas == ()


@pytest.mark.parametrize(
    ("source", "origin", "text"),
    [
        (lambda ns: DnsReplicas(nameserver=ns), "http://api.test:8080",
            "DnsReplicas('api.test', family='any', nameserver='127.0.0.1:5353')"),
        (lambda ns: DnsReplicas("x.test", port=81, family="ipv4"), "http://api.test",
            "DnsReplicas('x.test', port=81, family='ipv4')"),
        (lambda ns: SrvReplicas("_h._tcp.x.test", nameserver=ns), "http://api.test",
            "SrvReplicas('_h._tcp.x.test', family='any', nameserver='127.0.0.1:5353')"),
    ],
)  # fmt: skip
def test_a_dns_source_is_named_by_what_it_resolves(source: Any, origin: str, text: str) -> None:
    """Statistics and messages show the name resolved (the origin's host by default)
    and the nameserver, not `None`."""
    transport = HedgedTransport(replicas={origin: source("127.0.0.1:5353")}, metrics=False)
    assert transport.replica_statistics()[origin].source == text


def test_a_dns_source_repr_says_where_its_default_name_comes_from() -> None:
    """Outside a transport, a DnsReplicas with no name says it takes the origin's host."""
    assert repr(DnsReplicas()) == "DnsReplicas(name=<the origin's host>, family='any')"
