"""``HedgedTransport(opentelemetry=True)``, the default: the global providers, checked per
request. Each test runs in a fresh interpreter, because a process sets its global
providers once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PRELUDE = """
import json, sys
import anyio, httpx
from hedgeclient import HedgedTransport

seen = []

async def handler(request):
    seen.append(request.headers.get("traceparent"))
    return httpx.Response(200)

def transport():
    return HedgedTransport(
        httpx.MockTransport(handler), replicas={"http://svc": ["http://a", "http://b"]},
        delay=1.0, metrics=False,
    )

async def get(t):
    async with httpx.AsyncClient(transport=t, base_url="http://svc") as client:
        await client.get("/x")
"""


def run(body: str) -> dict[str, object]:
    """Run PRELUDE + ``body`` in a fresh interpreter; return the JSON it prints."""
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_no_provider_nothing_runs() -> None:
    """The API imported but no provider set: no header is injected and nothing of
    hedgeclient's instrumentation is even imported."""
    result = run(
        """
        import opentelemetry.trace, opentelemetry.metrics
        anyio.run(get, transport())
        loaded = sorted(m for m in sys.modules if m.startswith("hedgeclient.instrumentation"))
        print(json.dumps({"seen": seen, "loaded": loaded}))
        """
    )
    assert result == {"seen": [None], "loaded": []}


def test_provider_set_after_the_transport_is_used() -> None:
    """A tracer provider configured after the transport was built (and used) traces the
    next request: a request span and an attempt span, whose id the header names."""
    result = run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()

        async def main():
            async with httpx.AsyncClient(transport=transport(), base_url="http://svc") as c:
                await c.get("/x")
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(exporter))
                trace.set_tracer_provider(provider)
                await c.get("/x")

        anyio.run(main)
        spans = [(s.name, format(s.context.span_id, "016x")) for s in exporter.get_finished_spans()]
        print(json.dumps({"seen": seen, "spans": spans}))
        """
    )
    (attempt, attempt_id), (request, _) = result["spans"]  # type: ignore[misc]
    assert (attempt, request) == ("GET", "hedged GET")
    first, second = result["seen"]  # type: ignore[misc]
    assert first is None
    assert second.split("-")[2] == attempt_id


def test_meter_provider_alone_records_metrics_without_spans() -> None:
    """Only a meter provider: hedgeclient's metrics are recorded, no span is made."""
    result = run(
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        anyio.run(get, transport())
        data = reader.get_metrics_data()
        ours = [
            m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics
            if s.scope.name == "hedgeclient"
        ]
        names = sorted(m.name for m in ours)
        requests = [
            p.value for m in ours if m.name == "hedgeclient.requests" for p in m.data.data_points
        ]
        print(json.dumps({"seen": seen, "names": names, "requests": requests}))
        """
    )
    assert result["seen"] == [None]
    assert result["requests"] == [1]  # the hook was added once
    assert "hedgeclient.requests" in result["names"]  # type: ignore[operator]
    assert "http.client.request.duration" in result["names"]  # type: ignore[operator]
