"""Nobody let in: a request goes only to its own origin or that origin's replicas.

Two logical services (each with two replicas) and a third host, in process: the
handler records the headers every host receives. ``Authorization`` and cookies of a
service must reach its replicas only, through hedging (backups), redirects to the
other service and to the third host (``follow_redirects=True``), and cookies the
replicas set themselves. Virtual time (trio ``MockClock``).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import anyio
import httpx
import trio
from trio.testing import MockClock

from hedgeclient import HedgeBudget, HedgedTransport, PowerOfTwoChoices, RequestRecord

SERVICES = {
    "http://svc-a.example": ["http://a1.internal", "http://a2.internal"],
    "http://svc-b.example": ["http://b1.internal", "http://b2.internal"],
}
A_HOSTS = {"a1.internal", "a2.internal"}
B_HOSTS = {"b1.internal", "b2.internal"}


class Hosts:
    """Every host's handler: records what it received, answers by path."""

    def __init__(self) -> None:
        self.seen: dict[str, list[httpx.Headers]] = defaultdict(list)

    async def handler(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.seen[host].append(request.headers)
        if host == "a1.internal":
            await anyio.sleep(0.100)  # the slow replica: its requests are hedged
        else:
            await anyio.sleep(0.005)
        path = request.url.path
        if path == "/to-third":
            return httpx.Response(302, headers={"location": "http://third.example/landing"})
        if path == "/to-b":
            return httpx.Response(302, headers={"location": "http://svc-b.example/landing"})
        if path == "/login":
            return httpx.Response(200, headers={"set-cookie": "replica_set=1; Path=/"})
        return httpx.Response(200, text=host)

    def hosts_with(self, predicate: Any) -> set[str]:
        """Hosts that received at least one request whose headers satisfy ``predicate``."""
        return {h for h, all_headers in self.seen.items() if any(predicate(x) for x in all_headers)}


def test_credentials_reach_only_their_service(tally: Any) -> None:
    """Authorization and cookies of svc-a reach a1/a2 only: not svc-b, not the third host."""
    hosts = Hosts()
    records: list[RequestRecord] = []

    async def main() -> None:
        transport = HedgedTransport(
            httpx.MockTransport(hosts.handler),
            replicas=SERVICES,
            delay=0.030,
            budget=HedgeBudget(ratio=1.0, burst=1_000, min_per_second=0),
            selector=PowerOfTwoChoices(rng=random.Random(1)),
            hooks=[records.append],
            metrics=False,
        )
        cookies = httpx.Cookies()
        cookies.set("session", "a-secret", domain="svc-a.example")
        async with httpx.AsyncClient(
            transport=transport, cookies=cookies, follow_redirects=True
        ) as client:
            auth = {"authorization": "Bearer a-token"}
            await client.get("http://svc-a.example/login", headers=auth)
            for _ in range(10):  # half the primaries go to slow a1: backups to a2
                response = await client.get("http://svc-a.example/items", headers=auth)
                assert response.text in A_HOSTS
            third = await client.get("http://svc-a.example/to-third", headers=auth)
            assert (third.url.host, third.text) == ("third.example", "third.example")
            other = await client.get("http://svc-a.example/to-b", headers=auth)
            assert other.text in B_HOSTS
            b_auth = {"authorization": "Bearer b-token"}
            await client.get("http://svc-b.example/items", headers=b_auth)
            # A replica's own address is not a logical origin: it is used as is.
            direct = await client.get("http://a2.internal/direct")
            assert direct.text == "a2.internal"

    trio.run(main, clock=MockClock(autojump_threshold=0))

    def has_a_auth(h: httpx.Headers) -> bool:
        return h.get("authorization") == "Bearer a-token"

    def has_a_cookie(h: httpx.Headers) -> bool:
        return "a-secret" in h.get("cookie", "") or "replica_set" in h.get("cookie", "")

    assert hosts.hosts_with(has_a_auth) == A_HOSTS
    assert hosts.hosts_with(has_a_cookie) == A_HOSTS
    assert hosts.hosts_with(lambda h: h.get("authorization") == "Bearer b-token") <= B_HOSTS
    assert A_HOSTS | {"third.example"} <= set(hosts.seen) <= A_HOSTS | B_HOSTS | {"third.example"}
    # The logical Host header travels with every replica request.
    assert {h["host"] for h in hosts.seen["a1.internal"] + hosts.seen["a2.internal"]} == {
        "svc-a.example",
        "a2.internal",  # the direct request
    }
    hedged = [r for r in records if r.hedged]
    assert hedged  # backups happened, and they stayed within svc-a
    for record in records:
        replicas = {a.replica for a in record.attempts}
        assert (
            replicas <= {f"http://{h}" for h in A_HOSTS}
            or replicas <= {f"http://{h}" for h in B_HOSTS}
            or replicas in ({"http://third.example"}, {"http://a2.internal"})
        )
    tally(
        "N11 credentials stay within their service",
        faults=3,
        requests=len(records),
        leaked_credentials=len(hosts.hosts_with(has_a_auth) - A_HOSTS),
    )
