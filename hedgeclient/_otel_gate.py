"""Whether a transport's requests are traced: the cheap check before any OpenTelemetry
work, for ``HedgedTransport(opentelemetry=True)``.

No OpenTelemetry package is imported here, nor ``hedgeclient.instrumentation``: while
the application has not imported the OpenTelemetry API itself, no provider can have
been configured, and the check is one dictionary look-up in ``sys.modules``. Once a
tracer or meter provider is configured (the API's global one is not its proxy or a
no-op), the transport's :class:`~hedgeclient.instrumentation._otel.Telemetry` is built
(importing the instrumentation) and checks the providers itself from then on.

Strictly private.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from hedgeclient.instrumentation._otel import Telemetry

__all__ = ["OtelGate", "providers_configured"]


def providers_configured() -> bool:
    """True when the application configured a global tracer or meter provider."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return True
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is not None:
        provider = metrics.get_meter_provider()
        if not isinstance(provider, metrics.NoOpMeterProvider):
            return type(provider).__name__ != "_ProxyMeterProvider"  # the API's default
    return False


@final
class OtelGate:
    """A transport's OpenTelemetry state, built when first needed. Strictly private.

    Args:
        option: ``HedgedTransport(opentelemetry=...)``: ``True`` (the global providers,
            once configured) or an ``OpenTelemetry`` (built at once).

    Raises:
        TypeError: ``option`` is neither a bool nor an ``OpenTelemetry``.
    """

    __slots__ = ("_option", "telemetry")

    def __init__(self, option: object) -> None:
        self._option = option
        self.telemetry: Telemetry | None = None
        if option is not True:
            self.telemetry = self._build()

    def ready(self) -> Telemetry | None:
        """The telemetry, built now if a provider was configured since; else ``None``."""
        if self.telemetry is None and providers_configured():
            self.telemetry = self._build()
        return self.telemetry

    def _build(self) -> Telemetry | None:
        from hedgeclient.instrumentation._otel import telemetry_for  # lazy: optional package

        return telemetry_for(self._option)
