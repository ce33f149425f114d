"""What hedgeclient's OpenTelemetry support costs per request, in process CPU time.

Run from the repository root (about 2 minutes; writes ``results/otel_cost.json``)::

    .venv/bin/python benchmarks/bench_otel_cost.py

Whole requests through ``httpx.AsyncClient`` + ``HedgedTransport`` around an
``httpx.MockTransport`` that answers at once (delay 0.05 s, so never hedged: one
attempt), on asyncio, Prometheus metrics off unless named. The setups take turns in
small batches, timed in process CPU time; the table gives the best batch of each and
the median over rounds of the paired difference with ``off``, so that other load on the
machine mostly cancels out. The setups:

- ``off``: ``opentelemetry=False``;
- ``api, no provider``: ``opentelemetry=True`` (the default) with ``opentelemetry-api``
  imported and no provider configured: the target is <= 2 µs over ``off``;
- ``sdk traces (batch)``: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor``
  and a no-op exporter, metrics off: the target is <= 25 µs over ``off``;
- ``sdk traces (simple)``: the same with a ``SimpleSpanProcessor``;
- ``sdk metrics``: an SDK ``MeterProvider`` (an in-memory reader never collected), no
  tracer provider (so no exemplars);
- ``sdk traces + metrics``: the batch tracer and that meter provider (the SDK then
  offers each measurement as an exemplar of the current, sampled, span);
- ``prometheus`` and ``prometheus + sdk traces``: ``metrics=registry`` without and with
  the batch tracer (the second adds the exemplars).

It also times, in process CPU time, the per-request provider check alone
(``providers_configured``) with the API imported and no provider, in ns per call, and
the SDK's own floor: what two bare spans (no attributes, started, made current, ended)
and one ``propagate.inject`` cost, in µs, with a simple processor: the part of
``sdk traces (simple)`` that no instrumentation with a request span and an attempt span
can avoid.
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
from _common import command, machine, package_version, print_table, verdict, write_json
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from prometheus_client import CollectorRegistry

from hedgeclient import HedgedTransport
from hedgeclient._otel_gate import providers_configured
from hedgeclient.instrumentation import OpenTelemetry

N = 400  # requests per batch
ROUNDS = 60
WARMUP = 300
TARGET_NO_PROVIDER_US = 2.0
TARGET_SDK_US = 25.0


class NoOpExporter(SpanExporter):
    """Exports nothing, at once."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def tracer(batch: bool) -> TracerProvider:
    provider = TracerProvider()
    processor = BatchSpanProcessor(NoOpExporter()) if batch else SimpleSpanProcessor(NoOpExporter())
    provider.add_span_processor(processor)
    return provider


def transport(**kwargs: Any) -> HedgedTransport:
    kwargs.setdefault("metrics", False)
    return HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=0.05,
        name="bench",
        **kwargs,
    )


def setups() -> dict[str, dict[str, Any]]:
    batch = tracer(batch=True)
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {
        "off": {"opentelemetry": False},
        "api, no provider": {"opentelemetry": True},
        "sdk traces (batch)": {
            "opentelemetry": OpenTelemetry(tracer_provider=batch, metrics=False)
        },
        "sdk traces (simple)": {
            "opentelemetry": OpenTelemetry(tracer_provider=tracer(batch=False), metrics=False)
        },
        "sdk metrics": {"opentelemetry": OpenTelemetry(meter_provider=meters)},
        "sdk traces + metrics": {
            "opentelemetry": OpenTelemetry(tracer_provider=batch, meter_provider=meters)
        },
        "prometheus": {"opentelemetry": False, "metrics": CollectorRegistry()},
        "prometheus + sdk traces": {
            "opentelemetry": OpenTelemetry(tracer_provider=batch, metrics=False),
            "metrics": CollectorRegistry(),
        },
    }


async def interleaved(configs: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """CPU µs per request of each setup in every round; the setups take turns."""
    rounds: dict[str, list[float]] = {name: [] for name in configs}
    clients = {
        name: httpx.AsyncClient(transport=transport(**kwargs), base_url="http://svc")
        for name, kwargs in configs.items()
    }
    try:
        for client in clients.values():
            for _ in range(WARMUP):
                await client.get("/items/1")
        for _ in range(ROUNDS):
            for name, client in clients.items():
                start = time.process_time()
                for _ in range(N):
                    await client.get("/items/1")
                rounds[name].append((time.process_time() - start) / N * 1e6)
    finally:
        for client in clients.values():
            await client.aclose()
    return rounds


def check_cost_ns() -> float:
    """ns per call of the per-request provider check (API imported, no provider)."""
    timer = timeit.Timer(providers_configured, timer=time.process_time)
    calls = 200_000
    return min(timer.repeat(repeat=5, number=calls)) / calls * 1e9


def sdk_floor_us() -> float:
    """µs for two bare spans (request and attempt) and one inject, simple processor (a
    batch processor's queue overflows in this tight loop, and dropping is cheaper)."""
    from opentelemetry import context, propagate, trace

    tracer_ = tracer(batch=False).get_tracer("floor")
    headers: dict[str, str] = {}

    def one() -> None:
        outer = tracer_.start_span("outer")
        ctx = trace.set_span_in_context(outer)
        inner = tracer_.start_span("inner", ctx, trace.SpanKind.CLIENT)
        inner_ctx = trace.set_span_in_context(inner, ctx)
        propagate.inject(headers, inner_ctx)
        token = context.attach(inner_ctx)
        context.detach(token)
        inner.end()
        outer.end()

    calls = 20_000
    timer = timeit.Timer(one, timer=time.process_time)
    return min(timer.repeat(repeat=5, number=calls)) / calls * 1e6


def main() -> None:
    import opentelemetry.metrics
    import opentelemetry.trace  # noqa: F401 - "the API installed and imported"

    facts = machine()
    assert not providers_configured(), "a global provider is configured: the figures would lie"
    started = time.monotonic()
    check_ns = check_cost_ns()
    floor_us = sdk_floor_us()
    rounds = anyio.run(interleaved, setups(), backend="asyncio")
    off = rounds["off"]
    rows = []
    results: dict[str, dict[str, float]] = {}
    for name, values in rounds.items():
        added = statistics.median(b - a for a, b in zip(off, values, strict=True))
        results[name] = {"best_us": round(min(values), 3), "median_added_us": round(added, 3)}
        target = {"api, no provider": TARGET_NO_PROVIDER_US, "sdk traces (batch)": TARGET_SDK_US}
        mark = ""
        if name in target:
            mark = f"{verdict(added <= target[name])} (<= {target[name]:g})"
        rows.append((name, f"{min(values):.1f}", "" if name == "off" else f"{added:+.2f}", mark))
    elapsed = time.monotonic() - started
    print_table(
        "hedgeclient OpenTelemetry cost, CPU µs per request (one attempt)",
        ["setup", "best batch", "added vs off (median of paired rounds)", "target"],
        rows,
    )
    print(f"provider check alone (API imported, no provider): {check_ns:.0f} ns per request")
    print(f"SDK floor, two bare spans and one inject (simple): {floor_us:.1f} µs per request")
    path = write_json(
        "otel_cost",
        {
            "command": command(),
            "machine": facts,
            "seconds": round(elapsed, 1),
            "requests_per_batch": N,
            "rounds": ROUNDS,
            "packages": {
                name: package_version(name)
                for name in ("opentelemetry-api", "opentelemetry-sdk", "prometheus-client")
            },
            "provider_check_ns": round(check_ns, 1),
            "sdk_floor_two_bare_spans_us": round(floor_us, 2),
            "targets_us": {
                "api, no provider": TARGET_NO_PROVIDER_US,
                "sdk traces (batch)": TARGET_SDK_US,
            },
            "results": results,
        },
    )
    print(f"{elapsed:.0f} s; written to {path}")


if __name__ == "__main__":
    main()
