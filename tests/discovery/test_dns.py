"""DNS discovery against a real DNS server (dnsmasq) and replicas on their own addresses.

The fake service binds replica i on 127.0.0.{i + 2}, all on one port, as the pods of
a headless Service; dnsmasq answers ``api.hedge.test`` with some of those addresses,
re-reading its hosts file on SIGHUP, with a 1 s TTL. Real clock: outcomes and bounds,
each tolerance commented.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AttemptResult,
    DnsReplicas,
    HedgedTransport,
    PowerOfTwoChoices,
    RequestRecord,
    SrvReplicas,
)
from hedgeclient.testing import Down, FakeService, ReplicaConfig, large_body_sha256

pytestmark = [pytest.mark.anyio, pytest.mark.dnsmasq, pytest.mark.slow]

NAME = "api.hedge.test"


def transport(
    svc: FakeService, source: Any, records: list[RequestRecord] | None = None, **kwargs: Any
) -> HedgedTransport:
    """A transport for http://api.hedge.test:<port> discovered through ``source``."""
    kwargs.setdefault("metrics", False)
    return HedgedTransport(
        replicas={f"http://{NAME}:{svc.port}": source},
        hooks=[records.append] if records is not None else (),
        **kwargs,
    )


def client(svc: FakeService, hedged: HedgedTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=hedged, base_url=f"http://{NAME}:{svc.port}")


async def test_every_address_of_the_name_is_a_replica(dns_server: Any) -> None:
    """A name with three A records spreads primaries over the three replicas; each
    keeps the logical Host header."""
    async with FakeService(replicas=3, own_address=True) as svc:
        dns_server.set_hosts({NAME: svc.addresses})
        source = DnsReplicas(nameserver=dns_server.nameserver)
        hedged = transport(svc, source, selector=PowerOfTwoChoices())
        async with client(svc, hedged) as http:
            replies = [(await http.get(f"/{i}")).json()["replica"] for i in range(60)]
        stats = hedged.replica_statistics()[f"http://{NAME}:{svc.port}"]
        origins = tuple(sorted(svc.origins))
    assert set(replies) == {0, 1, 2}
    assert stats.replicas == origins
    assert stats.refreshes >= 1
    assert sum(stats.errors.values()) == 0


async def test_srv_records_give_targets_ports_and_weights(dns_server: Any) -> None:
    """SRV records name two targets on the replicas' port, weights 9 and 1: both become
    replicas and the primaries follow the weights."""
    async with FakeService(replicas=2, own_address=True) as svc:
        a, b = svc.addresses
        dns_server.set_hosts({f"a.{NAME}": [a], f"b.{NAME}": [b]})
        srv = f"_http._tcp.{NAME}"
        dns_server.set_srv([(srv, f"a.{NAME}", svc.port, 0, 9), (srv, f"b.{NAME}", svc.port, 0, 1)])
        source = SrvReplicas(srv, nameserver=dns_server.nameserver)
        hedged = transport(svc, source, delay=1.0)
        async with client(svc, hedged) as http:
            replies = Counter([(await http.get(f"/{i}")).json()["replica"] for i in range(200)])
    # One request at a time: each primary is drawn in proportion to weight (0.9). 0.75
    # is about 7 standard errors of 200 draws below it.
    assert replies[0] / 200 > 0.75
    assert replies[1] > 0


async def test_srv_without_targets_keeps_nothing_and_says_why(dns_server: Any) -> None:
    """An SRV name whose only target is "." gives no replica: the request fails with
    httpx.ConnectError saying so, and the failure is counted as empty."""
    dns_server.set_srv([(f"_http._tcp.none.{NAME}", ".", 80, 0, 0)])
    source = SrvReplicas(f"_http._tcp.none.{NAME}", nameserver=dns_server.nameserver)
    hedged = HedgedTransport(replicas={"http://none": source}, metrics=False)
    async with httpx.AsyncClient(transport=hedged, base_url="http://none") as http:
        with pytest.raises(httpx.ConnectError, match=r"every SRV target is '\.'"):
            await http.get("/")
    assert hedged.replica_statistics()["http://none"].errors["empty"] == 1


async def test_an_unresolvable_name_fails_requests_with_a_connect_error(
    dns_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """NXDOMAIN at the first resolution: the request fails with httpx.ConnectError naming
    the service and the cause; the failure is logged and counted."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    source = DnsReplicas(f"missing.{NAME}", port=80, nameserver=dns_server.nameserver)
    hedged = HedgedTransport(replicas={"http://missing": source}, metrics=False)
    async with httpx.AsyncClient(transport=hedged, base_url="http://missing") as http:
        with pytest.raises(httpx.ConnectError, match=r"^hedgeclient: no replica known for "):
            await http.get("/")
        with pytest.raises(httpx.ConnectError, match=r"does not exist \(NXDOMAIN\)$"):
            await http.get("/")  # within the 1 s retry: fails at once with the same cause
    stats = hedged.replica_statistics()["http://missing"]
    assert stats.errors["not_found"] == 1
    assert stats.last_error == f"missing.{NAME} does not exist (NXDOMAIN)"
    assert any("no replica known yet" in r.getMessage() for r in caplog.records)


async def test_a_new_address_gets_primaries_from_the_next_resolution(
    dns_server: Any, counted_dns: Any
) -> None:
    """An address added to the name receives primaries from the first resolution that
    starts once the server answers it (the TTL's: within TTL + 1 s of the change, in
    virtual time in tests/test_discovery.py; a loaded machine moves the instants here,
    not their order)."""
    async with FakeService(replicas=3, own_address=True) as svc:
        dns_server.set_hosts({NAME: svc.addresses[:2]})
        source = counted_dns(nameserver=dns_server.nameserver)
        hedged = transport(svc, source)
        async with client(svc, hedged) as http:
            await http.get("/warm")
            dns_server.set_hosts({NAME: svc.addresses})
            changed = anyio.current_time()
            first = None
            with anyio.fail_after(20.0):  # about a TTL; the bound only stops a hang
                while first is None:
                    if (await http.get("/")).json()["replica"] == 2:
                        first = anyio.current_time()
                    await anyio.sleep(0.01)
        new = svc.origins[2]
    resolved = source.after(changed)[0]
    assert new in resolved[2]  # the first resolution after the change gave it
    assert first >= resolved[1]  # and the primaries came once it had


class LastReplica:
    """A selector that picks the last eligible replica (so a test knows where it goes)."""

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        return next((r for r in reversed(replicas) if r not in exclude), None)

    def attempt_started(self, replica: str) -> None:
        pass

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        pass


async def test_a_removed_address_gets_no_new_attempt(dns_server: Any) -> None:
    """Once its removal is resolved, a replica gets no attempt, its idle pooled
    connection is closed, and the request in flight on it when it left finishes."""
    records: list[RequestRecord] = []
    async with FakeService(replicas=3, own_address=True) as svc:
        dns_server.set_hosts({NAME: svc.addresses})
        source = DnsReplicas(nameserver=dns_server.nameserver)
        hedged = transport(svc, source, records, delay=2.0, selector=LastReplica())
        key = f"http://{NAME}:{svc.port}"
        gone = svc.origins[2]  # the last in order: where LastReplica sends
        size = 4_000_000  # far more than the socket buffers: it stays in flight
        async with client(svc, hedged) as http:
            assert (await http.get("/warm")).extensions["hedge"].replica == gone
            # In flight on the replica that leaves until the checks are done (not for
            # a fixed time: a loaded machine may apply the removal later than that).
            slow_request = http.build_request(
                "GET", f"/large?bytes={size}", extensions={"hedge": False}
            )
            slow = await http.send(slow_request, stream=True)
            try:
                dns_server.set_hosts({NAME: svc.addresses[:2]})
                with anyio.fail_after(20.0):  # about a TTL; the bound only stops a hang
                    while gone in hedged.replica_statistics()[key].replicas:
                        await http.get("/")
                        await anyio.sleep(0.02)
                # Its idle pooled connection (of /warm) is closed as the removal is
                # applied, just after the new set is published; one that was carrying a
                # request then is closed by the first request after it became idle.
                # The one carrying the slow request is in use.
                inner: Any = hedged.inner

                def kept_to(origin: str) -> list[str]:
                    return [c.info() for c in inner._pool.connections if origin in c.info()]

                with anyio.fail_after(20.0):  # a few requests; the bound only stops a hang
                    while len(kept := kept_to(gone)) > 1:
                        await http.get("/")
                        await anyio.sleep(0.01)
                seen = len(records)
                for i in range(40):
                    await http.get(f"/after/{i}")
                after = [a.replica for r in records[seen:] for a in r.attempts]
                body = await slow.aread()
            finally:
                await slow.aclose()
    assert slow.status_code == 200
    assert slow.extensions["hedge"].replica == gone
    assert hashlib.sha256(body).hexdigest() == large_body_sha256(size)
    assert len(after) == 40
    assert gone not in after
    assert len(kept) == 1
    assert "ACTIVE" in kept[0]


async def test_a_dns_outage_keeps_the_last_good_set(
    dns_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With the nameserver gone, requests go on to the last set; each failed refresh is
    logged and counted."""
    caplog.set_level(logging.WARNING, logger="hedgeclient")
    async with FakeService(replicas=2, own_address=True) as svc:
        dns_server.set_hosts({NAME: svc.addresses})
        source = DnsReplicas(nameserver=dns_server.nameserver, timeout=0.3)
        hedged = transport(svc, source)
        key = f"http://{NAME}:{svc.port}"
        async with client(svc, hedged) as http:
            await http.get("/first")
            dns_server.stop()
            statuses = []
            with anyio.fail_after(10.0):
                while sum(hedged.replica_statistics()[key].errors.values()) < 2:
                    statuses.append((await http.get("/")).status_code)
                    await anyio.sleep(0.05)
        stats = hedged.replica_statistics()[f"http://{NAME}:{svc.port}"]
        origins = tuple(sorted(svc.origins))
    assert set(statuses) == {200}
    assert stats.replicas == origins
    assert stats.errors["timeout"] + stats.errors["server_error"] >= 2
    assert any("keeping the last 2 replica(s)" in r.getMessage() for r in caplog.records)


async def test_a_refused_connection_resolves_again_at_once(
    dns_server: Any, counted_dns: Any
) -> None:
    """A replica that refuses connections and has left the name is dropped by the one
    resolution the refusal starts, although the TTL bounds say 30 s."""
    config = {1: ReplicaConfig(fault=Down())}
    async with FakeService(replicas=2, own_address=True, replica_overrides=config) as svc:
        dns_server.set_hosts({NAME: svc.addresses})
        source = counted_dns(nameserver=dns_server.nameserver, min_ttl=30.0, max_ttl=30.0)
        hedged = transport(svc, source)
        key = f"http://{NAME}:{svc.port}"
        async with client(svc, hedged) as http:
            await http.get("/warm")
            assert hedged.replica_statistics()[key].replicas == tuple(sorted(svc.origins))
            dns_server.set_hosts({NAME: svc.addresses[:1]})
            start = anyio.current_time()
            with anyio.fail_after(20.0):  # 30 s if it waited for the TTL
                while len(hedged.replica_statistics()[key].replicas) == 2:
                    response = await http.get("/")
                    assert response.status_code == 200  # the backup went to the live one
                    await anyio.sleep(0.01)
        origins, alive = svc.origins, svc.origins[0]
    # Two resolutions in all: the first request's, and the one the first refusal started
    # (at once, or a second after the first: the rate limit), which gave the new set.
    # Without it the next would wait for the 30 s TTL. (How many seconds it took is
    # the machine's load.)
    assert [r[2] for r in source.resolutions] == [frozenset(origins), frozenset({alive})]
    assert source.resolutions[1][0] >= start
