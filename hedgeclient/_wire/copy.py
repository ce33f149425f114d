"""Each attempt's request: the copy of a request that one attempt sends to one replica.

:func:`attempt_request` builds it from the caller's request and the replica's origin
(``hedgeclient._replicas.services``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import final

import httpx

from hedgeclient._replicas.services import Service
from hedgeclient._wire.request_fast import CONTENT_SLOT, set_header
from hedgeclient._wire.urls import replica_url

__all__ = ["attempt_request"]


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
    url = request.url
    own = extensions is not None
    if extensions is None:
        extensions = request.extensions
    if service is not None:
        target = service.replica_urls.get(replica)
        if target is None:  # it left the set while the request was in flight
            target = service.url(replica)
        url = replica_url(url, target)
        sni = service.sni.get(replica)
        if sni is None:
            sni = target.scheme == "https" and target.host != service.logical_host
        if sni:
            if not own:
                extensions = {**extensions}
            extensions["sni_hostname"] = service.logical_host
    stream = ReplayBody(body) if body is not None else request.stream
    attempt = httpx.Request(
        request.method, url, headers=request.headers, stream=stream, extensions=extensions
    )
    if body is not None:
        if CONTENT_SLOT:  # what read() would store, without iterating the body again
            attempt._content = body
        else:
            attempt.read()
            attempt.stream = stream  # read() swaps in an httpx.ByteStream, a generator
    # The new request holds its own copy of the headers: set ours on that copy.
    if attempt_header is not None:
        set_header(attempt.headers, attempt_header, str(number))
    if service is not None and not preserve_host:
        attempt.headers["Host"] = url.netloc.decode("ascii")
    return attempt


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
