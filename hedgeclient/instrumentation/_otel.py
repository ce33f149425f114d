"""OpenTelemetry traces and metrics for :class:`~hedgeclient.HedgedTransport`.

:class:`OpenTelemetry` is the configuration a transport takes
(``HedgedTransport(opentelemetry=...)``); by default a transport uses the global tracer
and meter providers whenever ``opentelemetry-api`` is installed (the ``otel`` extra)
and a provider is configured, and does nothing otherwise. The spans, attributes and
metrics are listed in ``docs/tracing.md`` and in the modules ``_otel_trace`` and
``_otel_metrics``; their names in ``_otel_names``.

This module imports no OpenTelemetry package: they are imported when a transport
enables tracing, so ``import hedgeclient.instrumentation`` works without them.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, final

from hedgeclient._checks import check_int, shown

if TYPE_CHECKING:
    import httpx
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from hedgeclient._events import HedgeHook
    from hedgeclient.instrumentation._otel_metrics import OtelMetricsHook
    from hedgeclient.instrumentation._otel_request import RequestTrace
    from hedgeclient.instrumentation._otel_trace import Tracing

__all__ = ["OpenTelemetry", "Telemetry", "telemetry_for"]

_EXTRA_HINT = "install the `otel` extra: pip install 'hedgeclient[otel]'"


def api_installed() -> bool:
    """Whether ``opentelemetry-api`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no `opentelemetry` namespace package at all
        return False


@final
class OpenTelemetry:
    """OpenTelemetry tracing and metrics of a :class:`~hedgeclient.HedgedTransport`.

    Pass it as ``HedgedTransport(opentelemetry=OpenTelemetry(...))`` to choose the
    providers or turn one signal off; ``opentelemetry=True`` (the default) is
    ``OpenTelemetry()`` when ``opentelemetry-api`` is installed. Nothing runs on a
    request while no provider is configured: the check is one look-up per request.

    Traces: one span per logical request (``hedged GET``, kind ``INTERNAL``) and one
    ``CLIENT`` span per attempt under it, following the HTTP semantic conventions
    (v1.44.0), with ``hedgeclient.*`` attributes: role, why a backup was sent, outcome,
    replica, hedge delay, and why a due backup was not sent. A loser ends UNSET with a
    ``hedgeclient.cancelled`` event, never ERROR. Each attempt's headers carry the trace
    context naming its own span (the global propagator). With
    ``opentelemetry-instrumentation-httpx`` on as well, HTTP instrumentation is
    suppressed under an attempt, so no attempt is traced twice.

    Metrics: ``http.client.request.duration`` per attempt, and ``hedgeclient.requests``,
    ``hedgeclient.hedges``, ... mirroring the Prometheus metrics with the same bounded
    attributes.

    Example usage::

        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        transport = HedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
            opentelemetry=OpenTelemetry(tracer_provider=provider),
        )

    Args:
        tracer_provider: the tracer provider of the spans; default (``None``) the
            global one, looked up per request (so one set after the transport was
            built is used).
        meter_provider: the meter provider of the metrics; default (``None``) the
            global one, looked up per request.
        traces: record spans (and propagate trace context per attempt); default true.
        metrics: record metrics; default true.
        max_routes: distinct ``hedgeclient.route`` values per client, ≥ 1; later routes
            are recorded as ``other``. Default 1,000.
        max_replicas: distinct ``hedgeclient.replica`` values per client, ≥ 1; later
            ones as ``other``. Default 100.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (the message names the
            ``otel`` extra).
        TypeError: a parameter has the wrong type.
        ValueError: a cap is below 1.

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "max_replicas",
        "max_routes",
        "meter_provider",
        "metrics",
        "tracer_provider",
        "traces",
    )

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        traces: bool = True,
        metrics: bool = True,
        max_routes: int = 1000,
        max_replicas: int = 100,
    ) -> None:
        if not api_installed():
            msg = f"hedgeclient's OpenTelemetry support needs opentelemetry-api: {_EXTRA_HINT}"
            raise ImportError(msg)
        from opentelemetry import metrics as otel_metrics
        from opentelemetry import trace

        if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
            msg = "`tracer_provider` must be an opentelemetry TracerProvider, "
            msg += f"got {shown(tracer_provider)}"
            raise TypeError(msg)
        if meter_provider is not None and not isinstance(
            meter_provider, otel_metrics.MeterProvider
        ):
            msg = "`meter_provider` must be an opentelemetry MeterProvider, "
            msg += f"got {shown(meter_provider)}"
            raise TypeError(msg)
        for name, value in (("traces", traces), ("metrics", metrics)):
            if not isinstance(value, bool):
                msg = f"`{name}` must be a bool, got {shown(value)}"
                raise TypeError(msg)
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.traces = traces
        self.metrics = metrics
        self.max_routes = check_int("max_routes", max_routes, 1)
        self.max_replicas = check_int("max_replicas", max_replicas, 1)

    def __repr__(self) -> str:
        return (
            f"OpenTelemetry(traces={self.traces}, metrics={self.metrics}, "
            f"max_routes={self.max_routes}, max_replicas={self.max_replicas})"
        )


@final
class Telemetry:
    """One transport's OpenTelemetry state: its tracer look-up and its metrics hook.

    Strictly private.
    """

    __slots__ = ("_metrics", "_tracing")

    def __init__(self, config: OpenTelemetry) -> None:
        from hedgeclient.instrumentation._otel_metrics import OtelMetricsHook
        from hedgeclient.instrumentation._otel_trace import Tracing

        self._tracing: Tracing | None = Tracing(config.tracer_provider) if config.traces else None
        self._metrics: OtelMetricsHook | None = None
        if config.metrics:
            self._metrics = OtelMetricsHook(
                config.meter_provider, config.max_routes, config.max_replicas
            )

    def hooks(self) -> tuple[HedgeHook, ...]:
        """The metrics hook, to call with every request's record."""
        return () if self._metrics is None else (self._metrics,)

    def begin(self, request: httpx.Request, **facts: Any) -> RequestTrace | None:
        """Start tracing a request, or return ``None`` when no provider is configured.

        With a meter provider but no tracer provider, the trace object still suppresses
        HTTP instrumentation under each attempt (its ``http.client.request.duration``
        would count the attempt twice) and propagates the caller's trace context. With
        ``traces=False`` nothing is traced or suppressed: other instrumentation may
        trace the attempts.
        """
        tracing = self._tracing
        if tracing is None:
            return None
        tracer = tracing.tracer()
        if tracer is None and (self._metrics is None or self._metrics.instruments() is None):
            return None
        return tracing.begin(tracer, request, **facts)


def telemetry_for(option: object) -> Telemetry | None:
    """The transport's :class:`Telemetry` for ``HedgedTransport(opentelemetry=option)``.

    Raises:
        TypeError: ``option`` is neither a bool nor an :class:`OpenTelemetry`.
    """
    if option is False:
        return None
    if option is True:
        return Telemetry(OpenTelemetry()) if api_installed() else None
    if not isinstance(option, OpenTelemetry):
        msg = f"`opentelemetry` must be a bool or an OpenTelemetry, got {shown(option)}"
        raise TypeError(msg)
    return Telemetry(option)
