"""Span timestamps come from the race's own clock: under trio's MockClock the attempt
spans start and end at the exact virtual instants of the race, and a dropped trace is
still propagated, unsampled."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient.instrumentation import OpenTelemetry
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Trio with a fresh MockClock."""
    return virtual_time


def scripted(
    script: ScriptedReplicas, opentelemetry: Any, delay: float = 0.030
) -> httpx.AsyncClient:
    """A client over scripted replicas a and b (primaries to a)."""
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=delay,
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        metrics=False,
        opentelemetry=opentelemetry,
    )
    return httpx.AsyncClient(transport=transport, base_url="http://svc")


async def test_span_times_are_the_race_instants(sdk: Any) -> None:
    """Primary sent at 0 and cancelled at 40 ms, backup sent at 30 ms answering 10 ms later:
    the spans say exactly that, relative to the request span's start."""
    script = ScriptedReplicas({"a": [0.500], "b": [0.010]})
    async with scripted(script, sdk.otel()) as client:
        await client.get("/x")
    request, (primary, backup) = sdk.tree()
    t0 = request.start_time

    def ms(ns: int) -> float:
        return round((ns - t0) / 1e6, 6)

    assert (ms(primary.start_time), ms(primary.end_time)) == (0.0, 40.0)
    assert (ms(backup.start_time), ms(backup.end_time)) == (30.0, 40.0)
    assert ms(request.end_time) == 40.0
    (event,) = primary.events
    assert ms(event.timestamp) == 40.0


async def test_failure_backup_starts_when_the_primary_failed(sdk: Any) -> None:
    """A primary failing at 5 ms triggers a backup at 5 ms, trigger ``failure``."""
    script = ScriptedReplicas({"a": [Reply(0.005, status=503)], "b": [0.010]})
    async with scripted(script, sdk.otel(), delay=1.0) as client:
        response = await client.get("/x")
    assert response.status_code == 200
    request, (_primary, backup) = sdk.tree()
    assert (backup.start_time - request.start_time) / 1e6 == pytest.approx(5.0, abs=1e-6)
    assert dict(backup.attributes or {})["hedgeclient.attempt.trigger"] == "failure"


async def test_dropped_trace_is_still_propagated_unsampled() -> None:
    """A sampler that drops the trace: no span is recorded, and each attempt still carries
    a traceparent, with the sampled flag clear."""
    seen: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("traceparent"))
        return httpx.Response(200)

    otel = OpenTelemetry(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), metrics=False)
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": ["http://a", "http://b"]},
        metrics=False,
        opentelemetry=otel,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        response = await client.get("/x")
    assert response.status_code == 200
    (header,) = seen
    assert header is not None
    assert int(header.split("-")[3], 16) & 1 == 0


async def test_suppressed_instrumentation_is_not_traced(sdk: Any) -> None:
    """A caller that suppresses instrumentation (an exporter's own requests) gets no span
    and no injected header."""
    from opentelemetry import context

    script = ScriptedReplicas({"a": [0.001], "b": [0.001]})
    headers: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("traceparent"))
        return await script.handler(request)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"http://svc": ["http://a", "http://b"]},
        metrics=False,
        opentelemetry=sdk.otel(),
    )
    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            await client.get("/x")
    finally:
        context.detach(token)
    assert sdk.spans() == []
    assert headers == [None]


async def test_transport_closed_mid_request_is_an_error(sdk: Any) -> None:
    """A request cut short by ``aclose()``: its span is ERROR, TransportClosedError; its
    attempt is UNSET with the event transport_closed."""
    import anyio

    from hedgeclient import TransportClosedError

    script = ScriptedReplicas({"a": [1.0], "b": [1.0]})
    client = scripted(script, sdk.otel(), delay=5.0)
    async with anyio.create_task_group() as tg:

        async def close_soon() -> None:
            await anyio.sleep(0.1)
            await client.aclose()

        tg.start_soon(close_soon)
        with pytest.raises(TransportClosedError):
            await client.get("/x")
    request, (primary,) = sdk.tree()
    assert request.status.status_code.name == "ERROR"
    assert dict(request.attributes or {})["error.type"] == "TransportClosedError"
    assert primary.status.status_code.name == "UNSET"
    assert [dict(e.attributes or {})["hedgeclient.cancel_reason"] for e in primary.events] == [
        "transport_closed"
    ]
