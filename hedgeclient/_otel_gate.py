"""Whether a transport's requests are traced: the cheap check before any OpenTelemetry
work, for ``HedgedTransport(opentelemetry=True)``.

No OpenTelemetry package is imported here, nor ``hedgeclient.instrumentation``: while
the application has not imported the OpenTelemetry API itself, no provider can have
been configured, and the check is a dictionary look-up in ``sys.modules``. Once a
tracer or meter provider is configured (the API's global one is not its proxy or a
no-op), the transport's :class:`~hedgeclient.instrumentation._otel.Telemetry` is built
(importing the instrumentation) and checks the providers itself, through the same
functions, from then on.

The global providers are read from the API's module globals (``_TRACER_PROVIDER`` and
``_METER_PROVIDER``, ``None`` until ``set_tracer_provider``/``set_meter_provider``):
the public getters test ``os.environ`` on every call, which costs more than the whole
per-request budget. When those globals are missing (another API release), or when
``OTEL_PYTHON_TRACER_PROVIDER``/``OTEL_PYTHON_METER_PROVIDER`` is set (a provider the
API loads on first use; read once, at import), the public getters are used.

Strictly private.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from hedgeclient.instrumentation._otel import Telemetry

__all__ = ["OtelGate", "meter_provider", "providers_configured", "tracer_provider"]

_MISSING: Final = object()
_TRACE_ENV: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_METER_ENV: Final = "OTEL_PYTHON_METER_PROVIDER" in os.environ


def tracer_provider() -> Any:
    """The global tracer provider the application configured, or ``None``."""
    trace = sys.modules.get("opentelemetry.trace")
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
    internal = sys.modules.get("opentelemetry.metrics._internal")
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


@final
class OtelGate:
    """A transport's OpenTelemetry state, built when first needed. Strictly private.

    Args:
        option: ``HedgedTransport(opentelemetry=...)``: ``True`` (the global providers,
            once configured) or an ``OpenTelemetry`` (built at once).

    Raises:
        TypeError: ``option`` is neither a bool nor an ``OpenTelemetry``.
    """

    __slots__ = ("_lock", "_option", "telemetry")

    def __init__(self, option: object) -> None:
        self._option = option
        self._lock = threading.Lock()
        self.telemetry: Telemetry | None = None
        if option is not True:
            self.telemetry = self._build()

    def ready(self) -> Telemetry | None:
        """The telemetry, built now (once, whatever the threads) if a provider was
        configured since; else ``None``."""
        if self.telemetry is None and providers_configured():
            with self._lock:
                if self.telemetry is None:
                    self.telemetry = self._build()
        return self.telemetry

    def _build(self) -> Telemetry | None:
        from hedgeclient.instrumentation._otel import telemetry_for  # lazy: optional package

        return telemetry_for(self._option)
