"""``DnsReplicas(family="any")`` when one address family fails: the other one is used.

A nameserver that answers A queries and refuses AAAA ones (dnsmasq without ``--local``
does so for a name its hosts file gives only A records) must not cost the replicas it
gave (issue 23: every request failed with ``ConnectError``). The failed family is
logged and counted (``DiscoveryStatistics.family_errors`` and
``hedgeclient_discovery_family_errors_total``). Real DNS servers on 127.0.0.1:
``FakeNameserver(refuse=...)``, and a real dnsmasq (the ``dnsmasq`` marker). Real clock:
outcomes, not timings.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from hedgeclient import DiscoveryFailedError, DnsReplicas, HedgedTransport, SrvReplicas
from hedgeclient.testing import FakeNameserver, FakeService

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NAME = "api.hedge.test"


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_refused_aaaa_keeps_the_a_records(caplog: pytest.LogCaptureFixture) -> None:
    """A nameserver refusing AAAA: the A records are the replicas, every request is
    answered, and the refused family is logged once as a warning and counted per
    refresh; no refresh counts as failed."""
    caplog.set_level(logging.DEBUG, logger="hedgeclient")
    registry = CollectorRegistry()
    async with (
        FakeService(replicas=2, own_address=True) as svc,
        FakeNameserver({NAME: svc.addresses}, refuse=("AAAA",)) as server,
    ):
        logical = f"http://{NAME}:{svc.port}"
        hedged = HedgedTransport(
            replicas={logical: DnsReplicas(nameserver=server.nameserver)},
            metrics=registry,
            name="families",
        )
        async with httpx.AsyncClient(transport=hedged, base_url=logical) as http:
            statuses = [(await http.get(f"/{i}")).status_code for i in range(20)]
            await hedged.refresh_replicas()  # raises DiscoveryFailedError on a failure
            stats = hedged.replica_statistics()[logical]
        origins = tuple(sorted(svc.origins))
    assert statuses == [200] * 20
    assert stats.replicas == origins
    assert stats.family_errors == {"ipv4": 0, "ipv6": 2}  # the first refresh, then ours
    assert sum(stats.errors.values()) == 0
    assert stats.last_error is None
    labels = {"client": "families", "service": logical}
    family_errors = "hedgeclient_discovery_family_errors_total"
    assert registry.get_sample_value(family_errors, {**labels, "family": "ipv6"}) == 2
    assert registry.get_sample_value(family_errors, {**labels, "family": "ipv4"}) == 0
    # Discovery's own (a busy machine may add the late-loop warning, which is not its).
    warnings = [w for w in _messages(caplog, logging.WARNING) if "resolving the replicas" in w]
    # One warning for the 1st and one for the 2nd refused refresh (then 4th, 8th, ...).
    assert len(warnings) == 2
    assert warnings[0].startswith(
        f"hedgeclient: resolving the replicas of {logical}: the AAAA query failed "
        f"(server_error: {NAME} AAAA: "
    )
    assert warnings[0].endswith("; 1 time(s) so far); using the 2 address(es) of the other family")


async def test_both_families_failing_is_a_failed_refresh() -> None:
    """With A and AAAA both refused there is no address: the refresh fails as before,
    counted as a server error, and no family is counted as left out."""
    async with FakeNameserver({NAME: ["127.0.0.2"]}, refuse=("A", "AAAA")) as server:
        logical = f"http://{NAME}:8080"
        hedged = HedgedTransport(
            replicas={logical: DnsReplicas(nameserver=server.nameserver)}, metrics=False
        )
        with pytest.raises(DiscoveryFailedError) as failed:
            await hedged.refresh_replicas()
        stats = hedged.replica_statistics()[logical]
        await hedged.aclose()
    assert list(failed.value.failures) == [logical]
    assert failed.value.failures[logical].startswith(f"{NAME} A: ")  # the A failure
    assert stats.errors["server_error"] == 1
    assert stats.family_errors == {"ipv4": 0, "ipv6": 0}
    assert stats.replicas == ()


async def test_one_family_asked_for_fails_alone() -> None:
    """``family="ipv6"`` asks only AAAA: refused, the refresh fails (the A records are
    not its business)."""
    async with FakeNameserver({NAME: ["127.0.0.2"]}, refuse=("AAAA",)) as server:
        logical = f"http://{NAME}:8080"
        source = DnsReplicas(nameserver=server.nameserver, family="ipv6")
        hedged = HedgedTransport(replicas={logical: source}, metrics=False)
        with pytest.raises(DiscoveryFailedError, match=r"AAAA"):
            await hedged.refresh_replicas()
        stats = hedged.replica_statistics()[logical]
        await hedged.aclose()
    assert stats.errors["server_error"] == 1
    assert stats.family_errors == {"ipv4": 0, "ipv6": 0}


@pytest.mark.dnsmasq
async def test_dnsmasq_without_local_refuses_aaaa_and_requests_go_on(
    dns_server_without_local: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Against a real dnsmasq without ``--local`` (it answers REFUSED to the AAAA query
    of a name its hosts file gives only A records), the default ``family="any"``
    discovers the A records and every request is answered."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    server = dns_server_without_local
    async with FakeService(replicas=3, own_address=True) as svc:
        server.set_hosts({NAME: svc.addresses})
        with pytest.raises(Exception, match=r"REFUSED"):
            server.query(NAME, "AAAA")  # the premise: this dnsmasq refuses AAAA
        logical = f"http://{NAME}:{svc.port}"
        hedged = HedgedTransport(
            replicas={logical: DnsReplicas(nameserver=server.nameserver)}, metrics=False
        )
        async with httpx.AsyncClient(transport=hedged, base_url=logical) as http:
            replies = [(await http.get(f"/{i}")).json()["replica"] for i in range(30)]
        stats = hedged.replica_statistics()[logical]
        origins = tuple(sorted(svc.origins))
    assert sorted(set(replies)) == [0, 1, 2]
    assert stats.replicas == origins
    assert stats.family_errors["ipv6"] >= 1  # one per refresh: 1 s TTL, so maybe more
    assert stats.family_errors["ipv4"] == 0
    assert sum(stats.errors.values()) == 0
    assert any("the AAAA query failed (server_error" in m for m in _messages(caplog, 30))


@pytest.mark.dnsmasq
async def test_srv_targets_keep_the_family_that_resolved(dns_server_without_local: Any) -> None:
    """SRV discovery against the same dnsmasq: each target's AAAA query is refused, its
    A records are its replicas, and the refused family is counted once per target."""
    server = dns_server_without_local
    async with FakeService(replicas=2, own_address=True) as svc:
        a, b = svc.addresses
        server.set_hosts({f"a.{NAME}": [a], f"b.{NAME}": [b]})
        srv = f"_http._tcp.{NAME}"
        server.set_srv([(srv, f"a.{NAME}", svc.port, 0, 1), (srv, f"b.{NAME}", svc.port, 0, 1)])
        source = SrvReplicas(srv, nameserver=server.nameserver)
        hedged = HedgedTransport(replicas={"http://search": source}, metrics=False)
        await hedged.refresh_replicas()  # raises DiscoveryFailedError on a failure
        stats = hedged.replica_statistics()["http://search"]
        await hedged.aclose()
        origins = tuple(sorted(svc.origins))
    assert stats.replicas == origins
    assert stats.family_errors == {"ipv4": 0, "ipv6": 2}
    assert sum(stats.errors.values()) == 0
