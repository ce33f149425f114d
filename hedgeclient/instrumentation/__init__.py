"""Instrumentation for hedgeclient: Prometheus metrics fed by request hooks.

Nothing here is imported by ``import hedgeclient``; :class:`~hedgeclient.HedgedTransport`
imports it when metrics are enabled.

.. versionadded:: 0.1.0
"""

from hedgeclient.instrumentation._prometheus import (
    DURATION_BUCKETS,
    PrometheusMetrics,
    PrometheusMetricsStatistics,
)

__all__ = ["DURATION_BUCKETS", "PrometheusMetrics", "PrometheusMetricsStatistics"]
