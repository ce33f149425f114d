"""Prometheus exemplars: a traced request's latency bucket names its trace id in the
OpenMetrics exposition, so a p99 panel leads to a trace of a slow request.

Real sockets (``FakeService``), the real SDK; the slow request asks the replica for a
300 ms answer (``/delay/0.3``) against a hedge delay of 5 s, so it is never hedged and
its bucket is the one of a 0.3 s request, far from the fast one's few milliseconds.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from hedgeclient import HedgedTransport
from hedgeclient.instrumentation import OpenTelemetry
from hedgeclient.testing import FakeService

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://catalog"


def exemplars(registry: CollectorRegistry, family: str) -> list[tuple[float, str, str, str]]:
    """(bucket bound, trace id, span id, observed value) of each bucket exemplar of
    ``family`` in the registry's OpenMetrics exposition."""
    text = generate_latest(registry).decode()
    found = []
    for metric in text_string_to_metric_families(text):
        if metric.name != family:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_bucket") and sample.exemplar is not None:
                labels = sample.exemplar.labels
                bound = float(sample.labels["le"])
                found.append((bound, labels["trace_id"], labels["span_id"], sample.exemplar.value))
    return found


def bucket_of(value: float, bounds: list[float]) -> float:
    """The upper bound of the bucket a value falls in."""
    return min(b for b in bounds if value <= b)


async def test_slow_requests_bucket_names_its_trace(sdk: Any, ids: Any) -> None:
    """Two traced requests, fast and slow: each one's request-duration bucket carries an
    exemplar with its own trace and span id and its own duration."""
    registry = CollectorRegistry()
    async with FakeService(replicas=2) as svc:
        transport = HedgedTransport(
            replicas={SERVICE: svc.origins},
            delay=5.0,
            metrics=registry,
            opentelemetry=sdk.otel(),
        )
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            await client.get("/item")
            await client.get("/delay/0.3")
    fast, slow = (span for span in sdk.spans("hedgeclient") if span.name == "hedged GET")
    found = exemplars(registry, "hedgeclient_request_duration_seconds")
    assert len(found) == 2
    by_trace = {trace: (bound, span, value) for bound, trace, span, value in found}
    bounds = [b for b, *_ in found]
    slow_bound, slow_span, slow_value = by_trace[ids.trace_hex(slow)]
    assert slow_span == ids.hexid(slow)
    assert slow_value >= 0.3
    assert slow_bound >= 0.3
    assert slow_bound == max(bounds)
    fast_bound, fast_span, fast_value = by_trace[ids.trace_hex(fast)]
    assert fast_span == ids.hexid(fast)
    assert fast_value < 0.3
    assert fast_bound < slow_bound
    # Each exemplar sits in the bucket its own value falls in (DURATION_BUCKETS).
    from hedgeclient.instrumentation import DURATION_BUCKETS

    assert slow_bound == bucket_of(slow_value, list(DURATION_BUCKETS))
    assert fast_bound == bucket_of(fast_value, list(DURATION_BUCKETS))
    # The attempt-duration histogram carries them too.
    attempts = exemplars(registry, "hedgeclient_attempt_duration_seconds")
    assert {trace for _, trace, _, _ in attempts} == {ids.trace_hex(fast), ids.trace_hex(slow)}


async def test_untraced_requests_carry_no_exemplar(sdk: Any) -> None:
    """With tracing off (or a sampler that drops the trace), no bucket carries an
    exemplar."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    for opentelemetry in (False, OpenTelemetry(tracer_provider=TracerProvider(sampler=ALWAYS_OFF))):
        registry = CollectorRegistry()
        async with FakeService(replicas=2) as svc:
            transport = HedgedTransport(
                replicas={SERVICE: svc.origins},
                metrics=registry,
                opentelemetry=opentelemetry,
            )
            async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
                await client.get("/item")
        assert exemplars(registry, "hedgeclient_request_duration_seconds") == []
        assert " # {" not in generate_latest(registry).decode()
