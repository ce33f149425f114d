"""Sending one attempt: the request it sends to its replica, and what comes back.

:class:`AttemptSender` is the race's ``send`` (bound to one request with
``functools.partial``): it builds the attempt's copy of the request
(:func:`~hedgeclient._wire.copy.attempt_request`: the replica's URL, the attempt header,
a tied request's headers, a backup's timeouts trimmed for its wait for headers,
httpcore's ``trace`` callback), sends it through the inner transport (or the second
pool, ``_fleet``), and returns at response headers, or at the first body bytes for a
race decided on the first byte.

Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, final

import anyio
import httpx

from hedgeclient._attempt import Attempt
from hedgeclient._compat import Repairs
from hedgeclient._fleet import Fleet
from hedgeclient._policy.tied import TIE_HEADER, TWIN_HEADER, is_dropped
from hedgeclient._replicas.services import Service
from hedgeclient._wire.copy import attempt_request
from hedgeclient._wire.first_byte import read_first_byte
from hedgeclient._wire.trace import OnWire, trim_timeouts, untrim_timeouts

if TYPE_CHECKING:
    from hedgeclient.instrumentation._otel_request import RequestTrace

__all__ = ["AttemptSender"]


@final
class AttemptSender:
    """Sends the attempts of one transport's requests. Strictly private.

    Args:
        fleet: the transport's replicas and inner transports.
        repairs: the httpcore repairs of the inner transport.
        non_fatal: statuses that do not end a race.
        attempt_header: header naming the attempt's number, or ``None``.
        preserve_host: keep the logical ``Host`` header on replica requests.
    """

    __slots__ = ("_attempt_header", "_fleet", "_non_fatal", "_preserve_host", "_repairs")

    def __init__(
        self,
        *,
        fleet: Fleet,
        repairs: Repairs,
        non_fatal: Collection[int],
        attempt_header: str | None,
        preserve_host: bool,
    ) -> None:
        self._fleet = fleet
        self._repairs = repairs
        self._non_fatal = non_fatal
        self._attempt_header = attempt_header
        self._preserve_host = preserve_host

    async def send(
        self,
        request: httpx.Request,
        service: Service | None,
        body: bytes | None,
        timeout_at: float,
        trace: RequestTrace | None,
        first_byte: bool,
        attempt: Attempt,
    ) -> httpx.Response:
        """Send one attempt of ``request`` and return its response.

        Args:
            request: the caller's request (never modified).
            service: its service, or ``None`` to send to the request's own URL.
            body: its body when the request may be sent again (it is eligible for
                hedging), else ``None``: the request is sent once (it is not eligible:
                ``_policy.ineligible``), and so carries no attempt header.
            timeout_at: when the request's httpx read timeout runs out (the loop's
                clock, seconds): a backup's wait for its response headers ends by
                then; its body reads get the caller's own timeouts.
            trace: the request's OpenTelemetry trace, or ``None``; a traced attempt goes
                through it (its span, its trace context).
            first_byte: a response whose status may win returns once its first body
                bytes arrived.
            attempt: the attempt (its number, replica, kind and tie).

        Raises:
            httpx.HTTPError: the inner transport's error (the race keeps it as data).
        """
        extensions: dict[str, Any] | None = None
        fleet = self._fleet
        repairs = self._repairs
        on_wire: OnWire | None = None
        if repairs.traced:
            extensions = dict(request.extensions)
            attempt.on_wire = math.nan  # until httpcore reports it off the pool's queue
            on_wire = extensions["trace"] = OnWire(attempt, extensions)
        trimmed = attempt.kind == "backup" and timeout_at < math.inf
        if trimmed:
            extensions = trim_timeouts(extensions or dict(request.extensions), timeout_at, attempt)
        if attempt.lane:
            inner, lane = fleet.transport_for(attempt)
            if lane and fleet.lane_repairs is not None:
                repairs = fleet.lane_repairs
        else:
            inner = fleet.inner
        # Only a request that may have a twin is marked: HedgeMiddleware cancels a marked
        # handler whose client leaves (cancel="hedged"), which would stop a write sent
        # once half-way when its caller times out (issue 23, BH-49). ``body`` is None
        # exactly when the request is not eligible (``_sending``), so it gets no backup.
        copy = attempt_request(
            request,
            service,
            attempt.replica,
            attempt.number,
            body,
            attempt_header=self._attempt_header if body is not None else None,
            preserve_host=self._preserve_host,
            extensions=extensions,
        )
        if on_wire is not None:
            on_wire.follow(copy.extensions)
        if attempt.tie is not None:
            assert attempt.twin is not None
            copy.headers[TIE_HEADER] = attempt.tie
            copy.headers[TWIN_HEADER] = attempt.twin
        try:
            if trace is None:
                response = await inner.handle_async_request(copy)
            else:
                response = await trace.send(attempt, copy, inner)
            if trimmed:
                # The trim bounds the race for headers only: the body (in a race
                # decided on the first byte, that byte too) reads with the caller's
                # own timeouts, as a plain request's would (issue 23, BH-40).
                untrim_timeouts(copy, request)
            if attempt.tie is not None and is_dropped(response):
                await response.aread()  # a few bytes: the connection stays reusable
        except anyio.get_cancelled_exc_class():
            repairs.after_cancel()  # synchronously, before the next checkpoint
            raise
        if first_byte and response.status_code not in self._non_fatal:
            await read_first_byte(response)  # closes the response if it fails or is cancelled
        return response
