"""The Prometheus consumer off the request path: each request's event waits in its
client's buffer, and the counts are made when read (a scrape, ``get_sample_value``,
``statistics()``), when the buffer is full, and when the transport closes.

A request's own path calls no function of ``hedgeclient.instrumentation`` (the
transport appends to a ``deque``); what a reader sees is still exact: every request
that returned to its caller is counted, in order (the delay gauge shows the latest).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import types
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

import hedgeclient.instrumentation._hook
from hedgeclient import FixedDelay, HedgedTransport
from hedgeclient._events import RequestEnd
from hedgeclient.instrumentation import PrometheusMetrics
from hedgeclient.instrumentation._series import PENDING_EVENTS, ClientSeries

CLIENT = "catalog"
ROUTE = "GET http://svc"
REPLICAS = {"http://svc": ["http://a", "http://b", "http://c"]}
OK = {"client": CLIENT, "route": ROUTE, "outcome": "ok"}


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Async tests here run on trio with a fresh MockClock."""
    return virtual_time


def build(registry: CollectorRegistry, **kwargs: Any) -> HedgedTransport:
    """A transport over an instant MockTransport, reporting to ``registry``."""
    kwargs.setdefault("delay", FixedDelay(5.0))
    kwargs.setdefault("name", CLIENT)
    return HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas=REPLICAS,
        metrics=registry,
        **kwargs,
    )


def series_of(registry: CollectorRegistry, name: str = CLIENT) -> ClientSeries:
    """The cached series (and buffer) of client ``name`` in ``registry``."""
    return PrometheusMetrics.for_registry(registry)._clients[name]


async def get(transport: HedgedTransport) -> None:
    """One GET through ``transport``, its response read and closed."""
    response = await transport.handle_async_request(httpx.Request("GET", "http://svc/x"))
    await response.aread()
    await response.aclose()


@pytest.mark.anyio
async def test_counts_read_right_after_a_request_are_exact(registry: CollectorRegistry) -> None:
    """The request leaves its event in the buffer, counted by nothing yet; the next read
    (no scrape between) counts it: exact, the buffer empty."""
    transport = build(registry)
    await get(transport)
    state = series_of(registry)
    assert len(state.pending) == 1  # the request's path counted nothing
    assert state.routes == {}
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == 1
    assert len(state.pending) == 0
    await get(transport)
    await get(transport)
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == 3
    count = "hedgeclient_request_duration_seconds_count"
    assert registry.get_sample_value(count, {"client": CLIENT, "route": ROUTE}) == 3
    await transport.aclose()


@pytest.mark.anyio
async def test_statistics_count_the_buffered_requests(registry: CollectorRegistry) -> None:
    """``statistics()`` reads the series the buffered events add."""
    transport = build(registry)
    await get(transport)
    assert PrometheusMetrics.for_registry(registry).statistics().routes == 1
    await transport.aclose()


@pytest.mark.anyio
async def test_the_buffer_stays_bounded_with_nobody_scraping(registry: CollectorRegistry) -> None:
    """Ten times the bound of requests with no read: the buffer never holds more than
    the bound (the request that fills it drains it), and the next read is exact."""
    transport = build(registry)
    state = series_of(registry)
    most = 0
    for _ in range(10 * PENDING_EVENTS):
        await get(transport)
        most = max(most, len(state.pending))
    assert most == PENDING_EVENTS - 1  # full at PENDING_EVENTS: drained by that request
    assert len(state.pending) == 0  # 10 x the bound: the last request drained it
    await get(transport)
    assert len(state.pending) == 1
    total = 10 * PENDING_EVENTS + 1
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == total
    primaries = sum(
        registry.get_sample_value(
            "hedgeclient_attempts_total",
            {"client": CLIENT, "route": ROUTE, "kind": "primary", "replica": replica},
        )
        or 0
        for replica in REPLICAS["http://svc"]
    )
    assert primaries == total
    await transport.aclose()


@pytest.mark.anyio
async def test_aclose_counts_what_is_buffered(registry: CollectorRegistry) -> None:
    """Closing the transport counts its buffered events: the final counts are made
    before anything reads them."""
    transport = build(registry)
    for _ in range(3):
        await get(transport)
    state = series_of(registry)
    assert len(state.pending) == 3
    await transport.aclose()
    assert len(state.pending) == 0
    assert state.routes[ROUTE].ok.value == 3


@pytest.mark.anyio
async def test_delay_gauge_shows_the_latest_buffered_request(registry: CollectorRegistry) -> None:
    """For a policy without snapshots the delay gauge is the route's latest request's
    delay: the buffer is counted in order."""

    class Stepping:
        """A delay policy without snapshots whose delay grows by 1 ms a request."""

        def __init__(self) -> None:
            self.delay = 1.0

        def hedge_delay(self, route: str) -> float:
            self.delay += 0.001
            return self.delay

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            """Learn nothing."""

    policy = Stepping()
    transport = build(registry, delay=policy)
    for _ in range(5):
        await get(transport)
    labels = {"client": CLIENT, "route": ROUTE}
    gauge = registry.get_sample_value("hedgeclient_hedge_delay_seconds", labels)
    assert gauge == pytest.approx(policy.delay)
    assert gauge == pytest.approx(1.005)
    await transport.aclose()


@pytest.mark.anyio
async def test_an_event_that_fails_to_count_is_logged_and_dropped(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """An event the Prometheus side cannot count fails neither its request nor the
    scrape: it is logged and left out, the others counted."""
    transport = build(registry)
    await get(transport)
    state = series_of(registry)
    no_record = RequestEnd(CLIENT, ROUTE, "ok", 0.01, None, None, None, None, None)
    torn = RequestEnd(CLIENT, ROUTE, "ok", 0.01, None, None, None, (1, 2), None)  # type: ignore[arg-type]
    state.pending.extend((no_record, torn))
    await get(transport)
    with caplog.at_level(logging.WARNING, logger="hedgeclient"):
        text = generate_latest(registry).decode()
    assert 'hedgeclient_requests_total{client="catalog",outcome="ok"' in text
    # The first bad event has no record (counted as nothing), the second cannot unpack.
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == 2
    assert caplog.messages == [
        "hedgeclient: counting the Prometheus metrics of 1 request(s) of client 'catalog' "
        "failed; they are left out"
    ]
    assert len(state.pending) == 0
    await transport.aclose()


@pytest.fixture
def wall_time(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wall clock the Prometheus side reads (``time.time`` in ``_hook``): a list
    whose one value the test sets."""
    now = [1_000.0]
    fake = types.SimpleNamespace(time=lambda: now[0])
    monkeypatch.setattr(hedgeclient.instrumentation._hook, "time", fake)
    return now


def test_the_exemplar_of_a_traced_request_has_its_own_end_time(
    registry: CollectorRegistry, wall_time: list[float]
) -> None:
    """A traced request's exemplar is stamped at the request's end, not at the scrape:
    its event is counted at once, the older ones first."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from hedgeclient.instrumentation import OpenTelemetry

    async def main() -> None:
        plain = build(registry)  # the same client name, not traced
        await get(plain)  # buffered
        traced = build(registry, opentelemetry=OpenTelemetry(tracer_provider=TracerProvider()))
        await get(traced)
        assert len(series_of(registry).pending) == 0  # counted at once, the older first
        wall_time[0] = 2_000.0  # later: the close and the scrape
        await traced.aclose()
        await plain.aclose()

    anyio.run(main)
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == 2
    text = openmetrics(registry).decode()
    stamps = [
        float(sample.exemplar.timestamp or 0.0)  # the parser's Timestamp, as float
        for family in text_string_to_metric_families(text)
        if family.name == "hedgeclient_request_duration_seconds"
        for sample in family.samples
        if sample.exemplar is not None
    ]
    assert stamps == [1_000.0]


def test_two_loops_appending_while_a_third_thread_scrapes(registry: CollectorRegistry) -> None:
    """Two event loops on two threads send requests of one client name while a third
    thread scrapes: every scrape's total is at most what was sent and never decreases,
    and the totals after both finish are exact."""
    per_loop = 3 * PENDING_EVENTS + 17  # crosses the bound: drains on the loops too
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[float] = []

    def loop() -> None:
        async def main() -> None:
            transport = build(registry)
            for _ in range(per_loop):
                await get(transport)
            # No aclose: the buffer is the client's, read by the scrape after.

        try:
            asyncio.run(main())
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    def scrape() -> None:
        while not done.is_set():
            seen.append(registry.get_sample_value("hedgeclient_requests_total", OK) or 0.0)

    loops = [threading.Thread(target=loop) for _ in range(2)]
    scraper = threading.Thread(target=scrape)
    scraper.start()
    for thread in loops:
        thread.start()
    for thread in loops:
        thread.join()
    done.set()
    scraper.join()
    assert errors == []
    assert seen == sorted(seen)
    assert all(total <= 2 * per_loop for total in seen)
    assert registry.get_sample_value("hedgeclient_requests_total", OK) == 2 * per_loop
    duration = {"client": CLIENT, "route": ROUTE}
    count = "hedgeclient_request_duration_seconds_count"
    assert registry.get_sample_value(count, duration) == 2 * per_loop
