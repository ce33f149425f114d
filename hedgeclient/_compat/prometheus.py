"""prometheus-client's private names, read in this one module.

Upstream reason: hedgeclient's counters and histograms are plain accumulators exported
by a custom collector with the samples prometheus-client's ``Counter`` and
``Histogram`` would give (``instrumentation._families`` says why: a fifth of their
cost per request). Those samples include the ``_created`` series, which
prometheus-client drops when ``PROMETHEUS_DISABLE_CREATED_SERIES`` is set or after
``disable_created_metrics()``. Both set one module flag,
``prometheus_client.metrics._use_created``, that its own metrics read when they are
collected; no public name reads it. Reading the same flag at each collection keeps the
custom collector's ``_created`` series in step with prometheus-client's.

Strictly private.
"""

from __future__ import annotations

from prometheus_client import metrics as _client_metrics

__all__ = ["use_created"]


def use_created() -> bool:
    """Whether prometheus-client exposes ``_created`` series now (its module flag)."""
    return bool(_client_metrics._use_created)  # the flag its metrics read
