"""SrvReplicas with targets that come and go: FakeNameserver answers the targets'
A records, and the SRV answer is scripted (FakeNameserver serves A/AAAA only).

Real clock, loopback UDP: outcomes only, no timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dns.rrset
import httpx
import pytest

from hedgeclient import HedgedTransport, SrvReplicas
from hedgeclient.testing import FakeNameserver

pytestmark = pytest.mark.anyio

SRV = "_http._tcp.svc.test"
PORT = 18431


class _Answer:
    """What dnspython's resolver returns, as far as SrvReplicas reads it."""

    def __init__(self, rrset: Any) -> None:
        self.rrset = rrset


@pytest.fixture
def srv_records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SRV records ("priority weight port target") the SRV name answers; other
    queries go to the nameserver."""
    records: list[str] = []
    real = SrvReplicas._query

    async def query(self: SrvReplicas, name: str, rdtype: str, *, missing_ok: bool) -> Any:
        if rdtype != "SRV":
            return await real(self, name, rdtype, missing_ok=missing_ok)
        return _Answer(dns.rrset.from_text_list(f"{SRV}.", 5, "IN", "SRV", records))

    monkeypatch.setattr(SrvReplicas, "_query", query)
    return records


def targets(*names: str, priority: Sequence[int] = ()) -> list[str]:
    return [f"{priority[i] if priority else 0} 1 {PORT} {name}." for i, name in enumerate(names)]


async def test_a_target_that_does_not_resolve_is_skipped(srv_records: list[str]) -> None:
    """Targets a, nothere (NXDOMAIN) and b: the replicas are a's and b's addresses, and
    refresh_replicas raises no failure."""
    srv_records += targets("a.svc.test", "nothere.svc.test", "b.svc.test")
    records = {"a.svc.test": ["127.0.0.2"], "b.svc.test": ["127.0.0.3"]}
    with FakeNameserver(records) as server:
        source = SrvReplicas(SRV, nameserver=server.nameserver)
        transport = HedgedTransport(replicas={"http://svc": source}, metrics=False)
        async with transport:
            await transport.refresh_replicas()
        stats = transport.replica_statistics()["http://svc"]
    assert stats.last_error is None
    assert stats.replicas == (f"http://127.0.0.2:{PORT}", f"http://127.0.0.3:{PORT}")


async def test_the_next_priority_is_used_when_no_lower_target_resolves(
    srv_records: list[str],
) -> None:
    """Priority 0's only target does not resolve: priority 1's target is used."""
    srv_records += targets("gone.svc.test", "b.svc.test", priority=[0, 1])
    with FakeNameserver({"b.svc.test": ["127.0.0.3"]}) as server:
        source = SrvReplicas(SRV, nameserver=server.nameserver)
        replicas, _ = await source.resolve(("http", "svc", 80))
    assert [r.origin for r in replicas] == [f"http://127.0.0.3:{PORT}"]


async def test_no_target_resolving_fails_naming_the_targets(srv_records: list[str]) -> None:
    """No target resolves: the request fails with httpx.ConnectError naming each one,
    counted as not_found."""
    srv_records += targets("x.svc.test", "y.svc.test")
    with FakeNameserver({}) as server:
        source = SrvReplicas(SRV, nameserver=server.nameserver)
        transport = HedgedTransport(replicas={"http://svc": source}, metrics=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as http:
            with pytest.raises(
                httpx.ConnectError,
                match=r": _http\._tcp\.svc\.test: no SRV target resolves \("
                r"x\.svc\.test\. does not exist \(NXDOMAIN\); "
                r"y\.svc\.test\. does not exist \(NXDOMAIN\)\)$",
            ):
                await http.get("/")
    assert transport.replica_statistics()["http://svc"].errors["not_found"] == 1
