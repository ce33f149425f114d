"""The spans of one request, once ``_otel_trace.Tracing`` began them: one
``CLIENT`` span per attempt (:meth:`RequestTrace.send`, in the attempt's own task), and
the end of every span with what the race decided (:meth:`RequestTrace.end`). See the
module docstring of ``_otel_trace`` for the whole picture.

Strictly private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from hedgeclient._compat.otel import suppress_keys
from hedgeclient.instrumentation import _otel_names as n
from hedgeclient.instrumentation._otel_http import error_type

if TYPE_CHECKING:
    import httpx

    from hedgeclient._events import AttemptKind, AttemptRecord, BackupTrigger, RequestRecord

__all__ = ["SUPPRESS_ALL", "SUPPRESS_HTTP", "AttemptView", "RequestTrace"]

# The context keys HTTP instrumentations check: set by a caller that wants none of them
# (an exporter's own requests), and by us around each attempt (private in the API:
# ``_compat.otel`` says why); None if a release removes them.
SUPPRESS_ALL, SUPPRESS_HTTP = suppress_keys()


class AttemptView(Protocol):
    """What a span needs of an attempt (the race's ``Attempt`` is one)."""

    @property
    def number(self) -> int:
        """1 for the primary attempt, 2 for the first backup, ..."""
        ...

    @property
    def kind(self) -> AttemptKind:
        """``primary`` or ``backup``."""
        ...

    @property
    def replica(self) -> str:
        """The replica origin the attempt goes to."""
        ...

    @property
    def started(self) -> float:
        """When it was sent (anyio clock, seconds)."""
        ...

    @property
    def trigger(self) -> BackupTrigger | None:
        """Why a backup was sent; ``None`` for the primary."""
        ...


@final
class RequestTrace:
    """The spans of one request. Strictly private.

    Attributes:
        span: the request's span, or ``None`` (no tracer: context is only propagated).
    """

    __slots__ = (
        "_base",
        "_ctx",
        "_name",
        "_spans",
        "_start",
        "_tail",
        "_token",
        "_tracer",
        "_wall0",
        "span",
    )

    def __init__(
        self,
        tracer: trace.Tracer | None,
        span: trace.Span | None,
        ctx: otel_context.Context,
        name: str,
        base: dict[str, Any],
        tail: str,
        wall0: int,
        start: float,
    ) -> None:
        self._tracer = tracer
        self.span = span
        self._ctx = ctx
        self._name = name
        self._base = base
        self._tail = tail
        self._wall0 = wall0
        self._start = start
        self._spans: dict[int, trace.Span] = {}
        self._token = otel_context.attach(ctx)

    def ids(self) -> tuple[str | None, str | None]:
        """The request span's (trace id, span id) in hex, when it is sampled."""
        span = self.span
        if span is None:
            return None, None
        sc = span.get_span_context()
        if not sc.trace_flags.sampled:
            return None, None
        return format(sc.trace_id, "032x"), format(sc.span_id, "016x")

    async def send(
        self, attempt: AttemptView, request: httpx.Request, inner: httpx.AsyncBaseTransport
    ) -> httpx.Response:
        """Send one attempt through ``inner`` under its own span; return at headers."""
        ctx = self._ctx
        span = None
        tracer = self._tracer
        if tracer is not None:
            attributes = {
                **self._base,
                n.URL_FULL: attempt.replica + self._tail,
                n.ATTEMPT_ROLE: attempt.kind,
                n.REPLICA: attempt.replica,
            }
            number = attempt.number
            if number > 1:
                attributes[n.HTTP_REQUEST_RESEND_COUNT] = number - 1
                if attempt.trigger is not None:
                    attributes[n.ATTEMPT_TRIGGER] = attempt.trigger
            span = self._spans[number] = tracer.start_span(
                self._name,
                ctx,
                SpanKind.CLIENT,
                attributes,
                start_time=self._wall0 + round((attempt.started - self._start) * 1e9),
            )
            ctx = trace.set_span_in_context(span, ctx)
        if SUPPRESS_HTTP is not None:
            ctx = otel_context.set_value(SUPPRESS_HTTP, True, ctx)
        propagate.inject(request.headers, ctx)
        token = otel_context.attach(ctx)
        try:
            return await inner.handle_async_request(request)
        except Exception as exc:
            if span is not None and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc) or type(exc).__qualname__))
            raise
        finally:
            otel_context.detach(token)

    def end(
        self,
        record: RequestRecord,
        status: int | None,
        aborted: bool,
        error: BaseException | None,
    ) -> None:
        """End every attempt's span, then the request's, with what the race decided.

        Args:
            record: the request's record.
            status: the status of the response returned, or ``None``.
            aborted: the transport was closed under the request.
            error: the exception leaving the request, if any.
        """
        if self.span is None:
            return
        winner = None
        if aborted:
            why = "transport_closed"
        elif record.cancelled_by_caller:
            why = "caller_cancelled"
        else:
            why = "another_attempt_won"
            for number, attempt in enumerate(record.attempts, 1):
                if attempt.outcome == "won":
                    winner = number
        wall0 = self._wall0
        for number, attempt in enumerate(record.attempts, 1):
            span = self._spans.get(number)
            if span is None:
                continue
            end = wall0 + round((attempt.started + attempt.duration) * 1e9)
            if span.is_recording():
                _end_attempt(span, attempt, why, winner, end)
            span.end(end_time=end)
        self._end_request(record, status, aborted, error, winner)

    def _end_request(
        self,
        record: RequestRecord,
        status: int | None,
        aborted: bool,
        error: BaseException | None,
        winner: int | None,
    ) -> None:
        span = self.span
        assert span is not None
        # The caller returns once every loser is unwound: the span ends with the last.
        last = max((a.started + a.duration for a in record.attempts), default=0.0)
        end = self._wall0 + round(max(record.duration, last) * 1e9)
        if span.is_recording():
            attributes: dict[str, Any] = {n.ATTEMPTS: len(record.attempts)}
            if winner is not None:
                attributes[n.WINNER] = winner
            if record.suppressed is not None:
                attributes[n.SUPPRESS_REASON] = record.suppressed
            if status is not None:
                attributes[n.HTTP_RESPONSE_STATUS_CODE] = status
                kind = error_type(status)
                if kind is not None:
                    attributes[n.ERROR_TYPE] = kind
                span.set_status(Status(StatusCode.OK if kind is None else StatusCode.ERROR))
            elif aborted:
                attributes[n.ERROR_TYPE] = "TransportClosedError"
                span.set_status(Status(StatusCode.ERROR, "the transport was closed"))
            elif record.cancelled_by_caller:
                attributes[n.CANCELLED_BY_CALLER] = True
                span.add_event(n.CANCELLED_EVENT, {n.CANCEL_REASON: "caller_cancelled"}, end)
            elif error is not None:
                attributes[n.ERROR_TYPE] = type(error).__qualname__
                span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__qualname__))
            span.set_attributes(attributes)
        span.end(end_time=end)

    def close(self) -> None:
        """Make the caller's own context current again (after the hooks ran)."""
        otel_context.detach(self._token)


def _end_attempt(
    span: trace.Span, attempt: AttemptRecord, why: str, winner: int | None, end: int
) -> None:
    """Set what the race decided on a recording attempt span."""
    outcome = attempt.outcome
    attributes: dict[str, Any] = {n.ATTEMPT_OUTCOME: outcome}
    if attempt.status is not None:
        attributes[n.HTTP_RESPONSE_STATUS_CODE] = attempt.status
    if outcome in ("lost", "cancelled") or (outcome == "unsent" and attempt.error_type is None):
        # a loser (or an attempt stopped while it waited for a pool connection): UNSET,
        # with why, never ERROR
        event: dict[str, Any] = {n.CANCEL_REASON: why, n.HAD_RESPONSE: outcome == "lost"}
        if winner is not None:
            event[n.WINNER] = winner
        span.add_event(n.CANCELLED_EVENT, event, timestamp=end)
    elif attempt.error_type is not None:  # the exception is on the span already
        attributes[n.ERROR_TYPE] = attempt.error_type
    elif (kind := error_type(attempt.status)) is not None:  # a status >= 400
        attributes[n.ERROR_TYPE] = kind
        span.set_status(Status(StatusCode.ERROR))
    span.set_attributes(attributes)
