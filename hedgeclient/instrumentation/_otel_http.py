"""HTTP facts as the semantic conventions spell them: method, server address and port, a
redacted ``url.full``, and ``error.type``.

No OpenTelemetry import. Strictly private.
"""

from __future__ import annotations

from typing import Final

import httpx

from hedgeclient.instrumentation._otel_names import (
    HTTP_REQUEST_METHOD,
    HTTP_REQUEST_METHOD_ORIGINAL,
    KNOWN_METHODS,
    SERVER_ADDRESS,
    SERVER_PORT,
)

__all__ = ["error_type", "method_attributes", "span_name", "url_full", "url_tail"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# Query keys whose values the semantic conventions say to redact (signed URLs).
_SECRET_KEYS: Final = ("AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature")
_SECRET_MARKERS: Final = tuple(k.encode() + b"=" for k in _SECRET_KEYS)


def method_attributes(method: str, url: httpx.URL) -> dict[str, str | int]:
    """``http.request.method`` (``_OTHER`` plus the original for an unknown method),
    ``server.address`` and ``server.port`` of a request to ``url``."""
    attributes: dict[str, str | int] = {}
    if method in KNOWN_METHODS:
        attributes[HTTP_REQUEST_METHOD] = method
    else:
        attributes[HTTP_REQUEST_METHOD] = "_OTHER"
        attributes[HTTP_REQUEST_METHOD_ORIGINAL] = method
    attributes[SERVER_ADDRESS] = url.host
    port = url.port
    if port is None:
        port = _DEFAULT_PORTS.get(url.scheme)
    if port is not None:
        attributes[SERVER_PORT] = port
    return attributes


def span_name(method: str) -> str:
    """The HTTP span name: the method, or ``HTTP`` for a method the conventions do not know."""
    return method if method in KNOWN_METHODS else "HTTP"


def url_full(url: httpx.URL) -> str:
    """``url`` as ``url.full`` carries it: credentials and signed-URL query values
    replaced by ``REDACTED``."""
    query = url.query
    if url.userinfo:
        url = url.copy_with(username="REDACTED", password="REDACTED")
    if query and any(marker in query for marker in _SECRET_MARKERS):
        params = [(k, "REDACTED" if k in _SECRET_KEYS else v) for k, v in url.params.multi_items()]
        url = url.copy_with(params=params)
    return str(url)


def url_tail(full: str) -> str:
    """What follows the origin in a ``url.full`` (path, query, fragment): an attempt's
    ``url.full`` is its replica's origin and this."""
    rest = full.partition("://")[2]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return rest[cut:]


def error_type(status: int | None, exception: BaseException | None = None) -> str | None:
    """``error.type``: the exception's class name (as opentelemetry-instrumentation-httpx
    reports it), else the status code as a string when it is 400 or more, else None."""
    if exception is not None:
        return type(exception).__qualname__
    if status is not None and status >= 400:
        return str(status)
    return None
