"""Sending one attempt: the request it sends to its replica, and what comes back.

:class:`AttemptSender` is the race's ``send`` (bound to one request with
``functools.partial``), one call per attempt. It builds the attempt's copy of the
request (:func:`attempt_request`: the replica's URL, the attempt header, a tied
request's headers, httpcore's ``trace`` callback :class:`OnWire`, a backup's timeouts
trimmed for its wait for headers), sends it through the inner transport it was given
(or the second pool, for a backup to the address its primary is still using), and
returns at response headers, or at the first body bytes for a race decided on the
first byte (``_wire.first_byte``).

The copy's ``httpx.Request`` itself is built by ``_compat.httpx`` (httpx's private
fast paths, feature-detected, with their reasons and measured costs).

Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import Any, Protocol, final

import httpx

from hedgeclient._attempt import Attempt
from hedgeclient._compat import Repairs
from hedgeclient._compat.httpx import attempt_copy
from hedgeclient._policy.tied import TIE_HEADER, TWIN_HEADER, is_dropped
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service
from hedgeclient._timer import now
from hedgeclient._wire.first_byte import read_first_byte

__all__ = ["AttemptSender", "AttemptTrace", "OnWire", "ReplayBody", "attempt_request"]


class AttemptTrace(Protocol):
    """A request's OpenTelemetry trace, as the sender uses it
    (``instrumentation._otel_request.RequestTrace`` is one)."""

    async def send(
        self, attempt: Attempt, request: httpx.Request, inner: httpx.AsyncBaseTransport
    ) -> httpx.Response:
        """Send ``request``, one attempt, through ``inner`` under its own span."""
        ...


@final
class AttemptSender:
    """Sends the attempts of one transport's requests. Strictly private.

    Args:
        inner: the inner transport.
        repairs: its httpcore repairs.
        lane: the second pool, through which a backup goes to an address its primary
            is still using (``_compat.lanes``), or ``None``.
        lane_repairs: the second pool's repairs (given with ``lane``).
        non_fatal: statuses that do not end a race.
        attempt_header: header naming the attempt's number, or ``None``.
        preserve_host: keep the logical ``Host`` header on replica requests.
        choice: the transport's replica choice, told when an attempt of a service leaves
            the pool's queue (``Choice.on_wire``), or ``None``.
    """

    __slots__ = (
        "_attempt_header", "_choice", "_inner", "_lane", "_non_fatal", "_preserve_host",
        "_repairs",
    )  # fmt: skip

    def __init__(
        self,
        *,
        inner: httpx.AsyncBaseTransport,
        repairs: Repairs,
        lane: httpx.AsyncBaseTransport | None = None,
        lane_repairs: Repairs | None = None,
        non_fatal: Collection[int],
        attempt_header: str | None,
        preserve_host: bool,
        choice: Choice | None = None,
    ) -> None:
        self._choice = choice
        self._inner = inner
        self._repairs = repairs
        self._lane = None if lane is None or lane_repairs is None else (lane, lane_repairs)
        self._non_fatal = non_fatal
        self._attempt_header = attempt_header
        self._preserve_host = preserve_host

    async def send(
        self,
        request: httpx.Request,
        service: Service | None,
        body: bytes | None,
        timeout_at: float,
        trace: AttemptTrace | None,
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
        inner, repairs = self._inner, self._repairs
        if attempt.lane and self._lane is not None:
            inner, repairs = self._lane
        prepared, attempt.prepared = attempt.prepared, None  # the backup hook's request
        extensions: dict[str, Any] | None = None if prepared is None else prepared.extensions
        on_wire: OnWire | None = None
        if repairs.traced:
            extensions = dict(request.extensions) if extensions is None else extensions
            attempt.on_wire = math.nan  # until httpcore reports it off the pool's queue
            choice = self._choice if service is not None else None  # it knows no other
            on_wire = extensions["trace"] = OnWire(attempt, extensions, choice)
        trimmed = attempt.kind == "backup" and timeout_at < math.inf
        if trimmed:  # its httpx timeouts: no more than the time left for its headers
            extensions = dict(request.extensions) if extensions is None else extensions
            timeout = extensions.get("timeout")
            if timeout:
                left = max(0.0, timeout_at - attempt.started)
                extensions["timeout"] = {
                    k: left if v is None or v > left else v for k, v in timeout.items()
                }
        # Only a request that may have a twin is marked: HedgeMiddleware cancels a marked
        # handler whose client leaves (cancel="hedged"), which would stop a write sent
        # once half-way when its caller times out (issue 23, BH-49). ``body`` is None
        # exactly when the request is not eligible (``_request``), so it gets no backup.
        if body is None and service is None and extensions is None:
            copy = request  # sent once, as it came, to its own origin: nothing to change
        else:
            copy = prepared or attempt_request(
                request, service, attempt.replica, attempt.number, body,
                attempt_header=self._attempt_header if body is not None else None,
                preserve_host=self._preserve_host, extensions=extensions,
            )  # fmt: skip
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
                # The trim bounds the race for headers only: the body (in a race decided
                # on the first byte, that byte too) reads with the caller's own timeouts,
                # as a plain request's would (issue 23, BH-40). httpcore reads a body's
                # read timeout from the extensions of the request it was handed (over
                # HTTP/1.1 once, as the body's iteration starts; over HTTP/2 before each
                # read): httpx hands it the copy's own dict, so setting the caller's
                # timeouts back in it here, before any body read, reaches both.
                timeout = request.extensions.get("timeout")
                if timeout:
                    copy.extensions["timeout"] = timeout
            if attempt.tie is not None and is_dropped(response):
                await response.aread()  # a few bytes: the connection stays reusable
        except BaseException as exc:  # cut short: a cancellation (no call to name the class)
            if repairs.active and not isinstance(exc, Exception):
                repairs.after_cancel()  # synchronously, before the next checkpoint
            raise
        if first_byte and response.status_code not in self._non_fatal:
            await read_first_byte(response)  # closes the response if it fails or is cancelled
        return response

    def prepare(
        self,
        request: httpx.Request,
        service: Service | None,
        body: bytes,
        hook: Callable[[httpx.Request], httpx.Request | None],
        number: int,
        replica: str,
    ) -> httpx.Request | None:
        """Build backup ``number``'s request to ``replica`` and hand it to the backup
        ``hook``; return the request the hook returned, to be sent as the backup, or
        ``None`` (the hook vetoed it).

        The hook gets the backup as it would be sent (the replica's URL, the attempt
        header, the caller's headers and body, a copy of its extensions) and may change
        it in place or return another request. Another request keeps the extensions it
        was given over the backup's (so its timeouts, its ``sni_hostname``, and the
        hedge's own ``trace`` reach the wire). Never called for a request that is sent
        once (a streaming body, a method not hedged): only a hedged request has backups.

        The backup stays on the replica chosen: its scheme, host and port are checked,
        since ``HedgeInfo.replica``, the replica statistics and the selector's feedback
        all name that replica (a header, a query parameter or a path may change).

        Raises:
            TypeError: the hook returned something other than an ``httpx.Request`` or
                ``None``, or a request whose body is a stream (it could not be sent
                again); the race logs it and sends no backup (``hook_error``).
            ValueError: the request returned goes to another origin than ``replica``
                (likewise).
            Exception: whatever the hook raises (likewise).
        """
        copy = attempt_request(
            request,
            service,
            replica,
            number,
            body,
            attempt_header=self._attempt_header,
            preserve_host=self._preserve_host,
            extensions=dict(request.extensions),
        )
        url = copy.url  # the hook may change the copy's URL in place: keep the chosen one
        backup = hook(copy)
        if backup is None:
            return None
        if backup is not copy:
            if not isinstance(backup, httpx.Request):
                msg = f"the backup hook must return an httpx.Request or None, got {backup!r}"
                raise TypeError(msg)
            try:
                backup.content  # noqa: B018 - raises when the body is a stream
            except httpx.RequestNotRead:
                msg = "the backup hook returned a request whose body is a stream: read it first"
                raise TypeError(msg) from None
            backup.extensions = {**copy.extensions, **backup.extensions}
        sent = backup.url
        if (sent.scheme, sent.host, sent.port) != (url.scheme, url.host, url.port):
            msg = (
                f"the backup hook must keep the backup on the replica chosen, {replica!r} "
                f"(a header, a query parameter or a path may change), got a request to "
                f"{sent.scheme}://{sent.netloc.decode('ascii')}"
            )
            raise ValueError(msg)
        return backup


def attempt_request(
    request: httpx.Request,
    service: Service | None,
    replica: str,
    number: int,
    body: bytes | None,
    *,
    attempt_header: str | None,
    preserve_host: bool,
    extensions: dict[str, object] | None = None,
) -> httpx.Request:
    """Build the request that attempt ``number`` of ``request`` sends to ``replica``.

    Args:
        request: the caller's request; never modified.
        service: its configured service, or ``None`` to send to the request's own URL.
        replica: the replica origin, one of ``service.replicas``.
        number: 1 for the primary attempt, 2 for the first backup, ...
        body: the request's body when it may be sent again (read, as the caller's
            request was, so inner layers may use ``.content``); ``None`` to reuse
            ``request.stream`` (an attempt that is never repeated).
        attempt_header: header naming ``number``, or ``None`` for none.
        preserve_host: keep the logical ``Host`` header; else the replica's.
        extensions: the attempt's own extensions (a dict it may change), or ``None``
            to share the request's.
    """
    own = extensions is not None
    if extensions is None:
        extensions = request.extensions
    target: httpx.URL | None = None
    if service is not None:
        target = service.replica_urls.get(replica)
        if target is None:  # it left the set while the request was in flight
            target = service.url(replica)
        sni = service.sni.get(replica)
        if sni is None:
            sni = target.scheme == "https" and target.host != service.logical_host
        if sni:
            if not own:
                extensions = {**extensions}
            extensions["sni_hostname"] = service.logical_host
    stream = ReplayBody(body) if body is not None else request.stream
    host = service is not None and not preserve_host  # the replica's Host
    return attempt_copy(
        request, target, stream, extensions, body, attempt_header, str(number), host
    )


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

    Leaving the queue is told to the replica choice (``Choice.on_wire``: the attempt is on
    its replica now) and to a primary whose hedge delay passed in the queue
    (``Attempt.off_queue``: its backup is looked at again).
    """

    __slots__ = ("_attempt", "_choice", "_extensions", "_user")

    def __init__(
        self, attempt: Attempt, extensions: dict[str, Any], choice: Choice | None = None
    ) -> None:
        self._attempt = attempt
        self._extensions = extensions
        self._user = extensions.get("trace")
        self._choice = choice

    def follow(self, extensions: dict[str, Any]) -> None:
        """Remove this callback from ``extensions`` rather than from the dict it was built
        with: the one the attempt's ``httpx.Request`` carries (httpx copies the dict it is
        given), so that later events cost nothing and no reference cycle is left."""
        self._extensions = extensions

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        result = self.note(name, info)
        if result is not None:  # the caller's own callback, async
            await result

    def note(self, name: str, info: dict[str, Any]) -> Any:
        """:meth:`__call__`'s work, synchronously (a sync client's httpcore calls it);
        returns what the caller's own callback returned (``None``, or an awaitable)."""
        attempt = self._attempt
        if math.isnan(attempt.on_wire):
            attempt.on_wire = now()
            if self._choice is not None:
                self._choice.on_wire(attempt)
            parked = attempt.off_queue
            if parked is not None:
                attempt.off_queue = None
                parked()
        if name.startswith("connection."):
            if name == "connection.connect_tcp.started":
                attempt.connecting = now()
        else:  # the request itself is on its way: connected
            attempt.connecting = math.nan
            if self._user is None:
                self._extensions.pop("trace", None)
        # The caller's own: async, or a sync client's sync one.
        return None if self._user is None else self._user(name, info)


@final
class ReplayBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A request body that every attempt sends again: one chunk of bytes.

    Unlike ``httpx.ByteStream`` its async iterator is no generator, so an attempt
    cancelled while it sends its body (a loser) leaves no suspended generator for the
    garbage collector (trio warns as it collects one).
    """

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        return iter((self._body,))

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._body)


@final
class _Once:
    """An async iterator of one chunk."""

    __slots__ = ("_chunk",)

    def __init__(self, chunk: bytes) -> None:
        self._chunk: bytes | None = chunk

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        chunk, self._chunk = self._chunk, None
        if chunk is None:
            raise StopAsyncIteration
        return chunk
