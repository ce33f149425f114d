"""Print the spans of one real hedged request as a tree, for ``docs/tracing.md``.

Run from the repository root (about 3 s)::

    .venv/bin/python scripts/render_trace.py

Two fake replicas on loopback (``FakeService``), replica 0 stalled for 2 s, a hedge
delay of 50 ms, the httpx instrumentor on for the process: the backup to replica 1
wins. Prints each span with its start relative to the caller's span, its duration,
attributes and events, then the ``traceparent`` each replica received.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hedgeclient import HedgedTransport
from hedgeclient.instrumentation import OpenTelemetry
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig


def render(spans: Sequence[ReadableSpan]) -> None:
    """Print ``spans`` as a tree from their root."""
    root = next(s for s in spans if s.parent is None)
    t0 = root.start_time or 0

    def ms(ns: int | None) -> float:
        return ((ns or 0) - t0) / 1e6

    def walk(span: ReadableSpan, prefix: str, last: bool, depth: int) -> None:
        head = "" if depth == 0 else ("└─ " if last else "├─ ")
        attributes = dict(span.attributes or {})
        role = attributes.get("hedgeclient.attempt.role", "")
        title = f"{prefix}{head}{span.name} [{span.kind.name}, {span.status.status_code.name}]"
        took = ms(span.end_time) - ms(span.start_time)
        assert span.context is not None
        span_id = format(span.context.span_id, "016x")
        print(
            f"{title} {role}".rstrip().ljust(44)
            + f"start +{ms(span.start_time):6.1f} ms  took {took:6.1f} ms  span {span_id}"
        )
        body = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        kids = [s for s in spans if s.parent and s.parent.span_id == span.context.span_id]
        kids.sort(key=lambda s: s.start_time or 0)
        bar = "│  " if kids else "   "
        for key, value in sorted(attributes.items()):
            print(f"{body}{bar}{key}={value!r}")
        for event in span.events:
            details = ", ".join(f"{k}={v}" for k, v in sorted((event.attributes or {}).items()))
            print(f"{body}{bar}event {event.name} at +{ms(event.timestamp):.1f} ms: {details}")
        for index, kid in enumerate(kids):
            walk(kid, body, index == len(kids) - 1, depth + 1)

    walk(root, "", True, 0)


async def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    stalled = {0: ReplicaConfig(latency=2.0)}
    try:
        async with FakeService(replicas=2, latency=0.002, replica_overrides=stalled) as svc:
            transport = HedgedTransport(
                replicas={"http://catalog": svc.origins},
                delay=0.05,
                selector=FirstReplica(),
                opentelemetry=OpenTelemetry(tracer_provider=provider),
                metrics=False,
            )
            async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:
                await client.get("/items/42")  # open the connections first
                exporter.clear()
                with provider.get_tracer("app").start_as_current_span("handler"):
                    await client.get("/items/42", headers={"x-request-id": "r1"})
            visits = svc.stats().visits("r1")
    finally:
        HTTPXClientInstrumentor().uninstrument()
    render(exporter.get_finished_spans())
    for visit in visits:
        received = f"{visit.traceparent} ({visit.outcome})"
        print(f"replica {visit.replica} received traceparent: {received}")


if __name__ == "__main__":
    anyio.run(main)
