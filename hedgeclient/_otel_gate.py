"""Whether a transport's requests are traced: the cheap check before any OpenTelemetry
work, for ``HedgedTransport(opentelemetry=True)``.

No OpenTelemetry package is imported here, nor ``hedgeclient.instrumentation``: while
no tracer or meter provider is configured (``_compat.otel`` reads the API's globals),
nothing is built. Once one is (the API's global one is not its proxy or a no-op), the
transport's :class:`~hedgeclient.instrumentation._otel.Telemetry` is built (importing
the instrumentation), and it checks the providers itself, through the same
``_compat.otel`` functions, from then on.

Strictly private.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, final

from hedgeclient._compat.otel import providers_configured

if TYPE_CHECKING:
    from hedgeclient.instrumentation._otel import Telemetry

__all__ = ["OtelGate"]


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
