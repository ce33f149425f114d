"""``FakeNameserver``: A/AAAA answers from a table, changed at run time, on 127.0.0.1."""

from __future__ import annotations

import socket
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from hedgeclient import DnsReplicas, HedgedTransport
from hedgeclient.testing import FakeNameserver


def ask(server: FakeNameserver, name: str, rdtype: str = "A") -> Any:
    """One UDP query to ``server`` (dnspython, 2 s at most)."""
    query = dns.message.make_query(name, rdtype)
    return dns.query.udp(query, "127.0.0.1", port=server.port, timeout=2.0)


def test_answers_from_its_table() -> None:
    """A and AAAA answers by family with the TTL set; a known name without that family
    answers nothing (NOERROR); an unknown name is NXDOMAIN; names ignore case."""
    table = {"api.test": ["127.0.0.2", "127.0.0.3", "::1"]}
    with FakeNameserver(table, ttl=7) as server:
        a = ask(server, "API.test.")
        assert a.rcode() == dns.rcode.NOERROR
        assert sorted(r.address for r in a.answer[0]) == ["127.0.0.2", "127.0.0.3"]
        assert a.answer[0].ttl == 7
        aaaa = ask(server, "api.test", "AAAA")
        assert [r.address for r in aaaa.answer[0]] == ["::1"]
        assert ask(server, "api.test", "TXT").answer == []
        assert ask(server, "other.test").rcode() == dns.rcode.NXDOMAIN
        assert server.queries == 4
        assert server.nameserver == f"127.0.0.1:{server.port}"


def test_refuse_answers_refused_for_those_types() -> None:
    """``refuse=("AAAA",)``: AAAA queries are REFUSED, for known and unknown names
    alike, as dnsmasq without ``--local`` does; A queries are answered as ever."""
    with FakeNameserver({"api.test": ["127.0.0.2", "::1"]}, refuse=("AAAA",)) as server:
        assert ask(server, "api.test", "AAAA").rcode() == dns.rcode.REFUSED
        assert ask(server, "other.test", "AAAA").rcode() == dns.rcode.REFUSED
        a = ask(server, "api.test")
        assert a.rcode() == dns.rcode.NOERROR
        assert [r.address for r in a.answer[0]] == ["127.0.0.2"]
        assert server.queries == 3


def test_set_records_and_garbage() -> None:
    """``set_records`` replaces the table for the next query; a datagram that is not
    DNS is dropped and the server goes on answering."""
    with FakeNameserver({"api.test": ["127.0.0.2"]}) as server:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            raw.sendto(b"not dns", ("127.0.0.1", server.port))
        server.set_records({"api.test": ["127.0.0.3", "127.0.0.4"], "new.test": []})
        assert sorted(r.address for r in ask(server, "api.test").answer[0]) == [
            "127.0.0.3",
            "127.0.0.4",
        ]
        assert ask(server, "new.test").answer == []
        assert server.records() == {"api.test.": ["127.0.0.3", "127.0.0.4"], "new.test.": []}
        assert server.queries == 2


@pytest.mark.anyio
async def test_dns_replicas_follow_it() -> None:
    """``DnsReplicas`` pointed at it gets the table's addresses, and its changes."""
    async with FakeNameserver({"api.test": ["127.0.0.2", "127.0.0.3"]}) as server:
        source = DnsReplicas(nameserver=server.nameserver)
        transport = HedgedTransport(replicas={"http://api.test:8080": source}, metrics=False)
        await transport.refresh_replicas()  # raises if the name does not resolve
        replicas = transport.replica_statistics()["http://api.test:8080"].replicas
        assert replicas == ("http://127.0.0.2:8080", "http://127.0.0.3:8080")
        server.set_records({"api.test": ["127.0.0.4"]})
        await transport.refresh_replicas()
        replicas = transport.replica_statistics()["http://api.test:8080"].replicas
        assert replicas == ("http://127.0.0.4:8080",)
        await transport.aclose()


def test_not_running() -> None:
    """Its port is unknown before the start and after the end."""
    server = FakeNameserver()
    message = "the FakeNameserver is not running: use it as a context manager"
    with pytest.raises(RuntimeError, match=rf"^{message}$"):
        _ = server.nameserver
    with server:
        assert server.port > 0
    with pytest.raises(RuntimeError, match=rf"^{message}$"):
        _ = server.port
    assert repr(server) == "<FakeNameserver stopped, 0 names>"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"records": ["a.test"]}, TypeError,
            "`records` must be a mapping of DNS name to IP addresses, got ['a.test']"),
        ({"records": {1: []}}, TypeError, "`records` keys must be DNS names (str), got 1"),
        ({"records": {"a..test": []}}, ValueError,
            "`records` key must be a DNS name, got 'a..test'"),
        ({"records": {"a.test": "127.0.0.2"}}, TypeError,
            "`records['a.test']` must be a sequence of IP addresses, got '127.0.0.2'"),
        ({"records": {"a.test": ["localhost"]}}, ValueError,
            "`records['a.test']` must hold IP addresses, got 'localhost'"),
        ({"ttl": -1}, ValueError, "`ttl` must be in [0, 86400] seconds, got -1"),
        ({"ttl": 1.5}, TypeError, "`ttl` must be an int in [0, 86400] seconds, got 1.5"),
        ({"port": 70000}, ValueError, "`port` must be in [0, 65535], got 70000"),
        ({"refuse": "AAAA"}, TypeError,
            "`refuse` must be a collection of 'A' and 'AAAA', got 'AAAA'"),
        ({"refuse": ["MX"]}, ValueError, "`refuse` entries must be 'A' or 'AAAA', got 'MX'"),
        ({"refuse": [28]}, TypeError, "`refuse` entries must be 'A' or 'AAAA', got 28"),
    ],
)  # fmt: skip
def test_bad_input(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    """Bad input is refused at construction, naming the parameter and what is allowed."""
    with pytest.raises(error) as raised:
        FakeNameserver(**kwargs)
    assert str(raised.value) == message
