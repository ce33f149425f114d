"""Fixtures of the OpenTelemetry tests: the real SDK with an in-memory span exporter and
metric reader (never the global providers, which a process sets once), and helpers
that read the exported spans as a tree."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hedgeclient.instrumentation import OpenTelemetry


@dataclass
class Sdk:
    """A tracer provider exporting to memory and a meter provider read in memory."""

    exporter: InMemorySpanExporter
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    def otel(self, **options: Any) -> OpenTelemetry:
        """``OpenTelemetry`` over these providers."""
        return OpenTelemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )

    def spans(self, scope: str | None = None) -> list[ReadableSpan]:
        """The finished spans (of one instrumentation scope), in the order they ended."""
        spans = list(self.exporter.get_finished_spans())
        if scope is None:
            return spans
        return [
            s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == scope
        ]

    def tree(self) -> tuple[ReadableSpan, list[ReadableSpan]]:
        """hedgeclient's one request span and its attempt spans, in the order sent
        (``http.request.resend_count``: absent on the primary, 1 on the first backup)."""
        ours = self.spans("hedgeclient")
        requests = [s for s in ours if s.name.startswith("hedged ")]
        assert len(requests) == 1, [s.name for s in ours]
        attempts = [s for s in ours if not s.name.startswith("hedged ")]
        attempts.sort(key=lambda s: attrs(s).get("http.request.resend_count", 0))
        return requests[0], attempts

    def points(self, name: str, scope: str = "hedgeclient") -> list[Any]:
        """The data points of metric ``name`` of ``scope`` read now (empty if none)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scoped in resource.scope_metrics
            if scoped.scope.name == scope
            for metric in scoped.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def metrics(self, scope: str = "hedgeclient") -> dict[str, Any]:
        """Every metric of ``scope`` read now, by name (the SDK's ``Metric`` objects)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return {}
        return {
            metric.name: metric
            for resource in data.resource_metrics
            for scoped in resource.scope_metrics
            if scoped.scope.name == scope
            for metric in scoped.metrics
        }


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """A fresh SDK per test, shut down after it."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Sdk(exporter, tracer_provider, reader, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as a plain dict."""
    return dict(span.attributes or {})


def hexid(span: ReadableSpan) -> str:
    """The span's id as 16 hex digits."""
    assert span.context is not None
    return format(span.context.span_id, "016x")


def trace_hex(span: ReadableSpan) -> str:
    """The span's trace id as 32 hex digits."""
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def parent_hex(span: ReadableSpan) -> str | None:
    """The span's parent id as 16 hex digits, or None for a root."""
    return None if span.parent is None else format(span.parent.span_id, "016x")


@pytest.fixture
def ids() -> Any:
    """The id helpers (``hexid``, ``trace_hex``, ``parent_hex``, ``attrs``) as a namespace."""
    import types

    return types.SimpleNamespace(
        hexid=hexid, trace_hex=trace_hex, parent_hex=parent_hex, attrs=attrs
    )
