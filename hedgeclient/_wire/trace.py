"""Per attempt, at the httpcore boundary: when it leaves the pool's queue, whether it is
still connecting, and how long a backup may wait for its response headers.

Strictly private.
"""

from __future__ import annotations

import math
from typing import Any, final

import anyio
import httpx

from hedgeclient._attempt import Attempt

__all__ = ["OnWire", "read_deadline", "trim_timeouts", "untrim_timeouts"]


@final
class OnWire:
    """httpcore ``trace`` callback: when an attempt leaves the pool's queue, and whether
    it is still connecting.

    httpcore emits no event while a request waits for a pool connection, so the first
    event (``connect_tcp.started`` on a new connection, ``send_request_headers.started``
    on a reused one) is when the request goes on the wire. From ``connect_tcp.started``
    until the first ``http11.``/``http2.`` event the attempt is connecting (TCP, then
    TLS): a black hole's attempts stay there. At that first protocol event the callback
    removes itself from the attempt's extensions, so later events cost nothing, and
    calls any ``trace`` callback of the caller's own (which stays).
    """

    __slots__ = ("_attempt", "_extensions", "_user")

    def __init__(self, attempt: Attempt, extensions: dict[str, Any]) -> None:
        self._attempt = attempt
        self._extensions = extensions
        self._user = extensions.get("trace")

    def follow(self, extensions: dict[str, Any]) -> None:
        """Remove this callback from ``extensions`` rather than from the dict it was built
        with: the one the attempt's ``httpx.Request`` carries (httpx copies the dict it is
        given), so that later events cost nothing and no reference cycle is left."""
        self._extensions = extensions

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        attempt = self._attempt
        if math.isnan(attempt.on_wire):
            attempt.on_wire = anyio.current_time()
        if name.startswith("connection."):
            if name == "connection.connect_tcp.started":
                attempt.connecting = anyio.current_time()
        else:  # the request itself is on its way: connected
            attempt.connecting = math.nan
            if self._user is None:
                self._extensions.pop("trace", None)
        if self._user is not None:
            await self._user(name, info)


def read_deadline(request: httpx.Request, start: float) -> float:
    """When the request's httpx read timeout, counted from ``start``, runs out."""
    timeout = request.extensions.get("timeout")
    read = timeout.get("read") if timeout else None
    return math.inf if read is None else start + read


def trim_timeouts(
    extensions: dict[str, Any], timeout_at: float, attempt: Attempt
) -> dict[str, Any]:
    """Give a backup's httpx timeouts no more than the time left before ``timeout_at``,
    for its race only (:func:`untrim_timeouts` gives them back once it has headers)."""
    timeout = extensions.get("timeout")
    if timeout:
        left = max(0.0, timeout_at - attempt.started)
        extensions["timeout"] = {
            k: left if v is None or v > left else v for k, v in timeout.items()
        }
    return extensions


def untrim_timeouts(sent: httpx.Request, request: httpx.Request) -> None:
    """Give the attempt ``sent`` the caller's own timeouts (those of ``request``) for
    the reads of its body, once its response headers are in.

    httpcore reads a body's read timeout from ``request.extensions["timeout"]`` of the
    request it was handed: over HTTP/1.1 once, as the body's iteration starts; over
    HTTP/2 before each read. httpx hands it the attempt's own extensions dict, so
    setting the caller's timeouts back in it here, before any body read, reaches both
    (issue 23, BH-40: a trimmed body timed out where plain httpx read it whole).
    """
    timeout = request.extensions.get("timeout")
    if timeout:
        sent.extensions["timeout"] = timeout
