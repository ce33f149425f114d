"""OpenTelemetry's private names, read in this one module: the global providers'
module globals and the suppress-instrumentation context keys.

No OpenTelemetry package is imported when this module is: the providers are read from
``sys.modules`` (while the application has not imported the OpenTelemetry API itself,
no provider can have been configured, and the check is a dictionary look-up), and the
context keys only when :func:`suppress_keys` is called (by the tracing, which imports
the API anyway).

Upstream reasons, one per private name:

- ``opentelemetry.trace._TRACER_PROVIDER`` and
  ``opentelemetry.metrics._internal._METER_PROVIDER`` (``None`` until
  ``set_tracer_provider``/``set_meter_provider``): the public getters
  (``get_tracer_provider``, ``get_meter_provider``) test ``os.environ`` on every call
  (``OTEL_PYTHON_*_PROVIDER``), which costs more than the whole per-request budget of
  a transport that checks them on each request. When a global is missing (another API
  release), or when ``OTEL_PYTHON_TRACER_PROVIDER``/``OTEL_PYTHON_METER_PROVIDER`` is
  set (a provider the API loads on first use; read once, at import), the public
  getters are used.
- ``opentelemetry.metrics._internal`` itself: the module that holds the meter provider
  global (``opentelemetry.metrics`` re-exports the getter, not the global).
- ``_ProxyMeterProvider`` (by class name): the API's default meter provider, which is
  not exported; it means "none configured", as ``ProxyTracerProvider`` does for traces.
- ``opentelemetry.context._SUPPRESS_INSTRUMENTATION_KEY`` and
  ``_SUPPRESS_HTTP_INSTRUMENTATION_KEY``: the context keys every HTTP instrumentation
  checks (the instrumentation packages import them from there); the API exports no
  public name for them. ``None`` if a release removes them.

Strictly private.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

__all__ = [
    "METRICS_MODULE",
    "TRACE_MODULE",
    "meter_provider",
    "providers_configured",
    "suppress_keys",
    "tracer_provider",
]

TRACE_MODULE: Final = "opentelemetry.trace"
"""The module that holds the global tracer provider."""
METRICS_MODULE: Final = "opentelemetry.metrics._internal"
"""The module that holds the global meter provider."""

_MISSING: Final = object()
_TRACE_ENV: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_METER_ENV: Final = "OTEL_PYTHON_METER_PROVIDER" in os.environ


def tracer_provider() -> Any:
    """The global tracer provider the application configured, or ``None``."""
    trace = sys.modules.get(TRACE_MODULE)
    if trace is None:
        return None
    provider = getattr(trace, "_TRACER_PROVIDER", _MISSING)
    if provider is None and not _TRACE_ENV:
        return None
    if provider is _MISSING or provider is None:
        provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


def meter_provider() -> Any:
    """The global meter provider the application configured, or ``None``."""
    internal = sys.modules.get(METRICS_MODULE)
    if internal is None:
        return None
    provider = getattr(internal, "_METER_PROVIDER", _MISSING)
    if provider is None and not _METER_ENV:
        return None
    if provider is _MISSING or provider is None:
        provider = internal.get_meter_provider()
    if isinstance(provider, internal.NoOpMeterProvider):
        return None
    if type(provider).__name__ == "_ProxyMeterProvider":  # the API's default
        return None
    return provider


def providers_configured() -> bool:
    """True when the application configured a global tracer or meter provider."""
    return tracer_provider() is not None or meter_provider() is not None


def suppress_keys() -> tuple[Any, Any]:
    """The context keys (all instrumentation, HTTP instrumentation) that turn
    instrumentation off, each ``None`` if this API release lacks it. Imports
    ``opentelemetry.context``."""
    from opentelemetry import context  # lazy: only once tracing is on

    return (
        getattr(context, "_SUPPRESS_INSTRUMENTATION_KEY", None),
        getattr(context, "_SUPPRESS_HTTP_INSTRUMENTATION_KEY", None),
    )
