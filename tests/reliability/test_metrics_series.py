"""Metrics never break construction and never grow with the traffic.

Several transports in one process share prometheus-client's default registry without a
duplicate-registration error, however often a fixture builds them; 10,000 distinct
URL paths add no series (the ``route`` label is the method and logical origin, never
the path).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from hedgeclient import HedgedTransport


def ok(request: httpx.Request) -> httpx.Response:
    """Every replica answers at once."""
    return httpx.Response(200)


def build(**kwargs: Any) -> HedgedTransport:
    """A transport over in-process replicas, metrics on (the default registry) unless told."""
    return HedgedTransport(
        httpx.MockTransport(ok),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=1.0,
        **kwargs,
    )


def series(registry: CollectorRegistry) -> int:
    """How many hedgeclient samples (series) the registry exports."""
    return sum(
        len(metric.samples)
        for metric in registry.collect()
        if metric.name.startswith("hedgeclient_")
    )


@pytest.fixture(params=range(100))
def rebuilt(request: pytest.FixtureRequest) -> HedgedTransport:
    """The same transport built afresh for each of 100 tests, on the default registry."""
    return build(name="fixture")


def test_transport_built_in_a_fixture_100_times(rebuilt: HedgedTransport, tally: Any) -> None:
    """Building a metrics-enabled transport again and again never fails registration."""
    assert rebuilt.name == "fixture"
    tally("M18 transport rebuilt by a fixture", requests=0, faults=1)


def test_three_transports_share_the_default_registry(tally: Any) -> None:
    """Three transports (two sharing a name) in one process register without error and all count."""
    transports = [build(name="one"), build(name="two"), build(name="two")]

    async def main() -> None:
        for transport in transports:
            async with httpx.AsyncClient(transport=transport) as client:
                assert (await client.get("http://svc/x")).status_code == 200

    anyio.run(main)
    samples = {
        (s.labels.get("client"), s.labels.get("outcome")): s.value
        for metric in REGISTRY.collect()
        if metric.name == "hedgeclient_requests"
        for s in metric.samples
        if s.name == "hedgeclient_requests_total" and s.labels.get("route") == "GET http://svc"
    }
    assert samples[("one", "ok")] >= 1
    assert samples[("two", "ok")] >= 2
    tally("M18 three transports, one registry", requests=3)


def test_ten_thousand_paths_add_no_series(tally: Any) -> None:
    """10,000 distinct paths through one transport: the number of exported series is constant."""
    registry = CollectorRegistry()
    transport = build(metrics=registry)
    counts: list[int] = []

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            for i in range(10_000):
                assert (await client.get(f"/items/{i}?q={i}")).status_code == 200
                if i in (99, 9_999):
                    counts.append(series(registry))

    anyio.run(main)
    assert counts[0] == counts[1] > 0
    tally("M18 10,000 distinct paths", requests=10_000)
