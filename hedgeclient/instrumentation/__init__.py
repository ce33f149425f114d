"""Instrumentation for hedgeclient: Prometheus metrics fed by request hooks.

:class:`PrometheusMetrics` holds the metrics of one ``prometheus_client`` registry and
hands each transport its hook; the metric names, types and labels, a public contract,
are listed in the docstring of ``hedgeclient.instrumentation._prometheus``.
``HedgedTransport(metrics=...)`` uses it (``True`` by default); ``import hedgeclient``
alone never imports this package.

.. versionadded:: 0.1.0
"""

from hedgeclient.instrumentation._prometheus import (
    DURATION_BUCKETS,
    OTHER,
    PrometheusMetrics,
    PrometheusMetricsStatistics,
)

__all__ = ["DURATION_BUCKETS", "OTHER", "PrometheusMetrics", "PrometheusMetricsStatistics"]
