"""OpenTelemetry spans of hedged requests: one span for the logical request, one
``CLIENT`` span per attempt, its child.

Per request, :meth:`Tracing.begin` (the transport calls it once) looks up the tracer
provider in force: with none configured (the API's proxy or a no-op provider) it
returns ``None`` and nothing else runs. Otherwise it starts the request's span (kind
``INTERNAL``: the semantic conventions say an instrumentation that traces each attempt
should not also emit a logical ``CLIENT`` span) and makes it current. Each attempt,
in its own task, goes through :meth:`RequestTrace.send`: a ``CLIENT`` span starts, the
trace context naming that span is injected into the attempt's headers (the global
propagator: W3C ``traceparent`` by default), and the inner transport is called in a
context where that span is current and HTTP instrumentation is suppressed, so that
``opentelemetry-instrumentation-httpx`` does not trace the attempt a second time. After
the race, :meth:`RequestTrace.end` ends every span with the attempt's outcome at the
instant it ended (the race's anyio clock, converted to wall-clock nanoseconds).

A loser (outcome ``lost`` or ``cancelled``) ends with status UNSET and an event
``hedgeclient.cancelled`` saying why; never ERROR. A failed attempt is ERROR with
``error.type``. The request's span is OK when a response below 400 was returned (so a
failed attempt under it reads as recovered), ERROR with ``error.type`` otherwise.

Sources: OpenTelemetry semantic conventions v1.44.0, "Semantic conventions for HTTP
spans" (client span, status, retries); semantic-conventions issue #1712 (cancelled
hedges reported as errors); the OpenTelemetry trace API.

Strictly private.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, final

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from hedgeclient._compat.otel import tracer_provider
from hedgeclient._version import __version__
from hedgeclient.instrumentation import _otel_names as n
from hedgeclient.instrumentation._otel_http import method_attributes, span_name, url_full, url_tail
from hedgeclient.instrumentation._otel_request import SUPPRESS_ALL, SUPPRESS_HTTP, RequestTrace

if TYPE_CHECKING:
    import httpx

__all__ = ["Tracing"]

_OFF: Final = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _suppressed(ctx: otel_context.Context) -> bool:
    """True when the caller's context turns instrumentation off."""
    return bool(
        (SUPPRESS_ALL is not None and otel_context.get_value(SUPPRESS_ALL, ctx))
        or (SUPPRESS_HTTP is not None and otel_context.get_value(SUPPRESS_HTTP, ctx))
    )


@final
class Tracing:
    """One transport's tracer, looked up per request. Strictly private.

    Args:
        provider: a tracer provider, or ``None`` for the global one (so a provider
            configured after the transport was built is used).
    """

    __slots__ = ("_explicit", "_provider", "_tracer")

    def __init__(self, provider: trace.TracerProvider | None) -> None:
        self._explicit = provider
        self._provider: trace.TracerProvider | None = None
        self._tracer: trace.Tracer | None = None

    def tracer(self) -> trace.Tracer | None:
        """The tracer in force, or ``None`` when no provider is configured."""
        provider = self._explicit or tracer_provider()
        if provider is not self._provider:  # first use, or a new global provider
            tracer = None
            if provider is not None and not isinstance(provider, _OFF):
                tracer = provider.get_tracer(n.SCOPE, __version__, schema_url=n.SCHEMA_URL)
                if isinstance(tracer, trace.NoOpTracer):  # e.g. OTEL_SDK_DISABLED=true
                    tracer = None
            self._tracer, self._provider = tracer, provider
        return self._tracer

    def begin(
        self,
        tracer: trace.Tracer | None,
        request: httpx.Request,
        *,
        client: str,
        route: str,
        delay: float | None,
        start: float,
    ) -> RequestTrace | None:
        """Start tracing one request (``tracer`` ``None``: inject and suppress only).

        Returns ``None`` when the caller's context suppresses instrumentation.
        """
        parent = otel_context.get_current()
        if _suppressed(parent):
            return None
        if tracer is None:
            return RequestTrace(None, None, parent, "", {}, "", 0, start)
        wall0 = time.time_ns() - round((anyio.current_time() - start) * 1e9)
        method = request.method
        url = request.url
        http: dict[str, Any] = method_attributes(method, url)
        full = url_full(url)
        attributes: dict[str, Any] = {**http, n.URL_FULL: full, n.CLIENT: client}
        attributes[n.ROUTE] = route
        if delay is not None:
            attributes[n.HEDGE_DELAY] = delay
        name = span_name(method)
        span = tracer.start_span(
            f"hedged {name}", parent, SpanKind.INTERNAL, attributes, start_time=wall0
        )
        ctx = trace.set_span_in_context(span, parent)
        return RequestTrace(tracer, span, ctx, name, http, url_tail(full), wall0, start)
