"""The names hedgeclient's OpenTelemetry spans and metrics carry: a public contract.

Pure constants (no OpenTelemetry import), so docs and tests can name them without the
API installed. The HTTP names follow the OpenTelemetry semantic conventions for HTTP
(stable since v1.23.0); hedgeclient pins and tests against v1.44.0
(:data:`SEMCONV_VERSION`), whose schema URL its tracer and meter declare.

Sources: OpenTelemetry semantic conventions, "Semantic conventions for HTTP spans" and
"Semantic conventions for HTTP metrics" (``docs/http/http-spans.md``,
``docs/http/http-metrics.md``); the attribute registry (``http.*``, ``server.*``,
``url.*``, ``error.*``, ``network.*``).

Strictly private; the values are documented in ``docs/tracing.md``.
"""

from __future__ import annotations

from typing import Final

SEMCONV_VERSION: Final = "1.44.0"
"""The semantic-conventions version the HTTP names follow and the tests pin."""

SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
"""The schema URL of hedgeclient's tracer and meter."""

SCOPE: Final = "hedgeclient"
"""The instrumentation scope (tracer and meter name)."""

# -- semantic-convention attributes (stable) -------------------------------------------
HTTP_REQUEST_METHOD: Final = "http.request.method"
HTTP_REQUEST_METHOD_ORIGINAL: Final = "http.request.method_original"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
HTTP_REQUEST_RESEND_COUNT: Final = "http.request.resend_count"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
URL_FULL: Final = "url.full"
ERROR_TYPE: Final = "error.type"

KNOWN_METHODS: Final = frozenset(
    ("CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")
)
"""RFC 9110 methods and PATCH (RFC 5789); any other is reported as ``_OTHER``."""

# -- hedgeclient's own attributes -------------------------------------------------------
CLIENT: Final = "hedgeclient.client"
ROUTE: Final = "hedgeclient.route"
OUTCOME: Final = "hedgeclient.outcome"
HEDGE_DELAY: Final = "hedgeclient.hedge_delay"
ATTEMPTS: Final = "hedgeclient.attempts"
WINNER: Final = "hedgeclient.winner"
SUPPRESS_REASON: Final = "hedgeclient.suppress_reason"
CANCELLED_BY_CALLER: Final = "hedgeclient.cancelled_by_caller"
REPLICA: Final = "hedgeclient.replica"
ATTEMPT_ROLE: Final = "hedgeclient.attempt.role"
ATTEMPT_TRIGGER: Final = "hedgeclient.attempt.trigger"
ATTEMPT_OUTCOME: Final = "hedgeclient.attempt.outcome"

CANCELLED_EVENT: Final = "hedgeclient.cancelled"
"""The event a cancelled or discarded attempt (and a request its caller cancelled) gets."""
CANCEL_REASON: Final = "hedgeclient.cancel_reason"
"""On :data:`CANCELLED_EVENT`: ``another_attempt_won``, ``caller_cancelled`` or
``transport_closed``."""
HAD_RESPONSE: Final = "hedgeclient.had_response"
"""On :data:`CANCELLED_EVENT`: true when the attempt's response headers had arrived (its
response was closed unread)."""

# -- metrics ----------------------------------------------------------------------------
HTTP_CLIENT_REQUEST_DURATION: Final = "http.client.request.duration"
HTTP_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""The bucket boundaries the semantic conventions advise for ``http.client.request.duration``
(seconds)."""

REQUESTS: Final = "hedgeclient.requests"
ATTEMPTS_SENT: Final = "hedgeclient.attempts"
HEDGES: Final = "hedgeclient.hedges"
HEDGE_WINS: Final = "hedgeclient.hedge_wins"
HEDGES_SUPPRESSED: Final = "hedgeclient.hedges_suppressed"
CANCELLED_ATTEMPTS: Final = "hedgeclient.cancelled_attempts"
LOST_ATTEMPTS: Final = "hedgeclient.lost_attempts"
UNSENT_ATTEMPTS: Final = "hedgeclient.unsent_attempts"
REQUEST_DURATION: Final = "hedgeclient.request.duration"
ATTEMPT_DURATION: Final = "hedgeclient.attempt.duration"
HEDGE_DELAY_METRIC: Final = "hedgeclient.hedge_delay"
EVENT_LOOP_LAG: Final = "hedgeclient.event_loop.lag"
SAMPLES_LEFT_OUT: Final = "hedgeclient.delay_samples_left_out"
SAMPLE_LEFT_OUT_REASON: Final = "hedgeclient.sample_left_out_reason"
