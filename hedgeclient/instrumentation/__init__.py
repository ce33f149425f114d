"""Instrumentation for hedgeclient: Prometheus metrics fed by request hooks, and
OpenTelemetry traces and metrics.

:class:`PrometheusMetrics` holds the metrics of one ``prometheus_client`` registry and
hands each transport its hook; the metric names, types and labels, a public contract,
are listed in the docstring of ``hedgeclient.instrumentation._prometheus``. It never
imports the transport: :meth:`PrometheusMetrics.bind` takes any :class:`MetricsSource`
(a name, a delay policy, a budget), which :class:`~hedgeclient.HedgedTransport` is.
``HedgedTransport(metrics=...)`` uses it (``True`` by default); ``import hedgeclient``
alone never imports this package.

:class:`OpenTelemetry` configures a transport's OpenTelemetry spans (one per request,
one per attempt) and metrics (``HedgedTransport(opentelemetry=...)``); importing it
imports no OpenTelemetry package. See ``docs/tracing.md``.

.. versionadded:: 0.1.0
"""

from hedgeclient.instrumentation._otel import OpenTelemetry
from hedgeclient.instrumentation._prometheus import (
    DURATION_BUCKETS,
    OTHER,
    MetricsSource,
    PrometheusMetrics,
    PrometheusMetricsStatistics,
)

__all__ = [  # noqa: RUF022 - plain sorted(), as tests/test_exports.py asserts
    "DURATION_BUCKETS",
    "MetricsSource",
    "OTHER",
    "OpenTelemetry",
    "PrometheusMetrics",
    "PrometheusMetricsStatistics",
]
